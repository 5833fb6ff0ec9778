"""Performance checker on synthetic histories: quantiles, fault windows, throughput, availability."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from test_history_util import Builder

from chaos.history.checkers.perf import PerfChecker, describe_nemesis, quantiles

MS = 1_000_000


def _steady(b: Builder, start: float, end: float, *, skip: set[int] | None = None) -> None:
    """Appends every 100 ms, each 10 ms long, alternating between processes 0 and 1."""
    t = start
    k = 0
    while t < end - 1e-9:
        p = k % 2
        if not skip or p not in skip:
            b.at(t)
            b.op("invoke", p, "append", int(t * 1000), dt=0)
            b.op("ok", p, "append", int(t * 1000), dt=10 * MS)
        k += 1
        t = round(t + 0.1, 6)


def _kill_history() -> Builder:
    b = Builder()
    _steady(b, 0.0, 31.2)  # last ok: 31.1 + 10 ms
    b.at(31.15)
    b.op("invoke", 0, "append", -1, dt=0)
    b.at(31.17)
    b.op("info", "nemesis", "start-kill", "primaries", dt=0)
    b.op(
        "info", "nemesis", "start-kill", {"nodes": ["n1"], "leader": True, "mechanism": "SIGKILL"}, dt=30 * MS
    )
    b.at(31.3)
    b.op("invoke", 1, "append", -2, dt=0)
    b.at(31.94)
    b.op("ok", 1, "append", -2, dt=0)
    b.at(32.15)
    b.op("info", 0, "append", -1, dt=0, error="timeout")
    _steady(b, 32.2, 40.0, skip={0})
    b.at(40.0)
    b.nemesis("stop-kill", {"nodes": ["n1"]}, dt=20 * MS)
    _steady(b, 40.1, 45.0)
    return b


def _perf(tmp_path: Path, b: Builder, **opts: Any) -> dict[str, Any]:
    return PerfChecker().check({}, b.write(tmp_path / "history.jsonl"), opts)


def test_quantiles_nearest_rank_in_ms() -> None:
    q = quantiles([i * MS for i in range(1, 101)])
    assert q == {"count": 100, "p50": 50.0, "p95": 95.0, "p99": 99.0, "max": 100.0, "mean": 50.5}
    assert quantiles([]) == {"count": 0}


def test_availability_window_is_aligned_with_the_kill(tmp_path: Path) -> None:
    r = _perf(tmp_path, _kill_history())
    assert r["valid"] is True
    av = r["availability"]
    w = av["windows"][0]
    assert w["start_s"] == 31.11 and w["end_s"] == 31.94 and w["duration_s"] == 0.83
    assert w["nemesis"]["f"] == "start-kill" and w["nemesis"]["time_s"] == 31.2
    assert w["summary"] == "leader n1 killed at 31.2 s, first ok append 0.74 s later"
    assert av["longest_s"] == 0.83 and av["summary"] == w["summary"]
    assert w["faults_active"] == ["kill"]
    # the rest: the 0.37 s until steady traffic resumed, 0.2 s gaps while process 0 was retired
    assert all(x["duration_s"] <= 0.37 for x in av["windows"][1:])
    assert av["windows"][1]["summary"] == (
        "no ok op for 0.37 s from 31.9 s (first ok append at 32.3 s), after leader n1 killed at 31.2 s"
    )


def test_latency_per_f_and_per_fault_window(tmp_path: Path) -> None:
    r = _perf(tmp_path, _kill_history())
    lat = r["latency"]
    assert lat["by_f"]["append"]["info"] == {
        "count": 1,
        "p50": 1000.0,
        "p95": 1000.0,
        "p99": 1000.0,
        "max": 1000.0,
        "mean": 1000.0,
    }
    assert lat["by_f"]["append"]["ok"]["max"] == 640.0 and lat["by_f"]["append"]["ok"]["p50"] == 10.0
    (kill,) = lat["faults"]
    assert (kill["kind"], kill["start_s"], kill["end_s"]) == ("kill", 31.2, 40.021)
    assert kill["latency"]["append"]["ok"]["max"] == 640.0
    # ops invoked in the kill window: the slow one plus one every 200 ms from 32.2 s to 39.8 s
    assert kill["latency"]["append"]["ok"]["count"] == 1 + 39
    outside = lat["outside_faults"]["append"]
    assert outside["ok"]["max"] == 10.0 and outside["info"]["count"] == 1  # invoked before the kill completed


def test_throughput_one_second_buckets(tmp_path: Path) -> None:
    r = _perf(tmp_path, _kill_history())
    series = {(s["f"], s["type"]): s for s in r["throughput"]}
    ok = series[("append", "ok")]["counts"]
    assert ok[0] == 10 and ok[10] == 10  # steady: 10 ok appends a second
    assert ok[31] == 3  # 31.01 and 31.11, then the outage, then 31.94
    assert ok[33] == 5  # process 0 retired: every 200 ms
    assert series[("append", "info")]["counts"][32] == 1
    assert r["nemesis_count"] == 2
    assert r["nemesis"][0]["value"] == {
        "spec": "primaries",
        "nodes": ["n1"],
        "leader": True,
        "mechanism": "SIGKILL",
    }


def test_unavailable_until_the_end(tmp_path: Path) -> None:
    b = Builder()
    _steady(b, 0.0, 2.0)
    b.at(2.5)
    b.nemesis("start-partition", {"grudge": {"n1": ["n2", "n3"], "n2": ["n1"], "n3": ["n1"]}, "spec": "one"})
    b.at(3.0)
    b.op("invoke", 0, "append", 1, dt=0)
    b.at(6.0)
    b.op("info", 0, "append", 1, dt=0)
    r = _perf(tmp_path, b)
    w = r["availability"]["windows"][0]
    assert w["end_s"] is None and w["start_s"] == 1.91
    assert w["summary"] == "n1 cut off by a partition at 2.5 s, no ok op until the end (3.50 s later)"


def test_no_fault_before_an_outage_is_said() -> None:
    assert describe_nemesis("stop-partition", None) == "partition healed"
    assert describe_nemesis("start-pause", {"nodes": ["n2", "n3"]}) == "n2, n3 paused"
    assert describe_nemesis("start-leader-transfer", {"nodes": ["n4"]}) == "n4 leadership transferred"
    assert describe_nemesis("start-weird", {"nodes": ["n1"]}) == "start-weird n1"
    assert describe_nemesis("stop-kill", None) == "kill fault stopped (restarted)"
    ring = {
        "n1": ["n2", "n4"],
        "n2": ["n1", "n5"],
        "n3": ["n4", "n5"],
        "n4": ["n1", "n3"],
        "n5": ["n2", "n3"],
    }
    assert describe_nemesis("start-partition", {"spec": "majorities-ring", "grudge": ring}) == (
        "network partitioned (majorities-ring)"
    )
    assert describe_nemesis("start-partition", "majority") == "network partitioned (majority)"


def test_outage_without_nemesis(tmp_path: Path) -> None:
    b = Builder()
    _steady(b, 0.0, 1.0)
    b.at(1.0)
    b.op("invoke", 0, "append", 5, dt=0)
    b.at(3.0)
    b.op("ok", 0, "append", 5, dt=0)
    r = _perf(tmp_path, b, top_windows=1)
    (w,) = r["availability"]["windows"]
    assert w["summary"] == "no ok op for 2.09 s from 0.9 s (first ok append at 3.0 s), no fault before it"


def test_perf_windows_and_availability_are_the_analysis_core(tmp_path: Path) -> None:
    """The perf checker reports the core's fault windows and availability, not rules of its own."""
    from chaos.history.analysis import availability, fault_windows
    from chaos.history.store import read_history

    b = _kill_history()
    b.at(45.5)
    b.nemesis("start-kill", {"nodes": ["n2"]})  # opens a second kill window, never stopped
    b.nemesis("start-kill", {"nodes": ["n2"]})  # n2 is down already: in force, no third window
    b.nemesis("start-kill", {"nodes": ["n3"]})  # another node: a kill of its own, a third window
    b.nemesis("stop-pause")  # nothing open: no window
    path = b.write(tmp_path / "history.jsonl")
    r = PerfChecker().check({}, path, {})
    core = fault_windows(read_history(path))
    assert [(w.kind, w.nodes, w.end is None) for w in core] == [
        ("kill", ("n1",), False),
        ("kill", ("n2",), True),
        ("kill", ("n3",), True),
    ]
    assert [(f["kind"], f["start_s"], f["end_s"]) for f in r["latency"]["faults"]] == [
        (w.kind, round(w.start / 1e9, 3), None if w.end is None else round(w.end / 1e9, 3)) for w in core
    ]
    gaps = availability(read_history(path))
    assert [(w["start_s"], w["duration_s"]) for w in r["availability"]["windows"]] == [
        (round(g.start / 1e9, 3), round(g.duration / 1e9, 3)) for g in gaps
    ]


def test_a_runs_recorded_verbs_word_its_faults_and_unknown_kinds_stay_neutral(tmp_path: Path) -> None:
    """test.json's ``nemesis_styles`` (the fault modules' own phrases) words the availability
    sentence; a kind it lacks is described neutrally; a run without it keeps today's phrases."""
    from chaos.history.checkers.perf import LEGACY_VERBS, nemesis_verbs

    styles = {"stall": {"colour": "#123456", "verbs": {"start": "{nodes} stalled", "stop": "stall over"}}}
    verbs = nemesis_verbs({"nemesis_styles": styles})
    assert verbs == {"stall": {"start": "{nodes} stalled", "stop": "stall over"}}
    assert describe_nemesis("start-stall", {"nodes": ["n2"]}, verbs) == "n2 stalled"
    assert describe_nemesis("stop-stall", {"nodes": ["n2"]}, verbs) == "stall over"
    assert describe_nemesis("start-stall", None, verbs) == "stall fault started (stalled)"
    # kill is not among this run's styles: neutral, not the old table's phrase
    assert describe_nemesis("start-kill", {"nodes": ["n1"]}, verbs) == "start-kill n1"
    assert nemesis_verbs({"name": "old run"}) is LEGACY_VERBS
    # an optional [{nodes} ] group is dropped when no node is known
    assert describe_nemesis("start-clock", {"mode": "bump"}) == "clock skewed"
    assert describe_nemesis("start-clock", {"nodes": ["n3"]}) == "n3 clock skewed"

    b = _kill_history()
    test = {
        "nemesis_styles": {
            "kill": {"colour": None, "verbs": {"start": "{nodes} shot", "stop": "{nodes} revived"}}
        }
    }
    r = PerfChecker().check(test, b.write(tmp_path / "history.jsonl"), {})
    assert r["availability"]["summary"] == "leader n1 shot at 31.2 s, first ok append 0.74 s later"
