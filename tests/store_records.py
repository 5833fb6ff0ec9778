"""Whole records of the file store's format for the tests that forge or read them directly (the
store itself writes a record's header and body apart, :func:`dledger.store.codec.pack_head`)."""

from __future__ import annotations

import struct
import zlib

from dledger.store import Entry
from dledger.store.codec import BODY_OFFSET, VALID_MAGICS, decode_header, pack_head
from dledger.store.file import FileLogStore

_TAIL = struct.Struct(">IIi")  # chainCrc, bodyCrc, bodyLen


def encode_entry(entry: Entry, pos: int, prev_chain: int) -> tuple[bytes, int]:
    """``(record bytes, chainCrc)`` of ``entry`` stored at absolute data offset ``pos`` after an
    entry of chainCrc ``prev_chain``; ``entry.pos`` is ignored. ValueError for a magic other than 1
    or 2 or a body that is not bytes, EncodeError for a field outside its slot."""
    body = entry.body
    if entry.magic not in VALID_MAGICS:
        raise ValueError(f"entry magic {entry.magic!r}: expected 1 or 2")
    if not isinstance(body, bytes | bytearray | memoryview):
        raise ValueError(f"entry body of type {type(body).__name__}: expected bytes")
    head = pack_head(entry, len(body), pos)
    body_crc = zlib.crc32(body)
    chain = zlib.crc32(struct.pack(">I", body_crc), zlib.crc32(head, prev_chain))
    return head + _TAIL.pack(chain, body_crc, len(body)) + bytes(body), chain


def decode_entry(buf: bytes | bytearray | memoryview, offset: int = 0) -> Entry:
    """The record at ``offset`` of ``buf`` (lengths checked only; ValueError when the body runs past
    the buffer)."""
    h = decode_header(buf, offset)
    if h.body_len < 0 or offset + BODY_OFFSET + h.body_len > len(buf):
        raise ValueError(f"record at offset {offset}: body length {h.body_len} runs past the buffer")
    body = bytes(buf[offset + BODY_OFFSET : offset + BODY_OFFSET + h.body_len])
    return Entry(h.index, h.term, body, h.magic, h.pos, h.channel)


def next_pos(store: FileLogStore) -> int:
    """The absolute data-log offset ``store`` writes its next record at (before any padding): kept
    private by the store, which no caller but the tests asks."""
    return store._next_pos
