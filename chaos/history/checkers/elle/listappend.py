"""List-append inference (Elle's ``elle.list-append``): version orders from reads, non-cycle
anomalies, and ww / wr / rw edges.

Micro-ops: ``["append", k, v]`` and ``["r", k, list-or-null]``. Appends must be unique per key
(Elle's precondition; a repeat makes the verdict ``unknown``).

Pass 1 (:meth:`ListAppend.add`, one call per completed transaction): index every append's writer,
keep per key the longest read so far and check every read is a prefix of it or extends it
(incompatible-order otherwise), remember each ok read as (reader, last element, length), and run
the per-transaction checks (internal, future-read, lost-update candidates).

Pass 2 (:meth:`ListAppend.finish`): per key the version order is the longest read, duplicates
removed. An append no read shows comes after the last observed element. Then, per key:
ww from the writer of each element to the writer of the next; wr from the writer of a read's last
element to the reader; rw from each reader to the writer of the element right after what it read
(every unread append's writer when it read everything observed). G1a (a read shows a failed
append), G1b (a read ends in another transaction's non-final append), dirty-update (a failed
append followed, through info ones, by an ok append) and duplicate-elements are found there too,
and garbage-read: a read shows an element no transaction appended to that key (not one that
failed, nor one whose outcome is unknown, nor an invocation that never completed). Elle leaves
these out (its version order simply holds the element, with no writer); every model down to
read-uncommitted forbids a value nobody wrote, and it is what a key mix-up or a corrupted value
looks like.
"""

from __future__ import annotations

import array
from collections.abc import Hashable
from typing import Any

from chaos.history.checkers.elle.graph import RW, WR, WW
from chaos.history.checkers.elle.history import MalformedTxn, TxnTable, Unsupported
from chaos.history.op import FAIL, OK

INIT = ("init",)  # the empty list every key starts as (never equal to an element)


def _show(v: object) -> str:
    if v is None:
        return "nil"
    if isinstance(v, list):
        return "[" + " ".join(_show(x) for x in v) + "]"
    return str(v)


class ListAppend:
    """Both passes of list-append inference; feed it with :meth:`add`, then call :meth:`finish`."""

    name = "list-append"

    def __init__(self) -> None:
        self.writer: dict[Hashable, dict[Hashable, int]] = {}  # key -> element -> ok/info txn
        self.failed: dict[Hashable, dict[Hashable, int]] = {}  # key -> element -> fail id
        self.intermediate: dict[Hashable, dict[Hashable, int]] = {}  # key -> non-final append -> txn
        self.reads: dict[Hashable, list[tuple[int, Hashable, int]]] = {}  # key -> (reader, last, length)
        self.longest: dict[Hashable, list[object]] = {}
        self.incompatible: set[Hashable] = set()
        self.internal: list[dict[str, object]] = []
        self.future: list[dict[str, object]] = []
        self.rmw: dict[tuple[Hashable, int, Hashable], list[int]] = {}  # (key, length, last) -> txns
        self.order: dict[Hashable, list[object]] = {}  # key -> version order (after finish)
        self.position: dict[Hashable, dict[Hashable, int]] = {}

    # ---------------------------------------------------------------------------------------------
    # pass 1

    def add(self, t: int, type_: str, value: list[Any]) -> None:
        """One completed transaction (``t``: txn id, or fail id for ``fail``). The hot loop of the
        check (one call per transaction): the append index and the read bookkeeping are inlined."""
        if type_ == FAIL:
            for mop in value:
                if type(mop) is list and len(mop) == 3 and mop[0] == "append":
                    self._index_append(self.failed, mop[1], mop[2], t, failed=True)
            return
        ok = type_ == OK
        writer, failed, reads, longest = self.writer, self.failed, self.reads, self.longest
        for mop in value:
            if type(mop) is not list or len(mop) != 3:
                raise MalformedTxn(f"micro-op {mop!r:.60} is not [f, key, value]")
            f, k, v = mop
            if f == "append":
                if v is None:
                    raise MalformedTxn(f"micro-op {mop!r:.60} appends null (expected a value)")
                row = writer.get(k)
                if row is None:
                    if failed and v in failed.get(k, ()):
                        raise Unsupported(f"duplicate appends: {v!r} appended to {k!r} more than once")
                    writer[k] = {v: t}
                elif v in row:
                    if row[v] != t:  # the same txn appending a value twice is its own (internal) business
                        raise Unsupported(f"duplicate appends: {v!r} appended to {k!r} more than once")
                else:
                    if failed and v in failed.get(k, ()):
                        raise Unsupported(f"duplicate appends: {v!r} appended to {k!r} more than once")
                    row[v] = t
            elif f == "r":
                if not ok:
                    continue
                if type(v) is list and v:
                    n = len(v)
                    rd = (t, v[-1], n)
                elif v is None or v == []:
                    rd = (t, INIT, 0)
                    n = 0
                else:
                    raise MalformedTxn(
                        f"micro-op {mop!r:.60}: a read of {k!r} returned {v!r:.60} (expected a list or null)"
                    )
                rows = reads.get(k)
                if rows is None:
                    reads[k] = [rd]
                else:
                    rows.append(rd)
                if n:
                    lg = longest.get(k)
                    if lg is None:
                        longest[k] = v
                    else:
                        m = len(lg)
                        if n == m:
                            if lg != v:
                                self.incompatible.add(k)
                        elif n < m:
                            if lg[:n] != v:
                                self.incompatible.add(k)
                        else:
                            if v[:m] != lg:
                                self.incompatible.add(k)
                            longest[k] = v
            else:
                raise MalformedTxn(f"micro-op {mop!r:.60}: unexpected f {f!r} (list-append has append and r)")
        if len(value) > 1 and len({mop[1] for mop in value}) < len(value):
            self._within(t, value, ok)

    def _index_append(
        self, index: dict[Hashable, dict[Hashable, int]], k: Hashable, v: Hashable, t: int, *, failed: bool
    ) -> None:
        other = self.failed if not failed else self.writer
        row = index.get(k)
        if row is None:
            index[k] = row = {}
        elif v in row:
            if row[v] == t:
                return  # the same txn appending a value twice is its own (internal) business
            raise Unsupported(f"duplicate appends: {v!r} appended to {k!r} more than once")
        if v in other.get(k, ()):
            raise Unsupported(f"duplicate appends: {v!r} appended to {k!r} more than once")
        row[v] = t

    def _within(self, t: int, value: list[Any], ok: bool) -> None:
        """Internal consistency, future reads, non-final appends and lost-update candidates of a
        transaction touching some key twice (Elle's ``op-internal-case``)."""
        appended_at: dict[Hashable, list[tuple[int, Hashable]]] = {}
        for i, mop in enumerate(value):
            if mop[0] == "append":
                apps = appended_at.get(mop[1])
                if apps is None:
                    appended_at[mop[1]] = [(i, mop[2])]
                else:
                    apps.append((i, mop[2]))
        for k, apps in appended_at.items():
            if len(apps) > 1:
                row = self.intermediate.get(k)
                if row is None:
                    row = self.intermediate[k] = {}
                for _, v in apps[:-1]:
                    row[v] = t
        if not ok:
            return
        state: dict[Hashable, tuple[bool, list[object]]] = {}  # key -> (full list known?, list or suffix)
        read_first: dict[Hashable, tuple[int, Hashable]] = {}
        rmw_keys: set[Hashable] = set()
        for i, (f, k, v) in enumerate(value):
            known = state.get(k)
            if f == "append":
                state[k] = (known[0], [*known[1], v]) if known else (False, [v])
                if k in read_first and k not in rmw_keys:  # read, then wrote: a lost-update candidate
                    rmw_keys.add(k)
                    length, last = read_first[k]
                    txns = self.rmw.get((k, length, last))
                    if txns is None:
                        self.rmw[(k, length, last)] = [t]
                    else:
                        txns.append(t)
                continue
            got = v or []
            if known is None and k not in read_first:
                read_first[k] = (len(got), got[-1] if got else INIT)
            apps = appended_at.get(k)
            future = None
            if apps is not None and apps[-1][0] > i:
                later = {x for j, x in apps if j > i}
                future = [x for x in got if x in later]
            if future:
                self.future.append({"op": t, "mop": [f, k, v], "element": future[0]})
            elif known is not None:
                full, seen = known
                if full:
                    if got != seen:
                        self.internal.append({"op": t, "mop": [f, k, v], "expected": seen})
                elif got[len(got) - len(seen) :] != seen or len(got) < len(seen):
                    self.internal.append({"op": t, "mop": [f, k, v], "expected": ["...", *seen]})
            state[k] = (True, got)

    # ---------------------------------------------------------------------------------------------
    # pass 2

    def finish(
        self, table: TxnTable
    ) -> tuple[dict[str, list[object]], array.array[int], array.array[int], array.array[int]]:
        """Non-cycle anomalies and the edges ``(src, dst, rel)``."""
        src, dst, rel = array.array("i"), array.array("i"), array.array("b")
        ws, wd, wrel = src.append, dst.append, rel.append
        anomalies: dict[str, list[Any]] = {}
        ok = table.ok
        empty: dict[Hashable, int] = {}
        for k in self.writer.keys() | self.reads.keys():
            longest = self.longest.get(k, [])
            vo = longest
            if len(set(longest)) != len(longest):
                vo = list(dict.fromkeys(longest))
                self._duplicates(k, longest, anomalies)
            self.order[k] = vo
            pos = {e: i for i, e in enumerate(vo)}
            self.position[k] = pos
            wrow = self.writer.get(k, empty)
            w = [wrow.get(e, -1) for e in vo]
            m = len(vo)
            # appends no read shows (every element with a writer is in wrow, appends are unique)
            unread = [t for e, t in wrow.items() if e not in pos] if len(wrow) > m - w.count(-1) else []
            prev = -1
            for b in w:
                if prev >= 0 and b >= 0 and prev != b:
                    ws(prev)
                    wd(b)
                    wrel(WW)
                prev = b
            if unread and m and w[-1] >= 0:
                a = w[-1]
                for u in unread:
                    if u != a:
                        ws(a)
                        wd(u)
                        wrel(WW)
            for t, last, _n in self.reads.get(k, ()):
                if last is INIT:
                    i = -1
                else:
                    got = pos.get(last)
                    if got is None:
                        continue
                    i = got
                    a = w[i]
                    if a >= 0 and a != t:
                        ws(a)
                        wd(t)
                        wrel(WR)
                j = i + 1
                if j < m:
                    b = w[j]
                    if b >= 0 and b != t:
                        ws(t)
                        wd(b)
                        wrel(RW)
                else:
                    for u in unread:
                        if u != t:
                            ws(t)
                            wd(u)
                            wrel(RW)
            frow = self.failed.get(k)
            if frow:
                self._aborted(k, vo, pos, w, frow, ok, anomalies)
            if -1 in w:
                self._garbage(k, vo, w, frow or empty, table, anomalies)
            irow = self.intermediate.get(k)
            if irow:
                for t, last, n in self.reads.get(k, ()):
                    writer = irow.get(last)
                    if writer is not None and writer != t and wrow.get(last) == writer:
                        anomalies.setdefault("G1b", []).append(
                            {"op": t, "key": k, "read_length": n, "writer": writer, "element": last}
                        )
        if self.incompatible:
            anomalies["incompatible-order"] = [
                self._incompatible(k, table) for k in sorted(self.incompatible, key=repr)
            ]
        if self.internal:
            anomalies["internal"] = self.internal
        if self.future:
            anomalies["future-read"] = self.future
        lost = [
            {"key": k, "value": (self.order.get(k, [])[:n] if last is not INIT else []), "txns": ts}
            for (k, n, last), ts in self.rmw.items()
            if len(set(ts)) > 1 and all(ok[t] for t in ts)
        ]
        if lost:
            anomalies["lost-update"] = lost
        return anomalies, src, dst, rel

    def _duplicates(self, k: Hashable, longest: list[object], anomalies: dict[str, list[object]]) -> None:
        seen: set[Hashable] = set()
        at = 0
        for i, e in enumerate(longest):
            if e in seen:
                at = i
                break
            seen.add(e)
        for t, _last, n in self.reads.get(k, ()):
            if n > at:
                counts: dict[Hashable, int] = {}
                for e in longest[:n]:
                    counts[e] = counts.get(e, 0) + 1
                anomalies.setdefault("duplicate-elements", []).append(
                    {
                        "op": t,
                        "key": k,
                        "read_length": n,
                        "duplicates": {e: c for e, c in counts.items() if c > 1},
                    }
                )

    def _aborted(
        self,
        k: Hashable,
        vo: list[object],
        pos: dict[Hashable, int],
        w: list[int],
        frow: dict[Hashable, int],
        ok: array.array[int],
        anomalies: dict[str, list[object]],
    ) -> None:
        """G1a (reads showing a failed append) and dirty-update (committed state after it)."""
        for e, fid in frow.items():
            i = pos.get(e)
            if i is None:
                continue
            for t, _last, n in self.reads.get(k, ()):
                if n > i:
                    anomalies.setdefault("G1a", []).append(
                        {"op": t, "key": k, "read_length": n, "writer_fail": fid, "element": e}
                    )
            j = i + 1
            while j < len(vo) and (w[j] < 0 or not ok[w[j]]):
                j += 1
            if j < len(vo):
                anomalies.setdefault("dirty-update", []).append(
                    {"key": k, "values": vo[i : j + 1], "writer_fail": fid, "writer": w[j]}
                )

    def _garbage(
        self,
        k: Hashable,
        vo: list[object],
        w: list[int],
        frow: dict[Hashable, int],
        table: TxnTable,
        anomalies: dict[str, list[object]],
    ) -> None:
        """garbage-read: the first read showing each element of k's order that nobody appended."""
        pending = table.pending_writes("append")
        reads = self.reads.get(k, ())
        for i, (e, b) in enumerate(zip(vo, w, strict=True)):
            if b >= 0 or e in frow or (k, e) in pending:
                continue
            for t, _last, n in reads:
                if n > i:
                    anomalies.setdefault("garbage-read", []).append(
                        {"op": t, "key": k, "read_length": n, "element": e}
                    )
                    break

    def _incompatible(self, k: Hashable, table: TxnTable) -> dict[str, object]:
        """Elle's report: the first pair of reads, by length, where the shorter is not a prefix."""
        distinct: dict[tuple[object, ...], list[object]] = {}
        for t in {t for t, _, _ in self.reads.get(k, ())}:
            for f, key, v in table.fetch(t):
                if f == "r" and key == k and v:
                    distinct.setdefault(tuple(v), v)
        vals = sorted(distinct.values(), key=len)
        for a, b in zip(vals, vals[1:], strict=False):
            if b[: len(a)] != a:
                return {"key": k, "values": [a, b]}
        return {"key": k, "values": vals[:2]}

    # ---------------------------------------------------------------------------------------------
    # explanations

    def explain(self, table: TxnTable, a: int, b: int, label: int, name: dict[int, str]) -> str | None:
        """Why ``a -label-> b`` holds, as a sentence, or None if no micro-op justifies it."""
        va, vb = table.fetch(a), table.fetch(b)
        ta, tb = name[a], name[b]
        if label == WW:
            for f, k, e in vb:
                if f != "append":
                    continue
                p = self._previous(k, e)
                if p is not INIT and self.writer.get(k, {}).get(p) == a:
                    return f"{ta} appended {_show(p)} to {k}, and {tb} appended {_show(e)} right after it{self._seen(k, e)}"
        elif label == WR:
            for f, k, v in vb:
                if (
                    f == "r"
                    and v
                    and self.writer.get(k, {}).get(v[-1]) == a
                    and any(m[0] == "append" and m[1] == k and m[2] == v[-1] for m in va)
                ):
                    return (
                        f"{ta} appended {_show(v[-1])} to {k}; {tb} read {k} = {_show(v)}, which ends with it"
                    )
        elif label == RW:
            for f, k, v in va:
                if f != "r" or not table.ok[a]:
                    continue
                last = v[-1] if v else INIT
                for g, k2, e in vb:
                    if g == "append" and k2 == k and self._previous(k, e) == last:
                        seen = "x" if last is INIT else ""
                        what = f"{k} = {_show(v or [])}" if not seen else f"{k} empty ({_show(v)})"
                        after = "as its first element" if last is INIT else f"right after {_show(last)}"
                        return (
                            f"{ta} read {what}, without {_show(e)}, which {tb} appended {after}"
                            f"{self._seen(k, e)}"
                        )
        return None

    def _previous(self, k: Hashable, e: Hashable) -> object:
        vo = self.order.get(k, [])
        i = self.position.get(k, {}).get(e)
        if i is None:  # never read: after everything observed
            return vo[-1] if vo else INIT
        return vo[i - 1] if i > 0 else INIT

    def _seen(self, k: Hashable, e: Hashable) -> str:
        vo = self.order.get(k, [])
        i = self.position.get(k, {}).get(e)
        if i is None:
            return f" (no read shows {_show(e)}, so it follows every observed element of {k})"
        shown = vo[max(0, i - 3) : i + 1]
        return f" (the longest read of {k} shows {'[... ' if i > 3 else '['}{' '.join(_show(x) for x in shown)} ...])"

    # ---------------------------------------------------------------------------------------------
    # non-cycle cases, for people

    def describe(self, table: TxnTable, kind: str, case: dict[str, Any]) -> dict[str, Any]:
        """A pass-2 case with transaction ids replaced by summaries and an ``explanation``."""
        out = dict(case)
        k = case.get("key")
        if "read_length" in case:  # a read of k, a prefix of k's version order
            n = case.pop("read_length")
            out.pop("read_length")
            out["mop"] = ["r", k, self.order.get(k, [])[:n]]
        if "op" in case:
            out["op"] = table.summary(case["op"])
        fail = case.get("writer_fail")
        if fail is not None:
            index, value = table.fail_values[fail]
            out["writer_fail"] = {"index": index, "type": "fail", "value": value}
        if "writer" in case and isinstance(case["writer"], int):
            out["writer"] = table.summary(case["writer"])
        if kind == "lost-update":
            out["txns"] = [table.summary(t) for t in case["txns"]]
        out["explanation"] = self._sentence(kind, out)
        return out

    @staticmethod
    def _sentence(kind: str, c: dict[str, Any]) -> str:
        op = c.get("op") or {}
        who = (
            f"op {op.get('index')}" + (f" (process {op['process']})" if op.get("process") is not None else "")
            if op
            else ""
        )
        mop = c.get("mop")
        read = f"{mop[1]} = {_show(mop[2])}" if mop else ""
        if kind == "G1a":
            return (
                f"{who} read {read}, which includes {_show(c['element'])}, appended by a transaction that "
                f"failed (op {c['writer_fail']['index']}): it read aborted state"
            )
        if kind == "G1b":
            return (
                f"{who} read {read}, ending with {_show(c['element'])}, which op {c['writer']['index']} appended "
                f"and then appended to {c['key']} again: it read an intermediate state"
            )
        if kind == "internal":
            return f"{who} read {read}, but its own earlier micro-ops imply {_show(c['expected'])}"
        if kind == "future-read":
            return (
                f"{who} read {read}, which includes {_show(c['element'])}, an element it appends only later"
            )
        if kind == "garbage-read":
            return (
                f"{who} read {read}, which includes {_show(c['element'])}, but no transaction appended "
                f"{_show(c['element'])} to {c['key']} (none that succeeded, failed, or may have): "
                "a value nobody wrote"
            )
        if kind == "duplicate-elements":
            return f"{who} read {read}, in which {_show(list(c['duplicates']))} appear more than once"
        if kind == "incompatible-order":
            a, b = c["values"]
            return (
                f"reads of {c['key']} returned {_show(a)} and {_show(b)}: neither is a prefix of the other, "
                "so they cannot both be states of one list"
            )
        if kind == "dirty-update":
            return (
                f"op {c['writer_fail']['index']} failed after appending {_show(c['values'][0])} to {c['key']}, yet "
                f"committed op {c['writer']['index']} appended {_show(c['values'][-1])} after it "
                f"({c['key']} reads [... {' '.join(_show(x) for x in c['values'])}]): aborted state became committed"
            )
        if kind == "lost-update":
            ops = ", ".join(f"op {t['index']}" for t in c["txns"])
            return (
                f"{ops} all read {c['key']} = {_show(c['value'])} and then appended to it: "
                "each overwrote the others' update without seeing it"
            )
        return kind
