"""Client errors: ops whose client crashed in plug-in code, apart from what the database answered.

An op's completion carries ``client_error: {"type", "message", "where", ...}`` when the client
raised an exception that is not one of the DB's declared errors (:func:`chaos.control.client.crashed`:
not a ``ClientError``, ``DBError``, ``RemoteError``, a standard-library network error or a class of the DB's
``client_errors``). Such an op is recorded ``info`` (Jepsen: a crashed op is indeterminate), so
the safety checkers treat it as an op that may or may not have happened, which is sound.

**Rule** (the run's verdict): a client error is a crash of the tool's or the plug-in's code, never
a statement about the database. The run did not perform the ops it asked for, so:

- this checker is ``"unknown"`` whenever at least one op has a client error, with a ``cause``
  naming the most frequent error, its file:line and how many ops it hit; it is never ``false``;
- the ``stats`` checker does not call an ``f`` invalid for having no ok op when some of its ops
  have client errors (it says unknown): those ops tell nothing of the database;
- ``fail`` counts and availability never include them as the database being unavailable.

So a run with client errors is **unknown** (exit 2) unless a checker finds an anomaly on its own
(``linear``, ``elle``, ``log``, ``server-logs``, ``liveness``: they judge what the database did
answer, with the crashed ops indeterminate), which stays invalid. A DB whose client library
raises its own network or driver errors lists them in ``client_errors`` so they are recorded as
indeterminate answers of the database instead.

Result: ``{"valid": True | "unknown", "count": ops with a client error, "ops": client completions,
"errors": [{"type", "message", "where", "count", "by_f": {f: n}, "first_index"}], "cause"?,
"summary"}`` (errors grouped by type and file:line, most frequent first).
"""

from __future__ import annotations

from typing import Any

from chaos.history.op import INVOKE, NEMESIS, Op
from chaos.history.verdict import UNKNOWN, Accumulator, StreamChecker

NAME = "client-errors"


def error_of(op: Op | dict[str, object]) -> dict[str, object] | None:
    """The ``client_error`` field of a completion (an Op or a history line as a dict), else None."""
    ce = op.get("client_error") if isinstance(op, dict) else (op.extra or {}).get("client_error")
    return ce if isinstance(ce, dict) else None


def error_line(e: dict[str, object]) -> str:
    """``ValueError: unknown node 'n2' at etcd_db.py:42``."""
    text = f"{e.get('type')}: {e.get('message')}" if e.get("message") else str(e.get("type"))
    return f"{text} at {e['where']}" if e.get("where") else text


def row(result: dict[str, Any] | None) -> str | None:
    """The summary's and report's "client errors" row of a ``client-errors`` result, e.g.
    ``ValueError: unknown node 'n2' at etcd_db.py:42, 1,499 of 1,499 ops``; None without errors."""
    if not isinstance(result, dict) or not result.get("count"):
        return None
    errors = [e for e in result.get("errors") or [] if isinstance(e, dict)]
    if not errors:
        return f"{result['count']:,} of {result.get('ops', 0):,} ops"
    first = errors[0]
    text = f"{error_line(first)}, {first.get('count', 0):,} of {result.get('ops', 0):,} ops"
    if len(errors) > 1:
        text += f"; {len(errors) - 1} other error(s), {result['count']:,} ops in all"
    return text


class _Acc:
    def __init__(self) -> None:
        self.ops = 0
        self.count = 0
        self.groups: dict[tuple[str, str], dict[str, Any]] = {}

    def step(self, op: Op) -> None:
        if op.process == NEMESIS or op.type == INVOKE:
            return
        self.ops += 1
        ce = error_of(op)
        if ce is None:
            return
        self.count += 1
        key = (str(ce.get("type")), str(ce.get("where") or ""))
        g = self.groups.get(key)
        if g is None:
            g = self.groups[key] = {
                "type": key[0],
                "message": str(ce.get("message") or ""),
                "where": key[1],
                "count": 0,
                "by_f": {},
                "first_index": op.index,
            }
        g["count"] += 1
        g["by_f"][op.f] = g["by_f"].get(op.f, 0) + 1

    def finish(self) -> dict[str, object]:
        errors = sorted(self.groups.values(), key=lambda g: (-g["count"], g["first_index"]))
        out: dict[str, object] = {"valid": True, "count": self.count, "ops": self.ops, "errors": errors}
        if not self.count:
            out["summary"] = "no client error"
            return out
        out["valid"] = UNKNOWN
        out["summary"] = row(out)
        out["cause"] = (
            f"client errors: {row(out)}: the client code crashed (a bug of the plug-in or the tool, "
            "not an answer of the database), so the run did not test what it asked for; fix the "
            "client, or list the exception in the DB's client_errors if the database raised it"
        )
        return out


class ClientErrorsChecker(StreamChecker):
    """Counts and groups the ops whose client crashed (module docstring); unknown when any did."""

    name = NAME

    def begin(self, test: dict[str, object], opts: dict[str, object]) -> Accumulator:
        return _Acc()
