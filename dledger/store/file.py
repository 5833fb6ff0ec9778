"""FileLogStore: DLedger's segmented on-disk log (``DLedgerMmapFileStore`` + ``MmapFileList``).

Layout under the store directory::

    data/<20-digit start offset>    pre-sized entry-record segments (``data_file_size`` bytes each)
    index/<20-digit start offset>   pre-sized index segments, record of entry i at i*32
    checkpoint                      endIndex / committedIndex (see hardstate.Checkpoint)

Records use :mod:`dledger.store.codec` (48-byte header, bodyCrc and chainCrc computed). When a record
plus 8 reserved bytes does not fit in the current data file, the rest of the file becomes blank
padding and the record starts the next file, so replicas fed the same entries have byte-identical
data files (followers must pass the leader's ``pos``). Truncation zeroes what it removes, so the
identity holds for whole files, not just the written prefix.

Writes use ``os.pwrite`` (measured on the development machine: ~270k two-record appends/s, versus
~600k/s with mmap; pwrite is kept because a file truncated under a live mapping kills the process
with SIGBUS, and the file-fault nemesis truncates segments). ``sync()`` fdatasyncs only the data
files written since the previous sync and the directories when files were created or removed; the
index files are fsynced when a checkpoint names a committed entry (recovery trusts the index only
before that entry's data file and rebuilds the rest from the data), so a group commit costs one
fsync.

Segments are sparse (``ftruncate``), and the ``highwater`` marker (fsynced before any write passes
it, in 8 MiB steps) bounds what recovery reads: past the last record only up to the mark, not the
whole pre-sized file (on fuse-overlayfs reading a 64 MiB file costs 0.1 s on an idle machine and
seconds under load). A store without the marker is read whole.

Recovery on open (``DLedgerMmapFileStore.recover``, plus CRCs): every record is checked for magic,
size, pos, index sequence, non-decreasing term, bodyCrc and chainCrc; index records are compared
with the data and rebuilt from the first disagreement. The first failing check ends the log: beyond
the checkpoint's committedIndex the tail is cut (zeroed) and a WARNING names the file, offset and
reason; inside the committed prefix CorruptionError is raised instead.
"""

from __future__ import annotations

import logging
import os
import re
import struct
import threading
import time
from array import array
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from zlib import crc32

from dledger.store import MAGIC_NOOP, MAGIC_NORMAL, CorruptionError, Entry, FlushError, StoreError, codec
from dledger.store.fs import OS, FileSystem
from dledger.store.hardstate import Checkpoint, CheckpointState

log = logging.getLogger("dledger.store")

DEFAULT_DATA_FILE_SIZE = 64 * 1024 * 1024
SALVAGE_MAX_ENTRIES = 100_000
"""Intact committed entries after a damaged one kept in memory for re-appending (repair mode);
beyond it they are fetched from the peers like the damaged ones."""
DEFAULT_INDEX_FILE_SIZE = 8 * 1024 * 1024
HIGHWATER_FILE = "highwater"
# The high-water marks move in steps so the marker is fsynced rarely (once per step of data).
HIGHWATER_DATA_STEP = 8 * 1024 * 1024
HIGHWATER_INDEX_STEP = 256 * 1024
_NAME = re.compile(r"^\d{20}$")
_ZERO_CHUNK = bytes(1 << 20)
_HEADER_SIZE = codec.HEADER_SIZE
_MIN_BLANK = codec.MIN_BLANK_LEN
_INDEX_PACK = codec.INDEX_RECORD.pack
_HEAD_PACK = struct.Struct(">iiqqqi").pack  # the first 36 header bytes (codec's _HEAD)
_TAIL_PACK = struct.Struct(">IIi").pack  # chainCrc, bodyCrc, bodyLen
_U32_PACK = struct.Struct(">I").pack
_UNPACK_HEADER = struct.Struct(">iiqqqiIIi").unpack_from
_IBUF_MAX = 32 * 1024  # buffered index bytes (1024 records) before a write
_WBUF_MAX = 1024 * 1024  # buffered record bytes before a write
_WBUF_PIECES = 1000  # below IOV_MAX (1024) iovecs per pwritev


@dataclass
class RecoveryReport:
    """What recovery found and did.

    ``cut_file`` / ``cut_offset`` (within that file) / ``cut_pos`` (absolute) / ``cut_reason`` are
    set when the log ended at a failed check rather than a clean end; ``removed_files`` lists
    segment files deleted; ``index_rebuilt_from`` is the first entry index whose index record was
    rewritten (None when the index agreed); ``index_behind`` when the index only lacked the newest
    records (index writes are batched, so a killed process leaves it behind: not damage). ``checkpoint_end_index`` is the endIndex the last
    checkpoint saw, so ``checkpoint_end_index - end_index`` hints how many entries were lost.
    ``bytes_read``: data-file bytes the scan read (bounded by the high-water mark, not file sizes).
    """

    directory: str
    begin_index: int = 0
    end_index: int = -1
    end_term: int = -1
    committed_index: int = -1
    checkpoint_end_index: int = -1
    data_files: int = 0
    index_files: int = 0
    entries_checked: int = 0
    trusted_files: int = 0
    cut_file: str | None = None
    cut_offset: int | None = None
    cut_pos: int | None = None
    cut_reason: str | None = None
    removed_files: list[str] = field(default_factory=list)
    index_rebuilt_from: int | None = None
    index_behind: bool = False
    extended_files: list[str] = field(default_factory=list)
    bytes_read: int = 0
    seconds: float = 0.0
    # repair mode: the log was cut inside the committed prefix at ``damaged_from``; the member
    # must hold entries up to ``repair_to`` (the checkpoint's committedIndex) again, fetched from
    # the leader, before it votes or campaigns (-1 / None: nothing to repair)
    repair_to: int = -1
    damaged_from: int | None = None

    @property
    def clean(self) -> bool:
        """True when nothing was cut, removed or re-extended and the index at most lagged behind."""
        return (
            self.cut_reason is None
            and not self.removed_files
            and (self.index_rebuilt_from is None or self.index_behind)
            and not self.extended_files
        )

    def describe(self) -> str:
        """One line for logs and `dledger` output."""
        s = (
            f"recovered {self.directory}: entries [{self.begin_index}, {self.end_index}] "
            f"(end term {self.end_term}, committed {self.committed_index}), {self.entries_checked} "
            f"checked in {self.data_files} data files in {self.seconds:.3f}s"
        )
        if self.cut_reason is not None:
            s += f"; cut at {self.cut_file} offset {self.cut_offset}: {self.cut_reason}"
        if self.removed_files:
            s += f"; removed {', '.join(self.removed_files)}"
        if self.index_rebuilt_from is not None:
            s += f"; index rebuilt from entry {self.index_rebuilt_from}"
        if self.repair_to >= 0:
            s += (
                f"; REPAIR: committed entries from {self.damaged_from} are damaged, to be fetched "
                f"again from the leader up to {self.repair_to}"
            )
        return s


@dataclass(slots=True)
class _Scan:
    """Where recovery's scan of the data files stands (``DLedgerMmapFileStore.recover``'s loop):
    the next entry index expected (None: any, after a reset's gap or a file not at 0), the last
    term and chainCrc (None: not known, so not checked), the first index found, the absolute
    position after the last good record, and how the scan ended: ``cut`` (file index, path,
    offset, reason) at a failed check, ``clean_end`` (file index, offset) at zeros."""

    expect: int | None
    prev_chain: int | None
    end_pos: int
    prev_term: int = -1
    begin: int | None = None
    cut: tuple[int, Path, int, str] | None = None
    clean_end: tuple[int, int] | None = None
    n_checked: int = 0
    last_fi: int = 0  # the last data file scanned
    check_from: int = 0  # entries below came from the index (_load_trusted): not compared with it
    limited: bool = False  # some file was read only up to the data high-water mark
    leading_gap: bool = False  # the first file starts with a reset's blank gap


class _Segment:
    """One pre-sized segment file, open read-write."""

    __slots__ = ("start", "path", "fd")

    def __init__(self, start: int, path: Path, fd: int) -> None:
        self.start = start
        self.path = path
        self.fd = fd


def _name(start: int) -> str:
    return f"{start:020d}"


def _check_sizes(data_file_size: object, index_file_size: object, verify_files: object) -> None:
    """StoreError naming the first argument of FileLogStore that is out of range."""
    if not isinstance(data_file_size, int) or data_file_size < 4096:
        raise StoreError(f"data_file_size={data_file_size!r}: expected an int >= 4096 bytes")
    if (
        not isinstance(index_file_size, int)
        or index_file_size < 4096
        or index_file_size % codec.INDEX_UNIT_SIZE
    ):
        raise StoreError(f"index_file_size={index_file_size!r}: expected an int >= 4096, a multiple of 32")
    if verify_files is not None and (not isinstance(verify_files, int) or verify_files < 1):
        raise StoreError(f"verify_files={verify_files!r}: expected None (all) or an int >= 1")


class FileLogStore:
    """A LogStore on segment files in ``directory`` (created when absent); see the module docstring.

    ``data_file_size`` / ``index_file_size``: bytes per segment (index size a multiple of 32, both at
    least 4 KiB); they must match the sizes the store was created with. ``cache_entries``
    recently appended entries are kept in memory so replication rarely reads the disk.
    ``verify_files``: check every record of only the newest N data files on open and take older
    entries from the index (DLedger starts at the third-last file); None checks all. Reads from
    disk always check bodyCrc, so older damage is still never served.

    Raises StoreError for unusable parameters, files or I/O errors, CorruptionError when recovery
    finds damage inside the committed prefix. ``recovery`` holds the RecoveryReport.

    ``repair``: damage inside the committed prefix is cut like a damaged tail instead of raising
    CorruptionError, and ``repair_to`` is set to the checkpoint's committedIndex or, when durable
    entries followed the damage, the last of them (the member may have acknowledged them, so a
    quorum may count on its copy): the member must not vote or campaign until its log holds
    entries up to it again, the intact ones re-appended, the damaged ones fetched from its peers
    (Protocol-Aware Recovery, Alagappan et al., FAST 2018: a damaged committed entry is never
    served and never counts toward a quorum; the majority that holds it repairs it). The marker
    survives restarts: checkpoints keep it (``repairTo``) until the log reaches it.
    Not safe for concurrent writers; ``sync()`` may run in another thread than ``append()``.
    """

    def __init__(
        self,
        directory: str | os.PathLike[str],
        *,
        data_file_size: int = DEFAULT_DATA_FILE_SIZE,
        index_file_size: int = DEFAULT_INDEX_FILE_SIZE,
        cache_entries: int = 4096,
        verify_files: int | None = None,
        fs: FileSystem = OS,
        repair: bool = False,
    ) -> None:
        _check_sizes(data_file_size, index_file_size, verify_files)
        self._fs = fs
        self.repair = repair
        self.repair_to = -1  # see the class docstring
        # and the checkpoint's committedIndex when the damage was found: the re-appended entries
        # up to it are committed, those after it (durable, perhaps acknowledged) not known to be
        self.repair_committed = -1
        self._checkpoint_committed = -1  # as recovery read it
        # repair mode: intact committed entries after a damaged one, kept (in memory) when the log
        # was cut before it, so the member re-appends them once the damaged ones were fetched
        # again instead of losing them (index -> Entry; see salvage())
        self.salvaged: dict[int, Entry] = {}
        self.directory = Path(directory)
        self.data_dir = self.directory / "data"
        self.index_dir = self.directory / "index"
        self.data_file_size = data_file_size
        self.index_file_size = index_file_size
        self.verify_files = verify_files
        self._cache_n = max(0, cache_entries)
        self._lock = threading.Lock()
        self._sync_lock = threading.Lock()
        self._closed = False

        self._data: list[_Segment] = []
        self._index: list[_Segment] = []
        self._begin = 0
        self._end = -1
        self._end_term = -1
        self._next_pos = 0
        self._last_chain = 0
        # Per held entry (offset by begin): pos, record size, term.
        self._pos = array("q")
        self._size = array("l")
        self._terms = array("q")
        self._magic = array("b")
        self._cache: dict[int, Entry] = {}
        self._ibuf = bytearray()  # index records of entries (end - len/32, end], not yet written
        self._dirty: dict[int, int] = {}  # fd -> fd of files written since the last sync
        self._idirty: dict[int, int] = {}  # fd -> fd of index files written, not fsynced (see sync)
        self._dirs_dirty = False
        self._graveyard: list[int] = []  # fds of removed files, closed by the next sync
        self._synced_index = -1
        self._isynced_index = -1  # index records durable up to here (sync(index=True))
        self._trunc_low = 1 << 62  # lowest truncation since the last sync began
        self._itrunc_low = 1 << 62  # ... since the last sync(index=True) began
        self._index_cut = False  # durable index records were cut: the next sync covers the index
        self.data_syncs = 0  # sync() calls (group commits, --flush async rounds) since open
        self.fsyncs = 0  # fsync calls on files and directories by sync() since open
        self._committed = -1
        self._high_fd = -1
        self._data_high = -1  # -1: unknown (no marker): recovery reads whole files
        self._index_high = -1
        self._ignore_high = False
        # Records appended but not yet written: pieces for one pwritev at _wbuf_off of _wbuf_seg.
        self._wbuf: list[bytes] = []
        self._wbuf_seg: _Segment | None = None
        self._wbuf_off = 0
        self._wbuf_len = 0
        self._base_chain = 0  # chainCrc / term of entry begin_index - 1 when known (after reset)
        self._base_term = -1

        try:
            fs.makedirs(self.data_dir)
            fs.makedirs(self.index_dir)
        except OSError as e:
            raise StoreError(f"cannot create store directory {self.directory}: {e}") from e
        self._checkpoint = Checkpoint(self.directory, fs=fs)
        try:
            self.recovery = self._recover()
        except OSError as e:
            self._close_fds()
            raise StoreError(f"recovery of {self.directory} failed: {e}") from e
        except BaseException:
            self._close_fds()
            raise
        self._committed = self.recovery.committed_index
        self._synced_index = self._isynced_index = self._end
        self.repair_to = self.recovery.repair_to
        if self.repair_to >= 0:
            self.repair_committed = min(self.repair_to, self._checkpoint_committed)

    # ----------------------------------------------------------------- LogStore protocol

    @property
    def begin_index(self) -> int:
        return self._begin

    @property
    def end_index(self) -> int:
        return self._end

    @property
    def end_term(self) -> int:
        return self._end_term

    @property
    def synced_index(self) -> int:
        """Highest index made durable by the last sync() (or found on open)."""
        return self._synced_index

    @property
    def committed_index(self) -> int:
        """committedIndex from the checkpoint (as loaded, or as last saved)."""
        return self._committed

    def append(self, entry: Entry) -> Entry:
        """Append at ``end_index + 1``; see LogStore.append. Raises StoreError on a wrong index,
        a wrong ``pos`` (follower), a bad magic or body, a record larger than a data file, or an
        I/O error."""
        stored = self.append_batch((entry,))
        assert stored is not None
        return stored

    def append_batch(self, entries: Sequence[Entry]) -> Entry | None:
        """Append ``entries`` in order, exactly as :meth:`append` one by one would (the same
        records, buffered writes and errors; the entries before a refused one stay appended), under
        one lock acquisition: a leader's batch of proposals or a follower's pushed batch. Returns
        the last stored entry (None for no entries). A follower's entry that already carries the
        right ``pos`` and a ``bytes`` body is kept as the stored object (entries are never
        mutated), the others are copied with their ``pos`` set."""
        if self._closed:
            raise StoreError(f"store {self.directory} is closed")
        fsize = self.data_file_size
        stored: Entry | None = None
        pos_append, size_append = self._pos.append, self._size.append
        terms_append, magic_append = self._terms.append, self._magic.append
        cache, cache_n = self._cache, self._cache_n
        wb = self._wbuf
        with self._lock:
            for entry in entries:
                index = entry.index
                if index != self._end + 1:
                    raise StoreError(f"append at index {index}, expected {self._end + 1}")
                body = entry.body
                if type(body) is not bytes:
                    if not isinstance(body, bytearray | memoryview):
                        raise StoreError(f"entry {index}: body of type {type(body).__name__}, expected bytes")
                    body = bytes(body)
                magic = entry.magic
                if magic != MAGIC_NORMAL and magic != MAGIC_NOOP:
                    raise StoreError(
                        f"entry {index}: magic {magic!r}, expected {MAGIC_NORMAL} or {MAGIC_NOOP}"
                    )
                n = len(body)
                size = _HEADER_SIZE + n
                if size + _MIN_BLANK > fsize:
                    raise StoreError(
                        f"entry {index} of {size} bytes does not fit a data file of {fsize} bytes"
                    )
                seg = self._data[-1]
                next_pos = self._next_pos
                rel = next_pos - seg.start
                pad = size + _MIN_BLANK > fsize - rel
                pos = seg.start + fsize if pad else next_pos
                if entry.pos >= 0 and entry.pos != pos:
                    raise StoreError(f"append of entry {index} at pos {entry.pos}, expected {pos}")
                term = entry.term
                try:
                    head36 = _HEAD_PACK(magic, size, index, term, pos, entry.channel)
                except struct.error:
                    codec.pack_head(entry, n, pos)  # raises EncodeError naming the field
                    raise
                bcrc = crc32(body)
                chain = crc32(_U32_PACK(bcrc), crc32(head36, self._last_chain))
                if pos + size > self._data_high:
                    self._raise_high(pos + size, -1)
                buffered = False
                try:
                    if pad:
                        seg = self._roll_over(seg, rel, pos)
                    # Buffered: written by flush_writes (the server calls it before any message
                    # leaves), sync, reads and every _WBUF_MAX bytes; one pwritev per batch. The
                    # buffer always ends where the record goes: whatever moves that (a rollover, a
                    # truncation, a reset) writes or drops the buffer first.
                    assert not wb or (
                        seg is self._wbuf_seg and pos - seg.start == self._wbuf_off + self._wbuf_len
                    )
                    if not wb:
                        self._wbuf_seg, self._wbuf_off = seg, pos - seg.start
                    wb.append(head36 + _TAIL_PACK(chain, bcrc, n))
                    wb.append(body)
                    self._wbuf_len += size
                    buffered = True
                    if self._wbuf_len >= _WBUF_MAX or len(wb) >= _WBUF_PIECES:
                        self._write_pending()
                except OSError as e:
                    # this entry is not appended; the earlier ones (counted in _end) stay buffered
                    # for the next write, which a sync needs before it calls them durable
                    if buffered:
                        del wb[-2:]
                        self._wbuf_len -= size
                    raise StoreError(f"write of entry {index} at pos {pos} failed: {e}") from e
                # Index records are buffered and written in batches (sync, truncate, or every
                # _IBUF_MAX bytes): the index is rebuilt from the data on recovery anyway.
                self._ibuf += _INDEX_PACK(magic, pos, size, index, term)
                if entry.pos == pos and body is entry.body:
                    stored = entry
                else:
                    stored = Entry(index, term, body, magic, pos, entry.channel)
                pos_append(pos)
                size_append(size)
                terms_append(term)
                magic_append(magic)
                self._end = index
                self._end_term = term
                self._last_chain = chain
                self._next_pos = pos + size
                if cache_n:
                    cache[index] = stored
                    cache.pop(index - cache_n, None)
                if len(self._ibuf) >= _IBUF_MAX:
                    self._flush_index()
        return stored

    def get(self, index: int) -> Entry:
        """The entry at ``index``; IndexError outside ``[begin_index, end_index]``.

        An entry read from disk is checked against its bodyCrc, index, term and pos; a mismatch
        (e.g. a bit flipped while running) raises CorruptionError rather than serving bad data.
        """
        cached = self._cache.get(index)
        if cached is not None:
            return cached
        if index < self._begin or index > self._end:
            raise IndexError(f"index {index} outside [{self._begin}, {self._end}]")
        if self._wbuf:
            self.flush_writes()
        k = index - self._begin
        pos, size = self._pos[k], self._size[k]
        seg = self._data[(pos - self._data[0].start) // self.data_file_size]
        try:
            buf = self._fs.pread(seg.fd, size, pos - seg.start)
        except OSError as e:
            raise StoreError(f"read of entry {index} from {seg.path} failed: {e}") from e
        h, reason = codec.check_record(
            buf, 0, abs_pos=pos, expect_index=index, min_term=self._terms[k], prev_chain=None
        )
        if reason is None and h.term != self._terms[k]:
            reason = f"term {h.term}, expected {self._terms[k]}"
        if reason is not None:
            raise CorruptionError(
                f"{seg.path}: offset {pos - seg.start}: entry {index}: {reason} (read while serving)"
            )
        return Entry(h.index, h.term, buf[codec.BODY_OFFSET :], h.magic, h.pos, h.channel)

    def get_range(self, lo: int, hi: int) -> list[Entry]:
        """Entries ``lo..hi`` inclusive, read with one pread per data file (replaying the log after
        a restart, where a pread per entry costs a FUSE round trip on fuse-overlayfs). The same
        checks as :meth:`get`; IndexError outside ``[begin_index, end_index]``."""
        if lo > hi:
            return []
        if lo < self._begin or hi > self._end:
            raise IndexError(f"range [{lo}, {hi}] outside [{self._begin}, {self._end}]")
        if self._wbuf:
            self.flush_writes()
        out: list[Entry] = []
        fsize, first = self.data_file_size, self._data[0].start
        i = lo
        while i <= hi:
            cached = self._cache.get(i)
            if cached is not None:
                out.append(cached)
                i += 1
                continue
            k = i - self._begin
            pos0 = self._pos[k]
            fi = (pos0 - first) // fsize
            seg = self._data[fi]
            j = i  # extend over the uncached entries of the same file
            while (
                j < hi
                and self._cache.get(j + 1) is None
                and (self._pos[j + 1 - self._begin] - first) // fsize == fi
            ):
                j += 1
            end = self._pos[j - self._begin] + self._size[j - self._begin]
            try:
                buf = self._fs.pread(seg.fd, end - pos0, pos0 - seg.start)
            except OSError as e:
                raise StoreError(f"read of entries {i}..{j} from {seg.path} failed: {e}") from e
            mv = memoryview(buf)
            for idx in range(i, j + 1):
                kk = idx - self._begin
                off = self._pos[kk] - pos0
                term = self._terms[kk]
                if len(buf) - off >= _HEADER_SIZE:
                    magic, size, hidx, hterm, hpos, ch, _cc, bcrc, blen = _UNPACK_HEADER(buf, off)
                    if (
                        hidx == idx
                        and hterm == term
                        and hpos == self._pos[kk]
                        and size == self._size[kk] == _HEADER_SIZE + blen
                        and (magic == MAGIC_NORMAL or magic == MAGIC_NOOP)
                        and crc32(mv[off + _HEADER_SIZE : off + size]) == bcrc
                    ):
                        out.append(Entry(idx, term, buf[off + _HEADER_SIZE : off + size], magic, hpos, ch))
                        continue
                out.append(self.get(idx))  # names the failed check (CorruptionError)
            i = j + 1
        return out

    def term_at(self, index: int) -> int:
        if index == -1:
            return -1
        if index < self._begin or index > self._end:
            raise IndexError(f"index {index} outside [{self._begin}, {self._end}]")
        return self._terms[index - self._begin]

    def truncate_suffix(self, index: int) -> None:
        """Remove every entry after ``index`` (DLedger's truncate): zero their bytes in the data and
        index files and delete segment files left empty. Durable after the next sync().

        After compact_prefix the kept prefix cannot be removed: ``index < begin_index`` raises
        StoreError when ``begin_index > 0`` (Raft never truncates committed entries, and only
        those are compacted). Raises StoreError on an I/O error."""
        if index >= self._end:
            return
        if index < self._begin - 1 and self._begin > 0:
            raise StoreError(
                f"truncate_suffix({index}) below begin_index {self._begin}: that prefix is compacted"
            )
        try:
            self._truncate_suffix(index)
        except OSError as e:  # an I/O error is a StoreError, as for every other call
            raise StoreError(f"truncate after entry {index} in {self.directory} failed: {e}") from e

    def _truncate_suffix(self, index: int) -> None:
        with self._lock:
            self._write_pending()
            self._flush_index()
            new_end = max(index, self._begin - 1)
            k = new_end - self._begin
            if k >= 0:
                cut_pos = self._pos[k] + self._size[k]
                self._last_chain = self._read_chain(new_end)
                self._end_term = self._terms[k]
            else:
                # the first held entry's position (after a reset it follows a leading gap)
                cut_pos = self._pos[0] if len(self._pos) else self._next_pos
                self._last_chain = self._base_chain
                self._end_term = self._base_term
            self._cut_data(cut_pos, self._next_pos)
            self._cut_index((new_end + 1) * codec.INDEX_UNIT_SIZE, (self._end + 1) * codec.INDEX_UNIT_SIZE)
            del self._pos[k + 1 :]
            del self._size[k + 1 :]
            del self._terms[k + 1 :]
            del self._magic[k + 1 :]
            for i in range(new_end + 1, self._end + 1):
                self._cache.pop(i, None)
            self._end = new_end
            self._next_pos = cut_pos
            self._synced_index = min(self._synced_index, new_end)
            if new_end < self._isynced_index:
                self._index_cut = True  # keep the disk's index as short as its data, as before
            self._isynced_index = min(self._isynced_index, new_end)
            self._trunc_low = min(self._trunc_low, new_end)
            self._itrunc_low = min(self._itrunc_low, new_end)

    def sync(self, *, index: bool = False) -> int:
        """fdatasync the data files written since the last sync (and the directories when files
        were created or removed); return the highest durable index. Safe to call from another
        thread while appends continue: it covers what was appended when it started.

        The index records are written too (a killed process loses none of them) but fsynced only
        with ``index=True``, or by :meth:`save_checkpoint` before it names a committed entry:
        recovery takes from the index only the entries before the data file holding that entry,
        and checks (and rebuilds) the index from there on against the data. So the fsync of a
        group commit covers the data alone: one fsync, not two, per batch of appends."""
        return self._sync(True, index)

    def _sync(self, data: bool, index: bool) -> int:
        """fdatasync what was written since the last time: the data files with ``data``, the index
        files with ``index`` (the index files written meanwhile wait in ``_idirty``); the
        directories when files were created or removed. Returns ``_synced_index``."""
        with self._sync_lock:
            with self._lock:
                if self._closed:
                    raise StoreError(f"store {self.directory} is closed")
                try:
                    self._write_pending()
                except OSError as e:
                    raise FlushError(f"write of buffered records in {self.directory} failed: {e}") from e
                self._flush_index()
                end = self._end
                index = index or self._index_cut
                self._index_cut = False
                ifds = {seg.fd for seg in self._index}
                dirty, idirty = self._dirty, self._idirty
                for fd in [fd for fd in dirty if fd in ifds]:
                    idirty[fd] = dirty.pop(fd)
                fds: list[int] = []
                if data:
                    self._trunc_low = end
                    fds += dirty
                    dirty.clear()
                if index:
                    self._itrunc_low = end
                    fds += idirty
                    idirty.clear()
                dirs, self._dirs_dirty = self._dirs_dirty, False
                graveyard, self._graveyard = self._graveyard, []
            try:
                for fd in fds:
                    self._fs.fsync(fd)
                if dirs:
                    self._fs.fsync_dir(self.data_dir)
                    self._fs.fsync_dir(self.index_dir)
            except OSError as e:
                raise StoreError(f"fsync in {self.directory} failed: {e}") from e
            finally:
                for fd in graveyard:
                    _close_quietly(self._fs, fd)
            with self._lock:
                self.fsyncs += len(fds) + (2 if dirs else 0)
                # Entries truncated and re-appended during the fsync are not covered by it.
                if data:
                    self.data_syncs += 1
                    self._synced_index = min(end, self._trunc_low, self._end)
                if index:
                    self._isynced_index = min(end, self._itrunc_low, self._end)
                return self._synced_index

    def close(self, sync: bool = True) -> None:
        """Sync (unless ``sync=False``, which leaves unsynced writes to the page cache as a killed
        process would), then close every file. Idempotent."""
        if self._closed:
            return
        try:
            if sync:
                self.sync(index=True)
            else:
                with self._lock:
                    self._write_pending()
        finally:
            with self._lock:
                self._closed = True
                self._close_fds()

    # ----------------------------------------------------------------- extras

    def flush_writes(self) -> None:
        """Write the buffered records (one pwritev) so the page cache holds every appended entry,
        as after a SIGKILL the kernel still does; call before telling anyone about them.
        Raises StoreError on an I/O error."""
        if not self._wbuf:
            return
        with self._lock:
            try:
                self._write_pending()
            except OSError as e:
                raise FlushError(f"write of buffered records in {self.directory} failed: {e}") from e

    def _roll_over(self, seg: _Segment, rel: int, start: int) -> _Segment:
        """Pad data file ``seg`` with a blank record from ``rel`` on and start the next one at
        ``start``, where the log continues even if the write of the entry that needed it fails."""
        self._write_pending()
        self._fs.pwrite(seg.fd, codec.encode_blank(self.data_file_size - rel), rel)
        self._dirty[seg.fd] = seg.fd
        seg = self._new_segment(self._data, self.data_dir, start, self.data_file_size)
        self._next_pos = start
        return seg

    def _write_pending(self) -> None:
        wb = self._wbuf
        if not wb:
            return
        seg = self._wbuf_seg
        assert seg is not None
        n = self._fs.pwritev(seg.fd, wb, self._wbuf_off)
        if n != self._wbuf_len:  # a short write: finish it in one piece
            data = b"".join(wb)
            while n < len(data):
                n += self._fs.pwrite(seg.fd, data[n:], self._wbuf_off + n)
        # cleared only once written: on an OSError the records, which _end counts, stay buffered
        # and the next write (flush_writes, sync, a read, a truncation) tries them again
        wb.clear()
        self._wbuf_len = 0
        self._dirty[seg.fd] = seg.fd

    def chain_at(self, index: int) -> int:
        """chainCrc of the entry at ``index`` (the seed of the next entry's chainCrc), for
        INSTALL_SNAPSHOT; IndexError outside ``[begin_index, end_index]``."""
        if index < self._begin or index > self._end:
            raise IndexError(f"index {index} outside [{self._begin}, {self._end}]")
        if index == self._end:
            return self._last_chain
        try:
            return self._read_chain(index)
        except OSError as e:  # an I/O error is a StoreError, as for every other call
            raise StoreError(f"read of the chainCrc of entry {index} failed: {e}") from e

    def reset(self, begin_index: int, next_pos: int, last_term: int, chain_crc: int = -1) -> None:
        """Discard the whole log and continue at ``begin_index`` (a snapshot's lastIncludedIndex + 1)
        whose record goes at data position ``next_pos``, after an entry of term ``last_term`` with
        chainCrc ``chain_crc`` (-1: unknown, seed 0), as the leader has it (DLedger follower side of
        INSTALL_SNAPSHOT). The data file holding ``next_pos`` starts with a blank record covering
        the bytes before it (a leading gap, only valid at the start of the first file), so recovery
        and inspection find the first record. The new begin is durable when this returns (files
        and directories fsynced before the checkpoint records it); entries appended after it are
        durable after the next sync().
        Raises StoreError for negative arguments or a ``next_pos`` that leaves no room in its file."""
        for name, v in (("begin_index", begin_index), ("next_pos", next_pos)):
            if type(v) is not int or v < 0:
                raise StoreError(f"reset: {name}={v!r}, expected an int >= 0")
        fsize = self.data_file_size
        start = next_pos - next_pos % fsize
        gap = next_pos - start
        if 0 < gap < codec.MIN_BLANK_LEN or gap + codec.HEADER_SIZE + codec.MIN_BLANK_LEN > fsize:
            raise StoreError(f"reset: next_pos={next_pos} leaves no room in data file {start:020d}")
        with self._lock:
            self._ibuf = bytearray()
            self._wbuf.clear()
            self._wbuf_len = 0
            for seg in self._data + self._index:
                self._remove(seg)
            self._data, self._index = [], []
            for arr in (self._pos, self._size, self._terms, self._magic):
                del arr[:]
            self._cache.clear()
            self._begin, self._end, self._end_term = begin_index, begin_index - 1, last_term
            self._next_pos = next_pos
            self._last_chain = self._base_chain = chain_crc if chain_crc >= 0 else 0
            self._base_term = last_term
            self._raise_high(
                next_pos + HIGHWATER_DATA_STEP,
                begin_index * codec.INDEX_UNIT_SIZE + HIGHWATER_INDEX_STEP,
                exact=True,
            )
            try:
                seg = self._new_segment(self._data, self.data_dir, start, fsize)
                if gap:
                    self._fs.pwrite(seg.fd, codec.BLANK.pack(codec.BLANK_MAGIC, gap), 0)
                # the old segments' removal and the new one must be durable before the checkpoint
                # names the new begin: a crash in between would bring the old files back under a
                # checkpoint that calls them committed up to begin_index - 1 (chaos sim seed 1180)
                self._fs.fsync(seg.fd)
                self._fs.fsync_dir(self.data_dir)
                self._fs.fsync_dir(self.index_dir)
            except OSError as e:
                raise StoreError(f"reset of {self.directory} at {begin_index} failed: {e}") from e
            self._dirty[seg.fd] = seg.fd
            self._synced_index = min(self._synced_index, begin_index - 1)
            self._isynced_index = min(self._isynced_index, begin_index - 1)
            self._trunc_low = min(self._trunc_low, begin_index - 1)
            self._itrunc_low = min(self._itrunc_low, begin_index - 1)
            self._committed = begin_index - 1
            # recovery takes begin_index from the checkpoint while the log is still empty
            self._checkpoint.save(begin_index - 1, begin_index - 1)
        log.info(
            "%s: log reset to begin at entry %d (data position %d, previous term %d)",
            self.directory,
            begin_index,
            next_pos,
            last_term,
        )

    def save_checkpoint(self, committed_index: int) -> int:
        """Persist the checkpoint (endIndex, committedIndex) atomically and return the committed
        index written: ``committed_index`` clamped to the synced index (recovery trusts it to be
        durable, and the index records before it: the index files are fsynced here first when
        they lag, see :meth:`sync`), never below the previously saved value unless the log itself
        is shorter."""
        if not isinstance(committed_index, int):
            raise ValueError(f"committed_index {committed_index!r}: expected an int")
        if self._isynced_index < min(max(committed_index, self._committed), self._synced_index):
            self._sync(False, True)  # the index records up to the committed entry (see sync)
        value = min(max(committed_index, self._committed), self._synced_index, self._isynced_index)
        self._committed = value
        if self.repair_to >= 0 and self._synced_index >= self.repair_to:
            log.warning(
                "%s: repair mark cleared: entries up to %d are durable again",
                self.directory,
                self.repair_to,
            )
            self.repair_to = -1
        # the repair marker survives a restart before the log reached it again
        self._checkpoint.save(self._synced_index, value, self.repair_to)
        return self._committed

    def find_damaged(self, lo: int, hi: int) -> int | None:
        """The first entry in ``lo..hi`` that fails its checks when read (CorruptionError), or
        None when all verify. Reads per entry: call it for a range whose batch read failed."""
        for i in range(max(lo, self._begin), min(hi, self._end) + 1):
            try:
                self.get(i)
            except CorruptionError:
                return i
        return None

    def cut_damaged(self, index: int, committed: int) -> None:
        """Repair mode: entry ``index`` (inside the committed prefix up to ``committed``) was found
        damaged after recovery (a replay read): cut the log before it and remember that entries up
        to ``committed`` must be fetched again (see the class docstring). Raises CorruptionError
        outside repair mode, StoreError when the damaged entry is below a compacted prefix."""
        if not self.repair:
            raise CorruptionError(f"{self.directory}: committed entry {index} is damaged")
        log.warning(
            "%s: committed entry %d is damaged: cutting the log after %d, repairing up to %d from the leader",
            self.directory,
            index,
            index - 1,
            committed,
        )
        # every durable entry after it, committed or not: the member may have acknowledged them
        durable_end = self._end
        for i in range(index + 1, durable_end + 1):
            if len(self.salvaged) >= SALVAGE_MAX_ENTRIES:
                break
            try:
                self.salvaged[i] = self.get(i)
            except CorruptionError:
                continue
        self.truncate_suffix(index - 1)
        self.sync()
        self.repair_to = max(self.repair_to, committed, durable_end)
        self.repair_committed = max(self.repair_committed, committed)
        self.recovery.repair_to = self.repair_to
        if self.recovery.damaged_from is None or index < self.recovery.damaged_from:
            self.recovery.damaged_from = index

    def compact_prefix(self, index: int) -> int:
        """Drop whole data and index segment files below the data segment holding ``index`` (for
        snapshots); return the new begin_index (the first entry of that segment, <= ``index``).
        Raises IndexError when ``index`` is not held, StoreError on an I/O error."""
        if index < self._begin or index > self._end:
            raise IndexError(f"index {index} outside [{self._begin}, {self._end}]")
        try:
            return self._compact_prefix(index)
        except OSError as e:  # an I/O error is a StoreError, as for every other call
            raise StoreError(f"compaction before entry {index} in {self.directory} failed: {e}") from e

    def _compact_prefix(self, index: int) -> int:
        with self._lock:
            self._write_pending()
            self._flush_index()
            pos = self._pos[index - self._begin]
            keep_from = (pos - self._data[0].start) // self.data_file_size
            if keep_from == 0:
                return self._begin
            first_start = self._data[keep_from].start
            # First entry whose record starts in the kept segment.
            k = index - self._begin
            while k > 0 and self._pos[k - 1] >= first_start:
                k -= 1
            new_begin = self._begin + k
            for seg in self._data[:keep_from]:
                self._remove(seg)
            del self._data[:keep_from]
            istart = new_begin * codec.INDEX_UNIT_SIZE
            drop = [s for s in self._index if s.start + self.index_file_size <= istart]
            for seg in drop:
                self._remove(seg)
            self._index = self._index[len(drop) :]
            del self._pos[:k]
            del self._size[:k]
            del self._terms[:k]
            del self._magic[:k]
            for i in range(self._begin, new_begin):
                self._cache.pop(i, None)
            self._begin = new_begin
            return new_begin

    # ----------------------------------------------------------------- internals

    def _close_fds(self) -> None:
        for seg in self._data + self._index:
            _close_quietly(self._fs, seg.fd)
        for fd in self._graveyard:
            _close_quietly(self._fs, fd)
        self._graveyard = []
        if self._high_fd >= 0:
            _close_quietly(self._fs, self._high_fd)
            self._high_fd = -1

    def _new_segment(self, segs: list[_Segment], directory: Path, start: int, size: int) -> _Segment:
        path = directory / _name(start)
        fd = self._fs.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            self._fs.ftruncate(fd, size)
        except OSError:
            self._fs.close(fd)
            raise
        seg = _Segment(start, path, fd)
        segs.append(seg)
        self._dirs_dirty = True
        return seg

    def _index_slot(self, index: int) -> tuple[_Segment, int]:
        off = index * codec.INDEX_UNIT_SIZE
        isize = self.index_file_size
        if self._index:
            last = self._index[-1]
            rel = off - last.start
            if 0 <= rel < isize:
                return last, rel
            if rel < 0:
                i = (off - self._index[0].start) // isize
                if i >= 0 and self._index[i].start <= off < self._index[i].start + isize:
                    return self._index[i], off - self._index[i].start
        start = off - off % isize
        seg = self._new_segment(self._index, self.index_dir, start, isize)
        self._index.sort(key=lambda s: s.start)
        return seg, off - start

    def _flush_index(self) -> None:
        """Write the buffered index records (caller holds the lock)."""
        buf = self._ibuf
        if not buf:
            return
        unit = codec.INDEX_UNIT_SIZE
        first = self._end + 1 - len(buf) // unit
        if (self._end + 1) * unit > self._index_high:
            self._raise_high(-1, (self._end + 1) * unit)
        off = 0
        while off < len(buf):
            try:  # (a new index segment's creation included: an I/O error is a StoreError)
                seg, rel = self._index_slot(first + off // unit)
                n = min(len(buf) - off, self.index_file_size - rel)
                self._fs.pwrite(seg.fd, buf[off : off + n], rel)
            except OSError as e:
                raise StoreError(f"write of index records in {self.index_dir} failed: {e}") from e
            self._dirty[seg.fd] = seg.fd
            off += n
        self._ibuf = bytearray()

    def _remove(self, seg: _Segment) -> None:
        try:
            self._fs.unlink(seg.path)
        except FileNotFoundError:
            pass
        self._dirty.pop(seg.fd, None)
        self._idirty.pop(seg.fd, None)
        self._graveyard.append(seg.fd)
        self._dirs_dirty = True

    def _zero(self, seg: _Segment, start: int, end: int) -> None:
        while start < end:
            n = min(end - start, len(_ZERO_CHUNK))
            self._fs.pwrite(seg.fd, _ZERO_CHUNK[:n] if n < len(_ZERO_CHUNK) else _ZERO_CHUNK, start)
            start += n
        self._dirty[seg.fd] = seg.fd

    def _cut_data(self, cut: int, old_end: int) -> None:
        keep: list[_Segment] = []
        for i, seg in enumerate(self._data):
            if seg.start > cut and i > 0:
                self._remove(seg)
                continue
            if seg.start <= cut < seg.start + self.data_file_size:
                hi = min(old_end - seg.start, self.data_file_size)
                self._zero(seg, cut - seg.start, max(hi, cut - seg.start))
            keep.append(seg)
        self._data = keep

    def _cut_index(self, cut: int, old_end: int) -> None:
        keep: list[_Segment] = []
        for seg in self._index:
            if seg.start >= cut:
                self._remove(seg)
                continue
            if cut < seg.start + self.index_file_size:
                hi = min(old_end - seg.start, self.index_file_size)
                self._zero(seg, cut - seg.start, max(hi, cut - seg.start))
            keep.append(seg)
        self._index = keep

    def _read_chain(self, index: int) -> int:
        self._write_pending()
        entry_pos = self._pos[index - self._begin]
        seg = self._data[(entry_pos - self._data[0].start) // self.data_file_size]
        return codec.decode_header(self._fs.pread(seg.fd, codec.HEADER_SIZE, entry_pos - seg.start)).chain_crc

    def _raise_high(self, data_need: int, index_need: int, *, exact: bool = False) -> None:
        """Move the high-water marks to cover ``data_need`` / ``index_need`` (absolute offsets, -1:
        keep) plus a step, and fdatasync the marker before the caller writes past the old marks."""
        if exact:
            data_high, index_high = data_need, index_need
        else:
            data_high = max(self._data_high, data_need + HIGHWATER_DATA_STEP if data_need >= 0 else -1)
            index_high = max(self._index_high, index_need + HIGHWATER_INDEX_STEP if index_need >= 0 else -1)
        text = f"dataHigh={data_high:020d}\nindexHigh={index_high:020d}\n".encode()
        try:
            if self._high_fd < 0:
                self._high_fd = self._fs.open(self.directory / HIGHWATER_FILE, os.O_RDWR | os.O_CREAT, 0o644)
                self._fs.ftruncate(self._high_fd, len(text))
                self._dirs_dirty = True
            self._fs.pwrite(self._high_fd, text, 0)
            self._fs.fsync(self._high_fd)
        except OSError as e:
            raise StoreError(f"cannot write {self.directory / HIGHWATER_FILE}: {e}") from e
        self._data_high, self._index_high = data_high, index_high

    def _load_high(self) -> None:
        """Read the high-water marks; a missing or unreadable marker leaves them unknown (-1)."""
        if self._ignore_high:
            self._data_high = self._index_high = -1
            return
        try:
            text = self._fs.read_at(self.directory / HIGHWATER_FILE, 0).decode()  # the store's file system
            kv = dict(line.split("=", 1) for line in text.split())
            data_high, index_high = int(kv["dataHigh"]), int(kv["indexHigh"])
        except (OSError, ValueError, KeyError, UnicodeDecodeError):
            self._data_high = self._index_high = -1
            return
        if data_high < 0 or index_high < 0:
            data_high = index_high = -1
        self._data_high, self._index_high = data_high, index_high

    # ----------------------------------------------------------------- recovery

    def _list(self, directory: Path, size: int, what: str) -> list[tuple[int, Path, int]]:
        out = []
        for name, n in self._fs.list_files(directory):
            p = directory / name
            if not _NAME.match(name):
                log.warning("ignoring %s: not a %s segment name (20 digits)", p, what)
                continue
            if n > size:
                raise StoreError(
                    f"{p} has {n} bytes, more than {what}_file_size={size}: "
                    f"open the store with the segment sizes it was created with"
                )
            out.append((int(p.name), p, n))
        out.sort()
        return out

    def _load_trusted(
        self, files: list[tuple[int, Path, int]], committed: int
    ) -> tuple[int, int, int, int, int] | None:
        """Take the entries of all but the newest ``verify_files`` data files from the index, with
        cheap consistency checks; None (check everything) when anything disagrees. The file that
        holds the checkpoint's ``committed`` entry and all later ones are always checked: a crash
        can only damage what was not synced, which lies after it.
        Returns ``(trusted files, begin, next index, last term, last chainCrc)``."""
        assert self.verify_files is not None
        t = len(files) - self.verify_files
        fsize, unit = self.data_file_size, codec.INDEX_UNIT_SIZE
        if t <= 0:
            return None
        first = files[0][0]
        if committed >= 0:
            # The committed entry's index record was synced with it (sync flushes the index).
            isize = self.index_file_size
            off = committed * unit
            try:
                rec = self._fs.read_at(self.index_dir / _name(off - off % isize), off % isize, unit)
                magic, cpos, _, cidx, _ = codec.decode_index(rec)
            except (OSError, struct.error):
                return None
            if cidx != committed or magic not in codec.VALID_MAGICS or cpos < first:
                return None
            t = min(t, (cpos - first) // fsize)
            if t <= 0:
                return None
        if any(files[i][0] != first + i * fsize or files[i][2] != fsize for i in range(t + 1)):
            return None
        try:
            h0 = codec.decode_header(self._fs.read_at(files[0][1], 0, codec.HEADER_SIZE))
            ht = codec.decode_header(self._fs.read_at(files[t][1], 0, codec.HEADER_SIZE))
        except (OSError, ValueError, struct.error):
            return None
        if h0.magic not in codec.VALID_MAGICS or h0.pos != first:
            return None
        if ht.magic not in codec.VALID_MAGICS or ht.pos != files[t][0] or ht.index <= h0.index:
            return None
        begin, stop = h0.index, ht.index
        isize = self.index_file_size
        raw = bytearray()
        off = begin * unit
        while off < stop * unit:
            seg_start = off - off % isize
            n = min(stop * unit, seg_start + isize) - off
            try:
                chunk = self._fs.read_at(self.index_dir / _name(seg_start), off - seg_start, n)
            except OSError:
                return None
            if len(chunk) != n:
                return None
            raw += chunk
            off += n
        pos_l, size_l, term_l, magic_l = array("q"), array("l"), array("q"), array("b")
        want_idx, want_pos, prev_term = begin, first, -1
        for magic, pos, size, idx, term in codec.INDEX_RECORD.iter_unpack(raw):
            if pos != want_pos and pos == want_pos - want_pos % fsize + fsize:
                pass  # the previous file ended in blank padding
            elif pos != want_pos:
                return None
            if (
                idx != want_idx
                or magic not in codec.VALID_MAGICS
                or size < codec.HEADER_SIZE
                or term < prev_term
                or pos % fsize + size + codec.MIN_BLANK_LEN > fsize
            ):
                return None
            pos_l.append(pos)
            size_l.append(size)
            term_l.append(term)
            magic_l.append(magic)
            want_idx, want_pos, prev_term = idx + 1, pos + size, term
        if want_pos > files[t][0] or ht.term < prev_term or not pos_l:
            return None
        # The chain continues from the last trusted entry's header, which must match its record.
        last_pos = pos_l[-1]
        fi = (last_pos - first) // fsize
        hl = codec.decode_header(self._fs.read_at(files[fi][1], last_pos - files[fi][0], codec.HEADER_SIZE))
        if (hl.index, hl.term, hl.pos, hl.size) != (stop - 1, term_l[-1], last_pos, size_l[-1]):
            return None
        self._pos.extend(pos_l)
        self._size.extend(size_l)
        self._terms.extend(term_l)
        self._magic.extend(magic_l)
        return t, begin, stop, prev_term, hl.chain_crc

    def _recover(self) -> RecoveryReport:
        t0 = time.monotonic()
        self._load_high()
        ck = self._checkpoint.load()
        committed = ck.committed_index
        self._checkpoint_committed = committed
        rep = RecoveryReport(str(self.directory), checkpoint_end_index=ck.end_index)
        files = self._list(self.data_dir, self.data_file_size, "data")
        rep.data_files = len(files)
        if not files:
            self._recover_empty(rep, max(committed, ck.repair_to))
            rep.seconds = time.monotonic() - t0
            return rep
        scan = self._scan_data(files, committed, rep)
        begin = scan.begin
        if begin is None:
            begin = 0 if files[0][0] == 0 and not scan.leading_gap else ck.end_index + 1
        end = begin + len(self._pos) - 1
        if scan.limited and (scan.cut is not None or end < ck.end_index):
            # The marker may be wrong (damaged, restored from elsewhere): judge by whole files.
            # Also when the log ends before entries the checkpoint saw synced.
            why = (
                scan.cut[3]
                if scan.cut is not None
                else f"log ends at {end}, checkpoint endIndex {ck.end_index}"
            )
            log.info("%s: %s; reading the whole files", self.data_dir, why)
            self._ignore_high = True
            for arr in (self._pos, self._size, self._terms, self._magic):
                del arr[:]
            return self._recover()
        later = [p for (_, p, _) in files[scan.last_fi + 1 :]]
        self._judge_end(files, scan, end, ck, bool(later), rep)
        if rep.repair_to >= 0:
            # the durable entries after the damage too, committed or not (the member may have
            # acknowledged them): the repair must bring the log back to the last of them
            last = self._salvage_files(files, end + 1, rep.repair_to)
            rep.repair_to = max(rep.repair_to, last)
        self._open_kept(files[: scan.last_fi + 1], scan.end_pos, later, rep)
        self._settle(begin, end, scan, committed, rep)
        rep.seconds = time.monotonic() - t0
        if rep.clean:
            log.info("%s", rep.describe())
        else:
            log.warning("%s", rep.describe())
        return rep

    def _salvage_files(self, files: list[tuple[int, Path, int]], lo: int, hi: int) -> int:
        """Before recovery cuts a damaged committed prefix at ``lo``: keep the entries ``lo..hi``
        whose records still pass every check of their own (index, term, pos, size, bodyCrc), found
        through the index files or right after the entry kept before them, in :attr:`salvaged` (at
        most SALVAGE_MAX_ENTRIES), and after ``hi`` the consecutive intact ones that follow
        (durable entries past the committed prefix, whose index records need not be: the index is
        fsynced only for committed entries, so these are found by reading on in the data).
        A damaged record does not take the intact ones after it down with it (issue 36 item 2).
        Returns the last index kept (``lo - 1`` when none)."""
        isize = self.index_file_size
        index_files = {start: path for start, path, _ in self._list(self.index_dir, isize, "index")}
        data_files = {start: path for start, path, _ in files}
        prev_term = -1
        last = lo - 1
        i = lo - 1
        while len(self.salvaged) < SALVAGE_MAX_ENTRIES:
            i += 1
            if i > hi + 1 and last != i - 1:
                break  # past the committed prefix: only an unbroken run of intact entries
            e = self._salvage_indexed(index_files, data_files, i, prev_term)
            if e is None and last == i - 1 and last >= lo:
                kept = self.salvaged[last]
                e = self._salvage_next(data_files, i, kept.pos + kept.size, prev_term)
            if e is not None:
                self.salvaged[i] = e
                prev_term = e.term
                last = i
        if self.salvaged:
            log.warning(
                "%s: kept %d intact committed entries (and the durable ones after them) in [%d, %d] "
                "after the damage, to re-append once the damaged ones are fetched again",
                self.data_dir,
                len(self.salvaged),
                lo,
                last,
            )
        return last

    def _salvage_indexed(
        self, index_files: dict[int, Path], data_files: dict[int, Path], i: int, prev_term: int
    ) -> Entry | None:
        """Entry ``i`` where its index record says, if that record and the entry's own pass every
        check (see :meth:`_salvage_files`); else None."""
        isize, fsize, unit = self.index_file_size, self.data_file_size, codec.INDEX_UNIT_SIZE
        off = i * unit
        ipath = index_files.get(off - off % isize)
        try:
            rec = self._fs.read_at(ipath, off % isize, unit) if ipath is not None else b""
            if len(rec) < unit:
                return None
            magic, pos, size, idx, term = codec.INDEX_RECORD.unpack(rec)
            dpath = data_files.get(pos - pos % fsize)
            if idx != i or dpath is None or not _HEADER_SIZE <= size <= fsize:
                return None
            buf = self._fs.read_at(dpath, pos % fsize, size)
        except (OSError, struct.error):
            return None
        h, reason = codec.check_record(
            buf, 0, abs_pos=pos, expect_index=i, min_term=max(prev_term, 0), prev_chain=None
        )
        if reason is None and h.term == term and h.size == size == len(buf) and h.magic == magic:
            return Entry(i, h.term, bytes(buf[_HEADER_SIZE:]), h.magic, pos, h.channel)
        return None

    def _salvage_next(self, data_files: dict[int, Path], i: int, pos: int, prev_term: int) -> Entry | None:
        """Entry ``i`` read at data position ``pos`` (right after the entry before it), or at the
        start of the next data file when blank padding or too little room is there, if it passes
        every check of its own; else None."""
        fsize = self.data_file_size
        for _ in range(2):
            rel = pos % fsize
            dpath = data_files.get(pos - rel)
            if dpath is None:
                return None
            try:
                head = self._fs.read_at(dpath, rel, _HEADER_SIZE)
                if fsize - rel < _HEADER_SIZE + _MIN_BLANK or head[:4] == b"\xff\xff\xff\xff":
                    pos += fsize - rel  # the file ends in padding: the record starts the next one
                    continue
                size = codec.decode_header(head).size
                if not _HEADER_SIZE <= size <= fsize - rel:
                    return None
                buf = self._fs.read_at(dpath, rel, size)
            except (OSError, struct.error):
                return None
            h, reason = codec.check_record(
                buf, 0, abs_pos=pos, expect_index=i, min_term=max(prev_term, 0), prev_chain=None
            )
            if reason is None and h.size == len(buf):
                return Entry(i, h.term, bytes(buf[_HEADER_SIZE:]), h.magic, pos, h.channel)
            return None
        return None

    def _recover_empty(self, rep: RecoveryReport, committed: int) -> None:
        """Recovery without data files: a new store, unless the checkpoint saw committed entries."""
        if committed >= 0 and not self.repair:
            raise CorruptionError(
                f"{self.data_dir}: no data files, but the checkpoint says entries up to "
                f"{committed} are committed (check: committed entries present)"
            )
        if committed >= 0:
            rep.repair_to, rep.damaged_from = committed, 0
            log.warning(
                "%s: no data files but %d committed entries: repairing from the leader",
                self.data_dir,
                committed + 1,
            )
        self._new_segment(self._data, self.data_dir, 0, self.data_file_size)
        self._recover_index(rep)
        self._raise_high(HIGHWATER_DATA_STEP, HIGHWATER_INDEX_STEP, exact=True)

    def _scan_data(self, files: list[tuple[int, Path, int]], committed: int, rep: RecoveryReport) -> _Scan:
        """Check the data files in order (after those taken from the index, see _load_trusted),
        appending every good record to the in-memory arrays; stop at the first failing check."""
        fsize = self.data_file_size
        first_start = files[0][0]
        if first_start % fsize:
            raise StoreError(f"{files[0][1]}: start offset {first_start} is not a multiple of {fsize}")
        known = 0 if first_start == 0 else None
        scan = _Scan(expect=known, prev_chain=known, end_pos=first_start)
        t = self._load_trusted(files, committed) if self.verify_files is not None else None
        trusted = 0
        if t is not None:
            trusted, scan.begin, scan.expect, scan.prev_term, scan.prev_chain = t
            scan.end_pos = files[trusted][0]
            scan.check_from = t[2]
            rep.trusted_files = trusted
        for fi in range(trusted, len(files)):
            self._scan_file(scan, files, fi, rep)
            if scan.cut is not None or scan.clean_end is not None:
                break
        if t is None and (first_start or scan.leading_gap) and len(self._pos) and scan.begin is not None:
            self._check_first(scan, files, committed)
        rep.entries_checked = scan.n_checked
        return scan

    def _check_first(self, scan: _Scan, files: list[tuple[int, Path, int]], committed: int) -> None:
        """The first record of a log that begins after a compacted prefix or a reset's gap has no
        chainCrc to check (the entry before it is gone), so a damaged term in its header (outside
        bodyCrc) would pass: when it is committed, its index record (synced before the checkpoint
        named it, see :meth:`save_checkpoint`) that names the same index and position must agree
        with it, else the scan is cut before it (damage inside the committed prefix: repaired
        from the peers, or refused). An index record of another position vouches for nothing
        (the header's index may be the damaged field: not caught here)."""
        begin = scan.begin
        assert begin is not None
        if begin > committed:
            return
        unit, isize = codec.INDEX_UNIT_SIZE, self.index_file_size
        off = begin * unit
        try:
            rec = self._fs.read_at(self.index_dir / _name(off - off % isize), off % isize, unit)
            indexed: tuple[int, ...] | None = codec.decode_index(rec)
        except (OSError, struct.error):
            indexed = None
        pos = self._pos[0]
        if indexed is None or indexed[1] != pos or indexed[3] != begin:
            return
        if indexed == (self._magic[0], pos, self._size[0], begin, self._terms[0]):
            return
        fi = (pos - files[0][0]) // self.data_file_size
        scan.cut = (
            fi,
            files[fi][1],
            pos - files[fi][0],
            f"entry {begin}: header disagrees with its index record",
        )
        scan.clean_end, scan.last_fi, scan.end_pos, scan.prev_chain = None, fi, pos, None
        for arr in (self._pos, self._size, self._terms, self._magic):
            del arr[:]

    def _scan_file(
        self, scan: _Scan, files: list[tuple[int, Path, int]], fi: int, rep: RecoveryReport
    ) -> None:
        """Check data file ``fi``: its records, then what follows them (end of data or a cut)."""
        start, path, length = files[fi]
        fsize = self.data_file_size
        scan.last_fi = fi
        # Bytes at or past the data high-water mark were never written: read only up to it.
        avail = length if self._data_high < 0 else min(length, max(0, self._data_high - start))
        scan.limited = scan.limited or avail < length
        buf = self._fs.read_at(path, 0, avail)
        rep.bytes_read += len(buf)
        rel = 0
        if fi == 0 and len(buf) >= 8 and buf[:4] == b"\xff\xff\xff\xff":
            gap = int.from_bytes(buf[4:8], "big", signed=True)
            if 8 <= gap < fsize - _HEADER_SIZE:
                # a log restarted by INSTALL_SNAPSHOT (reset): the first record follows the gap
                rel, scan.expect, scan.prev_chain = gap, None, None
                scan.leading_gap = True
        rel = self._scan_records(scan, fi, path, start, length, buf, rel)
        if scan.cut is None:
            self._scan_stop(scan, files, fi, buf, rel)
        scan.end_pos = start + rel

    def _scan_records(
        self, scan: _Scan, fi: int, path: Path, start: int, length: int, buf: bytes, rel: int
    ) -> int:
        """Check the records of ``buf`` (data file ``fi``) from ``rel`` on; returns the offset of the
        first that is not one (end of the read bytes, blank padding, a zero header), or of the first
        that fails a check, which sets ``scan.cut``."""
        fsize = self.data_file_size
        avail = len(buf)
        mv = memoryview(buf)
        expect, prev_term, prev_chain, begin = scan.expect, scan.prev_term, scan.prev_chain, scan.begin
        n_checked = 0
        pos_a, size_a, terms_a, magic_a = (
            self._pos.append,
            self._size.append,
            self._terms.append,
            self._magic.append,
        )
        while rel + 4 <= avail:
            magic = int.from_bytes(buf[rel : rel + 4], "big", signed=True)
            if magic == codec.BLANK_MAGIC:
                break
            if magic == 0 and buf[rel : rel + codec.HEADER_SIZE].count(0) == min(
                codec.HEADER_SIZE, avail - rel
            ):
                break
            # Fast path: every check inline; check_record only to name what failed.
            if avail - rel >= _HEADER_SIZE:
                magic, size, idx, term, pos, _ch, ccrc, bcrc, blen = _UNPACK_HEADER(buf, rel)
                end_rel = rel + size
                if (
                    (magic == MAGIC_NORMAL or magic == MAGIC_NOOP)
                    and size == _HEADER_SIZE + blen
                    and blen >= 0
                    and end_rel + _MIN_BLANK <= fsize
                    and end_rel <= avail
                    and pos == start + rel
                    and (expect is None or idx == expect)
                    and term >= prev_term
                    and crc32(mv[rel + _HEADER_SIZE : end_rel]) == bcrc
                    and (
                        prev_chain is None
                        or crc32(mv[rel + 40 : rel + 44], crc32(mv[rel : rel + 36], prev_chain)) == ccrc
                    )
                ):
                    if begin is None:
                        begin = idx
                    pos_a(pos)
                    size_a(size)
                    terms_a(term)
                    magic_a(magic)
                    expect = idx + 1
                    prev_term = term
                    prev_chain = ccrc
                    rel = end_rel
                    n_checked += 1
                    continue
            # the fast path checks what check_record does plus the 8 reserved bytes: one failed
            _, reason = codec.check_record(
                mv, rel, abs_pos=start + rel, expect_index=expect, min_term=prev_term, prev_chain=prev_chain
            )
            reason = reason or "record leaves less than the 8 reserved bytes in the file"
            if length < fsize:
                reason += f" (the file has {length} bytes, short of {fsize})"
            scan.cut = (fi, path, rel, reason)
            break
        scan.expect, scan.prev_term, scan.prev_chain, scan.begin = expect, prev_term, prev_chain, begin
        scan.n_checked += n_checked
        return rel

    def _scan_stop(
        self, scan: _Scan, files: list[tuple[int, Path, int]], fi: int, buf: bytes, rel: int
    ) -> None:
        """Judge what ends the records of data file ``fi`` at ``rel`` (see _scan_records): the clean
        end of the log, blank padding before the next file (nothing set), or a cut."""
        start, path, length = files[fi]
        fsize = self.data_file_size
        avail = len(buf)
        if rel + 4 > avail:
            if avail < length:
                # the read stopped at the high-water mark, before a header could show zeros: a
                # marker below the data (damaged, restored from elsewhere) must not end the log
                # here, which would drop durable records after it (read the whole files instead)
                scan.cut = (fi, path, rel, "the high-water mark ends the read here")
            else:  # (a record leaves 8 bytes in a file: only a short file ends this close)
                scan.cut = (fi, path, rel, f"file ends at {length} bytes, short of {fsize}")
        elif int.from_bytes(buf[rel : rel + 4], "big", signed=True) == codec.BLANK_MAGIC:
            blen = int.from_bytes(buf[rel + 4 : rel + 8], "big", signed=True)
            if blen != fsize - rel:
                scan.cut = (fi, path, rel, f"blank padding of length {blen}, expected {fsize - rel}")
            elif fi + 1 >= len(files) or files[fi + 1][0] != start + fsize:
                scan.cut = (fi, path, rel, "blank padding with no following data file")
        elif _all_zero(buf, rel):  # a zero header
            scan.clean_end = (fi, rel)
        else:  # a later page of a record reached the disk, its header did not
            scan.cut = (fi, path, rel, "zero header followed by non-zero bytes (torn write)")

    def _judge_end(
        self,
        files: list[tuple[int, Path, int]],
        scan: _Scan,
        end: int,
        ck: CheckpointState,
        later: bool,
        rep: RecoveryReport,
    ) -> None:
        """Decide the log ending at entry ``end``: CorruptionError inside the committed prefix,
        otherwise a cut recorded in ``rep`` and logged (a failure at a record boundary, or a clean
        end with ``later`` data files, is only benign beyond the committed prefix; a repair in
        progress at the last checkpoint extends it to the repair's mark)."""
        committed = max(ck.committed_index, ck.repair_to)
        cut = scan.cut
        if cut is None and scan.clean_end is not None and later:
            cfi, crel = scan.clean_end
            cut = (cfi, files[cfi][1], crel, "zero header (end of data) but later data files exist")
        if end < committed and self.repair:
            rep.repair_to, rep.damaged_from = committed, end + 1
            log.warning(
                "%s: committed entries from %d are damaged or missing (%s; checkpoint committedIndex %d): "
                "cutting the log after %d and repairing it from the leader",
                self.data_dir,
                end + 1,
                cut[3] if cut is not None else "the log ends early",
                committed,
                end,
            )
        elif cut is None:
            if end < committed:
                raise CorruptionError(
                    f"{self.data_dir}: the log ends at entry {end} but the checkpoint says entries up to "
                    f"{committed} are committed (check: committed entries present); refusing to serve "
                    f"a damaged log"
                )
            return
        if cut is None:
            return
        fsize = self.data_file_size
        cfi, cpath, crel, reason = cut
        if end < committed and not self.repair:
            raise CorruptionError(
                f"{cpath}: offset {crel} (pos {files[0][0] + cfi * fsize + crel}): entry {end + 1}: "
                f"{reason}; entry {end + 1} is inside the committed prefix (checkpoint "
                f"committedIndex={committed}); refusing to serve a damaged log, repair or "
                f"restore the store"
            )
        rep.cut_file, rep.cut_offset, rep.cut_pos, rep.cut_reason = (
            str(cpath),
            crel,
            files[0][0] + cfi * fsize + crel,
            reason,
        )
        # "no following file" after a blank is a crash between padding and creating the
        # next file: nothing is lost, so it is not worth a warning.
        level = logging.INFO if reason.startswith("blank padding with no") else logging.WARNING
        log.log(
            level,
            "%s: offset %d: cutting the log after entry %d (checkpoint endIndex %d, committedIndex %d): %s",
            cpath,
            crel,
            end,
            ck.end_index,
            committed,
            reason,
        )

    def _open_kept(
        self, kept: list[tuple[int, Path, int]], end_pos: int, later: list[Path], rep: RecoveryReport
    ) -> None:
        """Open the ``kept`` data files at full size, zero a cut tail past ``end_pos`` and remove the
        ``later`` files."""
        fsize = self.data_file_size
        for start, path, length in kept:
            fd = self._fs.open(path, os.O_RDWR)
            seg = _Segment(start, path, fd)
            self._data.append(seg)
            if length < fsize:
                self._fs.ftruncate(fd, fsize)
                rep.extended_files.append(str(path))
                self._dirty[fd] = fd
        tail = self._data[-1]
        trel = end_pos - tail.start
        if rep.cut_reason is not None and trel < fsize:
            rest = self._fs.read_at(tail.path, trel)
            nz = len(rest.rstrip(b"\0"))
            if nz:
                self._zero(tail, trel, trel + nz)
        for p in later:
            self._fs.unlink(p)
            rep.removed_files.append(str(p))
            self._dirs_dirty = True

    def _settle(self, begin: int, end: int, scan: _Scan, committed: int, rep: RecoveryReport) -> None:
        """Take the recovered log [begin, end] as the store's, check the index against it, and make
        the repairs durable before anything is served."""
        self._begin = begin
        self._end = end
        self._end_term = self._terms[-1] if len(self._terms) else -1
        self._last_chain = scan.prev_chain if scan.prev_chain is not None else 0
        self._next_pos = scan.end_pos
        self._committed = min(committed, end)
        rep.begin_index, rep.end_index, rep.end_term = begin, end, self._end_term
        rep.committed_index = self._committed
        self._recover_index(rep, check_from=scan.check_from)
        # Make the repairs, and whatever a killed predecessor left in the page cache, durable
        # before serving anything: synced_index then tells the truth.
        for seg in self._data + self._index:
            self._fs.fsync(seg.fd)
        self._dirty.clear()
        self._idirty.clear()
        # Everything past the end is zero now (checked, or cut and synced): restart the marks there.
        self._raise_high(
            self._next_pos + HIGHWATER_DATA_STEP,
            (self._end + 1) * codec.INDEX_UNIT_SIZE + HIGHWATER_INDEX_STEP,
            exact=True,
        )
        if self._dirs_dirty or rep.removed_files:
            self._fs.fsync_dir(self.data_dir)
            self._fs.fsync_dir(self.index_dir)
            self._fs.fsync_dir(self.directory)
            self._dirs_dirty = False

    def _recover_index(self, rep: RecoveryReport, check_from: int = 0) -> None:
        isize = self.index_file_size
        unit = codec.INDEX_UNIT_SIZE
        lo = self._begin * unit
        hi = (self._end + 1) * unit
        # Keep the files overlapping [lo, hi); others are stale (compacted away or truncated).
        for start, path, _ in self._list(self.index_dir, isize, "index"):
            if start % isize:
                raise StoreError(f"{path}: start offset {start} is not a multiple of {isize}")
            if not (start < hi and start + isize > lo):
                self._fs.unlink(path)
                rep.removed_files.append(str(path))
                self._dirs_dirty = True
                continue
            self._index.append(_Segment(start, path, self._fs.open(path, os.O_RDWR)))
        rebuilt_from: int | None = None
        behind = False  # the index only lacks the newest records (buffered writes lost in a kill)
        # Entries below check_from came from the index itself (verify_files): nothing to compare.
        lo_check = max(lo, check_from * unit)
        seg_start = lo_check - lo_check % isize
        while seg_start < hi:
            a, b = max(lo_check, seg_start), min(hi, seg_start + isize)
            seg = next((s for s in self._index if s.start == seg_start), None)
            if seg is None:
                seg = self._new_segment(self._index, self.index_dir, seg_start, isize)
                self._index.sort(key=lambda s: s.start)
            elif self._fs.fsize(seg.fd) < isize:
                self._fs.ftruncate(seg.fd, isize)
                rep.extended_files.append(str(seg.path))
            have = self._fs.pread(seg.fd, b - a, a - seg_start)
            k0 = a // unit - self._begin
            want = b"".join(
                codec.encode_index(
                    self._magic[k], self._pos[k], self._size[k], self._begin + k, self._terms[k]
                )
                for k in range(k0, k0 + (b - a) // unit)
            )
            if rebuilt_from is None and have != want:
                bad = next(j for j in range(0, len(want), unit) if have[j : j + unit] != want[j : j + unit])
                rebuilt_from = (a + bad) // unit
                # zeros from there on: buffered records a kill lost, unless they are a committed
                # entry's, which the checkpoint's sync made durable (then they were lost: damage)
                behind = not any(have[bad:]) and rebuilt_from > self._committed
            elif rebuilt_from is not None and any(have):
                behind = False
            if rebuilt_from is not None:
                # From the first disagreement on, rewrite everything from the data.
                off = max(a, rebuilt_from * unit)
                self._fs.pwrite(seg.fd, want[off - a :], off - seg_start)
                self._dirty[seg.fd] = seg.fd
            seg_start += isize
        # Zero stale records past the end in the last kept file.
        if self._index and hi > lo:
            seg = self._index[-1]
            trel = hi - seg.start
            if 0 <= trel < isize:
                n = isize - trel
                if self._index_high >= 0:
                    n = max(0, min(n, self._index_high - hi))
                rest = self._fs.pread(seg.fd, n, trel)
                nz = len(rest.rstrip(b"\0"))
                if nz:
                    self._zero(seg, trel, trel + nz)
                    if rebuilt_from is None:
                        rebuilt_from = self._end + 1
                    behind = False
        if rebuilt_from is not None:
            rep.index_rebuilt_from = rebuilt_from
            rep.index_behind = behind
            log.log(
                logging.INFO if behind else logging.WARNING,
                "%s: index records %s the data from entry %d; rebuilt from the data",
                self.index_dir,
                "lag behind" if behind else "disagree with",
                rebuilt_from,
            )
        rep.index_files = len(self._index)


def _all_zero(buf: bytes, start: int) -> bool:
    """Whether ``buf[start:]`` is all zero bytes (memcmp in 1 MiB chunks; bytes.count is slower)."""
    chunk = len(_ZERO_CHUNK)
    for a in range(start, len(buf), chunk):
        piece = buf[a : a + chunk]
        if piece != _ZERO_CHUNK[: len(piece)]:
            return False
    return True


def _close_quietly(fs: FileSystem, fd: int) -> None:
    try:
        fs.close(fd)
    except OSError:
        pass
