"""Snapshot files of the state machine (DLedger master's ``snapshot/snapshot_<lastIncludedIndex>``).

Each snapshot is a directory ``snapshot_<20-digit lastIncludedIndex>`` holding ``snapshot_meta``
(JSON: lastIncludedIndex, lastIncludedTerm) and ``data`` (the state machine's bytes). It is written
in ``tmp/``, fsynced and renamed into place, so a crash leaves either no snapshot or a whole one;
only the newest ``keep`` are kept.
"""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path

log = logging.getLogger("dledger.snapshot")


def _fsync_path(path: Path, directory: bool = False) -> None:
    fd = os.open(path, os.O_RDONLY | (os.O_DIRECTORY if directory else 0))
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class SnapshotStore:
    """Snapshots under ``directory``; ``keep`` >= 1 newest are retained. Raises ValueError for keep < 1."""

    def __init__(self, directory: str | os.PathLike[str], keep: int = 3) -> None:
        if keep < 1:
            raise ValueError(f"keep={keep}: expected >= 1")
        self.directory = Path(directory)
        self.keep = keep
        self.directory.mkdir(parents=True, exist_ok=True)

    def save(self, index: int, term: int, data: bytes) -> Path:
        """Write a snapshot covering entries up to ``index`` durably; return its directory."""
        final = self.directory / f"snapshot_{index:020d}"
        if final.exists():
            return final
        tmp = self.directory / "tmp" / final.name
        import shutil  # only when saving (bz2, lzma, fnmatch: startup imports are slow on FUSE)

        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir(parents=True)
        (tmp / "data").write_bytes(data)
        (tmp / "snapshot_meta").write_text(json.dumps({"lastIncludedIndex": index, "lastIncludedTerm": term}))
        for f in ("data", "snapshot_meta"):
            _fsync_path(tmp / f)
        os.replace(tmp, final)
        _fsync_path(self.directory, directory=True)
        for old in self.list()[: -self.keep]:
            shutil.rmtree(old, ignore_errors=True)
        return final

    def list(self) -> list[Path]:
        """Snapshot directories, oldest first."""
        return sorted(p for p in self.directory.glob("snapshot_*") if p.is_dir())

    def load_newest(self) -> tuple[int, int, bytes] | None:
        """``(lastIncludedIndex, lastIncludedTerm, data)`` of the newest readable snapshot, or None.
        An unreadable one is logged and skipped (an older one is tried)."""
        for path in reversed(self.list()):
            try:
                meta = json.loads((path / "snapshot_meta").read_text())
                index, term = int(meta["lastIncludedIndex"]), int(meta["lastIncludedTerm"])
                return index, term, (path / "data").read_bytes()
            except (OSError, ValueError, KeyError, TypeError) as e:
                log.warning("skipping unreadable snapshot %s: %s", path, e)
        return None
