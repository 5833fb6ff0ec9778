"""The faults checker on synthetic histories: requested / applied / failed per kind, the verdict
rule (a kind that never took effect makes the run unknown), leadership per fault window from a
``leadership.jsonl``, and ``chaos check`` carrying it for a stored run."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from chaos.history.analysis import fault_nodes
from chaos.history.checkers.faults import FaultsChecker
from chaos.history.checkers.registry import check_run
from chaos.history.leadership import LEADERSHIP_FILE, read_leadership, summarize
from chaos.history.store import RunDir

S = 1_000_000_000


def nem(f: str, t: float, value: Any = None, error: str | None = None) -> dict[str, Any]:
    op: dict[str, Any] = {"type": "info", "process": "nemesis", "f": f, "value": value, "time": int(t * S)}
    if error:
        op["error"] = error
    return op


def client(p: int, t: float, node: str, typ: str = "ok") -> list[dict[str, Any]]:
    inv = {
        "type": "invoke",
        "process": p,
        "f": "write",
        "value": 1,
        "key": 0,
        "time": int(t * S),
        "node": node,
    }
    done = {**inv, "type": typ, "time": int(t * S) + 1000}
    return [inv, done]


def write_run(tmp: Path, ops: list[dict[str, Any]], samples: list[dict[str, Any]] | None = None) -> RunDir:
    run = RunDir.create(tmp / "store", "register-kill")
    run.write_test({"workload": "register", "checkers": ["stats"]})
    lines = [json.dumps({**op, "index": i}) for i, op in enumerate(ops)]
    run.history_path.write_text("\n".join(lines) + "\n")
    if samples is not None:
        (run.path / LEADERSHIP_FILE).write_text("".join(json.dumps(s) + "\n" for s in samples))
    return run


def sample(t: float, leader: str | None, term: int) -> dict[str, Any]:
    return {
        "time": int(t * S),
        "nodes": {},
        "primaries": [leader] if leader else [],
        "leader": leader,
        "term": term,
    }


def history() -> list[dict[str, Any]]:
    """kill: two starts, one took effect (n3 killed), one found no server; restart: one start, its
    start failed (a DB lacking what the nemesis needs); partition: one old-style completion."""
    return [
        *client(0, 0.5, "n1"),
        nem("start-kill", 1.0, "leader"),
        nem("start-kill", 1.1, {"targets": "leader", "nodes": ["n3"], "killed": ["n3"], "applied": True}),
        *client(1, 1.5, "n3", "info"),
        *client(2, 1.6, "n1"),
        nem("stop-kill", 3.0),
        nem("stop-kill", 3.1, {"nodes": ["n3"], "applied": True}),
        nem("start-restart", 4.0, "one"),
        nem(
            "start-restart",
            4.1,
            {"nodes": ["n2"], "applied": False, "why": "n2: start failed: no start script"},
        ),
        nem("stop-restart", 4.5),
        nem("stop-restart", 4.6, {"applied": True}),
        nem("start-kill", 5.0, "one"),
        nem(
            "start-kill",
            5.1,
            {
                "nodes": ["n4"],
                "killed": [],
                "applied": False,
                "why": "n4: no server running (nothing to kill)",
            },
        ),
        nem("stop-kill", 6.0),
        nem("stop-kill", 6.1, {"nodes": ["n4"], "applied": True}),
        nem("start-partition", 7.0, "majorities-ring"),
        nem("start-partition", 7.1, {"shape": "majorities-ring", "grudge": {"n1": ["n2"], "n2": ["n1"]}}),
        nem("stop-partition", 8.0),
        nem("stop-partition", 8.1, None, error="NemesisError: iptables failed on n2"),
        *client(3, 9.0, "n2"),
    ]


def test_counts_per_kind_and_unknown_when_a_kind_never_applied(tmp_path: Path) -> None:
    run = write_run(tmp_path, history())
    r = FaultsChecker().check({}, run.history_path, {})
    assert r["kinds"]["kill"] == {
        "requested": 2,
        "applied": 1,
        "failed": 1,
        "errors": ["n4: no server running (nothing to kill)"],
        "stop_failed": 0,
        "name": "kill",  # the op kind: this test.json records no typed names (issue 35 item 10)
    }
    assert r["kinds"]["restart"]["requested"] == 1 and r["kinds"]["restart"]["applied"] == 0
    assert r["kinds"]["partition"]["applied"] == 1 and r["kinds"]["partition"]["stop_failed"] == 1
    assert (r["requested"], r["applied"], r["failed"]) == (4, 2, 2)
    # every requested restart failed: the run did not test what it asked for
    assert r["valid"] == "unknown"
    assert "every requested restart fault failed" in r["cause"] and "no start script" in r["cause"]
    assert "kill" not in r["cause"]
    assert r["summary"].startswith("2 of 4 requested faults took effect")


def test_valid_when_every_kind_applied_at_least_once(tmp_path: Path) -> None:
    ops = [op for op in history() if "restart" not in op["f"]]
    r = FaultsChecker().check({}, write_run(tmp_path, ops).history_path, {})
    assert r["valid"] is True and "cause" not in r


def test_no_faults_is_valid(tmp_path: Path) -> None:
    r = FaultsChecker().check({}, write_run(tmp_path, client(0, 1, "n1")).history_path, {})
    assert r["valid"] is True and r["kinds"] == {} and r["summary"] == "no faults were requested"


def test_windows_count_ops_on_faulted_nodes_and_leader_changes(tmp_path: Path) -> None:
    samples = [
        sample(0.2, "n3", 1),
        sample(0.9, "n3", 1),
        sample(1.3, None, 1),  # n3 killed at 1.1: no leader for a while
        sample(1.8, "n1", 2),
        sample(3.5, "n1", 2),
        sample(9.5, "n1", 2),
    ]
    r = FaultsChecker().check({}, write_run(tmp_path, history(), samples).history_path, {})
    kill = r["windows"][0]
    assert (kill["kind"], kill["start_s"], kill["end_s"], kill["nodes"]) == ("kill", 1.1, 3.1, ["n3"])
    assert kill["applied"] is True
    assert kill["ops"] == {"ok": 1, "fail": 0, "info": 1}
    assert kill["ops_on_faulted"] == {"ok": 0, "fail": 0, "info": 1}
    assert (kill["leader_before"], kill["term_before"]) == ("n3", 1)
    assert kill["leaders"] == ["n1"] and kill["leader_changes"] == 1
    assert kill["terms"] == [1, 2] and kill["new_terms"] == 1
    assert kill["leaderless_s"] == 0.5
    later = [w for w in r["windows"] if w["kind"] == "partition"][0]
    assert later["leader_changes"] == 0 and later["leaders"] == [] and later["leader_before"] == "n1"
    assert r["bite"]["windows_with_leader_change"] == 1 and r["bite"]["changed_leadership"] is True
    assert r["leadership"]["leaders"] == ["n3", "n1"] and r["leadership"]["leader_changes"] == 1
    assert "elections in 1 of 4 fault windows, another leader in 1 (1 leader changes" in r["summary"]


def test_summary_says_plainly_when_faults_never_changed_leadership(tmp_path: Path) -> None:
    samples = [sample(t, "n2", 3) for t in (0.1, 2.0, 5.0, 9.9)]
    r = FaultsChecker().check({}, write_run(tmp_path, history(), samples).history_path, {})
    assert r["bite"]["changed_leadership"] is False
    assert r["summary"].endswith("; no leader change in the run (leader n2, term 3)")
    assert r["valid"] == "unknown"  # leadership never decides; the restart kind does


def test_check_run_carries_faults_for_a_stored_run(tmp_path: Path) -> None:
    run = write_run(tmp_path, history(), [sample(0.1, "n1", 1)])
    r = check_run(run)
    assert set(r["checkers"]) == {"stats", "faults", "client-errors"}
    assert r["valid"] == "unknown" and r["checkers"]["faults"]["kinds"]["restart"]["failed"] == 1
    assert r["checkers"]["faults"]["leadership"]["samples"] == 1
    assert json.loads(run.results_path.read_text())["checkers"]["faults"] == r["checkers"]["faults"]


def test_fault_nodes_from_completion_values() -> None:
    assert fault_nodes({"nodes": ["n2", "n1"], "killed": ["n1"]}) == ["n1"]
    assert fault_nodes({"grudge": {"n1": ["n2"], "n2": [], "n3": ["n2"]}}) == ["n1", "n3"]
    assert fault_nodes({"from": "n1", "to": "n4"}) == ["n1", "n4"]
    assert fault_nodes({"nodes": {"n5": {"running": True}}}) == ["n5"]
    assert fault_nodes(None) == []
    # the simulator records a kill's and a pause's members as a plain list
    assert fault_nodes(["n3", "n1"]) == ["n1", "n3"]
    assert fault_nodes([["n1", "n2"], ["n3"]]) == []  # a partition's groups name no faulted node


def _windows(*steps: tuple[str, float, Any]) -> list[tuple[str, tuple[str, ...], float, float | None]]:
    from chaos.history.analysis import fault_windows
    from chaos.history.op import Op

    ops = [Op.from_dict(nem(f, t, v)) for f, t, v in steps for _ in range(2)]  # invocation, completion
    return [(w.kind, w.nodes, w.start / S, None if w.end is None else w.end / S) for w in fault_windows(ops)]


def test_overlapping_faults_of_one_kind_on_other_nodes_have_windows_of_their_own() -> None:
    """The simulator kills the leader while another kill is in force, and stops each on its own:
    two kill windows, each closed by the stop that names its nodes."""
    assert _windows(
        ("start-kill", 1, ["n1"]),
        ("start-kill", 2, ["n4"]),
        ("stop-kill", 3, ["n1"]),
        ("stop-kill", 5, {"nodes": ["n4"], "refused": {}}),
    ) == [("kill", ("n1",), 1, 3), ("kill", ("n4",), 2, 5)]


def test_a_start_on_nodes_in_force_and_a_stop_naming_none_keep_the_one_window_rule() -> None:
    """A start whose nodes are all under the kind already changes nothing; a stop that names no
    node, or none of an open window's, ends every window of the kind (a heal ends every
    partition); a stop with nothing open closes nothing."""
    assert _windows(
        ("start-kill", 1, ["n1", "n2"]),
        ("start-kill", 2, ["n2"]),
        ("start-partition", 2, {"grudge": {"n1": ["n3"], "n3": ["n1"]}}),
        ("start-partition", 3, {"grudge": {"n2": ["n3"], "n3": ["n2"]}}),
        ("stop-partition", 4, None),
        ("stop-kill", 6, ["n5"]),
        ("stop-kill", 7, ["n1"]),
    ) == [
        ("kill", ("n1", "n2"), 1, 6),
        ("partition", ("n1", "n3"), 2, 4),
        ("partition", ("n2", "n3"), 3, 4),
    ]


def test_leadership_samples_and_torn_last_line(tmp_path: Path) -> None:
    nodes = {"n1": {"leader": "n2", "term": 4}, "n2": {"leader": "n2", "term": 4}, "n3": {"error": "timeout"}}
    assert summarize(nodes) == {"primaries": ["n2"], "leader": "n2", "term": 4}
    split = {"n1": {"leader": "n1", "term": 3}, "n2": {"leader": "n2", "term": 5}}
    assert summarize(split)["leader"] == "n2"
    p = tmp_path / LEADERSHIP_FILE
    p.write_text(json.dumps(sample(1, "n1", 1)) + "\n" + '{"time": 2')
    assert [s["leader"] for s in read_leadership(p)] == ["n1"]
    p.write_text('{"time": 2\n' + json.dumps(sample(1, "n1", 1)) + "\n")
    with pytest.raises(ValueError, match=f"{p}:1: bad leadership sample"):
        read_leadership(p)


def test_report_and_summary_show_faults_per_kind_and_window(tmp_path: Path) -> None:
    from rich.console import Console

    from chaos.history.report.html import write_report
    from chaos.history.report.summary import summary_table

    run = write_run(tmp_path, history(), [sample(0.2, "n3", 1), sample(1.8, "n1", 2)])
    results = check_run(run)
    html = write_report(run.path).read_text()
    assert 'id="fault-kinds"' in html and 'id="fault-windows"' in html
    assert "n2: start failed: no start script" in html and "n3 -&gt; n1" in html
    console = Console(width=300, record=True)
    console.print(summary_table(results, run.history_path))
    text = console.export_text()
    assert "2 of 4 requested nemesis faults took effect, 2 did not" in text
    assert "fault windows (leadership observed)" in text and "n3 -> n1" in text


def split_sample(t: float, claims: dict[str, int]) -> dict[str, Any]:
    """A sample in which every node of ``claims`` calls itself leader in its term."""
    return {
        "time": int(t * S),
        "nodes": {n: {"leader": n, "term": term} for n, term in claims.items()},
        "primaries": sorted(claims),
        "leader": max(claims, key=lambda n: (claims[n], n)),
        "term": max(claims.values()),
    }


def test_split_brain_is_reported_with_its_length_and_nodes(tmp_path: Path) -> None:
    """Issue 25 item 4: two nodes calling themselves leader in the same term for 12 s (Raft's
    Election Safety broken) is a split brain in the result, the summary, the window table and the
    report, never one leader."""
    from rich.console import Console

    from chaos.history.report.html import write_report
    from chaos.history.report.summary import summary_table

    samples = [
        sample(0.2, "n1", 2),
        split_sample(1.5, {"n1": 2, "n3": 2}),
        split_sample(7.0, {"n1": 2, "n3": 2}),
        sample(13.5, "n3", 2),
    ]
    run = write_run(tmp_path, history(), samples)
    r = check_run(run)["checkers"]["faults"]
    assert r["leadership"]["split_brain"] == [
        {"start_s": 1.5, "end_s": 13.5, "duration_s": 12.0, "nodes": ["n1", "n3"], "terms": [2]}
    ]
    assert r["leadership"]["stale_leaders"] == []
    assert r["leadership"]["leaders"] == ["n1", "n1+n3", "n3"]
    assert "split brain: n1, n3 leaders at once in one term for 12.0 s from 1.5 s (term 2)" in r["summary"]
    kill = r["windows"][0]
    assert kill["leaders"] == ["n1+n3"]
    console = Console(width=300, record=True)
    console.print(summary_table(check_run(run), run.history_path))
    text = console.export_text()
    assert "n1 -> n1+n3" in text and "split brain: n1, n3" in text
    html = write_report(run.path).read_text()
    assert 'id="split-brain"' in html and "<td>12.0</td><td>n1, n3</td>" in html


def test_two_leaders_in_different_terms_are_a_stale_leader_not_a_split_brain(tmp_path: Path) -> None:
    """Issue 35 item 4: a deposed leader (term 1) that has not heard of term 2 yet, beside the new
    leader, is legal in Raft: "a stale leader for 11.8 s (terms 1, 2)", never "split brain"."""
    from rich.console import Console

    from chaos.history.report.html import write_report
    from chaos.history.report.summary import summary_table

    samples = [
        sample(0.2, "n1", 1),
        split_sample(1.5, {"n1": 1, "n3": 2}),
        split_sample(7.0, {"n1": 1, "n3": 2}),
        sample(13.3, "n3", 2),
    ]
    run = write_run(tmp_path, history(), samples)
    r = check_run(run)["checkers"]["faults"]
    assert r["leadership"]["split_brain"] == []
    assert r["leadership"]["stale_leaders"] == [
        {"start_s": 1.5, "end_s": 13.3, "duration_s": 11.8, "nodes": ["n1", "n3"], "terms": [1, 2]}
    ]
    assert "a stale leader for 11.8 s from 1.5 s (n1, n3; terms 1, 2)" in r["summary"]
    assert "split brain" not in r["summary"]
    console = Console(width=300, record=True)
    console.print(summary_table(check_run(run), run.history_path))
    assert "split brain" not in console.export_text()
    assert 'id="split-brain"' not in write_report(run.path).read_text()


def test_split_brain_without_terms_and_without_faults(tmp_path: Path) -> None:
    """A DB without terms: no empty "terms )"; no faults requested: the split brain still shows."""
    samples = [
        {"time": S, "nodes": {}, "primaries": ["a", "b"], "leader": "a", "term": None},
        {"time": 3 * S, "nodes": {}, "primaries": ["b"], "leader": "b", "term": None},
    ]
    client_only = client(0, 0.5, "a") + client(1, 2.0, "b")
    r = FaultsChecker().check({}, write_run(tmp_path, client_only, samples).history_path, {})
    assert r["summary"].startswith(
        "no faults were requested; split brain: a, b leaders at once with no term to tell them apart for 2.0 s"
    )
    assert "terms" not in r["summary"] and "term )" not in r["summary"]


def test_leader_change_just_after_a_window_is_attributed_to_it(tmp_path: Path) -> None:
    """A leader change 0.9 s after the kill window ends (within the recovery bound) is the kill's:
    the summary does not say the faults never changed leadership."""
    samples = [sample(0.2, "n3", 1), sample(2.9, "n3", 1), sample(4.0, "n1", 2), sample(9.9, "n1", 2)]
    test = {"opts": {"recovery_time": 2.0}}
    r = FaultsChecker().check(test, write_run(tmp_path, history(), samples).history_path, {})
    kill = r["windows"][0]
    assert (kill["end_s"], kill["leader_changes"], kill["leader_changes_after"]) == (3.1, 0, 1)
    assert kill["changed_after_s"] == 0.9
    assert r["bite"]["changed_leadership"] is True and r["attribution_s"] == 2.0
    assert "never changed" not in r["summary"] and "no leader change" not in r["summary"]
    assert "a change within 2 s after a fault counts for it" in r["summary"]
    from chaos.history.report.faults import window_rows

    assert window_rows({"checkers": {"faults": r}})[0]["leader_changes"] == "0 (+1 within 0.9 s after)"
    # beyond the bound it is not the fault's, and the run still had a leader change
    r = FaultsChecker().check(
        {"opts": {"recovery_time": 0.5}}, write_run(tmp_path / "b", history(), samples).history_path, {}
    )
    assert r["bite"]["changed_leadership"] is False
    assert (
        "1 leader change in the run (n3 -> n1), none during a fault or within 0.5 s after one" in r["summary"]
    )


def test_each_leader_change_counts_for_one_fault_window(tmp_path: Path) -> None:
    """Issue 35 item 4: three rounds of a partition and a kill in force together, one leader change
    (and one new term) in each: 3 changes are "another leader in 3" of 6 windows, not in 6. The
    change counts for the fault that began last; the windows' changes add up to the run's."""
    ops: list[dict[str, Any]] = []
    samples = [sample(0.1, "n1", 1)]
    leaders = ["n1", "n2", "n3", "n4"]
    for i in range(3):
        t = 10.0 * i + 1
        ops += [
            nem("start-partition", t, "majorities-ring"),
            nem("start-partition", t + 0.1, {"grudge": {"n1": ["n2"], "n2": ["n1"]}, "applied": True}),
            nem("start-kill", t + 0.2, "leader"),
            nem("start-kill", t + 0.3, {"nodes": [leaders[i]], "killed": [leaders[i]], "applied": True}),
            *client(i, t + 0.5, "n5"),
            nem("stop-kill", t + 2.0),
            nem("stop-kill", t + 2.1, {"nodes": [leaders[i]], "applied": True}),
            nem("stop-partition", t + 2.2),
            nem("stop-partition", t + 2.3, {"applied": True}),
        ]
        samples += [sample(t + 0.6, None, i + 1), sample(t + 1.0, leaders[i + 1], i + 2)]
    r = FaultsChecker().check({}, write_run(tmp_path, ops, samples).history_path, {})
    assert r["leadership"]["leader_changes"] == 3
    assert [(w["kind"], w["leader_changes"], w["new_terms"]) for w in r["windows"]] == [
        ("partition", 0, 0),
        ("kill", 1, 1),
    ] * 3
    assert sum(w["leader_changes"] + w["leader_changes_after"] for w in r["windows"]) == 3
    assert r["bite"]["windows_with_leader_change"] == 3 and r["bite"]["windows_with_election"] == 3
    assert "elections in 3 of 6 fault windows, another leader in 3 (3 leader changes" in r["summary"]
    # a change after both ended, within the bound, counts once too: for the one that ended last
    late = [sample(0.1, "n1", 1), sample(4.0, "n2", 2)]
    r = FaultsChecker().check({}, write_run(tmp_path / "late", ops, late).history_path, {})
    assert [(w["kind"], w["leader_changes_after"]) for w in r["windows"][:2]] == [
        ("partition", 1),
        ("kill", 0),
    ]
    assert r["windows"][0]["changed_after_s"] == 0.7 and r["bite"]["windows_with_election"] == 1
