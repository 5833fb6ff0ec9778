"""Property tests (hypothesis) of the frame decoder, the message decoder and the core's handlers, and a
real server fed garbage."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from pathlib import Path

import msgpack
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dledger.client import DLedgerClient
from dledger.core import Core, CoreConfig
from dledger.protocol import (
    MESSAGE_TYPES,
    DecodeError,
    PushType,
    VoteResult,
    from_wire,
    to_wire,
)
from dledger.store import Entry, MemoryLogStore
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
terms = st.integers(-1, 6)
idx = st.integers(-2, 8)
entries = st.lists(
    st.builds(Entry, idx, terms, st.binary(max_size=4), st.sampled_from([1, 2]), st.integers(-1, 400)),
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
            setattr(msg, name, draw(idx))
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
    store = MemoryLogStore()
    for i, t in enumerate(sorted(log_terms)):
        store.append(Entry(i, t, b"x"))
    core = Core(CoreConfig(self_id="n0", peers=PEERS), store, term=2)
    now = 0
    for raw, dt in msgs:
        now += dt
        core.step(from_wire(msgpack.unpackb(msgpack.packb(raw, use_bin_type=True), raw=False)), now)
        core.tick(now)
        rd = core.ready(now)
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
        p.wait(10)
