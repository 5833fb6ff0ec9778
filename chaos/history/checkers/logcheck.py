"""Checkers for the ``log`` workload (a replicated append log) and Jepsen's ``set`` workload.

Log workload op shapes (docs/design.md): ``append`` invoked with a unique int ``v``, ok with
``log_index`` (the log index the entry got, 0-based); after healing one final ``read`` per node, ok with
``value[i]`` = the workload value at log index ``i`` (``null`` for entries that are not
workload appends), committed entries only.

What the log checker demands (Raft's Log Matching and Leader Completeness, Ongaro & Ousterhout
section 5.3-5.4: a follower's log is a prefix of its leader's):

- **lost**: an acknowledged (ok) append is missing from the final log.
- **duplicated**: a value occurs more than once in the final log.
- **unexpected**: a value in the log that was never attempted, or whose append definitely failed.
- **reordered**: an acknowledged append found at another index than the one acknowledged, or the
  log order contradicts real time (A completed before B was invoked, yet A sits after B).
- **divergent**: two nodes' final reads hold different values at the same index (the committed
  logs must be prefixes of one another).

``info`` and never-completed appends may or may not be present. The final log is the longest
final read. Every anomaly names the value and the ops involved by history index
(``invoke`` / ``complete``). Both checkers stream: per append they keep a few integers in arrays.
"""

from __future__ import annotations

from array import array
from collections.abc import Hashable, Sequence
from typing import Any

from chaos.history.op import FAIL, INFO, INVOKE, NEMESIS, OK, Op
from chaos.history.verdict import UNKNOWN, Accumulator, StreamChecker

MAX_REPORTED = 1000  # anomalies listed per kind; the *_count fields give the totals

_NONE, _PENDING, _OK, _FAIL, _INFO = -1, 0, 1, 2, 3
DENSE_MIN = 1 << 20  # values below this (or below 4x the appends so far) index the arrays directly
_STATUS = {OK: _OK, FAIL: _FAIL, INFO: _INFO}
_NULL = -(2**63)  # stands for null in a compacted read
_KINDS = ("lost", "duplicated", "unexpected", "reordered", "divergent")  # the anomaly kinds, in report order


def _hashable(v: object) -> object:
    try:
        hash(v)
        return v
    except TypeError:
        return repr(v)


def _compact(seq: Sequence[object]) -> Sequence[Any]:
    """A read's value list as array('q') when it is all ints/nulls (8 bytes an entry), else as is."""
    try:
        return array("q", (_NULL if x is None else x for x in seq))  # no intermediate list
    except (TypeError, OverflowError):
        return list(seq)


def _val(x: object) -> object:
    return None if x == _NULL else x


class _Capped:
    """A list keeping the first MAX_REPORTED items, counting all."""

    def __init__(self) -> None:
        self.items: list[dict[str, object]] = []
        self.count = 0

    def add(self, item: dict[str, object]) -> None:
        self.count += 1
        if len(self.items) < MAX_REPORTED:
            self.items.append(item)


class _LogAcc:
    """Per attempted append, a slot in parallel arrays. Dense mode (the usual unique small ints):
    the slot is the value itself, so no dict is needed; the first other value switches to a dict
    value -> slot."""

    def __init__(self, append_f: str, read_f: str) -> None:
        self.append_f = append_f
        self.read_f = read_f
        self.slot: dict[Hashable, int] | None = None  # None: dense mode, slot == value
        self.values: dict[int, object] = {}  # slot -> value, for slots added in sparse mode
        self.inv_idx = array("q")
        self.inv_time = array("q")
        self.cmp_idx = array("q")
        self.cmp_time = array("q")
        self.log_index = array("q")
        self.status = array("b")
        self.n_attempted = 0
        self.open_appends: dict[Hashable, int] = {}
        self.open_reads: dict[Hashable, Op] = {}
        self.reads: dict[str, tuple[Sequence[object], int, int]] = {}
        self.failed_reads: list[dict[str, object]] = []
        self.reattempted = 0

    def _grow(self, n: int) -> None:
        k = n - len(self.status)
        if k <= 0:
            return
        k = max(k, len(self.status) // 8 + 64)  # geometric (as list does), so growth is amortised O(1)
        minus = array("q", [-1]) * k
        for a in (self.inv_idx, self.inv_time, self.cmp_idx, self.cmp_time, self.log_index):
            a.extend(minus)
        self.status.extend(array("b", [_NONE]) * k)

    def _new_slot(self, value: object) -> int:
        self.n_attempted += 1
        if self.slot is None:
            if type(value) is int and 0 <= value < max(DENSE_MIN, 4 * self.n_attempted):
                if value >= len(self.status):
                    self._grow(value + 1)
                elif self.status[value] != _NONE:
                    self.reattempted += 1
                return value
            self.slot = {s: s for s in range(len(self.status)) if self.status[s] != _NONE}
        v = _hashable(value)
        if v in self.slot:
            self.reattempted += 1
        s = len(self.status)
        self._grow(s + 1)
        self.slot[v] = s
        self.values[s] = value
        return s

    def lookup(self, x: object) -> int | None:
        """The slot of an attempted value, or None."""
        if self.slot is None:
            if type(x) is int and 0 <= x < len(self.status) and self.status[x] != _NONE:
                return x
            return None
        return self.slot.get(x)

    def value(self, s: int) -> object:
        return self.values.get(s, s)

    def step(self, op: Op) -> None:
        if op.process == NEMESIS:
            return
        if op.f == self.append_f:
            if op.type == INVOKE:
                s = self._new_slot(op.value)
                self.inv_idx[s] = op.index
                self.inv_time[s] = op.time
                self.cmp_idx[s] = -1
                self.cmp_time[s] = -1
                self.log_index[s] = -1
                self.status[s] = _PENDING
                self.open_appends[op.process] = s
                return
            s_or_none = self.open_appends.pop(op.process, None)
            if s_or_none is None:
                return
            s = s_or_none
            self.status[s] = _STATUS.get(op.type, _INFO)
            self.cmp_idx[s] = op.index
            self.cmp_time[s] = op.time
            li = op.extra.get("log_index")
            if op.type == OK and type(li) is int:
                self.log_index[s] = li
        elif op.f == self.read_f:
            if op.type == INVOKE:
                self.open_reads[op.process] = op
                return
            inv = self.open_reads.pop(op.process, None)
            node = op.node or (inv.node if inv is not None else None) or f"process {op.process}"
            inv_index = inv.index if inv is not None else -1
            if op.type == OK and isinstance(op.value, list):
                self.reads[str(node)] = (_compact(op.value), inv_index, op.index)
            else:
                self.failed_reads.append(
                    {
                        "node": node,
                        "type": op.type,
                        "error": op.error,
                        "invoke": inv_index,
                        "complete": op.index,
                    }
                )

    def _ops(self, s: int) -> dict[str, object]:
        d: dict[str, object] = {"value": self.value(s), "invoke": self.inv_idx[s]}
        if self.cmp_idx[s] >= 0:
            d["complete"] = self.cmp_idx[s]
        d["type"] = {_PENDING: None, _OK: OK, _FAIL: FAIL, _INFO: INFO}[self.status[s]]
        if self.log_index[s] >= 0:
            d["log_index"] = self.log_index[s]
        return d

    def finish(self) -> dict[str, object]:
        st = self.status
        out: dict[str, object] = {
            "attempted": self.n_attempted,
            "acknowledged": st.count(_OK),
            "failed": st.count(_FAIL),
            "indeterminate": st.count(_INFO) + st.count(_PENDING),
            "nodes_read": sorted(self.reads),
            "failed_reads": self.failed_reads,
        }
        if self.reattempted:
            out["reattempted_values"] = self.reattempted
        if not self.reads:
            out.update(valid=UNKNOWN, error="no final read completed ok, so the log cannot be checked")
            for k in _KINDS:
                out[k] = []
            return out

        # The final log: the longest read; ties go to the first node by name.
        ref_node = max(sorted(self.reads), key=lambda n: len(self.reads[n][0]))
        ref = self.reads[ref_node][0]
        out["final_node"] = ref_node
        out["final_length"] = len(ref)
        found, duplicated, unexpected = self._placements(ref, ref_node)
        lost, reordered, out["indeterminate_present"] = self._by_status(found, unexpected, ref_node)
        self._real_time_order(ref, found, reordered)
        kinds = {
            "lost": lost,
            "duplicated": duplicated,
            "unexpected": unexpected,
            "reordered": reordered,
            "divergent": self._divergent(ref_node, ref),
        }
        for name, c in kinds.items():
            out[name] = c.items
            out[f"{name}_count"] = c.count
        bad = [n for n in _KINDS if out[f"{n}_count"]]
        out["valid"] = not bad
        if bad:
            out["error"] = ", ".join(f"{out[f'{n}_count']} {n}" for n in bad)
        return dict(sorted(out.items(), key=lambda kv: kv[0] != "valid"))

    def _divergent(self, ref_node: str, ref: Sequence[object]) -> _Capped:
        """Indexes where another node's read differs from the final log (``ref``, read on
        ``ref_node``), each with every differing node's value there."""
        div_at: dict[int, dict[str, object]] = {}
        for node in sorted(self.reads):
            if node == ref_node:
                continue
            other = self.reads[node][0]
            n = len(other)
            prefix = ref[:n]
            if isinstance(other, array) and isinstance(prefix, array):
                same = other == prefix
            else:
                same = [_val(x) for x in other] == [_val(x) for x in prefix]
            if same:
                continue
            for i in range(n):
                if other[i] != ref[i]:
                    div_at.setdefault(i, {ref_node: _val(ref[i])})[node] = _val(other[i])
        divergent = _Capped()
        for i in sorted(div_at):
            divergent.add({"index": i, "values": div_at[i]})
        return divergent

    def _placements(self, ref: Sequence[object], ref_node: str) -> tuple[array[int], _Capped, _Capped]:
        """Where each attempted value sits in the final log: ``(found, duplicated, unexpected)`` with
        ``found[slot]`` its first index (-1 if absent); values never attempted are unexpected."""
        found = array("q", [-1]) * len(self.status)
        duplicated = _Capped()
        unexpected = _Capped()
        dup_at: dict[int, list[int]] = {}
        for i, x in enumerate(ref):
            if x is None or x == _NULL:
                continue
            s_or_none = self.lookup(x)
            if s_or_none is None:
                unexpected.add({"value": x, "reason": "never attempted", "found": [i], "node": ref_node})
                continue
            if found[s_or_none] >= 0:
                dup_at.setdefault(s_or_none, [found[s_or_none]]).append(i)
            else:
                found[s_or_none] = i
        for s, idxs in sorted(dup_at.items(), key=lambda kv: kv[1][0]):
            duplicated.add({**self._ops(s), "found": idxs, "node": ref_node})
        return found, duplicated, unexpected

    def _by_status(
        self, found: array[int], unexpected: _Capped, ref_node: str
    ) -> tuple[_Capped, _Capped, int]:
        """Each append against its completion: ``(lost, reordered, info appends present)``; ok
        appends missing or at another index than acknowledged, failed ones present (added to
        ``unexpected``)."""
        lost = _Capped()
        reordered = _Capped()
        present_info = 0
        log_index = self.log_index
        for s, status in enumerate(self.status):
            if status == _NONE:
                continue
            at = found[s]
            if status == _OK:
                if at < 0:
                    lost.add({**self._ops(s), "reason": "acknowledged but missing from the final log"})
                elif log_index[s] >= 0 and log_index[s] != at:
                    reason = f"acknowledged at index {log_index[s]}, found at index {at}"
                    reordered.add({**self._ops(s), "found": [at], "reason": reason})
            elif status == _FAIL:
                if at >= 0:
                    reason = "append definitely failed"
                    unexpected.add({**self._ops(s), "found": [at], "node": ref_node, "reason": reason})
            elif at >= 0:
                present_info += 1
        return lost, reordered, present_info

    def _real_time_order(self, ref: Sequence[object], found: array[int], reordered: _Capped) -> None:
        """Adds to ``reordered`` each append invoked after an ok append completed, yet placed before
        it: scans from the end keeping the earliest completion of an ok append seen so far."""
        st = self.status
        best_time = 2**63 - 1
        best_slot = -1
        for i in range(len(ref) - 1, -1, -1):
            x = ref[i]
            if x is None or x == _NULL:
                continue
            s_or_none = self.lookup(x)
            if s_or_none is None or found[s_or_none] != i:
                continue
            s = s_or_none
            if best_slot >= 0 and self.inv_time[s] > best_time:
                reordered.add(
                    {
                        **self._ops(s),
                        "found": [i],
                        "reason": (
                            f"invoked after append {self.value(best_slot)!r} completed ok, "
                            f"yet placed before it (index {i} < {found[best_slot]})"
                        ),
                        "before": self._ops(best_slot) | {"found": [found[best_slot]]},
                    }
                )
            if st[s] == _OK and self.cmp_time[s] < best_time:
                best_time = self.cmp_time[s]
                best_slot = s


class LogChecker(StreamChecker):
    """The log workload checker (see the module docstring). Result keys: ``valid``, ``lost``,
    ``duplicated``, ``unexpected``, ``reordered``, ``divergent`` (lists, first 1000 each, with
    ``<kind>_count`` totals), ``attempted``, ``acknowledged``, ``failed``, ``indeterminate``,
    ``final_node``, ``final_length``, ``nodes_read``, ``failed_reads``. ``valid`` is ``"unknown"``
    when no final read completed ok."""

    name = "log"

    def __init__(self, append_f: str = "append", read_f: str = "read"):
        self.append_f = append_f
        self.read_f = read_f

    def begin(self, test: dict[str, object], opts: dict[str, object]) -> Accumulator:
        return _LogAcc(self.append_f, self.read_f)


# --------------------------------------------------------------------------------------------------
# set


class _SetAcc:
    def __init__(self, add_f: str, read_f: str) -> None:
        self.add_f = add_f
        self.read_f = read_f
        self.adds: dict[Hashable, list[int]] = {}  # value -> [invoke index, complete index, status]
        self.open: dict[Hashable, object] = {}
        self.read: tuple[list[object], int] | None = None

    def step(self, op: Op) -> None:
        if op.process == NEMESIS:
            return
        if op.f == self.add_f:
            if op.type == INVOKE:
                v = _hashable(op.value)
                self.adds[v] = [op.index, -1, _PENDING]
                self.open[op.process] = v
            else:
                v = self.open.pop(op.process, None)
                if v is not None:
                    rec = self.adds[v]
                    rec[1] = op.index
                    rec[2] = _STATUS.get(op.type, _INFO)
        elif op.f == self.read_f and op.type == OK:
            if not isinstance(op.value, list | tuple | set | frozenset):
                raise ValueError(
                    f"set read at op {op.index} must return a list of elements, got {op.value!r}"
                )
            self.read = ([_hashable(x) for x in op.value], op.index)

    def _ops(self, v: object) -> dict[str, object]:
        inv, cmp_, st = self.adds[v]
        d: dict[str, object] = {"value": v, "invoke": inv}
        if cmp_ >= 0:
            d["complete"] = cmp_
        d["type"] = {_PENDING: None, _OK: OK, _FAIL: FAIL, _INFO: INFO}[st]
        return d

    def finish(self) -> dict[str, object]:
        ok = {v for v, r in self.adds.items() if r[2] == _OK}
        out: dict[str, object] = {
            "attempt_count": len(self.adds),
            "acknowledged_count": len(ok),
        }
        if self.read is None:
            out.update(valid=UNKNOWN, error="set was never read")
            return out
        elements, read_index = self.read
        final = set(elements)
        attempted = set(self.adds)
        lost = sorted(ok - final, key=repr)
        unexpected = sorted(final - attempted, key=repr)
        recovered = sorted((final & attempted) - ok, key=repr)
        dups = len(elements) - len(final)
        out.update(
            read_index=read_index,
            ok_count=len(final & ok),
            lost=[self._ops(v) for v in lost[:MAX_REPORTED]],
            lost_count=len(lost),
            unexpected=[{"value": v} for v in unexpected[:MAX_REPORTED]],
            unexpected_count=len(unexpected),
            recovered=[self._ops(v) for v in recovered[:MAX_REPORTED]],
            recovered_count=len(recovered),
            duplicated_count=dups,
        )
        out["valid"] = not lost and not unexpected
        if not out["valid"]:
            out["error"] = f"{len(lost)} lost, {len(unexpected)} unexpected"
        return dict(sorted(out.items(), key=lambda kv: kv[0] != "valid"))


class SetChecker(StreamChecker):
    """Jepsen's ``checker/set``: ``add`` ops then a final ``read`` of all elements.

    lost = acknowledged adds missing from the final read; unexpected = read elements never
    attempted; recovered = elements of adds that were not acknowledged (fail/info) but are present.
    Valid iff nothing is lost or unexpected; ``"unknown"`` when the set was never read ok.
    """

    name = "set"

    def __init__(self, add_f: str = "add", read_f: str = "read"):
        self.add_f = add_f
        self.read_f = read_f

    def begin(self, test: dict[str, object], opts: dict[str, object]) -> Accumulator:
        return _SetAcc(self.add_f, self.read_f)


# --------------------------------------------------------------------------------------------------
# log-reads: Jepsen's set-full over every read of the log workload


_QUANTILES = (0.0, 0.5, 0.95, 0.99, 1.0)


def _quantiles(xs: list[float]) -> dict[str, float]:
    if not xs:
        return {}
    s = sorted(xs)
    return {str(q): s[min(len(s) - 1, int(q * len(s)))] for q in _QUANTILES}


class _ReadsAcc:
    """State of :class:`LogReadsChecker` (see there). Keeps, per index, its first observation; per
    element, when and where it became known; per read, (invocation time, end) for staleness."""

    def __init__(self, append_f: str, range_f: str, final_f: str) -> None:
        self.append_f, self.range_f, self.final_f = append_f, range_f, final_f
        self.attempted: dict[Hashable, int] = {}  # value -> status
        self.append_ops: dict[Hashable, tuple[int, int]] = {}  # value -> (invoke index, complete index)
        self.open: dict[Hashable, Op] = {}
        self.at_index: dict[int, tuple[object, dict[str, object]]] = {}  # index -> (value, first observation)
        self.known: dict[
            Any, tuple[int, int, dict[str, object]]
        ] = {}  # value -> (time ns, index, observation)
        self.elsewhere: dict[Hashable, set[int]] = {}  # value -> every index it was observed at
        self.ends: list[
            tuple[int, int]
        ] = []  # (end index exclusive, invoke time) of reads that reached the end
        self.covered: list[tuple[int, int]] = []  # (from, end) of every ok read
        self.final: dict[str, list[object]] = {}
        self.n_reads = 0
        self.n_final = 0
        self.divergent = _Capped()
        self.unexpected = _Capped()
        self.duplicated = _Capped()
        self._div_seen: set[int] = set()
        self._unexp_seen: set[Hashable] = set()
        self._dup_seen: set[Hashable] = set()
        self.read_seen: dict[Hashable, tuple[int, dict[str, object]]] = {}  # value -> first read observation

    def _observe(self, index: int, value: object, time_ns: int, obs: dict[str, object]) -> None:
        if value is None:
            prev = self.at_index.get(index)
            if prev is None:
                self.at_index[index] = (None, obs)
            elif prev[0] is not None and index not in self._div_seen:
                self._div_seen.add(index)
                self.divergent.add({"index": index, "first": {"value": prev[0], **prev[1]}, "later": obs})
            return
        v = _hashable(value)
        prev = self.at_index.get(index)
        if prev is None:
            self.at_index[index] = (v, obs)
        elif prev[0] != v and index not in self._div_seen:
            self._div_seen.add(index)
            self.divergent.add(
                {"index": index, "first": {"value": prev[0], **prev[1]}, "later": {"value": v, **obs}}
            )
        idxs = self.elsewhere.setdefault(v, set())
        idxs.add(index)
        if len(idxs) > 1 and v not in self._dup_seen:
            self._dup_seen.add(v)
            self.duplicated.add({"value": v, "indices": sorted(idxs), "observation": obs})
        if v not in self.known:
            self.known[v] = (time_ns, index, obs)
        if obs.get("kind") == "read":
            self.read_seen.setdefault(v, (index, obs))
            status = self.attempted.get(v)
            if (status is None or status == _FAIL) and v not in self._unexp_seen:
                self._unexp_seen.add(v)
                reason = "never written by any client" if status is None else "append definitely failed"
                self.unexpected.add({"value": v, "index": index, "reason": reason, **obs})

    def step(self, op: Op) -> None:
        if op.process == NEMESIS:
            return
        if op.type == INVOKE:
            self.open[op.process] = op
            if op.f == self.append_f:
                v = _hashable(op.value)
                self.attempted[v] = _PENDING
                self.append_ops[v] = (op.index, -1)
            return
        inv = self.open.pop(op.process, None)
        if op.f == self.append_f:
            v = _hashable(op.value)
            self.attempted[v] = _STATUS.get(op.type, _INFO)
            self.append_ops[v] = (inv.index if inv is not None else -1, op.index)
            li = op.extra.get("log_index")
            if op.type == OK and type(li) is int:
                obs = {"kind": "ack", "op": op.index, "process": op.process}
                self._observe(li, op.value, op.time, obs)
            return
        if op.type != OK or op.f not in (self.range_f, self.final_f) or not isinstance(op.value, list):
            return
        start = op.extra.get("from_index", 0) if op.f == self.range_f else 0
        to_end = bool(op.extra.get("to_end", False)) if op.f == self.range_f else True
        if type(start) is not int:
            return
        node = op.node or (inv.node if inv is not None else None) or f"process {op.process}"
        inv_time = inv.time if inv is not None else op.time
        self.n_reads += 1
        for k, x in enumerate(op.value):
            obs = {"kind": "read", "op": op.index, "node": node}
            self._observe(start + k, x, op.time, obs)
        end = start + len(op.value)
        self.covered.append((start, end))
        if to_end:
            self.ends.append((end, inv_time))
        if op.f == self.final_f:
            self.n_final += 1
            self.final[str(node)] = op.value

    def finish(self) -> dict[str, object]:
        out: dict[str, object] = {
            "reads": self.n_reads,
            "final_reads": self.n_final,
            "attempt_count": len(self.attempted),
            "known_count": len(self.known),
        }
        # Staleness: the newest invocation of a read that ended (commitIndex) below each index.
        self.ends.sort()
        end_keys = [e for e, _ in self.ends]
        newest_upto: list[int] = []
        best = -1
        for _, t in self.ends:
            best = max(best, t)
            newest_upto.append(best)
        # Coverage: merged [from, end) intervals of every ok read, for never-read.
        merged: list[list[int]] = []
        for a, b in sorted(self.covered):
            if merged and a <= merged[-1][1]:
                merged[-1][1] = max(merged[-1][1], b)
            else:
                merged.append([a, b])
        starts = [a for a, _ in merged]

        import bisect

        final_log = max(self.final.values(), key=len) if self.final else None
        lost = _Capped()
        stale = []
        latencies: list[float] = []
        never_read = 0
        ok_count = 0
        for v, (t_known, i, obs) in self.known.items():
            k = bisect.bisect_right(end_keys, i) - 1  # reads whose end <= i: they missed index i
            last_absent = newest_upto[k] if k >= 0 else -1
            lat_ms = max(0.0, (last_absent - t_known) / 1e6) if last_absent > t_known else 0.0
            latencies.append(lat_ms)
            if lat_ms >= 1.0:
                stale.append({"value": v, "index": i, "stable_latency_ms": round(lat_ms, 3)})
            j = bisect.bisect_right(starts, i) - 1
            if j < 0 or merged[j][1] <= i:
                never_read += 1
            if final_log is not None:
                present = i < len(final_log) and _hashable(final_log[i]) == v
                if present:
                    ok_count += 1
                else:
                    why = (
                        "missing from the final log" if i >= len(final_log) else "another entry at its index"
                    )
                    lost.add({"value": v, "index": i, "known": obs, "reason": f"known, then {why}"})
        stale.sort(key=lambda d: -d["stable_latency_ms"])
        # a value read before its append completed, and the append then definitely failed
        for v, (i, obs) in self.read_seen.items():
            if self.attempted.get(v) == _FAIL and v not in self._unexp_seen:
                self._unexp_seen.add(v)
                self.unexpected.add({"value": v, "index": i, "reason": "append definitely failed", **obs})
        out.update(
            ok_count=ok_count,
            stale_count=len(stale),
            worst_stale=stale[:8],
            never_read_count=never_read + sum(1 for v in self.attempted if v not in self.known),
            stable_latency_ms=_quantiles(latencies),
        )
        for name, c in (
            ("lost", lost),
            ("divergent", self.divergent),
            ("unexpected", self.unexpected),
            ("duplicated", self.duplicated),
        ):
            out[name] = c.items
            out[f"{name}_count"] = c.count
        bad = [n for n in ("lost", "divergent", "unexpected", "duplicated") if out[f"{n}_count"]]
        if bad:
            out["valid"] = False
            out["error"] = ", ".join(f"{out[f'{n}_count']} {n}" for n in bad)
        elif not self.n_reads:
            out.update(valid=UNKNOWN, error="no read completed ok, so nothing was observed")
        elif final_log is None:
            out.update(valid=UNKNOWN, error="no final read completed ok, so losses cannot be ruled out")
        else:
            out["valid"] = True
        return dict(sorted(out.items(), key=lambda kv: kv[0] != "valid"))


class LogReadsChecker(StreamChecker):
    """Jepsen's ``checker/set-full`` for the log workload: every read (``read-range`` during the run,
    the final ``read`` per node) and every acknowledged ``log_index`` is an observation of an index.

    Per element (a workload value) *known* is its first observation (ack or read completion). Anomalies
    (each makes the result invalid): **divergent** (an index observed with two different entries:
    committed entries never change, Raft's Log Matching), **lost** (known, then absent from the final
    log at its index: a read of an uncommitted entry, or a committed one undone), **unexpected** (a value
    read that no client wrote, or whose append definitely failed), **duplicated** (one value at two
    indices). Reported, not invalid: **stale** (a read invoked >= 1 ms after the element was known
    ended below its index: GET is member-local, so followers lag), ``stable_latency_ms`` quantiles
    (0, 0.5, 0.95, 0.99, 1) of the time from known until no read missed it, **never-read** (known
    elements no ok read covered, plus attempted ones never observed). ``valid`` is ``"unknown"`` when
    no read, or no final read, completed ok. Lists hold the first 1000 of each kind, ``<kind>_count``
    the totals.
    """

    name = "log-reads"

    def __init__(self, append_f: str = "append", range_f: str = "read-range", final_f: str = "read"):
        self.append_f, self.range_f, self.final_f = append_f, range_f, final_f

    def begin(self, test: dict[str, object], opts: dict[str, object]) -> Accumulator:
        return _ReadsAcc(self.append_f, self.range_f, self.final_f)
