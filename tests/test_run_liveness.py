"""Liveness after healing (chaos.history.checkers.liveness, DLedgerDB.await_recovery).

Pure logic: the liveness checker turns the recovery record in test.json into the verdict, so
``chaos check`` reproduces it. A real run on the Docker cluster in which one node's server dies and
cannot start again (its ``dledger`` program made non-executable, from outside) ends as a liveness
failure with exit 1, naming the node; a healthy run records how it recovered.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from chaos.history.checkers.liveness import LivenessChecker
from chaos.history.checkers.registry import check_run
from chaos.history.store import RunDir


def _stored(tmp_path: Path, recovery: dict | None) -> RunDir:
    run = RunDir.create(tmp_path, "register-none")
    run.history_path.write_text(
        '{"index":0,"type":"invoke","process":0,"f":"read","value":null,"time":1}\n'
        '{"index":1,"type":"ok","process":0,"f":"read","value":null,"time":2}\n'
    )
    test: dict = {"name": "register-none", "workload": "register", "checkers": ["stats", "liveness"]}
    if recovery is not None:
        test["recovery"] = recovery
    run.write_test(test)
    return run


def test_recorded_failure_to_recover_is_invalid(tmp_path: Path) -> None:
    rec = {
        "recovered": False,
        "bound_s": 60.0,
        "waited_s": 60.2,
        "leader": "n1",
        "term": 4,
        "commit_index": 120,
        "problems": ["n5 does not answer: cannot connect to 10.0.0.15:20911: refused"],
        "nodes": {},
    }
    results = check_run(_stored(tmp_path, rec))
    assert results["valid"] is False
    live = results["checkers"]["liveness"]
    assert live["valid"] is False
    assert "within 60 s" in live["cause"] and "n5 does not answer" in live["cause"]


def test_recorded_recovery_is_valid_and_none_recorded_is_unknown(tmp_path: Path) -> None:
    ok = {"recovered": True, "bound_s": 60.0, "waited_s": 0.4, "leader": "n2", "term": 3, "commit_index": 9}
    assert check_run(_stored(tmp_path / "a", ok))["checkers"]["liveness"]["valid"] is True
    assert LivenessChecker().check({}, tmp_path / "history.jsonl", {})["valid"] == "unknown"
    assert check_run(_stored(tmp_path / "b", None))["valid"] == "unknown"


@pytest.mark.docker
@pytest.mark.slow
def test_node_that_cannot_start_after_healing_is_a_liveness_failure(tmp_path: Path) -> None:
    from chaos.cluster.docker import load_nodes
    from chaos.control.ssh import Control
    from chaos_dledger.db import DLedgerDB

    store = tmp_path / "store"
    args = ["run", "--workload", "register", "--nemesis", "none", "--time-limit", "8"]
    args += ["--db-opt", "recovery-timeout=10"]  # n5 never answers: the wait runs out
    proc = subprocess.Popen(
        [sys.executable, "-m", "chaos.cli", *args, "--store", str(store), "--no-live"],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    control = Control(load_nodes())
    program = DLedgerDB.zipapp
    n5 = control.remote("n5")
    try:
        while proc.poll() is None:  # until the generator phase is under way
            h = store / "latest" / "history.jsonl"
            if h.exists() and h.read_text().count("\n") >= 20:
                break
            time.sleep(0.2)
        assert proc.poll() is None, "the run ended before the node could be broken"
        # from outside: the server cannot start again, then it dies
        n5.exec_raw(f"mv {program} {program}.away && kill -9 $(cat {DLedgerDB.pidfile})", sudo=True)
        out, _ = proc.communicate(timeout=900)
    finally:
        if proc.poll() is None:
            proc.kill()
        n5.exec_raw(f"mv {program}.away {program}", sudo=True, check=False)
        control.close()
    assert proc.returncode == 1, out[-3000:]
    run = RunDir(store / "latest")
    results = json.loads(run.results_path.read_text())
    live = results["checkers"]["liveness"]
    assert results["valid"] is False and live["valid"] is False
    assert any(p.startswith("n5 does not answer") for p in live["problems"]), live
    assert live["leader"] is not None  # the other four recovered; n5 alone is what failed
    assert "liveness failure" in out and "n5 does not answer" in out
    # the verdict comes back from the stored run
    r = subprocess.run(
        [sys.executable, "-m", "chaos.cli", "check", str(run.path)], capture_output=True, text=True
    )
    assert r.returncode == 1, r.stdout + r.stderr
    assert json.loads(run.results_path.read_text())["checkers"]["liveness"]["valid"] is False


@pytest.mark.docker
@pytest.mark.slow
def test_healthy_run_records_its_recovery(tmp_path: Path) -> None:
    r = subprocess.run(
        [sys.executable, "-m", "chaos.cli", "run", "--workload", "log", "--nemesis", "partition-ring",
         "--nemesis-interval", "2", "--time-limit", "8", "--store", str(tmp_path), "--no-live"],
        capture_output=True, text=True, timeout=900,
    )  # fmt: skip
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    test = RunDir(tmp_path / "latest").load_test()
    rec = test["recovery"]
    assert rec["recovered"] is True and rec["problems"] == []
    assert {v["commit_index"] >= rec["commit_index"] for v in rec["nodes"].values()} == {True}
    assert len(rec["nodes"]) == 5 and rec["waited_s"] <= rec["bound_s"]
