"""EDN transactions straight into the Elle checker: a Jepsen ``history.edn`` of list-append or
rw-register transactions paired and fed to the checker's collector without Op objects
(:func:`collect_edn`), read by :mod:`chaos.history.edn` and :mod:`chaos.history.formats`.
"""

from __future__ import annotations

import array
import bisect
import os
from collections.abc import Hashable
from pathlib import Path
from typing import Any

import orjson

from chaos.history.checkers.elle.history import MalformedTxn, TxnTable, Unsupported, block_starts
from chaos.history.edn import LineForms, read_line, row_blocks
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

    Lines in Jepsen 0.3's layout are read as rows (:func:`chaos.history.edn.row_blocks`); any
    other line the general way (:class:`chaos.history.edn.LineForms`: a map read alone, or a form
    over several lines). Pairing follows Jepsen's ``jepsen.history``: an invocation pairs with the
    next completion of its process; an op map without ``:process`` belongs to one unnamed process
    (``nil``, as Elle's own test histories leave it out); ``:process :nemesis`` ops are skipped;
    times are positions (a history's ``:time`` may go backwards, e.g. Elle's ``huge-scc.edn``).
    Raises HistoryError naming the line for a malformed op map or a pairing violation,
    ``Unsupported`` for a client op whose value is not a list of micro-ops, ``MalformedTxn``
    (its ``position`` the completion's line - 1) for a transaction not of the workload's shape.
    Returns: the ``TxnTable``.
    """
    p = Path(path)
    pairing = _Pairing(p, sink)
    try:
        pairing.run()
    except MalformedTxn as e:
        if e.position is None:
            e.position = pairing.at - 1  # the checker names position + 1 as the line
        raise
    table, lines, kept = pairing.table, pairing.lines, pairing.kept
    starts: list[tuple[list[int], list[int]]] = []

    def fetch(tid: int) -> list[object]:
        ln = lines[tid]
        if ln < 0:
            return list(kept[-ln - 1])
        if not starts:
            starts.append(block_starts(p))
        first, offsets = starts[0]
        k = bisect.bisect_right(first, ln) - 1
        form = read_line(p, offsets[k], ln, first[k])
        return list(form.get("value") or []) if isinstance(form, dict) else []

    table.fetch = fetch
    table.pending = [inv[1] for inv in pairing.open.values()]
    return table


_TYPES = frozenset(TYPES)


class _Pairing:
    """:func:`collect_edn`'s state: the table it fills, per transaction the line its value comes
    from (``lines``; ``-k-1`` for ``kept[k]``, a value the general reader read, not re-readable
    alone), the open invocations (process -> (position, value, f, line, re-readable)), the
    position of the last op and the line of the last op paired (``at``)."""

    def __init__(self, path: Path, sink: Any) -> None:
        self.path = path
        self.sink = sink
        self.table = TxnTable()
        self.lines = array.array("q")
        self.kept: list[list[object]] = []
        self.open: dict[Hashable, tuple[int, Any, str, int, bool]] = {}
        self.fails = 0
        self.pos = -1
        self.at = 0

    def run(self) -> None:
        """Every line of the file: rows inline (an invocation, or an ok completion of a list
        paired as it should be), anything else through :meth:`op` or :meth:`form_op`."""
        general = LineForms(self.path)
        idle = True  # only the general reader's lines can leave a form open
        loads, JSONDecodeError = orjson.loads, orjson.JSONDecodeError
        table, open_, sink, types = self.table, self.open, self.sink, _TYPES
        ok_, invoke, ok, nemesis = table.ok, "invoke", "ok", NEMESIS
        append_inv, append_cpl = table.invoke_pos.append, table.complete_pos.append
        append_inv_idx, append_idx = table.invoke_index.append, table.index.append
        append_ok, append_proc, append_line = table.ok.append, table.process.append, self.lines.append
        pos = self.pos
        for first, raws, rows in row_blocks(self.path):
            for i, raw in enumerate(raws):
                line = first + i
                if rows is not None and idle:
                    try:
                        r = loads(rows[i])
                    except JSONDecodeError:
                        r = None
                    if (
                        type(r) is list
                        and len(r) == 6
                        and (t := r[2]) in types
                        and type(f := r[4]) is str
                        and type(r[0]) is int
                        and ((tp := type(proc := r[3])) is int or tp is str or proc is None)
                    ):
                        if proc == nemesis:
                            pos += 1
                            continue
                        if t == invoke:
                            if proc not in open_:
                                pos += 1
                                open_[proc] = (pos, r[5], f, line, True)
                                continue
                        elif t == ok and type(v := r[5]) is list:
                            inv = open_.get(proc)
                            if inv is not None and inv[2] == f:
                                del open_[proc]
                                pos += 1
                                self.at = line
                                append_inv(inv[0])
                                append_inv_idx(inv[0])
                                append_cpl(pos)
                                append_idx(pos)
                                append_ok(1)
                                append_proc(proc)
                                append_line(line)
                                sink(len(ok_) - 1, ok, v)
                                continue
                        self.pos = pos
                        self.op(line, proc, t, f, r[5], True)
                        pos = self.pos
                        continue
                self.pos = pos
                for fl, form, fast in general.forms(line, raw):
                    self.form_op(fl, form, fast)
                pos = self.pos
                idle = general.idle
        self.pos = pos
        general.finish()

    def form_op(self, line: int, form: Any, fast: bool) -> None:
        """An op map read the general way: checked, then :meth:`op`."""
        p = self.path
        if type(form) is not dict:
            edn_op(form, line, self.pos + 1, p)  # raises the exact error
        proc = form.get("process")
        t = form.get("type")
        f = form.get("f", "txn")
        tp = type(proc)
        if (tp is not int and tp is not str and proc is not None) or t not in _TYPES or type(f) is not str:
            edn_op({**form, "process": 0 if proc is None else proc, "f": f}, line, self.pos + 1, p)  # raises
            raise HistoryError(f"EDN: op map with :f {f!r}: expected a keyword", line=line, path=p)
        self.op(line, proc, t, f, form.get("value"), fast)

    def op(self, line: int, proc: object, t: str, f: str, v: object, fast: bool) -> None:
        """One op: an invocation opened, or a completion paired and fed to the sink."""
        self.pos += 1
        self.at = line
        pos, p, open_, table = self.pos, self.path, self.open, self.table
        if proc == NEMESIS:
            return
        if t == "invoke":
            prev = open_.get(proc)
            if prev is not None:
                raise HistoryError(
                    f"two open invocations on process {proc}: {f!r} invoked while {prev[2]!r} "
                    f"(op {prev[0]}) has not completed",
                    line=line,
                    path=p,
                )
            open_[proc] = (pos, v, f, line, fast)
            return
        inv = open_.pop(proc, None)
        if inv is None or inv[2] != f:
            what = (
                "without an open invocation" if inv is None else f"does not match its invocation {inv[2]!r}"
            )
            raise HistoryError(f"{t} completion of {f!r} on process {proc} {what}", line=line, path=p)
        src_line, src_fast = line, fast
        value = v
        if type(v) is not list or (t == "info" and type(inv[1]) is list):
            value, src_line, src_fast = inv[1], inv[3], inv[4]
        if type(value) is not list:
            raise Unsupported(f"op {pos}: {f!r} with value {v!r:.60} is not a transaction")
        if t == "fail":
            table.fail_values.append((pos, value))
            self.sink(self.fails, t, value)
            self.fails += 1
            return
        tid = len(table.ok)
        table.invoke_pos.append(inv[0])
        table.invoke_index.append(inv[0])
        table.complete_pos.append(pos)
        table.index.append(pos)
        table.ok.append(1 if t == "ok" else 0)
        table.process.append(proc)
        if src_fast:
            self.lines.append(src_line)
        else:
            self.lines.append(-len(self.kept) - 1)
            self.kept.append(value)
        self.sink(tid, t, value)
