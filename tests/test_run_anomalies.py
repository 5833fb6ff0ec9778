"""Server-log anomalies in the verdict (Jepsen's log-file-pattern checker, chaos.history.checkers.nodelogs).

Pure logic first: the DLedger DB's declared patterns classify real server log lines, and
``check_run`` on a stored run (test.json + nodes/<node>/dledger.log) reaches the verdict from the
files alone. Then two real runs on the Docker cluster: one during which a safety-guard ERROR line is
appended to a node's server log from outside (the shipped server carries no hook) ends INVALID with
the line quoted; an untouched run's logs show no anomaly.
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from chaos.history.checkers.nodelogs import ServerLogChecker, patterns_doc, report_rows, scan_file
from chaos.history.checkers.registry import check_run
from chaos.history.store import RunDir
from chaos_dledger.db import DLedgerDB

GUARD = "refusing to truncate below commitIndex 41 (at 37)"
LOG_OK = """=== start 2026-11-23T20:00:00 ===
2026-11-23T20:00:01.100 INFO dledger.server n1: listening on 10.0.0.1:20911 (group chaos, flush sync, read mode raft-log)
2026-11-23T20:00:02.200 INFO dledger.core.node n1: became leader in term 3
"""


def _run_dir(tmp_path: Path, logs: dict[str, str]) -> RunDir:
    run = RunDir.create(tmp_path, "register-none")
    (run.history_path).write_text(
        '{"index":0,"type":"invoke","process":0,"f":"read","value":null,"time":1}\n'
        '{"index":1,"type":"ok","process":0,"f":"read","value":null,"time":2}\n'
    )
    db = DLedgerDB()
    test = {
        "name": "register-none",
        "workload": "register",
        "checkers": ["stats", "server-logs"],
        "nodes": [{"name": n} for n in logs],
        "server_logs": patterns_doc(["dledger.log"], db.log_patterns),
    }
    run.write_test(test)
    for node, text in logs.items():
        d = run.path / "nodes" / node
        d.mkdir(parents=True, exist_ok=True)
        (d / "dledger.log").write_text(text)
    return run


def test_patterns_classify_dledger_lines(tmp_path: Path) -> None:
    log = tmp_path / "dledger.log"
    log.write_text(
        LOG_OK
        + f"2026-11-23T20:00:03.000 ERROR dledger.core.node n2: {GUARD}\n"
        + "2026-11-23T20:00:03.100 ERROR dledger.core.node n2: refusing to overwrite committed entry 9 (commitIndex 12)\n"
        + "2026-11-23T20:00:04.000 ERROR dledger.server n2: tick failed\n"
        + "Traceback (most recent call last):\n  File \"x.py\", line 1, in tick\n    boom()\nKeyError: 'x'\n"
        + "2026-11-23T20:00:05.000 WARNING dledger.server n2: closing connection from 10.0.0.9:40000: bad frame length\n"
        + "2026-11-23T20:00:06.000 CRITICAL dledger.server n2: store failure, stopping: disk gone\n"
    )
    found = scan_file(log, DLedgerDB().log_patterns)
    assert [n for n, _ in found["safety-guard"]] == [4, 5]
    assert found["error"] == [(6, "2026-11-23T20:00:04.000 ERROR dledger.server n2: tick failed")]
    assert found["crash"][0][0] == 7 and found["crash"][0][1].endswith("KeyError: 'x'")
    assert [n for n, _ in found["decode"]] == [11]
    assert [n for n, _ in found["critical"]] == [12]
    clean = tmp_path / "clean.log"
    clean.write_text(LOG_OK)
    assert scan_file(clean, DLedgerDB().log_patterns) == {}


def test_stored_run_with_a_guard_line_is_invalid_and_quotes_it(tmp_path: Path) -> None:
    bad = LOG_OK + f"2026-11-23T20:00:03.000 ERROR dledger.core.node n2: {GUARD}\n"
    run = _run_dir(tmp_path, {"n1": LOG_OK, "n2": bad})
    results = check_run(run)  # what `chaos check` does: the verdict from the stored files alone
    assert results["valid"] is False
    r = results["checkers"]["server-logs"]
    assert r["valid"] is False
    assert r["kinds"]["safety-guard"]["count"] == 1
    assert r["kinds"]["safety-guard"]["lines"] == [
        {"node": "n2", "file": "nodes/n2/dledger.log", "line": 4, "text": bad.splitlines()[3]}
    ]
    assert "nodes/n2/dledger.log:4:" in r["cause"] and GUARD in r["cause"]
    rows = report_rows(results)
    assert rows[0]["kind"] == "safety-guard" and rows[0]["by_node"] == {"n2": 1}
    assert json.loads(run.results_path.read_text())["checkers"]["server-logs"]["valid"] is False


def test_warnings_are_counted_but_keep_the_run_valid(tmp_path: Path) -> None:
    warn = LOG_OK + "2026-11-23T20:00:05.000 ERROR dledger.server n1: checkpoint failed: EIO\n" * 3
    run = _run_dir(tmp_path, {"n1": warn, "n2": LOG_OK})
    r = check_run(run)["checkers"]["server-logs"]
    assert r["valid"] is True
    assert r["kinds"]["error"]["count"] == 3 and r["kinds"]["error"]["by_node"] == {"n1": 3}
    assert "3 error (warning)" in r["summary"]


def test_missing_log_is_unknown_not_valid(tmp_path: Path) -> None:
    run = _run_dir(tmp_path, {"n1": LOG_OK, "n2": LOG_OK})
    (run.path / "nodes" / "n2" / "dledger.log").unlink()
    r = check_run(run)["checkers"]["server-logs"]
    assert r["valid"] == "unknown"
    assert r["missing"] and r["missing"][0].startswith("nodes/n2/dledger.log")


def test_checker_without_patterns_is_unknown(tmp_path: Path) -> None:
    assert ServerLogChecker().check({}, tmp_path / "history.jsonl", {})["valid"] == "unknown"


# --------------------------------------------------------------------------------------------------
# real runs


def _chaos(*args: str, **kw) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "chaos.cli", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        **kw,
    )


def _run_args(store: Path, time_limit: str = "8") -> list[str]:
    return [
        "run",
        "--workload",
        "register",
        "--nemesis",
        "none",
        "--time-limit",
        time_limit,
        "--store",
        str(store),
        "--no-live",
    ]


def _wait_for_ops(store: Path, proc: subprocess.Popen[str], n: int = 20) -> None:
    """Until the generator phase is under way (the history has ``n`` lines) or the run ended."""
    while proc.poll() is None:
        h = store / "latest" / "history.jsonl"
        if h.exists() and h.read_text().count("\n") >= n:
            return
        time.sleep(0.2)


@pytest.mark.docker
@pytest.mark.slow
def test_run_with_a_guard_error_in_a_server_log_is_invalid(tmp_path: Path) -> None:
    from chaos.cluster.docker import load_nodes
    from chaos.control.ssh import Control

    store = tmp_path / "store"
    proc = _chaos(*_run_args(store))
    out: list[str] = []
    reader = threading.Thread(target=lambda: out.append(proc.stdout.read() if proc.stdout else ""))
    reader.start()
    control = Control(load_nodes())
    try:
        _wait_for_ops(store, proc)
        assert proc.poll() is None, "the run ended before the line could be injected"
        line = f"2099-01-01T00:00:00.000 ERROR dledger.core.node n3: {GUARD}"
        # appended from outside, as the server itself would log it (it appends with O_APPEND too)
        control.remote("n3").exec_raw(f"echo '{line}' >> {DLedgerDB.log_file}", sudo=True)
        proc.wait(timeout=900)
    finally:
        if proc.poll() is None:
            proc.kill()
        control.close()
        reader.join()
    text = out[0] if out else ""
    assert proc.returncode == 1, text[-3000:]
    run = RunDir(store / "latest")
    results = json.loads(run.results_path.read_text())
    r = results["checkers"]["server-logs"]
    assert results["valid"] is False and r["valid"] is False
    quoted = r["kinds"]["safety-guard"]["lines"]
    assert [(q["node"], q["file"], q["text"]) for q in quoted] == [("n3", "nodes/n3/dledger.log", line)]
    lines = (run.path / "nodes" / "n3" / "dledger.log").read_text().splitlines()
    assert lines[quoted[0]["line"] - 1] == line
    # the other checkers found nothing wrong: the log alone made the run invalid
    assert results["checkers"]["linear"]["valid"] is True
    # the terminal summary quotes the line with node file and line number; the report has the section
    assert f"nodes/n3/dledger.log:{quoted[0]['line']}: {line}" in text
    html = (run.path / "index.html").read_text()
    assert 'id="server-log-anomalies"' in html and GUARD in html and 'href="nodes/n3/dledger.log"' in html
    # chaos check on the stored run reaches the same verdict from the stored files
    r2 = subprocess.run(
        [sys.executable, "-m", "chaos.cli", "check", str(run.path)], capture_output=True, text=True
    )
    assert r2.returncode == 1, r2.stdout + r2.stderr
    assert (
        json.loads(run.results_path.read_text())["checkers"]["server-logs"]["kinds"]["safety-guard"]["count"]
        == 1
    )


@pytest.mark.docker
@pytest.mark.slow
def test_correct_run_logs_show_no_anomaly(tmp_path: Path) -> None:
    store = tmp_path / "store"
    r = subprocess.run(
        [sys.executable, "-m", "chaos.cli", *_run_args(store)], capture_output=True, text=True, timeout=900
    )
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    results = json.loads(RunDir(store / "latest").results_path.read_text())
    s = results["checkers"]["server-logs"]
    assert s["valid"] is True, s
    assert len(s["scanned"]) == 5 and not s["missing"]
    assert {k: v["count"] for k, v in s["kinds"].items() if v["count"]} == {}
    assert results["checkers"]["liveness"]["valid"] is True
