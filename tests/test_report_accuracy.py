"""Reports that say exactly what happened (issue 25): the run named by its directory, no
"every key is linearizable" for an undecided check, a server-log summary that says no patterns were
declared, ``write(1) -> 1``, fails counted apart, and the summary ending with the verdict."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from chaos.history.report import html as rep
from chaos.history.report import run as report_run
from chaos.history.report import summary, verdicts
from chaos.history.store import RunDir

S = 1_000_000_000


def _ops(*rows: tuple[str, Any, str, Any, float], **extra: Any) -> list[dict[str, Any]]:
    return [
        {"index": i, "type": t, "process": p, "f": f, "value": v, "time": int(at * S), **extra}
        for i, (t, p, f, v, at) in enumerate(rows)
    ]


def write_run(store: Path, ops: list[dict[str, Any]], results: dict[str, Any] | None = None) -> RunDir:
    run = RunDir.create(store, "register-unit")
    run.write_test({"name": "register-unit", "workload": "register", "checkers": ["stats", "perf"]})
    run.history_path.write_text("".join(json.dumps(o) + "\n" for o in ops))
    if results is not None:
        (run.path / "results.json").write_text(json.dumps(results))
    return run


def simple_ops() -> list[dict[str, Any]]:
    return _ops(
        ("invoke", 0, "write", 1, 0.1),
        ("ok", 0, "write", 1, 0.2),
        ("invoke", 1, "read", None, 0.3),
        ("ok", 1, "read", 1, 0.4),
    )


def test_report_of_latest_is_titled_by_the_resolved_run(tmp_path: Path) -> None:
    """Item 7: ``chaos report store/latest`` names the run by the directory the link resolves to."""
    run = write_run(tmp_path / "store", simple_ops(), {"valid": True, "checkers": {}})
    out = rep.write_report(tmp_path / "store" / "latest")
    html = out.read_text()
    title = html.split("<title>")[1].split("</title>")[0]
    assert run.name in title and "latest" not in title
    assert rep.build_data(report_run.load_run(tmp_path / "store" / "latest"))["meta"]["run"] == run.name


def test_unknown_linear_check_never_says_every_key_is_linearizable(tmp_path: Path) -> None:
    """Item 3: an undecided linearizability check says so, with what was left undecided."""
    linear = {"valid": "unknown", "failures": [], "unknown": ["3", "4"], "keys": {}, "cause": "timeout"}
    run = write_run(tmp_path / "store", simple_ops(), {"valid": "unknown", "checkers": {"linear": linear}})
    note = rep.build_data(report_run.load_run(run.path))["counterexample_note"]
    assert "Every key is linearizable" not in note
    assert "unknown" in note and "2 keys undecided" in note and "timeout" in note
    valid = {"valid": True, "checkers": {"linear": {"valid": True, "keys": {"1": {"valid": True}}}}}
    assert verdicts.counterexample_note(valid).startswith("Every key is linearizable")
    assert verdicts.counterexample_note({"valid": True, "checkers": {}}).startswith("No linearizability")


def test_server_logs_without_patterns_says_none_were_declared(tmp_path: Path) -> None:
    """Item 6: ten logs downloaded and no pattern declared is not "no anomalies in 0 log(s)"."""
    from chaos.history.checkers.nodelogs import ServerLogChecker

    run = write_run(tmp_path / "store", simple_ops())
    for n in range(5):
        d = run.path / "nodes" / f"n{n + 1}"
        d.mkdir(parents=True, exist_ok=True)
        for name in ("server.log", "gc.log"):
            (d / name).write_text("ERROR something\n")
    test = {"server_logs": {"files": [], "patterns": []}, "nodes": [f"n{n + 1}" for n in range(5)]}
    r = ServerLogChecker().check(test, run.history_path, {})
    assert "no anomalies" not in r["summary"]
    assert r["summary"] == "the DB declared no log patterns: 10 log(s) downloaded, none scanned"


def test_write_of_one_shows_its_output() -> None:
    """Item 6: ``write(1)`` completing with 1 renders ``-> 1`` (1 == True must not hide it)."""
    from chaos.history.checkers.models import Call

    assert Call(0, "write", 1, 1, 0, 1).describe() == "write(1) -> 1"
    assert Call(0, "write", 2, None, 0, 1).describe() == "write(2)"


def cas_run(store: Path) -> RunDir:
    """3 cas that did not match, 2 refused (NOT_LEADER), 1 ok, 1 info."""
    rows: list[dict[str, Any]] = []
    outcomes = [("fail", {"compare_failed": True, "error": "cas: expected value did not match"})] * 3
    outcomes += [("fail", {"error": "NOT_LEADER"})] * 2 + [("ok", {}), ("info", {"error": "timeout"})]
    for n, (typ, extra) in enumerate(outcomes):
        t = n * S
        rows.append({"type": "invoke", "process": n, "f": "cas", "value": [1, 2], "time": t, "key": 0})
        rows.append(
            {"type": typ, "process": n, "f": "cas", "value": [1, 2], "time": t + S // 2, "key": 0, **extra}
        )
    for i, r in enumerate(rows):
        r["index"] = i
    return write_run(store, rows)


def test_fails_are_counted_apart_in_the_summary_and_perf(tmp_path: Path) -> None:
    """Item 8: a cas whose compare did not match is an answer, NOT_LEADER an outage: the perf
    checker, the run summary and the report count them apart (the history keeps Jepsen's types)."""
    from rich.console import Console

    from chaos.history.checkers.registry import check_run

    run = cas_run(tmp_path / "store")
    results = check_run(run)
    ops = results["checkers"]["perf"]["ops"]
    assert ops == {
        "count": 7, "ok": 1, "fail": 5, "info": 1, "fail_no_match": 3, "fail_aborted": 0,
        "fail_unsupported": 0, "fail_unavailable": 2, "client_errors": 0,
    }  # fmt: skip
    console = Console(width=200, record=True)
    console.print(summary.summary_table(results, run.history_path))
    text = console.export_text()
    assert "fail: no match" in text and "fail: unavailable" in text
    rows = [line.replace("│", " ").split() for line in text.splitlines()]
    assert ["cas", "1", "3", "2", "1"] in rows  # ok, no match, unavailable, info
    perf_line = next(c for c in verdicts.checker_summaries(results) if c["name"] == "perf")["summary"]
    assert "7 ops: 1 ok, 5 fail (3 no match, 2 unavailable), 1 info" in perf_line


def test_summary_ends_with_the_verdict_after_the_first_counterexample(tmp_path: Path) -> None:
    """Items 11 and 12: the run summary (the same for chaos run and chaos check) has the tables
    first, then the checkers, the first counterexample in a few lines, and the verdict last."""
    import io

    from test_report_fixtures import make_invalid_register_run

    from chaos.history.report.summary import console, print_run_summary

    d = make_invalid_register_run(tmp_path)
    results = json.loads((d / "results.json").read_text())
    out = io.StringIO()
    print_run_summary(console(out), results, d / "history.jsonl", str(d))
    lines = out.getvalue().splitlines()
    assert lines[-1] == f"INVALID: {d}"
    assert lines.index("ops by f and type") < lines.index(next(x for x in lines if x.startswith("  linear ")))
    ce = [
        x
        for x in lines
        if "counterexample" in x or x.startswith("  linearizable prefix") or "cannot be placed" in x
    ]
    assert ce[0].startswith("first counterexample: key ")
    assert any(x.startswith("  cannot be placed: read() -> 1, process 2, op #12") for x in ce), ce
    assert any("; state after it: 2" in x for x in ce), ce
    assert len(lines) - lines.index(ce[0]) <= 5  # a few lines, then the verdict


def test_history_txt_and_ops_in_chaos_log(tmp_path: Path) -> None:
    """Item 14: a human-readable history.txt beside history.jsonl, and each op in chaos.log as it
    is written (the runner's history writer logs it through ``chaos.ops``)."""
    import logging

    from chaos.history.op import Op
    from chaos.history.text import write_history_text
    from chaos.runner.output import _LoggedHistory, _Logs

    run = RunDir.create(tmp_path / "store", "register-unit")
    logs = _Logs(run.log_path)
    writer = _LoggedHistory(run.writer())
    try:
        writer.write(Op(type="invoke", process=0, f="cas", value=[1, 2], time=1_500_000_000, key=3))
        writer.write(
            Op(
                type="fail",
                process=0,
                f="cas",
                value=[1, 2],
                time=1_600_000_000,
                node="n2",
                error="cas: expected value did not match",
                extra={"compare_failed": True},
            )
        )
        writer.write(Op(type="info", process="nemesis", f="start-kill", value={"nodes": ["n5"]}, time=2 * S))
    finally:
        writer.close()
        logs.close()
    text = write_history_text(run.history_path).read_text().splitlines()
    assert len(text) == 3
    assert text[1].split()[:5] == ["1.600000", "0", "fail", "cas", "[1,"]
    assert 'n2 error="cas: expected value did not match"' in text[1] and "compare_failed=true" in text[1]
    assert "nemesis info   start-kill" in text[2] and '{"nodes": ["n5"]}' in text[2]
    log = run.log_path.read_text()
    assert all(line in log for line in text), log
    assert logging.getLogger("chaos.ops").handlers == []
