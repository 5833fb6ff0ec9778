"""The ledger store: the replicated log of entries, and the node's persisted term and vote.

Follows DLedger's ``DLedgerStore`` (``MemoryStore`` / ``DLedgerMmapFileStore``): entries are numbered
from 0, ``end_index`` is ledgerEndIndex (-1 when empty), ``end_term`` is ledgerEndTerm (the term of the
last entry, -1 when empty; DLedger issue #52), ``begin_index`` is ledgerBeginIndex (the first index
still held; it grows when a prefix is compacted away).

Writes are not durable until :meth:`LogStore.sync` returns; the server decides when to sync
(``--flush sync``: before acknowledging; ``--flush async``: periodically).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, runtime_checkable

MAGIC_NORMAL = 1
MAGIC_NOOP = 2  # DLedger master's NOOP entry type; appended by a new leader (Raft section 5.4.2)


class StoreError(Exception):
    """A write that breaks the log's invariants (wrong next index, wrong pos, disk error)."""


class CorruptionError(StoreError):
    """Data that fails its checks inside the committed prefix; the node must not serve it."""


class FlushError(StoreError):
    """The write of records still buffered failed (a full or failing disk): raised by a flush, and
    so by a read, which flushes first; the records stay buffered for the next try."""


@dataclass(slots=True)
class Entry:
    """One log entry (DLedgerEntry).

    Fields: ``index`` (0-based), ``term``, ``body`` (bytes), ``magic`` (1 normal, 2 no-op),
    ``pos`` (absolute byte offset of the record in the data log; -1 until stored), ``channel`` (0).
    """

    index: int
    term: int
    body: bytes
    magic: int = MAGIC_NORMAL
    pos: int = -1
    channel: int = 0

    @property
    def size(self) -> int:
        """Size of the on-disk record in bytes: 48-byte header plus body."""
        return 48 + len(self.body)

    def same(self, other: Entry) -> bool:
        """DLedger's entry equality for COMPARE/TRUNCATE: index, term, magic, pos, channel, body."""
        return (
            self.index == other.index
            and self.term == other.term
            and self.magic == other.magic
            and self.pos == other.pos
            and self.channel == other.channel
            and self.body == other.body
        )


class LogStore(Protocol):
    """What the consensus core needs from a log store. All indexes are entry indexes."""

    @property
    def begin_index(self) -> int: ...

    @property
    def end_index(self) -> int: ...

    @property
    def end_term(self) -> int: ...

    def append(self, entry: Entry) -> Entry:
        """Append ``entry`` at ``end_index + 1`` and return it with ``pos`` set.

        A follower passes the leader's ``pos``: when ``entry.pos >= 0`` it must equal the local
        next position (so replicas' data files are byte-identical), else StoreError.
        Raises StoreError when ``entry.index != end_index + 1``.
        """
        ...

    def get(self, index: int) -> Entry:
        """The entry at ``index``; IndexError outside ``[begin_index, end_index]``."""
        ...

    def term_at(self, index: int) -> int:
        """Term of the entry at ``index``; -1 for index -1; IndexError outside the held range."""
        ...

    def truncate_suffix(self, index: int) -> None:
        """Remove every entry with an index greater than ``index`` (``index`` itself stays)."""
        ...

    def sync(self) -> int:
        """Make every appended entry durable (fsync); return the highest durable index."""
        ...

    def close(self) -> None: ...


@runtime_checkable
class SnapshotLogStore(LogStore, Protocol):
    """A log store that can drop a prefix after a snapshot and start over at a leader's snapshot
    (DLedger master's INSTALL_SNAPSHOT). The core uses these when present; a plain LogStore answers
    INSTALL_SNAPSHOT with UNSUPPORTED."""

    def compact_prefix(self, index: int) -> int:
        """Drop the entries before ``index`` (a snapshot covers them); return the new begin index."""
        ...

    def reset(self, begin_index: int, next_pos: int, last_term: int, chain_crc: int = -1) -> None:
        """Forget every entry; the log continues at ``begin_index`` at byte ``next_pos``, the entry
        before it having term ``last_term`` and chained CRC ``chain_crc`` (-1 when unknown)."""
        ...

    def chain_at(self, index: int) -> int:
        """The chained CRC through the entry at ``index`` (-1 when the store keeps none)."""
        ...


class RuntimeLogStore(SnapshotLogStore, Protocol):
    """Everything the runtime driver (:mod:`dledger.driver`) calls on a store, beyond the core's
    needs: batched reads for the state machine, pushing buffered writes to the OS before anyone
    hears of them, and the commitIndex checkpoint read back on restart."""

    def get_range(self, lo: int, hi: int) -> list[Entry]:
        """Entries ``lo..hi`` inclusive, in order; IndexError outside the held range."""
        ...

    def flush_writes(self) -> None:
        """Hand buffered appends to the OS (not a sync)."""
        ...

    def save_checkpoint(self, committed_index: int) -> int:
        """Record ``committed_index`` for the next start; return what was recorded."""
        ...

    @property
    def synced_index(self) -> int:
        """The highest index the last sync() made durable (the server's stats check its answers
        against it)."""
        ...
