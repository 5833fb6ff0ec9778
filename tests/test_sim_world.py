"""The simulated world's harder faults (issue 23), each shown directly: an fsync in flight at a
crash, unsynced pages surviving out of order, messages held on live links and delivered terms
late (or held until their receiver has moved on a term or two and stands inside a round), partitions
that hold, pauses inside a protocol round released in a chosen order, storage
faults on committed records (bit flips, lost and misdirected writes) and the store's repair from
the leader, and the invariants that go with them."""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import pytest

from dledger.core import Role
from dledger.protocol import (
    Code,
    HeartbeatResponse,
    Message,
    PushRequest,
    PushResponse,
    VoteRequest,
    VoteResponse,
    VoteResult,
)
from dledger.sim import RPC_MESSAGES, SafetyViolation, Sim
from dledger.simdisk import SimDisk
from dledger.store import CorruptionError, Entry
from dledger.store.file import FileLogStore


def _leader(sim: Sim) -> str:
    assert sim.run(5_000, until=lambda: sim.leader() is not None)
    ld = sim.leader()
    assert ld is not None
    return ld


def _fill(sim: Sim, n: int, size: int = 40) -> None:
    """``n`` entries committed everywhere, then a checkpoint (every simulated second)."""
    for k in range(n):
        sim.propose(b"%d" % k * (size // 4))
        sim.run(2)
    sim.run(2_000)


# ------------------------------------------------------------ fsync latency


def _crash_follower_in_sync(latency: tuple[int, int]) -> tuple[Sim, str, int]:
    sim = Sim(3, seed=3, disk="file")
    sim.sync_latency = latency
    ld = _leader(sim)
    sim.run(500)
    e = sim.propose(b"the write")
    assert e is not None
    follower = next(i for i in sim.ids if i != ld)
    sim.run(200, until=lambda: sim.stores[follower].end_index >= e.index)
    assert sim.stores[follower].end_index >= e.index  # written to the page cache
    sim.crash(follower)
    sim.start(follower)
    return sim, follower, e.index


def test_an_fsync_in_flight_at_a_crash_loses_the_write() -> None:
    sim, follower, index = _crash_follower_in_sync((20, 20))
    assert sim.stores[follower].end_index < index  # the fsync never completed: the write is gone
    assert sim.stats["crashes_in_sync"] == 1
    sim.run(100)
    assert sim.stats["fsyncs_lost"] >= 1  # its completion came for a member that had crashed
    # with a disk that syncs at once the same schedule keeps the write: the latency is what lost it
    sim, follower, index = _crash_follower_in_sync((0, 0))
    assert sim.stores[follower].end_index >= index


def test_a_follower_acknowledges_only_after_its_fsync_completes() -> None:
    sim = Sim(3, seed=5, disk="file")
    sim.sync_latency = (50, 50)
    ld = _leader(sim)
    sim.run(500)
    e = sim.propose(b"x")
    assert e is not None
    sim.run(30)
    assert sim.nodes[ld].commit_index < e.index  # the acks wait for the 50 ms fsyncs
    sim.run(100)
    assert sim.nodes[ld].commit_index >= e.index


def test_the_answer_to_a_repeated_push_waits_for_the_fsync_in_flight() -> None:
    # a duplicated (or resent) push of entries already in the log: its answer acknowledges them
    sim = Sim(3, seed=5, disk="file")
    sim.sync_latency = (50, 50)
    ld = _leader(sim)
    sim.run(500)
    f = next(i for i in sim.ids if i != ld)
    pushes: list[Message] = []
    acks: list[tuple[int, int]] = []  # (when, index) of f's successful push answers
    syncs: list[int] = []  # when f's fsyncs complete
    deliver, send = sim._deliver, sim._send

    def recording_deliver(msg: Message) -> None:
        if isinstance(msg, PushRequest) and msg.dst == f and msg.entries:
            pushes.append(msg)
        deliver(msg)

    def recording_send(msg: Message) -> None:
        if isinstance(msg, PushResponse) and msg.src == f and msg.code == Code.SUCCESS:
            acks.append((sim.now, msg.index))
        send(msg)

    sim._deliver = recording_deliver  # type: ignore[method-assign]
    sim._send = recording_send  # type: ignore[method-assign, assignment]
    sim.on_sync_start = lambda node, at: syncs.append(at) if node == f else None
    e = sim.propose(b"x")
    assert e is not None
    assert sim.run(30, until=lambda: bool(pushes) and bool(syncs))
    sim._deliver(pushes[-1])  # the same push again
    sim.run(100)
    assert [t for t, i in acks if i >= e.index] and all(t >= syncs[0] for t, i in acks if i >= e.index)


def test_a_crash_can_keep_later_unsynced_pages_and_lose_earlier_ones() -> None:
    reordered = 0
    for seed in range(30):
        disk = SimDisk(random.Random(seed))
        st = FileLogStore(Path("/sim/a"), fs=disk, data_file_size=64 * 1024, index_file_size=4096)
        for i in range(10):
            st.append(Entry(i, 1, b"x" * 1000))
        st.sync()
        for i in range(10, 30):
            st.append(Entry(i, 1, b"y" * 1000))
        st.flush_writes()
        disk.crash(reorder_probability=1.0)
        r = FileLogStore(Path("/sim/a"), fs=disk, data_file_size=64 * 1024, index_file_size=4096)
        assert 9 <= r.end_index <= 29
        assert all(r.get(i).body in (b"x" * 1000, b"y" * 1000) for i in range(r.end_index + 1))
        reordered += disk.reordered
    assert reordered > 0


# ------------------------------------------------------------ the network


def test_slow_links_deliver_messages_two_terms_late_and_safety_holds() -> None:
    sim = Sim(5, seed=11, disk="memory")
    sim.slow, sim.slow_ms = 0.05, 3_000
    for _ in range(8):
        ld = _leader(sim)
        sim.propose(b"v")
        sim.run(300)
        sim.crash(ld)
        sim.run(600)
        sim.start(ld)
    sim.slow = 0.0
    sim.run(4_000)
    sim.check_all()
    assert sim.stats["slow_messages"] > 0
    assert sim.stats["two_terms_late"] > 0  # delivered to members two or more terms on


def test_vote_messages_held_across_term_changes_arrive_inside_a_later_vote_round() -> None:
    sim = Sim(5, seed=5, disk="memory")
    sim.term_late, sim.term_late_kinds, sim.term_late_point = 0.5, RPC_MESSAGES["vote"], "vote-round"
    late: list[tuple[int, int, bool]] = []  # (message term, receiver term, its vote round open)
    orig = sim._deliver

    def recording(msg: Message) -> None:
        core = sim.nodes.get(msg.dst)
        if isinstance(msg, VoteResponse) and core is not None and msg.term < core.term:
            late.append((msg.term, core.term, core._votes is not None))
        orig(msg)

    sim._deliver = recording  # type: ignore[method-assign]
    for _ in range(10):
        ld = _leader(sim)
        sim.run(300)
        sim.crash(ld)
        sim.run(300)
        sim.start(ld)
    sim.term_late = 0.0
    sim.run(3_000)
    sim.check_all()  # the correct core counts none of them
    assert sim.stats["term_late_messages"] > 0
    assert any(open_round for _, _, open_round in late)  # released into a later term's open round


def _open_vote_round(sim: Sim) -> str:
    """A leader elected at a term above 0 is killed while vote answers are dropped, until a member
    has a vote round open at a term above 0: that candidate."""
    ld = _leader(sim)
    for _ in range(10):
        if sim.nodes[ld].term > 0:
            break
        sim.crash(ld)
        sim.run(300)
        sim.start(ld)
        ld = _leader(sim)
    sim.drop = lambda m: isinstance(m, VoteResponse)
    sim.crash(ld)
    assert sim.run(3_000, until=lambda: any(c._votes is not None and c.term > 0 for c in sim.nodes.values()))
    sim.drop = None
    return next(i for i, c in sim.nodes.items() if c._votes is not None and c.term > 0)


def test_a_grant_of_an_earlier_term_with_the_current_round_number_is_not_counted() -> None:
    # round numbers start again at a restart: an answer to the previous incarnation's round can
    # meet the new incarnation's round of the same number, terms on
    sim = Sim(3, seed=7, disk="memory")
    cand = _open_vote_round(sim)
    core = sim.nodes[cand]
    for voter in (i for i in sim.ids if i != cand):
        grant = VoteResponse(
            "default", voter, cand, core.term - 1, result=VoteResult.ACCEPT, round=core._vote_round
        )
        sim._deliver(grant)
    assert core.role == Role.CANDIDATE


def test_a_leader_without_a_majority_of_votes_in_its_term_is_a_violation() -> None:
    sim = Sim(3, seed=7, disk="memory")
    ld = _leader(sim)
    term = sim.nodes[ld].term
    voters = [i for i in sim.ids if sim.votes.get((i, term)) == ld]
    assert len(voters) >= 2
    # as if the grants it counted were of another term: only its own vote persisted in this one
    for i in voters:
        if i != ld:
            del sim.votes[(i, term)]
    sim._leading[ld] = False
    sim._stints.discard((ld, term))
    with pytest.raises(SafetyViolation, match=f"{ld} became leader in term {term} with the votes of {ld} in"):
        sim._check(ld)


def test_a_heartbeat_acknowledgement_of_another_term_does_not_count() -> None:
    sim = Sim(3, seed=1, disk="memory")
    ld = _leader(sim)
    core = sim.nodes[ld]
    assert sim.run(1_000, until=lambda: core._hb_open and not core._hb_resp)
    f = next(i for i in sim.ids if i != ld)
    stale = HeartbeatResponse("default", f, ld, core.term - 1, code=Code.SUCCESS, round=core._hb_round)
    core.step(stale, sim.local(ld))
    assert f not in core._hb_resp


def test_a_holding_partition_delivers_what_it_held_at_the_heal() -> None:
    sim = Sim(3, seed=2, disk="memory")
    sim.cut_in_flight = True
    sim.hold_partitions = True
    ld = _leader(sim)
    others = [i for i in sim.ids if i != ld]
    sim.partition([ld], others)
    sim.run(1_000)
    held = sim.stats["held_messages"]
    assert held > 0 and len(sim._held_links) > 0
    seen: list[Message] = []
    orig = sim._deliver

    def recording(msg: Message) -> None:
        seen.append(msg)
        orig(msg)

    sim._deliver = recording  # type: ignore[method-assign]
    sim.heal()
    sim.run(50)
    assert any(m.src == ld and m.dst in others for m in seen)  # the old leader's held messages arrive
    assert not sim._held_links


def _recording(sim: Sim) -> list[tuple[int, Message]]:
    """(delivery time, message) of every message delivered from now on."""
    seen: list[tuple[int, Message]] = []
    orig = sim._deliver

    def recording(msg: Message) -> None:
        seen.append((sim.now, msg))
        orig(msg)

    sim._deliver = recording  # type: ignore[method-assign]
    return seen


def test_a_clogged_receiving_side_holds_messages_and_delivers_them_in_order_at_the_end() -> None:
    sim = Sim(3, seed=2, disk="memory")
    ld = _leader(sim)
    sim.run(300)
    start = sim.now
    sim.clog(ld, 0, 400)  # its receiving side only
    stepped: dict[str, list[tuple[int, Message]]] = {i: [] for i in sim.ids}  # what each member took
    for i, drv in sim.drivers.items():
        orig = drv.step

        def step(msg: Message, now: int, _i: str = i, _orig: Any = orig) -> None:
            stepped[_i].append((sim.now, msg))
            _orig(msg, now)

        drv.step = step  # type: ignore[method-assign]
    sim.run(399)
    assert not stepped[ld]  # nothing reached it
    assert any(m.src == ld for i in sim.ids for _, m in stepped[i])  # while its own messages flowed
    peer = next(i for i in sim.ids if i != ld)
    held = list(sim._clog_held[(peer, ld)])
    assert held and sim.stats["clogged_messages"] >= len(held)
    sim.run(10)
    arrived = [(t, m) for t, m in stepped[ld] if m.src == peer]
    assert [m for _, m in arrived[: len(held)]] == held  # in the order they were sent
    assert all(t >= start + 400 for t, _ in arrived)


def test_ending_one_clog_leaves_a_link_another_clog_extended_clogged() -> None:
    """A clog fault and a link delay's stall on the same member: stopping the clog releases only
    what it still holds alone; the stall's links stay clogged until the stall ends."""
    sim = Sim(3, seed=2, disk="memory")
    ld = _leader(sim)
    peer = next(i for i in sim.ids if i != ld)
    fault = sim.clog(ld, 200, 500)  # both sides
    stall = sim.clog(ld, 0, 10**9)  # the receiving side, until its fault stops
    assert set(stall) == {(o, ld) for o in sim.ids if o != ld}
    sim.run(100)
    sim.unclog(fault)
    sim.run(600)
    assert (ld, peer) not in sim._clog_until  # the clog's own side flows again
    assert sim._clog_until[(peer, ld)] > sim.now and sim._clog_held[(peer, ld)]  # the stall holds
    sim.unclog(stall)
    assert not sim._clog_until and not sim._clog_held


def test_a_link_delay_adds_its_delay_to_one_side_and_keeps_each_links_order() -> None:
    sim = Sim(3, seed=5, disk="memory")
    ld = _leader(sim)
    sim.run(300)
    sim.delay_links(ld, 250, 0)  # what the leader sends arrives 250 ms late
    seen = _recording(sim)
    sent_at: dict[int, int] = {}
    orig_send = sim._send

    def stamping(m: Message) -> None:
        sent_at[id(m)] = sim.now
        orig_send(m)

    sim._send = stamping  # type: ignore[method-assign]
    sim.run(600)
    out = [(t, m) for t, m in seen if m.src == ld and id(m) in sent_at]
    back = [(t, m) for t, m in seen if m.dst == ld and id(m) in sent_at]
    assert out and back
    assert all(t - sent_at[id(m)] >= 250 for t, m in out)
    assert all(t - sent_at[id(m)] < 250 for t, m in back)  # the other side as usual
    for dst in {m.dst for _, m in out}:
        order = [sent_at[id(m)] for _, m in out if m.dst == dst]
        assert order == sorted(order)
    sim.undelay_links(ld)
    assert not sim.link_delay


# ------------------------------------------------------------ pauses inside a round


@pytest.mark.parametrize("point", ["heartbeat-round", "follower-ack"])
def test_a_pause_lands_inside_an_open_round(point: str) -> None:
    sim = Sim(3, seed=4, disk="file")
    sim.sync_latency = (5, 10)
    _leader(sim)
    landed: list[tuple[str, bool]] = []
    sim.pause_at("*", point, lambda n: landed.append((n, sim.at_point(n, point))))
    for _ in range(50):
        sim.propose(b"p")
        if sim.run(20, until=lambda: bool(landed)):
            break
    assert landed and landed[0][1]  # paused while the round was open
    node = landed[0][0]
    assert node in sim.paused
    core = sim.nodes[node]
    if point == "heartbeat-round":
        assert core.role == Role.LEADER and core._hb_open
    else:
        assert core.role == Role.FOLLOWER and (sim.drivers[node]._held or sim.drivers[node]._sync_running)


def test_resume_releases_the_queue_in_the_order_asked() -> None:
    sim = Sim(3, seed=6, disk="memory")
    ld = _leader(sim)
    f = next(i for i in sim.ids if i != ld)
    sim.pause(f)
    for _ in range(20):
        sim.propose(b"q")
        sim.run(10)
    queued = list(sim._inbox[f])
    assert len(queued) >= 3 and queued != list(reversed(queued))
    seen: list[Message] = []
    orig = sim._deliver

    def recording(msg: Message) -> None:
        seen.append(msg)
        orig(msg)

    sim._deliver = recording  # type: ignore[method-assign]
    sim.resume(f, order="reverse")
    assert seen[: len(queued)] == list(reversed(queued))
    sim.run(2_000)
    sim.check_all()


# ------------------------------------------------------------ storage faults and repair


@pytest.mark.parametrize("kind", ["flip-header", "flip-body", "lost-write", "misdirected-write"])
def test_storage_faults_on_committed_records_are_detected_and_repaired(kind: str) -> None:
    sim = Sim(3, seed=8, disk="file")
    ld = _leader(sim)
    _fill(sim, 300)
    victim = next(i for i in sim.ids if i != ld)
    committed = sim.stores[victim].committed_index
    below = sim.committed_bytes(victim)
    assert committed > 100 and below > 2 * 4096
    sim.crash(victim)
    done = sim.damage(victim, kind, below)
    assert done is not None and done["kind"] == kind
    sim.start(victim)
    st = sim.stores[victim]
    assert st.repair_to == committed and st.recovery.damaged_from is not None  # detected
    assert st.end_index < committed
    sim.run(3_000)
    assert sim.stats["repairs"] == 1 and sim.stats["repairs_done"] == 1
    assert sim.nodes[victim].repair_to == -1
    sim.check_all()
    logs = sim.logs()
    assert logs[victim][: committed + 1] == logs[ld][: committed + 1]  # fetched back from the leader


def test_a_repairing_member_abstains_from_votes_and_never_campaigns() -> None:
    sim = Sim(3, seed=9, disk="file")
    ld = _leader(sim)
    _fill(sim, 300)
    victim = next(i for i in sim.ids if i != ld)
    below = sim.committed_bytes(victim)
    sim.crash(victim)
    assert sim.damage(victim, "flip-body", below) is not None
    for i in sim.ids:
        if i != victim:
            sim.crash(i)  # nobody can repair it
    sim.start(victim)
    core = sim.nodes[victim]
    term = core.term
    sim.run(3_000)
    assert core.role != Role.LEADER and core.repair_to >= 0
    assert core.term >= term and not any(v == victim for v in sim.votes.values())  # never a candidate
    src = "s1" if victim != "s1" else "s2"
    req = VoteRequest(
        core.cfg.group, src, victim, core.term + 5, ledger_end_index=10**6, ledger_end_term=10**6
    )
    assert core.handle_vote(req)[0] in (VoteResult.REJECT_TERM_NOT_READY, VoteResult.UNKNOWN)
    req2 = VoteRequest(core.cfg.group, src, victim, core.term, ledger_end_index=10**6, ledger_end_term=10**6)
    assert core.handle_vote(req2)[0] == VoteResult.UNKNOWN  # never an ACCEPT while repairing


def test_damage_without_an_injected_fault_fails_as_a_durability_violation() -> None:
    sim = Sim(3, seed=8, disk="file")
    ld = _leader(sim)
    _fill(sim, 300)
    victim = next(i for i in sim.ids if i != ld)
    below = sim.committed_bytes(victim)
    sim.crash(victim)
    assert sim.disks[victim].lose_page(f"/sim/{victim}/data/{0:020d}", below) is not None  # not via damage()
    with pytest.raises(SafetyViolation, match="committed prefix is damaged without an injected disk fault"):
        sim.start(victim)


def test_the_file_store_keeps_the_repair_mark_until_the_log_reaches_it() -> None:
    disk = SimDisk(random.Random(1))
    d = Path("/sim/r")
    st = FileLogStore(d, fs=disk, data_file_size=64 * 1024, index_file_size=4096)
    for i in range(200):
        st.append(Entry(i, 1, b"z" * 100))
    st.sync()
    st.save_checkpoint(199)
    disk.crash()
    assert disk.flip_bit_in(f"{d}/data/{0:020d}", 5000, 5100) is not None
    with pytest.raises(CorruptionError):
        FileLogStore(d, fs=disk, data_file_size=64 * 1024, index_file_size=4096)
    st = FileLogStore(d, fs=disk, data_file_size=64 * 1024, index_file_size=4096, repair=True)
    assert st.repair_to == 199 and st.end_index < 199
    st.save_checkpoint(st.end_index)
    disk.crash()  # a second restart before the repair finished still knows it
    st = FileLogStore(d, fs=disk, data_file_size=64 * 1024, index_file_size=4096, repair=True)
    assert st.repair_to == 199
    for i in range(st.end_index + 1, 200):
        st.append(Entry(i, 1, b"z" * 100))
    st.sync()
    st.save_checkpoint(199)
    assert st.repair_to == -1


# ------------------------------------------------------------ election safety for followers


def test_a_follower_of_a_member_not_elected_in_its_term_is_a_violation() -> None:
    sim = Sim(3, seed=1, disk="memory")
    ld = _leader(sim)
    sim.run(500)
    f = next(i for i in sim.ids if i != ld)
    other = next(i for i in sim.ids if i not in (ld, f))
    assert sim.nodes[f].role == Role.FOLLOWER
    sim._check(f)  # following the elected leader: fine
    sim.nodes[f].leader_id = other
    with pytest.raises(SafetyViolation, match=f"{f} follows {other} in term"):
        sim._check(f)


def test_the_swarm_draws_every_kind_but_the_explicit_only_link_faults() -> None:
    """clog and link-delay run when named (README "Simulator power": drawn, they cost the swarm a
    catalogue class); every other kind is drawn, and a chaos sim seed that names them runs them,
    each a fault window (start-/stop-<kind>) the faults checker and the report count."""
    from chaos_dledger.sim import NEMESES, SWARM_EXPLICIT_ONLY, SimOptions, draw_mix, run_seed

    drawn = {k for seed in range(500) for k in draw_mix(seed)["nemesis"]}
    assert drawn == set(NEMESES) - {"none", *SWARM_EXPLICIT_ONLY}
    r = run_seed(
        SimOptions("register", list(SWARM_EXPLICIT_ONLY), seed=3, time_limit=5, nemesis_interval=0.5)
    )
    assert {ev["kind"] for ev in r.schedule if ev["op"] == "start"} == set(SWARM_EXPLICIT_ONLY)
    assert r.stats["clogged_messages"] > 0 and r.stats["delayed_messages"] > 0
    kinds = r.results["checkers"]["faults"]["kinds"]  # fault windows the report counts
    started = {k: sum(1 for ev in r.schedule if ev["op"] == "start" and ev["kind"] == k) for k in kinds}
    assert {k: (v["requested"], v["applied"]) for k, v in kinds.items()} == {
        k: (n, n) for k, n in started.items()
    }
    assert set(kinds) == set(SWARM_EXPLICIT_ONLY)


def test_a_seeds_kills_pauses_clock_faults_and_power_failures_are_the_fault_windows_it_reports() -> None:
    """Every crash, pause and clock fault of a seed is a start-/stop-<kind> window, as a real run's
    nemesis records it, so the faults checker (and the report's fault table) counts each one
    started; a power failure's window ends when its last member is back."""
    from collections import Counter

    from chaos_dledger.sim import SimOptions, run_seed

    window_kind = {"kill": "kill", "pause": "pause", "clock-skew": "clock", "power-failure": "power-failure"}
    r = run_seed(SimOptions("register", list(window_kind), seed=3, time_limit=10, nemesis_interval=1))
    assert r.valid is True, r.results
    started = Counter(window_kind[ev["kind"]] for ev in r.schedule if ev["op"] == "start")
    faults = r.results["checkers"]["faults"]
    assert (
        {k: v["requested"] for k, v in faults["kinds"].items()}
        == started
        == {
            "kill": 1,
            "power-failure": 1,
            "pause": 2,
            "clock": 2,
        }
    )
    assert Counter(w["kind"] for w in faults["windows"]) == started
    power = next(w for w in faults["windows"] if w["kind"] == "power-failure")
    ops = [json.loads(line) for line in r.history.splitlines()]
    back = [o for o in ops if o["process"] == "nemesis" and o["f"] in ("start", "stop-power-failure")]
    assert back and back[-1]["f"] == "stop-power-failure" and power["end_s"] == back[-1]["time"] / 1e9


def test_a_kill_during_another_kill_is_a_fault_window_of_its_own() -> None:
    """Seed 5 kills the leader while another kill is in force: each kill started is a window of
    its own, with its own member, ended by the stop that restarted that member (before, the second
    kill fell inside the first's window and the report counted one window fewer than it started)."""
    from chaos_dledger.sim import SimOptions, run_seed

    nemesis = ["kill", "kill-leader", "pause", "pause-leader"]
    r = run_seed(SimOptions("register", nemesis, seed=5, time_limit=10, nemesis_interval=1))
    faults = r.results["checkers"]["faults"]
    kills = [w for w in faults["windows"] if w["kind"] == "kill"]
    assert len(kills) == faults["kinds"]["kill"]["requested"] == 3
    overlapping = [(a, b) for a in kills for b in kills if a["start_s"] < b["start_s"] < a["end_s"]]
    assert overlapping, kills
    for a, b in overlapping:
        assert a["nodes"] and b["nodes"] and not set(a["nodes"]) & set(b["nodes"])
        assert b["end_s"] is not None


def test_a_snapshot_saved_after_an_install_restarted_the_log_compacts_nothing() -> None:
    """Issue 33: with an fsync latency the snapshot save completes later (the server's IO thread);
    meanwhile an INSTALL_SNAPSHOT restarted the follower's log after the snapshot's index. The late
    compaction must leave the log alone (it raised IndexError in FileLogStore.compact_prefix)."""
    from chaos_dledger.sim import SimOptions, run_seed

    opts = SimOptions(
        workload="register",
        nemesis=["leader-transfer", "kill", "pause"],
        seed=42,
        time_limit=5.0,
        read_mode="lease",
        nemesis_interval=1.25,
    )
    r = run_seed(opts)
    assert r.valid is True, r.results
    assert r.stats["snapshot_installs"] and r.stats["compactions"] and r.stats["transfers"]


def test_the_swarm_draws_snapshots_small_segments_and_transfers() -> None:
    """Issue 33: every seed's world draws a snapshot interval and a data segment size (small ones
    included), and the swarm's fault pool holds leader-transfer."""
    from chaos_dledger.sim import SWARM_FAULTS, SimOptions, SimRun

    seen = set()
    for seed in range(40):
        run = SimRun(SimOptions.swarm_for(seed), Path("/dev/null"))
        seen.add((run.snapshot_every > 0, run.data_file_size <= 4096, run.sim.snapshot_every))
    assert (True, True) in {s[:2] for s in seen} and (False, False) in {s[:2] for s in seen}
    assert "leader-transfer" in SWARM_FAULTS
