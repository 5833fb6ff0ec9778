"""Snapshots and log compaction on 3 real members: restart from the newest snapshot, and a paused
follower brought back with INSTALL_SNAPSHOT."""

from __future__ import annotations

import re
import signal
import threading
import time
from pathlib import Path

import pytest
from test_dledger_cluster import Cluster


def _write(c: Cluster, n: int, threads: int = 8, prefer: str | None = None) -> dict[str, int]:
    """``n`` kv puts over ``threads`` clients; returns the expected final state."""
    expected: dict[str, int] = {}
    failed: list[object] = []
    lock = threading.Lock()

    def worker(t: int) -> None:
        with c.client(prefer=prefer, timeout=3.0) as cl:
            for i in range(t, n, threads):
                key = f"k{i % 97}"
                r = cl.kv_put(key, i)
                with lock:
                    if not r.ok:
                        failed.append(r)
                    elif expected.get(key, -1) < i:
                        expected[key] = i

    ts = [threading.Thread(target=worker, args=(t,)) for t in range(threads)]
    for th in ts:
        th.start()
    for th in ts:
        th.join()
    assert len(failed) <= n // 50, failed[:3]  # a loaded machine may time out a few (indeterminate)
    return expected


def _state(c: Cluster, node: str, keys: list[str]) -> dict[str, object]:
    with c.client(prefer=node, timeout=2.0) as cl:
        return {k: cl.kv_get(k, read_mode="unsafe").value for k in keys}


@pytest.mark.slow
def test_restart_loads_newest_snapshot_and_replays_the_rest(tmp_path: Path) -> None:
    c = Cluster(tmp_path, 3, "--snapshot-every", "300", "--data-file-size", "65536")
    c.start_all()
    try:
        c.leader()
        _write(c, 1500)
        c.wait_caught_up()
        keys = [f"k{i}" for i in range(97)]
        before = _state(c, "n0", keys)
        assert all(v is not None for v in before.values())
        assert c.meta("n0")["ledgerBeginIndex"] > 0, "the log prefix was not compacted"
        c.stop_all()
        c.start_all()
        c.leader()
        c.wait_caught_up()
        for n in c.ids:
            log = (tmp_path / f"{n}.log").read_text()
            assert "loaded snapshot at" in log
            assert _state(c, n, keys) == before
            snaps = sorted((tmp_path / "store" / f"dledger-{n}" / "snapshot").glob("snapshot_*"))
            assert 1 <= len(snaps) <= 3
    finally:
        for n in list(c.procs):
            c.kill(n)


@pytest.mark.slow
@pytest.mark.parametrize("store", ["memory", "file"])
def test_paused_follower_rejoins_through_install_snapshot(tmp_path: Path, store: str) -> None:
    """SIGSTOP keeps the follower's state while 5,000 entries are written and compacted; it rejoins
    through INSTALL_SNAPSHOT (the file store restarts its log with reset) with the same KV state."""
    extra = ["--memory"] if store == "memory" else ["--data-file-size", str(64 * 1024)]
    c = Cluster(tmp_path, 3, *extra, "--snapshot-every", "500")
    c.start_all()
    try:
        ld = c.leader()
        victim = next(n for n in c.ids if n != ld)
        c.procs[victim].send_signal(signal.SIGSTOP)
        _write(c, 5000, prefer=ld)  # a client would hang on the stopped member
        assert c.meta(ld)["ledgerBeginIndex"] > 100
        c.procs[victim].send_signal(signal.SIGCONT)
        deadline = time.monotonic() + 30
        while "installing snapshot" not in (tmp_path / f"{victim}.log").read_text():
            assert time.monotonic() < deadline, "no INSTALL_SNAPSHOT"
            time.sleep(0.2)
        c.wait_caught_up()
        keys = [f"k{i}" for i in range(97)]
        assert _state(c, victim, keys) == _state(c, ld, keys)
        if store == "file":
            assert "log reset to begin at entry" in (tmp_path / f"{victim}.log").read_text()
            # The restarted log (leading gap, then the leader's records) survives a SIGKILL and
            # recovery, and keeps replicating.
            c.kill(victim)
            c.start(victim)
            _write(c, 300, prefer=ld)
            c.wait_caught_up()
            assert _state(c, victim, keys) == _state(c, ld, keys)
            m = c.meta(victim)
            assert m["ledgerBeginIndex"] > 100 and m["ledgerEndIndex"] == c.meta(ld)["ledgerEndIndex"]
    finally:
        for n in list(c.procs):
            c.procs[n].send_signal(signal.SIGCONT)
            c.kill(n)


@pytest.mark.slow
def test_leader_sends_snapshot_to_appending_follower_behind_compacted_prefix(tmp_path: Path) -> None:
    """Issue 33 on real processes: a follower already in APPEND is stopped (SIGSTOP) while the
    leader snapshots every 20 entries and drops 16 KiB segments. At the push timeout the leader's
    resend point (the follower's watermark + 1) is below its ledgerBeginIndex: it must send
    INSTALL_SNAPSHOT (Raft section 7), not loop on IndexError pushing compacted entries. A restart
    of the follower then loads its snapshot and replays only the entries after it."""
    c = Cluster(tmp_path, 3, "--snapshot-every", "20", "--data-file-size", "16384")
    c.start_all()
    try:
        ld = c.leader()
        _write(c, 40, prefer=ld)
        c.wait_caught_up()
        victim = next(n for n in c.ids if n != ld)
        victim_end = c.meta(victim)["ledgerEndIndex"]
        c.procs[victim].send_signal(signal.SIGSTOP)
        _write(c, 800, prefer=ld)
        assert c.meta(ld)["ledgerBeginIndex"] > victim_end + 1, "the leader did not compact past the follower"
        time.sleep(2.0)  # the pushes to the stopped follower time out (push timeout 1 s)
        c.procs[victim].send_signal(signal.SIGCONT)
        c.wait_caught_up(timeout=30)
        leader_log = (tmp_path / f"{ld}.log").read_text()
        assert "IndexError" not in leader_log and "Traceback" not in leader_log
        assert "installing snapshot" in (tmp_path / f"{victim}.log").read_text()
        keys = [f"k{i}" for i in range(97)]
        assert _state(c, victim, keys) == _state(c, ld, keys)
        c.kill(victim)
        c.start(victim)
        c.wait_caught_up(timeout=30)
        text = (tmp_path / f"{victim}.log").read_text()
        loaded = [int(x) for x in re.findall(r"loaded snapshot at (\d+)", text)]
        assert loaded, "the restart did not load a snapshot"
        replayed = re.findall(r"replayed entries \[(\d+), (\d+)\]", text)
        assert all(int(lo) == loaded[-1] + 1 for lo, _ in replayed[-1:]), (loaded, replayed)
        assert _state(c, victim, keys) == _state(c, ld, keys)
    finally:
        for n in list(c.procs):
            c.procs[n].send_signal(signal.SIGCONT)
            c.kill(n)
