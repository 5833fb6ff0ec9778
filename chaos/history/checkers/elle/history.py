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
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

import orjson

from chaos.history.op import FAIL, INFO, INVOKE, NEMESIS, OK, TYPES, Op


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
    op: Any = None


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
        self.process: list[Any] = []
        self.fetch: Callable[[int], list[Any]] = lambda t: []  # the value of txn t (slow)
        self.fail_values: list[tuple[int, list[Any]]] = []  # (op index, value) of failed txns

    def __len__(self) -> int:
        return len(self.ok)

    def summary(self, t: int) -> dict[str, Any]:
        """The completion of txn ``t`` as a short dict for reports."""
        return {
            "index": self.index[t],
            "type": OK if self.ok[t] else INFO,
            "process": self.process[t],
            "value": self.fetch(t),
        }


Sink = Callable[[int, str, list[Any]], None]  # (txn id or fail id, type, value)


def _is_txn_value(v: Any) -> bool:
    return type(v) is list


def collect_ops(ops: Iterable[Op], sink: Sink) -> TxnTable:
    """Pair ``ops`` (Op objects, file order) and feed each completed transaction to ``sink``."""
    table = TxnTable()
    values: list[list[Any]] = []
    open_: dict[Any, tuple[int, Any, int]] = {}
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
    return table


def _raw_lines(path: Path) -> Iterator[tuple[int, bytes]]:
    with open(path, "rb") as f:
        offset = 0
        for raw in f:
            yield offset, raw
            offset += len(raw)


def collect_file(path: Path, sink: Sink) -> TxnTable:
    """As :func:`collect_ops` for a JSON Lines history, without building Op objects.

    Checks the same rules as ``chaos.history.store.read_history`` on the way (pairing, types,
    time order); on anything it does not accept it raises :class:`FastPathRefused`, and the caller
    re-reads the file through ``read_history``, which raises the proper HistoryError.
    """
    table = TxnTable()
    offsets = array.array("q")
    open_: dict[Any, tuple[int, Any, Any, Any]] = {}
    loads = orjson.loads
    fails = 0
    last_time = -(2**63)
    pos = -1
    append_inv, append_cpl = table.invoke_pos.append, table.complete_pos.append
    append_inv_idx = table.invoke_index.append
    append_idx, append_ok, append_proc = table.index.append, table.ok.append, table.process.append
    append_off = offsets.append
    ok_ = table.ok
    try:
        for offset, raw in _raw_lines(path):
            if not raw.endswith(b"\n") or raw.isspace():
                raise FastPathRefused("torn or blank line")
            try:
                d = loads(raw)
                t = d["type"]
                p = d["process"]
                f = d["f"]
                tm = d.get("time", 0)
            except Exception as e:
                raise FastPathRefused(str(e)) from None
            pos += 1
            if type(tm) is not int or tm < last_time or type(f) is not str or t not in TYPES:
                raise FastPathRefused("time, f or type")
            last_time = tm
            if p == NEMESIS:
                continue
            if type(p) is bool or not isinstance(p, int | str):
                raise FastPathRefused("process")
            v = d.get("value")
            if t == INVOKE:
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
                    f"{f!r} with value {v!r:.60} is not a transaction (expected a list of [f, key, value] "
                    "micro-ops)"
                )
            if t == FAIL:
                table.fail_values.append((d.get("index", pos), value))
                sink(fails, FAIL, value)
                fails += 1
                continue
            if t == INFO and type(inv[1]) is list:
                value = inv[1]
            tid = len(ok_)
            append_inv(inv[0])
            append_inv_idx(inv[3])
            append_cpl(pos)
            append_idx(d.get("index", pos))
            append_ok(1 if t == OK else 0)
            append_proc(p)
            append_off(offset)
            sink(tid, t, value)

    except MalformedTxn as e:
        e.position = pos
        raise

    def fetch(t: int) -> list[Any]:
        with open(path, "rb") as fh:
            fh.seek(offsets[t])
            d = loads(fh.readline())
        v = d.get("value")
        if d.get("type") == INFO or type(v) is not list:
            return [[m[0], m[1], None] if m and m[0] == "r" else m for m in (v or [])]
        return list(v)

    table.fetch = fetch
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
