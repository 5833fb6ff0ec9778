"""The plug-in API on a real cluster (issue 34): a plug-in written against the previous contract
runs unchanged with one deprecation line, and a plug-in whose client raises on every op ends
unknown (exit 2) with the exception and its file:line in the summary, never invalid or
"unavailable". Both DBs keep their state in the control process, so the runs need only the
nodes (a named 3-node docker cluster, ``apitest``) and their SSH."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PLUGINS = ROOT / "tests" / "data" / "plugins"
CLUSTER = "apitest"

pytestmark = [pytest.mark.docker, pytest.mark.slow]


@pytest.fixture(scope="module")
def cluster() -> Iterator[str]:
    from chaos.cluster.docker import DockerProvider

    provider = DockerProvider(3, name=CLUSTER, ssh_timeout=300)  # a loaded machine starts sshd slowly
    try:
        provider.up()
        yield CLUSTER
    finally:
        provider.down()


def run(tmp_path: Path, db: str, *extra: str) -> tuple[subprocess.CompletedProcess[str], Path]:
    store = tmp_path / "store"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(PLUGINS), str(ROOT)])}
    r = subprocess.run(
        [sys.executable, "-m", "chaos.cli", "run", "--cluster-name", CLUSTER, "--db", db,
         "--workload", "register", "--time-limit", "6", "--store", str(store), "--no-live", *extra],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    runs = {p.resolve().parent for p in store.glob("*/*/test.json")}
    assert len(runs) == 1, (r.stdout[-3000:], r.stderr[-3000:])
    return r, runs.pop()


def test_a_plugin_of_the_previous_contract_runs_unchanged_with_one_deprecation_line(
    cluster: str, tmp_path: Path
) -> None:
    source = (PLUGINS / "old_contract_db.py").read_text()
    assert "from chaos.workloads.clients import NotSent" in source and "test.control.node(node)" in source
    r, run_dir = run(tmp_path, "old_contract_db:OldContractDB")
    out = r.stdout + r.stderr
    assert r.returncode == 0, out[-4000:]
    lines = [ln for ln in out.splitlines() if "deprecated" in ln]
    assert len(lines) == 1, lines
    assert lines[0].startswith("deprecated: chaos.workloads.clients is deprecated since API 1.0.0")
    assert "chaos.api" in lines[0]
    test = json.loads((run_dir / "test.json").read_text())
    assert test["deprecations"] == [lines[0].removeprefix("deprecated: ")]
    results = json.loads((run_dir / "results.json").read_text())
    assert results["valid"] is True and results["checkers"]["client-errors"]["count"] == 0
    assert results["checkers"]["stats"]["ok"] > 0


def test_a_client_that_raises_on_every_op_is_unknown_naming_the_exception_and_line(
    cluster: str, tmp_path: Path
) -> None:
    r, run_dir = run(tmp_path, "crashing_db:CrashingDB")
    out = r.stdout + r.stderr
    assert r.returncode == 2, out[-4000:]
    results = json.loads((run_dir / "results.json").read_text())
    crashed = results["checkers"]["client-errors"]
    n = crashed["ops"]
    assert n > 10 and crashed["count"] == n, crashed
    (err,) = crashed["errors"]
    assert (err["type"], err["where"]) == ("ValueError", "crashing_db.py:17"), err
    assert err["message"].startswith("unknown node Node(name='n")
    assert results["valid"] == "unknown" and results["checkers"]["stats"]["valid"] == "unknown"
    assert results["checkers"]["perf"]["ops"]["fail"] == 0  # nothing filed as "unavailable"
    row = "client errors: ValueError: unknown node Node(name='n"
    assert row in r.stdout, r.stdout[-4000:]
    assert f"at crashing_db.py:17, {n:,} of {n:,} ops" in r.stdout, r.stdout[-4000:]
    assert "cause: client errors: ValueError" in r.stdout
    assert "\nunknown: " in r.stdout and "INVALID" not in r.stdout
    history = (run_dir / "history.jsonl").read_text()
    assert '"client_error"' in history


def test_declared_logs_are_downloaded_without_patterns_and_a_missing_one_is_reported(
    cluster: str, tmp_path: Path
) -> None:
    r, run_dir = run(tmp_path, "logged_db:LoggedDB")
    out = r.stdout + r.stderr
    assert r.returncode == 0, out[-4000:]
    test = json.loads((run_dir / "test.json").read_text())
    assert test["db_capabilities"] == ["clients", "log-files"] and "server-logs" in test["checkers"]
    for node in ("n1", "n2", "n3"):
        assert (run_dir / "nodes" / node / "hostname").read_text().strip(), node  # no pattern needed
        assert not (run_dir / "nodes" / node / "chaos-no-such-daemon.log").exists()  # not an empty file
        assert f"missing: log {node}:/var/log/chaos-no-such-daemon.log not downloaded (" in r.stdout
    assert len(test["node_logs"]["missing"]) == 3
    logs = json.loads((run_dir / "results.json").read_text())["checkers"]["server-logs"]
    assert len(logs["not_downloaded"]) == 3 and "3 declared log(s) not on their node" in logs["summary"]
