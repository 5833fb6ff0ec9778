"""Persisted term and vote (``currterm``) and the ``checkpoint`` file, in DLedger's text format.

Both are Java-properties text as DLedger's ``MemberState.persistTerm`` and
``DLedgerMmapFileStore.persistCheckPoint`` write them (``currTerm=<n>`` / ``voteLeader=<id>``;
``endIndex=<n>`` / ``committedIndex=<n>``). Safer than DLedger 0.2.x, which neither fsyncs nor
checks: every write goes to ``<name>.tmp``, is fsynced, renamed over the file, and the directory is
fsynced, so after a crash the file holds either the old or the new content (Raft section 5.1/5.2:
currentTerm and votedFor must be on stable storage before answering a vote).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Generic, TypeVar

from dledger.store import StoreError
from dledger.store.fs import OS, FileSystem

CURRTERM_FILE = "currterm"
CHECKPOINT_FILE = "checkpoint"
MAX_CURR_TERM = 2**63 - 1
"""currTerm is a Java long in DLedger (and an int64 in every entry record): nothing above it is saved."""
MAX_VOTE_LEN = 256
_S = TypeVar("_S")


class HardStateValueError(StoreError, ValueError):
    """A term or vote that ``currterm`` (or the entry codec) cannot hold; raised before writing, so the
    file keeps its old content. A StoreError, so the server stops instead of acting on a term it
    could not persist."""


def _check_term_vote(curr_term: object, voted_for: object) -> None:
    if type(curr_term) is not int or not 0 <= curr_term <= MAX_CURR_TERM:
        raise HardStateValueError(f"curr_term {curr_term!r}: expected an int in 0..{MAX_CURR_TERM}")
    if voted_for is None:
        return
    if (
        not isinstance(voted_for, str)
        or len(voted_for) > MAX_VOTE_LEN
        or not voted_for.isprintable()
        or voted_for != voted_for.strip()
    ):
        raise HardStateValueError(
            f"voted_for {str(voted_for)[:80]!r}: expected a member id of at most {MAX_VOTE_LEN} "
            "printable characters without surrounding spaces"
        )


def parse_properties(text: str, source: str = "<text>") -> dict[str, str]:
    """Parse Java-properties text (``key=value`` lines; ``#``/``!`` comments; blank lines).

    Raises StoreError naming ``source`` and the line for a line without ``=`` or ``:``.
    """
    out: dict[str, str] = {}
    for lineno, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line[0] in "#!":
            continue
        seps = [i for i in (line.find("="), line.find(":")) if i >= 0]
        if not seps:
            raise StoreError(f"{source}:{lineno}: expected key=value, got {raw!r}")
        i = min(seps)
        out[line[:i].strip()] = line[i + 1 :].strip()
    return out


def write_properties_atomic(path: str | os.PathLike[str], props: dict[str, str], fs: FileSystem = OS) -> None:
    """Write ``props`` to ``path`` durably: temp file, fsync, rename, fsync the directory.

    Raises StoreError (with the OSError) when any step fails; the old file is then unchanged.
    """
    p = Path(path)
    tmp = p.with_name(p.name + ".tmp")
    data = "".join(f"{k}={v}\n" for k, v in props.items()).encode()
    try:
        fd = fs.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            view = memoryview(data)
            while view:
                view = view[fs.write(fd, view) :]
            fs.fsync(fd)
        finally:
            fs.close(fd)
        fs.replace(tmp, p)
        fs.fsync_dir(p.parent)
    except OSError as e:
        raise StoreError(f"cannot persist {p}: {e}") from e


def read_properties(path: str | os.PathLike[str], fs: FileSystem = OS) -> dict[str, str] | None:
    """The properties in ``path``, or None when it does not exist."""
    try:
        # universal newlines, as Path.read_text
        text = fs.read_at(Path(path), 0).decode().replace("\r\n", "\n").replace("\r", "\n")
    except FileNotFoundError:
        return None
    except (OSError, UnicodeDecodeError) as e:
        raise StoreError(f"cannot read {path}: {e}") from e
    return parse_properties(text, str(path))


def _int(props: dict[str, str], key: str, default: int, source: Path) -> int:
    raw = props.get(key, "")
    if raw == "":
        return default
    try:
        return int(raw)
    except ValueError:
        raise StoreError(f"{source}: {key}={raw!r}, expected an integer") from None


@dataclass(frozen=True, slots=True)
class TermVote:
    """``curr_term`` (0 initially) and ``voted_for`` (member id, or None) as persisted."""

    curr_term: int = 0
    voted_for: str | None = None


class _PropertiesFile(Generic[_S]):
    """The properties file ``FILE`` in ``directory`` (created when absent), parsed into an ``_S``
    and written with :func:`write_properties_atomic`. It remembers the value last loaded or saved,
    so saving that value again skips the fsyncs."""

    FILE = ""

    def __init__(self, directory: str | os.PathLike[str], fs: FileSystem = OS) -> None:
        self.directory = Path(directory)
        self._fs = fs
        fs.makedirs(self.directory)
        self.path = self.directory / self.FILE
        self._last: _S | None = None

    def load(self) -> _S:
        props = read_properties(self.path, self._fs)
        value = self._parse({} if props is None else props)  # an absent file: every default
        self._last = value
        return value

    def _parse(self, props: dict[str, str]) -> _S:
        raise NotImplementedError

    def _save(self, value: _S, props: dict[str, str]) -> None:
        if value == self._last:
            return  # unchanged: skip the fsyncs
        write_properties_atomic(self.path, props, self._fs)
        self._last = value


class HardState(_PropertiesFile[TermVote]):
    """The ``currterm`` file of one node in ``directory`` (MemberState's persisted part).

    ``load()`` returns a TermVote (defaults when the file is absent); ``save(term, voted_for)``
    returns only once the new values are durable. Call ``save`` before sending a vote reply or
    acting in a new term. Raises StoreError for unreadable content or a failed write, and
    :class:`HardStateValueError` (before writing) for a term outside 0..2**63-1 or a vote that is not
    a short printable id.
    """

    FILE = CURRTERM_FILE

    def _parse(self, props: dict[str, str]) -> TermVote:
        term = _int(props, "currTerm", 0, self.path)
        if not 0 <= term <= MAX_CURR_TERM:
            raise StoreError(
                f"{self.path}: currTerm={term}, expected 0..{MAX_CURR_TERM} (a Java long); "
                "the file was written by a server without range checks"
            )
        return TermVote(term, props.get("voteLeader") or None)

    def save(self, curr_term: int, voted_for: str | None) -> None:
        _check_term_vote(curr_term, voted_for)
        self._save(
            TermVote(curr_term, voted_for or None),
            {"currTerm": str(curr_term), "voteLeader": voted_for or ""},
        )


@dataclass(frozen=True, slots=True)
class CheckpointState:
    """``end_index`` and ``committed_index`` as last checkpointed (-1 when unknown); ``repair_to``:
    a repair in progress (the log must hold entries up to it again before the member votes; -1:
    none), kept apart from ``committed_index`` since it may cover entries past it."""

    end_index: int = -1
    committed_index: int = -1
    repair_to: int = -1


class Checkpoint(_PropertiesFile[CheckpointState]):
    """The ``checkpoint`` file in ``directory`` (endIndex, committedIndex), written atomically.

    Recovery uses ``committed_index`` to tell a cuttable uncommitted tail from corruption inside
    the committed prefix, so it must never exceed what is durable in the log: the file store only
    writes it after a sync and clamps it to the synced index.
    """

    FILE = CHECKPOINT_FILE

    def _parse(self, props: dict[str, str]) -> CheckpointState:
        return CheckpointState(
            _int(props, "endIndex", -1, self.path),
            _int(props, "committedIndex", -1, self.path),
            _int(props, "repairTo", -1, self.path),
        )

    def save(self, end_index: int, committed_index: int, repair_to: int = -1) -> None:
        props = {"endIndex": str(end_index), "committedIndex": str(committed_index)}
        if repair_to >= 0:
            props["repairTo"] = str(repair_to)
        self._save(CheckpointState(end_index, committed_index, max(repair_to, -1)), props)
