"""Transactions out of a history: invocations paired with completions, in one streaming pass.

A :class:`TxnTable` numbers the ``ok`` and ``info`` completions 0, 1, 2, ... (the vertices of the
dependency graph; ``fail`` ones are kept apart, they never happened) and keeps, per transaction, a
few integers: the positions of its invocation and completion in the history, its process, its op
index and whether it is ``ok``. The micro-op lists are handed once to a workload's ``add`` and not
kept: a transaction's value is fetched again (from the op list, or by re-reading its line of the
file) only to explain an anomaly. This is what lets a million transactions fit in memory.

Input shapes (docs/design.md "Ops and histories", Elle's ``jepsen.history``): a transaction is any
client op whose value is a list of micro-ops ``[f, k, v]``; nemesis ops are skipped; ``invoke``
pairs with the next completion of the same process.
"""

from __future__ import annotations

import array
import gc
from collections.abc import Callable, Hashable, Iterable, Iterator
from pathlib import Path
from typing import Any

import orjson

from chaos.history.op import FAIL, INFO, INVOKE, NEMESIS, OK, TYPES, Op
from chaos.history.store import may_hold_big_int


class Unsupported(Exception):
    """The history cannot be checked by this workload (bad micro-op, duplicate write): the
    verdict is ``unknown`` with this message as its cause (Elle raises these as error maps)."""


class MalformedTxn(Unsupported):
    """A transaction that is not one of the workload's shape (a micro-op that is not ``[f, key,
    value]``, an ``f`` the workload has not, a list-append read that is not a list, a null
    append, an op value that is no micro-op list): bad input, not an undecided check. The
    collectors set ``position`` (0-based, among every op of the history: the file's line - 1) and
    ``op`` (the Op, when they were given Op objects) before it leaves them."""

    position: int | None = None
    op: object = None


class FastPathRefused(Exception):
    """The fast file reader met something it leaves to ``read_history`` (which names the error)."""


class TxnTable:
    """Per-transaction integers, indexed by transaction id (ok/info completions in history order)."""

    def __init__(self) -> None:
        self.invoke_pos = array.array("q")  # position of the invocation among all ops (-1: none)
        self.invoke_index = array.array("q")  # the invocation's op index (-1: none)
        self.complete_pos = array.array("q")  # position of the completion
        self.index = array.array("q")  # the completion's op index
        self.ok = array.array("b")  # 1 ok, 0 info
        self.process: list[object] = []
        self.fetch: Callable[[int], list[Any]] = lambda t: []  # the value of txn t (slow)
        self.fail_values: list[tuple[int, list[object]]] = []  # (op index, value) of failed txns
        # the values of invocations that never completed (their writes may have happened: Jepsen
        # completes them as info; kept apart so they add no vertex)
        self.pending: list[object] = []
        self._pending_writes: dict[str, set[tuple[Hashable, Hashable]]] = {}  # f -> pending_writes(f)

    def __len__(self) -> int:
        return len(self.ok)

    def pending_writes(self, f: str) -> set[tuple[Hashable, Hashable]]:
        """(key, value) of every ``f`` micro-op (``"append"``, ``"w"``) of the invocations that
        never completed: writes that may have happened (a value not hashable is left out: no
        read can show it as a key's element or version). Computed once per ``f``."""
        out = self._pending_writes.get(f)
        if out is not None:
            return out
        out = self._pending_writes[f] = set()
        for value in self.pending:
            for mop in value if type(value) is list else ():
                if type(mop) is list and len(mop) == 3 and mop[0] == f:
                    try:
                        out.add((mop[1], mop[2]))
                    except TypeError:
                        pass
        return out

    def summary(self, t: int) -> dict[str, object]:
        """The completion of txn ``t`` as a short dict for reports."""
        return {
            "index": self.index[t],
            "type": OK if self.ok[t] else INFO,
            "process": self.process[t],
            "value": self.fetch(t),
        }


Sink = Callable[[int, str, list[object]], None]  # (txn id or fail id, type, value)


def _is_txn_value(v: object) -> bool:
    return type(v) is list


def collect_ops(ops: Iterable[Op], sink: Sink) -> TxnTable:
    """Pair ``ops`` (Op objects, file order) and feed each completed transaction to ``sink``."""
    table = TxnTable()
    values: list[list[object]] = []
    open_: dict[Hashable, tuple[int, Any, int]] = {}
    fails = 0
    pos, op = -1, None
    try:
        for pos, op in enumerate(ops):
            p = op.process
            if p == NEMESIS:
                continue
            t = op.type
            if t == INVOKE:
                open_[p] = (pos, op.value, op.index)
                continue
            inv = open_.pop(p, None)
            value: Any = op.value if _is_txn_value(op.value) else (inv[1] if inv else None)
            if not _is_txn_value(value):
                raise MalformedTxn(
                    f"{op.f!r} with value {op.value!r:.60} is not a transaction (expected a list of "
                    "[f, key, value] micro-ops)"
                )
            if t == FAIL:
                table.fail_values.append((op.index, value))
                sink(fails, FAIL, value)
                fails += 1
                continue
            if t == INFO and inv is not None and _is_txn_value(inv[1]):
                value = inv[1]  # its writes are the invoked ones; its reads are unknown
            tid = len(table.ok)
            table.invoke_pos.append(inv[0] if inv else -1)
            table.invoke_index.append(inv[2] if inv else -1)
            table.complete_pos.append(pos)
            table.index.append(op.index)
            table.ok.append(1 if t == OK else 0)
            table.process.append(p)
            values.append(value)
            sink(tid, t, value)
    except MalformedTxn as e:
        e.position, e.op = pos, op
        raise
    table.fetch = values.__getitem__
    table.pending = [inv[1] for inv in open_.values()]
    return table


BLOCK = 1 << 22  # bytes read at a time by collect_file


def _line_blocks(path: Path) -> Iterator[list[bytes]]:
    """The lines of ``path`` (each without its newline), a block of about :data:`BLOCK` bytes at a
    time; a last line without a newline raises :class:`FastPathRefused` (a torn line is
    ``read_history``'s to judge)."""
    rest = b""
    with open(path, "rb") as f:
        while True:
            data = f.read(BLOCK)
            if not data:
                break
            if rest:
                data = rest + data
            if may_hold_big_int(data):  # orjson would read it as a float; read_history is exact
                raise FastPathRefused("an integer beyond 64 bits")
            lines = data.split(b"\n")
            rest = lines.pop()
            yield lines
    if rest:
        raise FastPathRefused("torn last line")


def block_starts(path: Path) -> tuple[list[int], list[int]]:
    """(first 1-based line, byte offset) of blocks of whole lines covering ``path``, for reading
    one line again without an offset per line (a pass over the file's newlines only)."""
    first, offsets = [1], [0]
    line, offset = 1, 0
    with open(path, "rb") as f:
        while True:
            data = f.read(BLOCK)
            if not data:
                break
            cut = data.rfind(b"\n") + 1
            line += data.count(b"\n")
            offset += len(data)
            if cut:
                first.append(line)
                offsets.append(offset - len(data) + cut)
    return first, offsets


def read_line_at(path: Path, starts: tuple[list[int], list[int]], line: int) -> bytes:
    """Line ``line`` (1-based) of ``path``, given its :func:`block_starts`."""
    import bisect

    first, offsets = starts
    k = bisect.bisect_right(first, line) - 1
    with open(path, "rb") as fh:
        fh.seek(offsets[k])
        for _ in range(line - first[k]):
            fh.readline()
        return fh.readline()


def collect_file(path: Path, sink: Sink) -> TxnTable:
    """As :func:`collect_ops` for a JSON Lines history, without building Op objects.

    Checks the same rules as ``chaos.history.store.read_history`` on the way (pairing, types,
    time order); on anything it does not accept it raises :class:`FastPathRefused`, and the caller
    re-reads the file through ``read_history``, which raises the proper HistoryError. Keeps no
    byte offset per transaction: a value is re-read (to explain an anomaly) from its line, the
    completion's position (blank lines are refused, so position = line - 1).
    """
    table = TxnTable()
    open_: dict[Hashable, tuple[int, Any, Any, Any]] = {}
    loads = orjson.loads
    fails = 0
    last_time = -(2**63)
    pos = -1
    append_inv, append_cpl = table.invoke_pos.append, table.complete_pos.append
    append_inv_idx = table.invoke_index.append
    append_idx, append_ok, append_proc = table.index.append, table.ok.append, table.process.append
    ok_ = table.ok
    invoke, fail, info, ok, nemesis, types = INVOKE, FAIL, INFO, OK, NEMESIS, TYPES
    try:
        for lines in _line_blocks(path):
            for raw in lines:
                pos += 1
                try:
                    d = loads(raw)
                    t = d["type"]
                    p = d["process"]
                    f = d["f"]
                    tm = d.get("time", 0)
                except Exception as e:
                    raise FastPathRefused(str(e)) from None
                if type(tm) is not int or tm < last_time or type(f) is not str or t not in types:
                    raise FastPathRefused("time, f or type")
                last_time = tm
                if p == nemesis:
                    continue
                if type(p) is not int and (type(p) is not str):
                    raise FastPathRefused("process")
                v = d.get("value")
                if t == invoke:
                    if p in open_:
                        raise FastPathRefused("double invoke")
                    open_[p] = (pos, v, f, d.get("index", pos))
                    continue
                inv = open_.pop(p, None)
                if inv is None or inv[2] != f:
                    raise FastPathRefused("unpaired completion")
                value = v if type(v) is list else inv[1]
                if type(value) is not list:
                    raise MalformedTxn(
                        f"{f!r} with value {v!r:.60} is not a transaction (expected a list of [f, key, "
                        "value] micro-ops)"
                    )
                if t == fail:
                    table.fail_values.append((d.get("index", pos), value))
                    sink(fails, fail, value)
                    fails += 1
                    continue
                if t == info and type(inv[1]) is list:
                    value = inv[1]
                tid = len(ok_)
                append_inv(inv[0])
                append_inv_idx(inv[3])
                append_cpl(pos)
                append_idx(d.get("index", pos))
                append_ok(1 if t == ok else 0)
                append_proc(p)
                sink(tid, t, value)
    except MalformedTxn as e:
        e.position = pos
        raise
    starts: list[tuple[list[int], list[int]]] = []
    positions = table.complete_pos

    def fetch(t: int) -> list[object]:
        if not starts:
            starts.append(block_starts(path))
        d = loads(read_line_at(path, starts[0], positions[t] + 1))
        v = d.get("value")
        if d.get("type") == INFO or type(v) is not list:
            return [[m[0], m[1], None] if m and m[0] == "r" else m for m in (v or [])]
        return list(v)

    table.fetch = fetch
    table.pending = [inv[1] for inv in open_.values()]
    return table


class gc_paused:
    """Pause the cyclic garbage collector while millions of small containers are built (they
    would trigger it again and again for nothing: nothing here forms a reference cycle)."""

    def __enter__(self) -> None:
        self.was = gc.isenabled()
        gc.disable()

    def __exit__(self, *exc: object) -> None:
        if self.was:
            gc.enable()
