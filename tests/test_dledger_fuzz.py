"""Property tests (hypothesis) of the frame decoder, the message decoder (every field's range and type)
and the core's handlers; a real server fed garbage; and a real 3-member group on loopback fed hostile
frames of every message type (out-of-range integers, wrong types, missing fields, truncated,
garbled and oversized frames) that must still elect, append and read afterwards (issue 16)."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from pathlib import Path

import msgpack
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_dledger_bounds import (
    RSS_BOUND_KIB,
    assert_group_works,
    attacker,
    closed_by_server,
    curr_term,
    peak_rss_kib,
)
from test_dledger_cluster import Cluster
from test_dledger_core import rejoin_through_snapshot

from dledger.client import DLedgerClient
from dledger.core import Core, CoreConfig
from dledger.driver import write_log
from dledger.protocol import (
    MESSAGE_TYPES,
    DecodeError,
    Message,
    PushRequest,
    PushType,
    VoteResult,
    from_wire,
    to_wire,
)
from dledger.sim import SimLogStore
from dledger.store import Entry, StoreError
from dledger.transport import FrameDecoder, FrameError, decode_payload, encode_frame

MAX = 4096


@given(st.lists(st.binary(max_size=3000), max_size=30))
@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_frame_decoder_never_raises_unexpectedly_and_stays_bounded(chunks: list[bytes]) -> None:
    dec = FrameDecoder(MAX)
    for c in chunks:
        try:
            for p in dec.feed(c):
                assert len(p) <= MAX
                try:
                    decode_payload(p)
                except FrameError:
                    pass
        except FrameError:
            dec = FrameDecoder(MAX)  # the server closes the connection here
        assert dec.buffered <= MAX + 4 + len(c)


@given(st.lists(st.binary(max_size=200), max_size=5), st.lists(st.integers(1, 50), max_size=20))
@settings(deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_frames_roundtrip_under_any_split(bodies: list[bytes], cuts: list[int]) -> None:
    wire = b"".join(encode_frame(50001, i, {"body": b}) for i, b in enumerate(bodies))
    dec = FrameDecoder(MAX)
    got = []
    pos = 0
    for c in cuts + [len(wire)]:
        got += dec.feed(wire[pos : pos + c])
        pos += c
    got += dec.feed(wire[pos:])
    assert [decode_payload(p)[3]["body"] for p in got] == bodies


def test_oversized_frame_is_refused_before_buffering() -> None:
    dec = FrameDecoder(MAX)
    try:
        dec.feed((MAX + 1).to_bytes(4, "big") + b"x" * 10)
        raise AssertionError("expected FrameError")
    except FrameError as e:
        assert "exceeds" in str(e)
    assert dec.buffered == 0


json_like = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**63), 2**63 - 1)
    | st.text(max_size=10)
    | st.binary(max_size=10),
    lambda ch: st.lists(ch, max_size=4) | st.dictionaries(st.text(max_size=8), ch, max_size=4),
    max_leaves=12,
)


@given(
    st.dictionaries(
        st.sampled_from(["k", "group", "src", "dst", "term", "type", "entries", "index", "result"]), json_like
    )
)
@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_from_wire_only_raises_decode_error(raw: dict) -> None:
    try:
        from_wire(raw)
    except DecodeError:
        pass


PEERS = ["n0", "n1", "n2"]
ids = st.sampled_from(PEERS)
terms = st.integers(0, 6)
idx = st.integers(-1, 8)
entries = st.lists(
    st.builds(
        Entry, st.integers(0, 8), terms, st.binary(max_size=4), st.sampled_from([1, 2]), st.integers(-1, 400)
    ),
    max_size=3,
)


@st.composite
def messages(draw: st.DrawFn) -> dict:
    kind = draw(st.sampled_from(sorted(MESSAGE_TYPES)))
    cls = MESSAGE_TYPES[kind]
    msg = cls("default", draw(ids), "n0", draw(terms))
    for name in (
        "ledger_end_index",
        "ledger_end_term",
        "round",
        "index",
        "prev_term",
        "commit_index",
        "epoch",
        "begin_index",
        "end_index",
        "take_leadership_index",
    ):
        if hasattr(msg, name):
            setattr(msg, name, draw(terms if name in ("ledger_end_term", "prev_term") else idx))
    if hasattr(msg, "type"):
        msg.type = draw(st.sampled_from(sorted(PushType.ALL)))
    if hasattr(msg, "entries"):
        msg.entries = draw(entries)
    if hasattr(msg, "result"):
        msg.result = draw(st.sampled_from(sorted(VoteResult.ALL)))
    if hasattr(msg, "code"):
        msg.code = draw(st.sampled_from([200, 403, 404, 406, 409, 416, 418]))
    return to_wire(msg)


@given(
    st.lists(st.tuples(messages(), st.integers(0, 500)), max_size=40), st.lists(st.integers(0, 2), max_size=6)
)
@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_core_handlers_survive_any_message_sequence(
    msgs: list[tuple[dict, int]], log_terms: list[int]
) -> None:
    store = SimLogStore()
    for i, t in enumerate(sorted(log_terms)):
        store.append(Entry(i, t, b"x"))
    core = Core(CoreConfig(self_id="n0", peers=PEERS), store, term=2)
    now = 0
    for raw, dt in msgs:
        now += dt
        core.step(from_wire(msgpack.unpackb(msgpack.packb(raw, use_bin_type=True), raw=False)), now)
        core.tick(now)
        rd = core.ready(now)
        try:
            write_log(store, rd)  # the driver's writes: the core never writes its store
        except StoreError:
            core.on_write_failed()
        else:
            core.advance()
        assert (store.begin_index, store.end_index, store.end_term) == (
            core.begin_index,
            core.end_index,
            core.end_term,
        )
        core.on_synced(store.end_index, now)
        assert store.begin_index - 1 <= core.commit_index <= store.end_index
        assert all(m.src == "n0" for m in rd.messages)
        # terms never go down
        assert core.term >= 2
    # the log is still a valid log: consecutive indexes, non-decreasing terms
    ts = [store.get(i).term for i in range(store.begin_index, store.end_index + 1)]
    assert ts == sorted(ts)


def test_real_server_survives_garbage(tmp_path: Path) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    peers = f"n0-127.0.0.1:{port}"
    log = open(tmp_path / "n0.log", "wb")  # noqa: SIM115
    p = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "dledger.cli",
            "server",
            "--id",
            "n0",
            "--peers",
            peers,
            "--memory",
            "--max-frame",
            "65536",
        ],
        stdout=log,
        stderr=log,
    )
    try:
        c = DLedgerClient(peers, timeout=1.0)
        deadline = time.monotonic() + 20
        while c.metadata().leader_id != "n0":
            assert time.monotonic() < deadline
            time.sleep(0.1)
        import random

        rng = random.Random(5)
        garbage = [
            (10**9).to_bytes(4, "big"),  # oversized
            b"\x00\x00\x00\x05\xc1\xc1\xc1\xc1\xc1",  # not msgpack
            encode_frame(50001, 1, {"body": 5}),  # wrong type
            encode_frame(51004, 1, {"k": "push", "group": "default"}),  # truncated message
            encode_frame(12345, 1, {}),  # unknown code
        ] + [rng.randbytes(rng.randint(1, 300)) for _ in range(30)]
        for g in garbage:
            with socket.create_connection(("127.0.0.1", port)) as s:
                s.sendall(g)
                s.settimeout(0.5)
                try:
                    s.recv(100)
                except OSError:
                    pass
        assert p.poll() is None, "server died"
        r = c.append(b"still-alive")
        assert r.ok, r
        assert "exceeds the maximum frame size" in (tmp_path / "n0.log").read_text()
    finally:
        p.terminate()
        p.wait(60)


# ---------------------------------------------------------------- ranges at the wire (issue 16)

_INT32 = {"code"}
_FULL_INT64 = {"round", "epoch"}


def _valid_wire(kind: str) -> dict:
    msg = MESSAGE_TYPES[kind]("default", "n1", "n0", 3)
    if hasattr(msg, "entries"):
        msg.entries = [Entry(0, 1, b"x", 1, 0, 0)]
    return msgpack.unpackb(msgpack.packb(to_wire(msg), use_bin_type=True), raw=False)


def _out_of_range(name: str) -> list[int]:
    """Values msgpack can carry that lie outside the field's Java type (or its non-negative range)."""
    if name in _FULL_INT64:
        return [2**63, 2**64 - 1]
    if name in _INT32:
        return [2**31, -(2**31) - 1, 2**63, 2**64 - 1]
    if name == "chain_crc":
        return [2**32, -2, 2**64 - 1]
    return [2**63, 2**64 - 1, -2, -(2**63)] if name != "term" else [2**63, 2**64 - 1, -1, -(2**63)]


def test_from_wire_refuses_every_int_field_out_of_its_java_range_and_every_wrong_type() -> None:
    checked = 0
    for kind in sorted(MESSAGE_TYPES):
        base = _valid_wire(kind)
        from_wire(base)  # the base is valid
        for name, value in base.items():
            if name == "k":
                continue
            bad: list[object] = [None, 1.5, True, [1], {"a": 1}]
            if isinstance(value, int):
                bad += _out_of_range(name) + ["7", b"7"]
            elif isinstance(value, str):
                bad += [7, b"n1", "x" * 10_000]
            elif isinstance(value, bytes):
                bad += ["text", 7]
            elif name == "entries":
                e = [0, 1, b"x", 1, 0, 0]
                bad += [[e[:5]], [[2**64 - 1, *e[1:]]], [[0, 2**63, *e[2:]]], [[0, 1, b"x", 3, 0, 0]]]
                bad += [[[0, 1, "x", 1, 0, 0]], [[0, 1, b"x", 1, 2**63, 0]], [[0, 1, b"x", 1, 0, 2**31]]]
            for v in bad:
                raw = msgpack.unpackb(msgpack.packb(dict(base, **{name: v}), use_bin_type=True), raw=False)
                try:
                    from_wire(raw)
                except DecodeError as err:
                    assert f"{kind}.{name}" in str(err), err
                    checked += 1
                else:
                    raise AssertionError(f"{kind}.{name}={v!r} was accepted")
            missing = dict(base)
            del missing[name]
            try:
                from_wire(missing)
                raise AssertionError(f"{kind} without {name} was accepted")
            except DecodeError as err:
                assert "missing" in str(err)
    assert checked > 300


def test_every_message_a_simulated_group_sends_passes_the_wire_checks() -> None:
    from dledger.sim import Sim

    kinds: set[str] = set()

    def through_the_wire(m: Message) -> bool:
        raw = msgpack.unpackb(msgpack.packb(to_wire(m), use_bin_type=True), raw=False)
        assert from_wire(raw) == m
        kinds.add(m.KIND)
        if isinstance(m, PushRequest):
            kinds.add(f"push:{m.type}")
        return False  # deliver it

    sim = Sim(3, 21)
    sim.drop = through_the_wire
    ld, _, other, _ = rejoin_through_snapshot(sim)
    assert sim.transfer(other) == 200
    assert sim.run(5000, lambda: sim.leader() == other)
    sim.isolate(ld)
    sim.run(2000)
    sim.heal()
    assert sim.run(5000, lambda: sim.leader() is not None)
    assert set(MESSAGE_TYPES) <= kinds, kinds
    assert "push:INSTALL_SNAPSHOT" in kinds and "push:APPEND" in kinds, kinds


# ---------------------------------------------------------------- a real group fed hostile frames

_BAD_INTS = st.sampled_from([2**63, 2**64 - 1, -2, -(2**63), 2**31, -(2**31) - 1])
_WRONG_TYPES = st.sampled_from([None, 1.5, True, "7", b"7", [1], {"a": 1}, "x" * 5000])


@st.composite
def hostile_peer_message(draw: st.DrawFn, target: str) -> dict:
    """A peer message to ``target`` from another member with at least one field out of range, of the
    wrong type or missing."""
    kind = draw(st.sampled_from(sorted(MESSAGE_TYPES)))
    src = draw(st.sampled_from([p for p in PEERS if p != target]))
    msg = MESSAGE_TYPES[kind]("default", src, target, draw(st.integers(0, 3)))
    if hasattr(msg, "entries"):
        msg.entries = [Entry(0, 1, b"x", 1, 0, 0)]
    raw = to_wire(msg)
    fields = [f for f in raw if f != "k"]
    for name in draw(st.lists(st.sampled_from(fields), min_size=1, max_size=3, unique=True)):
        how = draw(st.sampled_from(["int", "type", "missing", "entry"]))
        if how == "missing":
            del raw[name]
        elif how == "entry" and "entries" in raw:
            e = [0, 1, b"x", 1, 0, 0]
            e[draw(st.integers(0, 5))] = draw(_BAD_INTS | _WRONG_TYPES)
            raw["entries"] = [e]
        elif how == "int" and isinstance(raw[name], int):
            raw[name] = draw(st.sampled_from(_out_of_range(name)))
        else:
            raw[name] = draw(_WRONG_TYPES)
    return raw


def _client_request(draw: st.DrawFn) -> bytes:
    code = draw(st.sampled_from([50000, 50001, 50002, 51005, 59999, 12345, -1, 2**63]))
    body = draw(
        st.dictionaries(
            st.sampled_from(
                ["body", "index", "op", "key", "value", "expected", "new", "readMode", "to", "term"]
            ),
            st.one_of(_BAD_INTS, _WRONG_TYPES, st.sampled_from(["put", "get", "cas", "delete", "n1"])),
            max_size=5,
        )
    )
    return encode_frame(code, draw(st.integers(0, 2**64 - 1)), body)


@st.composite
def hostile_frames(draw: st.DrawFn, target: str) -> list[bytes]:
    """One connection's worth of bytes: hostile peer messages and client requests, frames truncated
    or corrupted, headers of the wrong shape, an oversized announced length at the end."""
    out: list[bytes] = []
    for _ in range(draw(st.integers(1, 4))):
        shape = draw(
            st.sampled_from(["peer", "peer", "client", "truncated", "garbled", "header", "oversized"])
        )
        if shape == "peer":
            kind_code = draw(st.sampled_from([51001, 51002, 51004, 51005]))
            out.append(encode_frame(kind_code, 0, draw(hostile_peer_message(target))))
        elif shape == "client":
            out.append(_client_request(draw))
        elif shape == "truncated":  # the length promises more than ever comes (the connection ends)
            f = encode_frame(51001, 0, draw(hostile_peer_message(target)))
            out.append(f[: draw(st.integers(1, len(f) - 1))])
            break
        elif shape == "garbled":  # a right length around bytes that are not msgpack
            junk = draw(st.binary(min_size=1, max_size=200))
            out.append(len(junk).to_bytes(4, "big") + junk)
        elif shape == "header":
            hdr = draw(st.sampled_from([{"c": "x", "o": 1, "r": 0, "b": {}}, [1, 2], {"c": 1}, 7]))
            payload = msgpack.packb(hdr)
            out.append(len(payload).to_bytes(4, "big") + payload)
        else:
            out.append(draw(st.integers(65537, 2**32 - 1)).to_bytes(4, "big") + b"x" * 100)
            break
    return out


def _pinned_frames(target: str) -> list[bytes]:
    """A peer message with ``term`` out of range, one without ``term``, then an oversized length."""
    src = next(p for p in PEERS if p != target)
    kind = sorted(MESSAGE_TYPES)[0]
    out_of_range = to_wire(MESSAGE_TYPES[kind]("default", src, target, 1))
    out_of_range["term"] = 2**64 - 1
    missing = to_wire(MESSAGE_TYPES[kind]("default", src, target, 1))
    del missing["term"]
    oversized = (2**32 - 1).to_bytes(4, "big") + b"x" * 100
    return [encode_frame(51001, 0, out_of_range), encode_frame(51001, 0, missing), oversized]


@pytest.mark.slow
def test_real_group_survives_hostile_frames_to_every_member(tmp_path: Path) -> None:
    """Hostile frames to every member of a real group (each example one connection from a loopback
    address outside the group's), then: no member died or logged a traceback, currterm is sane,
    peak RSS within the documented bound, and the group still elects, appends and reads."""
    # --insecure: the hostile frames must reach the core, not stop at the peer handshake
    c = Cluster(tmp_path, 3, "--max-frame", "65536", "--max-buffered", "1048576", "--insecure")
    c.start_all()
    try:
        c.leader(timeout=30)

        @given(st.data())
        @settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
        def fuzz(data: st.DataObject) -> None:
            target = data.draw(st.sampled_from(c.ids))
            frames = data.draw(hostile_frames(target))
            src = f"127.0.0.{data.draw(st.integers(50, 59))}"
            with attacker(src, (c.ips[target], c.port)) as s:
                try:
                    for f in frames:
                        s.sendall(f)
                except OSError:
                    pass  # the member already closed the connection
                closed_by_server(s, 0.05)
            dead = {n: p.returncode for n, p in c.procs.items() if p.poll() is not None}
            assert not dead, f"members died: {dead}"

        fuzz()
        for target in c.ids:  # one frame per refusal the logs must show, whatever the fuzzer drew
            for f in _pinned_frames(target):
                with attacker("127.0.0.60", (c.ips[target], c.port)) as s:
                    s.sendall(f)
                    closed_by_server(s, 0.05)
        logs = "".join((c.root / f"{n}.log").read_text() for n in c.ids)
        assert "outside" in logs and "missing" in logs and "exceeds the maximum frame size" in logs
        assert "Traceback" not in logs, "a hostile frame raised inside a member"
        assert max(curr_term(c, n) for n in c.ids) < 1000
        peaks = {n: peak_rss_kib(p.pid) for n, p in c.procs.items()}
        assert all(v <= RSS_BOUND_KIB for v in peaks.values()), (peaks, RSS_BOUND_KIB)
        assert_group_works(c, "after-fuzz")
    finally:
        for n in list(c.procs):
            c.kill(n)
