"""DLedger's wire vocabulary: request codes, response codes, vote/parse results, peer messages.

Follows ``io.openmessaging.storage.dledger.protocol`` (DLedgerRequestCode, DLedgerResponseCode,
VoteResponse.RESULT / ParseResult, PushEntryRequest.Type) of openmessaging/dledger 0.2.x. The peer
messages are plain dataclasses; :func:`to_wire` / :func:`from_wire` turn them into msgpack-able
dicts and back, validating every field's type and range (a bad field raises :class:`DecodeError`).

Ranges follow DLedger's Java types: terms, indexes and positions are longs (int64) and never
negative except the -1 that means "none"; codes and the entry channel are ints (int32); ids are
short strings. A forged ``term = 2**64 - 1`` used to be adopted, persisted and then break the entry
codec for good; now it is refused here. A term inside the int64 range but more than
:data:`MAX_TERM_STEP` above the receiver's own is dropped by the server (see there), so forged
terms cannot walk the group to the end of the range either.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from enum import IntEnum
from typing import Any, ClassVar

from dledger.store import Entry


class Code(IntEnum):
    """DLedgerResponseCode: the outcome carried in every response body."""

    UNKNOWN = -1
    SUCCESS = 200
    TIMEOUT = 300
    METADATA_ERROR = 301
    NETWORK_ERROR = 302
    UNSUPPORTED = 303
    UNKNOWN_GROUP = 400
    UNKNOWN_MEMBER = 401
    UNEXPECTED_MEMBER = 402
    EXPIRED_TERM = 403
    NOT_LEADER = 404
    NOT_FOLLOWER = 405
    INCONSISTENT_STATE = 406
    INCONSISTENT_TERM = 407
    INCONSISTENT_INDEX = 408
    INCONSISTENT_LEADER = 409
    INDEX_OUT_OF_RANGE = 410
    UNEXPECTED_ARGUMENT = 411
    REPEATED_REQUEST = 412
    REPEATED_PUSH = 413
    DISK_ERROR = 414
    DISK_FULL = 415
    TERM_NOT_READY = 416
    FALL_BEHIND_TOO_MUCH = 417
    TAKE_LEADERSHIP_FAILED = 418
    INDEX_LESS_THAN_LOCAL_BEGIN = 419
    REQUEST_WITH_EMPTY_BODYS = 420
    PUSH_REQUEST_IS_FULL = 421
    INTERNAL_ERROR = 500
    TERM_CHANGED = 501
    WAIT_QUORUM_ACK_TIMEOUT = 502
    LEADER_PENDING_FULL = 503
    ILLEGAL_MEMBER_STATE = 504
    LEADER_NOT_READY = 505
    LEADER_TRANSFERRING = 506


class RequestCode(IntEnum):
    """DLedgerRequestCode; KV uses DLedger master's USER_DEFINE slot."""

    METADATA = 50000
    APPEND = 50001
    GET = 50002
    VOTE = 51001
    PEER_HELLO = 51100  # peer authentication (dledger.transport): connecting member's id
    PEER_CHALLENGE = 51101  # the accepting member's nonce
    PEER_PROOF = 51102  # the connecting member's MAC
    HEART_BEAT = 51002
    PULL = 51003
    PUSH = 51004
    LEADERSHIP_TRANSFER = 51005
    INSTALL_SNAPSHOT = 51006
    USER_DEFINE = 59999


class VoteResult:
    """VoteResponse.RESULT names (sent by name on the wire, as DLedger's fastjson does)."""

    UNKNOWN = "UNKNOWN"
    ACCEPT = "ACCEPT"
    REJECT_UNKNOWN_LEADER = "REJECT_UNKNOWN_LEADER"
    REJECT_UNEXPECTED_LEADER = "REJECT_UNEXPECTED_LEADER"
    REJECT_EXPIRED_VOTE_TERM = "REJECT_EXPIRED_VOTE_TERM"
    REJECT_ALREADY_VOTED = "REJECT_ALREADY_VOTED"
    REJECT_ALREADY_HAS_LEADER = "REJECT_ALREADY_HAS_LEADER"
    REJECT_TERM_NOT_READY = "REJECT_TERM_NOT_READY"
    REJECT_TERM_SMALL_THAN_LEDGER = "REJECT_TERM_SMALL_THAN_LEDGER"
    REJECT_EXPIRED_LEDGER_TERM = "REJECT_EXPIRED_LEDGER_TERM"
    REJECT_SMALL_LEDGER_END_INDEX = "REJECT_SMALL_LEDGER_END_INDEX"
    REJECT_TAKING_LEADERSHIP = "REJECT_TAKING_LEADERSHIP"

    ALL: ClassVar[frozenset[str]] = frozenset()


VoteResult.ALL = frozenset(v for k, v in vars(VoteResult).items() if k.isupper() and isinstance(v, str))


class ParseResult:
    """DLedgerLeaderElector.VoteResponse.ParseResult: what a candidate does after a vote round."""

    WAIT_TO_REVOTE = "WAIT_TO_REVOTE"
    REVOTE_IMMEDIATELY = "REVOTE_IMMEDIATELY"
    PASSED = "PASSED"
    WAIT_TO_VOTE_NEXT = "WAIT_TO_VOTE_NEXT"


class PushType:
    """PushEntryRequest.Type."""

    APPEND = "APPEND"
    COMMIT = "COMMIT"
    COMPARE = "COMPARE"
    TRUNCATE = "TRUNCATE"
    INSTALL_SNAPSHOT = "INSTALL_SNAPSHOT"

    ALL: ClassVar[frozenset[str]] = frozenset({"APPEND", "COMMIT", "COMPARE", "TRUNCATE", "INSTALL_SNAPSHOT"})


class DecodeError(ValueError):
    """A frame or message that does not match the protocol (names the field and what was expected)."""


# ---------------------------------------------------------------- peer messages


@dataclass(slots=True)
class Message:
    """Base fields of every DLedger message: group, sender (localId), receiver (remoteId), term."""

    KIND: ClassVar[str] = ""
    group: str
    src: str
    dst: str
    term: int


@dataclass(slots=True)
class VoteRequest(Message):
    """VoteRequest: a candidate asks for a vote at ``term`` with its ledger end."""

    KIND: ClassVar[str] = "vote"
    ledger_end_index: int = -1
    ledger_end_term: int = -1
    round: int = 0


@dataclass(slots=True)
class VoteResponse(Message):
    """VoteResponse: ``result`` is a VoteResult name; ``term`` as in handleVote (see the spec)."""

    KIND: ClassVar[str] = "vote_r"
    result: str = VoteResult.UNKNOWN
    round: int = 0


@dataclass(slots=True)
class HeartbeatRequest(Message):
    """HeartBeatRequest (base fields; src is the leader)."""

    KIND: ClassVar[str] = "hb"
    round: int = 0


@dataclass(slots=True)
class HeartbeatResponse(Message):
    """HeartBeatResponse: ``code`` is SUCCESS, EXPIRED_TERM, INCONSISTENT_LEADER, TERM_NOT_READY, ..."""

    KIND: ClassVar[str] = "hb_r"
    code: int = Code.SUCCESS
    round: int = 0


@dataclass(slots=True)
class PushRequest(Message):
    """PushEntryRequest: ``type`` is a PushType; ``index`` is the compare/truncate index or the first
    appended index; ``prev_term`` the term of ``index - 1`` (APPEND only; an extra check over DLedger);
    ``epoch`` tags the dispatcher state so stale answers are ignored."""

    KIND: ClassVar[str] = "push"
    type: str = PushType.APPEND
    index: int = -1
    prev_term: int = -1
    commit_index: int = -1
    epoch: int = 0
    entries: list[Entry] = field(default_factory=list)
    snapshot: bytes = b""
    next_pos: int = -1  # INSTALL_SNAPSHOT: the data-log position of entry ``index + 1``
    chain_crc: int = -1  # INSTALL_SNAPSHOT: chainCrc of entry ``index`` on the leader (-1: unknown)


@dataclass(slots=True)
class PushResponse(Message):
    """PushEntryResponse: ``index`` is the last index covered, ``begin_index``/``end_index`` the
    follower's ledger range."""

    KIND: ClassVar[str] = "push_r"
    type: str = PushType.APPEND
    code: int = Code.SUCCESS
    index: int = -1
    begin_index: int = 0
    end_index: int = -1
    epoch: int = 0


@dataclass(slots=True)
class TakeLeadershipRequest(Message):
    """LeadershipTransferRequest forwarded by the leader (src) to the transferee (dst)."""

    KIND: ClassVar[str] = "take"
    take_leadership_index: int = -1


@dataclass(slots=True)
class TakeLeadershipResponse(Message):
    """The transferee's answer: SUCCESS once leader, else TAKE_LEADERSHIP_FAILED / EXPIRED_TERM / 409."""

    KIND: ClassVar[str] = "take_r"
    code: int = Code.SUCCESS


MESSAGE_TYPES: dict[str, type[Message]] = {
    c.KIND: c
    for c in (
        VoteRequest,
        VoteResponse,
        HeartbeatRequest,
        HeartbeatResponse,
        PushRequest,
        PushResponse,
        TakeLeadershipRequest,
        TakeLeadershipResponse,
    )
}

_FIELD_TYPES: dict[type[Message], list[tuple[str, str]]] = {
    c: [(f.name, str(f.type)) for f in dataclasses.fields(c)] for c in MESSAGE_TYPES.values()
}


def entry_to_wire(e: Entry) -> list[Any]:
    """[index, term, body, magic, pos, channel]."""
    return [e.index, e.term, e.body, e.magic, e.pos, e.channel]


INT32_MIN, INT32_MAX = -(2**31), 2**31 - 1
INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1
MAX_TERM = INT64_MAX
"""The largest term accepted from the wire (DLedger's long)."""
MAX_INDEX = INT64_MAX
"""The largest index or position accepted from the wire (DLedger's long)."""
MAX_TERM_STEP = 2**20
"""How far above its own term a member lets a peer message take it; the server drops messages
beyond (an extension over DLedger). Raft's terms grow by one per election, so honest members never
differ by this much, while 2**43 forged messages would be needed to exhaust the int64 range."""
MAX_ID_LEN = 256
"""Longest group or member id accepted from the wire (characters)."""

# (lowest, highest) allowed for every int field of a peer message; -1 means "none" where allowed
_INT_RANGES: dict[str, tuple[int, int]] = {
    "term": (0, MAX_TERM),
    "ledger_end_index": (-1, MAX_INDEX),
    "ledger_end_term": (-1, MAX_TERM),
    "round": (INT64_MIN, INT64_MAX),
    "epoch": (INT64_MIN, INT64_MAX),
    "code": (INT32_MIN, INT32_MAX),
    "index": (-1, MAX_INDEX),
    "prev_term": (-1, MAX_TERM),
    "commit_index": (-1, MAX_INDEX),
    "begin_index": (-1, MAX_INDEX),
    "end_index": (-1, MAX_INDEX),
    "take_leadership_index": (-1, MAX_INDEX),
    "next_pos": (-1, INT64_MAX),
    "chain_crc": (-1, 2**32 - 1),
}
_ENTRY_RANGES: tuple[tuple[str, int, int], ...] = (
    ("index", 0, MAX_INDEX),
    ("term", 0, MAX_TERM),
    ("magic", 1, 2),  # MAGIC_NORMAL, MAGIC_NOOP
    ("pos", -1, INT64_MAX),
    ("channel", INT32_MIN, INT32_MAX),
)


def _check_int(where: str, v: Any, lo: int, hi: int) -> int:
    if type(v) is not int:
        raise DecodeError(f"{where}: expected an int, got {type(v).__name__}")
    if not lo <= v <= hi:
        raise DecodeError(f"{where}: {v} outside {lo}..{hi}")
    return v


def entry_from_wire(raw: Any, where: str = "entry") -> Entry:
    """Inverse of :func:`entry_to_wire`; DecodeError for anything else (wrong shape, type or range:
    index 0..MAX_INDEX, term 0..MAX_TERM, magic 1|2, pos -1..int64, channel int32)."""
    if not isinstance(raw, (list, tuple)) or len(raw) != 6:
        raise DecodeError(f"{where}: expected a list of 6 fields, got {type(raw).__name__}")
    body = raw[2]
    fields = (raw[0], raw[1], raw[3], raw[4], raw[5])
    for (name, lo, hi), v in zip(_ENTRY_RANGES, fields, strict=True):
        _check_int(f"{where}.{name}", v, lo, hi)
    if not isinstance(body, bytes):
        raise DecodeError(f"{where}.body: expected bytes, got {type(body).__name__}")
    return Entry(raw[0], raw[1], body, raw[3], raw[4], raw[5])


def _entries_from_wire(raw: list[Any], kind: str) -> list[Entry]:
    """:func:`entry_from_wire` of every item, with the same checks inlined for the well-formed
    ones (a pushed batch holds up to a thousand entries); an item that fails any check goes
    through :func:`entry_from_wire`, which raises DecodeError naming it."""
    out: list[Entry] = []
    add = out.append
    for i, e in enumerate(raw):
        if type(e) is list and len(e) == 6:
            index, term, body, magic, pos, channel = e
            if (
                type(index) is int
                and type(term) is int
                and type(body) is bytes
                and type(magic) is int
                and type(pos) is int
                and type(channel) is int
                and 0 <= index <= MAX_INDEX
                and 0 <= term <= MAX_TERM
                and 1 <= magic <= 2
                and -1 <= pos <= INT64_MAX
                and INT32_MIN <= channel <= INT32_MAX
            ):
                add(Entry(index, term, body, magic, pos, channel))
                continue
        add(entry_from_wire(e, f"{kind}.entries[{i}]"))
    return out


def to_wire(msg: Message) -> dict[str, Any]:
    """The msgpack-able dict of a peer message (``k`` names its kind)."""
    out: dict[str, Any] = {"k": msg.KIND}
    for name, _ in _FIELD_TYPES[type(msg)]:
        v = getattr(msg, name)
        if name == "entries":
            v = [entry_to_wire(e) for e in v]
        out[name] = v
    return out


def from_wire(raw: Any) -> Message:
    """Decode a dict made by :func:`to_wire`; DecodeError names the bad field and the expected type
    or range (see the module docstring). Nothing outside those ranges reaches the core."""
    if not isinstance(raw, dict):
        raise DecodeError(f"message: expected a map, got {type(raw).__name__}")
    kind = raw.get("k")
    cls = MESSAGE_TYPES.get(kind) if isinstance(kind, str) else None
    if cls is None:
        raise DecodeError(f"message kind {str(kind)[:40]!r}: expected one of {sorted(MESSAGE_TYPES)}")
    kwargs: dict[str, Any] = {}
    for name, typ in _FIELD_TYPES[cls]:
        if name not in raw:
            raise DecodeError(f"{kind}.{name}: missing")
        v = raw[name]
        if name == "entries":
            if not isinstance(v, list):
                raise DecodeError(f"{kind}.entries: expected a list, got {type(v).__name__}")
            v = _entries_from_wire(v, cls.KIND)
        elif typ == "int":
            lo, hi = _INT_RANGES[name]
            _check_int(f"{kind}.{name}", v, lo, hi)
        elif typ == "str":
            if not isinstance(v, str):
                raise DecodeError(f"{kind}.{name}: expected a string, got {type(v).__name__}")
            if len(v) > MAX_ID_LEN:
                raise DecodeError(f"{kind}.{name}: string of {len(v)} characters, at most {MAX_ID_LEN}")
        elif typ == "bytes":
            if not isinstance(v, bytes):
                raise DecodeError(f"{kind}.{name}: expected bytes, got {type(v).__name__}")
        kwargs[name] = v
    msg = cls(**kwargs)
    if isinstance(msg, PushRequest | PushResponse) and msg.type not in PushType.ALL:
        raise DecodeError(f"{kind}.type {msg.type!r}: expected one of {sorted(PushType.ALL)}")
    if isinstance(msg, VoteResponse) and msg.result not in VoteResult.ALL:
        raise DecodeError(f"vote_r.result {msg.result!r}: expected a VoteResult name")
    return msg


# ---------------------------------------------------------------- peers


def parse_peers(peers: str) -> dict[str, tuple[str, int]]:
    """Parse DLedger's ``"n0-host:port;n1-host:port"`` (id = text before the first ``-``; a trailing
    ``;`` is allowed) into ``{id: (host, port)}`` in the given order.

    Raises ValueError naming the bad entry and the expected form.
    """
    out: dict[str, tuple[str, int]] = {}
    if not isinstance(peers, str):
        raise ValueError(f"peers {peers!r}: expected a string like 'n0-host:port;n1-host:port'")
    for part in peers.split(";"):
        part = part.strip()
        if not part:
            continue
        node_id, sep, addr = part.partition("-")
        host, sep2, port_s = addr.rpartition(":")
        if not sep or not sep2 or not node_id or not host or not port_s.isdigit():
            raise ValueError(f"peers entry {part!r}: expected ID-HOST:PORT, e.g. n0-127.0.0.1:20911")
        port = int(port_s)
        if not 0 < port < 65536:
            raise ValueError(f"peers entry {part!r}: port {port} outside 1..65535")
        if node_id in out:
            raise ValueError(f"peers: member id {node_id!r} appears twice")
        out[node_id] = (host, port)
    if not out:
        raise ValueError(f"peers {peers!r}: expected at least one ID-HOST:PORT entry")
    return out
