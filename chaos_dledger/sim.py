"""``chaos sim``: deterministic simulation testing of the DLedger server's code.

Each seed runs a 5-member group — the real :class:`dledger.core.Core`, runtime driver
(:mod:`dledger.driver`), FileLogStore and currterm file, on :class:`dledger.sim.Sim`'s simulated
network and clock and :class:`dledger.simdisk.SimDisk` (``--disk file``, the default: a kill loses
unsynced writes and may tear the last one; ``bitflip`` flips a bit on a killed member's disk) — with
simulated clients running the register or log workload and a nemesis, for ``time_limit`` simulated
seconds;
then heals, lets the group settle, writes the history (JSON Lines, the normal format, simulated
nanoseconds) and checks it with the same checkers ``chaos check`` uses (``linear`` per key for
register; ``log`` and ``log-reads`` for log). Raft's safety invariants are checked at every step by
the simulation (election safety, log matching, leader completeness, state machine safety); a breach
fails the seed. One seed decides everything (TigerBeetle's VOPR, FoundationDB's simulator; see
``../shared/reference/simulation.md``): fault rates are drawn per seed (swarm testing) and the same
seed gives the same history byte for byte. The faults are explicit events (time, start/stop,
kind, parameters): ``--seed S --shrink`` shrinks a failing seed's events by ddmin (Zeller &
Hildebrandt 2002) and writes them to the run's ``schedule.json``; ``--schedule FILE`` replays them.

Clients go through the driver's client paths, as a real node's clients do: register reads in the
``--read-mode`` (raft-log, read-index, lease, unsafe), writes, cas and deletes (drawn as the
register workload draws them: a delete is a write of nil to the checker), appends, and the log workload's
``read-range`` (METADATA, then GET at the client's own member) during the run. As in the register
workload, odd processes are sticky: they read from their own member only and record its answer,
a deposed leader's too. A request to a paused member waits in its queue and, on resume, comes
before or after the member's queued peer messages (a seeded coin). Besides random partitions,
kills, pauses and clock rates, the nemeses target the leader (``partition-leader``,
``pause-leader``, ``clock-slow-leader``), cut power to every member (``power-failure``: all crash
at once, back one by one), and play Raft's Figure 8 (``figure8``: each new leader cut off within a
round trip of its election, mostly with the follower whose log ends in the newest term, sometimes
killed, and back after a short window). A partition drops the messages in flight on a cut link.
``--nemesis`` also takes ``chaos run``'s names where they mean the same fault (:data:`RUN_NAMES`):
its partition shapes (``partition-ring``, ``bridge``, ``partition-asymmetric`` ...) as the same
grudges its partition nemesis draws, cut on the simulated links; ``packet-delay`` (slow-network),
``packet-loss`` and ``packet-duplicate`` (network's loss or duplication alone), ``lose-unfsynced``
(a crash, which loses the unsynced writes) and ``restart`` (a clean stop); ``truncate``,
``packet-rate`` and ``packet-reorder`` are refused with the reason.

Without ``--nemesis`` each seed draws its own fault mix, rates, workload (register, log or
list-append), read mode and time limit (:func:`draw_mix`; Groce et al., Swarm Testing, ISSTA
2012), printed for a failing seed and replayed by ``--seed``. A list-append seed ends, after the
heal, with one transaction per client and a read of every active key, so that a seed whose faults
let nothing commit still gives Elle dependencies to check. Jepsen's ``bank``, ``counter``, ``set``
and ``long-fork`` run as their workloads draw them, through the KV's txn micro-ops (``init``,
``add``, which aborts below zero, ``sadd``) as ``chaos_dledger.clients`` sends them (a bank client
creates the accounts before its first op), checked by ``bank``, ``counter``,
``set-full-linearizable`` and ``long-fork``; they too end with a fault-free add or write per client
and final reads (:meth:`SimRun._final_kv`). The world under every seed also draws an fsync latency (a crash lands
between a write, its fsync's issue and its completion; the held acknowledgements wait for it) and
whether a crash keeps an out-of-order subset of unsynced pages. ``slow-network`` holds messages on
live links for up to several election timeouts, delivers late duplicates, holds messages (of
one RPC, both directions, at a high rate, or of all at a low one) until their receiver has moved on
a term or two and stands inside a round of that RPC, and makes partitions hold what crosses them
until the heal; ``kill-in-sync``/``power-in-sync`` crash a member (or all) while
an fsync is in flight; ``pause-round`` pauses a member inside a protocol round (an open heartbeat or
vote round, a follower holding acknowledgements) and releases its queue in a seeded order;
``clog`` holds one member's sending side, receiving side or both (FoundationDB's
``clogInterface``) and delivers what it held in order at the end; ``link-delay`` slows one side
or both of a member's links, the delay growing step by step as a filling queue's does, and may
then stall the other side (a partial failure: the member hears late what it can no longer answer;
both named with ``--nemesis``, the swarm does not draw them); ``storage`` and ``bitflip`` damage
a down member's committed records (header or body bit flips, lost or misdirected page writes), on a
minority of members, which the server repairs from the leader. ``leader-transfer`` asks the leader
to hand leadership over (DLedger's handleLeadershipTransfer) to the member furthest behind, a random
one, or one paused or cut off from it; with it in the mix a member just restarted is often asked
to lead, so it serves reads from the state it loaded. The world under every seed draws the
snapshot interval and the data segment size (small segments compact the log while followers lag,
so they rejoin through INSTALL_SNAPSHOT and restart from a snapshot; the log workload keeps its
whole log). Issue 33's later draws, each from a stream of its own (so the older kinds of every
seed's mix stay as they were): ``disk-error`` (one member's disk full, failing its fsyncs or a
share of its reads, handled as the server does), clean stops (a quarter of the kills), the
in-memory store (one seed in 8), heterogeneous disks (half the seeds: each member's fsync latency
its own), a preferred leader, ``--flush async`` (only without crashes), a stray client whose
requests the server refuses or aborts, and transfer requests a client with a stale view sends;
storage faults hit any committed segment and the index. Each campaign ends with seeds/s and a coverage line (how many seeds saw elections,
truncations, stale-term messages, lease extensions, recovery cuts, storage faults, repairs, ...);
a progress bar shows on the terminal meanwhile.

``--coverage`` measures which lines, branches and functions of the server's code the campaign
reached (coverage.py, :mod:`chaos.history.codecov`): one line of figures, and ``coverage.json``
and each file's unreached functions in ``<store>/sim-campaigns/<time>/``.

Exit status: 0 every seed valid, 1 some seed invalid, 2 some seed unknown (none invalid), 254 bad
arguments.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import json
import logging
import math
import multiprocessing
import random
import shutil
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import click

from chaos.api import (
    FAIL,
    INFO,
    INVOKE,
    NEMESIS,
    OK,
    PARTITION_SHAPES,
    HistoryWriter,
    Op,
    RunDir,
    codecov,
    partition_grudge,
    verdict_word,
)
from chaos.api import REGISTER_DELETE_ONE_IN as DELETE_ONE_IN
from chaos.api import REGISTER_VALUES as VALUES
from chaos_dledger import SOURCE_OMIT, SOURCE_PACKAGES

WORKLOADS = ("register", "log", "list-append", "bank", "counter", "set", "long-fork")
# Jepsen's workloads on the KV's txn micro-ops (init, add, sadd; chaos_dledger.clients' protocols)
KV_WORKLOADS = ("bank", "counter", "set", "long-fork")
# the safety checkers of each workload (Jepsen's stats checker, every f needs an ok, is a liveness
# figure); the set workload's reads are linearizable in every drawn read mode
SIM_CHECKERS: dict[str, list[str]] = {
    "register": ["linear"],
    "log": ["log", "log-reads"],
    "list-append": ["elle"],
    "bank": ["bank"],
    "counter": ["counter"],
    "set": ["set-full-linearizable"],
    "long-fork": ["long-fork"],
}
SET_READ_FRACTION = 0.25  # chaos.workloads.set's default read_fraction
# the swarm's draw: every workload (a list-append seed costs about a quarter more CPU than a
# register or log seed: bench/sim_power.py --swarm prints the campaign's seeds/s)
SWARM_WORKLOADS = WORKLOADS
NEMESES = (
    "none",
    "partition",
    "partition-leader",
    "kill",
    "kill-leader",
    "power-failure",
    "pause",
    "pause-leader",
    "clock-skew",
    "clock-slow-leader",
    "network",
    "bitflip",
    "figure8",
    "slow-network",
    "storage",
    "kill-in-sync",
    "power-in-sync",
    "pause-round",
    "clog",
    "link-delay",
    "leader-transfer",
    "disk-error",
)
# chaos run's names (issue 35 item 10: run, gate and sim take the same names where they mean the
# same fault). Its partition shapes are the same grudges (chaos.api.partition_grudge) cut on the
# simulated links; the others run as the simulator's fault of that meaning: packet-delay is
# slow-network (run takes slow-network for packet-delay), packet-loss and packet-duplicate are
# network's loss or duplication alone, lose-unfsynced is a kill (a simulated crash loses the
# unfsynced writes, always a crash here), restart a kill that is always a clean stop (SIGTERM)
RUN_PARTITIONS = tuple(PARTITION_SHAPES)
RUN_NAMES = (*RUN_PARTITIONS, "packet-delay", "packet-loss", "packet-duplicate", "lose-unfsynced", "restart")
# chaos run's faults the simulator does not have, and why
NOT_SIMULATED = {
    "truncate": "a simulated crash tears the last unsynced write; storage damages committed records",
    "packet-rate": "simulated links have no bandwidth",
    "packet-reorder": "simulated links reorder by their random latency always",
}
# the fault id a kind starts under: one partition at a time (any shape), one clock fault at a time
_SLOT = {
    "partition-leader": "partition",
    "clock-slow-leader": "clock-skew",
    **dict.fromkeys(RUN_PARTITIONS, "partition"),
}
_NETWORK = ("network", "packet-loss", "packet-duplicate")
_SLOW_NETWORK = ("slow-network", "packet-delay")
# kills of a victim set drawn at random (kill-leader's is the leader), restarted on stop
_KILLS = ("kill", "kill-leader", "lose-unfsynced", "restart")
DISKS = ("memory", "file")
READ_MODES = ("raft-log", "read-index", "lease", "unsafe")  # dledger.driver.READ_MODES
NODES = 5
NS_PER_MS = 1_000_000
READ_RANGE = "read-range"  # chaos.workloads.log.READ_RANGE
LOG_READ_FRACTION = 0.25  # the log workload's default read_fraction
LOG_READ_WINDOW = 16  # and read_window
STICKY_READ_TIMEOUT_MS = 10_000  # chaos.workloads.register.STICKY_READ_TIMEOUT_S
F8_POLL_MS = 5  # the figure8 nemesis looks for a new leader this often
# its share of kills among cut-offs: a killed leader's messages in flight still arrive (a cut drops
# them) and its restart takes a recovery, so mostly cuts
F8_KILL = 0.1
# how long a clog holds one side of a member's links (ms): a round, a lease, past an election, seconds
CLOG_MS = (50, 150, 300, 450, 700, 1000, 2000)
# link-delay: the delay one side of a member's links reaches (ms), and how it gets there: this many
# ms more every LINK_DELAY_STEP_EVERY_MS (a queue filling up), or 0: at once
LINK_DELAY_MS = (100, 250, 500, 1000, 2000)
LINK_DELAY_STEPS = (0, 50, 100, 200)
LINK_DELAY_STEP_EVERY_MS = 100


# kinds the random fault stream does not draw: swarm settings (network, slow-network, bitflip) and
# figure8's own loop
_NOT_DRAWN = ("none", *_NETWORK, *_SLOW_NETWORK, "bitflip", "figure8")
# what the swarm draws its per-seed fault mix from (Groce et al., Swarm Testing, ISSTA 2012)
# not drawn yet: with them (at 0.35 each) the swarm caught one catalogue class fewer within 2,000
# seeds (the other kinds run less often in effect) and heartbeat-stale-round, which needs
# link-delay's partial failure, still not (README "Simulator power"); named with --nemesis
SWARM_EXPLICIT_ONLY = ("clog", "link-delay")
# kinds the swarm draws from a stream of their own (each with the same probability), so that the
# older kinds' draws, and so every older seed's mix, stay as they were
SWARM_LATER = ("disk-error",)
SWARM_FAULTS = tuple(k for k in NEMESES if k not in ("none", *SWARM_EXPLICIT_ONLY, *SWARM_LATER))
SWARM_TIME_LIMITS = (3.0, 5.0, 10.0)
_CLOCK_FAULTS = ("clock-skew", "clock-slow-leader")
# the messages slow-network may hold across term changes -> where their receiver must stand for the
# release: any protocol point, or inside a round of the same RPC (a candidate's open vote round, a
# leader's open heartbeat round, a follower holding acknowledgements)
_TERM_LATE_AT = {"all": "any", "vote": "vote-round", "heartbeat": "heartbeat-round", "push": "follower-ack"}
ELECTION_MS = 480  # a follower's timeout plus the longest vote interval (dledger.core.CoreConfig)
# the world's fsync latency per seed (ms, min and max; (0, 0): at once), and with heterogeneous
# disks each member's, a degraded disk among them
SYNC_LATENCIES = ((0, 0), (1, 2), (1, 5), (2, 20))
DISK_LATENCIES = (*SYNC_LATENCIES, (5, 50))
HETEROGENEOUS_DISKS = 0.5
# the world's snapshot settings, drawn per seed: entries between snapshots (0: off) and the file
# disk's data segment size (small ones compact the log while followers lag; 1 MiB rarely)
SNAPSHOT_EVERY = (0, 5, 10, 20, 50)
DATA_FILE_SIZES = (4096, 4096, 16384, 1 << 20)
# leader-transfer targets: the member the leader's watermark puts furthest behind, any member, one
# paused or cut off from the leader (the transfer must fail, not hand over to it), or one whose
# state came from a snapshot (loaded at a restart or installed from the leader)
TRANSFER_TARGETS = ("furthest-behind", "random", "faulted", "snapshot")
RESTARTED_LEADER_MS = (200, 1000, 3000)  # a restarted member is asked to lead this long after
# how a leader-transfer is asked (DLedger's handleLeadershipTransfer checks each): of the leader in
# its term, or, as a client with a stale view asks, of a follower, with an earlier term, twice in a
# row (the second finds one running), or naming no member of the group
TRANSFER_ASKS = ("leader",) * 6 + ("follower", "stale-term", "twice", "unknown-member")
GRACEFUL_STOP = 0.25  # the share of kills that are a clean stop (SIGTERM) instead of a crash
# a storage fault's damage to committed data (dledger.sim.DAMAGE_KINDS' first six, the nemesis
# stream's choice as before), and, drawn from a stream of their own so that those stay as they
# were, the later shapes: with probability ALSO_DAMAGE the same member's index (a lost or
# misdirected page, a lost extent or file) or high-water marker (a flipped bit, an older mark) too;
# named here, not imported: importing this module loads no dledger code, so a coverage campaign
# measures dledger's module-level lines (tests/test_sim_reach.py holds them equal to DAMAGE_KINDS)
DATA_DAMAGE = (
    "flip-header",
    "flip-body",
    "lost-write",
    "misdirected-write",
    "lost-extent",
    "flip-index",
)
LATER_DAMAGE = (
    "lost-index-write",
    "misdirected-index-write",
    "lost-index-extent",
    "lost-index-file",
    "flip-highwater",
    "stale-highwater",
)
ALSO_DAMAGE = 0.5
# disk-error's kinds as the nemesis stream draws them (dledger.sim.DISK_ERRORS' first three), and
# the share of "full" that is a disk filling up instead (a write cut short, then ENOSPC), drawn
# from the later stream
FIRST_DISK_ERRORS = ("full", "fsync", "read")
FILLING = 0.5
# the world's rarer settings, drawn per seed: a preferred leader (--preferred-leader: the leader
# hands leadership to it whenever it can), DLedger's --flush async (acknowledgements before the
# fsync: only without crashes, which it does not survive by design) and a stray client
PREFERRED_LEADER = 0.15
FLUSH_ASYNC = 0.25
STRAY_CLIENT = 0.25
STRAY_EVERY_MS = 300  # its mean think time
# the swarm's share of seeds on the in-memory store (the server's --memory mode: dledger.sim's
# SimLogStore), drawn with the later kinds
MEMORY_DISK = 1 / 8
# the kinds that crash a member (or all): --flush async is drawn only for seeds without them
_CRASHING = (
    "kill",
    "kill-leader",
    "lose-unfsynced",
    "power-failure",
    "kill-in-sync",
    "power-in-sync",
    "storage",
    "bitflip",
    "figure8",
    "disk-error",
)


def draw_mix(seed: int) -> dict[str, Any]:
    """The swarm's per-seed choices (``chaos sim`` without ``--nemesis``), from the seed alone: the
    workload (any of :data:`SWARM_WORKLOADS`), read mode (of register reads and read-only
    transactions; the log workload reads entries), fault kinds (each present with probability 0.35,
    at least one; ``bitflip`` brings ``kill``, :func:`with_bitflip_kills`), time
    limit, client rate and concurrency, the interval between faults, and the store (``disk``: the
    in-memory one with probability :data:`MEMORY_DISK`). The kinds of :data:`SWARM_LATER` and the
    store come from a stream of their own, after the others, so adding them changed no older
    kind's draw. Lease reads leave clock faults out (a lease is safe only while clocks run at one
    rate), and so the swarm never draws the known-bad ``unsafe`` read mode."""
    r = random.Random(f"mix-{seed}")
    workload = r.choice(SWARM_WORKLOADS)
    read_mode = r.choice(("raft-log", "read-index", "lease")) if workload != "log" else "raft-log"
    pool = [k for k in SWARM_FAULTS if not (read_mode == "lease" and k in _CLOCK_FAULTS)]
    faults = with_bitflip_kills([k for k in pool if r.random() < 0.35] or [r.choice(pool)])
    later = random.Random(f"mix-later-{seed}")
    faults += [k for k in SWARM_LATER if later.random() < 0.35]
    disk = "memory" if later.random() < MEMORY_DISK else "file"
    time_limit = r.choice(SWARM_TIME_LIMITS)
    return {
        "workload": workload,
        "read_mode": read_mode,
        "nemesis": faults,
        "time_limit": time_limit,
        "rate": r.choice((20.0, 50.0, 100.0)),
        "clients": r.choice((5, 10)),
        "nemesis_interval": min(r.choice((0.5, 1.0, 2.0, 5.0)), time_limit / 4),
        "disk": disk,
    }


def mix_args(mix: dict[str, Any]) -> str:
    """The ``chaos sim`` options that run ``mix`` explicitly."""
    return (
        f"--workload {mix['workload']} --nemesis {','.join(mix['nemesis'])} --read-mode {mix['read_mode']} "
        f"--time-limit {mix['time_limit']:g} --rate {mix['rate']:g} --concurrency {mix['clients']} "
        f"--disk {mix['disk']}"
    )


@dataclass
class SimOptions:
    """One seed's settings: ``time_limit`` and ``nemesis_interval`` in simulated seconds; ``rate``
    client ops per simulated second in total; ``timeout_ms`` before a client gives up on an op
    (completing it ``info``); ``read_mode`` of the register's reads (one of :data:`READ_MODES`);
    ``sticky``: odd processes read from their own member only (as the register workload's)."""

    workload: str = "register"
    nemesis: list[str] = field(default_factory=lambda: ["partition", "kill"])
    seed: int = 0
    time_limit: float = 60.0
    clients: int = 10
    rate: float = 50.0
    nemesis_interval: float = 5.0
    timeout_ms: int = 1000
    ops_per_key: int = 100
    read_mode: str = "raft-log"
    sticky: bool = True
    disk: str = "file"
    schedule: list[dict[str, Any]] | None = None  # explicit fault events instead of drawn ones
    swarm: bool = False  # the options were drawn by draw_mix (for the report)

    @classmethod
    def swarm_for(cls, seed: int, disk: str | None = None, sticky: bool = True) -> SimOptions:
        """The swarm's options for ``seed`` (:func:`draw_mix`); ``disk`` None: the swarm's draw."""
        m = draw_mix(seed)
        return cls(
            m["workload"],
            m["nemesis"],
            seed,
            m["time_limit"],
            m["clients"],
            m["rate"],
            m["nemesis_interval"],
            read_mode=m["read_mode"],
            sticky=sticky,
            disk=disk or m["disk"],
            swarm=True,
        )


@dataclass
class SeedResult:
    """The verdict of one seed: ``valid`` True/False/"unknown"; ``results`` as results.json;
    ``history`` the history file's bytes; ``sim_ms`` simulated ms run; ``schedule`` the fault events
    of the generator phase (replayable through ``SimOptions.schedule``)."""

    seed: int
    valid: Any
    results: dict[str, Any]
    history: bytes
    sim_ms: int
    ops: int
    schedule: list[dict[str, Any]] = field(default_factory=list)
    stats: dict[str, int] = field(default_factory=dict)


class _Client:
    """One simulated client process: one op at a time against its target member (its ``home``
    member for a sticky read, which never redirects)."""

    def __init__(self, process: int, home: str) -> None:
        self.process = process
        self.home = home
        self.target = home
        self.op: Op | None = None
        self.sticky_op = False
        self.thread = process  # the worker thread (its process changes after an info)
        self.last: Op | None = None  # its last op's completion
        self.ready = False  # bank: this client saw the accounts created (chaos.workloads.bank.BankWorker)
        self.init_token: int | None = None  # bank: the init transaction in flight before the op
        self.after_init: tuple[str, bytes, str | None] | None = None  # and the op's request, sent after
        self.redirected_from: str | None = None  # a sticky read's member that named the leader


class SimRun:
    """One seed: the simulation, its clients and nemesis, and the history writer."""

    def __init__(self, opts: SimOptions, history_path: Path) -> None:
        from dledger.sim import Sim
        from dledger.statemachine import KVStateMachine

        self.opts = opts
        swarm = random.Random(f"swarm-{opts.seed}")
        latency_max = swarm.choice([2, 5, 10, 20])
        features = random.Random(f"features-{opts.seed}")  # a stream of its own: the others keep theirs
        self.snapshot_every = features.choice(SNAPSHOT_EVERY)
        if opts.workload == "log":
            # the log workload's state is the log itself: its final reads and checker need every
            # entry from index 0, which compaction drops
            self.snapshot_every = 0
        self.data_file_size = features.choice(DATA_FILE_SIZES)
        # (drawn after the older settings, so that those stay as they were for every seed)
        preferred = features.choice([f"s{i + 1}" for i in range(NODES)])
        self.preferred = [preferred] if features.random() < PREFERRED_LEADER else []
        crashes = any(k in _CRASHING for k in opts.nemesis)
        self.flush = "async" if features.random() < FLUSH_ASYNC and not crashes else "sync"
        self.stray = features.random() < STRAY_CLIENT and opts.workload != "log"
        self.sim = Sim(
            NODES,
            opts.seed,
            latency=(1, latency_max),
            state_machine=KVStateMachine,
            disk=opts.disk,
            snapshot_every=self.snapshot_every,
            data_file_size=self.data_file_size,
            flush=self.flush,
            preferred_leaders=self.preferred,
        )
        self.sim.on_answer = self._on_answer
        self.sim.cut_in_flight = True
        # file disk: a crash tears the last unsynced write of each file with this probability
        self.sim.tear_probability = swarm.choice([0.0, 0.5, 1.0])
        net = set(_NETWORK) & set(opts.nemesis)
        self.net_faults = bool(net)
        self.loss = swarm.choice([0.0, 0.01, 0.05]) if net else 0.0
        self.dup = swarm.choice([0.0, 0.02, 0.1]) if net else 0.0
        if "network" not in net:  # chaos run's packet-loss or packet-duplicate: that one alone
            self.loss = self.loss if "packet-loss" in net else 0.0
            self.dup = self.dup if "packet-duplicate" in net else 0.0
        self._world(random.Random(f"world-{opts.seed}"))
        self.damaged: set[str] = set()  # members given a storage fault: at most a minority
        self.sync_armed: dict[str, Any] | None = None  # kill-in-sync / power-in-sync, armed
        self.wl_rng = random.Random(f"workload-{opts.seed}")
        self.nem_rng = random.Random(f"nemesis-{opts.seed}")
        # the later draws of the nemesis (how a kill stops, how a transfer is asked): a stream of
        # their own, so that the older draws of every seed stay as they were
        self.extra_rng = random.Random(f"nemesis-extra-{opts.seed}")
        # and the storage faults' and disk errors' later shapes (see LATER_DAMAGE, FILLING)
        self.later_rng = random.Random(f"nemesis-later-{opts.seed}")
        self.stray_rng = random.Random(f"stray-{opts.seed}")
        self._stray_n = 0
        self.writer = HistoryWriter(history_path)
        self.clients = [_Client(p, self.sim.ids[p % NODES]) for p in range(opts.clients)]
        self._next_process = opts.clients
        self.by_token: dict[int, _Client] = {}
        self._token = 0
        self._next_value = 0
        self._key_ops = 0
        self._key = 0
        self._txn_state: tuple[tuple[int, ...], dict[int, int], int] | None = None
        self._lf_pending: dict[int, int] = {}  # long-fork: thread -> the key it wrote and has not read
        self.faults: dict[str, Any] = {}  # fault id (its kind, or "kill:<member>") -> what it holds
        self.clogs: dict[str, dict[tuple[str, str], int]] = {}  # fault id -> the clogs it set (Sim.clog)
        self.queued: dict[str, list[tuple[Any, ...]]] = {}  # requests waiting at a paused member
        # figure8 nemesis: its own stream; cuts each new leader off within a round trip (ms)
        self.f8_rng = random.Random(f"figure8-{opts.seed}")
        swarm.random()  # an earlier figure8 setting's draw, kept so that the seed's later draws stay
        self.f8_reach = 2 * latency_max
        self.f8_stint: tuple[str, int] | None = None  # the leader (member, term) it watches
        self.f8_at = 0  # when it cuts that leader off
        self.f8_cut = 0  # partitions it started (a heal is for its own partition only)
        self.schedule: list[dict[str, Any]] = []  # the faults as run: {"at": ms, "op", "kind", "params"}
        self.ops = 0
        self.accepting = True

    def _world(self, rng: random.Random) -> None:
        """The simulated world's per-seed rates: fsync latency (0.1-20 ms disks, rounded to the
        simulator's 1 ms) and crash reordering always; slow links, late duplicates, delivery across
        term changes and partitions that hold messages with ``slow-network``."""
        sim = self.sim
        sim.sync_latency = rng.choice(SYNC_LATENCIES)
        sim.reorder_probability = rng.choice([0.0, 0.5, 1.0])
        # half the seeds run on disks that differ (members on other hardware, a degraded disk):
        # each member's fsync latency its own, so a leader may sync slower than the followers
        # that acknowledge its entries (drawn from a stream of its own: the others keep theirs)
        disks = random.Random(f"disks-{self.opts.seed}")
        if disks.random() < HETEROGENEOUS_DISKS:
            sim.disk_latency = {i: disks.choice(DISK_LATENCIES) for i in sim.ids}
        if set(_SLOW_NETWORK) & set(self.opts.nemesis):
            sim.slow_ms = rng.choice([1, 3, 6]) * ELECTION_MS
            self.slow = rng.choice([0.005, 0.02, 0.05])
            self.late_dup = rng.choice([0.0, 0.01, 0.05])
            sim.hold_partitions = rng.random() < 0.5
            # swarm testing within the fault: every message kind at a low rate, or one RPC's
            # messages (both directions) at a high one
            from dledger.sim import RPC_MESSAGES

            rpc = rng.choice(list(_TERM_LATE_AT))
            sim.term_late_kinds = RPC_MESSAGES.get(rpc, ())
            sim.term_late_point = _TERM_LATE_AT[rpc]
            self.term_late = rng.choice([0.005, 0.02, 0.05] if rpc == "all" else [0.05, 0.2, 0.5])
        else:
            self.slow = self.late_dup = self.term_late = 0.0
        sim.on_sync_start = self._on_sync_start

    # ------------------------------------------------------------ history

    def _write(self, op: Op) -> None:
        op.time = self.sim.now * NS_PER_MS
        self.writer.write(op)
        self.ops += 1

    # ------------------------------------------------------------ clients

    def _new_txn(self, c: _Client) -> Op:
        """The list-append workload's next transaction (chaos.workloads.txn's generator, its state
        kept here); keys become ``"t<key>"`` as DLedger's txn client names them."""
        from chaos.api import TXN_DEFAULTS as DEFAULTS
        from chaos.api import draw_txn

        if self._txn_state is None:
            n = DEFAULTS["key_count"]
            self._txn_state = (tuple(range(n)), {}, n)
        mops, *state = draw_txn(self.wl_rng, "append", DEFAULTS, *self._txn_state)
        self._txn_state = tuple(state)  # type: ignore[assignment]
        return Op(INVOKE, c.process, "txn", mops)

    def _new_kv_op(self, c: _Client) -> Op:
        """The next op of the bank, counter, set or long-fork workload, drawn as its generator
        draws it (chaos.workloads.bank, counter, set, long_fork): bank and counter a 50/50 mix,
        set a read with probability :data:`SET_READ_FRACTION` else an add of the next element,
        long-fork Jepsen's generator (:class:`chaos.workloads.long_fork.LongForkOps`; its state
        kept here, keys become ``"t<key>"``)."""
        rng, w = self.wl_rng, self.opts.workload
        if w == "bank":
            from chaos.api import BANK_ACCOUNTS as ACCOUNTS
            from chaos.api import BANK_MAX_TRANSFER as MAX_TRANSFER

            if rng.random() < 0.5:
                frm, to = rng.sample(ACCOUNTS, 2)
                value = {"from": frm, "to": to, "amount": rng.randint(1, MAX_TRANSFER)}
                return Op(INVOKE, c.process, "transfer", value)
            return Op(INVOKE, c.process, "read", None)
        if w == "counter":
            from chaos.api import COUNTER_MAX_ADD as MAX_ADD

            if rng.random() < 0.5:
                return Op(INVOKE, c.process, "add", rng.randint(1, MAX_ADD))
            return Op(INVOKE, c.process, "read", None)
        if w == "set":
            if rng.random() < SET_READ_FRACTION:
                return Op(INVOKE, c.process, "read", None)
            self._next_value += 1
            return Op(INVOKE, c.process, "add", self._next_value - 1)
        from chaos.api import LONG_FORK_GROUP_SIZE as GROUP_SIZE
        from chaos.api import long_fork_read_txn as read_txn

        own = self._lf_pending.pop(c.thread, None)
        if own is not None:
            txn = read_txn(GROUP_SIZE, own, rng)
        elif self._lf_pending and rng.random() < 0.5:
            txn = read_txn(GROUP_SIZE, rng.choice(sorted(self._lf_pending.values())), rng)
        else:
            txn = [["append", self._next_value, 1]]
            self._lf_pending[c.thread] = self._next_value
            self._next_value += 1
        return Op(INVOKE, c.process, "txn", txn)

    def _kv_mops(self, op: Op) -> list[list[Any]]:
        """The KV txn of a bank, counter or set op, as chaos_dledger.clients' clients send it."""
        from chaos.api import BANK_ACCOUNTS as ACCOUNTS

        w = self.opts.workload
        if w == "bank":
            if op.f == "transfer":
                v = op.value
                return [["add", f"a{v['from']}", -v["amount"]], ["add", f"a{v['to']}", v["amount"]]]
            return [["r", f"a{a}", None] for a in ACCOUNTS]
        key = "counter" if w == "counter" else "set"
        if op.f == "add":
            return [["add" if w == "counter" else "sadd", key, op.value]]
        return [["r", key, None]]

    def _kv_read_value(self, got: list[list[Any]]) -> Any:
        """An ok read's value from the txn's answer, as the real clients record it: bank
        ``{"<account>": balance}``, counter an int (null: 0), set a list (null: empty)."""
        from chaos.api import BANK_ACCOUNTS as ACCOUNTS

        w = self.opts.workload
        if w == "bank":
            return {str(a): g[2] for a, g in zip(ACCOUNTS, got, strict=True)}
        if w == "counter":
            return got[0][2] or 0
        return list(got[0][2] or [])

    def _new_op(self, c: _Client) -> Op:
        rng = self.wl_rng
        if self.opts.workload == "list-append":
            return self._new_txn(c)
        if self.opts.workload in KV_WORKLOADS:
            return self._new_kv_op(c)
        if self.opts.workload == "log":
            if rng.random() < LOG_READ_FRACTION:
                return Op(INVOKE, c.process, READ_RANGE, None)
            v = self._next_value
            self._next_value += 1
            return Op(INVOKE, c.process, "append", v)
        if self._key_ops >= self.opts.ops_per_key:
            self._key, self._key_ops = self._key + 1, 0
        self._key_ops += 1
        f = rng.choice(("read", "write", "cas"))
        value: Any = None
        if f == "write":  # the register workload's draw: a value, or as often as any one, a delete
            value = rng.randrange(DELETE_ONE_IN)
            f, value = ("delete", None) if value == VALUES else (f, value)
        elif f == "cas":
            value = [rng.randrange(5), rng.randrange(5)]
        return Op(INVOKE, c.process, f, value, key=self._key)

    def _invoke(self, c: _Client, final: str | Op | None = None) -> None:
        """Start client ``c``'s next op (``final`` "read-all": a transaction reading every active
        key of the list-append workload; an :class:`Op`: that op, of the final phase)."""
        if isinstance(final, Op):
            op = final
        elif final is not None and self._txn_state is not None:
            op = Op(INVOKE, c.process, "txn", [["r", k, None] for k in self._txn_state[0]])
        else:
            op = self._new_op(c)
        # the register workload's sticky processes: odd ones read from their own member only
        c.sticky_op = (
            self.opts.sticky and self.opts.workload == "register" and op.f == "read" and c.process % 2 == 1
        )
        c.redirected_from = None
        op.node = c.home if c.sticky_op or op.f == READ_RANGE else c.target
        self._write(op)
        c.op = op
        if op.f == READ_RANGE:
            self._read_range(c, op)
            return
        kind, body, key = self._request(op)
        if self.opts.workload == "bank" and not c.ready:
            # BankWorker: create the accounts (idempotent init) before the client's first op
            from chaos.api import bank_initial_balances as initial_balances
            from dledger.statemachine import encode_txn

            c.after_init = (kind, body, key)
            init = [["init", f"a{a}", b] for a, b in initial_balances().items()]
            self._dispatch(c, op, "kv:txn", encode_txn(init), None, init=True)
            return
        self._dispatch(c, op, kind, body, key)

    def _request(self, op: Op) -> tuple[str, bytes, str | None]:
        """The driver request ``(kind, body, key)`` of a client op."""
        from dledger.statemachine import encode_kv, encode_txn

        if op.f == "append":
            return "append", str(op.value).encode(), None
        if op.f == "txn":
            return "kv:txn", encode_txn([[f, f"t{k}", v] for f, k, v in op.value]), None
        if self.opts.workload in KV_WORKLOADS:
            return "kv:txn", encode_txn(self._kv_mops(op)), None
        key = f"r{op.key}"
        if op.f == "read":
            return "kv:get", b"", key
        if op.f == "write":
            return "kv:put", encode_kv("put", key, op.value), key
        if op.f == "delete":
            return "kv:delete", encode_kv("delete", key), key
        return "kv:cas", encode_kv("cas", key, *op.value), key

    def _dispatch(
        self, c: _Client, op: Op, kind: str, body: bytes, key: str | None, init: bool = False
    ) -> None:
        """Send one request of ``op`` to ``op.node`` (queued while it is paused) under a fresh token,
        with the client's timeout (``init``: the bank client's init transaction before ``op``)."""
        self._token += 1
        token = self._token
        self.by_token[token] = c
        if init:
            c.init_token = token
        wait = STICKY_READ_TIMEOUT_MS if c.sticky_op else self.opts.timeout_ms
        self.sim.call_at(self.sim.now + wait, lambda: self._timeout(c, op, token))
        request = (c, op, token, kind, body, key)
        node = str(op.node)
        if node in self.sim.paused:
            self.queued.setdefault(node, []).append(request)  # the request waits in its socket
        else:
            self._send(node, request)

    def _send(self, node: str, request: tuple[Any, ...]) -> None:
        from dledger.protocol import Code

        c: _Client = request[0]
        op: Op = request[1]
        token, kind, body, key = request[2:]
        code = self.sim.submit(node, kind, body, token, key=key, read_mode=self.opts.read_mode)
        if code != Code.SUCCESS and c.op is op and self.by_token.get(token) is c:
            # refused before anything was appended: definitely not done; try the leader next
            self.by_token.pop(token, None)
            if self._redirect(c, op, node, code, (kind, body, key)):
                return
            if not c.sticky_op:
                core = self.sim.nodes.get(node)
                hint = core.leader_id if core is not None else None
                c.target = hint if hint is not None and hint != node else c.home
            self._complete(c, op.completion(FAIL, op.value, error=Code(code).name))

    def _send_queued(self, node: str) -> None:
        """Hand the requests that waited at a paused member to it (it was resumed)."""
        for request in self.queued.pop(node, []):
            if node in self.sim.nodes:
                self._send(node, request)

    def _read_range(self, c: _Client, op: Op) -> None:
        """The log workload's ``read-range`` at the client's own member, through the driver's
        METADATA and GET (see chaos.workloads.log): from ``commitIndex - window + 1`` until
        INDEX_OUT_OF_RANGE or ``window + 64`` entries."""
        from dledger.protocol import Code

        node = c.home
        meta = self.sim.metadata(node)
        if meta is None:
            self._complete(c, op.completion(FAIL, None, error=f"metadata of {node}: member down"))
            return
        commit, begin = meta["commitIndex"], meta["ledgerBeginIndex"]
        start = max(0, begin, commit - LOG_READ_WINDOW + 1)
        values: list[int | None] = []
        to_end, error = False, None
        for i in range(start, start + LOG_READ_WINDOW + 64):
            code, e = self.sim.get(node, i)
            if e is not None:
                values.append(int(e.body) if e.magic == 1 and e.body.isdigit() else None)
                continue
            if code in (Code.INDEX_OUT_OF_RANGE, Code.INDEX_LESS_THAN_LOCAL_BEGIN):
                to_end = True
            else:
                error = f"read of index {i} failed: {Code(code).name}"
            break
        if not values and not to_end:
            self._complete(c, op.completion(FAIL, None, error=error))
            return
        comp = op.completion(OK, values, from_index=start, to_end=to_end, commit_index=commit)
        if error:
            comp.error = error
        self._complete(c, comp)

    def _on_answer(self, node: str, token: Any, code: int, fields: dict[str, Any]) -> None:
        from dledger.protocol import Code

        c = self.by_token.pop(token, None)
        if c is None or c.op is None:
            return  # answered after the client gave up
        op = c.op
        if token == c.init_token:
            self._on_init(c, op, code)
            return
        if code == Code.SUCCESS:
            if op.f == "read" and self.opts.workload in KV_WORKLOADS:
                comp = op.completion(OK, self._kv_read_value(fields.get("value") or []))
            elif op.f == "read":
                comp = op.completion(OK, fields.get("value"))
            elif op.f == "cas" and not fields.get("applied"):
                comp = op.completion(
                    FAIL, op.value, error="cas: expected value did not match", compare_failed=True
                )
            elif op.f == "append":
                comp = op.completion(OK, op.value, log_index=fields.get("index"))
            elif op.f == "txn":  # the answer's reads, under the workload's keys
                got = fields.get("value") or []
                comp = op.completion(OK, [[f, k, g[2]] for (f, k, _), g in zip(op.value, got, strict=True)])
            else:
                comp = op.completion(OK, op.value)
        elif op.f == "read" and self._redirect(c, op, node, code, self._request(op)):
            return
        elif op.f == "transfer" and code == Code.UNEXPECTED_ARGUMENT:
            # the state machine refused it (the balance does not cover it): served, no match, as
            # chaos_dledger.clients.DLedgerBankClient records it
            comp = op.completion(FAIL, op.value, error=Code(code).name, compare_failed=True)
        elif code in (Code.TERM_CHANGED, Code.UNEXPECTED_ARGUMENT) or op.f == "read":
            # a read that failed changed nothing; an aborted txn applied nothing
            comp = op.completion(FAIL, op.value, error=Code(code).name)
        else:
            comp = op.completion(INFO, op.value, error=Code(code).name)
        self._complete(c, comp)

    def _redirect(
        self, c: _Client, op: Op, node: str, code: int, request: tuple[str, bytes, str | None]
    ) -> bool:
        """A sticky read refused NOT_LEADER by a member that names another leader is sent once to
        that leader, as the real register client follows DLedger's redirect
        (``chaos_dledger.clients.DLedgerRegisterClient.read``: the completion says
        ``redirected_from``); True when it was. A refusal naming no leader stays a fail."""
        from dledger.protocol import Code

        if not c.sticky_op or c.redirected_from is not None or code != Code.NOT_LEADER:
            return False
        core = self.sim.nodes.get(node)
        hint = core.leader_id if core is not None else None
        if hint is None or hint == node:
            return False
        c.redirected_from, c.sticky_op, c.target = node, False, hint
        op.node = hint  # the redirecting client's request: its timeout, at the leader named
        self._dispatch(c, op, *request)
        return True

    def _on_init(self, c: _Client, op: Op, code: int) -> None:
        """The bank client's init answered: send the op (the accounts exist from now on), or fail
        it, not sent (BankWorker: "accounts not created")."""
        from dledger.protocol import Code

        c.init_token = None
        request, c.after_init = c.after_init, None
        if code == Code.SUCCESS and request is not None:
            c.ready = True
            self._dispatch(c, op, *request)
        else:
            self._complete(c, op.completion(FAIL, op.value, error=f"accounts not created: {Code(code).name}"))

    def _complete(self, c: _Client, comp: Op) -> None:
        comp.node = comp.node or (c.home if c.sticky_op else c.target)
        if c.sticky_op or c.redirected_from is not None:
            comp.extra["sticky"] = True
        if c.redirected_from is not None:
            comp.extra["redirected_from"] = c.redirected_from
        self._write(comp)
        c.op = None
        c.last = comp
        c.init_token = c.after_init = None
        if comp.type == INFO:
            c.process = self._next_process  # Jepsen: an indeterminate op retires its process
            self._next_process += 1
        self._schedule(c)

    def _schedule(self, c: _Client) -> None:
        """The client's next op after a think time (exponential, mean concurrency / rate)."""
        if not self.accepting:
            return
        mean_ms = 1000.0 * self.opts.clients / self.opts.rate if self.opts.rate > 0 else 0.0
        wait = int(self.wl_rng.expovariate(1.0 / mean_ms)) if mean_ms else 0
        self.sim.call_at(
            self.sim.now + wait, lambda: self._invoke(c) if c.op is None and self.accepting else None
        )

    def _timeout(self, c: _Client, op: Op, token: int) -> None:
        if c.op is not op or token not in self.by_token:
            return  # answered in time (or a bank client's init was, and the op went on)
        self.by_token.pop(token, None)
        if not c.sticky_op:
            c.target = self.sim.ids[(self.sim.ids.index(c.target) + 1) % NODES]
        if token == c.init_token:  # the op itself was not sent
            c.init_token = c.after_init = None
            self._complete(c, op.completion(FAIL, op.value, error="accounts not created: timeout"))
            return
        self._complete(c, op.completion(INFO, op.value, error="timeout"))

    # ------------------------------------------------------------ nemesis

    def _nemesis(self, f: str, value: Any) -> None:
        self._write(Op(INFO, NEMESIS, f, value))
        self._write(Op(INFO, NEMESIS, f, value))

    def _draw_start(self) -> tuple[str, Any] | None:
        """The next fault to start, from the nemesis stream: ``(kind, params)``, or None."""
        sim, rng = self.sim, self.nem_rng
        leader = sim.leader()
        kinds = [
            k
            for k in self.opts.nemesis
            if k not in _NOT_DRAWN
            and _SLOT.get(k, k) not in self.faults
            and (k != "leader-transfer" or leader is not None)  # a transfer needs a leader to ask
        ]
        if not kinds:
            return None
        kind = rng.choice(kinds)
        if kind == "partition":
            ids = sim.ids[:]
            rng.shuffle(ids)
            cut = rng.randint(1, NODES // 2)
            return kind, [ids[:cut], ids[cut:]]
        if kind in RUN_PARTITIONS:  # chaos run's shape, the grudge its partition nemesis draws
            shape = PARTITION_SHAPES[kind]
            return kind, {"shape": shape, "grudge": partition_grudge(shape, sim.ids, rng)}
        if kind == "partition-leader":  # the leader alone on the minority side
            alone = leader if leader is not None else rng.choice(sim.ids)
            return kind, [[alone], [i for i in sim.ids if i != alone]]
        if kind == "power-failure":  # every member at once; back one by one, in a random order
            order = sim.ids[:]
            rng.shuffle(order)
            return kind, {"order": order, "gaps": [rng.choice([0, 50, 200, 1000]) for _ in order]}
        if kind == "pause-leader":
            return kind, [leader if leader is not None else rng.choice(sim.ids)]
        if kind == "clock-slow-leader":
            return kind, {leader if leader is not None else rng.choice(sim.ids): rng.choice([0.25, 0.5, 0.8])}
        if kind in _KILLS:
            if kind == "kill-leader":
                victims = [leader] if leader is not None else [rng.choice(sim.ids)]
            else:
                victims = rng.sample(sim.ids, rng.randint(1, NODES // 2))
            damage = None
            if "bitflip" in self.opts.nemesis and self.opts.disk == "file":
                # one bit on one killed member's committed records: a minority, repairable
                damage = {
                    "node": rng.choice(sorted(victims)),
                    "kind": rng.choice(["flip-header", "flip-body"]),
                }
            graceful = self.extra_rng.random() < GRACEFUL_STOP  # a clean stop (SIGTERM) this time
            if kind in ("lose-unfsynced", "restart"):
                graceful = kind == "restart"
            return kind, {"victims": victims, "damage": damage, "graceful": graceful}
        if kind == "storage":  # a down member's committed data damaged; restarted on stop
            v = rng.choice(sim.ids)
            damage = {"node": v, "kind": rng.choice(DATA_DAMAGE)}
            if self.later_rng.random() < ALSO_DAMAGE:  # and its index or high-water marker
                damage["also"] = self.later_rng.choice(LATER_DAMAGE)
            return kind, {"victims": [v], "damage": damage}
        if kind in ("kill-in-sync", "power-in-sync"):
            return kind, {
                "node": rng.choice([*sim.ids, "*"]),
                "gaps": [rng.choice([0, 50, 500]) for _ in sim.ids],
            }
        if kind == "pause-round":
            from dledger.sim import PAUSE_POINTS, RELEASE_ORDERS

            who = rng.choice(["*", "leader", *sim.ids])
            point = rng.choice(PAUSE_POINTS)
            if self.opts.read_mode == "lease" and rng.random() < 0.5:
                # a lease leader that stalls between sending a heartbeat round and processing its
                # answers: the lease it computes from that round must not outlive the stall
                who, point = "leader", "heartbeat-round"
            if who == "leader":
                who = leader if leader is not None else "*"
            return kind, {"node": who, "point": point, "order": rng.choice(RELEASE_ORDERS)}
        if kind == "pause":
            return kind, rng.sample(sim.ids, rng.randint(1, NODES // 2))
        if kind == "leader-transfer":
            policy = rng.choice(TRANSFER_TARGETS)
            ask = self.extra_rng.choice(TRANSFER_ASKS)
            return kind, {"to": self._transfer_target(leader, policy), "policy": policy, "ask": ask}
        if kind == "disk-error":  # one member's disk: full (or filling up), failing its fsyncs or reads
            who = leader if leader is not None and rng.random() < 0.5 else rng.choice(sim.ids)
            error = rng.choice(FIRST_DISK_ERRORS)
            if error == "full" and self.later_rng.random() < FILLING:
                error = "filling"
            return kind, {"node": who, "error": error}
        if kind in ("clog", "link-delay"):  # one member's sending side, receiving side or both
            who = self._gray_target(leader)
            side = rng.choice(["send", "recv", "both"])
            choices = CLOG_MS if kind == "clog" else LINK_DELAY_MS
            send, recv = (rng.choice(choices) if side in (s, "both") else 0 for s in ("send", "recv"))
            params: dict[str, Any] = {"node": who, "send_ms": send, "recv_ms": recv}
            if kind == "link-delay":
                params["step_ms"] = rng.choice(LINK_DELAY_STEPS)
                # a partial failure: once one side is at its delay, the other side may stall too
                # (held until the fault stops), so the member hears late what it can no longer answer
                params["stall_other"] = side != "both" and rng.random() < 0.5
            return kind, params
        return kind, {v: rng.choice([0.5, 0.8, 1.25, 2.0]) for v in rng.sample(sim.ids, 2)}  # clock-skew

    def _transfer_target(self, leader: str | None, policy: str) -> str:
        """The member a leader-transfer names (:data:`TRANSFER_TARGETS`): the one the leader's
        watermark puts furthest behind, a random one, one paused or cut off from the leader, or one
        whose state came from a snapshot (furthest behind when none is)."""
        sim, rng = self.sim, self.nem_rng
        others = [i for i in sim.ids if i != leader]
        if leader is None or policy == "random":
            return rng.choice(others)
        if policy == "faulted":
            cut = [i for i in others if i in sim.paused or i not in sim.nodes or (leader, i) in sim.blocked]
            if cut:
                return rng.choice(cut)
        if policy == "snapshot":
            loaded = [i for i in others if i in sim.from_snapshot or sim.installed[i]]
            if loaded:
                return rng.choice(loaded)
        core = sim.nodes[leader]
        return min(others, key=lambda i: (core.match_index(i), rng.random()))

    def _transfer(self, params: dict[str, Any]) -> dict[str, Any]:
        """Ask the leader to hand leadership to ``params["to"]`` (DLedger's
        handleLeadershipTransfer; Raft's TimeoutNow, thesis 3.10): what the nemesis op records."""
        from dledger.protocol import Code

        sim, to = self.sim, params["to"]
        ld = sim.leader()
        if ld is None or ld in sim.paused:
            return {"from": None, "to": to, "applied": False, "why": "no leader"}
        ask = params.get("ask", "leader")
        via, term = ld, None
        if ask == "follower":  # a client whose metadata names a deposed leader asks a follower
            via = min((i for i in sim.nodes if i != ld and i not in sim.paused), default=ld)
        elif ask == "stale-term":  # the leader's term as a client saw it before the last election
            term = sim.nodes[ld].term - 1
        elif ask == "unknown-member":
            to = f"s{NODES + 1}"
        code = sim.transfer(to, via=via, term=term)
        if ask == "twice" and code == Code.SUCCESS and ld != to and ld in sim.nodes:
            sim.transfer(to, via=ld)  # a second request while the first runs: LEADER_TRANSFERRING
        ok = code == Code.SUCCESS and ld != to
        sim.stats["transfers"] += ok
        out = {"from": ld, "to": to, "policy": params.get("policy"), "code": Code(code).name, "applied": ok}
        if ask != "leader":
            out["ask"] = ask
        return out if ok else {**out, "why": f"{via} answered {Code(code).name}"}

    def _gray_target(self, leader: str | None) -> str:
        """The member a clog or link delay hits: half the time the member whose links are already
        clogged or slow (a failing NIC or switch port degrades in stages), else half the time the
        leader, else any member."""
        rng = self.nem_rng
        gray = sorted({f["node"] for k, f in self.faults.items() if k in ("clog", "link-delay")})
        if gray and rng.random() < 0.5:
            return rng.choice(gray)
        return leader if leader is not None and rng.random() < 0.5 else rng.choice(self.sim.ids)

    def _delay_step(self, params: dict[str, Any], k: int) -> None:
        """Step ``k`` of a link delay: each side ``k * step_ms`` (at most its ``*_ms``), until both
        are reached or the fault stopped."""
        if self.faults.get("link-delay") is not params:
            return
        step = params["step_ms"]
        send, recv = (min(ms, k * step) if step else ms for ms in (params["send_ms"], params["recv_ms"]))
        self.sim.delay_links(params["node"], send, recv)
        if (send, recv) != (params["send_ms"], params["recv_ms"]):
            self.sim.call_at(
                self.sim.now + LINK_DELAY_STEP_EVERY_MS, functools.partial(self._delay_step, params, k + 1)
            )
        elif params.get("stall_other"):
            forever = 10**9  # until the fault stops (unclog)
            self.clogs["link-delay"] = self.sim.clog(
                params["node"], 0 if send else forever, 0 if recv else forever
            )

    def _start(self, kind: str, params: Any, fid: str | None = None) -> None:
        """Start fault ``kind`` with explicit ``params`` (as drawn, or from a schedule) under the
        id ``fid`` (default: the kind; the figure8 nemesis kills members under ids of their own)."""
        fid = fid or _SLOT.get(kind, kind)
        if fid in self.faults or (_SLOT.get(kind, kind) == "partition" and "partition" in self.faults):
            return
        self.schedule.append({"at": self.sim.now, "op": "start", "kind": kind, "params": params, "id": fid})
        sim = self.sim
        if kind in ("partition", "partition-leader"):
            sim.partition(*params)
            self.faults["partition"] = params
            self._nemesis("start-partition", [sorted(g) for g in params])
        elif kind in RUN_PARTITIONS:
            sim.block({(src, dst) for dst, srcs in params["grudge"].items() for src in srcs})
            self.faults["partition"] = params
            self._nemesis("start-partition", params)
        elif kind in (*_KILLS, "storage"):
            damage = params.get("damage")
            if damage and not self._may_damage(damage["node"]):
                damage = None
            below = sim.committed_bytes(damage["node"]) if damage else 0
            for v in params["victims"]:
                if params.get("graceful"):
                    sim.stop(v)  # SIGTERM: the server's clean shutdown
                else:
                    sim.crash(v)
                self.queued.pop(v, None)  # requests waiting at a killed member are gone
            self.faults[fid] = params["victims"]
            self._nemesis("start-kill", sorted(params["victims"]))
            for how in (damage["kind"], damage.get("also")) if damage else ():
                if how is not None:
                    self._inflict(damage["node"], how, below)
        elif kind in ("kill-in-sync", "power-in-sync"):
            self.faults[fid] = {"armed": params, "victims": []}
            self.sync_armed = {"fid": fid, "power": kind == "power-in-sync", **params}
            self._nemesis(f"arm-{kind}", params)
        elif kind == "pause-round":
            self.faults[fid] = {"armed": params, "victims": []}
            sim.pause_at(params["node"], params["point"], functools.partial(self._paused_in_round, fid))
            self._nemesis("arm-pause-round", params)
        elif kind == "power-failure":
            for v in sim.ids:
                sim.crash(v)
                self.queued.pop(v, None)
            self.faults[fid] = params
            self._nemesis("start-power-failure", sim.ids)
        elif kind in ("pause", "pause-leader"):
            for v in params:
                sim.pause(v)
            self.faults[fid] = params
            self._nemesis("start-pause", sorted(params))
        elif kind == "clog":
            self.clogs[fid] = sim.clog(params["node"], params["send_ms"], params["recv_ms"])
            self.faults[fid] = params
            self._nemesis("start-clog", params)
        elif kind == "link-delay":
            self.faults[fid] = params
            self._nemesis("start-link-delay", params)
            self._delay_step(params, 1)
        elif kind in ("clock-skew", "clock-slow-leader"):
            for v, r in params.items():
                sim.set_clock_rate(v, r)
            self.faults[fid] = params
            self._nemesis("start-clock", params)
        elif kind == "leader-transfer":
            res = self._transfer(params)
            if res["applied"]:  # a refused one (no leader, the target too far behind) changes nothing
                self.faults[fid] = params
                self._nemesis("start-leader-transfer", res)
        elif kind == "disk-error":
            sim.fail_disk(params["node"], params["error"])
            self.faults[fid] = params
            self._nemesis("start-disk-error", params)

    def _inflict(self, node: str, kind: str, below: int) -> None:
        """Storage fault ``kind`` on down member ``node`` below data position ``below``
        (``Sim.damage``), recorded in the history when there was something to damage."""
        done = self.sim.damage(node, kind, below)
        if done is not None:
            self.damaged.add(node)
            self._nemesis("bitflip" if kind.startswith("flip") else "storage-fault", {"node": node, **done})

    def _may_damage(self, node: str) -> bool:
        """Storage faults stay on a minority of members (TigerBeetle's ClusterFaultAtlas), so a
        majority always holds every committed entry and a damaged member can be repaired."""
        return self.opts.disk == "file" and (node in self.damaged or len(self.damaged) < NODES // 2)

    def _on_sync_start(self, node: str, at: int) -> None:
        """An fsync of ``node`` started, completing at ``at`` ms: an armed kill-in-sync (or
        power-in-sync) lands strictly between its issue and its completion."""
        armed = self.sync_armed
        if armed is None or armed["node"] not in ("*", node) or at - self.sim.now < 2:
            return
        self.sync_armed = None
        crash_at = self.nem_rng.randint(self.sim.now + 1, at - 1)
        self.sim.call_at(crash_at, functools.partial(self._crash_in_sync, armed, node))

    def _crash_in_sync(self, armed: dict[str, Any], node: str) -> None:
        fid = armed["fid"]
        if fid not in self.faults or node not in self.sim.nodes:
            self.sync_armed = armed if fid in self.faults else None  # try again at its next fsync
            return
        victims = list(self.sim.ids) if armed["power"] else [node]
        for v in victims:
            self.sim.crash(v)
            self.queued.pop(v, None)
        self.faults[fid]["victims"] = victims
        self._nemesis(
            "start-power-failure" if armed["power"] else "start-kill",
            {"nodes": victims, "fsync_in_flight_at": node},
        )

    def _paused_in_round(self, fid: str, node: str) -> None:
        if fid in self.faults:
            self.faults[fid]["victims"] = [node]
            self._nemesis("start-pause", {"nodes": [node], "at": self.faults[fid]["armed"]["point"]})

    def _stop_fault(self, fid: str) -> None:
        if fid not in self.faults:
            return
        kind = self.fault_kind(fid)
        self.schedule.append({"at": self.sim.now, "op": "stop", "kind": kind, "id": fid})
        what = self.faults.pop(fid)
        sim = self.sim
        if kind in ("kill-in-sync", "power-in-sync"):
            self.sync_armed = None
            gaps = what["armed"]["gaps"]
            if kind == "power-in-sync" and what["victims"]:
                what = {"order": what["victims"], "gaps": gaps}
                kind = "power-failure"
            else:
                kind, what = "kill", what["victims"]
        elif kind == "pause-round":
            sim.pause_triggers.pop(what["armed"]["node"], None)
            if not what["victims"]:
                self._nemesis("disarm-pause-round", None)
                return
            v = what["victims"][0]
            first = self.nem_rng.random() < 0.5
            sim.resume(
                v,
                first=functools.partial(self._send_queued, v) if first else None,
                order=what["armed"]["order"],
                rng=self.nem_rng,
            )
            self._send_queued(v)
            self._nemesis("stop-pause", {"nodes": [v], "order": what["armed"]["order"]})
            return
        if kind == "partition":
            sim.heal()
            self._nemesis("stop-partition", None)
        elif kind in (*_KILLS, "storage"):
            from dledger.store import StoreError

            refused = {}
            for v in what:
                if v not in sim.nodes:
                    try:
                        sim.start(v)
                    except StoreError as e:  # recovery refused a damaged committed prefix
                        refused[v] = str(e)
            if what:  # (a kill-in-sync that never fired opened no window)
                self._nemesis(
                    "stop-kill", {"nodes": sorted(what), "refused": refused} if refused else sorted(what)
                )
            self._lead_after_restart([v for v in what if v in sim.nodes])
        elif kind == "power-failure":
            at = sim.now
            for v, gap in zip(what["order"], what["gaps"], strict=True):
                at += gap
                sim.call_at(at, functools.partial(self._power_back, v))
        elif kind in ("pause", "pause-leader"):
            for v in what:
                # requests queued at the paused member and its queued peer messages race (seeded)
                first = self.nem_rng.random() < 0.5
                sim.resume(v, first=functools.partial(self._send_queued, v) if first else None)
                self._send_queued(v)
            self._nemesis("stop-pause", sorted(what))
        elif kind == "clock-skew":
            for v in what:
                sim.set_clock_rate(v, 1.0)
            self._nemesis("stop-clock", sorted(what))
        elif kind == "clog":
            sim.unclog(self.clogs.pop(fid, {}))  # if its clogs have not ended by themselves
            self._nemesis("stop-clog", [what["node"]])
        elif kind == "link-delay":
            sim.undelay_links(what["node"])
            sim.unclog(self.clogs.pop(fid, {}))  # its stall, if it began
            self._nemesis("stop-link-delay", [what["node"]])
        elif kind == "leader-transfer":  # instantaneous: the window closes with the leader then
            self._nemesis("stop-leader-transfer", {"leader": sim.leader()})
        elif kind == "disk-error":
            sim.unfail_disk(what["node"])
            self._nemesis("stop-disk-error", {"node": what["node"], **self._restart_store_stopped()})

    def _restart_store_stopped(self) -> dict[str, Any]:
        """Start again the members a store failure stopped (a supervisor restarts the process once
        the disk works) unless a kill holds them down; ``{"restarted": [...], "refused": {...}}``."""
        from dledger.store import StoreError

        sim = self.sim
        held = {
            v
            for f, vs in self.faults.items()
            if f.startswith(("kill", "storage"))
            for v in (vs["victims"] if isinstance(vs, dict) else vs)
        }
        done: list[str] = []
        refused: dict[str, str] = {}
        for v in sorted(sim.store_stopped - held):
            if v in sim.nodes or v in sim.failing_disks:
                continue
            try:
                sim.start(v)
                done.append(v)
            except StoreError as e:  # recovery refused (a damaged committed prefix)
                refused[v] = str(e)
        return {"restarted": done, **({"refused": refused} if refused else {})}

    def _lead_after_restart(self, restarted: list[str]) -> None:
        """With leader-transfer in the mix, half the time ask a member just restarted (from its
        snapshot and the replay after it) to lead a little later, so that reads in the seed's read
        mode are served by it as leader."""
        if not restarted or "leader-transfer" not in self.opts.nemesis or self.opts.schedule is not None:
            return
        if self.accepting and self.nem_rng.random() < 0.5:
            params = {"to": self.nem_rng.choice(restarted), "policy": "restarted"}
            at = self.sim.now + self.nem_rng.choice(RESTARTED_LEADER_MS)

            def ask(tries: int) -> None:
                if not self.accepting:  # not once the run heals
                    return
                if self.sim.leader() is None and tries > 0:  # wait for one to ask
                    self.sim.call_at(self.sim.now + 100, functools.partial(ask, tries - 1))
                elif params["to"] in self.sim.nodes:
                    self._start("leader-transfer", params)

            self.sim.call_at(at, functools.partial(ask, 30))

    def _power_back(self, node: str) -> None:
        """One member back after a power failure (unless a kill holds it down)."""
        from dledger.store import StoreError

        if node in self.sim.nodes or any(
            isinstance(v, list) and node in v
            for f, v in self.faults.items()
            if f.startswith(("kill", "storage"))
        ):
            return
        # the power failure's window ends when every member is up again
        done = "stop-power-failure" if len(self.sim.nodes) + 1 == len(self.sim.ids) else "start"
        try:
            self.sim.start(node)
            self._nemesis(done, [node])
        except StoreError as e:  # recovery refused a damaged committed prefix
            self._nemesis("start", {"nodes": [node], "refused": {node: str(e)}})

    @staticmethod
    def fault_kind(fid: str) -> str:
        """The kind of the fault with id ``fid`` (figure8 kills are "kill:<member>")."""
        return fid.split(":", 1)[0]

    def _figure8_poll(self, end: int) -> None:
        """The figure8 nemesis (Raft paper Figure 8's schedule, as a fault pattern): each new leader
        is cut off within a network round trip of its election — after its first comparisons,
        before its no-op reaches a quorum — mostly partitioned with the follower whose log ends in
        the newest term (another leader's entries, which it then overwrites), sometimes killed;
        a leader that survives is cut again after 0.2–2 s. Each comes back after a short window,
        so leaders of successive terms leave different entries on minorities and come back to
        finish replicating them. (Cutting a share of leaders only, later, or killing more often
        made the schedule 5-10 times rarer in bench runs.)"""
        sim, rng = self.sim, self.f8_rng
        if sim.now >= end:
            return
        ld = sim.leader()
        if ld is not None:
            stint = (ld, sim.nodes[ld].term)
            if stint != self.f8_stint:
                self.f8_stint = stint
                self.f8_at = sim.now + rng.randint(0, self.f8_reach)
            elif sim.now >= self.f8_at:
                self.f8_at = sim.now + rng.randint(200, 2000)  # again, if it survives this one
                if rng.random() < F8_KILL:
                    self._figure8_kill(ld)
                else:
                    self._figure8_cut(ld)
        sim.call_at(sim.now + F8_POLL_MS, functools.partial(self._figure8_poll, end))

    def _figure8_window(self) -> int:
        # from inside one election (a restart in the same term) to a few elections long
        return int(self.f8_rng.choice([50, 300, 600, 1000, 1500]) * self.f8_rng.uniform(0.5, 1.5))

    def _figure8_kill(self, node: str) -> None:
        down = sum(1 for i in self.sim.ids if i not in self.sim.nodes)
        fid = f"kill:{node}"
        if down >= NODES // 2 or fid in self.faults:
            return
        self._start("kill", {"victims": [node], "damage": None}, fid)
        self.sim.call_at(self.sim.now + self._figure8_window(), functools.partial(self._stop_fault, fid))

    def _figure8_cut(self, node: str) -> None:
        self._stop_fault("partition")  # a new partition shape replaces the old one
        # the follower whose log ends in the newest term (a tie: a random one): cut off together,
        # the leader repairs that follower's log, the rest move on without either
        nodes = self.sim.nodes
        others = [i for i in self.sim.ids if i != node]
        tie = self.f8_rng.choice(others)
        peer = max(others, key=lambda i: (nodes[i].end_term if i in nodes else -2, i == tie))
        self._start(
            "partition", [sorted([node, peer]), sorted(i for i in self.sim.ids if i not in (node, peer))]
        )
        self.f8_cut += 1
        cut = self.f8_cut
        self.sim.call_at(
            self.sim.now + self._figure8_window(),
            lambda: self._stop_fault("partition") if self.f8_cut == cut else None,
        )

    # ------------------------------------------------------------ the run

    def run(self) -> None:
        sim, opts = self.sim, self.opts
        sim.loss, sim.duplicate = self.loss, self.dup
        sim.slow, sim.late_duplicate, sim.term_late = self.slow, self.late_dup, self.term_late
        end = int(opts.time_limit * 1000)
        interval = max(1, int(opts.nemesis_interval * 1000))

        def fault() -> None:
            if sim.now >= end:
                return
            drawn_faults = sorted(f for f in self.faults if ":" not in f)  # not the figure8 kills
            if drawn_faults and (self.nem_rng.random() < 0.5 or len(drawn_faults) >= 2):
                self._stop_fault(self.nem_rng.choice(drawn_faults))
            else:
                drawn = self._draw_start()
                if drawn is not None:
                    self._start(*drawn)
            sim.call_at(sim.now + max(1, int(self.nem_rng.expovariate(1.0 / interval))), fault)

        def replay(ev: dict[str, Any]) -> None:
            if ev["op"] == "start":
                self._start(ev["kind"], ev["params"], ev.get("id"))
            else:
                self._stop_fault(ev.get("id") or ev["kind"])

        if opts.schedule is not None:
            for ev in opts.schedule:  # an explicit (shrunk) fault schedule instead of drawn faults
                if ev["at"] < end:
                    sim.call_at(ev["at"], functools.partial(replay, ev))
        else:
            if any(k not in _NOT_DRAWN for k in opts.nemesis):
                sim.call_at(int(self.nem_rng.expovariate(1.0 / interval)), fault)
            if "figure8" in opts.nemesis:
                sim.call_at(F8_POLL_MS, functools.partial(self._figure8_poll, end))
        for c in self.clients:
            self._schedule(c)
        if self.stray:
            sim.call_at(1 + int(self.stray_rng.expovariate(1.0 / STRAY_EVERY_MS)), self._stray)
        sim.run_to(end)
        # heal, let the group settle, let outstanding ops finish
        self.accepting = False
        for kind in sorted(self.faults):
            self._stop_fault(kind)
        if sim.store_stopped:
            self._nemesis("restart-stopped", self._restart_store_stopped())
        sim.loss = sim.duplicate = sim.slow = sim.late_duplicate = sim.term_late = 0.0
        sim.heal()  # and deliver what a holding partition kept
        settle_end = sim.now + 10_000
        while sim.now < settle_end:
            sim.run_to(sim.now + 10)
            if all(c.op is None for c in self.clients) and self._settled():
                break
        for c in self.clients:
            if c.op is not None:
                self._complete(c, c.op.completion(INFO, c.op.value, error="simulation ended"))
        if opts.workload == "log":
            self._final_reads()
        elif opts.workload == "list-append":
            self._final_txns()
        elif opts.workload in KV_WORKLOADS:
            self._final_kv()
        sim.check_all()

    def _stray(self) -> None:
        """One request of a stray client (another application on the same group, drawn per seed,
        :data:`STRAY_CLIENT`), then the next after a think time: requests the server must refuse or
        abort, on keys of its own (``z0``..``z2``): see :func:`stray_request`. Its requests and
        answers stay out of the history."""
        sim, rng = self.sim, self.stray_rng
        if not self.accepting:
            return
        ld = sim.leader()
        node = ld if ld is not None and rng.random() < 0.8 else rng.choice(sim.ids)
        kind, body, key, mode = stray_request(rng, self._stray_n)
        self._stray_n += 1
        if node in sim.nodes and node not in sim.paused:
            sim.submit(
                node, kind, body, ("stray", self._stray_n), key=key, read_mode=mode or self.opts.read_mode
            )
        sim.call_at(sim.now + 1 + int(rng.expovariate(1.0 / STRAY_EVERY_MS)), self._stray)

    def _settled(self) -> bool:
        ld = self.sim.leader()
        if ld is None:
            return False
        end = self.sim.stores[ld].end_index
        return all(c.commit_index == end for c in self.sim.nodes.values())

    def _final_txns(self) -> None:
        """After the heal, one more transaction per client at the leader, then one that reads every
        active key (a fault-free end, as a final generator's: a seed whose faults let no
        transaction commit still leaves Elle dependencies to check). At most 5 simulated s."""
        sim = self.sim
        clients = [c for c in self.clients if c.op is None]
        for final in (None, "read-all"):
            ld = sim.leader()
            for c in clients[:1] if final else clients:
                c.target = ld if ld is not None else c.home
                c.sticky_op = False
                self._invoke(c, final)
            end = sim.now + 5_000
            while sim.now < end and any(c.op is not None for c in clients):
                sim.run_to(sim.now + 10)

    def _final_kv(self) -> None:
        """The fault-free end of the bank, counter, set and long-fork workloads, at the leader (at
        most 5 simulated s a round), so that every seed leaves reads to check: counter and set one
        more add per client, long-fork one more write per client; then bank one read, counter one,
        set one per member (Jepsen's final generator; in the ``unsafe`` mode at that member, else
        at the leader, where the real client's redirect ends), long-fork one read per client of the
        group it wrote last."""
        w, clients = self.opts.workload, [c for c in self.clients if c.op is None]
        if not clients:
            return
        if w in ("counter", "set"):
            for c in clients:
                self._final_op(c, Op(INVOKE, c.process, "add", None))
        elif w == "long-fork":
            for c in clients:
                self._final_op(c, None)  # a write, or a read of a group written
            for c in clients:
                if c.thread in self._lf_pending:
                    self._final_op(c, None)  # the read of its own write's group
        if w == "set":
            for n in self.sim.ids:
                self._final_op(clients[0], Op(INVOKE, clients[0].process, "read", None), n)
        elif w != "long-fork":
            self._final_op(clients[0], Op(INVOKE, clients[0].process, "read", None))

    def _final_op(self, c: _Client, op: Op | None, node: str | None = None) -> None:
        """Run one final op of client ``c`` at the leader (``node`` in the unsafe read mode) and
        wait for it; after a ``fail`` (nothing done: a leader still transferring, say) a read is
        sent again, a write drawn afresh, 100 ms later, for at most 5 simulated s in all. ``op`` None: the workload's next op; an
        add's value None: the next add's value drawn as during the run."""
        sim = self.sim
        if op is not None:
            op.process = c.process
            if op.f == "add":
                op = self._new_kv_op_add(c)
        end = sim.now + 5_000
        while True:
            ld = sim.leader()
            c.target = node if node is not None and self.opts.read_mode == "unsafe" else ld or c.home
            c.sticky_op = False
            self._invoke(c, op)
            while sim.now < end and c.op is not None:
                sim.run_to(sim.now + 10)
            last = c.last
            if c.op is not None or last is None or last.type != FAIL or sim.now >= end:
                return
            sim.run_to(sim.now + 100)
            # a read again; a write drawn afresh (each long-fork key and set element once)
            reads = last.f == "read" or (last.f == "txn" and all(m[0] == "r" for m in last.value))
            op = Op(INVOKE, c.process, last.f, last.value) if reads else None
            if op is None and last.f == "add":
                op = self._new_kv_op_add(c)

    def _new_kv_op_add(self, c: _Client) -> Op:
        """An add as the counter or set workload draws it (the next element of the set)."""
        if self.opts.workload == "set":
            self._next_value += 1
            return Op(INVOKE, c.process, "add", self._next_value - 1)
        from chaos.api import COUNTER_MAX_ADD as MAX_ADD

        return Op(INVOKE, c.process, "add", self.wl_rng.randint(1, MAX_ADD))

    def _final_reads(self) -> None:
        """One final ``read`` per member: its committed log, workload values (None for others)."""
        for p, node in enumerate(self.sim.ids):
            op = Op(INVOKE, self._next_process + p, "read", None, node=node)
            self._write(op)
            core = self.sim.nodes.get(node)
            if core is None:  # its recovery refused a damaged committed prefix: it stays down
                self._write(op.completion(FAIL, None, node=node, error="member down"))
                continue
            st = self.sim.stores[node]
            values: list[int | None] = []
            for i in range(st.begin_index, core.commit_index + 1):
                e = st.get(i)
                values.append(int(e.body) if e.body.isdigit() and e.magic == 1 else None)
            self._write(op.completion(OK, values, node=node))


def stray_request(rng: random.Random, n: int) -> tuple[str, bytes, str | None, str | None]:
    """The stray client's ``n``-th request ``(driver kind, body, key, read mode)`` (read mode None:
    the seed's), as bytes on the wire (not
    through the client library's checks): a type conflict (an append to a counter, an add to a
    list: the transaction aborts), a set add repeated, a delete by writing nil (put, cas, a txn's
    ``w``), a malformed transaction (empty, an unknown micro-op, a non-integer add: refused), one
    of more than ``MAX_TXN_OPS`` micro-ops (refused), and raw log entries (DLedger's APPEND) that
    look like KV commands: a transaction with a bad micro-op (aborts when applied), a put without
    its value, and bytes behind the KV prefix that are not msgpack (both ignored when applied);
    and reads in the ``unsafe`` mode a request may name (its answers are not checked)."""
    import msgpack

    from dledger.statemachine import KV_PREFIX, MAX_TXN_OPS

    key = f"z{n % 3}"

    def cmd(*c: Any) -> bytes:
        return KV_PREFIX + msgpack.packb(list(c), use_bin_type=True)

    choices: list[tuple[str, bytes, str | None, str | None]] = [
        ("kv:get", b"", key, "unsafe"),
        ("kv:txn", cmd("txn", "", [["r", key, None]]), None, "unsafe"),
    ]
    plain: list[tuple[str, bytes]] = [
        ("kv:txn", cmd("txn", "", [["add", key, 1]])),
        ("kv:txn", cmd("txn", "", [["append", key, 1]])),
        ("kv:txn", cmd("txn", "", [["sadd", key, 1]])),
        ("kv:txn", cmd("txn", "", [["w", key, None], ["r", key, None]])),
        ("kv:put", cmd("put", key, None)),
        ("kv:cas", cmd("cas", key, 1, None)),
        ("kv:txn", cmd("txn", "", [])),
        ("kv:txn", cmd("txn", "", [["add", key, "1"]])),
        ("kv:txn", cmd("txn", "", [["incr", key, 1]])),
        ("kv:txn", cmd("txn", "", [["r", key, None]] * (MAX_TXN_OPS + 1))),
        ("append", cmd("txn", "", [["incr", key, 1]])),
        ("append", cmd("put", key)),
        ("append", KV_PREFIX + b"\xc1"),
    ]
    choices += [(kind, body, key if kind.startswith("kv:") else None, None) for kind, body in plain]
    return rng.choice(choices)


# the op kind (``start-<kind>``) each fault name runs as, for the names a summary shows
_OP_KIND = {
    **dict.fromkeys(("partition", "partition-leader", "figure8", *RUN_PARTITIONS), "partition"),
    **dict.fromkeys(("kill", "kill-leader", "storage", "bitflip", "kill-in-sync", *_KILLS), "kill"),
    **dict.fromkeys(("power-failure", "power-in-sync"), "power-failure"),
    **dict.fromkeys(("pause", "pause-leader", "pause-round"), "pause"),
    **dict.fromkeys(("clock-skew", "clock-slow-leader"), "clock"),
    **{k: k for k in ("clog", "link-delay", "leader-transfer", "disk-error")},
}


def nemesis_names(faults: list[str]) -> dict[str, list[str]]:
    """``{op kind: the --nemesis names that run as it}`` (``chaos.history.analysis.fault_names``),
    so summaries and reports name a simulated fault as it was typed (issue 35 item 10)."""
    out: dict[str, list[str]] = {}
    for name in faults:
        if name in _OP_KIND:
            out.setdefault(_OP_KIND[name], []).append(name)
    return out


def test_doc(opts: SimOptions) -> dict[str, Any]:
    """``test.json`` of a simulated run."""
    return {
        "name": f"sim-{opts.workload}-{'+'.join(opts.nemesis)}",
        "workload": opts.workload,
        "nemesis": opts.nemesis,
        "nemesis_names": nemesis_names(opts.nemesis),
        "seed": opts.seed,
        "time_limit": opts.time_limit,
        "concurrency": opts.clients,
        "rate": opts.rate,
        "read_mode": opts.read_mode,
        "sticky": opts.sticky,
        "disk": opts.disk,
        "nodes": [f"s{i + 1}" for i in range(NODES)],
        "simulated": True,
        "time_unit": "simulated nanoseconds",
        **({"schedule": opts.schedule} if opts.schedule is not None else {}),
    }


def run_seed(opts: SimOptions, directory: Path | None = None) -> SeedResult:
    """Run and check one seed; the history (and test.json, results.json) go to ``directory``, or to
    a temporary directory removed afterwards."""
    from chaos.api import checkers_for, compose
    from dledger.sim import SafetyViolation

    dledger_log = logging.getLogger("dledger")
    if not dledger_log.handlers:
        dledger_log.addHandler(logging.NullHandler())  # the members' logs are not the verdict
    tmp = None
    if directory is None:
        tmp = Path(tempfile.mkdtemp(prefix="chaos-sim-"))
        directory = tmp
    try:
        hist = directory / "history.jsonl"
        run = SimRun(opts, hist)
        safety: dict[str, Any] = {"valid": True, "steps": 0}
        try:
            run.run()
        except SafetyViolation as e:
            safety = {"valid": False, "error": str(e), "at_ms": run.sim.now}
        finally:
            run.writer.close()
        safety["steps"] = run.sim.steps
        test = test_doc(opts)
        # safety checkers only: Jepsen's stats checker (every f needs an ok) is a liveness figure
        names = SIM_CHECKERS[opts.workload]
        checkers = checkers_for({**test, "checkers": names})
        with codecov.paused():  # the checkers are the tool's code: at full speed, within their time
            results = compose(checkers).check(test, hist, {"time_limit": 60.0})
        results["safety"] = safety
        if safety["valid"] is False:
            results["valid"] = False
        end = int(opts.time_limit * 1000)
        schedule = [ev for ev in run.schedule if ev["at"] < end]
        stats = dict(run.sim.stats)
        stats["disk_errors"] = sum(d.errors for d in run.sim.disks.values())
        results["coverage"] = stats
        stats["history_ops"] = run.ops
        return SeedResult(
            opts.seed, results.get("valid"), results, hist.read_bytes(), run.sim.now, run.ops, schedule, stats
        )
    finally:
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)


def shrink_schedule(
    opts: SimOptions, schedule: list[dict[str, Any]], budget: int = 100
) -> list[dict[str, Any]]:
    """A smaller fault schedule with which ``opts.seed`` still fails: ddmin over the events
    (Zeller & Hildebrandt, TSE 2002; complements only), each candidate replayed from the same seed;
    at most ``budget`` runs."""

    def fails(events: list[dict[str, Any]]) -> bool:
        return run_seed(dataclasses.replace(opts, schedule=events)).valid is False

    if fails([]):
        return []
    events, n, runs = list(schedule), 2, 1
    while len(events) >= 2 and runs < budget:
        size = math.ceil(len(events) / n)
        chunks = [events[i : i + size] for i in range(0, len(events), size)]
        for k in range(len(chunks)):
            candidate = [e for j, c in enumerate(chunks) if j != k for e in c]
            runs += 1
            if fails(candidate):
                events, n = candidate, max(n - 1, 2)
                break
            if runs >= budget:
                break
        else:
            if n >= len(events):
                break
            n = min(len(events), 2 * n)
    return events


def _run_one(args: tuple[SimOptions]) -> tuple[int, Any, str, dict[str, int]]:

    opts = args[0]
    try:
        r = run_seed(opts)
    except Exception as e:  # a crash of the simulated code is a failing seed too
        return opts.seed, False, f"crashed: {type(e).__name__}: {e}", {}
    finally:
        codecov.save()  # the worker's coverage data so far, when the campaign measures it
    why = ""
    if r.valid is not True:
        subs = r.results.get("checkers") or {}
        bad = [k for k, v in subs.items() if isinstance(v, dict) and v.get("valid") is not True]
        if r.results.get("safety", {}).get("valid") is False:
            bad.append("safety")
        why = ", ".join(bad)
        if r.results.get("safety", {}).get("error"):
            why += f" ({r.results['safety']['error']})"
    return opts.seed, r.valid, why, r.stats


# the coverage line: what a campaign's seeds exercised (label, the stats that count for it)
COVERAGE = (
    ("elections", ("elections",)),
    ("truncations", ("truncations",)),
    ("stale-term messages", ("stale_term_messages",)),
    ("two terms late", ("two_terms_late",)),
    ("lease extensions", ("lease_extensions",)),
    ("restarts with recovery cuts", ("recovery_cuts",)),
    ("storage faults", ("storage_faults",)),
    ("repairs", ("repairs",)),
    ("crashes in an fsync", ("crashes_in_sync",)),
    ("pauses in a round", ("pauses_in_round",)),
    ("held/slow messages", ("held_messages", "slow_messages")),
    ("messages held across terms", ("term_late_messages",)),
    ("clogged or slowed links", ("clogged_messages", "delayed_messages")),
    ("compactions", ("compactions",)),
    ("snapshot installs", ("snapshot_installs",)),
    ("restarts from a snapshot", ("snapshot_restarts",)),
    ("leaders restarted from a snapshot", ("snapshot_leaders",)),
    ("leadership transfers", ("transfers",)),
    ("disk errors", ("disk_errors",)),
    ("members stopped by a store failure", ("store_stops",)),
    ("clean stops", ("graceful_stops",)),
    ("leaderless repairs", ("leaderless_repairs",)),
    ("requests expired", ("expired_requests",)),
)


def coverage_line(per_seed: list[dict[str, int]]) -> str:
    """``coverage: N seeds; elections K, truncations K, ...``: how many seeds saw each behaviour."""
    parts = [
        f"{label} {sum(1 for st in per_seed if any(st.get(k, 0) for k in keys))}" for label, keys in COVERAGE
    ]
    repairs = sum(st.get("repairs", 0) for st in per_seed)
    done = sum(st.get("repairs_done", 0) for st in per_seed)
    return (
        f"coverage ({len(per_seed)} seeds, how many saw each): "
        + ", ".join(parts)
        + (f"; repairs {done} of {repairs} completed" if repairs else "")
    )


def write_run_dir(opts: SimOptions, store: Path) -> RunDir:
    """Replay ``opts.seed`` into a normal run directory under ``store`` (history, test.json,
    results.json, report)."""
    run = RunDir.create(store, test_doc(opts)["name"])
    handler = logging.FileHandler(run.log_path)  # the members' logs, in simulated order
    handler.setFormatter(logging.Formatter("%(levelname)s %(name)s %(message)s"))
    dledger_log = logging.getLogger("dledger")
    dledger_log.addHandler(handler)
    dledger_log.setLevel(logging.INFO)
    try:
        r = run_seed(opts, run.path)
    finally:
        dledger_log.removeHandler(handler)
        handler.close()
    run.write_test(test_doc(opts))
    run.write_results(r.results)
    # the fault events as run (or as given): what --schedule replays, shrunk or not
    schedule = opts.schedule if opts.schedule is not None else r.schedule
    (run.path / "schedule.json").write_text(json.dumps(schedule, indent=1) + "\n")
    from chaos.api import ReportError, write_report

    try:
        write_report(run.path)
    except ReportError as e:
        click.echo(f"report not written: {e}", err=True)  # history and results are
    return run


_MEMBERS = tuple(f"s{i + 1}" for i in range(NODES))  # dledger.sim.Sim's member ids


def _members(v: Any, star: bool = False) -> bool:
    """Whether ``v`` is a non-empty list of member ids (``star``: or one id, or "*")."""
    if star:
        return v in _MEMBERS or v == "*"
    return isinstance(v, list) and bool(v) and all(m in _MEMBERS for m in v)


def _ms(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and v >= 0


def _damage(v: Any) -> bool:
    from dledger.sim import DAMAGE_KINDS

    return v is None or (isinstance(v, dict) and v.get("node") in _MEMBERS and v.get("kind") in DAMAGE_KINDS)


def _grudge(v: Any) -> bool:
    """A grudge of every member: ``{"grudge": {member: [members whose messages it drops]}}``."""
    g = v.get("grudge") if isinstance(v, dict) else None
    return (
        isinstance(g, dict)
        and set(g) == set(_MEMBERS)
        and all(isinstance(d, list) and all(m in _MEMBERS and m != k for m in d) for k, d in g.items())
    )


def _rates(v: Any) -> bool:
    return (
        isinstance(v, dict)
        and bool(v)
        and all(
            m in _MEMBERS and isinstance(r, int | float) and not isinstance(r, bool) and 0 < r < 1e6
            for m, r in v.items()
        )
    )


def _pause_round(v: dict[str, Any]) -> bool:
    from dledger.sim import PAUSE_POINTS, RELEASE_ORDERS

    return (
        _members(v.get("node"), star=True)
        and v.get("point") in PAUSE_POINTS
        and v.get("order") in RELEASE_ORDERS
    )


# what a start event's params must be, per kind (the shapes Nemesis._draw_start draws): a check
# and its description; kinds without an entry start nothing of their own and take any params
_SIDES = "a list of sides, each a list of members"
_PARAMS: dict[str, tuple[Callable[[Any], bool], str]] = {
    "partition": (lambda v: isinstance(v, list) and len(v) >= 2 and all(_members(g) for g in v), _SIDES),
    "pause": (_members, "a list of members"),
    "kill": (
        lambda v: isinstance(v, dict) and _members(v.get("victims")) and _damage(v.get("damage")),
        '{"victims": [members], "damage": null or {"node": member, "kind": a damage kind}}',
    ),
    "power-failure": (
        lambda v: (
            isinstance(v, dict)
            and _members(v.get("order"))
            and isinstance(v.get("gaps"), list)
            and len(v["gaps"]) == len(v["order"])
            and all(_ms(g) for g in v["gaps"])
        ),
        '{"order": [members], "gaps": [ms per member]}',
    ),
    "kill-in-sync": (
        lambda v: (
            isinstance(v, dict)
            and _members(v.get("node"), star=True)
            and isinstance(v.get("gaps"), list)
            and len(v["gaps"]) >= NODES
            and all(_ms(g) for g in v["gaps"])
        ),
        '{"node": member or "*", "gaps": [ms per member]}',
    ),
    "pause-round": (
        lambda v: isinstance(v, dict) and _pause_round(v),
        '{"node": member or "*", "point": a pause point, "order": a release order}',
    ),
    "clog": (
        lambda v: (
            isinstance(v, dict)
            and v.get("node") in _MEMBERS
            and _ms(v.get("send_ms"))
            and _ms(v.get("recv_ms"))
        ),
        '{"node": member, "send_ms": ms, "recv_ms": ms}',
    ),
    "link-delay": (
        lambda v: (
            isinstance(v, dict)
            and v.get("node") in _MEMBERS
            and _ms(v.get("send_ms"))
            and _ms(v.get("recv_ms"))
            and _ms(v.get("step_ms"))
            and isinstance(v.get("stall_other", False), bool)
        ),
        '{"node": member, "send_ms": ms, "recv_ms": ms, "step_ms": ms, "stall_other": bool}',
    ),
    "clock-skew": (_rates, "{member: clock rate > 0}"),
}
_PARAMS.update({
    **{k: (_grudge, '{"shape": a shape, "grudge": {member: [members it drops]}}') for k in RUN_PARTITIONS},
    "lose-unfsynced": _PARAMS["kill"],
    "restart": _PARAMS["kill"],
    "partition-leader": _PARAMS["partition"],
    "pause-leader": _PARAMS["pause"],
    "kill-leader": _PARAMS["kill"],
    "storage": _PARAMS["kill"],
    "power-in-sync": _PARAMS["kill-in-sync"],
    "clock-slow-leader": _PARAMS["clock-skew"],
})  # fmt: skip


def _event_problem(event: Any) -> str | None:
    """What is wrong with one schedule event, or None."""
    if not isinstance(event, dict):
        return "not an object"
    at = event.get("at")
    if not (isinstance(at, int) and not isinstance(at, bool) and at >= 0):
        return "'at' must be a whole number of ms >= 0"
    if event.get("op") not in ("start", "stop"):
        return "'op' must be 'start' or 'stop'"
    if event.get("kind") not in (*NEMESES, *RUN_NAMES):
        return f"'kind' must be one of {', '.join((*NEMESES, *RUN_NAMES))}"
    if event.get("id") is not None and not isinstance(event["id"], str):
        return "'id' must be a string"
    check = _PARAMS.get(event["kind"])
    if event["op"] == "start" and check is not None and not check[0](event.get("params")):
        return f"'params' of a {event['kind']} start must be {check[1]} (members {', '.join(_MEMBERS)})"
    return None


def _load_schedule(path: Path, bad: type[Exception]) -> list[dict[str, Any]]:
    """A fault schedule file: a JSON list of ``{"at": ms, "op": "start"|"stop", "kind", "params"}``
    (``params`` of a start as :meth:`Nemesis._draw_start` draws it for that kind: a partition's
    sides, a pause's members, a kill's ``{"victims", "damage"}``, ...; see ``_PARAMS``). Raises
    ``bad`` naming the file, the event and what was expected."""
    try:
        events = json.loads(path.read_text())
    except (OSError, ValueError) as e:
        raise bad(f"--schedule {path}: cannot read a JSON fault schedule: {e}") from None
    if not isinstance(events, list):
        raise bad(f"--schedule {path}: expected a JSON list of events, got {type(events).__name__}")
    for i, event in enumerate(events):
        problem = _event_problem(event)
        if problem is not None:
            shown = json.dumps(event)[:120]
            raise bad(f"--schedule {path}: event {i} {shown}: {problem}")
    return events


def _verdict_exit(valids: list[Any]) -> int:
    if any(v is False for v in valids):
        return 1
    if any(v is not True for v in valids):
        return 2
    return 0


# the options of `chaos sim`, in --help order
_SIM_OPTIONS = [
    click.option(
        "--workload",
        default=None,
        help="register | log | list-append | bank | counter | set | long-fork (default: register, or the swarm's draw)",
    ),
    click.option(
        "--nemesis",
        default=None,
        help=f"comma-separated faults: {', '.join(NEMESES)} (network = per-seed loss and duplication; "
        "slow-network = messages held for up to several election timeouts, late duplicates, partitions "
        "that hold; bitflip, storage = damage to a killed member's committed records, on a minority; "
        "kill-in-sync, power-in-sync = a crash while an fsync is in flight; pause-round = a pause at a "
        "protocol point; clog = one member's sending side, receiving side or both held, then delivered in "
        "order; link-delay = one side or both of a member's links slowed, the delay growing), or chaos run's "
        f"names for the same faults: {', '.join(RUN_NAMES)}. Default: "
        "swarm testing, each seed draws its own fault mix, rates, workload and read mode (printed for a failing seed; replay it with --seed)",
    ),
    click.option(
        "--disk",
        type=click.Choice(DISKS),
        default=None,
        help="the real FileLogStore on a simulated disk (crashes lose unsynced writes, tear), or in "
        "memory (the server's --memory store) (default: file, or the swarm's draw: memory for one seed in 8)",
    ),
    click.option("--seeds", type=int, default=None, help="run seeds FIRST .. FIRST+N-1"),
    click.option("--first-seed", type=int, default=0, show_default=True),
    click.option(
        "--seed", type=int, default=None, help="replay one seed exactly and write its run directory"
    ),
    click.option(
        "--shrink",
        is_flag=True,
        help="with --seed: shrink a failing seed's fault schedule before writing the run",
    ),
    click.option(
        "--schedule",
        "schedule_file",
        type=click.Path(dir_okay=False),
        default=None,
        help="with --seed: replay this fault schedule (a run's schedule.json) instead of drawing faults",
    ),
    click.option(
        "--time-limit",
        type=float,
        default=None,
        help="simulated seconds per seed (default: 60, or the swarm's draw of 3, 5 or 10)",
    ),
    click.option("--concurrency", type=int, default=10, show_default=True, help="simulated clients"),
    click.option(
        "--rate", type=float, default=50.0, show_default=True, help="client ops per simulated second"
    ),
    click.option(
        "--read-mode",
        type=click.Choice(READ_MODES),
        default=None,
        help="register reads through the driver: the log, read index, leader lease, or the member's "
        "local state (unsafe: a known-bad configuration)",
    ),
    click.option(
        "--sticky/--no-sticky",
        default=True,
        show_default=True,
        help="odd client processes read from their own member first and record its answer (a deposed "
        "leader's too), following a NOT_LEADER that names the leader once, as the register workload's",
    ),
    click.option("--jobs", type=int, default=None, help="parallel processes (default: the CPU count)"),
    click.option(
        "--master",
        default=None,
        help="run the seeds as tasks on this Spark master (local[2], spark://host:7077, ...) instead of "
        "local processes; Spark's executor cores set the parallelism, so --jobs is refused with it",
    ),
    click.option(
        "--stop-on-failure",
        is_flag=True,
        help="with --seeds: stop at the first seed (in seed order) that is not valid",
    ),
    click.option(
        "--coverage",
        "measure_coverage",
        is_flag=True,
        help="with --seeds: measure the line and branch coverage of the server's code (the DB's "
        "source_packages) over the campaign with coverage.py: one line of figures, coverage.json and "
        "each file's unreached functions (unreached.txt) in <store>/sim-campaigns/<time>/; the seeds "
        "run about 4 times slower",
    ),
    click.option("--store", type=click.Path(file_okay=False), default="store", show_default=True),
]


def _master_alone(master: str | None, jobs: int | None, seed: int | None) -> None:
    """``--master`` runs a campaign (``--seeds N``) on Spark's cores: refuse ``--jobs`` and ``--seed``
    (a seed replays on this machine) with it, exit 254."""
    from chaos.api import BadArguments

    if master is not None and (jobs is not None or seed is not None):
        raise BadArguments(
            f"--master {master}: expected neither --jobs nor --seed with it (a campaign of --seeds N on "
            "Spark's cores; a seed replays on this machine)"
        )


def _seed_or_seeds(
    seeds: int | None, seed: int | None, shrink: bool, schedule_file: str | None, measure_coverage: bool
) -> None:
    """Exactly one of ``--seeds N`` (N >= 1) and ``--seed S``; ``--shrink`` and ``--schedule`` need
    ``--seed``, ``--coverage`` a campaign: else exit 254."""
    from chaos.api import BadArguments

    if (seeds is None) == (seed is None):
        raise BadArguments("expected exactly one of --seeds N and --seed S")
    if seeds is not None and seeds < 1:
        raise BadArguments(f"--seeds {seeds}: expected >= 1")
    if (shrink or schedule_file) and seed is None:
        raise BadArguments("--shrink and --schedule need --seed S")
    if measure_coverage and seed is not None:
        raise BadArguments("--coverage measures a campaign: expected --seeds N with it, not --seed")


def _with_sim_options(fn: Any) -> Any:
    for option in reversed(_SIM_OPTIONS):
        fn = option(fn)
    return fn


@contextlib.contextmanager
def _pool_imap(
    todo: list[tuple[SimOptions]], procs: int, measure: codecov.Spec | None = None
) -> Iterator[Iterator[Any]]:
    """``_run_one`` over ``todo`` in a pool of ``procs`` spawned processes, in order; leaving the
    block terminates the workers. With ``measure`` each worker measures the system's coverage
    from its start (:func:`chaos.history.codecov.start`, before it imports the server's code) and
    saves it after every seed."""

    chunk = max(1, math.ceil(len(todo) / (procs * 8)))
    init = {"initializer": codecov.start, "initargs": (measure,)} if measure is not None else {}
    with multiprocessing.get_context("spawn").Pool(procs, **init) as pool:  # type: ignore[arg-type]
        yield pool.imap(_run_one, todo, chunksize=min(chunk, 4))


def _campaign(
    todo: list[tuple[SimOptions]],
    procs: int,
    stop_on_failure: bool,
    master: str | None = None,
    measure: codecov.Spec | None = None,
) -> tuple[list[Any], list[int], list[dict[str, int]]]:
    """Run the seeds of ``todo`` in a pool of ``procs`` processes (or as Spark tasks at ``master``,
    :mod:`chaos_dledger.sim_spark`), printing each seed that is not valid (with its fault mix when
    the swarm drew it) and a progress bar on the terminal (seeds done of the total, seeds/s,
    failures so far, ETA); the verdicts, failing seeds and per-seed stats. With ``measure`` the
    workers (or executors) write the server code's coverage data into ``measure.data_dir``."""
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

    valids: list[Any] = []
    failing: list[int] = []
    stats: list[dict[str, int]] = []
    by_seed = {t[0].seed: t[0] for t in todo}
    progress = Progress(
        TextColumn("chaos sim"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("seeds, {task.fields[rate]} seeds/s, {task.fields[failed]} not valid, ETA"),
        TimeRemainingColumn(),
        console=Console(stderr=True),
        transient=False,
    )
    if master is None:
        runner = _pool_imap(todo, procs, measure)
    else:
        from chaos_dledger.sim_spark import spark_imap

        runner = spark_imap(todo, master, measure, run=_run_one)
    with progress, runner as results:
        task = progress.add_task("seeds", total=len(todo), rate="-", failed=0)
        t0 = time.monotonic()
        for s, valid, why, st in results:
            valids.append(valid)
            stats.append(st)
            if valid is not True:
                failing.append(s)
                opts = by_seed[s]
                mix = f" [swarm mix: {mix_args(dataclasses.asdict(opts))}]" if opts.swarm else ""
                progress.console.file.flush()
                click.echo(f"seed {s}: {verdict_word(valid)}: {why}{mix}")
            rate = len(valids) / max(time.monotonic() - t0, 1e-9)
            progress.update(task, advance=1, rate=f"{rate:.2f}", failed=len(failing))
            if stop_on_failure and valid is not True:
                break  # leaving the block terminates the workers
    return valids, failing, stats


def coverage_spec(store: str) -> codecov.Spec:
    """What ``--coverage`` measures: the DLedger DB's declared ``source_packages`` (less its
    ``source_omit``, the simulated world), into a new campaign directory under ``store``
    (:func:`chaos.history.codecov.campaign_dir`)."""
    return codecov.Spec(SOURCE_PACKAGES, SOURCE_OMIT, str(codecov.campaign_dir(store)))


def coverage_lines(measure: codecov.Spec) -> list[str]:
    """Combine the campaign's coverage data and write its reports; the lines to print: the figure
    and where the reports are (or why there are none)."""

    try:
        summary = codecov.report(measure)
    except ValueError as e:  # e.g. stopped before any seed finished
        return [f"system under test: not measured: {e}"]
    return [
        summary.line(),
        f"coverage report: {summary.json_path}; each file's unreached functions: {summary.unreached_path}",
    ]


GATE_SEEDS = 300  # about a minute on two cores: beside the gate's real-cluster runs of a minute each


def gate_campaign(
    store: str, seeds: int = GATE_SEEDS, jobs: int | None = None, master: str | None = None
) -> list[dict[str, Any]]:
    """``chaos gate``'s simulation row: the default swarm over seeds 0 .. ``seeds`` - 1 (the same
    seeds every gate, so a gate is reproducible), as one summary row of
    :func:`chaos.history.gate.db_campaign_rows`, measuring the server code's coverage
    (:func:`coverage_spec`: ``coverage.json`` and ``unreached.txt`` into a campaign directory under
    ``store``; seeds replay with --seed).
    The seeds run in ``jobs`` local processes (default: one per CPU), or as Spark tasks at
    ``master`` (:mod:`chaos_dledger.sim_spark`; the same verdicts seed by seed)."""
    todo = [(SimOptions.swarm_for(s),) for s in range(seeds)]
    t0 = time.monotonic()
    measure = coverage_spec(store)
    valids, failing, stats = _campaign(todo, jobs or multiprocessing.cpu_count(), False, master, measure)
    click.echo(
        f"gate: chaos sim: {len(valids)} seeds in {time.monotonic() - t0:.0f} s"
        f"{f' on {master}' if master else ''}, {len(failing)} not valid",
        err=True,
    )
    click.echo(coverage_line(stats), err=True)
    for line in coverage_lines(measure):
        click.echo(line, err=True)
    return [
        {
            "run": f"chaos sim --seeds {seeds} (simulation, swarm)",
            "workload": "swarm",
            "nemesis": "swarm",
            "valid": _verdict_value(valids),
            "ops": sum(st.get("history_ops", 0) for st in stats),
            "ok_rate": None,
            "p99_ms": None,
            "max_unavailable_s": None,
            "failures": [f"seed {s}: replay with chaos sim --seed {s}" for s in failing[:5]],
            "faults": None,
            "simulated": True,
        }
    ]


def _verdict_value(valids: list[Any]) -> Any:
    code = _verdict_exit(valids)
    return {0: True, 1: False}.get(code, "unknown")


def with_bitflip_kills(faults: list[str]) -> list[str]:
    """``bitflip`` damages a member the nemesis killed; alone it would never fire, so it brings
    ``kill`` with it, as the real-cluster ``bitflip`` nemesis kills, damages and restarts."""
    if "bitflip" in faults and not {"kill", "kill-leader"} & set(faults):
        return [*faults, "kill"]
    return faults


def _options_maker(
    workload: str | None,
    faults: list[str] | None,
    time_limit: float | None,
    concurrency: int,
    rate: float,
    read_mode: str | None,
    sticky: bool,
    disk: str | None,
) -> Any:
    """``seed -> SimOptions``: the swarm's draw for the seed when no ``--nemesis`` was given (the
    options given explicitly override the draw), else the options as given."""

    def options(s: int) -> SimOptions:
        if faults is None:
            o = SimOptions.swarm_for(s, disk, sticky)
            if workload is not None:
                o.workload = workload
                o.read_mode = read_mode or ("raft-log" if workload == "log" else o.read_mode)
            if read_mode is not None:
                o.read_mode = read_mode
            if time_limit is not None:
                o.time_limit = time_limit
                o.nemesis_interval = min(o.nemesis_interval, time_limit / 4)
            if o.read_mode == "lease":
                o.nemesis = [k for k in o.nemesis if k not in _CLOCK_FAULTS] or ["partition"]
            return o
        limit = 60.0 if time_limit is None else time_limit
        return SimOptions(
            workload or "register",
            with_bitflip_kills(faults),
            s,
            limit,
            concurrency,
            rate,
            nemesis_interval=min(5.0, limit / 4),
            read_mode=read_mode or "raft-log",
            sticky=sticky,
            disk=disk or "file",
        )

    return options


def _unknown_names(names: list[str]) -> str:
    """``"unknown partiton (did you mean partition?); "`` for the unknown names, or ``""``."""
    from chaos.api import did_you_mean

    return f"unknown {', '.join(names)}{did_you_mean(names, (*NEMESES, *RUN_NAMES))}; " if names else ""


def _parse_nemesis(nemesis: str | None) -> list[str] | None:
    """``--nemesis a,b``: the fault names (None: not given), the simulator's own or ``chaos run``'s
    where they mean the same fault (:data:`RUN_NAMES`); BadArguments for an unknown or empty name
    (``a,,b``, ``a,``) and for a run fault the simulator does not have (:data:`NOT_SIMULATED`)."""
    from chaos.api import BadArguments

    if nemesis is None:
        return None
    faults = [n.strip() for n in nemesis.split(",")]
    missing = [n for n in faults if n in NOT_SIMULATED]
    if missing:
        raise BadArguments(
            f"--nemesis {nemesis!r}: "
            + "; ".join(
                f"{n} is a chaos run fault the simulator does not have ({NOT_SIMULATED[n]})" for n in missing
            )
        )
    bad = [n for n in faults if n not in NEMESES and n not in RUN_NAMES]
    if bad:
        raise BadArguments(
            f"--nemesis {nemesis!r}: {'an empty name; ' if '' in bad else ''}"
            f"{_unknown_names([b for b in bad if b])}expected a comma-separated list of {', '.join(NEMESES)} "
            f"(or chaos run's {', '.join(RUN_NAMES)})"
        )
    return faults


@click.command("sim")
@_with_sim_options
def sim(
    workload: str | None,
    nemesis: str | None,
    seeds: int | None,
    first_seed: int,
    seed: int | None,
    shrink: bool,
    schedule_file: str | None,
    time_limit: float | None,
    concurrency: int,
    rate: float,
    read_mode: str | None,
    sticky: bool,
    disk: str | None,
    jobs: int | None,
    master: str | None,
    stop_on_failure: bool,
    measure_coverage: bool,
    store: str,
) -> None:
    """Deterministic simulation: the real DLedger core and driver on a simulated network, disk and
    clock, many seeds fast. Without --nemesis each seed draws its own fault mix (swarm testing);
    failing seeds are printed with their mix and replay exactly with --seed."""
    from chaos.api import BadArguments

    if workload is not None and workload not in WORKLOADS:
        raise BadArguments(f"--workload {workload!r}: expected one of {', '.join(WORKLOADS)}")
    faults = _parse_nemesis(nemesis)
    _seed_or_seeds(seeds, seed, shrink, schedule_file, measure_coverage)
    from chaos.api import check_number

    try:  # finite numbers in range, one line naming the option (NaN and infinities are not numbers)
        if time_limit is not None:
            time_limit = float(check_number("time_limit", time_limit))
        rate = float(check_number("rate", rate))
    except ValueError as e:
        raise BadArguments(str(e)) from None
    for name, value in (("--concurrency", concurrency), ("--jobs", jobs)):
        if value is not None and value < 1:
            raise BadArguments(f"{name} {value}: expected a whole number >= 1")
    options = _options_maker(workload, faults, time_limit, concurrency, rate, read_mode, sticky, disk)
    _master_alone(master, jobs, seed)
    if seed is not None:
        opts = options(seed)
        if opts.swarm:
            click.echo(f"seed {seed}: swarm mix: {mix_args(dataclasses.asdict(opts))}")
        if schedule_file is not None:
            opts.schedule = _load_schedule(Path(schedule_file), BadArguments)
        if shrink:
            first = run_seed(opts)
            if first.valid is False:
                shrunk = shrink_schedule(opts, first.schedule)
                click.echo(f"fault schedule shrunk from {len(first.schedule)} to {len(shrunk)} events")
                opts.schedule = shrunk
        run = write_run_dir(opts, Path(store))
        results = run.load_results()
        valid = results.get("valid")
        click.echo(f"seed {seed}: {verdict_word(valid)}; run directory {run.path}")
        if results.get("safety", {}).get("error"):
            click.echo(f"safety: {results['safety']['error']}")
        raise click.exceptions.Exit(_verdict_exit([valid]))
    assert seeds is not None
    todo = [(options(s),) for s in range(first_seed, first_seed + seeds)]
    t0 = time.monotonic()
    measure = coverage_spec(store) if measure_coverage else None
    valids, failing, stats = _campaign(
        todo, jobs or multiprocessing.cpu_count(), stop_on_failure, master, measure
    )
    elapsed = time.monotonic() - t0
    replay = ""
    if failing:
        given = [
            f"--{name} {value}"
            for name, value in (
                ("workload", workload),
                ("nemesis", nemesis),
                ("time-limit", time_limit),
                ("read-mode", read_mode),
                *((("concurrency", concurrency), ("rate", f"{rate:g}")) if faults is not None else ()),
            )
            if value is not None
        ]
        flags = " ".join(
            [*given, *([f"--disk {disk}"] if disk else []), *([] if sticky else ["--no-sticky"])]
        )
        replay = f"; replay one with: chaos sim {flags + ' ' if flags else ''}--seed {failing[0]}"
    click.echo(f"{len(valids) / max(elapsed, 1e-9):.2f} seeds/s ({elapsed:.0f} s wall)")
    click.echo(coverage_line(stats))
    for line in coverage_lines(measure) if measure is not None else []:
        click.echo(line)
    # the verdict is the last line (issue 35 item 8), as chaos run's is
    click.echo(
        f"{verdict_word(_verdict_value(valids))}: {len(valids)} seeds, {len(failing)} not valid{replay}"
    )
    raise click.exceptions.Exit(_verdict_exit(valids))
