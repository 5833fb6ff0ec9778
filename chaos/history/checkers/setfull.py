"""Jepsen's ``checker/set-full`` for a set workload: ``add`` ops of single elements and ``read`` ops
returning the whole set, judged element by element over every read (``jepsen.checker/set-full``).

Reads are placed in time by their *invocation* (history index); only ``ok`` reads count. Per
element (tracked from its add's invocation):

- **known**: the first completion among its ``ok`` add and the ok reads that contain it;
- **last-present** / **last-absent**: the latest-invoked ok read containing / lacking it;
- **stable**: read present, and last-present invoked after last-absent (or nothing lacked it);
- **lost**: known, and last-absent invoked after both last-present and the known point;
- **never-read**: neither (never known, or only reads concurrent with its add lacked it);
- **stale**: stable, with a stable latency > 0 ms: a read invoked at least 1 ms after it was known
  missed it. Stable latency = last-absent's invocation time + 1 ns (0 without one) - known time,
  lost latency = last-present's invocation time + 1 ns (0) - known time, in whole ms, floored at 0.

``valid`` is False when anything is lost, when an element occurs twice in one read (``duplicated``:
Jepsen's own duplicate test compares ``multiplicity < 1`` and never fires; this one counts > 1),
when a read holds an element no add was invoked for (``unexpected``; Jepsen leaves that to
``checker/set``), or, for a linearizable set (``linearizable=True``, checker ``set-full-linearizable``),
when anything is stale; else ``"unknown"`` when nothing is stable; else True. Fields: Jepsen's
``attempt_count``, ``stable_count``, ``lost`` / ``lost_count``, ``never_read`` /
``never_read_count``, ``stale`` / ``stale_count``, ``worst_stale`` (8), ``stable_latencies`` /
``lost_latencies`` (quantiles 0, 0.5, 0.95, 0.99, 1, ms), ``duplicated`` / ``duplicated_count``;
plus ``lost_timelines``: for each lost element (the first 1,000) its add, known, last-present and
last-absent ops ``{index, time_s, node}``, the timeline the report draws. Lists are capped at
:data:`~chaos.history.checkers.logcheck.MAX_REPORTED`; shares logcheck's quantiles and caps.
"""

from __future__ import annotations

from collections.abc import Hashable
from typing import Any

from chaos.history.checkers.logcheck import MAX_REPORTED, _hashable, _quantiles
from chaos.history.op import INVOKE, NEMESIS, OK, Op
from chaos.history.verdict import UNKNOWN, Accumulator, StreamChecker

_Point = tuple[int, int, object]  # (history index, time ns, node)


class _Element:
    __slots__ = ("add", "known", "present", "absent")

    def __init__(self, add: _Point) -> None:
        self.add = add
        self.known: _Point | None = None
        self.present: _Point | None = None
        self.absent: _Point | None = None


def _ms(ns: int) -> int:
    return int(max(0, ns) / 1e6)


def _point(p: _Point | None) -> dict[str, object] | None:
    if p is None:
        return None
    d: dict[str, object] = {"index": p[0], "time_s": round(p[1] / 1e9, 6)}
    if p[2]:
        d["node"] = p[2]
    return d


class _SetFullAcc:
    def __init__(self, add_f: str, read_f: str, linearizable: bool) -> None:
        self.add_f, self.read_f, self.linearizable = add_f, read_f, linearizable
        self.elements: dict[Any, _Element] = {}
        self.open: dict[Hashable, Op] = {}
        self.dups: dict[Hashable, int] = {}
        self.unexpected: dict[Hashable, int] = {}
        self.reads = 0

    def step(self, op: Op) -> None:
        if op.process == NEMESIS:
            return
        if op.type == INVOKE:
            self.open[op.process] = op
            if op.f == self.add_f:
                self.elements[_hashable(op.value)] = _Element((op.index, op.time, op.node))
            return
        inv = self.open.pop(op.process, None)
        if op.f == self.add_f:
            e = self.elements.get(_hashable(op.value))
            if e is not None and op.type == OK and e.known is None:
                e.known = (op.index, op.time, op.node)
            return
        if op.f != self.read_f or op.type != OK:
            return
        if not isinstance(op.value, list | tuple):
            raise ValueError(
                f"set read at op {op.index} must return a list of elements, got {op.value!r:.80}"
            )
        self.reads += 1
        seen: dict[Hashable, int] = {}
        for x in op.value:
            h = _hashable(x)
            seen[h] = seen.get(h, 0) + 1
        for x, c in seen.items():
            if c > 1:
                self.dups[x] = max(c, self.dups.get(x, 0))
            if x not in self.elements:
                self.unexpected.setdefault(x, op.index)
        i = inv if inv is not None else op
        at: _Point = (i.index, i.time, op.node or i.node)
        done: _Point = (op.index, op.time, op.node)
        for x, e in self.elements.items():
            if x in seen:
                if e.known is None:
                    e.known = done
                if e.present is None or e.present[0] < at[0]:
                    e.present = at
            elif e.absent is None or e.absent[0] < at[0]:
                e.absent = at

    def finish(self) -> dict[str, object]:
        stable, lost, never, stale = [], [], [], []
        stable_lat: list[float] = []
        lost_lat: list[float] = []
        timelines: list[dict[str, object]] = []
        for x, e in self.elements.items():
            p, a, k = e.present, e.absent, e.known
            if p is not None and (a is None or a[0] < p[0]):
                assert k is not None  # a read containing it made it known
                lat = _ms((a[1] + 1 if a else 0) - k[1])
                stable.append(x)
                stable_lat.append(lat)
                if lat > 0:
                    stale.append({"element": x, "stable_latency_ms": lat, "known": _point(k),
                                  "last_absent": _point(a)})  # fmt: skip
            elif k is not None and a is not None and (p is None or p[0] < a[0]) and k[0] < a[0]:
                lost.append(x)
                lost_lat.append(_ms((p[1] + 1 if p else 0) - k[1]))
                if len(timelines) < MAX_REPORTED:
                    timelines.append({"element": x, "add": _point(e.add), "known": _point(k),
                                      "last_present": _point(p), "last_absent": _point(a)})  # fmt: skip
            else:
                never.append(x)
        stale.sort(key=lambda d: -d["stable_latency_ms"])
        out: dict[str, object] = {
            "attempt_count": len(self.elements),
            "read_count": self.reads,
            "stable_count": len(stable),
            "lost_count": len(lost),
            "lost": sorted(lost, key=repr)[:MAX_REPORTED],
            "never_read_count": len(never),
            "never_read": sorted(never, key=repr)[:MAX_REPORTED],
            "stale_count": len(stale),
            "stale": sorted((d["element"] for d in stale), key=repr)[:MAX_REPORTED],
            "worst_stale": stale[:8],
            "duplicated_count": len(self.dups),
            "duplicated": [
                {"element": x, "multiplicity": c} for x, c in list(self.dups.items())[:MAX_REPORTED]
            ],
            "unexpected_count": len(self.unexpected),
            "unexpected": [{"element": x, "op": i} for x, i in list(self.unexpected.items())[:MAX_REPORTED]],
            "linearizable": self.linearizable,
            "lost_timelines": timelines,
        }
        if stable_lat:
            out["stable_latencies"] = _quantiles(stable_lat)
        if lost_lat:
            out["lost_latencies"] = _quantiles(lost_lat)
        bad = [n for n in ("lost", "duplicated", "unexpected") if out[f"{n}_count"]]
        if self.linearizable and stale:
            bad.append("stale")
        if bad:
            out["valid"] = False
            out["error"] = ", ".join(f"{out[f'{n}_count']} {n}" for n in bad)
        elif not stable:
            out.update(valid=UNKNOWN, error="no element is stable (nothing added, or never read)")
        else:
            out["valid"] = True
        return dict(sorted(out.items(), key=lambda kv: kv[0] != "valid"))


class SetFullChecker(StreamChecker):
    """Jepsen's ``set-full``; see the module docstring. ``linearizable``: stale reads are invalid."""

    name = "set-full"

    def __init__(self, linearizable: bool = False, add_f: str = "add", read_f: str = "read") -> None:
        self.linearizable, self.add_f, self.read_f = linearizable, add_f, read_f

    def begin(self, test: dict[str, object], opts: dict[str, object]) -> Accumulator:
        return _SetFullAcc(self.add_f, self.read_f, self.linearizable)


def linearizable() -> SetFullChecker:
    """The ``set-full-linearizable`` checker: :class:`SetFullChecker` for a linearizable set, where
    a stale read is invalid (Jepsen's ``set-full`` with ``:linearizable? true``)."""
    return SetFullChecker(linearizable=True)
