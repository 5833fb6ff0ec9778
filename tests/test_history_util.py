"""Helpers for the history tests: a small builder of hand-made histories (no tests here)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from chaos.history.op import Op
from chaos.history.store import write_history

MS = 1_000_000


class Builder:
    """Appends ops with increasing times (ms steps by default) and 0-based indexes."""

    def __init__(self) -> None:
        self.ops: list[Op] = []
        self.t = 0

    def op(
        self, type: str, process: int | str, f: str, value: Any = None, *, dt: int = MS, **fields: Any
    ) -> Op:
        self.t += dt
        node = fields.pop("node", None)
        error = fields.pop("error", None)
        key = fields.pop("key", None)
        op = Op(
            type,
            process,
            f,
            value,
            time=self.t,
            index=len(self.ops),
            node=node,
            error=error,
            key=key,
            extra=fields,
        )
        self.ops.append(op)
        return op

    def at(self, seconds: float) -> None:
        """Move the clock to ``seconds`` (must not go back)."""
        t = int(round(seconds * 1e9))
        assert t >= self.t, "time goes back"
        self.t = t

    def append(
        self, p: int, v: int, outcome: str = "ok", log_index: int | None = None, dt: int = MS
    ) -> tuple[Op, Op]:
        inv = self.op("invoke", p, "append", v)
        fields: dict[str, Any] = {} if log_index is None else {"log_index": log_index}
        return inv, self.op(outcome, p, "append", v, dt=dt, **fields)

    def read(self, p: int, node: str, entries: list[Any] | None, outcome: str = "ok") -> tuple[Op, Op]:
        inv = self.op("invoke", p, "read", None, node=node)
        return inv, self.op(outcome, p, "read", entries, node=node)

    def nemesis(self, f: str, value: Any = None, result: Any = None, dt: int = MS) -> tuple[Op, Op]:
        return self.op("info", "nemesis", f, value), self.op("info", "nemesis", f, result, dt=dt)

    def write(self, path: Path) -> Path:
        write_history(path, self.ops)
        return path
