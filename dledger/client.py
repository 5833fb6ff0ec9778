"""Synchronous DLedger client with leader discovery and a typed, definite-or-not result.

Follows ``io.openmessaging.storage.dledger.client.DLedgerClient``: the leader is found with METADATA
and NOT_LEADER answers (which carry the responder's leader id) redirect the request. Each call has
one deadline (``timeout`` seconds) covering discovery, redirects and the answer.

:class:`Result` tells a chaos workload whether the outcome is definite: ``outcome`` is ``"ok"``
(code 200), ``"fail"`` (the op certainly did not take effect: nothing was sent, NOT_LEADER after the
redirect, or any other code) or ``"info"`` (indeterminate: timeout or connection lost after the
request was sent, TERM_CHANGED 501, WAIT_QUORUM_ACK_TIMEOUT 502). One client per thread.
"""

from __future__ import annotations

import itertools
import select
import socket
import threading
import time
from dataclasses import dataclass
from typing import Any

from dledger.protocol import Code, RequestCode, parse_peers
from dledger.transport import DEFAULT_MAX_FRAME, FrameDecoder, FrameError, decode_payload, encode_frame

INDETERMINATE_CODES = frozenset(
    {int(Code.TERM_CHANGED), int(Code.WAIT_QUORUM_ACK_TIMEOUT), int(Code.TIMEOUT)}
)


@dataclass
class Result:
    """The outcome of one client call (see the module docstring for ``outcome``).

    ``code`` is the DLedger response code (200 on success; -1 when no answer came), ``error`` a
    text or None, ``leader_id``/``term`` the answering node's view, ``index`` the log index (append
    and KV writes), ``body`` the entry body (get), ``value`` the KV value (kv_get; None when absent),
    ``applied`` whether a kv_cas applied, ``node`` the member that answered (or was last tried).
    """

    outcome: str
    code: int = -1
    error: str | None = None
    leader_id: str | None = None
    term: int = -1
    index: int = -1
    body: bytes | None = None
    value: Any = None
    applied: bool | None = None
    node: str | None = None
    raw: dict[str, Any] | None = None

    @property
    def ok(self) -> bool:
        return self.outcome == "ok"

    @property
    def definite(self) -> bool:
        """True for ok and fail, False for info."""
        return self.outcome != "info"


class _Unsent(Exception):
    """Nothing reached the server (connect failed or the send failed before any byte left)."""


class _Lost(Exception):
    """The request was sent but no answer came (timeout or connection lost)."""


class _NodeConn:
    def __init__(self, host: str, port: int, max_frame: int) -> None:
        self.host, self.port = host, port
        self.sock: socket.socket | None = None
        self.decoder = FrameDecoder(max_frame)

    def close(self) -> None:
        if self.sock is not None:
            try:
                self.sock.close()
            except OSError:
                pass
        self.sock = None
        self.decoder = FrameDecoder(self.decoder.max_frame)

    def call(self, frame: bytes, opaque: int, deadline: float) -> dict[str, Any]:
        if self.sock is not None:
            # an idle connection with something to read was closed by the server (e.g. a restart)
            try:
                readable, _, _ = select.select([self.sock], [], [], 0)
            except (OSError, ValueError):
                readable = [self.sock]
            if readable:
                self.close()
        if self.sock is None:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise _Unsent("timed out before connecting")
            try:
                s = socket.create_connection((self.host, self.port), timeout=remaining)
            except OSError as e:
                raise _Unsent(f"cannot connect to {self.host}:{self.port}: {e}") from None
            s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            self.sock = s
        try:
            self.sock.settimeout(max(deadline - time.monotonic(), 0.001))
            self.sock.sendall(frame)
        except OSError as e:
            # the server may have read part of it; a closed idle connection is the common case
            self.close()
            raise _Lost(f"send to {self.host}:{self.port} failed: {e}") from None
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                self.close()
                raise _Lost("timed out waiting for the answer")
            try:
                self.sock.settimeout(remaining)
                data = self.sock.recv(1 << 16)
            except TimeoutError:
                self.close()
                raise _Lost("timed out waiting for the answer") from None
            except OSError as e:
                self.close()
                raise _Lost(f"connection to {self.host}:{self.port} lost: {e}") from None
            if not data:
                self.close()
                raise _Lost(f"connection to {self.host}:{self.port} closed by the server")
            try:
                payloads = self.decoder.feed(data)
            except FrameError as e:
                self.close()
                raise _Lost(str(e)) from None
            for p in payloads:
                try:
                    _, op, is_resp, body = decode_payload(p)
                except FrameError:
                    continue
                if is_resp and op == opaque:
                    return body


class DLedgerClient:
    """Client of one DLedger group (see docs/design.md for the contract).

    ``peers`` is DLedger's ``"n1-host:port;n2-host:port"``; ``timeout`` seconds per call;
    ``prefer`` the member to talk to first (reads and gets go there; writes go to the known leader).
    ``sticky=True`` talks to ``prefer`` only: no leader discovery, redirect or fallback, so every
    answer (a deposed leader's included) is that member's, and NOT_LEADER is a ``fail`` (chaos
    workloads use it to observe what a node serves on its own, as Jepsen clients bound to a node).
    Raises ValueError for malformed ``peers``, an unknown ``prefer``, or ``sticky`` without it.
    """

    def __init__(
        self,
        peers: str,
        timeout: float = 1.0,
        group: str = "default",
        prefer: str | None = None,
        max_frame: int = DEFAULT_MAX_FRAME,
        sticky: bool = False,
    ) -> None:
        self.peers = parse_peers(peers)
        if prefer is not None and prefer not in self.peers:
            raise ValueError(f"prefer {prefer!r}: expected one of {list(self.peers)}")
        if sticky and prefer is None:
            raise ValueError("sticky: expected a prefer member to stick to")
        self.sticky = sticky
        if not (isinstance(timeout, int | float) and timeout > 0):
            raise ValueError(f"timeout {timeout!r}: expected seconds > 0")
        self.timeout = float(timeout)
        self.group = group
        self.prefer = prefer
        self.leader: str | None = None
        self._conns = {n: _NodeConn(h, p, max_frame) for n, (h, p) in self.peers.items()}
        self._opaque = itertools.count(1)
        self._lock = threading.Lock()

    def close(self) -> None:
        for c in self._conns.values():
            c.close()

    def __enter__(self) -> DLedgerClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ------------------------------------------------------------ public calls

    def append(self, body: bytes) -> Result:
        """APPEND ``body`` through the leader; ``index`` is the entry's index when ok."""
        if not isinstance(body, bytes | bytearray):
            raise TypeError(f"body: expected bytes, got {type(body).__name__}")
        return self._call(RequestCode.APPEND, {"body": bytes(body)}, write=True)

    def get(self, index: int) -> Result:
        """GET the committed entry at ``index`` from the preferred member only (any member answers
        within its own commitIndex; without ``prefer`` the first reachable one); INDEX_OUT_OF_RANGE
        410 beyond it. ``raw`` also has ``pos``, ``entryTerm`` and ``magic``."""
        if type(index) is not int:
            raise TypeError(f"index: expected an int, got {type(index).__name__}")
        return self._call(RequestCode.GET, {"index": index}, write=False, redirect=False)

    def metadata(self) -> Result:
        """METADATA of the preferred member only (else the first reachable one): ``leader_id`` and
        ``term``; ``raw`` has role, commitIndex, ledgerBeginIndex, ledgerEndIndex, appliedIndex."""
        return self._call(RequestCode.METADATA, {}, write=False, redirect=False)

    def kv_put(self, key: str, value: Any) -> Result:
        return self._call(
            RequestCode.USER_DEFINE, {"op": "put", "key": _key(key), "value": value}, write=True
        )

    def kv_get(self, key: str, read_mode: str | None = None) -> Result:
        """Read ``key``; ``value`` None when absent. ``read_mode`` (raft-log, read-index, lease,
        unsafe) overrides the server's ``--read-mode`` for this read."""
        body: dict[str, Any] = {"op": "get", "key": _key(key)}
        if read_mode is not None:
            body["readMode"] = read_mode
        return self._call(RequestCode.USER_DEFINE, body, write=False)

    def kv_cas(self, key: str, expected: Any, new: Any) -> Result:
        """Compare-and-set; ok with ``applied`` True/False, ``expected=None`` means absent."""
        return self._call(
            RequestCode.USER_DEFINE,
            {"op": "cas", "key": _key(key), "expected": expected, "new": new},
            write=True,
        )

    def kv_txn(self, ops: list[list[Any]], read_mode: str | None = None) -> Result:
        """A transaction of micro-ops ``[["r", key, None] | ["w", key, v] | ["append", key, v], ...]``
        (and ``add``, ``sadd``, ``init``: :mod:`dledger.statemachine`) (keys strings) applied
        atomically as one entry; ``value`` is the completed list, each read
        with the value read (None when absent, a list for an appended key). A transaction that only
        reads is served like :meth:`kv_get` (the preferred member first, ``read_mode`` overriding the
        server's); one that writes goes to the leader. An aborted transaction is a ``fail``
        (UNEXPECTED_ARGUMENT, nothing applied). Raises TypeError for a malformed ``ops``."""
        if not isinstance(ops, list) or not all(isinstance(m, list | tuple) and len(m) == 3 for m in ops):
            raise TypeError("ops: expected a list of [f, key, value] micro-ops")
        body: dict[str, Any] = {"op": "txn", "key": "", "ops": [list(m) for m in ops]}
        if read_mode is not None:
            body["readMode"] = read_mode
        return self._call(RequestCode.USER_DEFINE, body, write=any(m[0] != "r" for m in ops))

    def kv_delete(self, key: str) -> Result:
        return self._call(RequestCode.USER_DEFINE, {"op": "delete", "key": _key(key)}, write=True)

    def leadership_transfer(self, to: str, term: int | None = None) -> Result:
        """Ask the leader to hand leadership to ``to``; ok once ``to`` leads."""
        if to not in self.peers:
            raise ValueError(f"to {to!r}: expected one of {list(self.peers)}")
        body: dict[str, Any] = {"to": to}
        if term is not None:
            body["term"] = term
        return self._call(RequestCode.LEADERSHIP_TRANSFER, body, write=True, timeout=max(self.timeout, 3.0))

    # ------------------------------------------------------------ machinery

    def _order(self, write: bool) -> list[str]:
        first = [self.leader, self.prefer] if write else [self.prefer, self.leader]
        out: list[str] = []
        for n in [*first, *self.peers]:
            if n is not None and n not in out:
                out.append(n)
        return out

    def _call(
        self,
        code: int,
        body: dict[str, Any],
        write: bool,
        redirect: bool = True,
        timeout: float | None = None,
    ) -> Result:
        with self._lock:
            return self._call_locked(code, body, write, redirect, timeout or self.timeout)

    def _call_locked(
        self, code: int, body: dict[str, Any], write: bool, redirect: bool, timeout: float
    ) -> Result:
        deadline = time.monotonic() + timeout
        body = dict(body, group=self.group)
        candidates = self._order(write)
        if self.sticky:
            redirect = False
        if not redirect and self.prefer is not None:
            candidates = [self.prefer]  # a member-specific read (get, metadata) must not fall back
        target = candidates[0]
        tried: set[str] = set()
        redirects = 0
        last_error = "no member reachable"
        while True:
            tried.add(target)
            opaque = next(self._opaque)
            frame = encode_frame(code, opaque, body)
            try:
                resp = self._conns[target].call(frame, opaque, deadline)
            except _Unsent as e:
                last_error = str(e)
                if target == self.leader:
                    self.leader = None
                nxt = next((n for n in candidates if n not in tried), None)
                if nxt is None or time.monotonic() >= deadline:
                    return Result("fail", -1, last_error, node=target)
                target = nxt
                continue
            except _Lost as e:
                if target == self.leader:
                    self.leader = None
                return Result("info", -1, str(e), node=target)
            rc = resp.get("code", -1)
            leader = resp.get("leaderId")
            if isinstance(leader, str) and leader in self.peers:
                self.leader = leader
            if rc == Code.NOT_LEADER and redirect and redirects < 3 and time.monotonic() < deadline:
                redirects += 1
                if isinstance(leader, str) and leader in self.peers and leader != target:
                    target = leader
                    continue
                nxt = next((n for n in candidates if n not in tried), None)
                if nxt is not None:
                    target = nxt
                    continue
            return self._result(rc, resp, target)

    @staticmethod
    def _result(rc: Any, resp: dict[str, Any], node: str) -> Result:
        if rc == Code.SUCCESS:
            outcome = "ok"
        elif rc in INDETERMINATE_CODES:
            outcome = "info"
        else:
            outcome = "fail"
        err = resp.get("error")
        if err is None and rc != Code.SUCCESS:
            try:
                err = Code(rc).name
            except ValueError:
                err = f"code {rc}"
        applied = resp.get("applied")
        return Result(
            outcome=outcome,
            code=rc if isinstance(rc, int) else -1,
            error=err,
            leader_id=resp.get("leaderId"),
            term=resp.get("term", -1),
            index=resp.get("index", -1),
            body=resp.get("body") if isinstance(resp.get("body"), bytes) else None,
            value=resp.get("value"),
            applied=applied if isinstance(applied, bool) else None,
            node=resp.get("node", node),
            raw=resp,
        )


def _key(key: str) -> str:
    if not isinstance(key, str):
        raise TypeError(f"key: expected a string, got {type(key).__name__}")
    return key
