"""What ``chaos sim`` makes the server's own code run besides the consensus paths (issue 33,
"reach everything that ships"), each shown directly on :class:`dledger.sim.Sim`: a disk that fails
calls (full, failing fsyncs, failing reads) handled as the server does, a clean stop, the
server's leaderless repair and request deadlines, storage faults in any committed segment and in
the index, per-member disk latencies, transfer requests a stale client sends, and the stray
client's requests the server refuses or aborts."""

from __future__ import annotations

import errno
import os
import random
from pathlib import Path
from typing import Any

import pytest

from chaos_dledger.sim import (
    DATA_DAMAGE,
    FIRST_DISK_ERRORS,
    LATER_DAMAGE,
    SimOptions,
    draw_mix,
    run_seed,
    stray_request,
)
from dledger.protocol import Code
from dledger.sim import DAMAGE_KINDS, DISK_ERRORS, HIGHWATER_DAMAGE, INDEX_DAMAGE, MAX_WAIT_ACK_MS, Sim
from dledger.simdisk import SimDisk
from dledger.statemachine import KVStateMachine, encode_kv


def _leader(sim: Sim) -> str:
    assert sim.run(5_000, until=lambda: sim.leader() is not None)
    ld = sim.leader()
    assert ld is not None
    return ld


def _fill(sim: Sim, n: int) -> None:
    for k in range(n):
        sim.propose(b"%d" % k * 10)
        sim.run(2)
    sim.run(2_000)


def _answers(sim: Sim) -> dict[Any, tuple[int, dict[str, Any]]]:
    got: dict[Any, tuple[int, dict[str, Any]]] = {}
    sim.on_answer = lambda node, token, code, fields: got.__setitem__(token, (code, fields))
    return got


def test_a_full_disk_stops_or_refuses_and_the_member_catches_up_once_it_works() -> None:
    sim = Sim(3, seed=4, disk="file", data_file_size=4096)
    ld = _leader(sim)
    _fill(sim, 50)
    victim = next(i for i in sim.ids if i != ld)
    sim.fail_disk(victim, "full")
    _fill(sim, 100)  # the others commit without it
    assert sim.disks[victim].errors > 0 and victim in sim.store_stopped and victim not in sim.nodes
    sim.unfail_disk(victim)
    sim.start(victim)
    sim.run(3_000)
    assert sim.nodes[victim].commit_index == sim.nodes[ld].commit_index >= 149
    sim.check_all()


def test_a_failed_fsync_stops_the_leader_and_nothing_acknowledged_is_lost() -> None:
    sim = Sim(3, seed=5, disk="file")
    sim.sync_latency = (2, 5)
    ld = _leader(sim)
    _fill(sim, 30)
    committed = sim.nodes[ld].commit_index
    sim.fail_disk(ld, "fsync")
    _fill(sim, 10)
    assert ld in sim.store_stopped and sim.stats["store_stops"] == 1
    new = _leader(sim)
    assert new != ld and sim.nodes[new].commit_index >= committed
    sim.unfail_disk(ld)
    sim.start(ld)
    sim.run(3_000)
    sim.check_all()


def test_read_errors_answer_a_get_disk_error_and_only_the_member_s_own_reads_fail() -> None:
    sim = Sim(3, seed=6, disk="file")
    ld = _leader(sim)
    _fill(sim, 40)
    follower = next(i for i in sim.ids if i != ld)
    sim.drivers[follower].store._cache.clear()  # reads go to the (failing) disk
    sim.fail_disk(follower, "read")
    codes = {sim.get(follower, i)[0] for i in range(0, 40) if follower in sim.nodes}
    assert Code.DISK_ERROR in codes
    sim.check_all()  # the simulation's own checks read through: unaffected
    assert set(DISK_ERRORS) == {"full", "fsync", "read", "filling"}


def test_a_clean_stop_syncs_checkpoints_and_closes_so_a_restart_keeps_everything() -> None:
    sim = Sim(3, seed=7, disk="file", state_machine=KVStateMachine)
    sim.sync_latency = (5, 10)
    ld = _leader(sim)
    got = _answers(sim)
    for k in range(20):
        sim.submit(ld, "kv:put", encode_kv("put", f"k{k}", k), k, key=f"k{k}")
    sim.run(1)  # the leader's own fsync is still in flight: a crash now would lose the tail
    end = sim.stores[ld].end_index
    sim.stop(ld)
    assert sim.stats["graceful_stops"] == 1 and sim.stores[ld]._closed
    sim.start(ld)
    assert sim.stores[ld].end_index == end  # synced at the stop
    sim.run(3_000)
    assert all(got[k][0] == Code.SUCCESS for k in range(20) if k in got)
    sim.check_all()


def test_a_damaged_member_repairs_from_a_peer_without_a_leader() -> None:
    sim = Sim(3, seed=8, disk="file")
    ld = _leader(sim)
    _fill(sim, 200)
    a, b = (i for i in sim.ids if i != ld)
    below = sim.committed_bytes(a)
    sim.crash(a)
    assert sim.damage(a, "flip-body", below) is not None
    sim.crash(ld)  # a and b alone: no majority of votes for a repairing member, no leader
    sim.start(a)
    assert sim.nodes[a].repair_to >= 0
    sim.run(3_000)
    assert sim.leader() is None or sim.stats["leaderless_repairs"] > 0
    assert sim.stats["leaderless_repairs"] > 0 and sim.nodes[a].repair_to == -1
    sim.check_all()


def test_a_request_waiting_past_its_deadline_is_answered_wait_quorum_ack_timeout() -> None:
    sim = Sim(3, seed=9, state_machine=KVStateMachine)
    ld = _leader(sim)
    got = _answers(sim)
    sim.partition([ld], [i for i in sim.ids if i != ld])
    assert sim.submit(ld, "kv:put", encode_kv("put", "k", 1), "w", key="k") == Code.SUCCESS
    sim.run(MAX_WAIT_ACK_MS + 100, until=lambda: "w" in got)
    assert got["w"][0] == Code.WAIT_QUORUM_ACK_TIMEOUT and sim.stats["expired_requests"] == 1


def test_storage_faults_reach_any_committed_segment_and_the_index() -> None:
    for kind in ("lost-extent", "flip-index"):
        sim = Sim(3, seed=10, disk="file", data_file_size=4096)
        ld = _leader(sim)
        _fill(sim, 300)
        victim = next(i for i in sim.ids if i != ld)
        below = sim.committed_bytes(victim)
        assert below > 4 * 4096  # the committed prefix spans several segments
        sim.crash(victim)
        done = sim.damage(victim, kind, below)
        assert done is not None and done["kind"] == kind
        sim.start(victim)
        sim.run(3_000)
        assert sim.nodes[victim].repair_to == -1
        sim.check_all()
        assert sim.logs()[victim] == sim.logs()[ld]


@pytest.mark.parametrize("kind", [*INDEX_DAMAGE, *HIGHWATER_DAMAGE])
def test_index_and_high_water_faults_are_noticed_and_lose_nothing(kind: str) -> None:
    """The index and the high-water marker are derived from the data: a damaged or lost index file
    or a wrong marker must never cost a durable entry (a marker at a record boundary below the
    data once did); the member restarts with its whole log, which agrees with the leader's."""
    sim = Sim(3, seed=12, disk="file", data_file_size=4096)
    ld = _leader(sim)
    _fill(sim, 300)
    victim = next(i for i in sim.ids if i != ld)
    below, end = sim.committed_bytes(victim), sim.stores[victim].end_index
    sim.crash(victim)
    done = sim.damage(victim, kind, below)
    assert done is not None and done["kind"] == kind
    sim.start(victim)
    rec = sim.stores[victim].recovery
    assert sim.stores[victim].end_index >= end and rec.cut_reason is None and rec.repair_to == -1
    if kind in INDEX_DAMAGE:
        assert rec.index_rebuilt_from is not None and not rec.index_behind
    sim.run(3_000)
    sim.check_all()
    assert sim.logs()[victim] == sim.logs()[ld]


def test_a_disk_filling_up_cuts_a_write_short_and_then_refuses_every_one() -> None:
    disk = SimDisk(random.Random(1))
    fd = disk.open(Path("/f"), os.O_RDWR | os.O_CREAT)
    disk.failing, disk.room = "filling", 100
    assert disk.pwrite(fd, b"x" * 60, 0) == 60 and disk.pwritev(fd, [b"y" * 30, b"z" * 30], 60) == 40
    with pytest.raises(OSError) as err:
        disk.pwrite(fd, b"w", 100)
    assert (
        err.value.errno == errno.ENOSPC and disk.read_at(Path("/f"), 0) == b"x" * 60 + b"y" * 30 + b"z" * 10
    )
    sim = Sim(3, seed=4, disk="file", data_file_size=4096)  # the store finishes a short write, then stops
    ld = _leader(sim)
    _fill(sim, 20)
    sim.fail_disk(ld, "filling")
    _fill(sim, 300)  # more than the room left (FILLING_ROOM at most)
    assert ld in sim.store_stopped and sim.disks[ld].errors > 0
    sim.unfail_disk(ld)
    sim.start(ld)
    sim.run(3_000)
    sim.check_all()


def test_each_member_may_have_a_disk_of_its_own_latency() -> None:
    sim = Sim(3, seed=11, disk="file")
    sim.disk_latency = {"s1": (30, 30), "s2": (0, 0), "s3": (0, 0)}
    started: dict[str, int] = {}
    sim.on_sync_start = lambda node, at: started.setdefault(node, at - sim.now)
    _fill(sim, 5)
    assert started.get("s1") == 30 and "s2" not in started  # at once: no timed fsync


def test_transfer_requests_of_a_stale_client_are_refused() -> None:
    sim = Sim(3, seed=12)
    ld = _leader(sim)
    follower = next(i for i in sim.ids if i != ld)
    term = sim.nodes[ld].term
    assert sim.transfer(follower, via=follower) == Code.NOT_LEADER
    assert sim.transfer(follower, term=term - 1) == Code.INCONSISTENT_TERM
    assert sim.transfer("s9") == Code.UNKNOWN_MEMBER
    assert sim.transfer(follower) == Code.SUCCESS
    assert sim.transfer(follower) == Code.LEADER_TRANSFERRING


def test_the_stray_client_s_requests_are_refused_or_aborted_and_change_no_workload_key() -> None:
    sim = Sim(3, seed=13, state_machine=KVStateMachine)
    ld = _leader(sim)
    got = _answers(sim)
    rng = random.Random(1)
    codes = {}
    for n in range(120):
        kind, body, key, mode = stray_request(rng, n)
        codes[n] = sim.submit(ld, kind, body, n, key=key, read_mode=mode or "raft-log")
        sim.run(20)
    sim.run(500)
    assert Code.UNEXPECTED_ARGUMENT in codes.values()  # malformed or oversized: refused up front
    assert any(c == Code.UNEXPECTED_ARGUMENT for c, _ in got.values())  # type conflicts abort
    assert {k for k in sim.sms[ld].data} <= {"z0", "z1", "z2"}
    sim.check_all()


def test_the_swarm_s_later_draws_leave_the_older_kinds_of_a_mix_as_they_were() -> None:
    from chaos_dledger.sim import SWARM_LATER

    # the mixes of seeds 17 and 1000 before the later draws (the tree of commit fbac98f)
    before = {
        17: ("set", ["partition", "kill", "power-failure", "storage", "power-in-sync"], 10.0),
        1000: (
            "long-fork",
            ["partition-leader", "pause", "clock-slow-leader", "network", "kill-in-sync", "pause-round"],
            5.0,
        ),
    }
    for seed, (workload, kinds, limit) in before.items():
        mix = draw_mix(seed)
        older = [k for k in mix["nemesis"] if k not in SWARM_LATER]
        assert (mix["workload"], older, mix["time_limit"]) == (workload, kinds, limit)
    # the storage faults' and disk errors' later shapes come after the older ones, which the
    # nemesis stream draws as before
    assert DATA_DAMAGE + LATER_DAMAGE == DAMAGE_KINDS and (*FIRST_DISK_ERRORS, "filling") == DISK_ERRORS
    seeds = [draw_mix(s) for s in range(400)]
    assert any("disk-error" in m["nemesis"] for m in seeds)
    assert {m["disk"] for m in seeds} == {"file", "memory"}
    r = run_seed(SimOptions.swarm_for(next(s for s in range(400) if seeds[s]["disk"] == "memory")))
    assert r.valid is True, r.results
