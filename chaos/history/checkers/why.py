"""One sentence of why a register's counterexample fails, in the ops' own terms.

The linearizability search says *that* no order explains a key's history; a person wants to know
*why*, as Knossos's and porcupine's users read it off the diagram: "read 1, but write(2) by
process 3 completed at 23.10 s, before this read began at 23.18 s, after every write of 1 had
completed". :func:`register_why` finds such a witness when there is one:

- a read (or an applied cas) that needs the register to hold ``x``, where no op ever wrote ``x``;
- or a completed write of another value that began after every write of ``x`` had completed and
  completed before the failing op began: in every linearization it comes after all of them and
  before the failing op, so the register cannot hold ``x`` there.

Both are sound (each sentence is true of every linearization); when neither holds, the failure
needs several ops to explain and :func:`register_why` says so with the state the longest
linearizable prefix reached. The witness follows the real-time order of Herlihy & Wing (1990): an
op that completed before another began precedes it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from chaos.history.checkers.models import UNKNOWN, Call

# f names meaning a write of their value, a write of nothing (a delete), a read, a compare-and-set
_WRITES = ("write", "put")
_DELETES = ("delete", "del")
_READS = ("read", "get")
_NS = 1e9


def _text(v: Any) -> str:
    return "nil" if v is None else repr(v) if isinstance(v, str) else str(v)


def _writes(c: Call) -> tuple[bool, Any]:
    """(True, the value) when ``c`` may have written a value; (False, None) otherwise."""
    if c.f in _WRITES:
        return True, c.value
    if c.f in _DELETES:
        return True, None
    if c.f == "cas" and isinstance(c.value, list | tuple) and len(c.value) == 2 and c.output is not False:
        return True, c.value[1]
    return False, None


def _needs(c: Call) -> tuple[bool, Any]:
    """(True, the value the register must hold for ``c`` to be legal) for reads and applied cas."""
    if c.f in _READS and c.output is not UNKNOWN:
        return True, c.output
    if c.f == "cas" and c.output is True and isinstance(c.value, list | tuple) and len(c.value) == 2:
        return True, c.value[0]
    return False, None


def _as_written(c: Call) -> str:
    if c.f == "cas":
        return f"cas({_text(c.value[0])}, {_text(c.value[1])})"
    if c.f in _DELETES:
        return c.f
    return f"{c.f}({_text(c.value)})"


def _what(c: Call) -> str:
    if c.f in _READS:
        return f"read {_text(c.output)}"
    if c.f == "cas":
        return f"cas {_text(c.value[0])}→{_text(c.value[1])} succeeded"
    return c.f


def register_why(calls: Sequence[Call], failing: int | None, failing_state: str, initial: Any) -> str:
    """One sentence explaining why op ``failing`` (an id into ``calls``) cannot be placed.

    ``calls``: the key's calls (times in ns since the test start, ``ret`` None for crashed ops);
    ``failing_state``: the model's description of the state before it in the longest linearizable
    prefix; ``initial``: the register's initial value. Returns a sentence ending with a full stop.
    """
    if failing is None or not 0 <= failing < len(calls):
        return "No single op is to blame: no order of these ops is linearizable."
    op = calls[failing]
    needs, x = _needs(op)
    if not needs:
        return (
            f"{op.describe()} by process {op.process} cannot follow any order of the ops before it; "
            f"the longest linearizable prefix leaves the register at {failing_state}."
        )
    writers = [c for c in calls if c.id != op.id and _writes(c)[0] and _writes(c)[1] == x]
    began = f"{op.call / _NS:.2f} s"
    if not writers and x != initial:
        return f"{_what(op)} (process {op.process}, began at {began}), but no op ever wrote {_text(x)}."
    last_x = max((c.ret for c in writers if c.ret is not None), default=None)
    if all(c.ret is not None for c in writers):
        witnesses = [
            c
            for c in calls
            if c.id != op.id
            and c.ret is not None
            and c.ret < op.call
            and (c.f in _WRITES or c.f in _DELETES or (c.f == "cas" and c.output is True))
            and _writes(c)[1] != x
            and (last_x is None or c.call > last_x)
        ]
        if witnesses:
            w = max(witnesses, key=lambda c: c.ret or 0)
            after = (
                f"after every write of {_text(x)} had completed (the last at {last_x / _NS:.2f} s)"
                if last_x is not None
                else f"and no op wrote {_text(x)}"
            )
            return (
                f"{_what(op)} (process {op.process}), but {_as_written(w)} by process {w.process} completed "
                f"at {(w.ret or 0) / _NS:.2f} s, before this op began at {began}, {after}."
            )
    return (
        f"{_what(op)} (process {op.process}, began at {began}), but no order of the ops lets the register "
        f"hold {_text(x)} when it takes effect; the longest linearizable order leaves it at {failing_state}."
    )
