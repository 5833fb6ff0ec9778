"""``history.txt``: the history as a person reads it (Jepsen's ``history.txt``), one op a line::

      12.345678  3       invoke  cas    [1, 2]
      12.351002  3       fail    cas    [1, 2]  n2  error="cas: expected value did not match" compare_failed=true
      13.000120  nemesis info    start-kill  {"nodes": ["n5"]}

Columns: time in seconds since the test start, process, type, f, value, then the node, the error
and any other fields. The same lines go to ``chaos.log`` as the ops happen (the runner logs each op
through the ``chaos.ops`` logger), so the log reads as Jepsen's ``jepsen.log`` does.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from chaos.history.op import Op
from chaos.history.store import read_history

HISTORY_TEXT = "history.txt"
_SKIP = {"index", "type", "process", "f", "value", "time", "node", "error"}


def _text(v: Any) -> str:
    if v is None:
        return "nil"
    if isinstance(v, str):
        return v
    return json.dumps(v, separators=(", ", ": "), default=str, ensure_ascii=False)


def op_line(op: Op) -> str:
    """One op as a line of ``history.txt`` (module docstring)."""
    parts = [
        f"{op.time / 1e9:12.6f}",
        f"{op.process!s:<7}",
        f"{op.type:<6}",
        f"{op.f:<8}",
        _text(op.value),
    ]
    if op.node is not None:
        parts.append(str(op.node))
    if op.error is not None:
        parts.append(f"error={json.dumps(op.error, ensure_ascii=False)}")
    for k, v in (op.extra or {}).items():
        if k not in _SKIP:
            parts.append(f"{k}={_text(v)}")
    return " ".join(parts)


def write_history_text(history_path: str | os.PathLike[str], ops: Iterable[Op] | None = None) -> Path:
    """Write ``history.txt`` beside ``history_path`` from its ``ops`` (as a caller already read
    them), else from the file (torn last line skipped, as every reader does); returns its path.
    Raises HistoryError for a malformed history."""
    src = Path(history_path)
    out = src.parent / HISTORY_TEXT
    tmp = src.parent / f".{HISTORY_TEXT}.tmp"
    with tmp.open("w", encoding="utf-8") as fh:
        for op in read_history(src, validate=False) if ops is None else ops:
            fh.write(op_line(op) + "\n")
    os.replace(tmp, out)
    return out
