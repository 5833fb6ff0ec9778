"""The long-fork checker (Jepsen's ``jepsen.tests.long-fork/checker``).

Parallel snapshot isolation allows, and snapshot isolation forbids, a *long fork*: two write
transactions observed in conflicting orders. Ops are ``txn``: a **write** is one micro-op writing a
fresh key (``["w", k, v]`` or ``["append", k, v]``; each key is written at most once), a **read**
reads every key of one group (``["r", k, value]``, value null when unwritten). Two ok reads of the
same group are compared key by key: one *dominates* where it saw a write the other did not; they
**fork** when each dominates somewhere (T3 saw y and not x, T4 saw x and not y).

Result: ``valid`` (no fork), ``read_count``, ``group_count``, ``fork_count``, ``forks`` (the first
:data:`MAX_REPORTED` pairs: ``{"ops": [index, index], "reads": [{k: v}, {k: v}], "keys": the keys
each saw alone}``). Also invalid: **unexpected** reads (a key seen written that no write was
invoked for). ``unknown``, naming the cause, as Jepsen's illegal-history: a key written twice, a
read whose keys are not one group of the group size, two different values seen for one key, or
no ok read.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Hashable, Sequence
from typing import Any

from chaos.history.op import INVOKE, NEMESIS, OK, Op
from chaos.history.verdict import UNKNOWN, Accumulator, StreamChecker

MAX_REPORTED = 100
WRITES = ("w", "append")


def _hashable(v: object) -> object:
    return tuple(v) if isinstance(v, list) else v


def compare(a: dict[Hashable, object], b: dict[Hashable, object]) -> int | None:
    """-1 when read ``a`` dominates (saw every write ``b`` saw, and more), 1 when ``b`` does, 0 when
    equal, None when they fork (Jepsen's ``read-compare``). ValueError for two values of one key."""
    res = 0
    for k, va in a.items():
        vb = b[k]
        if va == vb:
            continue
        if va is not None and vb is not None:
            raise ValueError(f"key {k!r} read as {va!r} and as {vb!r}; each key is written once")
        side = -1 if vb is None else 1
        if res == -side:
            return None
        res = side
    return res


def is_read(mops: object) -> bool:
    return isinstance(mops, list) and bool(mops) and all(isinstance(m, list) and m[:1] == ["r"] for m in mops)


def write_key(mops: object) -> object:
    """The key of a write transaction (one ``w`` or ``append`` micro-op), else None."""
    if isinstance(mops, list) and len(mops) == 1 and isinstance(mops[0], list) and len(mops[0]) == 3:
        if mops[0][0] in WRITES:
            return _hashable(mops[0][1])
    return None


class _LongForkAcc:
    def __init__(self, group_size: int) -> None:
        self.n = group_size
        self.written: set[Hashable] = set()
        self.twice: Any = None
        self.groups: dict[tuple[object, ...], dict[tuple[object, ...], int]] = defaultdict(dict)
        self.reads = 0
        self.unexpected: list[dict[str, object]] = []
        self.bad_group: dict[str, object] | None = None

    def step(self, op: Op) -> None:
        if op.process == NEMESIS or op.f != "txn":
            return
        if op.type == INVOKE:
            k = write_key(op.value)
            if k is not None:
                if k in self.written and self.twice is None:
                    self.twice = {"key": k, "op": op.index}
                self.written.add(k)
            return
        if op.type != OK or not is_read(op.value):
            return
        self.reads += 1
        m = {_hashable(k): _hashable(v) for _, k, v in op.value}
        group = tuple(sorted(m, key=repr))
        if len(group) != self.n or len(m) != len(op.value):
            if self.bad_group is None:
                self.bad_group = {"op": op.index, "keys": list(group)}
            return
        for k, v in m.items():
            if v is not None and k not in self.written and len(self.unexpected) < MAX_REPORTED:
                self.unexpected.append({"op": op.index, "key": k, "value": v})
        state = tuple(m[k] for k in group)
        self.groups[group].setdefault(state, op.index)  # identical reads compare equal: keep one

    def finish(self) -> dict[str, object]:
        out: dict[str, object] = {"read_count": self.reads, "group_count": len(self.groups)}
        if self.twice is not None:
            return {**out, "valid": UNKNOWN, "error": f"key {self.twice['key']!r} written twice "
                    f"(op {self.twice['op']}): the checker needs each key written once"}  # fmt: skip
        if self.bad_group is not None:
            return {**out, "valid": UNKNOWN, "error": f"read at op {self.bad_group['op']} of keys "
                    f"{self.bad_group['keys']}: expected one group of {self.n} distinct keys"}  # fmt: skip
        forks: list[dict[str, object]] = []
        n_forks = 0
        try:
            for group, states in self.groups.items():
                n_forks += _forks(group, list(states.items()), forks)
        except ValueError as e:
            return {**out, "valid": UNKNOWN, "error": str(e)}
        out.update(
            valid=not n_forks and not self.unexpected,
            fork_count=n_forks,
            forks=forks,
            unexpected=self.unexpected,
            unexpected_count=len(self.unexpected),
        )
        if n_forks or self.unexpected:
            out["error"] = f"{n_forks} forked read pairs, {len(self.unexpected)} unexpected reads"
        elif not self.reads:
            out.update(valid=UNKNOWN, error="no read completed ok")
        return out


def _forks(
    group: Sequence[object], states: list[tuple[tuple[object, ...], int]], out: list[dict[str, object]]
) -> int:
    """Count the forking pairs among one group's distinct read states, listing some in ``out``."""
    n = 0
    for i, (sa, ia) in enumerate(states):
        a = dict(zip(group, sa, strict=True))
        for sb, ib in states[i + 1 :]:
            b = dict(zip(group, sb, strict=True))
            if compare(a, b) is not None:
                continue
            n += 1
            if len(out) < MAX_REPORTED:
                only_a = [k for k in group if a[k] is not None and b[k] is None]
                only_b = [k for k in group if b[k] is not None and a[k] is None]
                out.append({"ops": [ia, ib], "reads": [_show(a), _show(b)], "keys": [only_a, only_b]})
    return n


def _show(m: dict[Hashable, object]) -> dict[str, object]:
    return {str(k): (list(v) if isinstance(v, tuple) else v) for k, v in m.items()}


class LongForkChecker(StreamChecker):
    """Jepsen's long-fork checker; ``group_size`` keys per read (Jepsen's ``n``, default 2, taken
    from ``test["long_fork"]["group_size"]`` when the run recorded one)."""

    name = "long-fork"

    def __init__(self, group_size: int = 2) -> None:
        self.group_size = group_size

    def begin(self, test: dict[str, Any], opts: dict[str, object]) -> Accumulator:
        lf: dict[str, Any] = test["long_fork"] if isinstance(test.get("long_fork"), dict) else {}
        return _LongForkAcc(int(lf.get("group_size", self.group_size)))
