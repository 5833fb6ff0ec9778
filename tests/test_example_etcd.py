"""A third-party store plugged in from outside the package: ``examples/etcd.py`` (Debian's etcd-server)
run by ``chaos run --db examples.etcd:EtcdDB`` on 5 real containers (issue 15).

The linearizable configuration is VALID under majorities-ring partitions and kills; the known-weak
one (``--db-opt reads=serializable``: a member serves reads from its local state) is INVALID under
partitions isolating the leader, and the counterexample is a stale read: an ok read returning a value
other than the register's, served while the member was cut off.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytestmark = [pytest.mark.docker, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[1]
CLUSTER = "tetcd"


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    """The environment of the runs: their own CHAOS_HOME (cluster state, key pair), the repository
    root on PYTHONPATH so ``examples.etcd`` imports as a plug-in would; the cluster is removed after."""
    from chaos.cluster.docker import DockerProvider

    home = tmp_path_factory.mktemp("chaos-home")
    env = dict(os.environ, CHAOS_HOME=str(home), PYTHONPATH=str(ROOT))
    yield env
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
    """``chaos run --db examples.etcd:EtcdDB`` on the test's cluster: exit status, output, run directory."""
    cmd = [
        sys.executable,
        "-m",
        "chaos.cli",
        "run",
        "--db",
        "examples.etcd:EtcdDB",
        "--cluster-name",
        CLUSTER,
    ]
    cmd += ["--node-count", "5", "--workload", "register", "--store", str(store), "--no-live", *args]
    p = subprocess.run(cmd, env=env, cwd=store.parent, capture_output=True, text=True, timeout=900)
    return p.returncode, p.stdout + p.stderr, (store / "latest").resolve()


def faults_applied(run_dir: Path) -> dict[str, int]:
    """Fault kind -> how many nemesis start ops took effect (``applied: true``) in the history."""
    out: dict[str, int] = {}
    for line in (run_dir / "history.jsonl").read_text().splitlines():
        op = json.loads(line)
        v = op.get("value")
        if (
            op["process"] == "nemesis"
            and op["f"].startswith("start-")
            and isinstance(v, dict)
            and v.get("applied")
        ):
            kind = op["f"][len("start-") :]
            out[kind] = out.get(kind, 0) + 1
    return out


def test_linearizable_reads_valid_under_partition_ring_and_kill(env: dict[str, str], tmp_path: Path) -> None:
    nemesis = ["--nemesis", "partition-ring,kill", "--nemesis-interval", "5", "--time-limit", "25"]
    code, out, run_dir = run(env, tmp_path / "store", *nemesis)
    assert code == 0, out[-4000:]
    assert "etcd setup on 5 nodes (etcd-server from Debian, linearizable reads)" in out
    results = json.loads((run_dir / "results.json").read_text())
    assert results["valid"] is True
    lin = results["checkers"]["linear"]
    assert lin["valid"] is True and not lin.get("failures")
    test = json.loads((run_dir / "test.json").read_text())
    assert test["db"] == "examples.etcd:EtcdDB"
    applied = faults_applied(run_dir)
    assert applied.get("partition", 0) >= 1 and applied.get("kill", 0) >= 1, applied
    ok = [
        json.loads(ln) for ln in (run_dir / "history.jsonl").read_text().splitlines() if '"type":"ok"' in ln
    ]
    assert sum(1 for op in ok if op["f"] == "read") > 50 and sum(1 for op in ok if op["f"] == "cas") > 5
    assert all((run_dir / "nodes" / n / "etcd.log").is_file() for n in ("n1", "n2", "n3", "n4", "n5"))
    # nothing of DLedger's on the nodes: neither the image nor the OS setup installs its packages
    probe = "dpkg -s python3-msgpack >/dev/null 2>&1 && echo installed || echo absent"
    cmd = [sys.executable, "-m", "chaos.cli", "cluster", "exec", "--cluster-name", CLUSTER, "--", probe]
    p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stdout + p.stderr
    assert sorted(p.stdout.splitlines()) == [f"[n{i}] absent" for i in range(1, 6)]


def stale_reads(results: dict[str, Any]) -> list[dict[str, Any]]:
    """The counterexamples whose failing op is an ok read of a value the register did not hold."""
    out = []
    for key in results["checkers"]["linear"].get("failures") or []:
        ce = results["checkers"]["linear"]["keys"][str(key)]["counterexample"]
        failing = next(op for op in ce["ops"] if op["id"] == ce["failing"])
        if failing["f"] == "read" and failing["type"] == "ok":
            out.append({"key": key, "read": failing["description"], "state": ce["failing_state"]})
    return out


def test_serializable_reads_invalid_with_a_stale_read(env: dict[str, str], tmp_path: Path) -> None:
    nemesis = ["--nemesis", "partition-leader", "--nemesis-interval", "5", "--time-limit", "30"]
    for attempt in range(3):  # a stale read needs a read on the cut-off leader inside a short window
        code, out, run_dir = run(
            env,
            tmp_path / f"store{attempt}",
            "--db-opt",
            "reads=serializable",
            "--concurrency",
            "4n",
            *nemesis,
        )
        if code == 1:
            break
    assert code == 1, out[-4000:]
    assert "serializable reads" in out and "not linearizable: key" in out
    assert any(line.startswith("INVALID: ") for line in out.splitlines()), out[-2000:]  # the verdict, last
    results = json.loads((run_dir / "results.json").read_text())
    assert results["valid"] is False and results["checkers"]["linear"]["valid"] is False
    stale = stale_reads(results)
    assert stale, results["checkers"]["linear"]
    for s in stale:  # what the read returned is not what the register held then
        assert s["read"].split("-> ")[1] != str(s["state"]), s
    assert json.loads((run_dir / "test.json").read_text())["db_opts"] == {"reads": "serializable"}
    assert faults_applied(run_dir).get("partition", 0) >= 1
