"""A deterministic simulation of a DLedger group: the real core and runtime driver on a simulated
network, disk and clock.

Every member is a :class:`dledger.core.Core` driven by the same :class:`dledger.driver.Driver` the
asyncio server uses, over a :class:`SimLogStore` (in memory; a crash loses what was not synced) and a
state machine. Messages are delivered after a seeded random latency (so they reorder) unless the pair
is partitioned, the receiver is down, the link drops it (``loss``) or ``drop`` says so; ``duplicate``
delivers some twice. A paused member keeps its queue and resumes with it. Time is simulated
milliseconds; each member's clock may run at its own rate. One seed decides everything: separate
``random.Random`` streams for the network, the cores and the caller (``rng``), so the same seed gives
the same run.

World faults beyond that (all off by default, so the core tests' seeds keep their schedules):
``sync_latency`` makes each fsync a timed event (a crash before it completes loses the writes it
covered, and the held acknowledgements never leave); ``reorder_probability`` lets a crash keep an
out-of-order subset of unsynced pages; ``slow``/``slow_ms`` hold some messages on live links for up
to several election timeouts, ``late_duplicate`` delivers a copy again that late, ``term_late`` holds a share of messages (of
the RPCs in ``term_late_kinds``, or all), or copies of them, until their receiver has moved on one
or two terms and stands at ``term_late_point`` (say, a candidate with a vote round open), and
``hold_partitions`` makes a partition hold what crosses it until the heal instead of dropping it;
:meth:`Sim.pause_at` pauses a member at a protocol point (a leader with a heartbeat round open, a
candidate with a vote round open, a follower holding acknowledgements for an fsync) and
:meth:`Sim.resume` releases its queue in a given order; :meth:`Sim.damage` injects a storage fault
(a bit flip in a record header or body, a lost or misdirected page write) into a down member's
committed data. ``stats`` counts what a run exercised (the coverage line of ``chaos sim``).

While running, the simulation checks Raft's safety properties (paper figure 3) and raises
:class:`SafetyViolation` at the first breach: election safety (one leader per term, and no member
leading twice in a term; one vote per member per term; a new leader holds the persisted votes of
a majority in its term, Raft 5.2), leader completeness (a new leader holds
every committed entry), log matching (at each election and in :meth:`Sim.check_all`) and state
machine safety (one entry committed per index); a follower's (term, leader) names the leader
elected in that term; a read-index read is answered only after heartbeat acknowledgements of a
majority in the read's term, to rounds the leader began after the read arrived (Raft thesis 6.4,
judged from the messages on the simulated wire); and a member whose store had to repair its committed prefix at a restart
(or refused to start for it) must have had a storage fault injected: otherwise the durability of
committed entries was violated. Sources: TigerBeetle's VOPR and FoundationDB's
simulator (see ../shared/reference/simulation.md), etcd-io/raft's Ready loop.
"""

from __future__ import annotations

import functools
import heapq
import logging
import random
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import msgpack

from dledger.core import Core, CoreConfig, Role
from dledger.driver import Driver, start_member
from dledger.protocol import (
    Code,
    HeartbeatRequest,
    HeartbeatResponse,
    Message,
    PushRequest,
    PushResponse,
    TakeLeadershipRequest,
    TakeLeadershipResponse,
    VoteRequest,
    VoteResponse,
)
from dledger.simdisk import PAGE, SimDisk
from dledger.snapshot import SnapshotStore
from dledger.statemachine import StateMachine, decode_kv
from dledger.store import CorruptionError, Entry, FlushError, StoreError, codec
from dledger.store.file import FileLogStore
from dledger.store.hardstate import HardState

log = logging.getLogger("dledger.sim")

FILE_DATA_SIZE, FILE_INDEX_SIZE = 1 << 20, 1 << 16  # segment sizes on the simulated disk
_LEADER = Role.LEADER  # a module global: compared on every step
# each RPC's messages, both directions (a fault may hold one RPC's messages only)
RPC_MESSAGES: dict[str, tuple[type[Message], ...]] = {
    "vote": (VoteRequest, VoteResponse),
    "heartbeat": (HeartbeatRequest, HeartbeatResponse),
    "push": (PushRequest, PushResponse),
    "take-leadership": (TakeLeadershipRequest, TakeLeadershipResponse),
}
TERM_LATE_CAP = 32  # messages held per receiver for delivery across term changes
PAUSE_POINTS = ("heartbeat-round", "vote-round", "follower-ack", "any")
RELEASE_ORDERS = ("fifo", "reverse", "shuffle", "newest-first-per-sender")
# storage faults (Sim.damage): in a committed data segment, a bit flipped in a record's header or
# body, a lost or misdirected page write, the file's tail lost (an extent gone: the file ends short
# of its size); in the index, a bit flipped in a committed entry's index record, a lost or
# misdirected page write, a lost extent, the whole file lost; the high-water marker with a bit
# flipped or an older (lower) mark left by a lost write
DAMAGE_KINDS = (
    "flip-header",
    "flip-body",
    "lost-write",
    "misdirected-write",
    "lost-extent",
    "flip-index",
    "lost-index-write",
    "misdirected-index-write",
    "lost-index-extent",
    "lost-index-file",
    "flip-highwater",
    "stale-highwater",
)
INDEX_DAMAGE = ("lost-index-write", "misdirected-index-write", "lost-index-extent", "lost-index-file")
HIGHWATER_DAMAGE = ("flip-highwater", "stale-highwater")
STATS = (
    "elections",
    "truncations",
    "stale_term_messages",
    "two_terms_late",
    "lease_extensions",
    "recovery_cuts",
    "repairs",
    "repairs_done",
    "storage_faults",
    "crashes_in_sync",
    "fsyncs_lost",
    "pauses_in_round",
    "held_messages",
    "slow_messages",
    "term_late_messages",
    "clogged_messages",
    "delayed_messages",
    "compactions",
    "snapshot_installs",
    "snapshot_restarts",
    "snapshot_leaders",
    "transfers",
    "disk_errors",
    "store_stops",
    "graceful_stops",
    "leaderless_repairs",
    "expired_requests",
)
DISK_ERRORS = ("full", "fsync", "read", "filling")  # SimDisk.failing: what a sick disk does (Sim.fail_disk)
FILLING_ROOM = 3 * PAGE  # "filling": the most room a disk has left when it starts to fill up
MAX_WAIT_ACK_MS = 2500  # the server's --max-wait-ack-ms (DLedger maxWaitAckTimeMs): a waiter's deadline
REPAIR_EVERY_MS = 200  # the server's leaderless repair loop (dledger.server's _repairer) runs this often
REPAIR_FETCH = 64  # and fetches at most this many committed entries from a peer at a time


class SimLogStore:
    """An in-memory :class:`~dledger.store.RuntimeLogStore` (DLedger's MemoryStore): what the
    server's ``--memory`` mode and the simulator's memory disk run, and the store tests' model.
    ``pos`` is computed as in the file store without padding (the running sum of record sizes);
    ``crash()`` drops what was appended after the last ``sync()``."""

    def __init__(self) -> None:
        self._entries: list[Entry] = []
        self._begin = 0
        self._next_pos = 0
        self._base_term = -1
        self.synced_index = -1
        self.checkpoint = -1

    @property
    def begin_index(self) -> int:
        return self._begin

    @property
    def end_index(self) -> int:
        return self._begin + len(self._entries) - 1

    @property
    def end_term(self) -> int:
        return self._entries[-1].term if self._entries else self._base_term

    def append(self, entry: Entry) -> Entry:
        if entry.index != self._begin + len(self._entries):
            raise StoreError(f"append at index {entry.index}, expected {self.end_index + 1}")
        if entry.pos >= 0 and entry.pos != self._next_pos:
            raise StoreError(f"append at pos {entry.pos}, expected {self._next_pos}")
        stored = Entry(entry.index, entry.term, entry.body, entry.magic, self._next_pos, entry.channel)
        self._entries.append(stored)
        self._next_pos += stored.size
        return stored

    def get(self, index: int) -> Entry:
        k = index - self._begin
        if k < 0 or k >= len(self._entries):
            raise IndexError(f"index {index} outside [{self._begin}, {self.end_index}]")
        return self._entries[k]

    def term_at(self, index: int) -> int:
        k = index - self._begin
        if 0 <= k < len(self._entries):
            return self._entries[k].term
        if k == -1:
            return self._base_term
        raise IndexError(f"index {index} outside [{self._begin}, {self.end_index}]")

    def sync(self) -> int:
        self.synced_index = self.end_index
        return self.synced_index

    def close(self) -> None:
        pass

    def compact_prefix(self, index: int) -> int:
        """Drop entries before ``index``; return the new begin index."""
        if index <= self._begin:
            return self._begin
        index = min(index, self.end_index + 1)
        self._base_term = self.get(index - 1).term
        del self._entries[: index - self._begin]
        self._begin = index
        return index

    def reset(self, begin_index: int, next_pos: int, last_term: int, chain_crc: int = -1) -> None:
        """Forget every entry; the log continues at ``begin_index`` with ``pos`` ``next_pos``."""
        self._entries = []
        self._begin = begin_index
        self._next_pos = next_pos
        self._base_term = last_term
        self.synced_index = begin_index - 1

    def truncate_suffix(self, index: int) -> None:
        if index >= self.end_index:
            return
        keep = max(index + 1 - self._begin, 0)
        if keep == 0:
            self._next_pos = self._entries[0].pos  # the log continues where it began
        del self._entries[keep:]
        if self._entries:
            last = self._entries[-1]
            self._next_pos = last.pos + last.size
        self.synced_index = min(self.synced_index, self.end_index)

    def chain_at(self, index: int) -> int:
        return -1

    def get_range(self, lo: int, hi: int) -> list[Entry]:
        if lo > hi:
            return []
        if lo < self._begin or hi > self.end_index:
            raise IndexError(f"range [{lo}, {hi}] outside [{self._begin}, {self.end_index}]")
        return self._entries[lo - self._begin : hi - self._begin + 1]

    def flush_writes(self) -> None:
        pass

    def save_checkpoint(self, committed_index: int) -> int:
        self.checkpoint = min(max(committed_index, self.checkpoint), self.synced_index)
        return self.checkpoint

    def crash(self) -> None:
        """Lose every entry appended after the last sync (the page cache is gone)."""
        if self.synced_index < self.end_index:
            self.truncate_suffix(max(self.synced_index, self._begin - 1))


class LogStateMachine:
    """A state machine that records what it applied, ``(index, term, body)`` per entry; snapshots
    are opaque bytes (the last one loaded is ``loaded``)."""

    def __init__(self) -> None:
        self.applied: list[tuple[int, int, bytes]] = []
        self.loaded: bytes | None = None

    def on_apply(self, entries: list[Entry]) -> list[Any]:
        self.applied.extend((e.index, e.term, e.body) for e in entries)
        return [None] * len(entries)

    def on_snapshot_save(self) -> bytes:
        return msgpack.packb([list(a) for a in self.applied[-1:]])

    def on_snapshot_load(self, data: bytes) -> None:
        self.loaded = data
        self.applied = []

    def on_shutdown(self) -> None:
        pass

    def get(self, key: str) -> Any:
        return None


class SafetyViolation(AssertionError):
    """A breach of Raft's safety properties: two leaders in one term (or one member leading twice
    in a term), two votes by one member in one term, a leader without a majority of that term's
    votes, a new leader without a committed entry, two
    logs that share an entry but not the prefix before it, two entries committed at one index, or
    a read-index read answered without a majority's acknowledgement of a round begun after it."""


@dataclass
class SimWaiter:
    """A client request waiting on a member's driver (see :class:`dledger.driver.Pending`)."""

    kind: str
    term: int
    token: Any
    key: str | None = None
    deadline: float = float("inf")
    # a read-index read: when it reached the leader (simulated ms), and the (term, member) of every
    # heartbeat acknowledgement delivered since to a round the leader began at or after that
    since: int | None = None
    acks: set[tuple[int, str]] | None = None


class _Hard:
    """currTerm/votedFor of one member, kept in ``Sim.hard`` (survives crashes: saved synchronously)
    and, on the simulated disk, in the real ``currterm`` file (``file``)."""

    def __init__(self, sim: Sim, node: str, file: HardState | None = None) -> None:
        self.sim, self.node, self.file = sim, node, file

    def load(self) -> tuple[int, str | None]:
        if self.file is not None:
            tv = self.file.load()
            return tv.curr_term, tv.voted_for
        return self.sim.hard[self.node]

    def save(self, term: int, vote: str | None) -> None:
        if self.file is not None:
            self.file.save(term, vote)
        self.sim._hard_saved(self.node, term, vote)


class _Host:
    """The driver's host for one member: the simulated network, the fsync (at once, or a timed
    event after ``Sim.sync_latency`` ms that a crash cancels), answers to ``Sim.on_answer``."""

    def __init__(self, sim: Sim, node: str, life: int) -> None:
        self.sim, self.node, self.life = sim, node, life

    def send(self, msg: Message) -> None:
        self.sim._send(msg)

    def start_sync(self, done: Callable[[int], None]) -> None:
        sim = self.sim
        lo, hi = sim.disk_latency.get(self.node, sim.sync_latency)
        if hi <= 0:
            done(sim.stores[self.node].sync())
            return
        at = sim.now + sim.disk_rng.randint(max(lo, 1), hi)
        sim._syncing[self.node] = at
        if sim.on_sync_start is not None:
            sim.on_sync_start(self.node, at)
        sim.call_at(at, lambda: self._sync_complete(done))

    def _sync_complete(self, done: Callable[[int], None]) -> None:
        sim, node = self.sim, self.node
        if sim.lives.get(node) != self.life:
            sim.stats["fsyncs_lost"] += 1  # the member crashed with this fsync in flight
            return
        if node in sim.paused:  # the kernel finished; the process hears of it when it runs again
            sim._inbox[node].append(lambda: self._sync_complete(done))
            return
        sim._syncing.pop(node, None)
        try:
            durable = sim.stores[node].sync()
        except StoreError as e:  # the server stops a member whose fsync failed
            sim.store_failed(node, e, "fsync")
            return
        done(durable)
        sim._process(node)

    def answer(self, waiter: Any, code: int, **fields: Any) -> None:
        self.sim._answered(self.node, waiter, code, fields)

    def run_io(self, work: Callable[[], object], done: Callable[[], None]) -> None:
        """The IO thread: ``work`` and ``done`` at once, or (with ``Sim.sync_latency``) as a timed
        event a crash cancels, like the fsyncs (a paused member runs it when it resumes)."""
        sim = self.sim
        lo, hi = sim.disk_latency.get(self.node, sim.sync_latency)
        if hi <= 0:
            if self._work(work):
                self._compacting(done)
            return
        sim.call_at(sim.now + sim.disk_rng.randint(max(lo, 1), hi), lambda: self._io_complete(work, done))

    def _io_complete(self, work: Callable[[], object], done: Callable[[], None]) -> None:
        sim, node = self.sim, self.node
        if sim.lives.get(node) != self.life:
            return  # the member crashed before the IO thread got to it
        if node in sim.paused:  # SIGSTOP stops the IO thread too
            sim._inbox[node].append(lambda: self._io_complete(work, done))
            return
        if self._work(work):
            self._compacting(done)
            sim._process(node)

    def _work(self, work: Callable[[], object]) -> bool:
        """Run the IO thread's ``work``; False when it raised (the server logs it and never calls
        ``done``: a snapshot that could not be saved compacts nothing)."""
        disk = self.sim.disks[self.node]
        disk.io_live = True
        try:
            work()
        except (OSError, StoreError) as e:
            log.error("%s: IO work failed: %s", self.node, e)
            return False
        finally:
            disk.io_live = False
        return True

    def snapshot_installed(self, index: int, term: int, data: bytes) -> None:
        self.sim.installed[self.node].append((index, term, data))
        self.sim.stats["snapshot_installs"] += 1

    def _compacting(self, done: Callable[[], None]) -> None:
        store = self.sim.stores[self.node]
        begin = store.begin_index
        try:
            done()
        except StoreError as e:  # the server's loop logs a failing callback; the member goes on
            log.error("%s: after the snapshot was saved: %s", self.node, e)
            return
        if store.begin_index > begin:
            self.sim.stats["compactions"] += 1


class Sim:
    """``n`` members named s1..sn; ``seed`` fixes every random choice; ``latency`` is the
    (min, max) one-way delay in ms; ``cfg`` overrides CoreConfig. ``state_machine`` makes each
    member's state machine (default :class:`LogStateMachine`); ``flush`` is the driver's flush
    policy; ``snapshot_every`` its snapshot threshold; ``data_file_size`` the file disk's data
    segment size. ``on_answer(node, token, code, fields)``
    receives the answers to :meth:`submit`."""

    def __init__(
        self,
        n: int = 3,
        seed: int = 0,
        latency: tuple[int, int] = (1, 3),
        *,
        state_machine: Callable[[], StateMachine] = LogStateMachine,
        flush: str = "sync",
        snapshot_every: int = 0,
        disk: str = "memory",
        data_file_size: int = FILE_DATA_SIZE,
        **cfg: Any,
    ) -> None:
        if disk not in ("memory", "file"):
            raise ValueError(f"disk {disk!r}: expected memory or file")
        self.ids = [f"s{i + 1}" for i in range(n)]
        self.rng = random.Random(seed)  # the caller's stream (schedules)
        # latencies and the cores' seeds come from the caller's stream too, as they always did, so
        # the regression seeds of the core tests keep their schedules; chaos_dledger.sim draws its
        # workload and faults from streams of its own
        self.net_rng = self._core_rng = self.rng
        self.latency = latency
        self.loss, self.duplicate = 0.0, 0.0  # probabilities that a message is lost, delivered twice
        self.cfg, self.state_machine, self.flush = cfg, state_machine, flush
        self.snapshot_every = snapshot_every
        # snapshots kept, and the file disk's data segment size (compaction drops whole segments)
        self.snapshot_keep, self.data_file_size = 3, data_file_size
        self.now = 0
        self._clock: dict[str, tuple[int, int, float]] = {}  # node -> (since, local then, rate)
        self.reads: dict[str, list[tuple[int, int]]] = {i: [] for i in self.ids}  # answered reads
        self._watch_reads()
        self.disk = disk
        self.repair = True  # file disk: stores cut a damaged committed prefix and repair it
        self.tear_probability = 0.0  # file disk: chance that a crash tears a file's last write
        self.reorder_probability = 0.0  # file disk: chance that a crash keeps a random page subset
        self.sync_latency = (0, 0)  # (min, max) ms per fsync; 0: the fsync completes at once
        self.disk_latency: dict[str, tuple[int, int]] = {}  # a member's own sync_latency (its disk's)
        self.disk_rng = random.Random(f"fsync-{seed}")
        self.on_sync_start: Callable[[str, int], None] | None = None  # (member, completes at ms)
        self._syncing: dict[str, int] = {}  # member -> when its fsync in flight completes
        self.lives: dict[str, int] = {}  # member -> incarnation (a crash ends one)
        # live links: a share of messages held back up to slow_ms, a copy of some delivered again
        # that late, and partitions that hold what crosses them until the heal
        self.slow = 0.0
        self.slow_ms = 0
        self.late_duplicate = 0.0
        self.hold_partitions = False
        self._held_links: list[Message] = []
        # delivery across term changes: a share of messages (or of copies) held until their receiver
        # has moved on one or two terms and stands at a protocol point (a round open, an answer
        # pending), then delivered after the usual latency
        self.term_late = 0.0
        self.term_late_kinds: tuple[type[Message], ...] = ()  # the message classes it holds (): all
        self.term_late_point = "any"  # where the receiver must stand for the release (PAUSE_POINTS)
        self._term_late: dict[str, list[tuple[int, Message]]] = {}
        # clogged links (FoundationDB's clogInterface, send or receive side): a directed link holds
        # what arrives on it, in order, until the clog ends; (src, dst) -> until ms, held messages
        self._clog_until: dict[tuple[str, str], int] = {}
        self._clog_held: dict[tuple[str, str], list[Message]] = {}
        # slow links (a gray failure, netem delay on one side of a member): (src, dst) -> extra ms
        # added to every message sent on that link while it is set
        self.link_delay: dict[tuple[str, str], int] = {}
        self.pause_triggers: dict[str, tuple[str, Callable[[str], None] | None]] = {}
        self.disk_faulted: set[str] = set()  # members with an injected storage fault
        self.failing_disks: set[str] = set()  # members whose disk fails calls now (fail_disk)
        self.store_stopped: set[str] = set()  # members stopped by a store failure, not restarted since
        self.repair_rng = random.Random(f"repair-{seed}")  # the leaderless repair's choice of peers
        self.repairing: dict[str, int] = {}  # member -> repair_to of its store, while repairing
        self.stats: dict[str, int] = dict.fromkeys(STATS, 0)
        self._down_bytes: dict[str, int] = {}  # member -> committed_bytes when it went down
        self._down_committed: dict[str, int] = {}  # and its checkpoint's committedIndex then
        self._lease: dict[str, int] = {}
        # file disk: the real FileLogStore and currterm file over one SimDisk per member
        self.disks: dict[str, SimDisk] = {i: SimDisk(random.Random(f"disk-{seed}-{i}")) for i in self.ids}
        self.stores: dict[str, Any] = {i: SimLogStore() for i in self.ids}
        self.installed: dict[str, list[tuple[int, int, bytes]]] = {i: [] for i in self.ids}
        self.from_snapshot: set[str] = set()  # members whose last start loaded a snapshot
        self.hard: dict[str, tuple[int, str | None]] = {i: (0, None) for i in self.ids}
        self.nodes: dict[str, Core] = {}
        self.drivers: dict[str, Driver] = {}
        self.sms: dict[str, StateMachine] = {}
        self.paused: set[str] = set()
        # held while paused: messages, and fsync completions the process has not run yet
        self._inbox: dict[str, list[Any]] = {i: [] for i in self.ids}
        self.blocked: set[tuple[str, str]] = set()
        self.drop: Callable[[Message], bool] | None = None
        # a partition also drops the messages in flight on a cut link when they arrive (iptables
        # drops packets, not connections); off by default so the core tests' seeds keep their runs
        self.cut_in_flight = False
        self.on_answer: Callable[[str, Any, int, dict[str, Any]], None] | None = None
        self._queue: list[tuple[int, int, Any]] = []  # (time, seq, Message or callback)
        self._seq = 0
        self._init_checks()
        for i in self.ids:
            self.start(i)

    def _init_checks(self) -> None:
        """The safety checks' state (see the module docstring)."""
        self.leaders: dict[int, str] = {}  # term -> leader (election safety)
        self._leading: dict[str, bool] = {}  # node -> leader at its last check
        self._stints: set[tuple[str, int]] = set()  # (node, term) of every leadership stint
        self.votes: dict[tuple[str, int], str] = {}  # (voter, term) -> the member it voted for
        self.committed: dict[int, tuple[int, bytes]] = {}  # index -> (term, body) (state machine safety)
        # index -> the term of the member that first reported it committed (>= the term it was
        # committed in; leader completeness binds the leaders of later terms only)
        self.commit_term: dict[int, int] = {}
        self.max_term_seen = 0
        self._checked: dict[str, int] = {}
        self.steps = 0

    # ------------------------------------------------------------ membership

    def start(self, node: str) -> Core:
        """(Re)start ``node`` from its store and persisted term/vote; the state machine is rebuilt
        from the checkpointed commitIndex as the server's replay does. Raises the store's
        StoreError when recovery refuses (a damaged committed prefix, a failing disk)."""
        disk = self.disks[node]
        disk.io_live = True  # recovery is the member's own code: a failing disk fails it
        try:
            core = self._start(node)
        finally:
            disk.io_live = False
        self.store_stopped.discard(node)
        return core

    def _start(self, node: str) -> Core:
        hard_file = None
        committed = -1
        snapshots = SnapshotStore(f"/sim/{node}/snapshot", self.snapshot_keep, fs=self.disks[node])
        if self.disk == "file":
            directory = Path(f"/sim/{node}")
            disk = self.disks[node]
            try:
                store = FileLogStore(
                    directory,
                    fs=disk,
                    verify_files=1,
                    data_file_size=self.data_file_size,
                    index_file_size=FILE_INDEX_SIZE,
                    repair=self.repair,
                )
            except CorruptionError as e:
                self._check_durability(node, str(e))
                raise
            self.stores[node] = store
            # the part of the committed prefix the replay will not read (it starts after the
            # newest snapshot) is read here; the replay (dledger.driver.replay) checks the rest
            newest = snapshots.list()
            self._verify_committed(node, store, newest[-1][0] if newest else -1)
            rec = store.recovery
            if rec.cut_reason is not None:
                self.stats["recovery_cuts"] += 1
            if store.repair_to >= 0:
                self._check_durability(node, rec.describe())
                self.stats["repairs"] += 1
                self.repairing[node] = store.repair_to
            committed = store.committed_index
            hard_file = HardState(directory, fs=disk)
        hard = _Hard(self, node, hard_file)
        store = self.stores[node]
        self.lives[node] = self.lives.get(node, 0) + 1
        sm = self.state_machine()
        # the server's start: newest snapshot (SnapshotStore on this member's simulated disk), the
        # committed entries after it replayed, then the core and its driver
        rng = random.Random(self._core_rng.random())
        try:
            drv = start_member(
                CoreConfig(self_id=node, peers=self.ids, **self.cfg),
                store,
                hard,
                sm,
                _Host(self, node, self.lives[node]),
                snapshots=snapshots,
                committed=committed,
                rng=rng,
                now=self.local(node),
                flush=self.flush,
                snapshot_every=self.snapshot_every,
            )
        except StoreError as e:  # e.g. the log begins after what the newest snapshot covers
            if isinstance(e, CorruptionError) or node not in self.failing_disks:
                self._check_durability(node, str(e))
            raise  # (a failing disk's I/O error: the member stays down until it works again)
        core = drv.core
        if core.snapshot is not None:
            self.stats["snapshot_restarts"] += 1
            self.from_snapshot.add(node)
        else:
            self.from_snapshot.discard(node)
        if core.repair_to >= 0 and node not in self.repairing:  # the replay cut a damaged entry
            self._check_durability(node, f"replay found damage below {core.repair_to}")
            self.stats["repairs"] += 1
            self.repairing[node] = core.repair_to
        self.nodes[node] = core
        self.sms[node] = sm
        self.drivers[node] = drv
        self._checked[node] = -1
        self._leading[node] = False
        self.paused.discard(node)
        self._inbox[node] = []
        return core

    def crash(self, node: str) -> None:
        """Stop ``node``: its waiting requests are lost, and so is what its store had not synced;
        term/vote survive (they are saved synchronously)."""
        if self.disk == "file" and node in self.nodes:
            self._down_bytes[node] = self.committed_bytes(node)
            self._down_committed[node] = getattr(self.stores[node], "committed_index", -1)
        core = self.nodes.pop(node, None)
        drv = self.drivers.pop(node, None)
        if drv is not None:
            drv.stopped = True
        self.sms.pop(node, None)
        self.paused.discard(node)
        self._inbox[node] = []
        self._read_waiters[node] = []  # lost with the process
        self.lives[node] = self.lives.get(node, 0) + 1
        self.pause_triggers.pop(node, None)
        if core is None:
            return
        if self._syncing.pop(node, -1) > self.now:
            self.stats["crashes_in_sync"] += 1
        if self.disk == "file":
            # the store object dies with the process
            self.disks[node].crash(self.tear_probability, self.reorder_probability)
        else:
            self.disks[node].crash()  # the snapshot files
            self.stores[node].crash()

    def stop(self, node: str) -> None:
        """SIGTERM: the server's clean shutdown (``dledger.server``'s stop, DLedgerServer.shutdown):
        sync the log, checkpoint the commitIndex, close the store and the state machine; then the
        process is gone as after :meth:`crash` (with nothing unsynced left to lose). A store that
        fails meanwhile (a failing disk) is logged, as the server does, and the member is gone."""
        core, drv = self.nodes.get(node), self.drivers.get(node)
        if core is None or drv is None:
            return
        drv.stopped = True
        store = self.stores[node]
        disk = self.disks[node]
        disk.io_live = True
        try:
            store.sync()
            store.save_checkpoint(core.commit_index)
            store.close()
        except (StoreError, OSError) as e:
            log.error("%s: closing the store failed: %s", node, e)
        finally:
            disk.io_live = False
        self.sms[node].on_shutdown()
        self.stats["graceful_stops"] += 1
        self.crash(node)

    def store_failed(self, node: str, e: StoreError, what: str) -> None:
        """A store failure the server stops the member for (a failed fsync, a refused term/vote
        write, a read error while applying): logged, and the process is gone (:meth:`crash`) until
        it is started again. A damaged record (CorruptionError) must come from an injected storage
        fault (:meth:`_check_durability`)."""
        log.error("%s: store failure, stopping (%s): %s", node, what, e)
        if isinstance(e, CorruptionError):
            self._check_durability(node, str(e))
        self.stats["store_stops"] += 1
        self.store_stopped.add(node)
        self.crash(node)

    def fail_disk(self, node: str, how: str) -> None:
        """From now on ``node``'s disk fails calls (one of :data:`DISK_ERRORS`): ``full`` refuses
        every write and file growth with ENOSPC, ``filling`` lets writes take up to
        :data:`FILLING_ROOM` bytes more (a longer one is cut short) and then refuses them as
        ``full``, ``fsync`` fails every fsync with EIO, ``read`` fails a share of the member's
        reads with EIO. The member's code handles each as the server does (a refused log write is
        answered DISK_ERROR, a failed fsync stops the member, ...)."""
        if how not in DISK_ERRORS:
            raise ValueError(f"disk error {how!r}: expected one of {DISK_ERRORS}")
        disk = self.disks[node]
        if how == "filling":
            disk.room = disk.rng.randrange(FILLING_ROOM)
        disk.failing = how
        self.failing_disks.add(node)

    def unfail_disk(self, node: str) -> None:
        """``node``'s disk works again (space freed, the sick disk replaced by a good one with the
        same contents)."""
        self.disks[node].failing = None
        self.failing_disks.discard(node)

    def pause(self, node: str) -> None:
        """SIGSTOP: ``node`` neither ticks nor receives; messages to it wait in its queue."""
        if node in self.nodes:
            self.paused.add(node)

    def resume(
        self,
        node: str,
        first: Callable[[], None] | None = None,
        order: str = "fifo",
        rng: random.Random | None = None,
    ) -> None:
        """SIGCONT: ``node`` handles its queued messages, then ticks again; ``first()`` runs before
        the queued messages (requests that were queued for it and come first). ``order`` (one of
        :data:`RELEASE_ORDERS`) is the order the queue is released in: as it arrived, reversed,
        shuffled by ``rng``, or each sender's newest message first (stale ones last)."""
        if node not in self.paused:
            return
        self.paused.discard(node)
        self.pause_triggers.pop(node, None)
        if first is not None:
            first()
        queued, self._inbox[node] = self._inbox[node], []
        if order == "reverse":
            queued.reverse()
        elif order == "shuffle":
            (rng or self.net_rng).shuffle(queued)
        elif order == "newest-first-per-sender":
            queued = list(reversed(queued))
            queued.sort(key=lambda m: (0, 0) if not isinstance(m, Message) else (1, -m.term))
        for msg in queued:
            if isinstance(msg, Message):
                self._deliver(msg)
            elif node in self.nodes:
                msg()

    def pause_at(self, node: str, point: str, then: Callable[[str], None] | None = None) -> None:
        """Pause ``node`` (any member when ``node`` is "*") as soon as it is at ``point`` (one of
        :data:`PAUSE_POINTS`): a leader with a heartbeat round open, a candidate with a vote round
        open, a follower holding acknowledgements for an fsync in flight, or any of them; ``then(node)``
        runs when the pause lands."""
        if point not in PAUSE_POINTS:
            raise ValueError(f"pause point {point!r}: expected one of {PAUSE_POINTS}")
        self.pause_triggers[node] = (point, then)

    def at_point(self, node: str, point: str) -> bool:
        """Whether ``node`` is at protocol ``point`` now (see :meth:`pause_at`)."""
        core, drv = self.nodes.get(node), self.drivers.get(node)
        if core is None or drv is None:
            return False
        if point in ("heartbeat-round", "any") and core.role == _LEADER and core._hb_open:
            return True
        if point in ("vote-round", "any") and core.role == Role.CANDIDATE and core._votes is not None:
            return True
        return (
            point in ("follower-ack", "any")
            and core.role == Role.FOLLOWER
            and bool(drv._held or drv._sync_running)
        )

    def _pause_trigger(self, node: str) -> None:
        for who in (node, "*"):
            trig = self.pause_triggers.get(who)
            if trig is not None and node not in self.paused and self.at_point(node, trig[0]):
                del self.pause_triggers[who]
                self.paused.add(node)
                self.stats["pauses_in_round"] += 1
                if trig[1] is not None:
                    trig[1](node)
                return

    def partition(self, *groups: list[str]) -> None:
        """Only members of the same group can talk; members in no group are isolated."""
        self.blocked = {
            (a, b)
            for a in self.ids
            for b in self.ids
            if a != b and not any(a in g and b in g for g in groups)
        }

    def block(self, links: set[tuple[str, str]]) -> None:
        """Only these directed links ``(src, dst)`` drop messages: a partition of any shape, one
        direction of a link may stay up (``partition`` is the symmetric case)."""
        self.blocked = set(links)

    def isolate(self, node: str) -> None:
        self.blocked |= {(node, o) for o in self.ids if o != node} | {
            (o, node) for o in self.ids if o != node
        }

    def heal(self) -> None:
        """Every link works again; with ``hold_partitions`` what the partition held is delivered
        now (after the usual latency)."""
        self.blocked = set()
        held, self._held_links = self._held_links, []
        for m in held:
            self._enqueue(m, self.now + self.net_rng.randint(*self.latency))

    def _member_links(self, node: str, send_ms: int, recv_ms: int) -> list[tuple[tuple[str, str], int]]:
        """``(link, ms)`` for each of ``node``'s outgoing links (``send_ms``) and incoming links
        (``recv_ms``) whose ms is above 0; a link is ``(src, dst)``."""
        out = [((node, o), send_ms) for o in self.ids if o != node] + [
            ((o, node), recv_ms) for o in self.ids if o != node
        ]
        return [(link, ms) for link, ms in out if ms > 0]

    def clog(self, node: str, send_ms: int, recv_ms: int) -> dict[tuple[str, str], int]:
        """Clog ``node``'s outgoing links for ``send_ms`` and its incoming links for ``recv_ms``
        (0: that side flows): what arrives on a clogged link, in flight before the clog too, is held
        and delivered in order when the clog ends (FoundationDB's ``clogInterface`` with
        ``ClogSend``/``ClogReceive``: a stalled queue, late rather than lost). A longer clog of a
        link extends it. Returns the clogs it set (link -> until ms), for :meth:`unclog`."""
        mine = {}
        for link, ms in self._member_links(node, send_ms, recv_ms):
            if self.now + ms > self._clog_until.get(link, 0):
                until = mine[link] = self._clog_until[link] = self.now + ms
                self.call_at(until, functools.partial(self._unclog_link, link, until))
        return mine

    def delay_links(self, node: str, send_ms: int, recv_ms: int) -> None:
        """Add ``send_ms`` to every message ``node`` sends and ``recv_ms`` to every message sent to
        it (0: that side as usual), until :meth:`undelay_links`; the order of a link's messages is
        kept (the extra delay is the same for each)."""
        self.link_delay.update(self._member_links(node, send_ms, recv_ms))

    def undelay_links(self, node: str) -> None:
        """``node``'s links at the usual latency again (what is on its way keeps its delay)."""
        self.link_delay = {k: v for k, v in self.link_delay.items() if node not in k}

    def unclog(self, clogs: dict[tuple[str, str], int]) -> None:
        """End now the clogs one :meth:`clog` call set (what they held is delivered in order); a
        link another clog has extended since stays clogged."""
        for link, until in clogs.items():
            self._unclog_link(link, until)

    def _unclog_link(self, link: tuple[str, str], until: int) -> None:
        if self._clog_until.get(link) != until:
            return  # extended, or ended already
        del self._clog_until[link]
        for m in self._clog_held.pop(link, []):
            self._enqueue(m, self.now + self.latency[0])  # in order: the queue breaks ties by seq

    # ------------------------------------------------------------ running

    def leader(self) -> str | None:
        """The live leader with the highest term, if any."""
        best = None
        for i, c in self.nodes.items():
            if (
                c.role == Role.LEADER
                and i not in self.paused
                and (best is None or c.term > self.nodes[best].term)
            ):
                best = i
        return best

    def run(self, ms: int, until: Callable[[], bool] | None = None) -> bool:
        """Advance ``ms`` simulated milliseconds (ticks every 10 ms); stop early when ``until()``
        holds (checked every ms) and return True then."""
        if until is None:
            self.run_to(self.now + ms)
            return False
        end = self.now + ms
        while self.now < end:
            self.run_to(self.now + 1)
            if until():
                return True
        return until()

    def run_to(self, t: int) -> None:
        """Advance the clock to ``t`` ms, delivering due messages and ticking every member every
        10 ms; the clock jumps over quiet stretches."""
        queue = self._queue
        heappop = heapq.heappop
        deliver = self._deliver
        while self.now < t:
            now = self.now
            nxt = (now // 10 + 1) * 10
            if nxt > t:
                nxt = t
            if queue and queue[0][0] < nxt:
                nxt = max(queue[0][0], now + 1)
            self.now = nxt
            while queue and queue[0][0] <= nxt:
                item = heappop(queue)[2]
                if isinstance(item, Message):
                    deliver(item)
                else:
                    item()
            if nxt % 10 == 0:
                self._tick_all(nxt % 1000 == 0)

    def _tick_all(self, checkpoint: bool) -> None:
        """Tick every running member and expire its waiting requests (the server's ticker);
        ``checkpoint``: then save its commitIndex checkpoint (the server does every second)."""
        nodes, paused, clock, drivers = self.nodes, self.paused, self._clock, self.drivers
        for i in list(nodes):
            core = nodes.get(i)
            if core is None or i in paused:
                continue  # (stopped meanwhile by a store failure)
            now = self.local(i) if clock else self.now
            core.tick(now)
            drv = drivers[i]
            if drv.waiters or drv.reads or drv.ready_reads:
                drv.expire(now)
            self._process(i, now)
            if checkpoint and i in nodes:
                try:
                    self.stores[i].save_checkpoint(core.commit_index)
                except (StoreError, OSError) as e:  # the server logs it and tries again in a second
                    log.error("%s: checkpoint failed: %s", i, e)
        if self.repairing and self.now % REPAIR_EVERY_MS == 0:
            self._repair_leaderless()

    def _repair_leaderless(self) -> None:
        """The server's leaderless repair (``dledger.server``'s ``_repairer``, issue 36): a member
        whose log ends below its ``repair_to`` appends the next entries from what its recovery kept
        intact (``store.salvaged``) or, for the damaged ones, the committed entries a peer serves
        (GET, :meth:`dledger.driver.Driver.get`: committed entries only), through
        ``Core.repair_append``; a leader's pushes may fill the log meanwhile."""
        for node in sorted(self.repairing):
            core = self.nodes.get(node)
            if core is None or node in self.paused or core.repair_to < 0:
                continue
            nxt, last = core.end_index + 1, core.repair_to
            if nxt > last:
                continue
            salvaged: dict[int, Entry] = getattr(self.stores[node], "salvaged", {})
            run: list[Entry] = []
            while nxt + len(run) <= last and nxt + len(run) in salvaged and len(run) < 1000:
                run.append(salvaged.pop(nxt + len(run)))
            if not run:
                run = self._fetch_committed(node, nxt, min(last, nxt + REPAIR_FETCH - 1))
            if run and core.repair_append(run):
                self.stats["leaderless_repairs"] += 1
                self._process(node)

    def _fetch_committed(self, node: str, lo: int, hi: int) -> list[Entry]:
        """Entries ``lo..hi`` (a consecutive run from ``lo``) as committed on the first peer (in a
        seeded order) that ``node`` reaches and that serves ``lo``."""
        peers = [p for p in self.ids if p != node]
        self.repair_rng.shuffle(peers)
        for peer in peers:
            if (node, peer) in self.blocked or (peer, node) in self.blocked:
                continue
            got: list[Entry] = []
            for i in range(lo, hi + 1):
                code, e = self.get(peer, i)
                if code != Code.SUCCESS or e is None:
                    break
                got.append(e)
            if got:
                return got
        return []

    def call_at(self, t: int, fn: Callable[[], None]) -> None:
        """Call ``fn()`` at simulated time ``t`` ms (after the messages due then)."""
        self._seq += 1
        heapq.heappush(self._queue, (max(t, self.now + 1), self._seq, fn))

    def _deliver(self, msg: Message) -> None:
        drv = self.drivers.get(msg.dst)
        if drv is None:
            return
        if self.cut_in_flight and (msg.src, msg.dst) in self.blocked:
            if self.hold_partitions:
                self._held_links.append(msg)
                self.stats["held_messages"] += 1
            return
        if self._clog_until and self._clog_until.get((msg.src, msg.dst), 0) > self.now:
            self._clog_held.setdefault((msg.src, msg.dst), []).append(msg)
            self.stats["clogged_messages"] += 1
            return
        if msg.dst in self.paused:
            self._inbox[msg.dst].append(msg)
            return
        if msg.term < drv.core.term:
            self.stats["stale_term_messages"] += 1
            if msg.term + 2 <= drv.core.term:
                self.stats["two_terms_late"] += 1
        if type(msg) is HeartbeatResponse and self._read_waiters.get(msg.dst):
            self._heartbeat_ack(msg)
        now = self.local(msg.dst)
        if self.failing_disks and msg.dst in self.failing_disks:
            disk = self.disks[msg.dst]
            disk.io_live = True
            try:
                drv.step(msg, now)
            finally:
                disk.io_live = False
        else:
            drv.step(msg, now)  # as the server: a damaged record read under the core is answered
        self._process(msg.dst, now)

    def local(self, node: str) -> int:
        """``node``'s clock in ms: simulated time, or slower/faster after :meth:`set_clock_rate`."""
        clock = self._clock.get(node)
        if clock is None:
            return self.now
        since, base, rate = clock
        return base + int((self.now - since) * rate)

    def set_clock_rate(self, node: str, rate: float) -> None:
        """From now on ``node``'s clock advances ``rate`` ms per simulated ms (continuously)."""
        self._clock[node] = (self.now, self.local(node), rate)

    def read_index(self, node: str, read_id: int, lease: bool = False) -> int:
        """Ask ``node`` for a linearizable read; answered ones land in ``reads[node]`` as
        ``(read_id, read index)``."""
        code = self.nodes[node].read_index(read_id, self.local(node), lease=lease)
        if code == Code.SUCCESS:
            self.drivers[node].reads[read_id] = SimWaiter(
                "read", self.nodes[node].term, ("read", read_id), deadline=self.local(node) + MAX_WAIT_ACK_MS
            )
        self._process(node)
        return code

    def transfer(self, to: str, via: str | None = None, term: int | None = None) -> int:
        """Ask the current leader (or member ``via``) to hand leadership to ``to``, in ``term``
        (None: any; DLedger's request carries the term the client saw); the answer code (SUCCESS
        when the transfer started). Raises AssertionError when there is no leader to ask."""
        ld = via or self.leader()
        assert ld is not None, "no leader to transfer from"
        code = self.nodes[ld].transfer(to, 1, self.local(ld), term)
        if ld in self.nodes:
            self._process(ld)
        return code

    def propose(self, body: bytes) -> Entry | None:
        """Propose ``body`` at the current leader; None when there is none."""
        ld = self.leader()
        if ld is None:
            return None
        _, e = self.nodes[ld].propose(body, self.local(ld))
        self._process(ld)
        return e

    def submit(
        self,
        node: str,
        kind: str,
        body: bytes,
        token: Any,
        key: str | None = None,
        read_mode: str = "raft-log",
    ) -> int:
        """A client request to ``node`` through the driver, as the server takes it: "kv:get" reads
        ``key`` in ``read_mode`` (:meth:`dledger.driver.Driver.kv_get`); other kinds ("append",
        "kv:put", "kv:cas", ...) propose ``body``; "kv:txn" runs the transaction encoded in ``body``
        (:meth:`dledger.driver.Driver.kv_txn`); "read" starts a read index for ``key``. Answers come
        through ``on_answer``. Returns the immediate code (SUCCESS when accepted or answered;
        NOT_LEADER etc. otherwise; NOT_LEADER for a crashed or paused member)."""
        core = self.nodes.get(node)
        if core is None or node in self.paused:
            return Code.NOT_LEADER
        drv = self.drivers[node]
        now = self.local(node)
        if kind == "read":
            self._seq += 1
            rid = self._seq
            code = core.read_index(rid, now)
            if code == Code.SUCCESS:
                drv.reads[rid] = self._confirming(
                    node, SimWaiter("read", core.term, token, key, deadline=now + MAX_WAIT_ACK_MS)
                )
        elif kind == "kv:get":
            waiter = SimWaiter(kind, core.term, token, key, deadline=now + MAX_WAIT_ACK_MS)
            code = drv.kv_get(key or "", read_mode, waiter, now)
            if code == Code.SUCCESS and read_mode == "read-index":
                self._confirming(node, waiter)
        elif kind == "kv:txn":  # body: a txn entry's body; read-only ones go through read_mode
            mops = (decode_kv(body) or ["txn", "", []])[2]
            waiter = SimWaiter(kind, core.term, token, key, deadline=now + MAX_WAIT_ACK_MS)
            try:
                code = drv.kv_txn(mops, read_mode, waiter, now)
            except ValueError:  # malformed micro-ops: the server answers UNEXPECTED_ARGUMENT
                code = Code.UNEXPECTED_ARGUMENT
            if (
                code == Code.SUCCESS
                and read_mode == "read-index"
                and getattr(waiter, "txn", None) is not None
            ):
                self._confirming(node, waiter)  # read-only: it went through the read index
        else:
            code = drv.propose(
                body, SimWaiter(kind, core.term, token, key, deadline=now + MAX_WAIT_ACK_MS), now
            )
        self._process(node)
        return code

    def get(self, node: str, index: int) -> tuple[int, Entry | None]:
        """DLedger's GET of entry ``index`` at ``node`` (:meth:`dledger.driver.Driver.get`);
        NOT_LEADER for a crashed or paused member."""
        if node not in self.nodes or node in self.paused:
            return Code.NOT_LEADER, None
        disk = self.disks[node]
        disk.io_live = True
        try:
            return self.drivers[node].get(index)
        except StoreError:  # the server answers DISK_ERROR (a damaged or unreadable record)
            return Code.DISK_ERROR, None
        finally:
            disk.io_live = False

    def metadata(self, node: str) -> dict[str, Any] | None:
        """METADATA of ``node`` (:meth:`dledger.driver.Driver.metadata`); None when it is crashed
        or paused."""
        if node not in self.nodes or node in self.paused:
            return None
        return self.drivers[node].metadata()

    def _watch_reads(self) -> None:
        """The read confirmation's state (Raft thesis 6.4): when each heartbeat round went out,
        (leader, term, round) -> ms (rounds restart with the process, but a member leads a term
        once), and the read-index reads waiting at each member."""
        self._hb_sent: dict[tuple[str, int, int], int] = {}
        self._read_waiters: dict[str, list[SimWaiter]] = {i: [] for i in self.ids}

    def _confirming(self, node: str, waiter: SimWaiter) -> SimWaiter:
        """Watch ``waiter``, a read-index read that just reached ``node``, for its confirmation."""
        waiter.since, waiter.acks = self.now, set()
        self._read_waiters.setdefault(node, []).append(waiter)
        return waiter

    def _forget_read(self, node: str, waiter: SimWaiter) -> None:
        waiting = self._read_waiters.get(node, [])
        for i, w in enumerate(waiting):
            if w is waiter:
                del waiting[i]
                return

    def _heartbeat_ack(self, resp: HeartbeatResponse) -> None:
        """A heartbeat answer reaches its leader: an acknowledgement (SUCCESS) of a round begun at or
        after a waiting read's arrival counts toward that read's confirmation."""
        if resp.code != Code.SUCCESS:
            return
        began = self._hb_sent.get((resp.dst, resp.term, resp.round))
        if began is None:
            return
        for w in self._read_waiters[resp.dst]:
            if w.since is not None and w.acks is not None and began >= w.since:
                w.acks.add((resp.term, resp.src))

    def _check_read_confirmed(self, node: str, waiter: SimWaiter) -> None:
        """Read confirmation (Raft thesis 6.4, etcd-raft read_only.go): a leader answers a read-index
        read only once a majority, itself included, acknowledged in the read's term a heartbeat
        round begun after the read arrived; acknowledgements of earlier rounds prove nothing about
        when the read came."""
        self._forget_read(node, waiter)
        acks = sorted(m for t, m in waiter.acks or () if t == waiter.term)
        if 2 * (len(acks) + 1) <= len(self.ids):
            raise SafetyViolation(
                f"{node} answered a read-index read that arrived at {waiter.since} ms in term {waiter.term} "
                f"with acknowledgements from {', '.join(acks) or 'nobody'} of heartbeat rounds begun after "
                f"it, not a majority of {len(self.ids)}"
            )

    def _answered(self, node: str, waiter: Any, code: int, fields: dict[str, Any]) -> None:
        if code == Code.WAIT_QUORUM_ACK_TIMEOUT:
            self.stats["expired_requests"] += 1
        if getattr(waiter, "since", None) is not None:
            if code == Code.SUCCESS:
                self._check_read_confirmed(node, waiter)
            else:
                self._forget_read(node, waiter)
        token = waiter.token
        if isinstance(token, tuple) and len(token) == 2 and token[0] == "read":
            if code == Code.SUCCESS:
                self.reads[node].append((token[1], fields["index"]))
            return
        if self.on_answer is not None:
            self.on_answer(node, token, code, fields)

    def _process(self, node: str, now: int | None = None) -> None:
        """Carry out ``node``'s Ready output through its driver, then check safety; ``now`` is its
        local clock when the caller knows it."""
        core = self.nodes[node]
        drv = self.drivers[node]
        if self._term_late and node in self._term_late:
            self._release_term_late(node, core)
        if core.role != _LEADER and core.commit_index <= drv.last_applied and not core.has_ready():
            # nothing for the driver to do (a leader always drains: it replicates from ready())
            if core.commit_index > self._checked[node] or self._leading[node]:
                self._check(node)
            return
        end = drv.store.end_index
        failing = self.failing_disks and node in self.failing_disks
        if failing:
            self.disks[node].io_live = True
        try:
            drv.drain(self.local(node) if now is None else now)
        except StoreError as e:  # the server stops the member (dledger.server's _drain_cb)
            self.store_failed(node, e, "drain")
            return
        finally:
            if failing:
                self.disks[node].io_live = False
        if drv.store.end_index < end and core.role != _LEADER:
            self.stats["truncations"] += 1
        self._check(node)
        if self.pause_triggers:
            self._pause_trigger(node)

    def _release_term_late(self, node: str, core: Core) -> None:
        """Deliver the messages held for ``node`` whose release term it has reached, if it stands
        at a protocol point now (see :meth:`at_point`)."""
        held = self._term_late[node]
        term = core.term
        if all(t > term for t, _ in held) or not self.at_point(node, self.term_late_point):
            return
        keep = [(t, m) for t, m in held if t > term]
        for t, m in held:
            if t <= term:
                self._enqueue(m, self.now + self.net_rng.randint(*self.latency))
        if keep:
            self._term_late[node] = keep
        else:
            del self._term_late[node]

    def _enqueue(self, m: Message, at: int) -> None:
        self._seq += 1
        heapq.heappush(self._queue, (max(at, self.now + 1), self._seq, m))

    def _send(self, m: Message) -> None:
        if type(m) is HeartbeatRequest:
            self._hb_sent.setdefault((m.src, m.term, m.round), self.now)
        if self.blocked and (m.src, m.dst) in self.blocked:
            if self.hold_partitions:
                self._held_links.append(m)
                self.stats["held_messages"] += 1
            return
        if self.drop is not None and self.drop(m):
            return
        rng = self.net_rng
        if self.slow and rng.random() < self.slow:
            # held back on a live link (a stalled TCP stream, a queue): arrives after elections
            self.stats["slow_messages"] += 1
            self._enqueue(m, self.now + rng.randint(1, self.slow_ms))
            return
        if self.late_duplicate and rng.random() < self.late_duplicate:
            self._enqueue(m, self.now + rng.randint(1, self.slow_ms))  # a late copy, then the usual one
        if (
            self.term_late
            and (not self.term_late_kinds or isinstance(m, self.term_late_kinds))
            and rng.random() < self.term_late
        ):
            held = self._term_late.setdefault(m.dst, [])
            if len(held) < TERM_LATE_CAP:
                held.append((m.term + rng.randint(1, 2), m))
                self.stats["term_late_messages"] += 1
                if rng.random() < 0.5:
                    return  # held; otherwise a copy is held and the message goes on
        if self.loss and rng.random() < self.loss:
            return
        copies = 2 if self.duplicate and rng.random() < self.duplicate else 1
        lo, hi = self.latency
        width = hi - lo + 1
        bits = width.bit_length()
        getrandbits = rng.getrandbits
        queue, at = self._queue, self.now + lo
        if self.link_delay:
            extra = self.link_delay.get((m.src, m.dst), 0)
            if extra:
                at += extra
                self.stats["delayed_messages"] += 1
        for _ in range(copies):
            # rng.randint(lo, hi) as CPython draws it (randrange -> _randbelow), without its
            # argument checks: the same stream, so every seed keeps its schedule
            r = getrandbits(bits)
            while r >= width:
                r = getrandbits(bits)
            self._seq += 1
            heapq.heappush(queue, (at + r, self._seq, m))

    # ------------------------------------------------------------ storage faults

    def committed_bytes(self, node: str) -> int:
        """The byte position (in the data log) where the entries ``node``'s checkpoint says are
        committed end: storage faults below it hit committed data, which recovery must detect
        (faults beyond it look like a torn tail of unsynced writes, the crash fault model)."""
        if node not in self.nodes:
            return self._down_bytes.get(node, 0)  # as it was when the member went down
        st = self.stores.get(node)
        ck = getattr(st, "committed_index", -1)
        if self.disk != "file" or st is None or ck < st.begin_index:
            return 0
        try:
            e = st.get(ck)
        except (IndexError, OSError, StoreError):
            return 0
        return e.pos + codec.HEADER_SIZE + len(e.body)

    def damage(self, node: str, kind: str, below: int) -> dict[str, Any] | None:
        """Inject storage fault ``kind`` (one of :data:`DAMAGE_KINDS`) into down member ``node``'s
        committed data, below data-log position ``below`` (see :meth:`committed_bytes`), in one of
        the data segments holding it (or their index records): a bit flipped in a record's 48-byte
        header or in its body, a lost page write, a misdirected one, the tail of a segment holding
        committed entries only lost, a bit flipped in an index record. What was done (a dict for the history), or None when
        nothing there could be damaged."""
        if kind not in DAMAGE_KINDS:
            raise ValueError(f"damage {kind!r}: expected one of {DAMAGE_KINDS}")
        if node in self.nodes or self.disk != "file" or below <= 0:
            return None
        disk = self.disks[node]
        if kind == "flip-index":
            return self._damaged(node, kind, self._flip_index(node, below))
        if kind in INDEX_DAMAGE:
            return self._damaged(node, kind, self._damage_index(node, kind))
        if kind in HIGHWATER_DAMAGE:
            return self._damaged(node, kind, self._damage_highwater(node, kind))
        held = sorted(
            int(name)
            for name, _ in disk.list_files(Path(f"/sim/{node}/data"))
            if name.isdigit() and int(name) < below
        )
        if kind == "lost-extent":
            # a segment's tail, all of it committed: one that ends below ``below`` (losing the tail
            # of the segment holding the checkpoint's last committed entry would lose entries past
            # it, which recovery takes for a torn tail of unsynced writes: beyond the fault model)
            held = [s for s in held if s + self.data_file_size <= below]
        if not held:
            return None  # compacted away
        start = disk.rng.choice(held)
        path = f"/sim/{node}/data/{start:020d}"
        below = min(below - start, self.data_file_size)
        done: dict[str, Any] | None = None
        if kind == "lost-extent":
            page = disk.lose_tail(path, below)
            done = None if page is None else {"file": path, "from_page": page}
        elif kind in ("flip-header", "flip-body"):
            records = _records(disk.read_at(Path(path), 0, below), below)
            if kind == "flip-body":
                records = [r for r in records if r[1] > codec.HEADER_SIZE]
            if records:
                off, size = disk.rng.choice(records)
                lo, hi = (
                    (off, off + codec.HEADER_SIZE)
                    if kind == "flip-header"
                    else (off + codec.HEADER_SIZE, off + size)
                )
                at = disk.flip_bit_in(path, lo, hi)
                done = None if at is None else {"file": path, "offset": at, "record_at": off}
        elif kind == "lost-write":
            # whole pages below it: a page that also holds entries past the checkpoint's committed
            # one would lose those, which recovery rightly takes for an unsynced tail
            page = disk.lose_page(path, below - below % PAGE)
            done = None if page is None else {"file": path, "page": page}
        else:
            pq = disk.misdirect_page(path, below - below % PAGE)
            done = None if pq is None else {"file": path, "page": pq[0], "landed_on": pq[1]}
        return self._damaged(node, kind, done)

    def _flip_index(self, node: str, below: int) -> dict[str, Any] | None:
        """Flip a bit of an index record of an entry whose data ends below ``below``."""
        disk = self.disks[node]
        ck = self._down_committed.get(node, -1)
        limit = (ck + 1) * codec.INDEX_UNIT_SIZE  # the committed entries' index records
        held = sorted(
            int(name)
            for name, _ in disk.list_files(Path(f"/sim/{node}/index"))
            if name.isdigit() and int(name) < limit
        )
        if not held or below <= 0:
            return None
        start = disk.rng.choice(held)
        path = f"/sim/{node}/index/{start:020d}"
        at = disk.flip_bit_in(path, 0, min(limit - start, FILE_INDEX_SIZE))
        return None if at is None else {"file": path, "offset": at}

    def _damage_index(self, node: str, kind: str) -> dict[str, Any] | None:
        """A page or extent fault, or the loss, of an index file holding committed entries' records
        (the index is rebuilt from the data: recovery must notice, never trust it)."""
        disk = self.disks[node]
        limit = (self._down_committed.get(node, -1) + 1) * codec.INDEX_UNIT_SIZE
        held = sorted(
            int(name)
            for name, _ in disk.list_files(Path(f"/sim/{node}/index"))
            if name.isdigit() and int(name) < limit
        )
        if not held:
            return None
        start = disk.rng.choice(held)
        path = f"/sim/{node}/index/{start:020d}"
        below = min(limit - start, FILE_INDEX_SIZE)
        if kind == "lost-index-file":
            return {"file": path} if disk.lose_file(path) else None
        if kind == "lost-index-extent":
            page = disk.lose_tail(path, below)
            return None if page is None else {"file": path, "from_page": page}
        if kind == "lost-index-write":
            page = disk.lose_page(path, below)
            return None if page is None else {"file": path, "page": page}
        pq = disk.misdirect_page(path, below)
        return None if pq is None else {"file": path, "page": pq[0], "landed_on": pq[1]}

    def _damage_highwater(self, node: str, kind: str) -> dict[str, Any] | None:
        """The high-water marker (``dledger.store.file``'s ``highwater``): a bit flipped, or an older
        data mark left by a lost write, at a record boundary of a random data file (recovery's
        bounded read must not take it for the end of the log)."""
        disk = self.disks[node]
        path = f"/sim/{node}/highwater"
        try:
            text = disk.read_at(Path(path), 0)
        except FileNotFoundError:
            return None
        if kind == "flip-highwater":
            at = disk.flip_bit_in(path, 0, len(text))
            return None if at is None else {"file": path, "offset": at}
        lines = text.split(b"\n")
        data = sorted(int(n) for n, _ in disk.list_files(Path(f"/sim/{node}/data")) if n.isdigit())
        if len(lines) < 2 or not lines[0].startswith(b"dataHigh=") or not data:
            return None
        start = disk.rng.choice(data)
        buf = disk.read_at(Path(f"/sim/{node}/data/{start:020d}"), 0)
        ends = [0, *(off + size for off, size in _records(buf, len(buf)))]
        mark = start + disk.rng.choice(ends)
        if not disk.stale_write(path, b"dataHigh=%020d\n" % mark + b"\n".join(lines[1:])):
            return None
        return {"file": path, "data_high": mark}

    def _damaged(self, node: str, kind: str, done: dict[str, Any] | None) -> dict[str, Any] | None:
        if done is not None:
            self.disk_faulted.add(node)
            self.stats["storage_faults"] += 1
            done["kind"] = kind
        return done

    def _verify_committed(self, node: str, store: FileLogStore, upto: int) -> None:
        """Read the committed prefix up to ``upto`` (the newest snapshot's index) before serving: a
        damaged entry there, which the recovery scan did not check (an older data file) and the
        server's replay does not read (it starts after the snapshot), is cut and repaired like one
        the replay finds (:func:`dledger.driver.replay`, which reads the rest)."""
        lo, hi = store.begin_index, min(store.committed_index, store.end_index, upto)
        try:
            for a in range(lo, hi + 1, 4096):
                store.get_range(a, min(hi, a + 4095))
        except CorruptionError as e:
            bad = store.find_damaged(lo, hi)
            if bad is None:
                raise
            if not self.repair:
                self._check_durability(node, str(e))
                raise
            store.cut_damaged(bad, store.committed_index)

    def _check_durability(self, node: str, why: str) -> None:
        """A damaged committed prefix at a restart: a durability violation unless a storage fault
        was injected into ``node``."""
        if node not in self.disk_faulted:
            raise SafetyViolation(
                f"{node}'s committed prefix is damaged without an injected disk fault: {why}"
            )

    # ------------------------------------------------------------ safety

    def _hard_saved(self, node: str, term: int, vote: str | None) -> None:
        self.hard[node] = (term, vote)
        if vote is not None and self.votes.setdefault((node, term), vote) != vote:
            raise SafetyViolation(f"{node} voted twice in term {term}: {self.votes[(node, term)]} and {vote}")

    def _check(self, node: str) -> None:
        self.steps += 1
        core = self.nodes.get(node)
        if core is None:
            return
        term = core.term
        if term > self.max_term_seen:
            self.max_term_seen = term
        leading = core.role == _LEADER
        if not leading and core.leader_id is not None and core.role == Role.FOLLOWER:
            elected = self.leaders.get(term)
            if elected != core.leader_id:
                raise SafetyViolation(
                    f"{node} follows {core.leader_id} in term {term}, but "
                    + (
                        f"{elected} was elected in that term"
                        if elected
                        else "no leader was elected in that term"
                    )
                )
        if node in self.repairing and core.repair_to < 0:
            del self.repairing[node]
            self.stats["repairs_done"] += 1
        if leading:
            lease = core.lease_start
            if lease > self._lease.get(node, lease):
                self.stats["lease_extensions"] += 1
            self._lease[node] = lease
            other = self.leaders.setdefault(term, node)
            if other != node:
                raise SafetyViolation(f"two leaders in term {term}: {other} and {node}")
            if not self._leading.get(node):
                if (node, term) in self._stints:
                    raise SafetyViolation(f"{node} became leader twice in term {term}")
                self._stints.add((node, term))
                self.stats["elections"] += 1
                if node in self.from_snapshot:
                    self.stats["snapshot_leaders"] += 1  # it serves reads from the loaded state
                self._check_elected(node, term)
                self._check_new_leader(node)
        self._leading[node] = leading
        commit = core.commit_index
        checked = self._checked[node]
        if commit <= checked:
            return  # state machine safety: only newly committed entries need a look
        st = self.stores[node]
        self._checked[node] = commit
        committed, commit_term = self.committed, self.commit_term
        for i in range(max(st.begin_index, checked + 1), commit + 1):
            try:
                e = st.get(i)
            except FlushError:  # see _check_matching: looked at again on the next check
                self._checked[node] = i - 1
                return
            mine = (e.term, e.body)
            seen = committed.setdefault(i, mine)
            commit_term.setdefault(i, term)
            if seen != mine:
                raise SafetyViolation(
                    f"{node} committed ({e.term}, {e.body!r}) at {i}, but ({seen[0]}, {seen[1]!r}) was committed there"
                )

    def _check_elected(self, node: str, term: int) -> None:
        """Election by majority (Raft 5.2: a candidate wins with the votes of a majority of the
        servers for the same term): a new leader of ``term`` holds the persisted votes of a
        majority of the members in that term (its own included)."""
        voters = [m for m in self.ids if self.votes.get((m, term)) == node]
        if 2 * len(voters) <= len(self.ids):
            raise SafetyViolation(
                f"{node} became leader in term {term} with the votes of {', '.join(voters) or 'nobody'} "
                f"in that term, not a majority of {len(self.ids)}"
            )

    def _check_new_leader(self, node: str) -> None:
        """Leader completeness (Raft 5.4): the new leader holds every entry committed in an earlier
        term that it has not compacted away (a leader of a stale term, elected late by delayed votes,
        need not); and its log matches every other log (5.3)."""
        st = self.stores[node]
        leader_term = self.nodes[node].term
        begin, end = st.begin_index, st.end_index
        commit_term = self.commit_term
        for i, seen in self.committed.items():
            if i < begin or commit_term[i] >= leader_term:
                continue
            if i <= end:
                try:
                    e = st.get(i)
                except FlushError:  # see _check_matching: not readable now, not proof of a loss
                    continue
                if (e.term, e.body) == seen:
                    continue
            raise SafetyViolation(f"{node} became leader in term {leader_term} without committed entry {i}")
        logs: dict[str, list[tuple[int, bytes]]] = {}
        for other in self.ids:
            if other != node and self._readable(other):
                self._check_matching(node, other, logs)

    def _readable(self, node: str) -> bool:
        """A crashed member's file store is closed; its memory store stays readable."""
        return self.disk == "memory" or node in self.nodes

    def _check_matching(self, a: str, b: str, logs: dict[str, list[tuple[int, bytes]]]) -> None:
        """Log matching: if two logs hold an entry with the same index and term, the logs are
        identical up to it. ``logs`` caches each member's ``(term, body)`` list from its begin index
        across the pairs of one check (each log is read once, not once per pair)."""
        sa, sb = self.stores[a], self.stores[b]
        lo, hi = max(sa.begin_index, sb.begin_index), min(sa.end_index, sb.end_index)
        same_from = None
        for i in range(hi, lo - 1, -1):
            if sa.term_at(i) == sb.term_at(i):
                same_from = i
                break
        if same_from is None:
            return
        for n, st in ((a, sa), (b, sb)):
            if n not in logs:
                try:
                    logs[n] = [(e.term, e.body) for e in st.get_range(st.begin_index, st.end_index)]
                except FlushError:
                    # a read first writes the records the member still buffers: on a full or failing
                    # disk that write fails here, in the check, not in the server (which meets it on
                    # its own next write); the logs are compared again at the next election and at
                    # the end (check_all)
                    return
        ea = logs[a][lo - sa.begin_index : same_from - sa.begin_index + 1]
        eb = logs[b][lo - sb.begin_index : same_from - sb.begin_index + 1]
        if ea != eb:
            i = lo + next(k for k, (x, y) in enumerate(zip(ea, eb, strict=True)) if x != y)
            raise SafetyViolation(
                f"log matching: {a} and {b} agree on the term at {same_from} but differ at {i}"
            )

    def check_all(self) -> None:
        """Re-check every member's whole committed prefix (entries must not change once committed)
        and log matching between every pair of members."""
        for i in self.nodes:
            self._checked[i] = -1
            self._check(i)
        live = [i for i in self.ids if self._readable(i)]
        logs: dict[str, list[tuple[int, bytes]]] = {}
        for k, a in enumerate(live):
            for b in live[k + 1 :]:
                self._check_matching(a, b, logs)

    def logs(self) -> dict[str, list[tuple[int, bytes]]]:
        """Each member's log as (term, body) pairs."""
        return {
            i: [(s.get(k).term, s.get(k).body) for k in range(s.begin_index, s.end_index + 1)]
            for i, s in self.stores.items()
            if self._readable(i)
        }


def _records(buf: bytes, below: int) -> list[tuple[int, int]]:
    """``(offset, size)`` of the records of a data file's bytes ``buf`` that end by ``below``."""
    out = []
    off = 0
    while off + codec.HEADER_SIZE <= len(buf):
        size = int.from_bytes(buf[off + 4 : off + 8], "big", signed=True)
        if size < codec.HEADER_SIZE or off + size > below:
            break
        out.append((off, size))
        off += size
    return out
