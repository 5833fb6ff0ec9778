"""On-disk record codec of the file store, in DLedger's format (``DLedgerEntryCoder``).

Entry record, big-endian, ``48 + len(body)`` bytes::

    0  magic      int32   1 normal, 2 no-op; -1 marks blank padding (BLANK_MAGIC)
    4  size       int32   whole record, header included
    8  index      int64   entry index, first entry 0
    16 term       int64
    24 pos        int64   absolute byte offset of this record in the data log
    32 channel    int32   reserved, 0
    36 chainCrc   uint32  CRC32 of bytes 0..36 and bodyCrc, seeded with the previous entry's chainCrc
    40 bodyCrc    uint32  CRC32 of the body
    44 bodyLen    int32
    48 body

DLedger 0.2.x leaves both CRC fields 0; here they are always computed, so a torn, corrupted or
divergent history is detectable on recovery. The chain seed of entry 0 is 0.

Index record, 32 bytes, for entry ``i`` at absolute index-log offset ``i * 32``:
magic int32, pos int64, size int32, index int64, term int64.

Blank padding: when a record plus ``MIN_BLANK_LEN`` (8) bytes does not fit in the rest of a data
file, the writer puts ``int32 -1, int32 remaining`` there and the rest stays zero (``MmapFileList``).
"""

from __future__ import annotations

import struct
import zlib
from dataclasses import dataclass

from dledger.store import MAGIC_NOOP, MAGIC_NORMAL, Entry, StoreError

HEADER_SIZE = 48
BODY_OFFSET = 48
POS_OFFSET = 24
INDEX_UNIT_SIZE = 32
MIN_BLANK_LEN = 8
BLANK_MAGIC = -1
VALID_MAGICS = (MAGIC_NORMAL, MAGIC_NOOP)

# Header split so the chain CRC can be computed over the first 36 bytes plus bodyCrc.
_HEAD = struct.Struct(">iiqqqi")  # magic, size, index, term, pos, channel: 36 bytes
_HEADER = struct.Struct(">iiqqqiIIi")
_U32 = struct.Struct(">I")
INDEX_RECORD = struct.Struct(">iqiqq")
BLANK = struct.Struct(">ii")

assert _HEADER.size == HEADER_SIZE and INDEX_RECORD.size == INDEX_UNIT_SIZE


@dataclass(frozen=True, slots=True)
class Header:
    """A decoded entry header (all 48 bytes)."""

    magic: int
    size: int
    index: int
    term: int
    pos: int
    channel: int
    chain_crc: int
    body_crc: int
    body_len: int


def chain_crc(head36: bytes, body_crc: int, prev_chain: int) -> int:
    """chainCrc of a record: CRC32 over its first 36 header bytes and bodyCrc, seeded with the
    previous entry's chainCrc (0 for entry 0). Returns an unsigned 32-bit int."""
    return zlib.crc32(_U32.pack(body_crc), zlib.crc32(head36, prev_chain))


class EncodeError(StoreError, ValueError):
    """A field that does not fit its slot of the record; raised before anything is written. A
    StoreError, so a follower answers the push with DISK_ERROR and a leader stops instead of acting
    on an entry it could not store."""


_HEAD_SLOTS = (("magic", 32), ("size", 32), ("index", 64), ("term", 64), ("pos", 64), ("channel", 32))


def pack_head(entry: Entry, body_len: int, pos: int) -> bytes:
    """The first 36 header bytes of ``entry`` stored at ``pos`` with a body of ``body_len`` bytes;
    EncodeError naming the first field that does not fit its slot (struct's own error names none,
    and a half-encoded record must never reach the file)."""
    values = (entry.magic, HEADER_SIZE + body_len, entry.index, entry.term, pos, entry.channel)
    try:
        return _HEAD.pack(*values)
    except struct.error:
        for (name, bits), v in zip(_HEAD_SLOTS, values, strict=True):
            if type(v) is not int or not -(2 ** (bits - 1)) <= v < 2 ** (bits - 1):
                raise EncodeError(
                    f"entry {name}={v!r}: does not fit the record's int{bits} field "
                    f"(entry index {entry.index!r})"
                ) from None
        raise


def decode_header(buf: bytes | bytearray | memoryview, offset: int = 0) -> Header:
    """Decode the 48-byte header at ``offset`` of ``buf``; struct.error if fewer bytes remain."""
    return Header(*_HEADER.unpack_from(buf, offset))


def check_record(
    buf: bytes | bytearray | memoryview,
    offset: int,
    *,
    abs_pos: int,
    expect_index: int | None,
    min_term: int,
    prev_chain: int | None,
) -> tuple[Header, str | None]:
    """Validate the record at ``offset`` of ``buf`` (which holds the rest of one data file).

    ``abs_pos`` is the record's absolute data-log offset, ``expect_index`` the index it must have
    (None: any), ``min_term`` the previous entry's term, ``prev_chain`` the previous chainCrc (None:
    unknown, e.g. the first entry after prefix compaction, so the chain is not checked).
    Returns ``(header, None)`` when valid, else ``(header or a dummy, reason)`` naming the failed check.
    Follows DLedgerMmapFileStore.recover's checks plus bodyCrc and chainCrc.
    """
    avail = len(buf) - offset
    if avail < HEADER_SIZE:
        return _DUMMY, f"only {avail} bytes left, a header needs {HEADER_SIZE}"
    h = decode_header(buf, offset)
    if h.magic not in VALID_MAGICS:
        return h, f"bad magic {h.magic}"
    if h.size != HEADER_SIZE + h.body_len or h.body_len < 0:
        return h, f"size {h.size} != 48 + body length {h.body_len}"
    if h.size > avail:
        return h, f"record of {h.size} bytes runs past the end of the file ({avail} bytes left)"
    if h.pos != abs_pos:
        return h, f"pos field {h.pos} != record offset {abs_pos}"
    if expect_index is not None and h.index != expect_index:
        return h, f"index {h.index}, expected {expect_index}"
    if h.term < min_term:
        return h, f"term {h.term} below the previous entry's term {min_term}"
    body = buf[offset + BODY_OFFSET : offset + h.size]
    bcrc = zlib.crc32(body)
    if bcrc != h.body_crc:
        return h, f"bodyCrc {h.body_crc:#010x} != computed {bcrc:#010x}"
    if prev_chain is not None:
        ccrc = chain_crc(bytes(buf[offset : offset + 36]), h.body_crc, prev_chain)
        if ccrc != h.chain_crc:
            return h, f"chainCrc {h.chain_crc:#010x} != computed {ccrc:#010x}"
    return h, None


_DUMMY = Header(0, 0, -1, -1, -1, 0, 0, 0, 0)


def encode_index(magic: int, pos: int, size: int, index: int, term: int) -> bytes:
    """The 32-byte index record (magic, pos, size, index, term)."""
    return INDEX_RECORD.pack(magic, pos, size, index, term)


def decode_index(buf: bytes | bytearray | memoryview, offset: int = 0) -> tuple[int, int, int, int, int]:
    """``(magic, pos, size, index, term)`` of the index record at ``offset``."""
    return INDEX_RECORD.unpack_from(buf, offset)  # type: ignore[return-value]


def encode_blank(remaining: int) -> bytes:
    """Blank padding header for the ``remaining`` bytes left in a data file (BLANK_MAGIC, length)."""
    return BLANK.pack(BLANK_MAGIC, remaining)
