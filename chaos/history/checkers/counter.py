"""The counter checker (Jepsen's ``jepsen.checker/counter``).

A counter starts at 0; ``add`` ops add a non-negative integer ``value``, ``read`` ops return the
counter. Each ok read must lie between a lower bound, the sum of the ``ok`` adds completed before
the read was invoked, and an upper bound, the sum of the adds invoked before the read completed
that did not definitely fail (an add that is ``ok``, ``info`` or never completes may have counted;
a ``fail`` add did not). As in Jepsen, the bounds come from one pass in history order, looking
ahead only to the add's and the read's completion.

Result: ``valid`` (every read in bounds), ``read_count``, ``error_count``, ``errors`` (the out of
bounds reads, the first :data:`MAX_REPORTED`: ``{"lower", "value", "upper", "op"}`` with the read's
completion index and the distance outside, ``below`` / ``above``), ``reads`` (``[time_s, lower,
value, upper]``, the first :data:`MAX_POINTS`, for the report). A read of null counts as 0 (a
counter never written); a read that is no integer is an error. ``unknown`` when no read completed
ok. A negative add is bad input for the checker's model: ``unknown`` naming it.
"""

from __future__ import annotations

from collections.abc import Hashable
from pathlib import Path
from typing import Any

from chaos.history.op import FAIL, INVOKE, NEMESIS, OK, Op
from chaos.history.store import ParsedHistory, parsed
from chaos.history.verdict import UNKNOWN

MAX_REPORTED = 1000
MAX_POINTS = 20_000


class CounterChecker:
    """Jepsen's counter checker; see the module docstring."""

    name = "counter"
    reads_parsed = True  # the completions are looked up ahead

    def __init__(self, add_f: str = "add", read_f: str = "read") -> None:
        self.add_f, self.read_f = add_f, read_f

    def check(
        self, test: dict[str, object], history: Path | ParsedHistory, opts: dict[str, object]
    ) -> dict[str, object]:
        ops = [op for op in parsed(history).ops if op.process != NEMESIS]
        completion: dict[int, Any] = {}  # position of an invocation -> its completion
        open_: dict[Hashable, int] = {}
        for i, op in enumerate(ops):
            if op.type == INVOKE:
                open_[op.process] = i
            elif op.process in open_:
                completion[open_.pop(op.process)] = op
        lower = upper = 0
        pending: dict[Hashable, int] = {}
        reads: list[list[object]] = []
        errors: list[dict[str, object]] = []
        n_reads = n_errors = 0
        for i, op in enumerate(ops):
            if op.f == self.add_f:
                if op.type == INVOKE:
                    if not isinstance(op.value, int) or op.value < 0:
                        return {"valid": UNKNOWN, "error": f"add at op {op.index} of {op.value!r}: "
                                "the counter model takes non-negative integer adds"}  # fmt: skip
                    c = completion.get(i)
                    if c is None or c.type != FAIL:
                        upper += op.value
                elif op.type == OK:
                    lower += op.value if isinstance(op.value, int) else 0
            elif op.f == self.read_f:
                if op.type == INVOKE:
                    c = completion.get(i)
                    if c is not None and c.type == OK:
                        pending[op.process] = lower
                elif op.type == OK and op.process in pending:
                    lo = pending.pop(op.process)
                    n_reads += 1
                    v = 0 if op.value is None else op.value
                    if len(reads) < MAX_POINTS:
                        reads.append([round(op.time / 1e9, 3), lo, v, upper])
                    if not isinstance(v, int) or isinstance(v, bool) or not lo <= v <= upper:
                        n_errors += 1
                        if len(errors) < MAX_REPORTED:
                            errors.append(_error(lo, v, upper, op))
        out: dict[str, object] = {
            "valid": n_errors == 0,
            "read_count": n_reads,
            "error_count": n_errors,
            "errors": errors,
            "reads": reads,
            "final_bounds": [lower, upper],
        }
        if n_errors:
            out["error"] = f"{n_errors} of {n_reads} reads out of bounds"
        elif not n_reads:
            out.update(valid=UNKNOWN, error="no read completed ok")
        return out


def _error(lo: int, v: object, hi: int, op: Op) -> dict[str, object]:
    e: dict[str, object] = {"lower": lo, "value": v, "upper": hi, "op": op.index, "process": op.process}
    if op.node:
        e["node"] = op.node
    if isinstance(v, int):
        e["below" if v < lo else "above"] = lo - v if v < lo else v - hi
    else:
        e["why"] = "not an integer"
    return e
