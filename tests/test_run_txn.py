"""``chaos run --workload list-append`` against DLedger on its own 5-node docker cluster (issue 24):
strict-serializable under ``partition-ring,kill-leader`` with the correct server, and invalid with
``--read-mode unsafe`` (a read-only transaction served from a lagging member's state: a realtime
cycle), whose cycle the report's transactional section draws."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from chaos.history.report.txn import anomaly_band_html, txn_section_html

pytestmark = [pytest.mark.docker, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[1]
CLUSTER = "ttxn"


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    from chaos.cluster.docker import DockerProvider

    home = tmp_path_factory.mktemp("chaos-home")
    env = dict(os.environ, CHAOS_HOME=str(home), PYTHONPATH=str(ROOT))
    try:
        yield env
    finally:
        old = os.environ.get("CHAOS_HOME")
        os.environ["CHAOS_HOME"] = str(home)
        try:
            DockerProvider(5, name=CLUSTER).down()
        finally:
            if old is None:
                os.environ.pop("CHAOS_HOME", None)
            else:
                os.environ["CHAOS_HOME"] = old


def run(env: dict[str, str], store: Path, *args: str) -> tuple[int, str, Path]:
    cmd = [sys.executable, "-m", "chaos.cli", "run", "--cluster-name", CLUSTER, "--node-count", "5"]
    cmd += ["--workload", "list-append", "--nemesis", "partition-ring,kill-leader", "--nemesis-interval", "5"]
    cmd += ["--time-limit", "20", "--store", str(store), "--no-live", *args]
    p = subprocess.run(cmd, env=env, cwd=store.parent, capture_output=True, text=True, timeout=600)
    return p.returncode, p.stdout + p.stderr, (store / "latest").resolve()


def test_list_append_is_strict_serializable_on_the_correct_server(
    env: dict[str, str], tmp_path: Path
) -> None:
    code, out, run_dir = run(env, tmp_path / "store")
    assert code == 0, out[-4000:]
    results = json.loads((run_dir / "results.json").read_text())
    elle = results["checkers"]["elle"]
    assert elle["valid"] is True and elle["consistency_model"] == "strict-serializable" and elle["txns"] > 100
    test = json.loads((run_dir / "test.json").read_text())
    assert test["workload"] == "list-append" and test["checkers"][:1] == ["elle"]
    kinds = results["checkers"]["faults"]["kinds"]
    assert kinds["partition"]["applied"] >= 1 and kinds["kill"]["applied"] >= 1, kinds
    assert "no anomaly" in anomaly_band_html(results)


def test_unsafe_reads_are_caught_and_the_cycle_drawn(env: dict[str, str], tmp_path: Path) -> None:
    for attempt in range(3):
        code, out, run_dir = run(env, tmp_path / f"u{attempt}", "--read-mode", "unsafe")
        if code == 1:
            break
    assert code == 1, out[-4000:]
    results = json.loads((run_dir / "results.json").read_text())
    elle = results["checkers"]["elle"]
    assert elle["valid"] is False
    realtime_or_single = [
        a for a in elle["anomaly_types"] if a.endswith("-realtime") or a.startswith("G-single")
    ]
    assert realtime_or_single, elle["summary"]
    section = txn_section_html(results)
    kind = realtime_or_single[0]
    assert f"<h3>{kind} &times;{elle['counts'][kind]}" in section and "<svg" in section
