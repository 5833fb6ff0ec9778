"""A member that restarts with a snapshot its log does not agree with (chaos sim seed 6153 of the
issue-33 swarm): the driver saves an INSTALL_SNAPSHOT durably before the core restarts the log for
it, and a power failure in between left a follower with the leader's snapshot at 111 and its own
stale log up to 67 (entries of older terms past the committed 62). ``recover`` took the snapshot
as proof that the log up to ``min(snapshot, end)`` was committed, so the member called its stale
entries 63..67 committed (a GET would serve them): two entries committed at one index. The log
counts as committed up to the snapshot only where it holds the snapshot's last entry."""

from __future__ import annotations

import random

from chaos_dledger.sim import SimOptions, run_seed
from dledger.driver import recover
from dledger.sim import LogStateMachine, SimLogStore
from dledger.simdisk import SimDisk
from dledger.snapshot import SnapshotStore
from dledger.store import Entry


def _log(terms: list[int]) -> SimLogStore:
    st = SimLogStore()
    for i, t in enumerate(terms):
        st.append(Entry(i, t, b"e%d" % i))
    st.sync()
    return st


def test_a_snapshot_past_the_log_s_end_commits_nothing_of_the_log() -> None:
    st = _log([0] * 8 + [2] * 2)  # 0..9; committed (checkpoint) up to 5; 8, 9 from a stale term
    snaps = SnapshotStore("/snap", fs=SimDisk(random.Random(1)))
    snaps.save(20, 3, b"leader's state")
    applied, committed, snap = recover("n1", st, LogStateMachine(), snaps, 5)
    assert (applied, committed, snap and snap[:2]) == (20, 5, (20, 3))  # not min(20, 9) = 9


def test_a_snapshot_the_log_agrees_with_commits_the_log_up_to_it() -> None:
    st = _log([0] * 10)
    snaps = SnapshotStore("/snap", fs=SimDisk(random.Random(2)))
    snaps.save(7, 0, b"own state")
    assert recover("n1", st, LogStateMachine(), snaps, 3)[:2] == (7, 7)  # the checkpoint lagged
    snaps.save(8, 5, b"another term's")  # the log holds another entry at 8
    assert recover("n1", st, LogStateMachine(), snaps, 3)[:2] == (8, 3)


def test_the_swarm_seed_with_the_interrupted_install_is_valid() -> None:
    r = run_seed(SimOptions.swarm_for(6153))
    assert r.results["safety"]["valid"] is True, r.results["safety"]
