"""`chaos analyze` and `chaos gate` give every corpus case the verdict and exit status `chaos check`
gives it (issue 12, "gate equals check"; the corpus is tests/data/verdicts/, see its README).

Run directories are analysed as they are; a bare JSON Lines case is wrapped into a run directory
(its history as ``history.jsonl``, no ``test.json``) and `chaos check` is run on the same wrapped
directory to show the wrapping keeps its verdict. Imported formats (EDN, etcd logs) are not run
directories and are left to ``test_verdict_corpus``.

Malformed cases run as real subprocesses (what a user sees: one line, exit 254, no traceback, no
output directory; Spark's own lines go to its log). The others share one Spark session: the
commands run in this process (``chaos.cli.main``), one call per (expected verdict, arguments)
group.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from test_verdict_corpus import CASES, copy_case, run_chaos

pytestmark = [pytest.mark.spark, pytest.mark.slow]

EXIT = {"valid": 0, "invalid": 1, "unknown": 2, "malformed": 254}


def _wrappable(case: dict[str, Any]) -> bool:
    return case["kind"] == "run" or case["name"].endswith(".jsonl")


RUN_CASES = [c for c in CASES if _wrappable(c)]
MALFORMED = [c for c in RUN_CASES if c["verdict"] == "malformed"]
DECIDED = [c for c in RUN_CASES if c["verdict"] != "malformed"]


def as_run_dir(case: dict[str, Any], dest: Path) -> Path:
    """The case as a run directory ``dest/verdicts/<name>`` (copied; a bare history wrapped)."""
    root = dest / "verdicts"
    root.mkdir(parents=True, exist_ok=True)
    if case["kind"] == "run":
        return copy_case(case, root)
    run = root / case["name"].replace(".", "-")
    run.mkdir()
    copy_case(case, run).rename(run / "history.jsonl")
    return run


def chaos_here(capsys: pytest.CaptureFixture[str], *args: Any) -> tuple[int, str, str]:
    """``chaos ARGS`` in this process (so the module's Spark session is reused): (exit, out, err)."""
    from chaos.cli import main

    with pytest.raises(SystemExit) as e:
        main([str(a) for a in args])
    out = capsys.readouterr()
    code = e.value.code
    return (code if isinstance(code, int) else 0), out.out, out.err


def test_the_corpus_has_run_cases_of_every_verdict() -> None:
    assert {c["verdict"] for c in RUN_CASES} == {"valid", "invalid", "unknown", "malformed"}
    assert [c["name"] for c in RUN_CASES if c["kind"] == "file"], "no bare history to wrap"


@pytest.mark.parametrize("command", ["analyze", "gate"])
@pytest.mark.parametrize("case", MALFORMED, ids=[c["name"] for c in MALFORMED])
def test_malformed_history_is_one_line_254(case: dict[str, Any], command: str, tmp_path: Path) -> None:
    run = as_run_dir(case, tmp_path)
    if case["kind"] == "file":  # the wrapped directory is what `chaos check` says 254 to as well
        assert run_chaos("check", run).returncode == 254
    r = run_chaos(command, "--out", tmp_path / "out", *case["args"], run)
    shown = f"exit {r.returncode}\nstdout:\n{r.stdout}\nstderr:\n{r.stderr}"
    assert "Traceback" not in r.stdout + r.stderr, shown
    assert r.returncode == 254, shown
    lines = r.stderr.splitlines()
    assert len(lines) == 1, shown
    assert "history.jsonl" in lines[0], shown
    if "line" in case:
        assert re.search(rf"\bline {case['line']}\b", lines[0]), shown
    assert not (tmp_path / "out").exists(), "a malformed history left an output directory"


@pytest.fixture(scope="module")
def spark() -> Any:
    from chaos.history.spark.session import spark_session

    return spark_session("local[2]")  # shared with the other Spark tests of this session


@pytest.fixture(scope="module")
def decided_runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Every well-formed case as a run directory, with `chaos check`'s verdict on it asserted."""
    dest = tmp_path_factory.mktemp("cases")
    runs = {}
    for case in DECIDED:
        runs[case["name"]] = run = as_run_dir(case, dest)
        if case["kind"] == "file":
            check = run_chaos("check", *case["args"], run)
            assert check.returncode == case["exit"], (case["name"], check.stdout, check.stderr)
        (run / "results.json").unlink(missing_ok=True)
    return runs


def _groups(key: str) -> dict[tuple[Any, ...], list[dict[str, Any]]]:
    out: dict[tuple[Any, ...], list[dict[str, Any]]] = {}
    for c in DECIDED:
        out.setdefault((tuple(c["args"]),) if key == "args" else (c["verdict"], tuple(c["args"])), []).append(
            c
        )
    return out


def _run_name(run: Path) -> str:
    return f"{run.parent.name}__{run.name}"


def test_analyze_gives_each_run_its_check_verdict(
    spark: Any, decided_runs: dict[str, Path], capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    for n, ((args,), cases) in enumerate(sorted(_groups("args").items())):
        out = tmp_path / f"analyze{n}"
        code, stdout, stderr = chaos_here(
            capsys, "analyze", "--out", out, *args, *(decided_runs[c["name"]] for c in cases)
        )
        assert "Traceback" not in stdout + stderr
        summary = json.loads((out / "summary.json").read_text())
        got = {r["run"]: r["valid"] for r in summary["runs"]}
        for c in cases:
            want = {"valid": True, "invalid": False, "unknown": "unknown"}[c["verdict"]]
            assert got[_run_name(decided_runs[c["name"]])] == want, (c["name"], summary["verdicts"])
            if c.get("checker"):  # the checker `chaos check` names is the one that fails here too
                checkers = summary["verdicts"][_run_name(decided_runs[c["name"]])]["checkers"]
                assert checkers[c["checker"]]["valid"] is False, (c["name"], checkers)
            if c.get("failures"):
                linear = summary["verdicts"][_run_name(decided_runs[c["name"]])]["checkers"]["linear"]
                assert set(c["failures"]) <= set(linear["failures"]), (c["name"], linear)
        verdicts = {c["verdict"] for c in cases}
        worst = 1 if "invalid" in verdicts else 2 if "unknown" in verdicts else 0
        assert code == worst, (args, stdout, stderr)


def test_gate_exit_status_per_verdict(
    spark: Any, decided_runs: dict[str, Path], capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    for n, ((verdict, args), cases) in enumerate(sorted(_groups("verdict").items())):
        runs = [decided_runs[c["name"]] for c in cases]
        code, stdout, stderr = chaos_here(capsys, "gate", "--out", tmp_path / f"gate{n}", *args, *runs)
        assert "Traceback" not in stdout + stderr
        assert code == EXIT[verdict], (verdict, args, stdout, stderr)
        for run in runs:
            if verdict == "valid":
                assert f"FAIL {_run_name(run)}" not in stderr, stderr
            else:
                assert f"FAIL {_run_name(run)}: {verdict}" in stderr, stderr
        assert {"valid": "gate: PASS", "invalid": "gate: FAIL", "unknown": "gate: UNKNOWN"}[verdict] in stdout


def test_op_the_model_cannot_check_is_254_as_in_check(
    spark: Any, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """A cas whose value is not [expected, new] is bad input for chaos check (254 naming its line);
    found by the search on an executor, it is the same 254 here, not a crashed (unknown) key."""
    run = tmp_path / "verdicts" / "bad-cas"
    run.mkdir(parents=True)
    lines = [
        {"index": 0, "type": "invoke", "process": 0, "f": "write", "value": 1, "time": 1, "key": 1},
        {"index": 1, "type": "ok", "process": 0, "f": "write", "value": 1, "time": 2, "key": 1},
        {"index": 2, "type": "invoke", "process": 0, "f": "cas", "value": 5, "time": 3, "key": 1},
        {"index": 3, "type": "ok", "process": 0, "f": "cas", "value": 5, "time": 4, "key": 1},
    ]
    (run / "history.jsonl").write_text("".join(json.dumps(d) + "\n" for d in lines))
    (run / "test.json").write_text(json.dumps({"workload": "register"}))
    check = run_chaos("check", run)
    assert check.returncode == 254, check.stdout + check.stderr
    code, out, err = chaos_here(capsys, "analyze", "--out", tmp_path / "out", run)
    assert code == 254, out + err
    assert "Traceback" not in out + err
    assert len(err.splitlines()) == 1 and "history.jsonl" in err and "line 3" in err, err
    assert err.strip().endswith(check.stderr.strip().split(": ", 1)[-1][-40:]), (err, check.stderr)
