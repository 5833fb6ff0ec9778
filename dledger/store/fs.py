"""The file-system calls of the file log store and the term/vote file, behind one small interface.

:data:`OS` is the real one (``os`` functions on file descriptors); the deterministic simulation
passes :class:`dledger.simdisk.SimDisk`'s, which loses what was not fsynced on a crash, can tear
the last write and flip bits, so recovery and CRC checks run for real. Paths are ``pathlib.Path``;
errors are ``OSError`` as from ``os``.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Protocol


class FileSystem(Protocol):
    """POSIX calls on file descriptors plus the few path operations the stores need."""

    def open(self, path: Path, flags: int, mode: int = 0o644) -> int: ...

    def close(self, fd: int) -> None: ...

    def pread(self, fd: int, n: int, offset: int) -> bytes: ...

    def pwrite(self, fd: int, data: bytes | bytearray | memoryview, offset: int) -> int: ...

    def pwritev(self, fd: int, buffers: Sequence[bytes], offset: int) -> int: ...

    def write(self, fd: int, data: bytes | memoryview) -> int: ...

    def fsync(self, fd: int) -> None: ...

    def ftruncate(self, fd: int, size: int) -> None: ...

    def fsize(self, fd: int) -> int:
        """The file's size in bytes."""
        ...

    def unlink(self, path: Path) -> None: ...

    def replace(self, src: Path, dst: Path) -> None:
        """Rename ``src`` to ``dst`` atomically (durable once the directory is fsynced)."""
        ...

    def makedirs(self, path: Path) -> None:
        """Create ``path`` and its parents when missing."""
        ...

    def list_files(self, directory: Path) -> list[tuple[str, int]]:
        """``(name, size)`` of the regular files in ``directory``, in no particular order."""
        ...

    def read_at(self, path: Path, offset: int, n: int = -1) -> bytes:
        """Up to ``n`` bytes of ``path`` from ``offset`` (``n`` -1: to the end);
        FileNotFoundError when it does not exist."""
        ...

    def fsync_dir(self, path: Path) -> None:
        """Make the names created, renamed or removed in directory ``path`` durable."""
        ...


class OsFileSystem:
    """The real file system."""

    open = staticmethod(os.open)  # type: ignore[assignment]
    close = staticmethod(os.close)
    pread = staticmethod(os.pread)
    pwrite = staticmethod(os.pwrite)  # type: ignore[assignment]
    pwritev = staticmethod(os.pwritev)  # type: ignore[assignment]
    write = staticmethod(os.write)  # type: ignore[assignment]
    fsync = staticmethod(os.fsync)
    ftruncate = staticmethod(os.ftruncate)
    unlink = staticmethod(os.unlink)  # type: ignore[assignment]
    replace = staticmethod(os.replace)  # type: ignore[assignment]

    @staticmethod
    def fsize(fd: int) -> int:
        return os.fstat(fd).st_size

    @staticmethod
    def makedirs(path: Path) -> None:
        path.mkdir(parents=True, exist_ok=True)

    @staticmethod
    def list_files(directory: Path) -> list[tuple[str, int]]:
        return [(p.name, p.stat().st_size) for p in directory.iterdir()]

    @staticmethod
    def read_at(path: Path, offset: int, n: int = -1) -> bytes:
        with open(path, "rb") as f:
            f.seek(offset)
            return f.read(n)

    @staticmethod
    def fsync_dir(path: Path) -> None:
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


OS: FileSystem = OsFileSystem()
