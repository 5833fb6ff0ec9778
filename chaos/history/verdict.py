r"""The verdict vocabulary every checker shares (``jepsen.checker``): valid / invalid / unknown, the
:class:`Checker` protocol, single-pass :class:`StreamChecker`\ s and the worst-first merge.

A leaf of the history layer: it imports only the history reader, so any checker module can use it
without importing the composition in :mod:`chaos.history.checkers.registry`.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from chaos.history.op import Op
from chaos.history.store import read_history

UNKNOWN = "unknown"
Valid = bool | str


@runtime_checkable
class Checker(Protocol):
    """Jepsen's ``Checker``: ``check`` returns ``{"valid": True | False | "unknown", ...}``."""

    name: str

    def check(self, test: dict[str, Any], history_path: Path, opts: dict[str, Any]) -> dict[str, Any]: ...


class Accumulator(Protocol):
    """The running state of a :class:`StreamChecker` over one history."""

    def step(self, op: Op) -> None: ...

    def finish(self) -> dict[str, Any]: ...


class StreamChecker:
    """A checker that needs a single pass: subclasses implement :meth:`begin`."""

    name = "stream"

    def begin(self, test: dict[str, Any], opts: dict[str, Any]) -> Accumulator:
        raise NotImplementedError

    def check(self, test: dict[str, Any], history_path: Path, opts: dict[str, Any]) -> dict[str, Any]:
        acc = self.begin(test, opts)
        for op in read_history(history_path):
            acc.step(op)
        return acc.finish()


def verdict(value: Any) -> Valid:
    """A checker's ``valid`` as one of True, False, ``"unknown"``.

    Only the booleans decide; every other value (the string ``"unknown"`` however it arrived, e.g.
    unpickled from a worker process, None, a missing field) is undecided. Compared by value: the
    booleans are singletons, strings are never compared by identity.
    """
    if value is True or value is False:
        return value
    return UNKNOWN


def verdict_word(value: object) -> str:
    """The verdict as a person reads it at the end of a run, a check or a campaign: ``"valid"``,
    ``"INVALID"`` or ``"unknown"`` (:func:`verdict`'s rule: only the booleans decide)."""
    v = verdict(value)
    return "valid" if v is True else "INVALID" if v is False else UNKNOWN


def merge_valid(values: Iterable[Any]) -> Valid:
    """Worst-first merge: any ``False`` gives False, else any undecided value (``"unknown"``, or
    anything not a boolean, see :func:`verdict`) gives ``"unknown"``, else True (also for no
    values). Follows ``jepsen.checker/merge-valid``."""
    out: Valid = True
    for v in values:
        v = verdict(v)
        if v is False:
            return False
        if v == UNKNOWN:
            out = UNKNOWN
    return out


@dataclass(frozen=True)
class CheckOptions:
    """What a checker is told besides the test and the history (``chaos check``'s flags, the run's
    ``--check-time-limit``): ``time_limit`` (s, None: no deadline), ``workers`` (processes),
    ``model`` (a linearizability model name), ``consistency_model`` (transactions), ``run_dir``,
    ``fail_fast`` (stop the linearizability search at the first invalid key)."""

    time_limit: float | None = None
    workers: int | None = None
    model: str | None = None
    consistency_model: str | None = None
    run_dir: str | None = None
    fail_fast: bool = False

    def as_dict(self) -> dict[str, Any]:
        """The ``opts`` dict of the Checker protocol (``check(test, history_path, opts)``)."""
        return {
            f.name: getattr(self, f.name) for f in fields(self) if getattr(self, f.name) not in (None, False)
        }


__all__ = [
    "CheckOptions",
    "UNKNOWN",
    "Valid",
    "Checker",
    "Accumulator",
    "StreamChecker",
    "verdict",
    "merge_valid",
]
