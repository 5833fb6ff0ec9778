"""``chaos sim`` reaches the read-path bug classes: the simulator serves reads through the runtime
driver's read paths (the ones the asyncio server runs), sticky readers record a deposed leader's
answers, and catalogued read-path mutants are caught (on a copy of the package; the shipped server
is untouched). Also the new fault kinds run deterministically and keep the correct server valid."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from chaos_dledger.sim import SimOptions, run_seed
from dledger.protocol import Code
from dledger.sim import Sim
from dledger.statemachine import KVStateMachine, encode_kv

NEW_FAULTS = "partition-leader,pause-leader,clock-slow-leader,power-failure,figure8"


def _kv_sim() -> tuple[Sim, dict[object, tuple[int, dict[str, object]]]]:
    sim = Sim(3, 5, state_machine=KVStateMachine)
    answers: dict[object, tuple[int, dict[str, object]]] = {}
    sim.on_answer = lambda node, token, code, fields: answers.__setitem__(token, (code, fields))
    assert sim.run(3000, until=lambda: (ld := sim.leader()) is not None and sim.nodes[ld].commit_index >= 0)
    return sim, answers


@pytest.mark.parametrize("mode", ["raft-log", "read-index", "lease", "unsafe"])
def test_every_read_mode_reads_a_committed_put_through_the_driver(mode: str) -> None:
    sim, answers = _kv_sim()
    ld = sim.leader()
    assert ld is not None
    assert sim.submit(ld, "kv:put", encode_kv("put", "k", 7), "put", key="k") == Code.SUCCESS
    assert sim.run(2000, until=lambda: "put" in answers)
    assert sim.run(
        500, until=lambda: all(sim.drivers[i].last_applied == sim.nodes[ld].commit_index for i in sim.ids)
    )
    assert sim.submit(ld, "kv:get", b"", "get", key="k", read_mode=mode) == Code.SUCCESS
    assert sim.run(2000, until=lambda: "get" in answers)
    assert answers["get"] == (Code.SUCCESS, answers["get"][1]) and answers["get"][1]["value"] == 7
    follower = next(i for i in sim.ids if i != ld)
    code = sim.submit(follower, "kv:get", b"", "get2", key="k", read_mode=mode)
    if mode == "unsafe":  # a follower's local state: answered at once
        assert code == Code.SUCCESS and answers["get2"][1]["value"] == 7
    else:
        assert code == Code.NOT_LEADER


def test_get_serves_committed_entries_only_and_metadata_names_the_commit_index() -> None:
    sim, answers = _kv_sim()
    ld = sim.leader()
    assert ld is not None
    sim.partition([ld], [i for i in sim.ids if i != ld])  # the leader alone: its entry stays uncommitted
    assert sim.submit(ld, "append", b"42", "a") == Code.SUCCESS
    meta = sim.metadata(ld)
    assert meta is not None and meta["ledgerEndIndex"] == meta["commitIndex"] + 1
    code, entry = sim.get(ld, meta["ledgerEndIndex"])
    assert code == Code.INDEX_OUT_OF_RANGE and entry is None
    code, entry = sim.get(ld, meta["commitIndex"])
    assert code == Code.SUCCESS and entry is not None and entry.index == meta["commitIndex"]


def test_sticky_readers_stay_on_their_member_and_reads_use_the_read_mode() -> None:
    r = run_seed(
        SimOptions(
            "register", ["partition-leader", "pause-leader"], seed=3, time_limit=5, read_mode="read-index"
        )
    )
    assert r.valid is True, r.results
    ops = [json.loads(line) for line in r.history.splitlines()]
    sticky = [o for o in ops if o.get("sticky")]
    assert sticky and all(o["f"] == "read" and o["process"] % 2 == 1 for o in sticky)
    homes = {f"s{p % 5 + 1}" for p in range(10)}
    assert {o["node"] for o in sticky} <= homes
    # a follower refuses a sticky read (read index needs the leader) naming the leader, and the
    # read follows that redirect once, as the real register client does (redirected_from)
    redirected = [o for o in sticky if o.get("redirected_from")]
    assert redirected and all(o["node"] != o["redirected_from"] for o in redirected)
    assert any(o["type"] == "ok" for o in redirected)
    assert any(o["type"] == "ok" and "redirected_from" not in o for o in sticky)  # the leader's own


def test_log_reads_during_the_run_go_through_get() -> None:
    r = run_seed(SimOptions("log", ["partition", "power-failure"], seed=2, time_limit=5))
    assert r.valid is True, r.results
    ops = [json.loads(line) for line in r.history.splitlines()]
    reads = [o for o in ops if o["f"] == "read-range" and o["type"] == "ok"]
    assert reads and any(any(isinstance(v, int) for v in o["value"]) for o in reads)
    assert all(o["from_index"] + len(o["value"]) - 1 <= o["commit_index"] or not o["to_end"] for o in reads)
    assert any(o["f"] == "start-power-failure" for o in ops)


def test_new_fault_kinds_are_deterministic_and_replay_from_their_schedule(tmp_path: Path) -> None:
    opts = SimOptions("register", NEW_FAULTS.split(","), seed=28, time_limit=5)
    a, b = run_seed(opts), run_seed(opts)
    assert a.history == b.history and a.valid is True
    ids = {ev["id"] for ev in a.schedule}
    assert "power-failure" in ids and any(i.startswith("kill:") for i in ids)  # figure8 kills: own ids
    replay = run_seed(
        SimOptions("register", NEW_FAULTS.split(","), seed=28, time_limit=5, schedule=a.schedule)
    )
    assert replay.schedule == a.schedule


def _mutant_sim(name: str, tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    from chaos_dledger.mutants import apply_mutant, load_mutants

    mutant = {m.name: m for m in load_mutants()}[name]
    copy = apply_mutant(mutant, tmp_path / "mutant")
    root = Path(__file__).resolve().parents[1]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(copy), str(root)])}
    return subprocess.run(
        [sys.executable, "-m", "chaos.cli", "sim", *args, "--stop-on-failure", "--jobs", "2",
         "--store", str(tmp_path / "store")],
        cwd=tmp_path, env=env, capture_output=True, text=True, check=False,
    )  # fmt: skip


@pytest.mark.parametrize(
    "name,args,checker",
    [
        ("get-uncommitted", ["--workload", "log", "--nemesis", "partition", "--seeds", "40"], "log-reads"),
        (
            "lease-no-step-down",
            ["--workload", "register", "--nemesis", "partition", "--read-mode", "lease", "--seeds", "60"],
            "linear",
        ),
    ],
)
def test_read_path_mutants_are_caught_by_chaos_sim(
    name: str, args: list[str], checker: str, tmp_path: Path
) -> None:
    p = _mutant_sim(name, tmp_path, *args, "--time-limit", "5")
    assert p.returncode == 1, p.stdout + p.stderr
    (line,) = re.findall(r"^seed \d+: INVALID: .*$", p.stdout, re.M)  # stopped at the first
    assert checker in line


def test_the_default_swarm_catches_a_vote_counted_from_an_earlier_term(tmp_path: Path) -> None:
    """stale-vote-response under plain ``chaos sim`` (seed 1 of the swarm since issue 33's later
    draws, the first it fails; seed 204 before: slow-network holds vote answers until their
    candidate has moved on a term and has a vote round open): the candidate counts a grant of an
    earlier term and leads without a majority of that term's votes."""
    p = _mutant_sim("stale-vote-response", tmp_path, "--first-seed", "1", "--seeds", "1")
    assert p.returncode == 1, p.stdout + p.stderr
    assert re.search(r"^seed 1: INVALID: .*safety \(.* not a majority of 5\)", p.stdout, re.M), p.stdout


def test_the_default_swarm_catches_a_transfer_campaign_before_catch_up(tmp_path: Path) -> None:
    """transfer-without-catch-up under plain ``chaos sim`` (seed 10 of the swarm, the first it
    fails): the member a leader-transfer names campaigns on TimeoutNow before it caught up, the
    voters grant a campaign marked as a transfer without the log check (Raft 5.4.1, thesis 3.10),
    and it leads without entries the old leader committed. The correct server refuses that vote
    (the transferee waits for the entries, or the voters reject its log) and the seed is valid."""
    p = _mutant_sim("transfer-without-catch-up", tmp_path, "--first-seed", "10", "--seeds", "1")
    assert p.returncode == 1, p.stdout + p.stderr
    assert re.search(
        r"^seed 10: INVALID: .*safety \(.* became leader in term \d+ without committed entry",
        p.stdout,
        re.M,
    ), p.stdout
    correct = run_seed(SimOptions.swarm_for(10))
    assert correct.valid is True, correct.results


def test_a_slow_inbound_link_that_stalls_outbound_shows_heartbeat_answers_of_an_earlier_round(
    tmp_path: Path,
) -> None:
    """heartbeat-stale-round under ``--nemesis link-delay`` (seed 19): the leader s5's inbound
    links slow to 2 s, then its outbound side stalls. The mutant leader counts the late answers of
    its earlier heartbeat rounds as confirming reads that arrived after those rounds began: the
    read-confirmation invariant fails the seed at the first such read (before, only the stale
    reads it led to after a new leader wrote, which the linear checker found). The correct server
    steps down (no round of its own is answered within the lease) and the same seed is valid."""
    args = ["--workload", "register", "--nemesis", "link-delay", "--read-mode", "read-index"]
    args += ["--time-limit", "10", "--rate", "100", "--first-seed", "19", "--seeds", "1"]
    p = _mutant_sim("heartbeat-stale-round", tmp_path, *args)
    assert p.returncode == 1, p.stdout + p.stderr
    assert re.search(
        r"^seed 19: INVALID: safety \(s5 answered a read-index read .* not a majority of 5\)",
        p.stdout,
        re.M,
    ), p.stdout
    opts = SimOptions(
        "register",
        ["link-delay"],
        seed=19,
        time_limit=10,
        rate=100,
        nemesis_interval=2.5,
        read_mode="read-index",
    )
    correct = run_seed(opts)
    assert correct.valid is True, correct.results
    starts = [ev for ev in correct.schedule if ev["op"] == "start"]
    assert starts[0]["params"] == {
        "node": "s5",
        "send_ms": 0,
        "recv_ms": 2000,
        "step_ms": 200,
        "stall_other": True,
    }


def test_reads_confirmed_by_late_answers_of_a_fresh_round_pass_the_read_confirmation_check() -> None:
    """The correct server under a slow inbound side (every answer to the leader 80 ms late, so a
    read that arrives while a round is open sees that round's answers arrive after it and waits
    for the next round): read-index reads are answered, each only after a majority acknowledged a
    round begun after it arrived, so the simulator's read-confirmation invariant holds."""
    sim, answers = _kv_sim()
    ld = sim.leader()
    assert ld is not None
    sim.delay_links(ld, 0, 80)
    for n in range(20):
        assert sim.submit(ld, "kv:get", b"", ("get", n), key="k", read_mode="read-index") == Code.SUCCESS
        assert sim.run(1000, until=lambda n=n: ("get", n) in answers)
        assert answers[("get", n)][0] == Code.SUCCESS
        sim.run(37)  # the next read lands at another point of the heartbeat rhythm
    assert sim.leader() == ld and sim._read_waiters[ld] == []


def test_the_figure8_nemesis_finds_raft_figure_8(tmp_path: Path) -> None:
    """The old-term commit mutant (Raft paper section 5.4.2, Figure 8) is found by the figure8
    fault pattern: a leader of a later term commits an old-term entry by counting replicas, is
    cut off before its no-op commits, and a member holding another entry there is elected."""
    p = _mutant_sim(
        "figure8-old-term-commit", tmp_path, "--nemesis", "figure8", "--time-limit", "10", "--seeds", "100"
    )
    assert p.returncode == 1, p.stdout + p.stderr
    assert re.search(r"^seed \d+: INVALID: .*safety \(.*without committed entry", p.stdout, re.M), p.stdout


def test_a_leader_restarted_inside_its_term_does_not_lead_twice_in_it() -> None:
    """Seed 352: s4 votes for s2 in term 8, then wins term 8 on three others' votes, is killed and
    restarted; its voters would grant it term 8 again. The core campaigns at a new term after a
    restart with a vote on record."""
    r = run_seed(SimOptions("register", ["figure8"], seed=352, time_limit=10))
    assert r.results["safety"]["valid"] is True, r.results["safety"]
