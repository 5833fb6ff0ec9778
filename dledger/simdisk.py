"""A simulated disk for the deterministic simulation: the :class:`dledger.store.fs.FileSystem` the
file log store and the term/vote file run over in :mod:`dledger.sim`.

Files live in memory as 4 KiB pages. Every file has its current contents (what reads see: the page
cache) and its durable contents (what survives a power loss); ``fsync`` makes the current contents
durable. Names are durable only once their directory is fsynced (``fsync_dir``): a file created or
renamed but whose directory was not synced disappears in a crash, as on ext4 without
``dir_index`` journaling guarantees. :meth:`SimDisk.crash` drops everything not durable and, with
the given probability, lets a prefix of the last unsynced write reach the disk (a torn write);
:meth:`SimDisk.flip_bit` corrupts one durable bit. ``SimDisk.failing`` makes calls fail as a sick disk's
do (``full``: ENOSPC on every write and file growth, as on a full file system, where creating an
empty file still works; ``filling``: the file system fills up, so writes take the ``room`` bytes
left (a write longer than that is cut short and returns its short count, as write(2) does) and
then fail as on a full one; ``fsync``: EIO on fsync; ``read``: EIO on a
share of the reads made while ``io_live`` is set, i.e. by the member's own code, not by the
simulation's checks). Faults follow FoundationDB's
``AsyncFileNonDurable`` and TigerBeetle's simulated storage (see ../shared/reference/simulation.md).
"""

from __future__ import annotations

import errno
import os
import random
from collections.abc import Sequence
from pathlib import Path

PAGE = 4096
_ZERO_PAGE = bytes(PAGE)
READ_ERROR_SHARE = 0.3  # failing == "read": the share of the member's reads that fail


class _Inode:
    __slots__ = ("pages", "size", "dpages", "dsize", "dirty", "last_write")

    def __init__(self) -> None:
        self.pages: dict[int, bytes] = {}
        self.size = 0
        self.dpages: dict[int, bytes] = {}
        self.dsize = 0
        self.dirty: set[int] = set()
        self.last_write: tuple[int, bytes] | None = None  # (offset, data) not yet fsynced

    def read(self, offset: int, n: int, durable: bool = False) -> bytes:
        pages, size = (self.dpages, self.dsize) if durable else (self.pages, self.size)
        end = size if n < 0 else min(size, offset + n)
        if offset >= end:
            return b""
        out = bytearray()
        pos = offset
        while pos < end:
            p, rel = divmod(pos, PAGE)
            take = min(PAGE - rel, end - pos)
            page = pages.get(p)  # pages are always PAGE bytes long
            out += page[rel : rel + take] if page is not None else bytes(take)
            pos += take
        return bytes(out)

    def write(self, offset: int, data: bytes, durable: bool = False) -> None:
        if not durable:
            p, rel = divmod(offset, PAGE)
            n = len(data)
            if 0 < n and rel + n <= PAGE:  # the usual write (a record, an index entry): one page
                pages = self.pages
                old = pages.get(p) or _ZERO_PAGE
                pages[p] = old[:rel] + data + old[rel + n :]
                self.dirty.add(p)
                if offset + n > self.size:
                    self.size = offset + n
                self.last_write = (offset, data)
                return
        pages = self.dpages if durable else self.pages
        pos, view = offset, memoryview(data)
        while view:
            p, rel = divmod(pos, PAGE)
            take = min(PAGE - rel, len(view))
            old = pages.get(p) or _ZERO_PAGE
            pages[p] = old[:rel] + bytes(view[:take]) + old[rel + take :]
            if not durable:
                self.dirty.add(p)
            pos += take
            view = view[take:]
        if durable:
            self.dsize = max(self.dsize, offset + len(data))
        else:
            self.size = max(self.size, offset + len(data))
            self.last_write = (offset, bytes(data))

    def truncate(self, size: int) -> None:
        if size < self.size:
            last = (size + PAGE - 1) // PAGE
            for p in [p for p in self.pages if p >= last]:
                del self.pages[p]
                self.dirty.add(p)
            rel = size % PAGE
            if rel and (size // PAGE) in self.pages:
                p = size // PAGE
                self.pages[p] = self.pages[p][:rel] + bytes(PAGE - rel)
                self.dirty.add(p)
        self.size = size

    def fsync(self) -> None:
        for p in self.dirty:
            page = self.pages.get(p)
            if page is None:
                self.dpages.pop(p, None)
            else:
                self.dpages[p] = page
        self.dirty.clear()
        self.dsize = self.size
        self.last_write = None

    def lose_unsynced(self, tear: int, survive: Sequence[int] = ()) -> None:
        """Back to the durable contents; ``tear`` > 0 bytes of the last unsynced write survive, and
        so do the unsynced pages ``survive`` (written back before the crash, in any order)."""
        torn = self.last_write
        for p in survive:
            page = self.pages.get(p)
            if page is None:
                self.dpages.pop(p, None)
            else:
                self.dpages[p] = page
            self.dsize = max(self.dsize, min(self.size, (p + 1) * PAGE))
        self.pages = dict(self.dpages)
        self.size = self.dsize
        self.dirty.clear()
        self.last_write = None
        if torn is not None and tear > 0:
            off, data = torn
            self.write(off, data[:tear], durable=True)
            self.pages = dict(self.dpages)
            self.size = self.dsize


class SimDisk:
    """One member's disk (see the module docstring). ``rng`` draws torn-write lengths and bit
    positions. Implements :class:`dledger.store.fs.FileSystem`."""

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng
        self._names: dict[str, _Inode] = {}
        self._durable_names: dict[str, _Inode] = {}
        self._fds: dict[int, tuple[_Inode, list[int]]] = {}  # fd -> (inode, [position])
        self._next_fd = 3
        self.torn = 0  # torn writes so far
        self.flipped = 0  # bits flipped so far
        self.reordered = 0  # crashes that kept an out-of-order subset of a file's unsynced pages
        self.lost = 0  # lost page writes so far
        self.misdirected = 0  # misdirected page writes so far
        # a disk error in effect (see the module docstring): None, "full", "filling", "fsync" or "read"
        self.failing: str | None = None
        self.room = 0  # failing == "filling": bytes writes may still take
        self.io_live = False  # the member's code is running (reads may fail under "read")
        self.errors = 0  # calls failed so far

    def _fail(self, call: str, code: int, msg: str) -> None:
        self.errors += 1
        raise OSError(code, f"{msg} (simulated: {call})")

    def _full(self, call: str) -> None:
        if self.failing == "full" or (self.failing == "filling" and self.room <= 0):
            self._fail(call, errno.ENOSPC, "No space left on device")

    def _take_room(self, call: str, n: int) -> int:
        """How many of ``n`` bytes a write may take (ENOSPC when none): all of them, or under
        ``filling`` what room is left."""
        self._full(call)
        if self.failing != "filling":
            return n
        n = min(n, self.room)
        self.room -= n
        return n

    def _read_error(self, call: str) -> None:
        if self.failing == "read" and self.io_live and self.rng.random() < READ_ERROR_SHARE:
            self._fail(call, errno.EIO, "Input/output error")

    # ------------------------------------------------------------ faults

    def crash(self, tear_probability: float = 0.0, reorder_probability: float = 0.0) -> None:
        """Power loss: close every descriptor, forget names not made durable and every unsynced
        write; with ``tear_probability`` per file, a prefix of its last unsynced write survives;
        with ``reorder_probability`` per file, a random subset of its unsynced pages survives."""
        self._fds.clear()
        seen: set[int] = set()
        for ino in list(self._names.values()) + list(self._durable_names.values()):
            if id(ino) in seen:
                continue
            seen.add(id(ino))
            tear = 0
            if ino.last_write is not None and tear_probability and self.rng.random() < tear_probability:
                tear = self.rng.randrange(1, len(ino.last_write[1]) + 1) if ino.last_write[1] else 0
                self.torn += tear > 0
            survive: list[int] = []
            if ino.dirty and reorder_probability and self.rng.random() < reorder_probability:
                survive = [p for p in sorted(ino.dirty) if self.rng.random() < 0.5]
                self.reordered += bool(survive)
            ino.lose_unsynced(tear, survive)
        self._names = dict(self._durable_names)

    def flip_bit(self, under: str = "", below: int | None = None) -> str | None:
        """Flip one random bit of a random file whose path starts with ``under`` (call it while the
        member is down, after :meth:`crash`); the path flipped, or None when no such file has
        bytes. ``below`` limits the bit to the first ``below`` bytes of the file."""
        paths = sorted(p for p, ino in self._durable_names.items() if p.startswith(under) and ino.dsize > 0)
        if not paths:
            return None
        path = self.rng.choice(paths)
        ino = self._durable_names[path]
        pos = self.rng.randrange(min(ino.dsize, below) if below is not None else ino.dsize)
        byte = ino.read(pos, 1, durable=True)
        flipped = bytes([byte[0] ^ (1 << self.rng.randrange(8))])
        ino.write(pos, flipped, durable=True)
        ino.pages = dict(ino.dpages)
        self.flipped += 1
        return path

    def flip_bit_in(self, path: str, lo: int, hi: int) -> int | None:
        """Flip one random durable bit of ``path`` in bytes ``[lo, hi)``; the byte offset flipped,
        or None when the file has no durable byte there."""
        ino = self._durable_names.get(path)
        if ino is None or min(hi, ino.dsize) <= lo:
            return None
        pos = self.rng.randrange(lo, min(hi, ino.dsize))
        byte = ino.read(pos, 1, durable=True)
        ino.write(pos, bytes([byte[0] ^ (1 << self.rng.randrange(8))]), durable=True)
        ino.pages = dict(ino.dpages)
        self.flipped += 1
        return pos

    def lose_page(self, path: str, below: int) -> int | None:
        """A lost write: one random durable page of ``path`` among those starting below byte
        ``below`` reads as zeros (its write never reached the disk); the page number, or None."""
        ino = self._durable_names.get(path)
        pages = sorted(p for p in (ino.dpages if ino else ()) if p * PAGE < below)
        if ino is None or not pages:
            return None
        p = self.rng.choice(pages)
        ino.dpages[p] = _ZERO_PAGE
        ino.pages = dict(ino.dpages)
        self.lost += 1
        return p

    def lose_tail(self, path: str, below: int) -> int | None:
        """A lost extent: ``path`` ends (durably) at a random page boundary below byte ``below``, as
        if its last blocks were never allocated or a repair dropped them; the first page lost, or
        None when the file has no durable page below ``below``."""
        ino = self._durable_names.get(path)
        pages = sorted(p for p in (ino.dpages if ino else ()) if p * PAGE < below)
        if ino is None or not pages:
            return None
        p = self.rng.choice(pages)
        for q in [q for q in ino.dpages if q >= p]:
            del ino.dpages[q]
        ino.dsize = min(ino.dsize, p * PAGE)
        ino.pages = dict(ino.dpages)
        ino.size = ino.dsize
        self.lost += 1
        return p

    def misdirect_page(self, path: str, below: int) -> tuple[int, int] | None:
        """A misdirected write: the last write of durable page ``p`` (below byte ``below``) landed on
        another page ``q`` of ``path`` instead: ``q`` now holds ``p``'s bytes and ``p`` reads as before
        the write (zeros); ``(p, q)``, or None when the file has fewer than two such pages."""
        ino = self._durable_names.get(path)
        pages = sorted(p for p in (ino.dpages if ino else ()) if p * PAGE < below)
        if ino is None or len(pages) < 2:
            return None
        p, q = self.rng.sample(pages, 2)
        ino.dpages[q] = ino.dpages[p]
        ino.dpages[p] = _ZERO_PAGE
        ino.pages = dict(ino.dpages)
        self.misdirected += 1
        return p, q

    def lose_file(self, path: str) -> bool:
        """A lost file: ``path``'s name is gone (a file system repair dropped its directory entry);
        False when there is no such file."""
        if self._durable_names.pop(path, None) is None:
            return False
        self._names.pop(path, None)
        self.lost += 1
        return True

    def stale_write(self, path: str, data: bytes) -> bool:
        """A lost write that left an older version: ``path``'s durable bytes from offset 0 become
        ``data`` (what it held before); False when there is no such file."""
        ino = self._durable_names.get(path)
        if ino is None:
            return False
        ino.write(0, data, durable=True)
        ino.pages = dict(ino.dpages)
        ino.size = ino.dsize
        self.lost += 1
        return True

    # ------------------------------------------------------------ FileSystem

    def _ino(self, fd: int) -> _Inode:
        try:
            return self._fds[fd][0]
        except KeyError:
            raise OSError(errno.EBADF, "bad file descriptor") from None

    def open(self, path: Path, flags: int, mode: int = 0o644) -> int:
        key = str(path)
        ino = self._names.get(key)
        if ino is None:
            if not flags & os.O_CREAT:
                raise FileNotFoundError(errno.ENOENT, "no such file", key)
            ino = self._names[key] = _Inode()
        elif flags & os.O_TRUNC:
            ino.truncate(0)
        fd = self._next_fd
        self._next_fd += 1
        self._fds[fd] = (ino, [0])
        return fd

    def close(self, fd: int) -> None:
        if self._fds.pop(fd, None) is None:
            raise OSError(errno.EBADF, "bad file descriptor")

    def pread(self, fd: int, n: int, offset: int) -> bytes:
        ino = self._ino(fd)
        if self.failing:
            self._read_error("pread")
        return ino.read(offset, n)

    def pwrite(self, fd: int, data: bytes | bytearray | memoryview, offset: int) -> int:
        ino = self._ino(fd)
        n = self._take_room("pwrite", len(data)) if self.failing else len(data)
        ino.write(offset, bytes(data[:n]))
        return n

    def pwritev(self, fd: int, buffers: Sequence[bytes], offset: int) -> int:
        return self.pwrite(fd, b"".join(buffers), offset)

    def write(self, fd: int, data: bytes | memoryview) -> int:
        ino = self._ino(fd)
        n = self._take_room("write", len(data)) if self.failing else len(data)
        pos = self._fds[fd][1]
        ino.write(pos[0], bytes(data[:n]))
        pos[0] += n
        return n

    def fsync(self, fd: int) -> None:
        ino = self._ino(fd)
        if self.failing == "fsync":
            self._fail("fsync", errno.EIO, "Input/output error")
        ino.fsync()

    def ftruncate(self, fd: int, size: int) -> None:
        ino = self._ino(fd)
        if self.failing and size > ino.size:
            self._full("ftruncate")
        ino.truncate(size)

    def fsize(self, fd: int) -> int:
        return self._ino(fd).size

    def unlink(self, path: Path) -> None:
        if self._names.pop(str(path), None) is None:
            raise FileNotFoundError(errno.ENOENT, "no such file", str(path))

    def replace(self, src: Path, dst: Path) -> None:
        ino = self._names.pop(str(src), None)
        if ino is None:
            raise FileNotFoundError(errno.ENOENT, "no such file", str(src))
        self._names[str(dst)] = ino

    def makedirs(self, path: Path) -> None:
        pass  # directories are implied by the paths of their files

    def list_files(self, directory: Path) -> list[tuple[str, int]]:
        d = str(directory)
        return [(p[len(d) + 1 :], ino.size) for p, ino in self._names.items() if os.path.dirname(p) == d]

    def read_at(self, path: Path, offset: int, n: int = -1) -> bytes:
        ino = self._names.get(str(path))
        if ino is None:
            raise FileNotFoundError(errno.ENOENT, "no such file", str(path))
        if self.failing:
            self._read_error("read")
        return ino.read(offset, n)

    def fsync_dir(self, path: Path) -> None:
        if self.failing == "fsync":
            self._fail("fsync", errno.EIO, "Input/output error")
        d = str(path)
        for p in [p for p in self._durable_names if os.path.dirname(p) == d]:
            del self._durable_names[p]
        for p, ino in self._names.items():
            if os.path.dirname(p) == d:
                self._durable_names[p] = ino
