"""The gate's "ok rate" (issue 35 item 1, the gate's side): the share of completed ops the DB
served. A cas that found another value, an aborted transaction or an op the client does not offer
is an answer, not an outage (chaos.history.analysis.fail_class); only unavailable fails and
indeterminate ops count against the DB."""

from __future__ import annotations

from pathlib import Path

from chaos.history.analysis import served_rate
from chaos.history.spark.pipeline import summarize
from chaos.history.spark.tasks import run_id
from chaos.runner.gate import threshold_failures


def _perf(ok: int, no_match: int, unavailable: int, info: int, aborted: int = 0) -> dict[str, int]:
    fail = no_match + unavailable + aborted
    return {
        "count": ok + fail + info,
        "ok": ok,
        "fail": fail,
        "info": info,
        "fail_no_match": no_match,
        "fail_aborted": aborted,
        "fail_unsupported": 0,
        "fail_unavailable": unavailable,
    }


def test_answered_fails_are_served_and_unavailable_ones_are_not() -> None:
    assert served_rate(_perf(ok=60, no_match=30, unavailable=5, info=5)) == 0.9
    assert served_rate(_perf(ok=50, no_match=0, unavailable=0, info=0, aborted=50)) == 1.0
    assert served_rate({"count": 0}) is None
    assert served_rate({"count": 10, "ok": 10}) is None  # an old perf result: no classes


def test_the_gate_judges_runs_by_what_the_db_served(tmp_path: Path) -> None:
    healthy, outage = tmp_path / "healthy", tmp_path / "outage"
    verdicts, lat = {}, []
    for d, perf in ((healthy, _perf(60, 38, 1, 1)), (outage, _perf(60, 0, 39, 1))):
        d.mkdir()
        verdicts[run_id(d)] = {"valid": True, "checkers": {"perf": {"ops": perf}}}
        # the pipeline's ok/completed: 60 % for both
        lat.append({"run": run_id(d), "f": "cas", "ok": 60, "n": 100, "p99": 5.0})
    tests = {run_id(d): {"workload": "register"} for d in (healthy, outage)}
    summary = summarize([healthy, outage], tests, verdicts, {"latency": lat})
    assert [r["ok_rate"] for r in summary["runs"]] == [0.98, 0.6]
    failed = threshold_failures(summary, min_ok_rate=0.9)
    assert [(f.run, f.kind) for f in failed] == [(run_id(outage), "threshold")]
    assert "ok rate 60.0% < 90.0%" in failed[0].text


def test_analyze_summary_counts_answered_fails_as_served(tmp_path: Path) -> None:
    """Issue 35 item 1: `chaos analyze`'s page takes a run's ok rate from its perf counts as the
    gate does: a cas that found another value was served; a fail the DB did not serve was not."""
    run = tmp_path / "r1"
    run.mkdir()
    ops = {"count": 10, "ok": 5, "fail": 4, "info": 1, "fail_no_match": 3, "fail_aborted": 0,
           "fail_unsupported": 0, "fail_unavailable": 1}  # fmt: skip
    verdict = {"valid": True, "checkers": {"perf": {"valid": True, "ops": ops}}}
    rid = run_id(run)
    lat = [{"run": rid, "f": "cas", "ok": 5, "n": 10, "p99": 1.0}]
    out = summarize([run], {rid: {"workload": "register"}}, {rid: verdict}, {"latency": lat})
    assert out["runs"][0]["ok_rate"] == 0.8  # (5 ok + 3 answered no) / 10
