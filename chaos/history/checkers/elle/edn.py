"""EDN transactions straight into the Elle checker: a Jepsen ``history.edn`` of list-append or
rw-register transactions paired and fed to the checker's collector without Op objects
(:func:`collect_edn`), read by :mod:`chaos.history.edn` and :mod:`chaos.history.formats`.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from chaos.history.edn import read_line, records
from chaos.history.formats import edn_op
from chaos.history.op import NEMESIS, TYPES
from chaos.history.store import HistoryError

# ------------------------------------------------------------------------------------------------
# EDN transactions straight into the Elle checker


def collect_edn(path: str | os.PathLike[str], sink: Any) -> Any:
    """Pair the transactions of an EDN history and feed each to ``sink`` (``tid, type, value``),
    as ``chaos.history.checkers.elle.history.collect_file`` does for JSON Lines: no Op objects, no values
    kept (a transaction's value is re-read from its line to explain an anomaly), so memory grows
    by a few integers per transaction.

    Pairing follows Jepsen's ``jepsen.history``: an invocation pairs with the next completion of its
    process; an op map without ``:process`` belongs to one unnamed process (``nil``, as Elle's own
    test histories leave it out); ``:process :nemesis`` ops are skipped; times are positions (a
    history's ``:time`` may go backwards, e.g. Elle's ``huge-scc.edn``). Raises HistoryError naming
    the line for a malformed op map or a pairing violation, ``Unsupported`` for a client op whose
    value is not a list of micro-ops.
    Returns: the ``TxnTable``.
    """
    import array
    import bisect

    from chaos.history.checkers.elle.history import TxnTable, Unsupported

    p = Path(path)
    table = TxnTable()
    lines = array.array("q")  # per txn: the line its value comes from (-k-1: kept[k])
    kept: list[list[Any]] = []  # values of txns read by the generic reader (not re-readable alone)
    open_: dict[Any, tuple[int, Any, str, int, int, bool]] = {}
    fails = 0
    pos = -1
    invoke, fail, info, ok = "invoke", "fail", "info", "ok"
    types = frozenset(TYPES)
    for line, form, fast in records(p):
        pos += 1
        if type(form) is not dict:
            edn_op(form, line, pos, p)  # raises the exact error
        proc = form.get("process")
        if proc == NEMESIS:
            continue
        t = form.get("type")
        v = form.get("value")
        f = form.get("f", "txn")
        tp = type(proc)
        if (tp is not int and tp is not str and proc is not None) or t not in types or type(f) is not str:
            edn_op({**form, "process": 0 if proc is None else proc, "f": f}, line, pos, p)  # raises
            raise HistoryError(f"EDN: op map with :f {f!r}: expected a keyword", line=line, path=p)
        if t == invoke:
            prev = open_.get(proc)
            if prev is not None:
                raise HistoryError(
                    f"two open invocations on process {proc}: {f!r} invoked while {prev[2]!r} "
                    f"(op {prev[3]}) has not completed",
                    line=line,
                    path=p,
                )
            open_[proc] = (pos, v, f, pos, line, fast)
            continue
        inv = open_.pop(proc, None)
        if inv is None or inv[2] != f:
            what = (
                "without an open invocation" if inv is None else f"does not match its invocation {inv[2]!r}"
            )
            raise HistoryError(f"{t} completion of {f!r} on process {proc} {what}", line=line, path=p)
        src_line, src_fast = line, fast
        value = v
        if type(v) is not list or (t == info and type(inv[1]) is list):
            value, src_line, src_fast = inv[1], inv[4], inv[5]
        if type(value) is not list:
            raise Unsupported(f"op {pos}: {f!r} with value {v!r:.60} is not a transaction")
        if t == fail:
            table.fail_values.append((pos, value))
            _fed(sink, fails, fail, value, line)
            fails += 1
            continue
        tid = len(table.ok)
        table.invoke_pos.append(inv[0])
        table.invoke_index.append(inv[3])
        table.complete_pos.append(pos)
        table.index.append(pos)
        table.ok.append(1 if t == ok else 0)
        table.process.append(proc)
        if src_fast:
            lines.append(src_line)
        else:
            lines.append(-len(kept) - 1)
            kept.append(value)
        _fed(sink, tid, t, value, line)
    starts: list[tuple[list[int], list[int]]] = []

    def fetch(tid: int) -> list[Any]:
        ln = lines[tid]
        if ln < 0:
            return list(kept[-ln - 1])
        if not starts:
            starts.append(_block_starts(p))
        first, offsets = starts[0]
        k = bisect.bisect_right(first, ln) - 1
        form = read_line(p, offsets[k], ln, first[k])
        return list(form.get("value") or []) if isinstance(form, dict) else []

    table.fetch = fetch
    return table


def _fed(sink: Any, tid: int, t: str, value: Any, line: int) -> None:
    """``sink(tid, t, value)``; a malformed transaction names the completion's line of the file."""
    from chaos.history.checkers.elle.history import MalformedTxn

    try:
        sink(tid, t, value)
    except MalformedTxn as e:
        if e.position is None:
            e.position = line - 1  # the checker names position + 1 as the line
        raise


def _block_starts(path: Path) -> tuple[list[int], list[int]]:
    """(first line, byte offset) of every block of :data:`chaos.history.edn.BLOCK` bytes, for
    re-reading one line (a pass over the file's newlines only)."""
    first, offsets = [1], [0]
    line, offset = 1, 0
    with open(path, "rb") as f:
        while True:
            data = f.read(1 << 22)
            if not data:
                break
            cut = data.rfind(b"\n") + 1
            line += data.count(b"\n")
            offset += len(data)
            if cut:
                first.append(line)
                offsets.append(offset - len(data) + cut)
    return first, offsets
