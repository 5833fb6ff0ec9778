"""Read-write register inference (Elle's ``elle.rw-register``): what can soundly be inferred from
reads and writes of registers with unique written values.

Micro-ops: ``["w", k, v]`` and ``["r", k, v]`` (``null``: the initial state). Written values must be
unique per key (Elle's precondition; a repeat makes the verdict ``unknown``).

Only external micro-ops make dependencies (jepsen.txn ``ext-reads``/``ext-writes``): a txn's first
read of k before it writes k, and its last write of k. Edges (Elle's ``wr-graph`` and
``version-graphs->transaction-graph`` with its default sources):

- wr: the unique ok writer of (k, v) -> every ok txn whose external read of k returned v;
- the initial state precedes every value, so every ok reader of k = null -rw-> every ok writer of k;
- with ``wfr_keys`` (writes follow reads, Elle's ``:wfr-keys?``): a txn that externally read k = v
  and wrote k = v' orders v before v', giving ww (writers of v -> writers of v') and rw (readers of
  v -> writers of v'). A cycle in a key's version order is ``cyclic-versions`` and the wfr source is
  then dropped, as Elle does.

A blind write says nothing about the version it replaced, so without reads of the initial state
or wfr, two writers of a key stay unordered (Elle's documented limit).

Non-cycle checks: G1a (a read of a failed write), G1b (a read of another txn's non-final write),
internal (a read disagreeing with the txn's own earlier read or write), lost-update (two ok txns
read the same value of k and both wrote k), and garbage-read (a read of a value no transaction
wrote to k: none that succeeded, failed or may have, nor an invocation that never completed; Elle
lets it pass, its own tests mark it a known gap).
"""

from __future__ import annotations

import array
from collections.abc import Callable, Hashable
from typing import Any

from chaos.history.checkers.elle.graph import RW, WR, WW, has_cycle
from chaos.history.checkers.elle.history import MalformedTxn, TxnTable, Unsupported
from chaos.history.checkers.elle.listappend import _show
from chaos.history.op import FAIL, OK


class RwRegister:
    """Both passes of rw-register inference; feed it with :meth:`add`, then call :meth:`finish`."""

    name = "rw-register"

    def __init__(self, *, wfr_keys: bool = False) -> None:
        self.wfr_keys = wfr_keys
        self.writer: dict[Hashable, dict[Hashable, int]] = {}  # key -> value -> ok txn (external write)
        self.any_writer: dict[Hashable, dict[Hashable, tuple[str, int]]] = {}  # every write: (type, id)
        self.intermediate: dict[Hashable, dict[Hashable, int]] = {}
        self.readers: dict[Hashable, dict[Hashable, list[int]]] = {}  # key -> value -> ok external readers
        self.wfr: list[tuple[Hashable, Hashable, Hashable]] = []  # (key, read value, written value)
        self.internal: list[dict[str, object]] = []
        self.rmw: dict[tuple[object, object], list[int]] = {}
        self.fail_writes: dict[Hashable, dict[Hashable, int]] = {}
        self.succ: dict[
            Hashable, dict[Hashable, set[Hashable]]
        ] = {}  # key -> value -> the values wfr puts next

    def add(self, t: int, type_: str, value: list[object]) -> None:
        """One completed transaction (``t``: txn id, or fail id for ``fail``)."""
        ok = type_ == OK
        last_write: dict[Hashable, Hashable] = {}
        first_read: dict[Hashable, Hashable] = {}
        state: dict[Hashable, Hashable] = {}
        for mop in value:
            if type(mop) is not list or len(mop) != 3:
                raise MalformedTxn(f"micro-op {mop!r:.60} is not [f, key, value]")
            f, k, v = mop
            if f == "w":
                if v is None:
                    raise MalformedTxn(f"micro-op {mop!r:.60} writes null (expected a value)")
                row = self.any_writer.setdefault(k, {})
                prev = row.get(v)
                if prev is not None and prev != (type_, t):
                    raise Unsupported(f"duplicate writes: {v!r} written to {k!r} more than once")
                row[v] = (type_, t)
                if k in last_write:
                    self.intermediate.setdefault(k, {})[last_write[k]] = t if type_ != FAIL else -1
                last_write[k] = v
                state[k] = v
            elif f == "r":
                if not ok:
                    continue
                if k in state:
                    if state[k] != v:
                        self.internal.append({"op": t, "mop": mop, "expected": state[k]})
                else:
                    first_read[k] = v
                    state[k] = v
            else:
                raise MalformedTxn(f"micro-op {mop!r:.60}: unexpected f {f!r} (rw-register has w and r)")
        if type_ == FAIL:
            for k, v in last_write.items():
                self.fail_writes.setdefault(k, {})[v] = t
            return
        if not ok:
            return
        for k, v in last_write.items():
            self.writer.setdefault(k, {})[v] = t
        for k, v in first_read.items():
            self.readers.setdefault(k, {}).setdefault(v, []).append(t)
            if k in last_write:
                self.rmw.setdefault((k, v), []).append(t)
                self.wfr.append((k, v, last_write[k]))

    def finish(
        self, table: TxnTable
    ) -> tuple[dict[str, list[object]], array.array[int], array.array[int], array.array[int]]:
        src, dst, rel = array.array("i"), array.array("i"), array.array("b")

        def edge(a: int, b: int, r: int) -> None:
            if a != b:
                src.append(a)
                dst.append(b)
                rel.append(r)

        anomalies: dict[str, list[Any]] = {}
        for k, by_value in self.readers.items():
            wrow = self.writer.get(k, {})
            for v, readers in by_value.items():
                if v is None:
                    for b in wrow.values():  # nil precedes every value
                        for r in readers:
                            edge(r, b, RW)
                    continue
                a = wrow.get(v)
                if a is not None:
                    for r in readers:
                        edge(a, r, WR)
                w = self.any_writer.get(k, {}).get(v)
                if w is None and (k, v) not in table.pending_writes("w"):
                    anomalies.setdefault("garbage-read", []).append({"op": readers[0], "key": k, "value": v})
                if w is not None and w[0] == FAIL:
                    for b in readers:
                        anomalies.setdefault("G1a", []).append(
                            {"op": b, "key": k, "value": v, "writer_fail": w[1]}
                        )
                inter = self.intermediate.get(k, {}).get(v)
                if inter is not None and a is None and inter >= 0:
                    for b in readers:
                        if b != inter:
                            anomalies.setdefault("G1b", []).append(
                                {"op": b, "key": k, "value": v, "writer": inter}
                            )
        if self.wfr_keys and self.wfr:
            self._wfr_edges(edge, anomalies)
        if self.internal:
            anomalies["internal"] = self.internal
        lost = [{"key": k, "value": v, "txns": ts} for (k, v), ts in self.rmw.items() if len(set(ts)) > 1]
        if lost:
            anomalies["lost-update"] = lost
        return anomalies, src, dst, rel

    def _wfr_edges(self, edge: Callable[[int, int, int], object], anomalies: dict[str, list[object]]) -> None:
        versions: dict[Hashable, dict[Hashable, set[Hashable]]] = {}
        for k, v, v2 in self.wfr:
            if v != v2:
                versions.setdefault(k, {}).setdefault(v, set()).add(v2)
        for k, g in versions.items():
            full = {**{v: set() for vs in g.values() for v in vs}, **g}
            # the initial state precedes every value: nil -> v closes a cycle only through nil itself
            if has_cycle(full):
                anomalies.setdefault("cyclic-versions", []).append(
                    {"key": k, "values": sorted({*full}, key=repr), "sources": ["initial-state", "wfr-keys"]}
                )
                continue
            self.succ[k] = g
            wrow = self.writer.get(k, {})
            rrow = self.readers.get(k, {})
            for v, nexts in g.items():
                for v2 in nexts:
                    b = wrow.get(v2)
                    if b is None:
                        continue
                    w0 = wrow.get(v)
                    if w0 is not None:
                        edge(w0, b, WW)
                    for r in rrow.get(v, ()):
                        edge(r, b, RW)

    # ---------------------------------------------------------------------------------------------

    def explain(self, table: TxnTable, a: int, b: int, label: int, name: dict[int, str]) -> str | None:
        """Why ``a -label-> b`` holds, naming the key and values the edge was inferred from (the
        rule of :meth:`finish`), never merely a key the two share; None when none does."""
        va, vb = table.fetch(a), table.fetch(b)
        ta, tb = name[a], name[b]
        writes_a = {(m[1], m[2]) for m in va if m[0] == "w"}
        last_a = {m[1]: m[2] for m in va if m[0] == "w"}  # the external writes (a key's last)
        writes_b = list({m[1]: m[2] for m in vb if m[0] == "w"}.items())
        if label == WR:
            for f, k, v in vb:
                if f == "r" and (k, v) in writes_a:
                    return f"{ta} wrote {k} = {_show(v)}; {tb} read {k} = {_show(v)}"
        if label == RW:
            for f, k, v in va:
                if f != "r":
                    continue
                for k2, v2 in writes_b:
                    if k2 != k:
                        continue
                    if v is None:
                        return f"{ta} read {k} = nil (the initial state), and {tb} wrote {k} = {_show(v2)}, which comes later"
                    if v2 in self.succ.get(k, {}).get(v, ()):
                        return f"{ta} read {k} = {_show(v)}, and {tb} wrote {k} = {_show(v2)}, the next version of {k}"
        if label == WW:
            for k, v in last_a.items():
                for k2, v2 in writes_b:
                    if k2 == k and v2 in self.succ.get(k, {}).get(v, ()):
                        return f"{ta} wrote {k} = {_show(v)} and {tb} wrote {k} = {_show(v2)}, the next version of {k}"
        return None

    def describe(self, table: TxnTable, kind: str, case: dict[str, Any]) -> dict[str, Any]:
        out = dict(case)
        if "op" in case:
            out["op"] = table.summary(case["op"])
        if case.get("writer_fail") is not None:
            index, value = table.fail_values[case["writer_fail"]]
            out["writer_fail"] = {"index": index, "type": "fail", "value": value}
        if isinstance(case.get("writer"), int):
            out["writer"] = table.summary(case["writer"])
        if kind == "lost-update":
            out["txns"] = [table.summary(t) for t in case["txns"]]
        op = out.get("op") or {}
        who = f"op {op.get('index')}" + (
            f" (process {op['process']})" if op.get("process") is not None else ""
        )
        if kind == "G1a":
            out["explanation"] = (
                f"{who} read {case['key']} = {_show(case['value'])}, written by a transaction that failed "
                f"(op {out['writer_fail']['index']})"
            )
        elif kind == "G1b":
            out["explanation"] = (
                f"{who} read {case['key']} = {_show(case['value'])}, which op {out['writer']['index']} wrote and "
                "then overwrote in the same transaction: an intermediate state"
            )
        elif kind == "internal":
            out["explanation"] = (
                f"{who} read {case['mop'][1]} = {_show(case['mop'][2])}, but its own earlier micro-ops imply "
                f"{_show(case['expected'])}"
            )
        elif kind == "garbage-read":
            out["explanation"] = (
                f"{who} read {case['key']} = {_show(case['value'])}, but no transaction wrote "
                f"{_show(case['value'])} to {case['key']} (none that succeeded, failed, or may have): "
                "a value nobody wrote"
            )
        elif kind == "lost-update":
            ops = ", ".join(f"op {t['index']}" for t in out["txns"])
            out["explanation"] = f"{ops} all read {case['key']} = {_show(case['value'])} and then wrote it"
        elif kind == "cyclic-versions":
            out["explanation"] = (
                f"the inferred version order of {case['key']} is cyclic among {_show(case['values'])}"
            )
        else:
            out["explanation"] = f"{who} is part of this case (its fields say how)"
        return out
