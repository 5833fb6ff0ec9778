"""The asyncio runtime of a DLedger member: sockets, timers, flush policy and the state machine caller.

One TCP port serves peers and clients (as DLedgerRpcNettyService does). Peer messages travel one
way over the sender's outgoing connection; a client request is answered on its own connection with
the request's opaque. The consensus itself is :class:`dledger.core.Core`; this module feeds it
frames and ticks and carries out its :class:`~dledger.core.Ready` output in order (through
:class:`dledger.driver.Driver`): write the log, persist currTerm/votedFor, sync the log (``--flush sync``: group commit, one fsync per event-loop batch),
send, apply committed entries to the state machine (DLedger's StateMachineCaller), answer clients.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import os
import random
import signal
import struct
import time
from collections import deque
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dledger.core import CoreConfig
from dledger.driver import READ_MODES, start_member
from dledger.protocol import (
    MAX_TERM_STEP,
    Code,
    DecodeError,
    Message,
    PushRequest,
    PushResponse,
    PushType,
    RequestCode,
    from_wire,
    parse_peers,
    to_wire,
)
from dledger.snapshot import SnapshotStore
from dledger.statemachine import KV_ARGS, KVStateMachine, check_txn_request, encode_kv, encode_txn
from dledger.store import RuntimeLogStore, StoreError
from dledger.transport import (
    DEFAULT_MAX_FRAME,
    FrameDecoder,
    FrameError,
    check_proof,
    decode_payload,
    encode_frame,
    new_nonce,
    packer,
    peek_header,
    peer_proof,
)

log = logging.getLogger("dledger.server")

FLUSH_MODES = ("sync", "async")
SWITCH_INTERVAL_S = 0.0005
"""How long the IO thread, back from an fsync, waits at most for the GIL while the event loop runs
Python (CPython's default, 5 ms, is longer than the fsync: on a busy leader the group commit's
completion waited for it; a loop pass that makes no syscall yields the GIL after this long)."""

# client requests whose frame may carry an entry: one larger than --max-entry-bytes plus this
# much is refused from its header, before its body is decoded (decoding costs CPU per object)
_ENTRY_REQUESTS = frozenset({RequestCode.APPEND, RequestCode.USER_DEFINE})
_REQUEST_SLACK = 64 * 1024
_HANDSHAKE = frozenset({RequestCode.PEER_HELLO, RequestCode.PEER_CHALLENGE, RequestCode.PEER_PROOF})
_LEN = struct.Struct(">I")  # the frame length prefix (dledger.transport)
# a push's fields but its entries, in to_wire's order (Server._push_frame encodes the entries apart)
_PUSH_FIELDS = tuple(f.name for f in dataclasses.fields(PushRequest) if f.name != "entries")
_KIND_CODE = {
    "vote": RequestCode.VOTE,
    "vote_r": RequestCode.VOTE,
    "hb": RequestCode.HEART_BEAT,
    "hb_r": RequestCode.HEART_BEAT,
    "push": RequestCode.PUSH,
    "push_r": RequestCode.PUSH,
    "take": RequestCode.LEADERSHIP_TRANSFER,
    "take_r": RequestCode.LEADERSHIP_TRANSFER,
}


@dataclass
class ServerConfig:
    """Everything ``dledger server`` takes; times in ms.

    ``peers`` is DLedger's ``"n0-host:port;n1-host:port"``. ``store_dir`` None keeps the log in
    memory (tests); otherwise the log and currterm live in ``<store_dir>/dledger-<id>/``.
    Resource bounds (see dledger/README.md, "Resource bounds"): ``max_frame`` bytes per frame,
    ``max_buffered`` bytes of unfinished frames over all connections, ``max_connections`` incoming
    connections in all (connections from a member's address are exempt) and
    ``max_connections_per_host`` from one address, ``frame_timeout_ms`` for a frame from its first
    byte to its last, ``idle_timeout_ms`` without a complete frame, ``max_write_buffer`` bytes of
    answers a client has not read before the server stops reading its requests, ``max_entry_bytes``
    per client entry (an APPEND body, a KV command or transaction; RocketMQ's ``maxMessageSize`` is
    4 MiB, ours 1 MiB: decoding and applying one must fit well inside a 100 ms heartbeat; a
    request frame above it is refused before its body is decoded, and a transaction is also held
    to ``statemachine.MAX_TXN_OPS`` micro-ops). ``secret``: with
    it, a peer message counts only on a connection whose member proved it holds the secret
    (:mod:`dledger.transport`'s handshake); clients need none.
    Raises ValueError naming a bad field.
    """

    self_id: str
    peers: str
    group: str = "default"
    store_dir: str | None = None
    flush: str = "sync"
    read_mode: str = "raft-log"
    bind: str | None = None
    heartbeat_ms: int = CoreConfig.heartbeat_ms  # the core's default
    max_heartbeat_leak: int = CoreConfig.max_heartbeat_leak
    min_vote_interval_ms: int = CoreConfig.min_vote_interval_ms
    max_vote_interval_ms: int = CoreConfig.max_vote_interval_ms
    tick_ms: int = 10
    flush_interval_ms: int = 10
    max_wait_ack_ms: int = 2500
    max_pending: int = CoreConfig.max_pending
    max_frame: int = DEFAULT_MAX_FRAME
    max_buffered: int = 64 * 1024 * 1024
    max_connections: int = 1000
    max_connections_per_host: int = 500
    frame_timeout_ms: int = 30_000
    idle_timeout_ms: int = 120_000
    max_write_buffer: int = 1024 * 1024
    max_entry_bytes: int = 1024 * 1024
    preferred_leaders: list[str] = field(default_factory=list)
    data_file_size: int | None = None
    seed: int | None = None
    snapshot_every: int = 0
    snapshot_keep: int = 3
    secret: bytes | None = None  # the group's peer secret: members must prove it (None: no check)
    adopt_insecure_state: bool = False  # a secured start may take a store an --insecure run wrote

    def __post_init__(self) -> None:
        self.peer_map = parse_peers(self.peers)
        if self.self_id not in self.peer_map:
            raise ValueError(f"--id {self.self_id!r}: not among the peers {list(self.peer_map)}")
        if self.flush not in FLUSH_MODES:
            raise ValueError(f"--flush {self.flush!r}: expected one of {FLUSH_MODES}")
        if self.read_mode not in READ_MODES:
            raise ValueError(f"--read-mode {self.read_mode!r}: expected one of {READ_MODES}")
        if self.max_buffered < self.max_frame:
            raise ValueError(
                f"max_buffered={self.max_buffered}: expected >= max_frame ({self.max_frame}), "
                "or no frame of the maximum size could ever be received"
            )
        for name in (
            "heartbeat_ms",
            "tick_ms",
            "flush_interval_ms",
            "max_wait_ack_ms",
            "max_frame",
            "max_connections",
            "max_connections_per_host",
            "frame_timeout_ms",
            "idle_timeout_ms",
            "max_write_buffer",
            "max_entry_bytes",
        ):
            if getattr(self, name) <= 0:
                raise ValueError(f"{name}={getattr(self, name)}: expected > 0")

    def core_config(self) -> CoreConfig:
        return CoreConfig(
            self_id=self.self_id,
            peers=list(self.peer_map),
            group=self.group,
            heartbeat_ms=self.heartbeat_ms,
            max_heartbeat_leak=self.max_heartbeat_leak,
            min_vote_interval_ms=self.min_vote_interval_ms,
            max_vote_interval_ms=self.max_vote_interval_ms,
            vote_timeout_ms=max(2 * self.heartbeat_ms, 50),
            push_timeout_ms=max(5 * self.heartbeat_ms, 200),
            max_pending=self.max_pending,
            transfer_timeout_ms=max(10 * self.heartbeat_ms, 1000),
            preferred_leaders=list(self.preferred_leaders),
        )


class MemoryHardState:
    """currTerm/votedFor kept in memory (the --memory mode, with dledger.sim.SimLogStore, the in-memory log)."""

    def __init__(self) -> None:
        self.term: int = 0
        self.vote: str | None = None

    def load(self) -> tuple[int, str | None]:
        return self.term, self.vote

    def save(self, term: int, vote: str | None) -> None:
        self.term, self.vote = term, vote


class FileHardState:
    """Adapter over :class:`dledger.store.hardstate.HardState` (temp file, fsync, rename)."""

    def __init__(self, directory: Path) -> None:
        from dledger.store.hardstate import HardState

        self._hs = HardState(directory)

    def load(self) -> tuple[int, str | None]:
        tv = self._hs.load()
        return tv.curr_term, tv.voted_for

    def save(self, term: int, vote: str | None) -> None:
        self._hs.save(term, vote)


def open_store(cfg: ServerConfig) -> tuple[RuntimeLogStore, Any, int]:
    """The adapter point: ``(log store, hard state, committed index from the checkpoint)``."""
    if cfg.store_dir is None:
        from dledger.sim import SimLogStore  # not imported on a node: every import costs FUSE lookups

        return SimLogStore(), MemoryHardState(), -1
    from dledger.store.file import FileLogStore

    directory = Path(cfg.store_dir) / f"dledger-{cfg.self_id}"
    kwargs: dict[str, Any] = {}
    if cfg.data_file_size:
        kwargs["data_file_size"] = cfg.data_file_size
    # verify every record from the file holding the checkpoint's committed entry on (DLedger: the
    # newest 3 files); older ones come from the index, and reads check bodyCrc anyway
    # repair: damage inside the committed prefix is cut and fetched again from the leader (the
    # member abstains from votes meanwhile) instead of keeping the member down
    store = FileLogStore(directory, verify_files=1, repair=True, **kwargs)
    rec = store.recovery
    if getattr(rec, "cut_reason", None):
        log.warning("%s: recovery cut the log: %s", cfg.self_id, rec.describe())
    log.info(
        "%s: store %s recovered: entries [%d, %d], committed %d",
        cfg.self_id,
        directory,
        store.begin_index,
        store.end_index,
        store.committed_index,
    )
    return store, FileHardState(directory), store.committed_index


INSECURE_MARKER = "insecure"
"""File in a member's store directory while (and after) it ran a multi-member group without a
secret: its term and log may hold what any process told it."""


def check_insecure_state(cfg: ServerConfig) -> None:
    """A term learnt on an unauthenticated path must never travel further (issue 36 item 1): a
    member that ran a multi-member group without a secret (``--insecure``) marks its store; started
    with a secret on that store, it refuses (StoreError naming the two ways out) unless
    ``adopt_insecure_state`` says the state is trusted (a whole group moving to a secret), since
    the term it holds (a forged 1,000,000, say) would spread to the group through its
    authenticated messages. Without a secret, the marker is written."""
    if cfg.store_dir is None or len(cfg.peer_map) == 1:
        return
    directory = Path(cfg.store_dir) / f"dledger-{cfg.self_id}"
    marker = directory / INSECURE_MARKER
    try:
        if cfg.secret is None:
            if not marker.exists():
                directory.mkdir(parents=True, exist_ok=True)
                marker.write_text("this member ran without a peer secret (--insecure)\n")
            return
        if not marker.exists():
            return
        if not cfg.adopt_insecure_state:
            raise StoreError(
                f"{directory} was written by a run without a peer secret (--insecure): its term and "
                "log may hold what any process sent it, and would spread to the group. Remove the "
                "directory so the member catches up from the group, or pass --adopt-insecure-state "
                "to trust it (e.g. the whole group moving to a secret)"
            )
        marker.unlink()
        log.warning("%s: adopting the state an --insecure run left in %s", cfg.self_id, directory)
    except OSError as e:
        raise StoreError(f"{marker}: {e}") from e


class _Conn(asyncio.Protocol):
    """One TCP connection (incoming, or outgoing to a peer); frames go to the server.

    Incoming connections are admitted against the connection limits, stop handling requests
    (keeping the rest of the last read, and pausing reading) while more than ``max_write_buffer``
    bytes of answers wait for the client, and are closed by the server's
    sweep when a frame takes longer than ``frame_timeout_ms`` or no frame came for
    ``idle_timeout_ms``. Bytes of unfinished frames count against the server's ``max_buffered``.
    """

    def __init__(self, server: Server, peer: str | None = None) -> None:
        self.server = server
        self.peer = peer
        self.decoder = FrameDecoder(server.cfg.max_frame)
        self.transport: asyncio.Transport | None = None
        self.closed = False
        self.out: list[bytes] = []  # frames queued in this event-loop pass, written together
        self.host = ""  # remote address of an incoming connection
        self.buffered = 0  # bytes of an unfinished frame, as counted in server.buffered
        self.last_frame = time.monotonic()  # last complete frame (or the connect)
        self.frame_start = 0.0  # when the unfinished frame's first byte came (0: none)
        self.out_bytes = 0  # bytes in self.out
        self.backlog: deque[bytes] = deque()  # complete frames not handled yet (backpressure)
        self.write_paused = False  # the transport's buffer is above max_write_buffer
        # peer authentication: an outgoing link is ready once it sent its proof (at once without a
        # secret); an incoming connection carries peer messages only from the member it proved
        self.ready = server.cfg.secret is None
        self.claimed: str | None = None
        self.nonce: bytes | None = None
        self.proved: str | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        if self.peer is None:
            name = transport.get_extra_info("peername")
            self.host = str(name[0]) if isinstance(name, tuple) and name else "?"
            if not self.server.admit(self):
                self.closed = True
                transport.abort()
                return
            transport.set_write_buffer_limits(high=self.server.cfg.max_write_buffer)

    def data_received(self, data: bytes) -> None:
        if self.closed:
            return
        try:
            payloads = self.decoder.feed(data)
        except FrameError as e:
            log.warning("%s: closing connection from %s: %s", self.server.id, self._addr(), e)
            self.abort()
            return
        now = time.monotonic()
        if payloads:
            self.last_frame = now
            self.frame_start = now if self.decoder.buffered else 0.0
        elif not self.frame_start and self.decoder.buffered:
            self.frame_start = now
        self._account(self.decoder.buffered)
        self.backlog.extend(payloads)
        self._handle_backlog()

    def _handle_backlog(self) -> None:
        """Hand complete frames to the server; an incoming connection stops while its client has
        not taken ``max_write_buffer`` bytes of answers (a 20-byte GET can ask for a large entry)."""
        limit = self.server.cfg.max_write_buffer
        backlog = self.backlog
        try:
            while backlog and not self.closed:
                if self.peer is None and self.out_bytes > limit:
                    self.flush()  # calls pause_writing when the transport cannot take it all
                    if self.write_paused:
                        return  # resume_writing continues
                self.server.on_frame(self, backlog.popleft())
        except (FrameError, DecodeError) as e:
            log.warning("%s: closing connection from %s: %s", self.server.id, self._addr(), e)
            self.abort()

    def _account(self, buffered: int) -> None:
        server = self.server
        server.buffered += buffered - self.buffered
        self.buffered = buffered
        if server.buffered > server.cfg.max_buffered:
            server.shed_buffered()

    def pause_writing(self) -> None:
        # a client that does not read its answers: stop reading its requests (backpressure)
        if self.peer is None and self.transport is not None and not self.closed:
            self.write_paused = True
            self.transport.pause_reading()

    def resume_writing(self) -> None:
        if self.peer is None and self.transport is not None and not self.closed:
            self.write_paused = False
            self._handle_backlog()
            if not self.write_paused and not self.closed:
                self.transport.resume_reading()

    def _addr(self) -> str:
        if self.transport is None:
            return "?"
        return str(self.transport.get_extra_info("peername"))

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self._release()
        self.server.on_conn_lost(self)

    def _release(self) -> None:
        if self.buffered:
            self.server.buffered -= self.buffered
            self.buffered = 0
        self.decoder = FrameDecoder(self.decoder.max_frame)  # drop the partial frame now
        self.backlog.clear()

    def send(self, frame: bytes) -> bool:
        """Queue ``frame``; every connection's queue is written with one ``write`` (one send
        syscall) after the current event-loop pass, so answers and pushes produced together
        share a syscall."""
        if self.closed or self.transport is None or self.transport.is_closing():
            return False
        if not self.out:
            self.server._queue_flush(self)
        self.out.append(frame)
        self.out_bytes += len(frame)
        return True

    def flush(self) -> None:
        out, self.out = self.out, []
        self.out_bytes = 0
        if not out or self.closed or self.transport is None or self.transport.is_closing():
            return
        self.transport.write(out[0] if len(out) == 1 else b"".join(out))

    def close(self) -> None:
        self.closed = True
        self._release()
        if self.transport is not None:
            self.transport.close()

    def abort(self) -> None:
        """Close at once, dropping unsent answers (a client that does not read would keep a
        closing transport and its buffers alive)."""
        self.closed = True
        self._release()
        if self.transport is not None:
            self.transport.abort()


@dataclass(slots=True)
class _Waiter:
    kind: str  # "append", "kv", "read"
    conn: _Conn
    opaque: int
    code: int
    term: int
    deadline: float
    key: str | None = None
    txn: list[Any] | None = None  # a read-only transaction's micro-ops, for a confirmed read


class Server:
    """A DLedger member on asyncio. ``await start()``, then ``await wait_closed()``; ``stop()`` shuts
    down cleanly (sync, close store, close sockets)."""

    def __init__(self, cfg: ServerConfig) -> None:
        self.cfg = cfg
        self.id = cfg.self_id
        # recovery can take seconds; the process age shows what interpreter start and imports took
        log.info("%s: opening the store (pid %d, %s)", cfg.self_id, os.getpid(), _process_age())
        check_insecure_state(cfg)
        self.store, self.hard, committed = open_store(cfg)
        self.sm = KVStateMachine()
        self._snapshots: SnapshotStore | None = None
        if cfg.store_dir is not None:
            self._snapshots = SnapshotStore(
                Path(cfg.store_dir) / f"dledger-{cfg.self_id}" / "snapshot", cfg.snapshot_keep
            )
        self._t0 = time.monotonic()
        # the newest snapshot, then the committed entries after it (shared with the simulation)
        self.driver = start_member(
            cfg.core_config(),
            self.store,
            self.hard,
            self.sm,
            self,
            snapshots=self._snapshots,
            committed=committed,
            rng=random.Random(cfg.seed),
            now=self._now(),
            flush=cfg.flush,
            snapshot_every=cfg.snapshot_every,
        )
        self.core = self.driver.core
        term, vote = self.core.term, self.core.vote_for
        if self.core.repair_to >= 0:
            log.warning(
                "%s: REPAIR: committed entries after %d are damaged; abstaining from votes until entries "
                "up to %d are fetched again from the leader",
                cfg.self_id,
                self.store.end_index,
                self.core.repair_to,
            )
        log.info(
            "%s: starting at term %d (voted for %s), ledgerEndIndex %d",
            self.id,
            term,
            vote,
            self.store.end_index,
        )
        self._links: dict[str, _Conn | None] = {p: None for p in cfg.peer_map if p != self.id}
        self._connecting: set[str] = set()
        self._last_stall_check = 0.0
        self._last_connect: dict[str, float] = {}
        self._conns: set[_Conn] = set()
        # the driver answers these (the same dicts)
        self._waiters: dict[int, _Waiter] = self.driver.waiters  # by log index
        self._reads: dict[int, _Waiter] = self.driver.reads  # by read id
        self._transfers: dict[int, _Waiter] = self.driver.transfers
        self._next_id = 1
        self._wait_s = cfg.max_wait_ack_ms / 1000
        self._ok_template: tuple[Any, bytes, bytes, bytes] | None = None  # see _append_ok
        self._push_cache: tuple[Any, Any, int, bytes] | None = None  # see _push_frame
        self._drain_scheduled = False
        self._server: asyncio.base_events.Server | None = None
        self._tasks: list[asyncio.Task[None]] = []
        self._stopped = asyncio.Event()
        self._last_checkpoint = 0.0
        self.loop: asyncio.AbstractEventLoop | None = None
        self._io = ThreadPoolExecutor(max_workers=1, thread_name_prefix=f"dledger-io-{self.id}")
        self._to_flush: list[_Conn] = []
        self.buffered = 0  # bytes of unfinished frames over all connections (max_buffered)
        self._per_host: dict[str, int] = {}  # admitted incoming connections by remote address
        self._member_hosts = {h for p, (h, _) in cfg.peer_map.items() if p != cfg.self_id}
        self._max_connections = cfg.max_connections
        self._last_sweep = 0.0
        self._refused = 0  # connections refused so far
        self._refused_terms = 0  # peer messages dropped for a term jump beyond MAX_TERM_STEP
        self._refused_peers = 0  # peer traffic refused for want of the secret
        self._acks_beyond_durable = 0  # see stats()
        self._push_acks_beyond_durable = 0
        self._shed = 0  # connections aborted for max_buffered
        self.repair_blocked_at = -1  # the committed entry no member served for repair yet

    @property
    def last_applied(self) -> int:
        """The index the state machine has applied (the driver's)."""
        return self.driver.last_applied

    def _now(self) -> int:
        return int((time.monotonic() - self._t0) * 1000)

    # ------------------------------------------------------------ lifecycle

    def _fit_fd_limit(self) -> None:
        """Raise the soft RLIMIT_NOFILE towards the hard one so ``max_connections`` can be met;
        when it cannot, admit fewer (keeping 64 descriptors for the store and peer links), so a
        flood ends in refused connections, not in EMFILE for the store or the listening socket."""
        import resource

        want = self.cfg.max_connections + 64
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        if soft != resource.RLIM_INFINITY and soft < want:
            new_soft = want if hard == resource.RLIM_INFINITY else min(want, hard)
            try:
                resource.setrlimit(resource.RLIMIT_NOFILE, (new_soft, hard))
                soft = new_soft
            except (ValueError, OSError):
                pass
        if soft != resource.RLIM_INFINITY and soft < want:
            self._max_connections = max(soft - 64, 1)
            log.warning(
                "%s: RLIMIT_NOFILE %d: admitting at most %d connections instead of %d",
                self.id,
                soft,
                self._max_connections,
                self.cfg.max_connections,
            )

    async def start(self) -> None:
        self.loop = asyncio.get_running_loop()
        self._fit_fd_limit()
        host, port = self.cfg.peer_map[self.id]
        bind = self.cfg.bind or host
        self._server = await self.loop.create_server(lambda: self._accept(), bind, port, reuse_address=True)
        log.info(
            "%s: listening on %s:%d (group %s, flush %s, read mode %s)",
            self.id,
            bind,
            port,
            self.cfg.group,
            self.cfg.flush,
            self.cfg.read_mode,
        )
        self._tasks.append(asyncio.create_task(self._ticker()))
        if self.cfg.flush == "async":
            self._tasks.append(asyncio.create_task(self._flusher()))
        if self.core.repair_to >= 0:
            self._tasks.append(asyncio.create_task(self._repairer()))

    def _queue_flush(self, conn: _Conn) -> None:
        if not self._to_flush and self.loop is not None:
            self.loop.call_soon(self._flush_conns)
        self._to_flush.append(conn)

    def _flush_conns(self) -> None:
        conns, self._to_flush = self._to_flush, []
        for c in conns:
            c.flush()

    def _accept(self) -> _Conn:
        return _Conn(self)

    def admit(self, conn: _Conn) -> bool:
        """Whether an incoming connection fits the limits (False: the caller aborts it). Members'
        addresses are exempt from the total, so a flood from elsewhere cannot cut the group apart;
        every address, members' too, is held to the per-host limit."""
        host = conn.host
        n = self._per_host.get(host, 0)
        member = host in self._member_hosts
        if n >= self.cfg.max_connections_per_host or (
            not member and len(self._conns) >= self._max_connections
        ):
            self._refused += 1
            if self._refused == 1 or self._refused % 1000 == 0:
                log.warning(
                    "%s: refusing connections (%d refused; %d open, %d from %s; limits %d in all, %d per host)",
                    self.id,
                    self._refused,
                    len(self._conns),
                    n,
                    host,
                    self._max_connections,
                    self.cfg.max_connections_per_host,
                )
            return False
        self._per_host[host] = n + 1
        self._conns.add(conn)
        return True

    def shed_buffered(self) -> None:
        """Over ``max_buffered``: abort the connections whose unfinished frame is oldest (a frame
        from a live member or client completes within moments) until the total fits again."""
        over = sorted((c for c in self._conns if c.buffered), key=lambda c: c.frame_start)
        for c in over:
            if self.buffered <= self.cfg.max_buffered:
                break
            self._shed += 1
            if self._shed > 10 and self._shed % 100:
                c.abort()  # the first ten and every hundredth are logged
                continue
            log.warning(
                "%s: %d bytes of unfinished frames over the limit %d: closing %s "
                "(%d bytes, frame started %.1fs ago; %d closed so far)",
                self.id,
                self.buffered,
                self.cfg.max_buffered,
                c._addr(),
                c.buffered,
                time.monotonic() - c.frame_start,
                self._shed,
            )
            c.abort()

    def _sweep_conns(self, mono: float) -> None:
        """Abort incoming connections whose frame outlived ``frame_timeout_ms`` (slowloris) or that
        sent no frame for ``idle_timeout_ms``; every 0.25 s, O(connections)."""
        if mono - self._last_sweep < 0.25:
            return
        self._last_sweep = mono
        frame_limit = self.cfg.frame_timeout_ms / 1000
        idle_limit = self.cfg.idle_timeout_ms / 1000
        slow = idle = 0
        for c in list(self._conns):
            if c.frame_start and mono - c.frame_start > frame_limit:
                slow += 1
                c.abort()
            elif mono - c.last_frame > idle_limit and not c.frame_start:
                idle += 1
                c.abort()
        if slow or idle:
            log.info(
                "%s: closed %d connections whose frame took over %d ms and %d idle for %d ms",
                self.id,
                slow,
                self.cfg.frame_timeout_ms,
                idle,
                self.cfg.idle_timeout_ms,
            )

    async def wait_closed(self) -> None:
        await self._stopped.wait()

    async def stop(self) -> None:
        if self._stopped.is_set():
            return
        log.info("%s: shutting down", self.id)
        self.driver.stopped = True
        for t in self._tasks:
            t.cancel()
        if self._server is not None:
            self._server.close()
        for c in list(self._conns):
            c.close()
        for link in self._links.values():
            if link is not None:
                link.close()
        self._io.shutdown(wait=True)
        try:
            self.store.sync()
            self._checkpoint_job(self.core.commit_index)
            self.store.close()
        except StoreError as e:
            log.error("%s: closing the store failed: %s", self.id, e)
        self.sm.on_shutdown()
        self._stopped.set()

    async def _ticker(self) -> None:
        while True:
            await asyncio.sleep(self.cfg.tick_ms / 1000)
            try:
                self.core.tick(self._now())
                self.driver.expire(time.monotonic())
                self._check_stalled_links(time.monotonic())
                self._sweep_conns(time.monotonic())
                self._drain()
                if time.monotonic() - self._last_checkpoint > 1.0:
                    self._last_checkpoint = time.monotonic()
                    self._io.submit(self._checkpoint_job, self.core.commit_index)
            except StoreError as e:
                log.critical("%s: store failure, stopping: %s", self.id, e)
                await self.stop()
                return
            except Exception:
                log.exception("%s: tick failed", self.id)

    async def _repairer(self) -> None:
        """Repair a damaged committed prefix without a leader (issue 36 item 2): while the log ends
        below ``repair_to``, append the next entries from what recovery kept intact
        (``store.salvaged``) or, for the damaged ones, fetch them from any peer that serves them
        as committed (GET answers committed entries only, each checked against its CRCs), and
        hand them to the core (``Core.repair_append``). A leader's pushes may fill the log
        meanwhile; whichever comes first is taken. When no member serves the next entry, that is
        logged with every member's answer (every one DISK_ERROR: the entry is damaged beyond
        every copy)."""
        blocked = 0
        while self.core.repair_to >= 0:
            await asyncio.sleep(0.2)
            core = self.core
            nxt, last = core.end_index + 1, core.repair_to
            if last < 0 or nxt > last:
                continue
            salvaged: dict[int, Any] = getattr(self.store, "salvaged", {})
            run: list[Any] = []
            while nxt + len(run) <= last and nxt + len(run) in salvaged and len(run) < 1000:
                run.append(salvaged.pop(nxt + len(run)))
            answers: dict[str, str] = {}
            if not run:
                run = await self._fetch_committed(nxt, min(last, nxt + 63), answers)
            if core is not self.core or self._stopped.is_set():
                return
            taken = core.repair_append(run) if run else 0
            if taken:
                blocked = 0
                log.info(
                    "%s: repair: appended entries [%d, %d] (repairing up to %d)",
                    self.id,
                    nxt,
                    nxt + taken - 1,
                    last,
                )
                self._drain()
                continue
            blocked += 1
            self.repair_blocked_at = nxt
            if blocked == 25 or blocked % 150 == 0:
                everywhere = bool(answers) and all(a.startswith("DISK_ERROR") for a in answers.values())
                log.error(
                    "%s: REPAIR BLOCKED: committed entry %d %s (%s); entries [%d, %d] still to repair",
                    self.id,
                    nxt,
                    "is damaged on every member: it is beyond repair, restore it from a backup"
                    if everywhere
                    else "is served by no member yet",
                    ", ".join(f"{p}: {a}" for p, a in sorted(answers.items())) or "no answers",
                    nxt,
                    last,
                )
        self.repair_blocked_at = -1

    async def _fetch_committed(self, lo: int, hi: int, answers: dict[str, str]) -> list[Any]:
        """Entries ``lo..hi`` (a consecutive run from ``lo``) as committed on the first peer that
        serves ``lo``, asked with pipelined GETs; ``answers`` gets each asked peer's answer for
        ``lo`` (``"SUCCESS"``, a response code name, or why it could not be asked)."""
        from dledger.store import Entry

        peers = [p for p in self.cfg.peer_map if p != self.id]
        random.shuffle(peers)
        for peer in peers:
            host, port = self.cfg.peer_map[peer]
            try:
                reader, writer = await asyncio.wait_for(asyncio.open_connection(host, port), timeout=1.0)
            except (OSError, TimeoutError) as e:
                answers[peer] = f"unreachable ({e.__class__.__name__})"
                continue
            got: list[Any] = []
            bodies: dict[int, dict[str, Any]] = {}
            try:
                writer.write(
                    b"".join(
                        encode_frame(RequestCode.GET, i - lo + 1, {"index": i, "group": self.cfg.group})
                        for i in range(lo, hi + 1)
                    )
                )
                decoder = FrameDecoder(self.cfg.max_frame)
                while len(bodies) < hi - lo + 1:
                    data = await asyncio.wait_for(reader.read(1 << 16), timeout=2.0)
                    if not data:
                        break
                    for payload in decoder.feed(data):
                        _, opaque, _, body = decode_payload(payload)
                        bodies[opaque] = body
            except (OSError, TimeoutError, FrameError) as e:
                answers.setdefault(peer, f"no answer ({e.__class__.__name__})")
            finally:
                writer.close()
            for i in range(lo, hi + 1):
                b = bodies.get(i - lo + 1)
                code = b.get("code") if b else None
                if i == lo:
                    answers[peer] = _code_name(code) if b else answers.get(peer, "no answer")
                if code != Code.SUCCESS or b is None or not _entry_fields_ok(b, i):
                    break
                got.append(Entry(i, b["entryTerm"], b["body"], b["magic"], b["pos"]))
            if got:
                return got
        return []

    async def _flusher(self) -> None:
        """--flush async: DLedger's FlushDataService, in the IO thread so the loop never blocks."""
        assert self.loop is not None
        while True:
            await asyncio.sleep(self.cfg.flush_interval_ms / 1000)
            await self.loop.run_in_executor(self._io, self.store.sync)

    def _checkpoint_job(self, commit_index: int) -> None:
        try:
            self.store.save_checkpoint(commit_index)
        except (StoreError, OSError) as e:
            log.error("%s: checkpoint failed: %s", self.id, e)

    # ------------------------------------------------------------ the driver's host (dledger.driver.Host)

    def start_sync(self, done: Callable[[int], None]) -> None:
        """One fsync for the driver's group commit (--flush sync), in the IO thread, so the loop
        keeps taking requests and pushes meanwhile (they make the next batch); ``done(durable
        index)`` runs on the loop when it completes; a failed fsync stops the member. The IO
        thread hands the outcome straight to the loop (``call_soon_threadsafe``;
        ``run_in_executor``'s future chain took two loop passes, each as long as a whole batch
        of requests on a busy leader). (A follower that fsynced in its loop instead, sparing the
        hand-offs, did worse on a loaded machine: it took no pushes while the fsync ran.)"""
        loop = self.loop
        assert loop is not None

        def finished(index: int, exc: BaseException | None) -> None:
            if self._stopped.is_set():
                return
            if exc is not None:
                log.critical("%s: fsync failed, stopping: %s", self.id, exc)
                loop.create_task(self.stop())
                return
            done(index)  # sends the push answers it held (a follower's acknowledgements) ...
            if self._to_flush:
                self._flush_conns()  # ... at once, not a loop pass later
            self._schedule_drain()

        def work() -> None:  # in the IO thread
            try:
                outcome: tuple[int, BaseException | None] = (self.store.sync(), None)
            except BaseException as e:  # noqa: BLE001 (handed to the loop, which stops the member)
                outcome = (-1, e)
            try:
                loop.call_soon_threadsafe(finished, *outcome)
            except RuntimeError:
                pass  # the loop closed meanwhile (shutdown)

        self._io.submit(work)

    def send(self, msg: Message) -> None:
        if (
            type(msg) is PushResponse
            and msg.code == Code.SUCCESS
            and msg.type == PushType.APPEND
            and msg.index > self.store.synced_index
        ):
            self._push_acks_beyond_durable += 1  # never with --flush sync (see stats)
        self._send_peer(msg)

    def answer(self, waiter: _Waiter, code: int, **fields: Any) -> None:
        if code == Code.SUCCESS and waiter.kind == "append" and len(fields) == 2:
            # the answer to nearly every request under load: from a template, one join
            if fields["index"] > self.store.synced_index:
                self._acks_beyond_durable += 1  # never with --flush sync (see stats)
            waiter.conn.send(self._append_ok(waiter, fields["index"], fields["pos"]))
            return
        self._answer(waiter, code, **fields)

    def stats(self) -> dict[str, int]:
        """Write-path counters since start, in METADATA's ``stats``: ``dataSyncs`` (the store's
        sync rounds: one per group commit), ``fsyncs`` (its fsync calls), ``syncedIndex`` (the last
        index its fsyncs covered), and two self-checks that stay 0 with ``--flush sync``:
        ``acksBeyondDurable`` (APPEND answers sent for an entry beyond ``syncedIndex``) and
        ``pushAcksBeyondDurable`` (push acknowledgements sent for entries beyond it)."""
        store = self.store
        return {
            "dataSyncs": getattr(store, "data_syncs", 0),
            "fsyncs": getattr(store, "fsyncs", 0),
            "syncedIndex": store.synced_index,
            "acksBeyondDurable": self._acks_beyond_durable,
            "pushAcksBeyondDurable": self._push_acks_beyond_durable,
        }

    def _append_ok(self, w: _Waiter, index: int, pos: int) -> bytes:
        """The frame :meth:`_reply` makes for an appended entry (``{code: SUCCESS, leaderId, term,
        node, index, pos}``), built from a template of the fixed parts (request code, leader,
        term), so only the opaque, index and pos are encoded per answer."""
        key = (w.code, self.core.leader_id, self.core.term)
        t = self._ok_template
        pack = packer().pack
        if t is None or t[0] != key:
            head = b"".join(pack(v) for v in ("c", w.code, "o"))
            mid = packer().pack_map_header(6)
            for k, v in (
                ("code", int(Code.SUCCESS)),
                ("leaderId", key[1]),
                ("term", key[2]),
                ("node", self.id),
            ):
                mid += pack(k) + pack(v)
            mid = pack("r") + pack(1) + pack("b") + mid + pack("index")
            t = self._ok_template = (key, packer().pack_map_header(4) + head, mid, pack("pos"))
        payload = b"".join((t[1], pack(w.opaque), t[2], pack(index), t[3], pack(pos)))
        return _LEN.pack(len(payload)) + payload

    def run_io(self, work: Callable[[], object], done: Callable[[], None]) -> None:
        """Run ``work`` (a snapshot save) in the IO thread; ``done`` on the loop once it returned."""
        assert self.loop is not None
        fut = self.loop.run_in_executor(self._io, work)

        def finished(f: asyncio.Future[object]) -> None:
            if f.exception() is not None:
                log.error("%s: snapshot work failed: %s", self.id, f.exception())
            elif not self._stopped.is_set():
                done()

        fut.add_done_callback(finished)

    def snapshot_installed(self, index: int, term: int, data: bytes) -> None:
        log.info("%s: state machine loaded from the leader's snapshot at %d (term %d)", self.id, index, term)

    # ------------------------------------------------------------ peer links

    def _send_peer(self, msg: Message) -> None:
        link = self._links.get(msg.dst)
        if link is not None and not link.closed and link.transport is not None:
            if link.ready and link.transport.get_write_buffer_size() < 4 * 1024 * 1024:
                if type(msg) is PushRequest and msg.entries:
                    link.send(self._push_frame(msg))
                else:
                    link.send(encode_frame(_KIND_CODE[msg.KIND], 0, to_wire(msg)))
            return  # dropped when backed up or not yet authenticated: the core resends
        self._connect(msg.dst)

    def _push_frame(self, msg: PushRequest) -> bytes:
        """The frame of a push carrying entries, equal (decoded) to ``encode_frame(PUSH, 0,
        to_wire(msg))``; the entries are msgpack-encoded once for every follower that gets the
        same batch in a row (the steady state: each follower is sent the entries just written).
        The body is encoded with ``entries: nil`` as its last field, which is the frame's last
        byte, and the encoded entries take the nil's place."""
        entries = msg.entries
        first, last, n = entries[0], entries[-1], len(entries)
        c = self._push_cache
        if c is not None and c[0] is first and c[1] is last and c[2] == n:
            blob = c[3]
        else:
            blob = packer().pack([[e.index, e.term, e.body, e.magic, e.pos, e.channel] for e in entries])
            self._push_cache = (first, last, n, blob)
        body: dict[str, Any] = {"k": msg.KIND}
        for name in _PUSH_FIELDS:
            body[name] = getattr(msg, name)
        body["entries"] = None
        payload = packer().pack({"c": RequestCode.PUSH, "o": 0, "r": 0, "b": body})
        return b"".join((_LEN.pack(len(payload) - 1 + len(blob)), memoryview(payload)[:-1], blob))

    def _connect(self, peer: str) -> None:
        now = time.monotonic()
        if peer in self._connecting or now - self._last_connect.get(peer, 0.0) < 0.05:
            return
        self._connecting.add(peer)
        self._last_connect[peer] = now
        assert self.loop is not None
        self.loop.create_task(self._do_connect(peer))

    async def _do_connect(self, peer: str) -> None:
        host, port = self.cfg.peer_map[peer]
        assert self.loop is not None
        try:
            own = self.cfg.bind or self.cfg.peer_map[self.id][0]
            # leave from our own address so per-address faults (iptables) hit peer traffic as meant
            local = (own, 0) if _is_ip(own) and own not in ("0.0.0.0", "::") else None
            _, conn = await asyncio.wait_for(
                self.loop.create_connection(lambda: _Conn(self, peer), host, port, local_addr=local),
                timeout=1.0,
            )
            sock = conn.transport.get_extra_info("socket") if conn.transport else None
            if sock is not None:
                import socket

                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            self._links[peer] = conn
            if self.cfg.secret is not None:
                conn.send(encode_frame(RequestCode.PEER_HELLO, 0, {"id": self.id}))
                conn.flush()
            log.debug("%s: connected to %s", self.id, peer)
        except (TimeoutError, OSError) as e:
            log.debug("%s: cannot connect to %s: %s", self.id, peer, e)
        finally:
            self._connecting.discard(peer)

    def _check_stalled_links(self, mono: float) -> None:
        """Abort a peer connection whose retransmission timer backed off 3 times (about 1.4 s
        without an acknowledgement: a partition). After a heal a fresh connection works at once,
        while the old one may wait out TCP's exponential back-off for tens of seconds."""
        if mono - self._last_stall_check < 0.2:
            return
        self._last_stall_check = mono
        for peer, link in self._links.items():
            if link is None or link.transport is None or link.closed:
                continue
            backoff = _tcp_backoff(link.transport)
            if backoff >= 3:
                log.info(
                    "%s: connection to %s stalled (TCP back-off %d), reconnecting", self.id, peer, backoff
                )
                link.closed = True
                link.transport.abort()

    def on_conn_lost(self, conn: _Conn) -> None:
        if conn in self._conns:
            self._conns.discard(conn)
            n = self._per_host.get(conn.host, 1) - 1
            if n > 0:
                self._per_host[conn.host] = n
            else:
                self._per_host.pop(conn.host, None)
        if conn.peer is not None and self._links.get(conn.peer) is conn:
            self._links[conn.peer] = None

    # ------------------------------------------------------------ frames

    def on_frame(self, conn: _Conn, payload: bytes) -> None:
        """One frame: a peer message goes to the core (FrameError/DecodeError for a malformed one:
        the caller drops it and closes the connection), a client request is answered (a bad
        argument with UNEXPECTED_ARGUMENT, a store failure with DISK_ERROR). A peer message whose
        handler raises is logged and its connection closed; the sender resends."""
        if len(payload) > self.cfg.max_entry_bytes + _REQUEST_SLACK:
            head = peek_header(payload)
            if head is not None and head[0] in _ENTRY_REQUESTS and not head[2]:
                self._reply(
                    conn,
                    head[0],
                    head[1],
                    Code.UNEXPECTED_ARGUMENT,
                    error=f"request of {len(payload)} bytes exceeds --max-entry-bytes "
                    f"{self.cfg.max_entry_bytes} (+{_REQUEST_SLACK} for the request's fields)",
                )
                return
        code, opaque, is_resp, body = decode_payload(payload)
        if code in _HANDSHAKE:
            self._handshake(conn, code, body)
            return
        if "k" in body:
            msg = from_wire(body)
            if self.cfg.secret is not None and (conn.proved is None or msg.src != conn.proved):
                why = (
                    "a connection that did not prove the secret"
                    if conn.proved is None
                    else f"{conn.proved}'s"
                )
                self._refuse_peer(conn, f"{msg.KIND} from {msg.src!r} on {why}")
                return
            if msg.term > self.core.term + MAX_TERM_STEP:
                # dropping is always safe in Raft; adopting would let forged terms exhaust int64.
                # The guard is not a wall: our term moves up by one step towards it (what an
                # in-range message could do anyway), so members whose terms drifted apart converge
                # again within a few messages instead of ignoring each other for good
                self._refused_terms += 1
                if self._refused_terms == 1 or self._refused_terms % 1000 == 0:
                    log.warning(
                        "%s: dropping %s from %s: term %d is more than %d above ours (%d; %d dropped); "
                        "moving towards it by %d",
                        self.id,
                        msg.KIND,
                        msg.src,
                        msg.term,
                        MAX_TERM_STEP,
                        self.core.term,
                        self._refused_terms,
                        MAX_TERM_STEP,
                    )
                self.core.hear_term(self.core.term + MAX_TERM_STEP)
                self._schedule_drain()
                return
            try:
                self.driver.step(msg, self._now())
            except Exception:  # a handler bug must not kill the server; the sender resends
                log.exception("%s: %s from %s failed", self.id, msg.KIND, msg.src)
                conn.abort()
        elif not is_resp:
            try:
                self._handle_client(conn, code, opaque, body)
            except StoreError as e:  # e.g. a damaged record read by GET: answered, not fatal
                log.error("%s: client request %d: %s", self.id, code, e)
                self._reply(conn, code, opaque, Code.DISK_ERROR, error=str(e))
            except Exception as e:  # a handler bug must not kill the server
                log.exception("%s: client request %d failed", self.id, code)
                self._reply(conn, code, opaque, Code.INTERNAL_ERROR, error=str(e))
        self._schedule_drain()

    def _handshake(self, conn: _Conn, code: int, body: dict[str, Any]) -> None:
        """One step of the peer handshake (see :mod:`dledger.transport`): HELLO on an incoming
        connection gets a CHALLENGE, a CHALLENGE on our own link gets our PROOF (the link is then
        ready), a PROOF proves the claimed member or closes the connection."""
        secret = self.cfg.secret
        if secret is None:
            return  # a group without a secret ignores handshakes
        if code == RequestCode.PEER_HELLO and conn.peer is None:
            claimed = body.get("id")
            if not isinstance(claimed, str) or claimed not in self.cfg.peer_map or claimed == self.id:
                self._refuse_peer(conn, f"hello from {claimed!r}, not a member")
                return
            conn.claimed, conn.nonce = claimed, new_nonce()
            conn.send(encode_frame(RequestCode.PEER_CHALLENGE, 0, {"nonce": conn.nonce}))
        elif code == RequestCode.PEER_CHALLENGE and conn.peer is not None:
            nonce = body.get("nonce")
            if isinstance(nonce, bytes):
                mac = peer_proof(secret, nonce, self.id, conn.peer)
                conn.send(encode_frame(RequestCode.PEER_PROOF, 0, {"mac": mac}))
                conn.ready = True
        elif code == RequestCode.PEER_PROOF and conn.peer is None and conn.claimed and conn.nonce:
            if check_proof(secret, conn.nonce, conn.claimed, self.id, body.get("mac")):
                conn.proved, conn.nonce = conn.claimed, None
            else:
                self._refuse_peer(conn, f"a wrong proof from {conn.claimed!r}")
        else:
            self._refuse_peer(conn, f"handshake frame {code} out of order")

    def _refuse_peer(self, conn: _Conn, why: str) -> None:
        """Close a connection that sent peer traffic it may not send; logged (rate-limited)."""
        self._refused_peers += 1
        if self._refused_peers == 1 or self._refused_peers % 1000 == 0:
            log.warning(
                "%s: refusing peer traffic from %s: %s (%d refused)",
                self.id,
                conn._addr(),
                why,
                self._refused_peers,
            )
        conn.abort()

    def _schedule_drain(self) -> None:
        if not self._drain_scheduled and self.loop is not None:
            self._drain_scheduled = True
            self.loop.call_soon(self._drain_cb)

    def _drain_cb(self) -> None:
        try:
            self._drain()
        except StoreError as e:
            log.critical("%s: store failure, stopping: %s", self.id, e)
            assert self.loop is not None
            self.loop.create_task(self.stop())

    def _drain(self) -> None:
        """Carry out the core's output (:meth:`dledger.driver.Driver.drain`), then write what it
        queued on every connection at once rather than a loop pass later."""
        self._drain_scheduled = False
        self.driver.drain(self._now())
        if self._to_flush:
            self._flush_conns()

    # ------------------------------------------------------------ client requests

    def _base(self, code: int) -> dict[str, Any]:
        return {"code": int(code), "leaderId": self.core.leader_id, "term": self.core.term, "node": self.id}

    def _reply(self, conn: _Conn, req_code: int, opaque: int, code: int, **fields: Any) -> None:
        body = self._base(code)
        body.update(fields)
        conn.send(encode_frame(req_code, opaque, body, response=True))

    def _answer(self, w: _Waiter, code: int, **fields: Any) -> None:
        self._reply(w.conn, w.code, w.opaque, code, **fields)

    def _waiter(self, kind: str, conn: _Conn, req_code: int, opaque: int, key: str | None = None) -> _Waiter:
        return _Waiter(kind, conn, opaque, req_code, self.core.term, time.monotonic() + self._wait_s, key)

    def _handle_client(self, conn: _Conn, code: int, opaque: int, body: dict[str, Any]) -> None:
        group = body.get("group")
        if group is not None and group != self.cfg.group:
            self._reply(
                conn, code, opaque, Code.UNKNOWN_GROUP, error=f"group {group!r}: this is {self.cfg.group!r}"
            )
            return
        if code == RequestCode.APPEND:  # the most frequent request first
            data = body.get("body")
            if not isinstance(data, bytes):
                self._reply(conn, code, opaque, Code.UNEXPECTED_ARGUMENT, error="body: expected bytes")
                return
            self._propose(conn, code, opaque, data, "append")
        elif code == RequestCode.METADATA:
            self._reply(
                conn,
                code,
                opaque,
                Code.SUCCESS,
                peers=self.cfg.peers,
                **self.driver.metadata(),
                connections=len(self._conns),
                bufferedBytes=self.buffered,
                repairBlockedAt=self.repair_blocked_at,
                stats=self.stats(),
            )
        elif code == RequestCode.GET:
            index = body.get("index")
            if type(index) is not int:
                self._reply(conn, code, opaque, Code.UNEXPECTED_ARGUMENT, error="index: expected an int")
                return
            rc, e = self.driver.get(index)
            if rc == Code.INDEX_OUT_OF_RANGE and self.core.end_index < index <= self.core.repair_to:
                # committed here once, lost to damage: kept intact (served), or damaged (said so,
                # so a repairing peer can tell damage on every copy from a member not caught up)
                e = getattr(self.store, "salvaged", {}).get(index)
                if e is None:
                    self._reply(
                        conn,
                        code,
                        opaque,
                        Code.DISK_ERROR,
                        error=f"committed entry {index} is damaged here (repairing up to {self.core.repair_to})",
                    )
                    return
                rc = Code.SUCCESS
            if e is None:
                extra = {"commitIndex": self.core.commit_index} if rc == Code.INDEX_OUT_OF_RANGE else {}
                self._reply(conn, code, opaque, rc, **extra)
            else:
                self._reply(
                    conn,
                    code,
                    opaque,
                    Code.SUCCESS,
                    index=e.index,
                    entryTerm=e.term,
                    body=e.body,
                    magic=e.magic,
                    pos=e.pos,
                )
        elif code == RequestCode.USER_DEFINE:
            self._handle_kv(conn, code, opaque, body)
        elif code == RequestCode.LEADERSHIP_TRANSFER:
            to = body.get("to")
            term = body.get("term")
            if not isinstance(to, str) or (term is not None and type(term) is not int):
                self._reply(conn, code, opaque, Code.UNEXPECTED_ARGUMENT, error="to: expected a member id")
                return
            tid = self._new_id()
            rc = self.core.transfer(to, tid, self._now(), term)
            if rc != Code.SUCCESS:
                self._reply(conn, code, opaque, rc)
                return
            w = self._waiter("transfer", conn, code, opaque)
            w.deadline = time.monotonic() + max(3.0, self.cfg.max_wait_ack_ms / 1000)
            self._transfers[tid] = w
        else:
            self._reply(conn, code, opaque, Code.UNSUPPORTED, error=f"request code {code} is not supported")

    def _new_id(self) -> int:
        self._next_id += 1
        return self._next_id

    def _entry_too_big(self, n: int) -> str | None:
        """Why an entry body of ``n`` bytes is refused (None: it is not): above ``max_entry_bytes``
        (replicating and applying it would hold the event loop past the heartbeat), or larger than
        a data file can hold (48-byte header + 8-byte blank)."""
        if n > self.cfg.max_entry_bytes:
            return f"of {n} bytes exceeds --max-entry-bytes {self.cfg.max_entry_bytes}"
        file_size = getattr(self.store, "data_file_size", None)
        if file_size is not None and n + 56 > file_size:
            return f"of {n} bytes does not fit a data file of {file_size} bytes"
        return None

    def _propose(
        self, conn: _Conn, code: int, opaque: int, data: bytes, kind: str, key: str | None = None
    ) -> None:
        too_big = self._entry_too_big(len(data))
        if too_big:
            # a bad argument, not a disk error: refused before the core appends anything
            self._reply(conn, code, opaque, Code.UNEXPECTED_ARGUMENT, error=f"entry {too_big}")
            return
        rc = self.driver.propose(data, self._waiter(kind, conn, code, opaque, key), self._now())
        if rc != Code.SUCCESS:
            self._reply(conn, code, opaque, rc)

    def _handle_txn(self, conn: _Conn, code: int, opaque: int, body: dict[str, Any]) -> None:
        """A transaction: ``ops`` (micro-ops), optional ``readMode``; through the driver's paths."""
        mode = body.get("readMode") or self.cfg.read_mode
        try:
            data = encode_txn(check_txn_request(body.get("ops")))
            if mode not in READ_MODES:
                raise ValueError(f"readMode {mode!r}: expected one of {READ_MODES}")
        except ValueError as e:
            self._reply(conn, code, opaque, Code.UNEXPECTED_ARGUMENT, error=str(e))
            return
        too_big = self._entry_too_big(len(data))
        if too_big:
            self._reply(conn, code, opaque, Code.UNEXPECTED_ARGUMENT, error=f"txn {too_big}")
            return
        waiter = self._waiter("kv:txn", conn, code, opaque)
        rc = self.driver.kv_txn(body["ops"], mode, waiter, self._now())
        if rc != Code.SUCCESS:
            self._reply(conn, code, opaque, rc)

    def _handle_kv(self, conn: _Conn, code: int, opaque: int, body: dict[str, Any]) -> None:
        op, key = body.get("op"), body.get("key")
        if op == "txn":
            self._handle_txn(conn, code, opaque, body)
            return
        if not isinstance(key, str):
            self._reply(conn, code, opaque, Code.UNEXPECTED_ARGUMENT, error="key: expected a string")
            return
        if op == "get":
            mode = body.get("readMode") or self.cfg.read_mode
            if mode not in READ_MODES:
                self._reply(
                    conn,
                    code,
                    opaque,
                    Code.UNEXPECTED_ARGUMENT,
                    error=f"readMode {mode!r}: expected one of {READ_MODES}",
                )
                return
            # the driver's read paths (shared with the simulator)
            kind = "kv:get" if mode == "raft-log" else "read"
            rc = self.driver.kv_get(key, mode, self._waiter(kind, conn, code, opaque, key), self._now())
            if rc != Code.SUCCESS:
                self._reply(conn, code, opaque, rc)
            return
        wanted = KV_ARGS.get(op, ()) if isinstance(op, str) else ()
        missing = [f for f in wanted if f not in body]  # null is a value, absence is not
        if missing:
            self._reply(
                conn, code, opaque, Code.UNEXPECTED_ARGUMENT, error=f"kv {op}: missing {', '.join(missing)}"
            )
            return
        if op == "put":
            data = encode_kv("put", key, body["value"])
        elif op == "cas":
            data = encode_kv("cas", key, body["expected"], body["new"])
        elif op == "delete":
            data = encode_kv("delete", key)
        else:
            self._reply(
                conn, code, opaque, Code.UNEXPECTED_ARGUMENT, error=f"op {op!r}: expected put|get|cas|delete"
            )
            return
        self._propose(conn, code, opaque, data, f"kv:{op}", key)


def _code_name(code: object) -> str:
    try:
        return Code(code).name  # type: ignore[arg-type]
    except ValueError:
        return repr(code)


def _entry_fields_ok(b: dict[str, Any], index: int) -> bool:
    """Whether a GET answer carries a well-formed entry ``index`` (the store checks its place)."""
    return (
        b.get("index") == index
        and type(b.get("entryTerm")) is int
        and b["entryTerm"] >= 0
        and isinstance(b.get("body"), bytes)
        and b.get("magic") in (1, 2)
        and type(b.get("pos")) is int
        and b["pos"] >= 0
    )


def _process_age() -> str:
    """``"started 0.312s ago"`` from /proc (Linux), or ``"age unknown"``."""
    try:
        start_ticks = int(Path("/proc/self/stat").read_text().rsplit(")", 1)[1].split()[19])
        uptime = float(Path("/proc/uptime").read_text().split()[0])
        return f"started {uptime - start_ticks / os.sysconf('SC_CLK_TCK'):.3f}s ago"
    except (OSError, ValueError, IndexError):
        return "age unknown"


def _tcp_backoff(transport: asyncio.Transport) -> int:
    """``tcpi_backoff`` of the connection (Linux TCP_INFO byte 4; 0 when unavailable)."""
    import socket

    sock = transport.get_extra_info("socket")
    opt = getattr(socket, "TCP_INFO", None)
    if sock is None or opt is None:
        return 0
    try:
        return int(sock.getsockopt(socket.IPPROTO_TCP, opt, 8)[4])
    except (OSError, IndexError):
        return 0


def _is_ip(host: str) -> bool:
    import ipaddress

    try:
        ipaddress.ip_address(host)
        return True
    except ValueError:
        return False


async def run_server(cfg: ServerConfig) -> None:
    """Run until SIGTERM/SIGINT, then shut down cleanly. Sets the interpreter's switch interval
    to :data:`SWITCH_INTERVAL_S` (the process is this member's alone)."""
    import sys

    sys.setswitchinterval(SWITCH_INTERVAL_S)
    server = Server(cfg)
    await server.start()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, lambda: loop.create_task(server.stop()))
    await server.wait_closed()
    log.info("%s: stopped (pid %d)", cfg.self_id, os.getpid())
