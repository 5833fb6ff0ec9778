"""Run-directory builders for the report tests, plus pure-logic tests of the report's data preparation.

The run directories follow docs/design.md exactly (history.jsonl, test.json, results.json with the
counterexample shape, nodes/<node>/ logs); they stand in for runs whose checkers other parts write.
"""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import pytest

from chaos.history.op import Op
from chaos.history.report import figures, summary
from chaos.history.report import html as rep
from chaos.history.report import run as report_run

MS = 1_000_000  # ns
XSS = '<img src=x onerror="window.__pwned=1">'
XSS2 = "</script><script>window.__pwned=2</script>"


class HistoryWriter:
    """Appends ops with increasing index, as the runner's writer does."""

    def __init__(self) -> None:
        self.lines: list[dict[str, Any]] = []

    def op(self, type: str, process: Any, f: str, value: Any, time: int, **extra: Any) -> dict[str, Any]:
        d = {"index": len(self.lines), "type": type, "process": process, "f": f, "value": value, "time": time}
        d.update({k: v for k, v in extra.items() if v is not None})
        self.lines.append(d)
        return d

    @property
    def ops(self) -> list[Op]:
        """The lines as ops, as the report reads them."""
        return [Op.from_dict(d) for d in self.lines]

    def write(self, path: Path) -> None:
        with (path / "history.jsonl").open("w") as fh:
            for d in self.lines:
                fh.write(json.dumps(d, separators=(",", ":")) + "\n")


def _run_dir(root: Path, name: str) -> Path:
    d = root / name / "20260101T120000.000"
    (d / "nodes").mkdir(parents=True)
    for n in ("n1", "n2", "n3"):
        (d / "nodes" / n).mkdir()
        (d / "nodes" / n / "dledger.log").write_text(f"{n} started\nbecame follower term 1\n")
    return d


def _test_json(d: Path, name: str, workload: str, nemesis: list[str], **opts: Any) -> None:
    t = {
        "name": name,
        "workload": workload,
        "nemesis": nemesis,
        "nodes": ["n1", "n2", "n3"],
        "versions": {"dledger": "0.1.0", "chaos": "0.1.0"},
        "seed": 42,
        "start_time": "2026-01-01T12:00:00.000Z",
        "time_limit": 10,
        "concurrency": 5,
    }
    t.update(opts)
    (d / "test.json").write_text(json.dumps(t))


def _nemesis(h: HistoryWriter, kind: str, start: int, stop: int, value: Any) -> None:
    h.op("info", "nemesis", f"start-{kind}", value, start)
    h.op("info", "nemesis", f"start-{kind}", {"result": "ok", **value}, start + 5 * MS)
    h.op("info", "nemesis", f"stop-{kind}", None, stop)
    h.op("info", "nemesis", f"stop-{kind}", "healed", stop + 5 * MS)


def register_history(
    rng: random.Random,
    n_ops: int,
    procs: int,
    duration_ns: int,
    keys: int,
    outage: tuple[int, int] | None = None,
) -> HistoryWriter:
    """A register history with interleaved processes; every op completes ok/fail/info by chance.

    During ``outage`` (ns) every op fails or times out, so the run has an unavailability window.
    """
    h = HistoryWriter()
    events: list[tuple[int, int, dict[str, Any]]] = []
    per = n_ops // procs
    step = duration_ns // max(per, 1)
    for p in range(procs):
        t = rng.randrange(step)
        for _ in range(per):
            f = rng.choice(("read", "write", "cas"))
            key = rng.randrange(keys)
            val: Any = (
                None
                if f == "read"
                else rng.randrange(5)
                if f == "write"
                else [rng.randrange(5), rng.randrange(5)]
            )
            lat = int(rng.expovariate(1 / (2 * MS))) + 200_000
            if 0.4 * duration_ns < t < 0.55 * duration_ns:  # a slow stretch
                lat *= 20
            r = rng.random()
            typ = "ok" if r < 0.9 else "fail" if r < 0.97 else "info"
            if outage and outage[0] <= t + lat <= outage[1]:
                typ = "fail" if r < 0.8 else "info"
            out = rng.randrange(5) if f == "read" and typ == "ok" else val
            events.append(
                (
                    t,
                    0,
                    {
                        "type": "invoke",
                        "process": p,
                        "f": f,
                        "value": val,
                        "key": key,
                        "node": f"n{p % 3 + 1}",
                    },
                )
            )
            comp = {"type": typ, "process": p, "f": f, "value": out, "key": key, "node": f"n{p % 3 + 1}"}
            if typ != "ok":
                comp["error"] = "timeout" if typ == "info" else "NOT_LEADER"
            events.append((t + lat, 1, comp))
            t += lat + 1 + rng.randrange(2 * max(step - lat, 1))
    events.sort(key=lambda e: (e[0], e[1]))
    for t, _k, d in events:
        h.op(d.pop("type"), d.pop("process"), d.pop("f"), d.pop("value"), t, **d)
    return h


def make_valid_register_run(root: Path) -> Path:
    d = _run_dir(root, "register-valid")
    rng = random.Random(1)
    h = register_history(rng, 600, 5, 10_000 * MS, 3, outage=(3_300 * MS, 4_800 * MS))
    _nemesis(
        h, "partition", 3_000 * MS, 5_000 * MS, {"grudge": {"n1": ["n2", "n3"], "n2": ["n1"], "n3": ["n1"]}}
    )
    h.lines.sort(key=lambda x: x["time"])
    for n, x in enumerate(h.lines):
        x["index"] = n
    h.write(d)
    _test_json(d, "register-valid", "register", ["partition"])
    by_f: dict[str, dict[str, int]] = {}
    for x in h.lines:
        if x["process"] != "nemesis" and x["type"] != "invoke":
            by_f.setdefault(x["f"], {"ok": 0, "fail": 0, "info": 0})[x["type"]] += 1
    results = {
        "valid": True,
        "checkers": {
            "linear": {
                "valid": True,
                "model": "cas-register",
                "keys": {str(k): {"valid": True} for k in range(3)},
                "failures": [],
                "unknown": [],
            },
            "perf": {"valid": True, "latency": {}, "throughput": [], "availability": {}},
            "stats": {"valid": True, "by_f": by_f},
        },
    }
    (d / "results.json").write_text(json.dumps(results))
    return d


def register_counterexample(value_text: Any = 1) -> dict[str, Any]:
    """Stale read: write 1, then write 2 completes, then a read returns 1 (docs/design.md shape)."""
    return {
        "ops": [
            {
                "id": 0,
                "index": 3,
                "process": 0,
                "f": "write",
                "value": value_text,
                "output": None,
                "call": 10 * MS,
                "return": 20 * MS,
                "type": "ok",
            },
            {
                "id": 1,
                "index": 7,
                "process": 1,
                "f": "write",
                "value": 2,
                "output": None,
                "call": 25 * MS,
                "return": 40 * MS,
                "type": "ok",
            },
            {
                "id": 2,
                "index": 9,
                "process": 3,
                "f": "cas",
                "value": [5, 6],
                "output": None,
                "call": 30 * MS,
                "return": None,
                "type": "info",
            },
            {
                "id": 3,
                "index": 12,
                "process": 2,
                "f": "read",
                "value": None,
                "output": value_text,
                "call": 50 * MS,
                "return": 60 * MS,
                "type": "ok",
            },
        ],
        "prefix": [0, 1],
        "states": [json.dumps(value_text), "2"],
        "failing": 3,
        "failing_state": "2",
        "window": [1, 3],
    }


def make_invalid_register_run(root: Path) -> Path:
    d = _run_dir(root, "register-invalid")
    rng = random.Random(2)
    h = register_history(rng, 400, 5, 8_000 * MS, 3)
    _nemesis(h, "kill", 2_000 * MS, 4_000 * MS, {"nodes": ["n1"], "mechanism": "SIGKILL"})
    h.lines.sort(key=lambda x: x["time"])
    for n, x in enumerate(h.lines):
        x["index"] = n
    h.write(d)
    _test_json(d, "register-invalid", "register", ["kill"])
    results = {
        "valid": False,
        "checkers": {
            "linear": {
                "valid": False,
                "model": "cas-register",
                "keys": {
                    "0": {"valid": True},
                    "1": {"valid": False, "counterexample": register_counterexample()},
                    "2": {"valid": True},
                },
                "failures": ["1"],
                "unknown": [],
            },
            "perf": {
                "valid": True,
                "latency": {},
                "throughput": [],
                "availability": {
                    # as chaos.history.checkers.perf writes it (seconds; the report computes none itself)
                    "windows": [{"start_s": 2.1, "end_s": 3.4, "duration_s": 1.3, "first_ok_f": "write"}]
                },
            },
            "stats": {"valid": True, "by_f": {}},
        },
    }
    (d / "results.json").write_text(json.dumps(results))
    return d


def make_invalid_log_run(root: Path) -> Path:
    """Appends 0..59 from 4 processes; value 7 lost, 12 duplicated, 999 unexpected in the final reads."""
    d = _run_dir(root, "log-invalid")
    h = HistoryWriter()
    t = 0
    committed: list[int | None] = [None]  # index 0: the leader's no-op entry
    for v in range(60):
        p = v % 4
        h.op("invoke", p, "append", v, t, node=f"n{p % 3 + 1}")
        t += 3 * MS
        if v == 30:
            h.op("info", p, "append", v, t, node=f"n{p % 3 + 1}", error="WAIT_QUORUM_ACK_TIMEOUT")
            continue
        h.op("ok", p, "append", v, t, node=f"n{p % 3 + 1}", log_index=len(committed))
        committed.append(v)
        t += 1 * MS
        if v == 20:
            _nemesis(h, "pause", t, t + 150 * MS, {"nodes": ["n2"], "mechanism": "SIGSTOP"})
            t += 200 * MS
    final = [x for x in committed if x != 7] + [12, 999]
    for n in ("n1", "n2", "n3"):
        h.op("invoke", 100, "read", None, t, node=n)
        t += 2 * MS
        h.op("ok", 100, "read", final, t, node=n)
    h.write(d)
    _test_json(d, "log-invalid", "log", ["pause"])
    results = {
        "valid": False,
        "checkers": {
            "log": {
                "valid": False,
                "lost": [7],
                "duplicated": [{"value": 12, "indexes": [13, 61]}],
                "unexpected": [999],
                "reordered": [],
                "divergent": [],
                "attempted": 60,
                "acknowledged": 59,
            },
            "stats": {"valid": True, "by_f": {}},
        },
    }
    (d / "results.json").write_text(json.dumps(results))
    return d


def make_big_run(root: Path, n_ops: int = 100_000) -> Path:
    """A register run with ``n_ops`` client ops (2 × n_ops history lines) over 120 s, 20 processes."""
    d = _run_dir(root, "register-big")
    rng = random.Random(3)
    h = register_history(rng, n_ops, 20, 120_000 * MS, 10, outage=(35_000 * MS, 39_000 * MS))
    for k in range(5):
        _nemesis(
            h,
            ("partition", "kill", "pause", "clock", "packet")[k],
            (10 + 22 * k) * 1000 * MS,
            (20 + 22 * k) * 1000 * MS,
            {"nodes": [f"n{k % 3 + 1}"]},
        )
    h.lines.sort(key=lambda x: x["time"])
    for n, x in enumerate(h.lines):
        x["index"] = n
    h.write(d)
    _test_json(
        d, "register-big", "register", ["partition", "kill", "pause", "clock", "packet"], time_limit=120
    )
    results = {
        "valid": "unknown",
        "checkers": {
            "linear": {
                "valid": "unknown",
                "model": "cas-register",
                "keys": {str(k): {"valid": True} for k in range(9)} | {"9": {"valid": "unknown"}},
                "failures": [],
                "unknown": ["9"],
            },
            "stats": {"valid": True, "by_f": {}},
        },
    }
    (d / "results.json").write_text(json.dumps(results))
    return d


def make_xss_run(root: Path) -> Path:
    """HTML and script in every place a history, test or result value can reach the page."""
    d = _run_dir(root, "xss")
    (d / "nodes" / "n1" / (XSS.replace("/", "_") + ".log")).write_text("x")
    h = HistoryWriter()
    h.op("invoke", 0, "write", XSS, 1 * MS, key=XSS2, node=XSS)
    h.op("ok", 0, "write", XSS, 2 * MS, key=XSS2, node=XSS, note=XSS2)
    h.op("invoke", 1, XSS, XSS2, 3 * MS)
    h.op("fail", 1, XSS, XSS2, 4 * MS, error=XSS)
    _nemesis(h, XSS, 1 * MS, 3 * MS, {"nodes": [XSS], "grudge": {XSS2: [XSS]}})
    h.lines.sort(key=lambda x: x["time"])
    h.write(d)
    _test_json(d, XSS, XSS2, [XSS], **{XSS: XSS2})
    ce = register_counterexample(XSS)
    results = {
        "valid": False,
        "checkers": {
            "linear": {
                "valid": False,
                "model": XSS,
                "keys": {XSS2: {"valid": False, "counterexample": ce}},
                "failures": [XSS2],
                "unknown": [],
                "error": XSS,
            },
            "log": {
                "valid": False,
                "lost": [XSS],
                "duplicated": [{"value": XSS2, XSS: XSS}],
                "unexpected": [],
                "reordered": [],
                "divergent": [],
                "attempted": 1,
                "acknowledged": 1,
            },
            XSS: {"valid": False, "cause": XSS2},
        },
    }
    (d / "results.json").write_text(json.dumps(results))
    return d


# ---------------------------------------------------------------------------------------------
# pure-logic tests


def test_json_for_script_escapes_markup() -> None:
    s = rep.json_for_script({"v": XSS2 + "&\u2028"})
    assert "<" not in s and ">" not in s and "&" not in s and "\u2028" not in s
    assert json.loads(s) == {"v": XSS2 + "&\u2028"}


def test_pair_ops_pairs_and_keeps_unfinished(tmp_path: Path) -> None:
    h = HistoryWriter()
    h.op("invoke", 0, "write", 1, 1 * MS)
    h.op("invoke", 1, "read", None, 2 * MS)
    h.op("ok", 0, "write", 1, 3 * MS)
    h.op("invoke", 0, "cas", [1, 2], 4 * MS)
    h.op("fail", 0, "cas", [1, 2], 5 * MS)
    pairs, nem, end = report_run.pair_ops(h.ops)
    assert end == 5 * MS and nem == []
    assert [pairs.fs[f] for f in pairs.f] == ["write", "read", "cas"]
    assert [report_run.TYPE_ORDER[t] for t in pairs.t] == ["ok", "info", "fail"]
    assert pairs.e == [3000, -1, 5000]
    assert pairs.j == [2, -1, 4]


def test_nemesis_windows_from_completions() -> None:
    h = HistoryWriter()
    _nemesis(h, "partition", 100 * MS, 300 * MS, {"nodes": ["n1", "n2"]})
    h.op("info", "nemesis", "start-kill", {"nodes": ["n3"]}, 400 * MS)
    h.op("info", "nemesis", "start-kill", {"nodes": ["n3"]}, 410 * MS)
    wins = figures.nemesis_windows(h.ops, 500 * MS)
    assert [(w["kind"], w["start"], w["end"], w["open"]) for w in wins] == [
        ("partition", 105 * MS, 305 * MS, False),
        ("kill", 410 * MS, 500 * MS, True),
    ]
    assert wins[0]["label"] == "partition n1,n2"


def test_fault_colours_come_from_the_runs_recorded_styles() -> None:
    """A run's test.json ``nemesis_styles`` colours its fault windows; a kind it lacks gets a
    neutral fallback colour; a run recorded without styles keeps the old colours."""
    h = HistoryWriter()
    _nemesis(h, "stall", 100 * MS, 200 * MS, {"nodes": ["n1"]})
    _nemesis(h, "kill", 250 * MS, 300 * MS, {"nodes": ["n2"]})
    styles = {"stall": {"colour": "#123456", "verbs": {}}}
    wins = figures.nemesis_windows(h.ops, 400 * MS, figures.nemesis_colours({"nemesis_styles": styles}))
    colours = {w["kind"]: w["colour"] for w in wins}
    assert colours["stall"] == "#123456"
    assert colours["kill"] != figures.NEMESIS_COLOURS["kill"] and colours["kill"] in figures._FALLBACK_COLOURS
    old = figures.nemesis_windows(h.ops, 400 * MS, figures.nemesis_colours({"name": "old run"}))
    assert {w["kind"]: w["colour"] for w in old}["kill"] == figures.NEMESIS_COLOURS["kill"]


def test_log_rows_name_writers_and_readers(tmp_path: Path) -> None:
    run = report_run.load_run(make_invalid_log_run(tmp_path))
    rows = {r["kind"]: r for r in figures.log_anomaly_rows(run.results, run.history)}
    assert rows["lost"]["value"] == "7" and rows["lost"]["read"] == []
    assert any("ok @index 8" in w for w in rows["lost"]["wrote"])
    assert rows["unexpected"]["wrote"] == [] and len(rows["unexpected"]["read"]) == 3
    assert rows["duplicated"]["detail"] == '{"indexes":[13,61]}'
    assert "," in rows["duplicated"]["read"][0]  # read at two indexes


def test_checkers_failing_first_and_computed_availability(tmp_path: Path) -> None:
    run = report_run.load_run(make_invalid_register_run(tmp_path))
    data = rep.build_data(run)
    assert data["verdict"] == "invalid"
    assert [c["verdict"] for c in data["checkers"]][0] == "invalid"
    assert data["counterexamples"][0]["key"] == "1"
    assert data["meta"]["nodes"] == ["n1", "n2", "n3"] and data["meta"]["seed"] == 42


def test_availability_comes_from_results_only() -> None:
    """The report draws the perf checker's windows and computes none of its own."""
    h = HistoryWriter()
    for k in range(10):
        t = k * 100 * MS + (3000 * MS if k >= 5 else 0)
        h.op("invoke", 0, "read", None, t)
        h.op("ok", 0, "read", 1, t + MS)
    pairs, nem, end = report_run.pair_ops(h.ops)
    wins, src = figures.availability_windows(None, pairs, [], end)
    assert wins == [] and "no perf checker result" in src
    results = {
        "checkers": {
            "perf": {"availability": {"windows": [{"start_s": 0.401, "end_s": 3.501, "summary": "gap"}]}}
        }
    }
    wins, src = figures.availability_windows(results, pairs, [], end)
    assert src.startswith("perf checker")
    assert [(w["start"], w["end"], w["note"]) for w in wins] == [(401 * MS, 3501 * MS, "gap")]
    assert wins[0]["counts"]["ok"] == 0  # no ok completion strictly inside the window


def test_bad_inputs_are_named(tmp_path: Path) -> None:
    with pytest.raises(report_run.ReportError, match="expected an existing directory"):
        report_run.load_run(tmp_path / "missing")
    (tmp_path / "r").mkdir()
    with pytest.raises(report_run.ReportError, match="history.jsonl or test.json"):
        report_run.load_run(tmp_path / "r")
    (tmp_path / "r" / "history.jsonl").write_text(
        '{"type":"invoke","process":0,"f":"read","time":1}\nnot json\n{"type"'
    )
    with pytest.raises(report_run.ReportError, match="line 2"):
        report_run.load_run(tmp_path / "r")
    (tmp_path / "r" / "history.jsonl").write_text(
        '{"type":"invoke","process":0,"f":"read","time":1}\n{"type"'
    )
    run = report_run.load_run(tmp_path / "r")
    assert run.skipped_lines == 1 and len(run.history) == 1


def test_summary_table_counts_and_report_path(tmp_path: Path) -> None:
    from rich.console import Console

    d = make_invalid_log_run(tmp_path)
    rep.write_report(d)
    results = json.loads((d / "results.json").read_text())
    console = Console(record=True, width=140)
    console.print(summary.summary_table(results, d / "history.jsonl"))
    text = console.export_text()
    assert "invalid" in text
    assert "append" in text and " 59 " in text  # 59 ok appends
    assert "lost" in text and "unexpected" in text
    assert str(d / "index.html") in text


def test_report_command_writes_index_and_rejects_bad_dirs(tmp_path: Path) -> None:
    from chaos.errors import BadArguments

    d = make_valid_register_run(tmp_path)
    assert rep.report.main([str(d)], standalone_mode=False) == 0
    html = (d / "index.html").read_text()
    assert 'data-verdict="valid"' in html and "plotly" in html
    assert "https://" not in html.split('<script id="report-data"')[0]  # no network assets before the data
    with pytest.raises(BadArguments, match="expected an existing directory"):
        rep.report.main([str(tmp_path / "nope")], standalone_mode=False)


def test_report_html_embeds_history_values_escaped(tmp_path: Path) -> None:
    html = rep.write_report(make_xss_run(tmp_path)).read_text()
    data = html.split('<script id="report-data" type="application/json">')[1].split("</script>")[0]
    assert "<" not in data and XSS not in data
    assert XSS not in html and XSS2 not in html  # nowhere raw: jinja escapes the rest
    assert "&lt;img src=x" in html


def test_checker_summary_names_keys_as_check_does() -> None:
    """The run summary names the failing and undecided keys plainly, as ``chaos check`` does."""
    from chaos.history.report.verdicts import checker_summaries

    rows = checker_summaries(
        {"checkers": {"linear": {"valid": False, "failures": ["13", "x"], "unknown": ["7"], "keys": {}}}}
    )
    assert rows[0]["summary"].startswith("2 non-linearizable keys: 13, x; 1 undecided key: 7")


def make_long_invalid_register_run(root: Path, n_writes: int = 120) -> Path:
    """One key written ``n_writes`` times in turn by three processes, each write read back, then a
    stale read at the end (of the value two writes before the last): the counterexample's failing
    window is far to the right of the key's first op. results.json comes from the real checker."""
    from chaos.history.checkers.linear import check_history
    from chaos.history.op import Op

    d = _run_dir(root, "register-long-invalid")
    h = HistoryWriter()
    t = 1_000 * MS
    for v in range(n_writes):
        p = v % 3
        h.op("invoke", p, "write", v, t, key=1)
        h.op("ok", p, "write", v, t + 2 * MS, key=1)
        h.op("invoke", p, "read", None, t + 3 * MS, key=1)
        h.op("ok", p, "read", v, t + 5 * MS, key=1)
        t += 10 * MS
    _nemesis(h, "partition", t - 40 * MS, t + 30 * MS, {"grudge": {"n1": ["n2", "n3"]}})
    h.op("invoke", 4, "read", None, t, key=1)
    h.op("ok", 4, "read", n_writes - 3, t + 2 * MS, key=1)
    h.lines.sort(key=lambda x: x["time"])
    for n, x in enumerate(h.lines):
        x["index"] = n
    h.write(d)
    _test_json(d, "register-long-invalid", "register", ["partition"])
    linear = check_history((Op.from_dict(x) for x in h.lines), "cas-register", workers=1)
    results = {"valid": False, "checkers": {"linear": linear, "stats": {"valid": True, "by_f": {}}}}
    (d / "results.json").write_text(json.dumps(results))
    return d
