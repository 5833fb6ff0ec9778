"""Entry and index record codec: DLedger's byte layout plus bodyCrc / chainCrc."""

from __future__ import annotations

import struct
import zlib

import pytest
from store_records import decode_entry, encode_entry

from dledger.store import MAGIC_NOOP, Entry, codec


def test_header_layout_is_dledgers_big_endian_48_bytes() -> None:
    rec, chain = encode_entry(Entry(7, 3, b"hello", channel=0), pos=4096, prev_chain=0)
    assert len(rec) == 48 + 5
    magic, size, index, term, pos, channel, ccrc, bcrc, blen = struct.unpack(">iiqqqiIIi", rec[:48])
    assert (magic, size, index, term, pos, channel, blen) == (1, 53, 7, 3, 4096, 0, 5)
    assert rec[48:] == b"hello"
    assert bcrc == zlib.crc32(b"hello")
    assert ccrc == chain == zlib.crc32(rec[40:44], zlib.crc32(rec[:36], 0))
    # pos sits at DLedger's POS_OFFSET
    assert int.from_bytes(rec[codec.POS_OFFSET : codec.POS_OFFSET + 8], "big") == 4096


def test_decode_round_trip_and_noop_magic() -> None:
    e = Entry(0, 1, b"", magic=MAGIC_NOOP)
    rec, _ = encode_entry(e, pos=0, prev_chain=0)
    d = decode_entry(rec)
    assert (d.index, d.term, d.body, d.magic, d.pos) == (0, 1, b"", MAGIC_NOOP, 0)


def test_chain_crc_depends_on_the_previous_entry() -> None:
    e = Entry(1, 1, b"x")
    _, c1 = encode_entry(e, pos=49, prev_chain=0x1234)
    _, c2 = encode_entry(e, pos=49, prev_chain=0x1235)
    assert c1 != c2


def test_check_record_names_the_failed_check() -> None:
    rec, chain = encode_entry(Entry(5, 2, b"body"), pos=100, prev_chain=9)
    ok = dict(abs_pos=100, expect_index=5, min_term=2, prev_chain=9)
    assert codec.check_record(rec, 0, **ok)[1] is None  # type: ignore[arg-type]
    flipped = bytearray(rec)
    flipped[50] ^= 0x01
    assert "bodyCrc" in (codec.check_record(bytes(flipped), 0, **ok)[1] or "")  # type: ignore[arg-type]
    assert "chainCrc" in (codec.check_record(rec, 0, **{**ok, "prev_chain": 8})[1] or "")  # type: ignore[arg-type]
    assert "index" in (codec.check_record(rec, 0, **{**ok, "expect_index": 6})[1] or "")  # type: ignore[arg-type]
    assert "term" in (codec.check_record(rec, 0, **{**ok, "min_term": 3})[1] or "")  # type: ignore[arg-type]
    assert "pos" in (codec.check_record(rec, 0, **{**ok, "abs_pos": 101})[1] or "")  # type: ignore[arg-type]
    assert "past the end" in (codec.check_record(rec[:-1], 0, **ok)[1] or "")  # type: ignore[arg-type]
    bad_magic = b"\x00\x00\x00\x07" + rec[4:]
    assert "magic" in (codec.check_record(bad_magic, 0, **ok)[1] or "")  # type: ignore[arg-type]


def test_index_record_and_blank() -> None:
    r = codec.encode_index(1, 4096, 60, 9, 2)
    assert len(r) == 32
    assert codec.decode_index(r) == (1, 4096, 60, 9, 2)
    assert codec.encode_blank(200) == struct.pack(">ii", -1, 200)


def test_bad_entry_is_a_clear_error() -> None:
    with pytest.raises(ValueError, match="magic"):
        encode_entry(Entry(0, 1, b"", magic=9), pos=0, prev_chain=0)
    with pytest.raises(ValueError, match="bytes"):
        encode_entry(Entry(0, 1, "text"), pos=0, prev_chain=0)  # type: ignore[arg-type]
