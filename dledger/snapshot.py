"""Snapshot files of the state machine (DLedger master's SnapshotManager / ``snapshot_<lastIncludedIndex>``).

Each snapshot is one file ``snapshot_<20-digit lastIncludedIndex>`` in the snapshot directory: a
JSON line (lastIncludedIndex, lastIncludedTerm, size and CRC32 of the data; DLedger's
``snapshot_meta``), then the state machine's bytes. It is written as ``tmp_<name>``, fsynced,
renamed into place and the directory fsynced, so a crash leaves either no snapshot or a whole one;
only the newest ``keep`` are kept. A snapshot whose size or CRC does not match is skipped at load
(an older one is tried). All file calls go through a :class:`~dledger.store.fs.FileSystem`, so the
deterministic simulation runs this code over its simulated disk.
"""

from __future__ import annotations

import json
import logging
import os
import zlib
from pathlib import Path

from dledger.store.fs import OS, FileSystem

log = logging.getLogger("dledger.snapshot")

PREFIX = "snapshot_"


class SnapshotStore:
    """Snapshots under ``directory``; ``keep`` >= 1 newest are retained; ``fs`` the file system (the
    real one by default). Raises ValueError for keep < 1."""

    def __init__(self, directory: str | os.PathLike[str], keep: int = 3, fs: FileSystem = OS) -> None:
        if keep < 1:
            raise ValueError(f"keep={keep}: expected >= 1")
        self.directory = Path(directory)
        self.keep = keep
        self.fs = fs
        fs.makedirs(self.directory)

    def save(self, index: int, term: int, data: bytes) -> Path:
        """Write a snapshot covering entries up to ``index`` (whose term is ``term``) durably and
        return its path; drop the older ones beyond ``keep``. Raises OSError."""
        fs = self.fs
        final = self.directory / f"{PREFIX}{index:020d}"
        if any(i == index for i, _ in self.list()):
            return final
        meta = {
            "lastIncludedIndex": index,
            "lastIncludedTerm": term,
            "size": len(data),
            "crc32": zlib.crc32(data),
        }
        blob = json.dumps(meta).encode() + b"\n" + data
        tmp = self.directory / f"tmp_{final.name}"
        fd = fs.open(tmp, os.O_CREAT | os.O_WRONLY | os.O_TRUNC)
        try:
            view = memoryview(blob)
            while view:
                view = view[fs.write(fd, view) :]
            fs.fsync(fd)
        finally:
            fs.close(fd)
        fs.replace(tmp, final)
        fs.fsync_dir(self.directory)
        old = self.list()[: -self.keep]
        for _, path in old:
            fs.unlink(path)
        if old:
            fs.fsync_dir(self.directory)
        return final

    def list(self) -> list[tuple[int, Path]]:
        """``(lastIncludedIndex, path)`` of the snapshot files, oldest first."""
        out = []
        for name, _ in self.fs.list_files(self.directory):
            if name.startswith(PREFIX) and name[len(PREFIX) :].isdigit():
                out.append((int(name[len(PREFIX) :]), self.directory / name))
        return sorted(out)

    def load_newest(self) -> tuple[int, int, bytes] | None:
        """``(lastIncludedIndex, lastIncludedTerm, data)`` of the newest readable snapshot, or None.
        An unreadable or damaged one is logged and skipped (an older one is tried)."""
        for _, path in reversed(self.list()):
            try:
                blob = self.fs.read_at(path, 0)
                head, _, data = blob.partition(b"\n")
                meta = json.loads(head)
                index, term = int(meta["lastIncludedIndex"]), int(meta["lastIncludedTerm"])
                if len(data) != meta["size"] or zlib.crc32(data) != meta["crc32"]:
                    raise ValueError(f"{len(data)} bytes with CRC {zlib.crc32(data)}, expected {meta}")
                return index, term, data
            except (OSError, ValueError, KeyError, TypeError) as e:
                log.warning("skipping unreadable snapshot %s: %s", path, e)
        return None
