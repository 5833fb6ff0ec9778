"""The sans-IO consensus core of one DLedger member.

Messages, client proposals and clock ticks go in (:meth:`Core.step`, :meth:`Core.propose`,
:meth:`Core.tick`, with ``now`` in milliseconds of the caller's clock); messages to send, the
term/vote to persist, the log writes, a sync request, read confirmations and the commitIndex come
out of :meth:`Core.ready`. The core only reads its injected :class:`~dledger.store.LogStore`: as
etcd-io/raft's ``unstable`` log, the entries it accepted (proposed, or pushed by the leader) stay in
memory until the runtime wrote them, and its log is the store's entries plus that tail. It never
writes or syncs the store, opens a socket, starts a thread or reads a clock.

Sources: DLedgerLeaderElector (election, heartbeats, lease step-down), DLedgerEntryPusher
(EntryDispatcher COMPARE/TRUNCATE/APPEND, EntryHandler, QuorumAckChecker), MemberState, and the Raft
paper (section 5.4.2: only entries of the current term are committed by counting replicas, so a new
leader appends a no-op entry; section 6.4: read index).

The runtime contract of :class:`Ready` (etcd-io/raft's Ready/Advance; :mod:`dledger.driver`
carries it out): write the log (``log_restart``, then ``cut_after``, then append ``entries``) and
report it with :meth:`Core.advance` (or :meth:`Core.on_write_failed` when the store refused) before
the core is stepped, ticked or proposed to again; persist ``hard_state`` before sending anything;
when ``need_sync`` is set and the flush policy is sync, sync the store before sending the push
answers (the follower's acknowledgements); then report the durable end with :meth:`Core.on_synced`
(the leader counts its own entries for the quorum only from there). A leader pushes an entry only
once it is written (the store places it: its ``pos``), so its followers' data files match its own.
"""

from __future__ import annotations

import logging
import random
from collections import deque
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from dledger.core import guards
from dledger.core.config import CoreConfig
from dledger.protocol import (
    Code,
    HeartbeatRequest,
    HeartbeatResponse,
    Message,
    ParseResult,
    PushRequest,
    PushResponse,
    PushType,
    TakeLeadershipRequest,
    TakeLeadershipResponse,
    VoteRequest,
    VoteResponse,
    VoteResult,
)
from dledger.store import MAGIC_NOOP, MAGIC_NORMAL, Entry, LogStore, SnapshotLogStore

log = logging.getLogger("dledger.core")


class Role:
    """MemberState.Role."""

    CANDIDATE = "CANDIDATE"
    FOLLOWER = "FOLLOWER"
    LEADER = "LEADER"


# The names as module constants: the hot paths compare roles and push types on every message, and
# a module global loads faster than a class attribute
_LEADER, _FOLLOWER, _CANDIDATE = Role.LEADER, Role.FOLLOWER, Role.CANDIDATE
_APPEND, _COMMIT, _COMPARE = PushType.APPEND, PushType.COMMIT, PushType.COMPARE
_TRUNCATE, _INSTALL_SNAPSHOT = PushType.TRUNCATE, PushType.INSTALL_SNAPSHOT
# likewise the codes answered on every message (an enum member loaded through its class costs as
# much as a whole comparison)
_SUCCESS, _INCONSISTENT_STATE, _NOT_LEADER = Code.SUCCESS, Code.INCONSISTENT_STATE, Code.NOT_LEADER
_INCONSISTENT_LEADER, _EXPIRED_TERM, _TERM_NOT_READY = (
    Code.INCONSISTENT_LEADER,
    Code.EXPIRED_TERM,
    Code.TERM_NOT_READY,
)


class LogRestart(NamedTuple):
    """A log that starts over after INSTALL_SNAPSHOT (the arguments of ``SnapshotLogStore.reset``):
    the next entry is ``begin_index`` at data position ``next_pos``; the entry before it had term
    ``last_term`` and chained CRC ``chain_crc`` (-1 when unknown)."""

    begin_index: int
    next_pos: int
    last_term: int
    chain_crc: int


@dataclass(slots=True)
class Ready:
    """What the runtime must do after the core was stepped (see the module docstring for order).

    The log writes, in this order: ``log_restart`` (None, or the store forgets every entry and
    continues as described), ``cut_after`` (None, or the store drops every entry with a greater
    index), then ``entries`` appended in index order (a follower's carry the leader's ``pos``).
    ``hard_state`` is ``(currTerm, votedFor)`` or None when unchanged; ``reads`` are
    ``(read_id, read_index)`` pairs that may be answered once the state machine applied
    ``read_index``; ``read_failures`` and ``transfers`` are ``(id, Code)`` pairs;
    ``snapshot_install`` is ``(lastIncludedIndex, lastIncludedTerm, data)`` received from the leader:
    load it into the state machine (applied index = lastIncludedIndex) before applying further.
    """

    messages: list[Message] = field(default_factory=list)
    hard_state: tuple[int, str | None] | None = None
    need_sync: bool = False
    commit_index: int = -1
    reads: list[tuple[int, int]] = field(default_factory=list)
    read_failures: list[tuple[int, int]] = field(default_factory=list)
    transfers: list[tuple[int, int]] = field(default_factory=list)
    snapshot_install: tuple[int, int, bytes] | None = None
    entries: list[Entry] = field(default_factory=list)
    cut_after: int | None = None
    log_restart: LogRestart | None = None


class _Progress:
    """EntryDispatcher state for one follower, on the leader."""

    __slots__ = (
        "peer",
        "state",
        "epoch",
        "compare_index",
        "cut_index",
        "next_index",
        "match",
        "inflight",
        "waiting_since",
        "sent_commit",
        "last_send",
        "probing",
        "known_diff",
    )

    def __init__(self, peer: str, end_index: int, now: int) -> None:
        self.peer = peer
        self.state = _COMPARE
        self.epoch = 0
        self.compare_index = end_index
        self.cut_index = -1  # where the TRUNCATE push goes (the index of DLedger's doTruncate)
        self.next_index = end_index + 1
        self.match = -1
        self.inflight: deque[tuple[int, int]] = deque()  # (last index, send time) of APPEND batches
        self.waiting_since = -1  # send time of the outstanding COMPARE/TRUNCATE, -1 when none
        self.sent_commit = -1
        self.last_send = now
        self.probing = False  # after a timeout: one push in flight until the follower answers
        # an index where a COMPARE found the follower holding a different entry (-1 when none);
        # a TRUNCATE at i is sent only when i + 1 is known to differ, never on a guess
        self.known_diff = -1

    def restart(self, state: str) -> None:
        self.state = state
        self.epoch += 1
        self.inflight.clear()
        self.waiting_since = -1
        self.known_diff = -1


class Core:
    """One member's consensus state machine (MemberState + elector + pusher), without IO.

    ``store`` holds the log (read only: the runtime writes what :meth:`ready` hands out);
    ``term``/``vote_for`` are the persisted currTerm/votedFor; ``rng`` draws vote intervals (seed it
    for deterministic tests); ``now`` is the start time in ms; ``commit_index`` the checkpointed
    commitIndex. ``end_index``/``end_term`` are ledgerEndIndex/ledgerEndTerm of this member's log,
    entries not yet written included. ``repair_to`` (-1: none) is set when the store cut a damaged
    committed prefix (``FileLogStore.repair_to``): until the log holds entries up to it again,
    fetched from a leader, the member grants no vote (it answers UNKNOWN, an abstention) and never
    campaigns, so a log that lost committed entries never helps elect a leader without them
    (Protocol-Aware Recovery, FAST 2018); it follows and acknowledges what it really holds.
    """

    def __init__(
        self,
        cfg: CoreConfig,
        store: LogStore,
        *,
        term: int = 0,
        vote_for: str | None = None,
        rng: random.Random | None = None,
        now: int = 0,
        commit_index: int = -1,
        repair_to: int = -1,
    ) -> None:
        self.cfg = cfg
        self.repair_to = repair_to if repair_to > store.end_index else -1
        # how far the entries a repair appends are known committed (the store's checkpointed
        # commitIndex when it found the damage; the entries after it up to repair_to are durable
        # ones this member may have acknowledged, not known to be committed)
        self._repair_commit = min(self.repair_to, getattr(store, "repair_committed", self.repair_to))
        self.store = store
        # INSTALL_SNAPSHOT needs a store that can start over (SnapshotLogStore); None otherwise
        self._snap_store: SnapshotLogStore | None = store if isinstance(store, SnapshotLogStore) else None
        self.rng = rng or random.Random()
        self.id = cfg.self_id
        self.others = [p for p in cfg.peers if p != cfg.self_id]
        self._peer_set = frozenset(cfg.peers)
        self.role = _CANDIDATE
        self.leader_id: str | None = None
        self.term = term
        self.vote_for = vote_for
        self.known_max_term = term
        self.need_increase_term = False
        # a member leads a term at most once: one that voted before a restart may have led this term
        # already (a revote wins on others' votes even after voting for another member, and its
        # voters would grant it again), so its next campaign is at a new term (chaos sim seed 352)
        self.last_parse_result = (
            ParseResult.WAIT_TO_VOTE_NEXT if vote_for is not None else ParseResult.WAIT_TO_REVOTE
        )
        self.next_vote_time = now + self._vote_interval()
        self.commit_index = min(commit_index, store.end_index)
        self.durable_index = store.end_index
        # the log: the store's entries below _unstable_at, then _unstable (accepted, not yet
        # written; etcd-io/raft's unstable log). Pending writes for the next Ready: _restart (the
        # log starts over), _cut (the store drops the entries after it), _unstable (to append).
        self.end_index = store.end_index
        self.end_term = store.end_term
        self._unstable: list[Entry] = []
        self._unstable_at = store.end_index + 1
        self._cut: int | None = None
        self._restart: LogRestart | None = None
        self._commit_before_writes = self.commit_index  # restored when the pending writes fail
        self._replicate_due = False  # a leader's entries were written: push them
        self.verified_index = -1  # highest index known to match the current leader's log (follower)
        # (term, epoch) of the newest push from the current leader: pushes of an older dispatcher
        # epoch are stale (sent before the leader restarted its COMPARE) and are dropped
        self.push_fence: tuple[int, int] = (-1, -1)
        self.last_leader_seen = now
        # candidate's vote round
        self._vote_round = 0
        self._vote_term = -1
        self._vote_deadline = -1
        self._votes: dict[str, VoteResponse] | None = None
        # leader's heartbeat rounds
        self._hb_round = 0
        self._hb_start = 0
        self._hb_last_send = -(10**12)
        self._hb_resp: dict[str, HeartbeatResponse] = {}
        self._hb_open = False
        self._hb_resend = False
        self.last_succ_heartbeat = now
        self.lease_start = -(10**12)  # start time of the newest heartbeat round a quorum acked
        self.live_peers: set[str] = set()
        self._progress: dict[str, _Progress] = {}
        self._reads: list[tuple[int, int, int]] = []  # (read_id, read_index, round needed)
        # leadership transfer
        self.transferee: str | None = None
        self.term_to_take_leadership = -1
        self._take_from: tuple[str, int, int, int] | None = None  # (old leader, term, index, deadline)
        self._transfer_id: int | None = None
        self._last_preferred_check = now
        self._transfer_started = -1
        # outputs
        self._out: list[Message] = []
        self._hard_dirty = False
        self._need_sync = False
        self._read_ready: list[tuple[int, int]] = []
        self._read_failed: list[tuple[int, int]] = []
        self._transfers: list[tuple[int, int]] = []
        self.now = now
        self.snapshot: tuple[int, int, bytes] | None = None
        self._installed: tuple[int, int, bytes] | None = None

    def set_snapshot(self, index: int, term: int, data: bytes) -> None:
        """The newest state machine snapshot (covering entries up to ``index``, whose term is
        ``term``); the leader sends it with INSTALL_SNAPSHOT to followers that need compacted entries."""
        if self.snapshot is None or index > self.snapshot[0]:
            self.snapshot = (index, term, data)

    # ------------------------------------------------------------ helpers

    def _quorum(self, n: int) -> bool:
        return n >= len(self.cfg.peers) // 2 + 1

    def _vote_interval(self) -> int:
        return self.rng.randrange(self.cfg.min_vote_interval_ms, self.cfg.max_vote_interval_ms)

    def _send(self, msg: Message) -> None:
        self._out.append(msg)

    def _set_vote(self, vote_for: str | None) -> None:
        self.vote_for = vote_for
        self._hard_dirty = True

    def has_ready(self) -> bool:
        """Whether :meth:`ready` has something for the runtime (a leader replicates there too)."""
        return bool(
            self._out
            or self._hard_dirty
            or self._need_sync
            or self._read_ready
            or self._read_failed
            or self._transfers
            or self._installed is not None
            or self._unstable
            or self._cut is not None
            or self._restart is not None
            or self._replicate_due
        )

    # ------------------------------------------------------------ the log (store + unstable tail)

    @property
    def begin_index(self) -> int:
        """ledgerBeginIndex of this member's log (a pending restart's when there is one)."""
        restart = self._restart
        return restart.begin_index if restart is not None else self.store.begin_index

    def term_at(self, index: int) -> int:
        """Term of the entry at ``index`` of this member's log; IndexError outside the held range
        (the store's answer below ``begin_index``)."""
        k = index - self._unstable_at
        if k >= 0:
            return self._unstable[k].term
        restart = self._restart
        if restart is None:
            return self.store.term_at(index)
        if index == restart.begin_index - 1:
            return restart.last_term
        raise IndexError(f"index {index} outside [{restart.begin_index}, {self.end_index}]")

    def entry(self, index: int) -> Entry:
        """The entry at ``index`` of this member's log; IndexError outside ``[begin_index,
        end_index]``. An entry not written yet has the leader's ``pos`` (-1 for our own proposals)."""
        k = index - self._unstable_at
        if k >= 0:
            return self._unstable[k]
        if self._restart is not None:
            raise IndexError(f"index {index} below the restarted log at {self._restart.begin_index}")
        return self.store.get(index)

    def _entry(self, index: int) -> Entry | None:
        if self.begin_index <= index <= self.end_index:
            return self.entry(index)
        return None

    def _accept(self, entry: Entry) -> None:
        """Append ``entry`` (index ``end_index + 1``) to the log; the runtime writes it later."""
        if not (self._unstable or self._cut is not None or self._restart is not None):
            self._commit_before_writes = self.commit_index
        self._unstable.append(entry)
        self.end_index = entry.index
        self.end_term = entry.term

    def _cut_log(self, index: int) -> None:
        """Drop every entry after ``index`` from the log (the store's copies in the next Ready)."""
        if index >= self.end_index:
            return
        if not (self._unstable or self._cut is not None or self._restart is not None):
            self._commit_before_writes = self.commit_index
        k = index + 1 - self._unstable_at
        if k >= 0:
            del self._unstable[k:]
        else:
            self._unstable.clear()
            self._unstable_at = index + 1
            self._cut = index if self._cut is None else min(self._cut, index)
        self.end_index = index
        try:
            self.end_term = self.term_at(index)
        except IndexError:
            self.end_term = -1  # the whole log went; the caller appends the leader's entry next
        self.durable_index = min(self.durable_index, index)

    def _restart_log(self, restart: LogRestart) -> None:
        """Forget the log; it continues at ``restart.begin_index`` (INSTALL_SNAPSHOT)."""
        if not (self._unstable or self._cut is not None or self._restart is not None):
            self._commit_before_writes = self.commit_index
        self._restart = restart
        self._cut = None
        self._unstable = []
        self._unstable_at = restart.begin_index
        self.end_index = restart.begin_index - 1
        self.end_term = restart.last_term
        self.durable_index = min(self.durable_index, self.end_index)

    def advance(self) -> None:
        """The log writes of the last :meth:`ready` are in the store (etcd-io/raft's Advance).
        Raises RuntimeError when the store does not end where this member's log does (the writes
        were not all done, or the core was stepped in between)."""
        stored_end = self.store.end_index
        if stored_end != self.end_index:
            raise RuntimeError(f"{self.id}: the store ends at {stored_end}, the log at {self.end_index}")
        if self._unstable and self.role == _LEADER:
            self._replicate_due = True
        self._unstable = []
        self._unstable_at = self.end_index + 1
        self._cut = None
        self._restart = None
        if self.repair_to >= 0:
            self._repaired()  # the written log reached the repair mark: vote again

    def on_write_failed(self) -> None:
        """The store refused the log writes of the last :meth:`ready` part-way (StoreError): take
        the store's log as this member's, and undo what the lost writes allowed. The commitIndex
        goes back to its value before them (a cut that did not happen leaves a divergent suffix
        that must not count as committed) and nothing counts as verified against the leader until
        its next push."""
        st = self.store
        self._unstable = []
        self._unstable_at = st.end_index + 1
        self._cut = None
        self._restart = None
        self.end_index = st.end_index
        self.end_term = st.end_term
        if self.role != _LEADER:
            self.commit_index = min(self.commit_index, self._commit_before_writes)
        self.commit_index = min(self.commit_index, st.end_index)
        self.verified_index = -1
        self.durable_index = min(self.durable_index, st.end_index)

    # ------------------------------------------------------------ role changes (MemberState)

    def change_to_candidate(self, term: int) -> None:
        """MemberState.changeToCandidate: role CANDIDATE, forget the leader, remember a bigger term."""
        if self.role != _CANDIDATE or self.leader_id is not None:
            log.info(
                "%s: %s -> CANDIDATE at term %d (known max term %d)",
                self.id,
                self.role,
                self.term,
                max(self.known_max_term, term),
            )
        was_leader = self.role == _LEADER
        self.known_max_term = max(self.known_max_term, term)
        self.role = _CANDIDATE
        self.leader_id = None
        self.transferee = None
        self._votes = None
        if was_leader:
            # never lead twice in one term: the next campaign is at a new term (Raft 5.2 gives each
            # term at most one leader; a second stint in the same term restarts the dispatcher epochs
            # its followers have already seen)
            self.last_parse_result = ParseResult.WAIT_TO_VOTE_NEXT
            self._progress.clear()
            for read_id, _, _ in self._reads:
                self._read_failed.append((read_id, _NOT_LEADER))
            self._reads.clear()
            self.lease_start = -(10**12)

    def hear_term(self, term: int) -> None:
        """A peer spoke at a term above ``term`` that the runtime will not act on in one step
        (``protocol.MAX_TERM_STEP``): react as to a message of term ``term`` (Raft: a bigger term
        makes a member a candidate that adopts it), so members whose terms drifted apart come
        within a step of each other again after a few messages."""
        if term > self.known_max_term:
            self.change_to_candidate(term)
            self.need_increase_term = True

    def next_term(self) -> int:
        """MemberState.nextTerm: the only place the term grows; persists (term, voteFor=None)."""
        self.term = self.known_max_term if self.known_max_term > self.term else self.term + 1
        self.known_max_term = max(self.known_max_term, self.term)
        self._set_vote(None)
        return self.term

    def _become_follower(self, leader: str, now: int) -> None:
        if self.role == _FOLLOWER and self.leader_id == leader:
            # the usual case: another message from our leader
            self.last_leader_seen = now
            self._votes = None
            if self.term_to_take_leadership != -1:
                self._finish_take(Code.TAKE_LEADERSHIP_FAILED)
            return
        if self.role != _FOLLOWER or self.leader_id != leader:
            log.info("%s: %s -> FOLLOWER of %s at term %d", self.id, self.role, leader, self.term)
            self.verified_index = -1
            self.push_fence = (-1, -1)
        if self.role == _LEADER:
            self.change_to_candidate(self.term)
        self.role = _FOLLOWER
        self.leader_id = leader
        self.last_leader_seen = now
        self._votes = None
        # DLedgerLeaderElector.changeRoleToFollower: a lost election's WAIT_TO_VOTE_NEXT must not
        # survive into the next timeout, whose first round sounds the peers out at this term
        self.last_parse_result = ParseResult.WAIT_TO_REVOTE
        if self.term_to_take_leadership != -1:
            self._finish_take(Code.TAKE_LEADERSHIP_FAILED)

    def _become_leader(self, now: int) -> None:
        log.info(
            "%s: CANDIDATE -> LEADER at term %d (ledgerEndIndex %d, ledgerEndTerm %d)",
            self.id,
            self.term,
            self.end_index,
            self.end_term,
        )
        self.role = _LEADER
        self.leader_id = self.id
        self._votes = None
        self.transferee = None
        self.last_succ_heartbeat = now
        self.lease_start = -(10**12)
        # Raft 5.4.2: commit the previous terms' entries through an entry of this term
        self._append_local(b"", MAGIC_NOOP)
        self._progress = {p: _Progress(p, self.end_index, now) for p in self.others}
        self._hb_last_send = -(10**12)  # heartbeat at once
        self._hb_open = False
        if self.term_to_take_leadership != -1:
            self._finish_take(_SUCCESS)

    # ------------------------------------------------------------ inputs

    def tick(self, now: int) -> None:
        """Advance the clock to ``now`` (ms) and run the maintainer for the current role."""
        self.now = now
        if self.role == _LEADER:
            self._maintain_leader(now)
        elif self.role == _FOLLOWER:
            if now - self.last_leader_seen > self.cfg.lease_ms:
                log.info(
                    "%s: no heartbeat from leader %s for %d ms",
                    self.id,
                    self.leader_id,
                    now - self.last_leader_seen,
                )
                self.change_to_candidate(self.term)
                self.next_vote_time = now  # first round at the old term only sounds out the peers
        else:
            self._maintain_candidate(now)
        if self._take_from is not None and self.role != _LEADER:
            self._maintain_take(now)

    def step(self, msg: Message, now: int) -> None:
        """Handle one message from a peer (a request or the answer to one we sent)."""
        self.now = now
        if msg.dst != self.id or msg.group != self.cfg.group:
            log.warning("%s: dropping %s for %s/%s", self.id, msg.KIND, msg.group, msg.dst)
            return
        if msg.src not in self._peer_set or msg.src == self.id:
            log.warning("%s: dropping %s from unknown member %r", self.id, msg.KIND, msg.src)
            return
        # most messages are pushes and their answers: test those first
        if isinstance(msg, PushRequest):
            resp = self._handle_push(msg, now)
            if resp is not None:
                self._out.append(resp)
        elif isinstance(msg, PushResponse):
            self._on_push_response(msg, now)
        elif isinstance(msg, HeartbeatRequest):
            code = self._check_leader(msg, now)
            self._send(
                HeartbeatResponse(self.cfg.group, self.id, msg.src, self.term, code=code, round=msg.round)
            )
        elif isinstance(msg, HeartbeatResponse):
            self._on_heartbeat_response(msg, now)
        elif isinstance(msg, VoteRequest):
            res, term = self.handle_vote(msg)
            self._send(VoteResponse(self.cfg.group, self.id, msg.src, term, result=res, round=msg.round))
        elif isinstance(msg, VoteResponse):
            self._on_vote_response(msg, now)
        elif isinstance(msg, TakeLeadershipRequest):
            self._handle_take(msg, now)
        elif isinstance(msg, TakeLeadershipResponse):
            self._on_take_response(msg)

    def propose(self, body: bytes, now: int) -> tuple[int, Entry | None]:
        """appendAsLeader: append ``body`` at ledgerEndIndex+1 in the current term.

        Returns ``(SUCCESS, entry)`` (its ``pos`` is -1: the store places it when the runtime
        writes it), or ``(NOT_LEADER | LEADER_TRANSFERRING, None)``. The entry is committed once
        ``commit_index >= entry.index`` with the same term there.
        """
        self.now = now
        if self.role != _LEADER:
            return _NOT_LEADER, None
        if self.transferee is not None:
            return Code.LEADER_TRANSFERRING, None
        return _SUCCESS, self._append_local(body, MAGIC_NORMAL)

    def read_index(self, read_id: int, now: int, *, lease: bool = False) -> int:
        """Start a linearizable read (Raft section 6.4); the answer arrives in ``Ready.reads``.

        ``lease=True`` skips the heartbeat round while the leader lease holds (safe only while
        clocks advance at the same rate). Returns _SUCCESS when accepted, NOT_LEADER or
        LEADER_NOT_READY (no entry of the current term committed yet) otherwise.
        """
        self.now = now
        if self.role != _LEADER:
            return _NOT_LEADER
        # (a commitIndex below ledgerBeginIndex: elected right after INSTALL_SNAPSHOT, its no-op,
        # which comes after the snapshot, not committed yet; the store no longer holds that entry)
        if self.commit_index < max(0, self.begin_index) or self.term_at(self.commit_index) != self.term:
            return Code.LEADER_NOT_READY
        # followers wait lease_ms after their last heartbeat before electing; keep a heartbeat of margin
        if lease and now < self.lease_start + self.cfg.lease_ms - self.cfg.heartbeat_ms:
            self._read_ready.append((read_id, self.commit_index))
            return _SUCCESS
        if len(self.cfg.peers) == 1:
            self._read_ready.append((read_id, self.commit_index))
            return _SUCCESS
        self._reads.append((read_id, self.commit_index, self._hb_round + 1))
        if self._hb_open:
            self._hb_resend = True  # the next round starts when the open one ends
        else:
            self._start_heartbeat_round(now)
        return _SUCCESS

    def on_synced(self, index: int, now: int) -> None:
        """The store is durable up to ``index``: the leader may count its own copy for the quorum."""
        self.now = now
        self.durable_index = min(index, self.end_index)
        if self.role == _LEADER:
            self._advance_commit()

    def ready(self, now: int) -> Ready:
        """Collect the outputs accumulated since the last call (replicating first if leader). The
        log writes stay pending (and in every Ready) until :meth:`advance` or
        :meth:`on_write_failed`."""
        self.now = now
        if self.role == _LEADER:
            self._replicate(now)
            self._advance_commit()
        rd = Ready(
            self._out,
            (self.term, self.vote_for) if self._hard_dirty else None,
            self._need_sync,
            self.commit_index,
            self._read_ready,
            self._read_failed,
            self._transfers,
            self._installed,
        )
        if self._unstable or self._cut is not None or self._restart is not None:
            rd.entries, rd.cut_after, rd.log_restart = self._unstable, self._cut, self._restart
        self._installed = None
        self._replicate_due = False
        self._out, self._hard_dirty, self._need_sync = [], False, False
        self._read_ready, self._read_failed, self._transfers = [], [], []
        return rd

    # ------------------------------------------------------------ election (DLedgerLeaderElector)

    def handle_vote(self, req: VoteRequest) -> tuple[str, int]:
        """handleVote: the vote result and the term to answer with (first matching rule wins)."""
        local = req.src == self.id
        if req.src not in self.cfg.peers:
            return VoteResult.REJECT_UNKNOWN_LEADER, self.term
        if not local and req.src == self.id:
            return VoteResult.REJECT_UNEXPECTED_LEADER, self.term
        end_index, end_term = self.end_index, self.end_term
        # log checks before term checks: a stale node's big term is never adopted
        if req.ledger_end_term < end_term:
            return VoteResult.REJECT_EXPIRED_LEDGER_TERM, self.term
        if req.ledger_end_term == end_term and req.ledger_end_index < end_index:
            return VoteResult.REJECT_SMALL_LEDGER_END_INDEX, self.term
        if req.term < self.term:
            return VoteResult.REJECT_EXPIRED_VOTE_TERM, self.term
        if req.term == self.term:
            if self.vote_for is not None and self.vote_for != req.src:
                if self.leader_id is not None:
                    return VoteResult.REJECT_ALREADY_HAS_LEADER, self.term
                return VoteResult.REJECT_ALREADY_VOTED, self.term
        else:
            self.change_to_candidate(req.term)
            self.need_increase_term = True
            return VoteResult.REJECT_TERM_NOT_READY, self.term
        if req.term < end_term:
            return VoteResult.REJECT_TERM_SMALL_THAN_LEDGER, end_term
        if (
            not local
            and self.term_to_take_leadership != -1
            and req.ledger_end_term == end_term
            and end_index >= req.ledger_end_index
        ):
            return VoteResult.REJECT_TAKING_LEADERSHIP, self.term
        if self.repair_to >= 0 and not self._repaired():
            return VoteResult.UNKNOWN, self.term  # a damaged committed prefix never votes
        if self.vote_for != req.src:
            self._set_vote(req.src)
        return VoteResult.ACCEPT, self.term

    def _repaired(self) -> bool:
        """Whether a repair (``repair_to``) is done: the log reaches it again (then it is cleared)."""
        if self.end_index < self.repair_to:
            return False
        log.warning("%s: repair done: the log holds entries up to %d again", self.id, self.repair_to)
        self.repair_to = -1
        return True

    def repair_append(self, entries: list[Entry]) -> int:
        """Repair without a leader (issue 36 item 2): append committed entries fetched from a peer
        (or kept intact from this member's own damaged log) while the log ends below
        ``repair_to``. Only the entries from ``end_index + 1`` on, consecutive, up to
        ``repair_to`` and in non-decreasing terms are taken; those up to the store's checkpointed
        commitIndex (``repair_committed``) are committed already (every member's committed prefix
        is the same), so the commitIndex follows them; the durable ones after it, which this
        member held before the damage, are appended as they were (a leader may still cut them).
        Returns how many were taken; the runtime writes them with the next Ready."""
        if self.repair_to < 0 or self.role == _LEADER or self._restart is not None:
            return 0
        taken = 0
        for e in entries:
            if e.index != self.end_index + 1 or e.index > self.repair_to or e.term < self.end_term:
                break
            self._accept(e)
            taken += 1
        if taken:
            self._need_sync = True
            self.commit_index = max(self.commit_index, min(self.end_index, self._repair_commit))
        return taken

    def _maintain_candidate(self, now: int) -> None:
        if self._votes is not None:
            if now >= self._vote_deadline:
                self._decide_vote(now)
            return
        if now < self.next_vote_time and not self.need_increase_term:
            return
        if self.last_parse_result == ParseResult.WAIT_TO_VOTE_NEXT or self.need_increase_term:
            prev = self.term
            self.next_term()
            self.last_parse_result = ParseResult.WAIT_TO_REVOTE
            log.info("%s: term %d -> %d", self.id, prev, self.term)
        if self.need_increase_term:
            self.need_increase_term = False
            # another member raised our term: a candidate (a transferee, or the first to time out)
            # whose immediate revote must win before we compete, or slow links split every such
            # election; or a leader, whose next heartbeat makes us its follower anyway
            self.next_vote_time = now + self._vote_interval() + self.cfg.vote_timeout_ms
            return
        if self.repair_to >= 0 and not self._repaired():
            self.next_vote_time = now + self._vote_interval()  # wait for a leader to repair the log
            return
        self._vote_round += 1
        self._vote_term = self.term
        self._vote_deadline = now + self.cfg.vote_timeout_ms
        req = VoteRequest(
            self.cfg.group,
            self.id,
            self.id,
            self.term,
            ledger_end_index=self.end_index,
            ledger_end_term=self.end_term,
            round=self._vote_round,
        )
        res, t = self.handle_vote(req)
        self._votes = {
            self.id: VoteResponse(self.cfg.group, self.id, self.id, t, result=res, round=self._vote_round)
        }
        for p in self.others:
            self._send(
                VoteRequest(
                    self.cfg.group,
                    self.id,
                    p,
                    self.term,
                    ledger_end_index=self.end_index,
                    ledger_end_term=self.end_term,
                    round=self._vote_round,
                )
            )
        self._maybe_decide_early(now)

    def _on_vote_response(self, resp: VoteResponse, now: int) -> None:
        if self._votes is None or resp.round != self._vote_round or self.role != _CANDIDATE:
            return
        if resp.result == VoteResult.ACCEPT and resp.term != self._vote_term:
            return  # a grant in another term: round numbers start again at a restart, terms do not
        self._votes[resp.src] = resp
        self._maybe_decide_early(now)

    def _maybe_decide_early(self, now: int) -> None:
        assert self._votes is not None
        results = [r.result for r in self._votes.values()]
        accepted = results.count(VoteResult.ACCEPT)
        not_ready = results.count(VoteResult.REJECT_TERM_NOT_READY)
        if (
            VoteResult.REJECT_ALREADY_HAS_LEADER in results
            or self._quorum(accepted)
            or self._quorum(accepted + not_ready)
            or len(self._votes) == len(self.cfg.peers)
        ):
            self._decide_vote(now)

    def _decide_vote(self, now: int) -> None:
        """The parse of DLedgerLeaderElector.maintainAsCandidate after the votes came in."""
        votes = self._votes or {}
        self._votes = None
        term = self._vote_term
        if self.term != term or self.role != _CANDIDATE:
            return
        valid = accepted = not_ready = bigger_ledger = 0
        has_leader = False
        known_max = -1
        for r in votes.values():
            if r.result != VoteResult.UNKNOWN:
                valid += 1
            if r.result == VoteResult.ACCEPT:
                accepted += 1
            elif r.result == VoteResult.REJECT_TERM_NOT_READY:
                not_ready += 1
            elif r.result in (
                VoteResult.REJECT_EXPIRED_LEDGER_TERM,
                VoteResult.REJECT_SMALL_LEDGER_END_INDEX,
            ):
                bigger_ledger += 1
            elif r.result == VoteResult.REJECT_ALREADY_HAS_LEADER:
                has_leader = True
            elif r.result in (VoteResult.REJECT_EXPIRED_VOTE_TERM, VoteResult.REJECT_TERM_SMALL_THAN_LEDGER):
                known_max = max(known_max, r.term)
        interval = self._vote_interval()
        if known_max > term:
            result = ParseResult.WAIT_TO_VOTE_NEXT
            self.next_vote_time = now + interval
            self.change_to_candidate(known_max)
        elif has_leader:
            result = ParseResult.WAIT_TO_REVOTE
            self.next_vote_time = now + interval + self.cfg.lease_ms
        elif not self._quorum(valid):
            result = ParseResult.WAIT_TO_REVOTE
            self.next_vote_time = now + interval
        elif not self._quorum(valid - bigger_ledger):
            result = ParseResult.WAIT_TO_REVOTE
            self.next_vote_time = now + interval + self.cfg.heartbeat_ms * 5
        elif self._quorum(accepted):
            result = ParseResult.PASSED
        elif self._quorum(accepted + not_ready):
            result = ParseResult.REVOTE_IMMEDIATELY
        else:
            result = ParseResult.WAIT_TO_VOTE_NEXT
            self.next_vote_time = now + interval
        log.log(
            logging.INFO if result == ParseResult.PASSED else logging.DEBUG,
            "%s: vote term %d: %s (valid %d, accepted %d, not ready %d, bigger ledger %d, has leader %s)",
            self.id,
            term,
            result,
            valid,
            accepted,
            not_ready,
            bigger_ledger,
            has_leader,
        )
        self.last_parse_result = result
        if result == ParseResult.PASSED:
            self._become_leader(now)

    # ------------------------------------------------------------ heartbeats

    def _check_leader(self, msg: Message, now: int) -> int:
        """handleHeartBeat's checks, shared by pushes: the code to answer a message from a leader."""
        if msg.term < self.term:
            return _EXPIRED_TERM
        if msg.term > self.term:
            self.change_to_candidate(msg.term)
            self.need_increase_term = True
            return _TERM_NOT_READY
        if self.role == _LEADER:
            return _INCONSISTENT_LEADER
        if self.leader_id is None or self.leader_id == msg.src:
            self._become_follower(msg.src, now)
            return _SUCCESS
        return _INCONSISTENT_LEADER

    def _maintain_leader(self, now: int) -> None:
        if self._hb_open and now - self._hb_start >= self.cfg.heartbeat_ms:
            self._end_heartbeat_round(now)
            if self.role != _LEADER:
                return
        if not self._hb_open and (self._hb_resend or now - self._hb_last_send >= self.cfg.heartbeat_ms):
            self._start_heartbeat_round(now)
        if self.role == _LEADER:
            self._maybe_preferred_transfer(now)

    def _start_heartbeat_round(self, now: int) -> None:
        self._hb_resend = False
        self._hb_round += 1
        self._hb_start = now
        self._hb_last_send = now
        self._hb_open = True
        self._hb_resp = {}
        for p in self.others:
            self._send(HeartbeatRequest(self.cfg.group, self.id, p, self.term, round=self._hb_round))
        if not self.others:
            self._end_heartbeat_round(now)

    def _on_heartbeat_response(self, resp: HeartbeatResponse, now: int) -> None:
        if self.role != _LEADER or not self._hb_open or resp.round != self._hb_round:
            return
        if resp.code == _SUCCESS and resp.term != self.term:
            return  # a leader of another term acknowledged (rounds start again at a restart)
        self._hb_resp[resp.src] = resp
        if resp.code == _SUCCESS:
            if resp.src not in self.live_peers:
                self._peer_back(resp.src, now)
            self.live_peers.add(resp.src)
        if len(self._hb_resp) == len(self.others):
            self._end_heartbeat_round(now)

    def _peer_back(self, peer: str, now: int) -> None:
        """A follower answers heartbeats again (restarted, or back from a partition): what was in
        flight to it is probably lost, so resend now instead of after the push timeout, and tell it
        the commitIndex at once (a restarted follower only knows its last checkpoint)."""
        p = self._progress.get(peer)
        if p is None:
            return
        p.sent_commit = -1
        p.last_send = min(p.last_send, now - self.cfg.heartbeat_ms * 5)
        if p.state == _APPEND and p.inflight:
            p.restart(_APPEND)
            p.next_index = p.match + 1
            p.probing = True
        elif p.state in (_COMPARE, _TRUNCATE):
            p.waiting_since = -1

    def _end_heartbeat_round(self, now: int) -> None:
        self._hb_open = False
        resps = self._hb_resp.values()
        succ = 1 + sum(1 for r in resps if r.code == _SUCCESS)
        not_ready = sum(1 for r in resps if r.code == _TERM_NOT_READY)
        max_term = max((r.term for r in resps if r.code == _EXPIRED_TERM), default=-1)
        inconsistent = any(r.code == _INCONSISTENT_LEADER for r in resps)
        self.live_peers = {r.src for r in resps if r.code == _SUCCESS}
        if max_term > self.term:
            # DLedger master (#247): a bigger term deposes the leader even with a quorum
            log.info("%s: heartbeat found term %d > %d, stepping down", self.id, max_term, self.term)
            self.change_to_candidate(max_term)
            self.next_vote_time = now + self._vote_interval()
            return
        if self._quorum(succ):
            self.last_succ_heartbeat = now
            self.lease_start = max(self.lease_start, self._hb_start)
            done = [r for r in self._reads if r[2] <= self._hb_round]
            if done:
                self._reads = [r for r in self._reads if r[2] > self._hb_round]
                self._read_ready.extend((rid, idx) for rid, idx, _ in done)
            if self._reads and self._hb_resend:
                self._start_heartbeat_round(now)  # reads registered during this round
            return
        if self._quorum(succ + not_ready):
            self._hb_resend = True
        elif inconsistent:
            log.info("%s: heartbeat found another leader at term %d, stepping down", self.id, self.term)
            self.change_to_candidate(self.term)
            self.next_vote_time = now + self._vote_interval()
        elif now - self.last_succ_heartbeat > self.cfg.lease_ms:
            log.info(
                "%s: leader lease expired (no quorum of heartbeats for %d ms), stepping down at term %d",
                self.id,
                now - self.last_succ_heartbeat,
                self.term,
            )
            self.change_to_candidate(self.term)
            self.next_vote_time = now + self._vote_interval()

    # ------------------------------------------------------------ replication, leader side

    def _append_local(self, body: bytes, magic: int) -> Entry:
        entry = Entry(self.end_index + 1, self.term, body, magic)  # the store sets pos
        self._accept(entry)
        self._need_sync = True
        return entry

    def _push(
        self, p: _Progress, typ: str, index: int, entries: list[Entry], now: int, prev_term: int = -1
    ) -> None:
        p.last_send = now
        if typ == _COMPARE or typ == _TRUNCATE:
            p.waiting_since = now
        if self.commit_index > p.sent_commit:
            p.sent_commit = self.commit_index
        self._out.append(self._push_request(p, typ, index, prev_term, entries=entries))

    def _push_request(self, p: _Progress, typ: str, index: int, prev_term: int, **fields: Any) -> PushRequest:
        """A PushRequest from this leader to ``p.peer`` at the current term, commitIndex and the
        peer's dispatcher epoch; ``fields`` are the type-specific ones (entries, snapshot, ...)."""
        return PushRequest(
            self.cfg.group,
            self.id,
            p.peer,
            self.term,
            type=typ,
            index=index,
            prev_term=prev_term,
            commit_index=self.commit_index,
            epoch=p.epoch,
            **fields,
        )

    def _replicate(self, now: int) -> None:
        """EntryDispatcher.doWork for every follower: APPEND batches (or a COMMIT), COMPARE,
        TRUNCATE or INSTALL_SNAPSHOT as its state asks. A follower that needs an entry this log no
        longer holds (below ledgerBeginIndex after a compaction) gets the snapshot instead (Raft
        section 7; DLedger master's EntryDispatcher turns to INSTALL_SNAPSHOT there)."""
        if self._restart is not None:
            return  # the log starts over in this Ready (a follower's INSTALL_SNAPSHOT): nothing to push
        # push only written entries: the store placed them (their pos is what followers store)
        end = self._unstable_at - 1
        begin = self.store.begin_index
        for p in self._progress.values():
            if p.state == _APPEND:
                inflight = p.inflight
                if inflight and now - inflight[0][1] > self.cfg.push_timeout_ms:
                    # the oldest push went unanswered: resend from the follower's watermark
                    p.restart(_APPEND)
                    p.next_index = p.match + 1
                    p.probing = True
                if p.next_index >= begin:
                    self._replicate_append(p, end, now)
                    continue
                # the entries it needs next were compacted away since they were sent (or since a
                # COMPARE found where it stands)
                self._below_begin(p)
            if p.state == _COMPARE:
                if p.waiting_since >= 0 and now - p.waiting_since < self.cfg.push_timeout_ms:
                    continue
                if end < begin:
                    continue  # empty leader stays in COMPARE
                if p.compare_index > end:
                    p.compare_index = end
                if p.compare_index < begin:
                    self._below_begin(p)
                    continue
                self._push(p, _COMPARE, p.compare_index, [self.entry(p.compare_index)], now)
            if p.state == _INSTALL_SNAPSHOT:
                if p.waiting_since >= 0 and now - p.waiting_since < self.cfg.push_timeout_ms * 10:
                    continue
                if self.snapshot is None:
                    p.restart(_COMPARE)
                    continue
                s_index, s_term, data = self.snapshot
                nxt = s_index + 1
                if begin <= nxt <= end:
                    next_pos = self.entry(nxt).pos
                elif nxt == end + 1 and end >= begin:
                    last = self.entry(end)
                    next_pos = last.pos + last.size
                else:
                    p.restart(_COMPARE)  # the snapshot does not meet the log; wait for a newer one
                    continue
                p.last_send = now
                p.waiting_since = now
                snap_store = self._snap_store
                chain = snap_store.chain_at(s_index) if snap_store is not None and s_index >= begin else -1
                self._send(
                    self._push_request(
                        p,
                        _INSTALL_SNAPSHOT,
                        s_index,
                        s_term,
                        snapshot=data,
                        next_pos=next_pos,
                        chain_crc=chain,
                    )
                )
                continue
            if p.state == _TRUNCATE:
                if p.waiting_since >= 0 and now - p.waiting_since < self.cfg.push_timeout_ms:
                    continue
                if p.cut_index < begin:
                    self._below_begin(p)  # compacted since the COMPARE found it
                    continue
                self._push(p, _TRUNCATE, p.cut_index, [self.entry(p.cut_index)], now)
                continue

    def _replicate_append(self, p: _Progress, end: int, now: int) -> None:
        """APPEND state (``p.next_index`` >= ledgerBeginIndex): push batches of the written entries
        up to ``end`` (at most ``max_inflight_pushes`` unanswered, one while probing), else a
        COMMIT when the follower holds everything and the commitIndex moved or the link was idle."""
        cfg = self.cfg
        inflight = p.inflight
        if p.next_index <= end:
            entry = self.store.get
            limit = 1 if p.probing else cfg.max_inflight_pushes
            max_entries, max_bytes = cfg.max_push_batch_entries, cfg.max_push_batch_bytes
            while len(inflight) < limit and p.next_index <= end:
                first = p.next_index
                batch: list[Entry] = []
                size = 0
                i = first
                while i <= end and len(batch) < max_entries:
                    e = entry(i)
                    if batch and size + e.size > max_bytes:
                        break
                    batch.append(e)
                    size += e.size
                    i += 1
                self._push(p, _APPEND, first, batch, now, self._term_before(first))
                inflight.append((i - 1, now))
                p.next_index = i
        if (
            not inflight
            and p.next_index > end
            and (
                (p.sent_commit < self.commit_index and now - p.last_send >= cfg.commit_delay_ms)
                or now - p.last_send >= cfg.heartbeat_ms * 5
            )
        ):
            # fire-and-forget (DLedger); it names our watermark and its term so the follower
            # can verify its prefix, and answers only when it does not hold that entry any more
            self._push(p, _COMMIT, p.match, [], now, self._term_before(p.match + 1))

    def _on_push_response(self, resp: PushResponse, now: int) -> None:
        if self.role != _LEADER:
            return
        if resp.term > self.term:
            log.info(
                "%s: push answer from %s has term %d > %d, stepping down",
                self.id,
                resp.src,
                resp.term,
                self.term,
            )
            self.change_to_candidate(resp.term)
            self.next_vote_time = now + self._vote_interval()
            return
        p = self._progress.get(resp.src)
        if p is None or resp.epoch != p.epoch or resp.term != self.term:
            return
        if resp.type == _APPEND and resp.code == _SUCCESS and p.state == _APPEND:
            # the steady state: a follower acknowledges appended entries
            p.probing = False
            if resp.index > p.match:
                p.match = resp.index
            inflight = p.inflight
            while inflight and inflight[0][0] <= resp.index:
                inflight.popleft()
            self._advance_commit()
            return
        begin, end = self.begin_index, self.end_index
        if resp.type == _COMMIT:
            if p.state == _APPEND:
                # the follower lost entries it had acknowledged (wiped or unsynced disk): re-COMPARE
                log.info(
                    "%s: follower %s now ends at %d below its watermark %d",
                    self.id,
                    resp.src,
                    resp.end_index,
                    p.match,
                )
                p.restart(_COMPARE)
                p.compare_index = min(end, resp.end_index)
            return
        if resp.code not in (_SUCCESS, _INCONSISTENT_STATE):
            # not (yet) our follower, or a disk error: start over after a pause
            p.restart(_COMPARE)
            p.compare_index = end
            p.waiting_since = now
            return
        if resp.type == _COMPARE and p.state == _COMPARE:
            cmp = p.compare_index
            if resp.index != cmp:
                return  # answers an earlier COMPARE (resent after _peer_back); the descent moved on
            p.waiting_since = -1
            if resp.code == _SUCCESS:
                if resp.end_index == cmp:
                    self._to_append(p, cmp)
                elif cmp >= end or p.known_diff == cmp + 1:
                    # the follower's entries after cmp are beyond our log or known to differ
                    p.restart(_TRUNCATE)
                    p.cut_index = cmp
                else:
                    # the follower is longer than we assumed (pushes arrived after the answer that
                    # sent us down here): compare higher up instead of truncating what may match
                    p.compare_index = min(end, resp.end_index)
                    p.known_diff = -1
            else:
                if resp.end_index < begin or resp.begin_index > end:
                    self._below_begin(p)
                    return
                p.known_diff = cmp if resp.end_index >= cmp else -1
                cmp = resp.end_index if cmp > resp.end_index else cmp - 1
                if cmp < begin:
                    self._below_begin(p)
                else:
                    p.compare_index = cmp
        elif resp.type == _INSTALL_SNAPSHOT and p.state == _INSTALL_SNAPSHOT:
            p.waiting_since = -1
            if resp.code == _SUCCESS:
                log.info("%s: follower %s installed the snapshot at %d", self.id, resp.src, resp.index)
                self._to_append(p, resp.index)
            else:
                p.restart(_COMPARE)
                p.compare_index = min(end, resp.end_index)
                p.waiting_since = now
        elif resp.type == _TRUNCATE and p.state == _TRUNCATE:
            if resp.index != p.cut_index:
                return
            p.waiting_since = -1
            if resp.code == _SUCCESS:
                self._to_append(p, p.cut_index)
            else:
                p.restart(_COMPARE)
                p.compare_index = min(end, resp.end_index)
        elif resp.type == _APPEND and p.state == _APPEND:  # not SUCCESS (handled above)
            log.info("%s: follower %s inconsistent at %d, back to COMPARE", self.id, resp.src, resp.index)
            p.restart(_COMPARE)
            p.compare_index = min(end, resp.end_index)

    def _term_before(self, first: int) -> int:
        """Term of entry ``first - 1`` (from the snapshot when compacted away; -1 if unknown)."""
        if first - 1 >= self.begin_index:
            return self.term_at(first - 1)
        if self.snapshot is not None and self.snapshot[0] == first - 1:
            return self.snapshot[1]
        return -1

    def _below_begin(self, p: _Progress) -> None:
        """The follower needs entries before our ledgerBeginIndex: TRUNCATE at 0 when nothing was
        compacted, else INSTALL_SNAPSHOT (DLedger master), since the entry before begin is gone."""
        begin = self.begin_index
        if begin == 0:
            p.restart(_TRUNCATE)
            p.cut_index = 0
        elif self.snapshot is not None and self.snapshot[0] >= begin - 1:
            log.info(
                "%s: follower %s needs compacted entries, sending the snapshot at %d",
                self.id,
                p.peer,
                self.snapshot[0],
            )
            p.restart(_INSTALL_SNAPSHOT)
        else:
            log.warning(
                "%s: follower %s needs entries before %d and no snapshot covers them", self.id, p.peer, begin
            )
            p.restart(_COMPARE)
            p.compare_index = self.end_index
            p.waiting_since = self.now

    def _to_append(self, p: _Progress, match: int) -> None:
        p.restart(_APPEND)
        p.match = match
        p.next_index = match + 1
        self._advance_commit()

    def _advance_commit(self) -> None:
        """QuorumAckChecker with Raft's current-term rule (section 5.4.2)."""
        if self.role != _LEADER:
            return
        commit = self.commit_index
        above = 1 if self.durable_index > commit else 0
        for p in self._progress.values():
            if p.match > commit:
                above += 1
        quorum = len(self.cfg.peers) // 2 + 1
        if above < quorum:
            return  # the quorum-th highest watermark is not above commitIndex
        marks = sorted([self.durable_index] + [p.match for p in self._progress.values()], reverse=True)
        q = marks[len(self.cfg.peers) // 2]
        if q > commit and q >= self.begin_index and self.term_at(q) == self.term:
            self.commit_index = q

    def match_index(self, peer: str) -> int:
        """The leader's watermark for ``peer`` (-1 when unknown or not leader)."""
        p = self._progress.get(peer)
        if peer == self.id:
            return self.durable_index
        return p.match if p else -1

    # ------------------------------------------------------------ replication, follower side (EntryHandler)

    def _handle_push(self, req: PushRequest, now: int) -> PushResponse | None:
        code = self._check_leader(req, now)
        index = req.index
        if code == _SUCCESS:
            fence_term, fence_epoch = self.push_fence
            if req.term == fence_term and req.epoch < fence_epoch:
                return None  # stale: the leader restarted this follower's dispatcher since
            self.push_fence = (req.term, req.epoch)
            try:
                code, index = self._apply_push(req)
            except IndexError as e:
                log.warning("%s: push %s at %d: %s", self.id, req.type, req.index, e)
                code = _INCONSISTENT_STATE
            if code == _SUCCESS:
                new_commit = min(req.commit_index, self.verified_index, self.end_index)
                if new_commit > self.commit_index:
                    self.commit_index = new_commit
                if req.type == _COMMIT:
                    return None  # a COMMIT is answered only when something is wrong
        return self._push_answer(req, code, index)

    def refuse_push(self, req: PushRequest, code: int) -> None:
        """Answer ``req`` with ``code`` in the next Ready (the runtime's DISK_ERROR when reading the
        store failed under :meth:`step`)."""
        self._out.append(self._push_answer(req, code, req.index))

    def _push_answer(self, req: PushRequest, code: int, index: int) -> PushResponse:
        return PushResponse(
            self.cfg.group,
            self.id,
            req.src,
            self.term,
            type=req.type,
            code=code,
            index=index,
            begin_index=self.begin_index,
            end_index=self.end_index,
            epoch=req.epoch,
        )

    def _apply_push(self, req: PushRequest) -> tuple[int, int]:
        typ = req.type
        if typ == _APPEND:
            return self._push_append(req)
        if typ == _COMMIT:
            if self.begin_index <= req.index <= self.end_index and self.term_at(req.index) == req.prev_term:
                self.verified_index = max(self.verified_index, req.index)
            elif req.index > self.end_index or (
                req.index >= self.begin_index and self.term_at(req.index) != req.prev_term
            ):
                return _INCONSISTENT_STATE, req.index  # we lost or never had the leader's watermark
            return _SUCCESS, req.index
        if typ == _INSTALL_SNAPSHOT:
            return self._install_snapshot(req)
        if typ == _COMPARE:
            if len(req.entries) != 1:
                return Code.UNEXPECTED_ARGUMENT, req.index
            local = self._entry(req.index)
            if local is not None and local.same(req.entries[0]):
                self.verified_index = max(self.verified_index, req.index)
                return _SUCCESS, req.index
            return _INCONSISTENT_STATE, req.index
        if typ == _TRUNCATE:
            return self._push_cut(req)
        return Code.UNSUPPORTED, req.index

    def _push_append(self, req: PushRequest) -> tuple[int, int]:
        """APPEND: accept the leader's entries after ``req.index - 1`` (whose term must be
        ``prev_term``); a conflicting suffix is cut, never below commitIndex."""
        entries = req.entries
        if not entries:
            return Code.REQUEST_WITH_EMPTY_BODYS, req.index
        first = req.index
        begin, end = self.begin_index, self.end_index
        if first > end + 1 or first < begin:
            return _INCONSISTENT_STATE, first
        if first - 1 >= begin and self.term_at(first - 1) != req.prev_term:
            return _INCONSISTENT_STATE, first
        for k, e in enumerate(entries):
            index = e.index
            if index != first + k:
                return Code.UNEXPECTED_ARGUMENT, first
            if index <= end:
                if self.entry(index).same(e):
                    continue
                if index <= self.commit_index:
                    log.error(guards.COMMITTED_ENTRY_DIFFERS, self.id, index)
                    return _INCONSISTENT_STATE, index
                log.info("%s: truncating conflicting log after %d", self.id, index - 1)
                self._cut_log(index - 1)
            self._accept(e)
            self._need_sync = True
            end = index
        last = first + len(entries) - 1
        if last > self.verified_index:
            self.verified_index = last
        return _SUCCESS, last

    def _push_cut(self, req: PushRequest) -> tuple[int, int]:
        """TRUNCATE at ``i``: the log ends with the leader's entry ``i`` (DLedger's
        handleDoTruncate), never changing an entry at or below commitIndex."""
        if len(req.entries) != 1 or req.entries[0].index != req.index:
            return Code.UNEXPECTED_ARGUMENT, req.index
        i = req.index
        if i > self.end_index + 1 or i < self.begin_index:
            return _INCONSISTENT_STATE, i
        local = self._entry(i)
        if local is not None and local.same(req.entries[0]):
            if i < self.commit_index:
                log.error(guards.CUT_BELOW_COMMIT, self.id, self.commit_index, i)
                return _INCONSISTENT_STATE, i
            self._cut_log(i)
        else:
            if i <= self.commit_index:
                log.error(guards.OVERWRITE_COMMITTED, self.id, i, self.commit_index)
                return _INCONSISTENT_STATE, i
            if self.end_index >= i:
                log.info("%s: truncating log after %d (was up to %d)", self.id, i - 1, self.end_index)
            self._cut_log(i - 1)
            self._accept(req.entries[0])
        self._need_sync = True
        self.verified_index = i
        return _SUCCESS, i

    def _install_snapshot(self, req: PushRequest) -> tuple[int, int]:
        s_index, s_term = req.index, req.prev_term
        if self.begin_index <= s_index <= self.end_index and self.term_at(s_index) == s_term:
            self.verified_index = max(self.verified_index, s_index)  # we hold it already
            return _SUCCESS, s_index
        if self._snap_store is None:
            log.error(
                "%s: the log store cannot start over at %d; INSTALL_SNAPSHOT refused", self.id, s_index + 1
            )
            return Code.UNSUPPORTED, s_index
        if s_index < self.commit_index:
            log.error(guards.SNAPSHOT_BELOW_COMMIT, self.id, s_index, self.commit_index)
            return _INCONSISTENT_STATE, s_index
        log.info(
            "%s: installing snapshot at %d (term %d); log restarts at %d",
            self.id,
            s_index,
            s_term,
            s_index + 1,
        )
        self._restart_log(LogRestart(s_index + 1, req.next_pos, s_term, req.chain_crc))
        self._need_sync = True
        self.commit_index = s_index
        self.verified_index = s_index
        self._installed = (s_index, s_term, req.snapshot)
        self.set_snapshot(s_index, s_term, req.snapshot)
        return _SUCCESS, s_index

    # ------------------------------------------------------------ leadership transfer (DLedgerServer)

    def transfer(self, transferee: str, transfer_id: int, now: int, term: int | None = None) -> int:
        """handleLeadershipTransfer on the leader: _SUCCESS when started (the result comes in
        ``Ready.transfers`` as ``(transfer_id, code)``), else the rejecting code
        (UNKNOWN_MEMBER, INCONSISTENT_TERM, NOT_LEADER, FALL_BEHIND_TOO_MUCH, LEADER_TRANSFERRING)."""
        if transferee not in self.cfg.peers:
            return Code.UNKNOWN_MEMBER
        if self.role != _LEADER:
            return _NOT_LEADER
        if term is not None and term != self.term:
            return Code.INCONSISTENT_TERM
        if transferee == self.id:
            self._transfers.append((transfer_id, _SUCCESS))
            return _SUCCESS
        if self.transferee is not None:
            return Code.LEADER_TRANSFERRING
        if self.end_index - self.match_index(transferee) > self.cfg.max_transfer_lag:
            return Code.FALL_BEHIND_TOO_MUCH
        log.info("%s: transferring leadership to %s at term %d", self.id, transferee, self.term)
        self.transferee = transferee
        self._transfer_id = transfer_id
        self._transfer_started = now
        self._send(
            TakeLeadershipRequest(
                self.cfg.group, self.id, transferee, self.term, take_leadership_index=self.end_index
            )
        )
        return _SUCCESS

    def _handle_take(self, req: TakeLeadershipRequest, now: int) -> None:
        if req.term != self.term or self.leader_id != req.src or self.role != _FOLLOWER:
            code = _EXPIRED_TERM if req.term < self.term else _INCONSISTENT_LEADER
            self._send(TakeLeadershipResponse(self.cfg.group, self.id, req.src, self.term, code=code))
            return
        self._take_from = (req.src, req.term, req.take_leadership_index, now + self.cfg.transfer_timeout_ms)
        self._maintain_take(now)

    def _maintain_take(self, now: int) -> None:
        assert self._take_from is not None
        src, term, index, deadline = self._take_from
        if now > deadline:
            self._finish_take(Code.TAKE_LEADERSHIP_FAILED)
        elif self.term_to_take_leadership != -1:
            return  # campaigning; the role change answers
        elif self.end_index >= index:
            log.info("%s: taking leadership from %s, campaigning at term %d", self.id, src, term + 1)
            self.term_to_take_leadership = term + 1
            self.change_to_candidate(term + 1)
            self.need_increase_term = True
            self._maintain_candidate(now)  # bumps the term
            self.next_vote_time = now  # and votes at once
            self._take_from = (src, term, index, now + self.cfg.transfer_timeout_ms * 3)

    def _finish_take(self, code: int) -> None:
        if self._take_from is not None:
            src, _, _, _ = self._take_from
            self._send(TakeLeadershipResponse(self.cfg.group, self.id, src, self.term, code=code))
            log.info("%s: take leadership finished: %s", self.id, Code(code).name)
        self._take_from = None
        self.term_to_take_leadership = -1

    def _on_take_response(self, resp: TakeLeadershipResponse) -> None:
        if self._transfer_id is not None:
            self._transfers.append((self._transfer_id, resp.code))
            self._transfer_id = None
        if resp.code != _SUCCESS:
            self.transferee = None

    def _maybe_preferred_transfer(self, now: int) -> None:
        prefs = self.cfg.preferred_leaders
        if self.transferee is not None and now - self._transfer_started > self.cfg.transfer_timeout_ms * 3:
            self.transferee = None  # the transfer died; accept appends again
            if self._transfer_id is not None:
                self._transfers.append((self._transfer_id, Code.TAKE_LEADERSHIP_FAILED))
                self._transfer_id = None
        if not prefs or self.id in prefs or self.transferee is not None:
            return
        if now - self._last_preferred_check < self.cfg.preferred_check_ms:
            return
        self._last_preferred_check = now
        live = [p for p in prefs if p in self.live_peers]
        if not live:
            return
        best = min(live, key=lambda p: self.end_index - self.match_index(p))
        if self.end_index - self.match_index(best) < self.cfg.max_transfer_lag:
            self.transfer(best, -1, now)
