"""The runtime driver of a DLedger member: what is done with the core's :class:`~dledger.core.Ready`.

One module, used by the asyncio server (:mod:`dledger.server`) and the deterministic simulation
(:mod:`dledger.sim`), so what runs in production is what the simulator runs. For every ``Ready``, in
the order of the core's contract (dledger.core.node's module docstring; etcd-io/raft's
``Ready``/``Advance`` loop):

1. write the log (start it over for an installed snapshot, cut a conflicting suffix, append the
   accepted entries) and report it to the core (``Core.advance``), hand the appended records to the
   OS, persist ``(currTerm, votedFor)``;
2. ``--flush sync``: hold the push answers (a follower's acknowledgements) until a group fsync covers
   the entries, start that fsync through the host, report the durable end with ``Core.on_synced``
   when it completes, then send them; ``--flush async``: report everything synced at once (DLedger);
3. send the other messages;
4. install a received snapshot into the state machine;
5. apply committed entries in index order (DLedger's StateMachineCaller), answer the client
   requests waiting on them, confirmed reads once their read index is applied, and transfers;
6. every ``snapshot_every`` applied entries save a snapshot (:class:`~dledger.snapshot.SnapshotStore`,
   through the host's IO thread) and compact the log once it is durable; an INSTALL_SNAPSHOT is
   checked and saved before the core restarts the log for it.

A member starts here too (:func:`start_member`: the newest snapshot, the replay of the committed
entries after it, the core), so the server and the simulator recover the same way.

Client requests enter here too (:meth:`Driver.propose`, :meth:`Driver.kv_get` and
:meth:`Driver.kv_txn` in every read mode, :meth:`Driver.get` of a log entry, :meth:`Driver.metadata`), so the simulator serves reads through
the production read paths (DLedgerServer.handleAppend/handleGet, the KV state machine's reads).

The driver owns no clock, socket, thread or file: its :class:`Host` sends messages, runs the fsync
and the snapshot save (at once or later), and delivers answers to clients. Times are the host's
milliseconds. A :class:`~dledger.store.StoreError` under the core (a log write refused, a damaged
record read while handling a peer message) is mapped here, in :meth:`Driver._store_failed`: logged,
the core takes the store's log as its own, and the pushes it concerned are answered DISK_ERROR.
"""

from __future__ import annotations

import dataclasses
import logging
import random
import time
from collections.abc import Callable
from typing import Any, Protocol

from dledger.core import Core, CoreConfig, Ready, Role
from dledger.protocol import Code, Message, PushRequest, PushResponse, PushType
from dledger.snapshot import SnapshotStore
from dledger.statemachine import (
    StateMachine,
    TxnAborted,
    check_txn_request,
    encode_kv,
    encode_txn,
    is_read_only,
)
from dledger.store import CorruptionError, Entry, RuntimeLogStore, SnapshotLogStore, StoreError

log = logging.getLogger("dledger.driver")

# KV read modes: through the log (a "get" entry), read index (Raft thesis 6.4: a heartbeat round
# confirms leadership), leader lease (no round while the lease holds), or the member's local state
READ_MODES = ("raft-log", "read-index", "lease", "unsafe")


class HardStateStore(Protocol):
    """currTerm/votedFor storage: ``save`` must be durable when it returns."""

    def load(self) -> tuple[int, str | None]: ...

    def save(self, term: int, vote: str | None) -> None: ...


class Pending(Protocol):
    """A client request waiting on the driver: ``kind`` is "append", "kv:put", "kv:get", "kv:cas",
    "kv:delete", "kv:txn", "read" or "transfer"; ``term`` the term its entry was proposed in; ``key``
    the KV key of a read; ``deadline`` in the host's unit for :meth:`Driver.expire`. A confirmed read
    whose waiter has a ``txn`` attribute (not None: its micro-ops) answers that read-only transaction
    instead of ``key``."""

    kind: str
    term: int
    key: str | None
    deadline: float


class Host(Protocol):
    """What the driver needs from its runtime."""

    def send(self, msg: Message) -> None:
        """Send a peer message (best effort)."""
        ...

    def start_sync(self, done: Callable[[int], None]) -> None:
        """Make the store durable (``store.sync()``), then call ``done(durable end index)`` on the
        driver's thread; at once or later. A failing sync is the host's to handle (stop the member)."""
        ...

    def answer(self, waiter: Any, code: int, **fields: Any) -> None:
        """Deliver the answer to a client request."""
        ...

    def run_io(self, work: Callable[[], object], done: Callable[[], None]) -> None:
        """Run ``work`` (a snapshot save) off the driver's thread (the server's IO thread), then call
        ``done()`` on the driver's thread; at once or later. When ``work`` raises, log it and never
        call ``done``; a member stopped meanwhile never hears of it either."""
        ...

    def snapshot_installed(self, index: int, term: int, data: bytes) -> None:
        """The state machine was reset to a snapshot received from the leader (INSTALL_SNAPSHOT),
        covering entries up to ``index`` (term ``term``); it is durable already."""
        ...


def write_log(store: SnapshotLogStore, rd: Ready) -> None:
    """Carry out ``rd``'s log writes on ``store`` in the core's order: start the log over
    (``rd.log_restart``), cut it after ``rd.cut_after``, append ``rd.entries`` (with the store's
    ``append_batch`` when it has one: the same writes as ``append`` one by one). Raises the
    store's StoreError (the writes before it are done)."""
    if rd.log_restart is not None:
        store.reset(*rd.log_restart)
    if rd.cut_after is not None:
        store.truncate_suffix(rd.cut_after)
    if not rd.entries:
        return
    batch = getattr(store, "append_batch", None)  # FileLogStore: one lock, one loop
    if batch is not None:
        batch(rd.entries)
        return
    append = store.append
    for e in rd.entries:
        append(e)


def replay(node: str, store: RuntimeLogStore, sm: StateMachine, applied: int, committed: int) -> int:
    """Rebuild the state machine from the committed log before serving (a restart): entries
    (applied, committed] in batches (one pread per data file); returns the new applied index.
    Damage found here is inside the committed prefix: a store with repair cuts the log before the
    damaged entry, to fetch it again from the leader (``FileLogStore.cut_damaged``); otherwise
    CorruptionError is raised, so the member does not start."""
    t0 = time.monotonic()
    first = applied + 1
    try:
        while applied < committed:
            hi = min(committed, applied + 4096)
            try:
                entries = store.get_range(applied + 1, hi)
            except CorruptionError:
                bad = getattr(store, "find_damaged", lambda lo, hi: None)(applied + 1, hi)
                if bad is None or not getattr(store, "repair", False):
                    raise
                store.cut_damaged(bad, committed)  # type: ignore[attr-defined]
                if bad > applied + 1:
                    sm.on_apply(store.get_range(applied + 1, bad - 1))
                applied = bad - 1
                break
            sm.on_apply(entries)
            applied = hi
    except CorruptionError as e:
        raise CorruptionError(
            f"{e}; the entry is inside the committed prefix (checkpoint committedIndex={committed}): "
            "refusing to serve a damaged log, repair or restore the store"
        ) from e
    if committed >= first:
        log.info("%s: replayed entries [%d, %d] in %.3fs", node, first, committed, time.monotonic() - t0)
    return applied


def recover(
    node: str, store: RuntimeLogStore, sm: StateMachine, snapshots: SnapshotStore | None, committed: int
) -> tuple[int, int, tuple[int, int, bytes] | None]:
    """A member's state machine at start (DLedger master's SnapshotManager.loadSnapshot, then
    StateMachineCaller's replay): load the newest snapshot, then replay only the committed entries
    after it. ``committed`` is the checkpointed commitIndex. Returns ``(applied index, commitIndex,
    snapshot or None)``. Raises StoreError when the log begins after what the snapshot covers (the
    entries between are lost), CorruptionError from :func:`replay`."""
    snap = snapshots.load_newest() if snapshots is not None else None
    applied = -1
    if snap is not None:
        sm.on_snapshot_load(snap[2])
        applied = snap[0]
        if _log_agrees(store, snap[0], snap[1]):
            # the snapshot's entries are committed, and so is the log up to it (the checkpoint may
            # lag); a snapshot saved for an INSTALL_SNAPSHOT whose log restart a crash interrupted
            # is past the log's end or disagrees with it there: those entries are not committed
            committed = max(committed, snap[0])
        log.info("%s: loaded snapshot at %d (term %d)", node, snap[0], snap[1])
    if store.begin_index > applied + 1:
        raise StoreError(
            f"log starts at {store.begin_index} but no snapshot covers the entries before it "
            f"(newest snapshot: {snap[0] if snap is not None else 'none'})"
        )
    applied = replay(node, store, sm, applied, min(committed, store.end_index))
    return applied, committed, snap


def _log_agrees(store: RuntimeLogStore, index: int, term: int) -> bool:
    """Whether ``store``'s log holds the entry a snapshot ends with (``index``, ``term``), or
    starts right after it."""
    if index == store.begin_index - 1:
        return True
    if not store.begin_index <= index <= store.end_index:
        return False
    return store.term_at(index) == term


def start_member(
    cfg: CoreConfig,
    store: RuntimeLogStore,
    hard: HardStateStore,
    sm: StateMachine,
    host: Host,
    *,
    snapshots: SnapshotStore | None,
    committed: int,
    rng: random.Random,
    now: int,
    flush: str = "sync",
    snapshot_every: int = 0,
) -> Driver:
    """Start one member over its recovered store (DLedgerServer's startup; the server and the
    simulation both start members here): :func:`recover` the state machine (newest snapshot, then
    the committed entries after it), build the :class:`~dledger.core.Core` from the persisted
    currTerm/votedFor and the recovered commitIndex (a store that cut a damaged committed prefix
    passes its ``repair_to``), give it the snapshot for INSTALL_SNAPSHOT, and return its driver.
    Raises what :func:`recover` raises."""
    applied, committed, snap = recover(cfg.self_id, store, sm, snapshots, committed)
    term, vote = hard.load()
    core = Core(
        cfg,
        store,
        term=term,
        vote_for=vote,
        rng=rng,
        now=now,
        commit_index=committed,
        repair_to=getattr(store, "repair_to", -1),
    )
    if snap is not None:
        core.set_snapshot(*snap)
    return Driver(
        core,
        store,
        hard,
        sm,
        host,
        flush=flush,
        last_applied=applied,
        snapshot_every=snapshot_every,
        snapshots=snapshots,
    )


class Driver:
    """Carries out one member's ``Ready`` output.

    ``flush`` is "sync" or "async"; ``last_applied`` the index the state machine holds (from a
    snapshot or a replay); ``snapshot_every`` 0 disables local snapshots; ``snapshots`` is where
    they are saved (None: kept in memory only, as a server without a store directory does). The
    request tables
    (``waiters`` by log index, ``reads`` by read id, ``transfers`` by transfer id) are filled by the
    host and answered here.
    """

    def __init__(
        self,
        core: Core,
        store: RuntimeLogStore,
        hard: HardStateStore,
        sm: StateMachine,
        host: Host,
        *,
        flush: str = "sync",
        last_applied: int = -1,
        snapshot_every: int = 0,
        snapshots: SnapshotStore | None = None,
    ) -> None:
        self.core = core
        self.store = store
        self.hard = hard
        self.sm = sm
        self.host = host
        self.flush = flush
        self.last_applied = last_applied
        self.snap_index = last_applied
        self.snapshot_every = snapshot_every
        self.snapshots = snapshots
        self.waiters: dict[int, Any] = {}
        self.reads: dict[int, Any] = {}
        self.ready_reads: list[tuple[int, Any]] = []  # (read index, waiter)
        self.transfers: dict[int, Any] = {}
        self.stopped = False
        self._sync_running = False
        self._sync_wanted = False
        self._held: list[Message] = []  # push answers for the next fsync
        self._held_running: list[Message] = []  # and for the one in flight
        self._role = core.role
        self._next_read_id = 0

    # ------------------------------------------------------------ the Ready loop

    def drain(self, now: int) -> None:
        """Collect and carry out the core's output until it has none (at most 8 rounds; the host
        calls again on its next event)."""
        core = self.core
        for _ in range(8):
            rd = core.ready(now)
            self._write_log(rd)
            if rd.hard_state is not None:
                self.hard.save(*rd.hard_state)
            if self.flush == "sync":
                if rd.need_sync:
                    self._sync_wanted = True
                if self._sync_wanted or self._sync_running:
                    # the answer to a repeated push (its entries already in the log) waits too: for
                    # the fsync due, or else for the one in flight (it covers what came before it)
                    held = self._held if self._sync_wanted else self._held_running
                    for m in rd.messages:
                        (held.append if isinstance(m, PushResponse) else self.host.send)(m)
                    self._kick_sync(now)
                else:
                    for m in rd.messages:
                        self.host.send(m)
            else:
                core.on_synced(self.store.end_index, now)  # DLedger: acks never wait for disk
                for m in rd.messages:
                    self.host.send(m)
            if rd.reads or rd.read_failures or rd.snapshot_install is not None or rd.transfers:
                self._take_outcomes(rd)
            if self.last_applied < self.applicable() or self.ready_reads:
                self.apply()  # (nothing to apply means no snapshot is due either)
            if core.role != self._role:
                if self._role == Role.LEADER:
                    # reads waiting for a confirmation from this leader cannot be confirmed any more
                    for w in self.reads.values():
                        self.host.answer(w, Code.NOT_LEADER)
                    self.reads.clear()
                self._role = core.role
            if not core.has_ready() and self.applicable() <= self.last_applied:
                break

    def step(self, msg: Message, now: int) -> None:
        """Hand a peer message to the core (``Core.step``). A damaged record read meanwhile
        (StoreError) is logged and a push answered DISK_ERROR, as DLedger's EntryHandler does. An
        INSTALL_SNAPSHOT whose snapshot cannot be checked or saved first is dropped (the leader
        resends)."""
        if (
            type(msg) is PushRequest
            and msg.type == PushType.INSTALL_SNAPSHOT
            and not self._snapshot_first(msg)
        ):
            return
        try:
            self.core.step(msg, now)
        except StoreError as e:
            if isinstance(msg, PushRequest):
                self._store_failed(e, f"push {msg.type} at {msg.index}")
                self.core.refuse_push(msg, Code.DISK_ERROR)
            else:
                self._store_failed(e, f"{msg.KIND} from {msg.src}")

    def _snapshot_first(self, msg: PushRequest) -> bool:
        """Before the core restarts the log for an INSTALL_SNAPSHOT, check the snapshot (a state
        machine's ``check_snapshot``, when it has one) and make it durable, so a crash in between
        never leaves a log that begins after the newest snapshot (DLedger master's
        InstallSnapshot handling saves the snapshot before resetting the log). False when it cannot
        be checked or saved."""
        check = getattr(self.sm, "check_snapshot", None)
        if check is not None:
            try:
                check(msg.snapshot)
            except ValueError as e:
                log.warning("%s: dropping INSTALL_SNAPSHOT from %s: %s", self.core.id, msg.src, e)
                return False
        if self.snapshots is None or msg.index <= max(self.snap_index, self.core.commit_index):
            return True  # nothing to keep (or the core answers it from the log it holds)
        try:
            self.snapshots.save(msg.index, msg.prev_term, msg.snapshot)
        except OSError as e:
            log.error("%s: cannot save the installed snapshot at %d: %s", self.core.id, msg.index, e)
            return False
        return True

    def _write_log(self, rd: Ready) -> None:
        """:func:`write_log` of ``rd``'s log writes, the store's buffered records handed to the OS
        (before anyone hears of them: a message of ``rd`` may name them), then ``Core.advance``. A
        refused write or hand-over goes to :meth:`_store_failed`."""
        writes = bool(rd.entries) or rd.cut_after is not None or rd.log_restart is not None
        try:
            if writes:
                write_log(self.store, rd)
            self.store.flush_writes()
        except StoreError as e:
            self._store_failed(e, "log write", rd, writes=writes)
            return
        if writes:
            self.core.advance()

    def _store_failed(
        self, e: StoreError, what: str, rd: Ready | None = None, *, writes: bool = True
    ) -> None:
        """The one place a StoreError under the core is mapped. It is logged; for the log writes
        of ``rd``: the core takes the store's log as its own (``Core.on_write_failed``; not when
        ``writes`` is False: ``rd`` wrote nothing, only handing earlier records to the OS failed),
        the Ready's push answers become DISK_ERROR (they may acknowledge entries the store does
        not hold, or holds unwritten), a snapshot whose log restart failed is not loaded, and
        proposals the store lost are answered DISK_ERROR."""
        log.error("%s: %s failed: %s", self.core.id, what, e)
        if rd is None:
            return
        store = self.store
        if writes:
            self.core.on_write_failed()
        begin, end = store.begin_index, store.end_index
        rd.messages = [
            dataclasses.replace(m, code=Code.DISK_ERROR, begin_index=begin, end_index=end)
            if isinstance(m, PushResponse)
            else m
            for m in rd.messages
        ]
        if rd.snapshot_install is not None and begin != rd.snapshot_install[0] + 1:
            rd.snapshot_install = None
        for index in [i for i in self.waiters if i > end]:
            self.host.answer(self.waiters.pop(index), Code.DISK_ERROR, error=f"{what} failed: {e}")

    def _take_outcomes(self, rd: Ready) -> None:
        """Confirmed and failed reads, a snapshot received from the leader, transfer results."""
        for read_id, idx in rd.reads:
            w = self.reads.pop(read_id, None)
            if w is not None:
                self.ready_reads.append((idx, w))
        for read_id, code in rd.read_failures:
            w = self.reads.pop(read_id, None)
            if w is not None:
                self.host.answer(w, code)
        if rd.snapshot_install is not None:
            s_index, s_term, data = rd.snapshot_install
            self.sm.on_snapshot_load(data)
            self.last_applied = s_index
            self.snap_index = s_index
            self.host.snapshot_installed(s_index, s_term, data)
        for tid, code in rd.transfers:
            w = self.transfers.pop(tid, None)
            if w is not None:
                self.host.answer(w, code)

    # ------------------------------------------------------------ client requests

    def propose(self, body: bytes, waiter: Any, now: int) -> int:
        """Append ``body`` as a client entry (DLedgerServer.handleAppend); ``waiter`` (a
        :class:`Pending`, its ``term`` set here) is answered through the host once the entry is
        applied (DISK_ERROR when the store refuses to write it). Returns SUCCESS when accepted, else
        the refusal (NOT_LEADER, LEADER_PENDING_FULL, LEADER_TRANSFERRING) and nothing was appended."""
        if len(self.waiters) >= self.core.cfg.max_pending:
            return Code.LEADER_PENDING_FULL
        code, entry = self.core.propose(body, now)
        if code != Code.SUCCESS or entry is None:
            return code
        waiter.term = entry.term
        self.waiters[entry.index] = waiter
        return Code.SUCCESS

    def kv_get(self, key: str, mode: str, waiter: Any, now: int) -> int:
        """A KV read of ``key`` in read ``mode`` (one of :data:`READ_MODES`); ``waiter`` is answered
        with ``value`` through the host: at once for "unsafe" (this member's state, leader or not),
        once the "get" entry is applied for "raft-log", once the read index is confirmed and applied
        for "read-index" and "lease". Returns SUCCESS when accepted (or answered), else the refusal
        code (NOT_LEADER, LEADER_NOT_READY, ...). Raises ValueError for an unknown mode."""
        if mode == "unsafe":
            self.host.answer(waiter, Code.SUCCESS, value=self.sm.get(key))  # type: ignore[attr-defined]
            return Code.SUCCESS
        if mode == "raft-log":
            return self.propose(encode_kv("get", key), waiter, now)
        if mode not in READ_MODES:
            raise ValueError(f"read mode {mode!r}: expected one of {READ_MODES}")
        self._next_read_id += 1
        code = self.core.read_index(self._next_read_id, now, lease=mode == "lease")
        if code == Code.SUCCESS:
            self.reads[self._next_read_id] = waiter
        return code

    def kv_txn(self, mops: Any, mode: str, waiter: Any, now: int) -> int:
        """A transaction (:mod:`dledger.statemachine`'s micro-ops; ValueError for bad ones or an
        unknown mode). One with a write is proposed as one ``txn`` entry and answered once applied
        (``value``: the completed micro-ops; UNEXPECTED_ARGUMENT when it aborted). A read-only one
        goes through read ``mode`` exactly as :meth:`kv_get`: answered from this member's state at
        once ("unsafe"), as a ``txn`` entry ("raft-log"), or once its read index is confirmed and
        applied ("read-index", "lease"; the waiter's ``txn`` holds the micro-ops). Returns SUCCESS
        when accepted (or answered), else the refusal code."""
        mops = check_txn_request(mops)
        if mode not in READ_MODES:
            raise ValueError(f"read mode {mode!r}: expected one of {READ_MODES}")
        if not is_read_only(mops) or mode == "raft-log":
            return self.propose(encode_txn(mops), waiter, now)
        if mode == "unsafe":  # this member's state, leader or not
            self._answer_read_txn(waiter, self.sm.read_txn(mops))  # type: ignore[attr-defined]
            return Code.SUCCESS
        waiter.txn = mops
        self._next_read_id += 1
        code = self.core.read_index(self._next_read_id, now, lease=mode == "lease")
        if code == Code.SUCCESS:
            self.reads[self._next_read_id] = waiter
        return code

    def _answer_read_txn(self, waiter: Any, res: Any, **fields: Any) -> None:
        """Answer a read-only transaction read off this member's state: its completed micro-ops, or
        UNEXPECTED_ARGUMENT as for an aborted applied one (it would read too many values)."""
        if isinstance(res, TxnAborted):
            self.host.answer(waiter, Code.UNEXPECTED_ARGUMENT, error=f"txn aborted: {res.reason}")
        else:
            self.host.answer(waiter, Code.SUCCESS, value=res, **fields)

    def get(self, index: int) -> tuple[int, Entry | None]:
        """DLedger's GET of log entry ``index`` from this member (committed entries only):
        ``(SUCCESS, entry)``, or ``(INDEX_LESS_THAN_LOCAL_BEGIN | INDEX_OUT_OF_RANGE, None)``.
        Raises the store's errors (a damaged record). Read through the core's log: a committed
        entry accepted since the last drain is not written yet."""
        if index < self.core.begin_index:
            return Code.INDEX_LESS_THAN_LOCAL_BEGIN, None
        if index > self.core.commit_index:
            return Code.INDEX_OUT_OF_RANGE, None
        return Code.SUCCESS, self.core.entry(index)

    def metadata(self) -> dict[str, Any]:
        """This member's view, as DLedger's METADATA answers it: role, commitIndex,
        ledgerBeginIndex, ledgerEndIndex, ledgerEndTerm, appliedIndex; and repairTo (not DLedger's:
        -1, or the index a damaged committed prefix must reach again, see ``Core.repair_to``)."""
        return {
            "role": self.core.role,
            "commitIndex": self.core.commit_index,
            "ledgerBeginIndex": self.core.begin_index,
            "ledgerEndIndex": self.core.end_index,
            "ledgerEndTerm": self.core.end_term,
            "appliedIndex": self.last_applied,
            # repair path: >= 0 while a damaged committed prefix waits to be fetched up to it again
            "repairTo": self.core.repair_to,
        }

    # ------------------------------------------------------------ group commit

    def _kick_sync(self, now: int) -> None:
        """One fsync covering everything appended so far; the push answers held for it go out when
        it completes (a follower acknowledges only durable entries)."""
        if self._sync_running or not self._sync_wanted or self.stopped:
            return
        self._sync_running, self._sync_wanted = True, False
        held, self._held = self._held, []
        self._held_running = held
        self.host.start_sync(lambda index: self._sync_done(index, held))

    def _sync_done(self, index: int, held: list[Message]) -> None:
        self._sync_running = False
        if self.stopped:
            return
        now = self.core.now
        self.core.on_synced(index, now)
        for m in held:
            self.host.send(m)
        self._kick_sync(now)

    # ------------------------------------------------------------ state machine

    def applicable(self) -> int:
        """The last index :meth:`apply` may reach: the commitIndex; with ``--flush sync`` no
        further than this member's own fsync reached (``Core.durable_index``), so no client hears
        of an entry before the member answering it holds it durably, even when the followers'
        acknowledgements committed it before the leader's own fsync ended (Raft allows that
        commit, thesis 10.2.1; the answer waits)."""
        core = self.core
        if self.flush == "sync" and core.durable_index < core.commit_index:
            return core.durable_index
        return core.commit_index

    def apply(self) -> None:
        """StateMachineCaller: apply (lastApplied, :meth:`applicable`] in order, then answer
        waiters."""
        commit = self.applicable()
        while self.last_applied < commit:
            hi = min(commit, self.last_applied + 1000)
            entries = self.store.get_range(self.last_applied + 1, hi)
            results = self.sm.on_apply(entries)
            self.last_applied = hi
            if self.waiters:
                for e, res in zip(entries, results, strict=True):
                    w = self.waiters.pop(e.index, None)
                    if w is None:
                        continue
                    if e.term != w.term:
                        self.host.answer(
                            w, Code.TERM_CHANGED, error=f"entry {e.index} was replaced by term {e.term}"
                        )
                    elif w.kind == "append":
                        self.host.answer(w, Code.SUCCESS, index=e.index, pos=e.pos)
                    elif w.kind == "kv:cas":
                        self.host.answer(w, Code.SUCCESS, index=e.index, applied=bool(res))
                    elif w.kind == "kv:get":
                        self.host.answer(w, Code.SUCCESS, index=e.index, value=res)
                    elif isinstance(res, TxnAborted):
                        self.host.answer(w, Code.UNEXPECTED_ARGUMENT, error=f"txn aborted: {res.reason}")
                    elif w.kind == "kv:txn":  # the completed micro-ops, reads as of this entry
                        self.host.answer(w, Code.SUCCESS, index=e.index, value=res)
                    else:
                        self.host.answer(w, Code.SUCCESS, index=e.index, result=res)
        if self.ready_reads:
            keep = []
            for idx, w in self.ready_reads:
                if idx <= self.last_applied:
                    txn = getattr(w, "txn", None)
                    if txn is None:
                        self.host.answer(w, Code.SUCCESS, value=self.sm.get(w.key or ""), index=idx)  # type: ignore[attr-defined]
                    else:
                        self._answer_read_txn(w, self.sm.read_txn(txn), index=idx)  # type: ignore[attr-defined]
                else:
                    keep.append((idx, w))
            self.ready_reads = keep
        self._maybe_snapshot()

    def _maybe_snapshot(self) -> None:
        """Every ``snapshot_every`` applied entries: save the state machine and, once the snapshot
        is durable, drop the log prefix before it (DLedger master's snapshotThreshold)."""
        if not self.snapshot_every or self.last_applied - self.snap_index < self.snapshot_every:
            return
        index = self.last_applied
        term = self.store.term_at(index)
        data = self.sm.on_snapshot_save()
        self.snap_index = index
        self.core.set_snapshot(index, term, data)

        snapshots = self.snapshots

        def durable() -> None:
            if self.stopped:
                return
            store = self.store
            if not store.begin_index <= index <= store.end_index:
                # the log moved on while the snapshot was saved (an INSTALL_SNAPSHOT restarted it
                # after this index): nothing of it is left to drop (SnapshotManager compacts only
                # what the snapshot covers)
                log.info(
                    "%s: snapshot at %d saved; the log already begins at %d",
                    self.core.id,
                    index,
                    store.begin_index,
                )
                return
            begin = store.compact_prefix(index)
            log.info(
                "%s: snapshot at %d (term %d, %d bytes); log begins at %d",
                self.core.id,
                index,
                term,
                len(data),
                begin,
            )

        if snapshots is None:
            durable()
        else:
            self.host.run_io(lambda: snapshots.save(index, term, data), durable)

    # ------------------------------------------------------------ deadlines

    def expire(self, now: float) -> None:
        """Answer every request whose ``deadline`` (host units) passed: WAIT_QUORUM_ACK_TIMEOUT, or
        TAKE_LEADERSHIP_FAILED for a transfer."""
        for table in (self.waiters, self.reads, self.transfers):
            if not table:
                continue
            dead = [k for k, w in table.items() if w.deadline <= now]
            for k in dead:
                w = table.pop(k)
                code = Code.WAIT_QUORUM_ACK_TIMEOUT if w.kind != "transfer" else Code.TAKE_LEADERSHIP_FAILED
                self.host.answer(w, code, error="timed out waiting for the quorum")
        if self.ready_reads:
            live = [(i, w) for i, w in self.ready_reads if w.deadline > now]
            for _, w in self.ready_reads:
                if w.deadline <= now:
                    self.host.answer(w, Code.WAIT_QUORUM_ACK_TIMEOUT, error="timed out waiting for apply")
            self.ready_reads = live
