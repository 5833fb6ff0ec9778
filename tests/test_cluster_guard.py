"""Issue 36 items 4 and 5, against real containers of a cluster of the test's own name: no command
destroys a cluster as a side effect. ``chaos cluster down`` refuses a cluster a live run holds (its
lock on the nodes; ``--force`` overrides), as ``cluster up`` and ``chaos run`` do; ``chaos run
--node-count N`` never removes nodes of an existing larger cluster (it removed ``chaos-n2..n5`` of
the shared default cluster): it refuses with one line naming ``chaos cluster up --nodes N`` and
``--cluster-name``, and the cluster is untouched. ``chaos cluster up --nodes N`` (the user's
explicit word on the size) still resizes."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import docker
import pytest

from chaos.cluster.image import LABEL

pytestmark = pytest.mark.docker
NAME = "tguard"
FORCED = "tguardf"  # the --force test's own cluster


def chaos(*args: str, home: Path, timeout: float = 900) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "CHAOS_HOME": str(home)}
    return subprocess.run(
        [sys.executable, "-m", "chaos.cli", *args], capture_output=True, text=True, env=env, timeout=timeout
    )


def _containers(name: str = NAME) -> dict[str, str]:
    flt = {"label": [f"{LABEL}.cluster={name}"]}
    return {c.name: c.id for c in docker.from_env().containers.list(all=True, filters=flt)}


@pytest.fixture(scope="module")
def home(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    home = tmp_path_factory.mktemp("home")
    try:
        r = chaos("cluster", "up", "--nodes", "3", "--cluster-name", NAME, "--no-os-setup", home=home)
        assert r.returncode == 0, r.stderr
        yield home
    finally:
        chaos("cluster", "down", "--cluster-name", NAME, "--force", home=home)
        assert _containers() == {}


def test_a_run_with_fewer_nodes_refuses_and_leaves_the_cluster_whole(home: Path, tmp_path: Path) -> None:
    before = _containers()
    assert len(before) == 3
    r = chaos(
        "run", "--cluster-name", NAME, "--node-count", "1", "--time-limit", "1", "--no-live",
        "--store", str(tmp_path / "store"), home=home,
    )  # fmt: skip
    assert r.returncode == 254, (r.returncode, r.stdout[-2000:], r.stderr)
    (line,) = r.stderr.strip().splitlines()
    assert line.startswith(f"chaos: --node-count 1: the docker cluster '{NAME}' has 3 nodes"), line
    assert "n2, n3 would go" in line and f"`chaos cluster up --nodes 1 --cluster-name {NAME}`" in line, line
    assert "--cluster-name NAME" in line, line
    assert _containers() == before  # the same containers, none removed or replaced
    assert not (tmp_path / "store").exists()

    # the explicit command still resizes
    r = chaos("cluster", "up", "--nodes", "2", "--cluster-name", NAME, "--no-os-setup", home=home)
    assert r.returncode == 0, r.stderr
    after = _containers()
    assert sorted(after) == [f"chaos-{NAME}-n1", f"chaos-{NAME}-n2"]
    assert all(after[c] == before[c] for c in after)


def test_down_refuses_a_cluster_a_live_run_holds(home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from chaos.cluster.docker import load_nodes
    from chaos.cluster.lock import ClusterLock
    from chaos.control.ssh import Control

    monkeypatch.setenv("CHAOS_HOME", str(home))
    with Control(load_nodes(NAME)) as control:
        lock = ClusterLock(control, "register-partition", "/tmp/store-live")  # this live process
        lock.acquire()
        try:
            before = _containers()
            r = chaos("cluster", "down", "--cluster-name", NAME, home=home)
            assert r.returncode == 254, (r.returncode, r.stdout, r.stderr)
            (line,) = r.stderr.strip().splitlines()
            assert line.startswith(
                "chaos: the cluster is in use by run register-partition in store /tmp/store-live"
            )
            assert line.endswith(
                "wait for that run to end, or pass --force to remove the cluster under it"
            ), line
            assert "removed" not in r.stdout
            assert _containers() == before and (home / f"cluster-{NAME}" / "nodes.json").is_file()
            control.on_nodes(lambda rem: rem.exec("true"))  # the run still reaches its nodes
        finally:
            lock.release()
    # the lock released: down goes ahead
    r = chaos("cluster", "down", "--cluster-name", NAME, home=home)
    assert r.returncode == 0, r.stderr
    assert r.stdout.count("removed container") == len(before) and _containers() == {}


def test_down_force_removes_a_held_cluster(tmp_path: Path) -> None:
    home = tmp_path / "home"
    r = chaos("cluster", "up", "--nodes", "1", "--cluster-name", FORCED, "--no-os-setup", home=home)
    assert r.returncode == 0, r.stderr
    try:
        node = docker.from_env().containers.get(f"chaos-{FORCED}-n1")
        # a lock left by a run on another control host: not provably gone, so honoured
        record = '{"run":"log-kill","host":"another-host","pid":1,"token":"t"}'
        node.exec_run(["sh", "-c", f"mkdir -p /var/lib/chaos && echo '{record}' > /var/lib/chaos/run.lock"])
        r = chaos("cluster", "down", "--cluster-name", FORCED, home=home)
        assert r.returncode == 254 and "log-kill" in r.stderr and "--force" in r.stderr, r.stderr
        assert list(_containers(FORCED)) == [f"chaos-{FORCED}-n1"]
    finally:
        r = chaos("cluster", "down", "--cluster-name", FORCED, "--force", home=home)
    assert r.returncode == 0 and "removed container" in r.stdout, r.stdout + r.stderr
    assert _containers(FORCED) == {}
