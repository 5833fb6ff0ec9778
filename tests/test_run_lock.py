"""One run per cluster (chaos.cluster.lock) and output that survives a pipe.

Against the real Docker cluster's sshd: the lock file is created atomically on every node, a second
holder is refused with the first one named, a lock a dead process of this host left is replaced, a
foreign host's lock needs ``break_lock``. End to end: a second ``chaos run`` while one runs exits 254
naming the first and writes no run directory; the first still ends valid. The first run's piped
output keeps its long store path on one line, never cut with "…".
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from chaos.cluster.lock import (
    LOCK_PATH,
    ClusterLock,
    ClusterLocked,
    _proc_start,
    holders,
    is_stale,
    live_here,
    parse,
)


def _dead_pid() -> int:
    p = subprocess.Popen(["true"])
    p.wait()
    return p.pid  # reaped: no process has it (until the pid counter wraps)


def test_stale_rules() -> None:
    me = {"host": "ctl", "pid": _dead_pid()}
    assert is_stale(me, host="ctl")
    assert not is_stale(me, host="other")  # another host's run: only --break-lock clears it
    import os

    assert not is_stale({"host": "ctl", "pid": os.getpid()}, host="ctl")
    # this very process, in a run that has ended (its token is no longer held): stale
    import socket

    from chaos.cluster.lock import _proc_start

    mine = {"host": socket.gethostname(), "pid": os.getpid(), "pid_start": _proc_start(os.getpid())}
    assert is_stale({**mine, "token": "an-ended-run"})
    assert parse("not json")["raw"] == "not json"


def test_live_here_rules() -> None:
    """A holder is provably alive only on this host with its pid running since the recorded start."""
    host = socket.gethostname()
    with subprocess.Popen(["sleep", "60"]) as p:
        try:
            alive = {"host": host, "pid": p.pid, "pid_start": _proc_start(p.pid)}
            assert live_here(alive)
            assert not live_here({**alive, "pid_start": (alive["pid_start"] or 0) + 1})  # pid reused
            assert not live_here({**alive, "host": "some-other-control-host"})  # cannot be proved
        finally:
            p.kill()
    assert not live_here({"host": host, "pid": _dead_pid()})


@pytest.fixture
def control():  # the real Docker cluster's nodes, no lock file before or after
    from chaos.cluster.docker import DockerProvider
    from chaos.control.ssh import Control

    c = Control(DockerProvider(nodes=5).up())
    c.on_nodes(lambda r: r.exec_raw(f"rm -f {LOCK_PATH}", sudo=True))
    yield c
    c.on_nodes(lambda r: r.exec_raw(f"rm -f {LOCK_PATH}", sudo=True))
    c.close()


@pytest.mark.docker
def test_lock_on_the_nodes(control) -> None:
    first = ClusterLock(control, "register-none", "/tmp/store-a")
    first.acquire()
    assert set(holders([control.remote(n) for n in control.names])) == set(control.names)
    second = ClusterLock(control, "log-kill", "/tmp/store-b")
    with pytest.raises(ClusterLocked) as e:
        second.acquire()
    assert "register-none in store /tmp/store-a" in str(e.value) and "--break-lock" in str(e.value)
    assert second.held == []
    assert {h["token"] for h in holders([control.remote(n) for n in control.names]).values()} == {
        first.record["token"]
    }  # the refused run removed nothing
    first.release()
    assert holders([control.remote(n) for n in control.names]) == {}

    # a lock this host's SIGKILLed run left (pid gone) is replaced
    stale = dict(first.record, pid=_dead_pid(), token="stale-token")
    control.on_nodes(lambda r: r.write_file(LOCK_PATH, json.dumps(stale) + "\n", sudo=True))
    third = ClusterLock(control, "register-none", "/tmp/store-c")
    third.acquire()
    assert {h["token"] for h in holders([control.remote(n) for n in control.names]).values()} == {
        third.record["token"]
    }
    third.release()

    # another host's lock is honoured until broken
    foreign = dict(first.record, host="some-other-control-host", token="foreign-token")
    control.remote("n3").write_file(LOCK_PATH, json.dumps(foreign) + "\n", sudo=True)
    fourth = ClusterLock(control, "register-none", "/tmp/store-d")
    with pytest.raises(ClusterLocked, match="some-other-control-host"):
        fourth.acquire()
    assert holders([control.remote(n) for n in control.names]).keys() == {"n3"}  # n1, n2 given back
    fourth.acquire(break_lock=True)
    assert len(holders([control.remote(n) for n in control.names])) == 5
    fourth.release()


@pytest.mark.docker
def test_lock_wait_takes_the_cluster_once_the_holder_ends(control) -> None:
    """``chaos run --lock-wait S``: a run that finds the cluster held waits (saying for whom) and
    takes it once the holder releases; a holder that outlasts the wait is still refused."""
    import threading

    first = ClusterLock(control, "register-none", "/tmp/store-a")
    first.acquire()
    said: list[str] = []
    second = ClusterLock(control, "log-kill", "/tmp/store-b", log=said.append)
    t0 = time.monotonic()
    with pytest.raises(ClusterLocked, match="register-none"):
        second.acquire(wait_s=1.5, poll_s=0.5)
    assert time.monotonic() - t0 >= 1.5 and second.held == []
    assert len(said) == 1 and "waiting up to" in said[0] and "register-none" in said[0]
    threading.Timer(2.0, first.release).start()
    second.acquire(wait_s=60, poll_s=0.5)
    assert {h["token"] for h in holders([control.remote(n) for n in control.names]).values()} == {
        second.token
    }
    second.release()


@pytest.mark.docker
def test_break_lock_refuses_a_live_holder_on_this_host(control) -> None:
    """--break-lock never breaks the lock of a run still alive here (issue 26: both runs then
    reported false INVALID verdicts); it names the holder and removes nothing."""
    with subprocess.Popen(["sleep", "120"]) as live:
        try:
            holder = {
                "run": "register-live",
                "store": "/tmp/store-live",
                "host": socket.gethostname(),
                "pid": live.pid,
                "pid_start": _proc_start(live.pid),
                "token": "live-token",
            }
            control.on_nodes(lambda r: r.write_file(LOCK_PATH, json.dumps(holder) + "\n", sudo=True))
            breaker = ClusterLock(control, "register-none", "/tmp/store-e")
            with pytest.raises(ClusterLocked, match="still running on this host") as e:
                breaker.acquire(break_lock=True)
            assert "register-live" in str(e.value) and f"pid {live.pid}" in str(e.value)
            held = holders([control.remote(n) for n in control.names])
            assert {h["token"] for h in held.values()} == {"live-token"} and len(held) == 5
        finally:
            live.kill()
    # once the holder is gone, --break-lock (or the stale rule) clears it
    breaker.acquire(break_lock=True)
    assert {h["token"] for h in holders([control.remote(n) for n in control.names]).values()} == {
        breaker.token
    }
    breaker.release()


@pytest.mark.docker
def test_two_runs_replacing_one_stale_lock_at_once_one_gets_it(control) -> None:
    from concurrent.futures import ThreadPoolExecutor

    for attempt in range(8):
        stale = {
            "run": "killed",
            "host": socket.gethostname(),
            "pid": _dead_pid(),
            "token": f"stale-{attempt}",
        }
        line = json.dumps(stale) + "\n"
        control.on_nodes(lambda r, line=line: r.write_file(LOCK_PATH, line, sudo=True))
        locks = [ClusterLock(control, f"run-{i}", f"/tmp/store-{i}") for i in range(2)]

        def take(lock: ClusterLock) -> bool:
            try:
                lock.acquire()
            except ClusterLocked:
                return False
            return True

        with ThreadPoolExecutor(2) as pool:
            got = list(pool.map(take, locks))
        assert sorted(got) == [False, True], attempt
        winner = locks[got.index(True)]
        held = holders([control.remote(n) for n in control.names])
        assert {h["token"] for h in held.values()} == {winner.token} and len(held) == 5
        winner.release()


@pytest.mark.docker
@pytest.mark.slow
def test_second_concurrent_run_exits_254_naming_the_first(tmp_path: Path) -> None:
    long_store = tmp_path / (
        "a-directory-name-long-enough-that-the-run-path-passes-eighty-columns" + "-x" * 10
    )
    other_store = tmp_path / "other"
    first = subprocess.Popen(
        [sys.executable, "-m", "chaos.cli", "run", "--workload", "register", "--nemesis", "none",
         "--time-limit", "10", "--store", str(long_store), "--no-live"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    try:
        while first.poll() is None and not (long_store / "latest" / "history.jsonl").exists():
            time.sleep(0.2)
        assert first.poll() is None, "the first run ended before the second could start"
        second = subprocess.run(
            [
                sys.executable,
                "-m",
                "chaos.cli",
                "run",
                "--time-limit",
                "5",
                "--store",
                str(other_store),
                "--no-live",
            ],
            capture_output=True,
            text=True,
            timeout=600,
        )
        out, _ = first.communicate(timeout=900)
    finally:
        if first.poll() is None:
            first.kill()
    assert second.returncode == 254, second.stdout + second.stderr
    msg = second.stdout + second.stderr
    assert "register-none" in msg and str(long_store) in msg and "--break-lock" in msg
    assert not other_store.exists() or not any(other_store.iterdir())  # no run directory
    assert first.returncode == 0, out[-3000:]
    # output that survives a pipe: the long path on one line, never wrapped or cut with "…"
    run_dir = (long_store / "latest").resolve()
    assert f"run directory {run_dir}\n" in out
    assert f"report: {run_dir}/index.html" in out
    assert "…" not in out
    # the first run released its lock
    from chaos.cluster.docker import load_nodes
    from chaos.control.ssh import Control

    c = Control(load_nodes())
    try:
        assert holders([c.remote(n) for n in c.names]) == {}
    finally:
        c.close()
