"""`chaos cluster` end to end against the real Docker engine: up, no-op up, status, exec, down."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import docker
import pytest

from chaos.cluster.image import LABEL

pytestmark = pytest.mark.docker
NAME = "tcli"


def chaos(
    *args: str, home: Path, env: dict[str, str] | None = None, timeout: float = 600
) -> subprocess.CompletedProcess:
    e = {**os.environ, "CHAOS_HOME": str(home), **(env or {})}
    return subprocess.run(
        [sys.executable, "-m", "chaos.cli", *args], capture_output=True, text=True, env=e, timeout=timeout
    )


def _leftovers() -> tuple[list[str], list[str]]:
    client = docker.from_env()
    flt = {"label": [f"{LABEL}.cluster={NAME}"]}
    containers = [c.name for c in client.containers.list(all=True, filters=flt)]
    networks = [n.name for n in client.networks.list(filters=flt)]
    return containers, networks


def test_up_noop_status_exec_down(tmp_path: Path) -> None:
    home = tmp_path / "home"
    try:
        r = chaos("cluster", "up", "--nodes", "5", "--cluster-name", NAME, home=home)
        assert r.returncode == 0, r.stderr
        lines = r.stdout.strip().splitlines()
        assert len(lines) == 5
        hostnames = [ln.split("hostname=")[1] for ln in lines]
        assert hostnames == ["n1", "n2", "n3", "n4", "n5"]
        state = home / f"cluster-{NAME}"
        nodes = json.loads((state / "nodes.json").read_text())
        assert [n["name"] for n in nodes] == hostnames
        assert len({n["host"] for n in nodes}) == 5
        assert (state / "id_ed25519").stat().st_mode & 0o777 == 0o600
        ids_before = {c: docker.from_env().containers.get(c).id for c in _leftovers()[0]}

        # up on a live cluster is a no-op: same containers, same key
        key_before = (state / "id_ed25519").read_bytes()
        r = chaos("cluster", "up", "--nodes", "5", "--cluster-name", NAME, home=home)
        assert r.returncode == 0, r.stderr
        assert "creating" not in r.stderr
        assert {c: docker.from_env().containers.get(c).id for c in _leftovers()[0]} == ids_before
        assert (state / "id_ed25519").read_bytes() == key_before

        r = chaos("cluster", "status", "--cluster-name", NAME, home=home)
        assert r.returncode == 0, r.stdout + r.stderr
        assert r.stdout.count("ssh ok") == 5 and r.stdout.count("running") == 5

        r = chaos(
            "cluster",
            "exec",
            "--cluster-name",
            NAME,
            "--",
            "hostname; iptables -L INPUT -n >/dev/null && echo ipt",
            home=home,
        )
        assert r.returncode == 0, r.stdout + r.stderr
        for i in range(1, 6):
            assert f"[n{i}] n{i}" in r.stdout and f"[n{i}] ipt" in r.stdout

        r = chaos("cluster", "exec", "--cluster-name", NAME, "--", "echo oops >&2; exit 4", home=home)
        assert r.returncode == 1 and "[n3] !oops" in r.stdout and "[n3] exit 4" in r.stdout
    finally:
        r = chaos("cluster", "down", "--cluster-name", NAME, home=home)
    assert r.returncode == 0, r.stderr
    assert r.stdout.count("removed container") == 5 and "removed network" in r.stdout
    assert _leftovers() == ([], [])
    assert not (home / f"cluster-{NAME}").exists()
    # down again: nothing to do
    r = chaos("cluster", "down", "--cluster-name", NAME, home=home)
    assert r.returncode == 0 and "no docker cluster" in r.stdout


def test_up_under_another_home_replaces_containers_that_authorise_the_old_key(tmp_path: Path) -> None:
    """Containers of the same name left by another CHAOS_HOME (a killed test session, a removed state
    directory) authorise a key the new home does not hold: `up` replaces them instead of failing at
    ssh authentication, and stopped ones are not merely restarted."""
    first, second = tmp_path / "first", tmp_path / "second"
    try:
        r = chaos("cluster", "up", "--nodes", "3", "--cluster-name", NAME, home=first)
        assert r.returncode == 0, r.stderr
        old_ids = {c: docker.from_env().containers.get(c).id for c in _leftovers()[0]}
        docker.from_env().containers.get(f"chaos-{NAME}-n1").stop(timeout=1)

        r = chaos("cluster", "up", "--nodes", "3", "--cluster-name", NAME, home=second)
        assert r.returncode == 0, r.stderr
        assert r.stderr.count("authorises another key") == 3, r.stderr
        new_ids = {c: docker.from_env().containers.get(c).id for c in _leftovers()[0]}
        assert set(new_ids) == set(old_ids) and not set(new_ids.values()) & set(old_ids.values())
        r = chaos("cluster", "status", "--cluster-name", NAME, home=second)
        assert r.returncode == 0 and r.stdout.count("ssh ok") == 3, r.stdout + r.stderr
    finally:
        chaos("cluster", "down", "--cluster-name", NAME, home=second)
        chaos("cluster", "down", "--cluster-name", NAME, home=first)
    assert _leftovers() == ([], [])


@pytest.mark.parametrize(
    "args",
    [
        ["cluster", "up", "--cluster-name", "tnone"],
        ["cluster", "down", "--cluster-name", "tnone"],
        ["run", "--cluster-name", "tnone", "--time-limit", "1", "--no-live"],
    ],
)
def test_missing_docker_engine_is_one_line_naming_the_fix(tmp_path: Path, args: list[str]) -> None:
    """Issue 35 item 7: no Docker engine is the machine's setup, not a crash of the tool (255):
    one line naming the engine's address and the fix, exit 254."""
    store = ["--store", str(tmp_path / "store")] if args[0] == "run" else []
    r = chaos(*args, *store, home=tmp_path, env={"DOCKER_HOST": "unix:///nonexistent/docker.sock"})
    assert r.returncode == 254, (r.returncode, r.stderr)
    (err,) = r.stderr.strip().splitlines()
    assert err.startswith("chaos: Docker engine not reachable at unix:///nonexistent/docker.sock"), err
    assert "crashed" not in err and "sudo systemctl start docker" in err and "--provider ssh" in err
    assert not (tmp_path / "store").exists()


def test_unreachable_ssh_host_is_one_clear_line(tmp_path: Path) -> None:
    key = tmp_path / "k"
    key.write_text("not a key")
    r = chaos(
        "cluster",
        "status",
        "--nodes",
        "db1=127.0.0.1:1",
        "--ssh-private-key",
        str(key),
        home=tmp_path,
        timeout=60,
    )
    assert r.returncode == 1
    assert "db1" in r.stdout and "ssh FAILED" in r.stdout and "unreachable" in r.stdout


@pytest.mark.parametrize(
    "args, expect",
    [
        (["cluster", "up", "--nodes", "0"], "expected an integer number of nodes"),
        (["cluster", "up", "--provider", "ssh"], "needs --nodes"),
        (["cluster", "up", "--nodes-file", "/nonexistent/nodes.txt"], "nodes file /nonexistent/nodes.txt"),
        (["cluster", "up", "--nodes", "a,b", "--ssh-private-key", "/nonexistent/key"], "/nonexistent/key"),
        (["cluster", "up", "--nodes", "a,,b=c:99999"], "port 99999"),
        (["cluster", "up", "--cluster-name", "Bad Name"], "cluster name"),
        (["cluster", "exec", "--timeout", "0", "--", "true"], "--timeout"),
        (["cluster", "up", "--bogus"], "No such option"),
    ],
)
def test_bad_arguments_exit_254(tmp_path: Path, args: list[str], expect: str) -> None:
    r = chaos(*args, home=tmp_path, timeout=60)
    assert r.returncode == 254, (r.stdout, r.stderr)
    assert expect in r.stderr
