"""Clock faults through libfaketime's runtime-writable offset file (``jepsen.nemesis.time``, ``jepsen.faketime``).

The DB automation starts the server with ``LD_PRELOAD=libfaketime.so.1``,
``FAKETIME_TIMESTAMP_FILE=<offset file>`` and ``FAKETIME_NO_CACHE=1``, so rewriting the file moves the
server's wall clock at once, with no restart. The offset file holds a libfaketime relative offset
such as ``+12.345`` or ``-90`` (seconds); ``+0`` is no skew.

Monotonic timers: whether the server's ``CLOCK_MONOTONIC`` is skewed too is the DB automation's
choice (``FAKETIME_DONT_FAKE_MONOTONIC=1`` keeps it real). The nemesis only moves the offset; a bump
is a step of both clocks when monotonic is faked, which is exactly what Jepsen's ``bump-time`` does
to ``CLOCK_REALTIME`` alone. Raft's election and lease timers in our server use monotonic time, so
with the default (real monotonic) they keep working and only wall-clock reads are skewed.

Ops: ``start-clock`` value ``{"mode": "bump", "offsets_ms": {node: ms}}`` or
``{"mode": "strobe", "delta_ms": d, "period_ms": p, "nodes": [...]}`` (the schedule draws these;
a recorded value replays exactly). ``stop-clock`` resets every node to ``+0`` and completes with
``{"offsets_ms": {node: 0}}``.
"""

from __future__ import annotations

import math
import random
import shlex
from collections.abc import Sequence
from typing import Any

from chaos.history.op import Op
from chaos.nemesis.base import STATE_DIR, NemesisError, choose_nodes, complete, node_names, on_nodes, sh

OFFSET_FILE = "/var/run/dledger.faketime"
STROBE_PID = f"{STATE_DIR}/strobe.pid"
MODES = ("bump", "strobe")


def offset_file(test: Any) -> str:
    return str(getattr(test.db, "faketime_file", None) or OFFSET_FILE)


def fmt_offset(ms: float) -> str:
    """libfaketime relative offset for ``ms`` milliseconds: ``+1.500`` / ``-90.000``."""
    if not isinstance(ms, int | float) or math.isnan(ms) or math.isinf(ms):
        raise ValueError(f"clock offset {ms!r}: expected a finite number of milliseconds")
    return f"{'+' if ms >= 0 else '-'}{abs(ms) / 1000:.3f}"


def random_offset_ms(rng: random.Random, max_ms: float) -> int:
    """Log-uniform magnitude between 10 ms and ``max_ms`` with a random sign (Jepsen bumps span
    ~11 ms to ~288 s)."""
    mag = 10 ** rng.uniform(1, math.log10(max(max_ms, 11)))
    return int(mag) * rng.choice((1, -1))


def write_script(path: str, offset: str) -> str:
    """Atomically replace the offset file (rename), so the server never reads a half-written file."""
    return f"printf '%s\\n' '{offset}' > {path}.chaos-tmp && mv -f {path}.chaos-tmp {path}"


def strobe_script(path: str, delta_ms: float, period_ms: float, max_s: int = 3600) -> str:
    """Shell starting a background loop that flips the offset between ``delta`` and ``+0`` every
    ``period``; its pid goes to :data:`STROBE_PID`. The loop ends by itself after ``max_s``."""
    half = max(period_ms, 1) / 1000
    on = write_script(path, fmt_offset(delta_ms))
    off = write_script(path, "+0")
    loop = (
        f"end=$(( $(date +%s) + {max_s} )); "
        f'while [ "$(date +%s)" -lt "$end" ]; do {on}; sleep {half:.3f}; {off}; sleep {half:.3f}; done; {off}'
    )
    return (
        f"mkdir -p {STATE_DIR}; {stop_strobe_script()}; "
        f"setsid nohup sh -c {shlex.quote(loop)} >/dev/null 2>&1 </dev/null & echo $! > {STROBE_PID}"
    )


def stop_strobe_script() -> str:
    return f"if [ -f {STROBE_PID} ]; then kill $(cat {STROBE_PID}) 2>/dev/null; rm -f {STROBE_PID}; fi; true"


def reset_script(path: str) -> str:
    """Stop any strobe loop and set the offset to ``+0`` (only if the file exists or its directory
    does: the server may not be installed yet)."""
    return f"{stop_strobe_script()}; if [ -d $(dirname {path}) ]; then {write_script(path, '+0')}; fi"


class ClockNemesis:
    """``start-clock`` / ``stop-clock``: bump or strobe the server's wall clock on chosen nodes."""

    kind = "clock"

    def __init__(
        self,
        modes: Sequence[str] = MODES,
        max_offset_ms: float = 240_000,
        targets: Sequence[str] = ("one", "minority", "all"),
    ) -> None:
        if not modes or any(m not in MODES for m in modes):
            raise ValueError(f"clock modes {list(modes)!r}: expected some of {', '.join(MODES)}")
        if not max_offset_ms or max_offset_ms <= 0:
            raise ValueError(f"clock max offset {max_offset_ms!r} ms: expected a positive number")
        self.modes = list(modes)
        self.max_offset_ms = max_offset_ms
        self.targets = list(targets)

    def fs(self) -> set[str]:
        return {"start-clock", "stop-clock"}

    def setup(self, test: Any) -> None:
        self.heal(test)

    def teardown(self, test: Any) -> None:
        self.heal(test)

    def heal(self, test: Any) -> None:
        path = offset_file(test)
        on_nodes(test, lambda r: sh(r, reset_script(path)))

    def draw(self, test: Any) -> dict[str, Any]:
        """A random fault value (what the schedule asks for when the invocation value is None)."""
        rng = test.rng
        nodes = choose_nodes(test, rng.choice(self.targets))
        if rng.choice(self.modes) == "bump":
            return {
                "mode": "bump",
                "offsets_ms": {n: random_offset_ms(rng, self.max_offset_ms) for n in nodes},
            }
        return {
            "mode": "strobe",
            "nodes": nodes,
            "delta_ms": random_offset_ms(rng, self.max_offset_ms),
            "period_ms": int(10 ** rng.uniform(1, 3)),
        }

    def invoke(self, test: Any, op: Op) -> Op:
        path = offset_file(test)
        if op.f == "stop-clock":
            self.heal(test)
            return complete(op, {"offsets_ms": {n: 0 for n in node_names(test)}})
        if op.f != "start-clock":
            raise ValueError(f"clock nemesis: unexpected f {op.f!r}")
        value = op.value if isinstance(op.value, dict) else self.draw(test)
        mode = value.get("mode")
        if mode == "bump":
            offsets = value.get("offsets_ms")
            if not isinstance(offsets, dict):
                raise ValueError(f"clock bump {value!r}: expected offsets_ms {{node: ms}}")
            scripts = {n: write_script(path, fmt_offset(ms)) for n, ms in offsets.items()}
        elif mode == "strobe":
            d, p = value.get("delta_ms"), value.get("period_ms")
            if not isinstance(d, int | float) or not isinstance(p, int | float) or p <= 0:
                raise ValueError(f"clock strobe {value!r}: expected numeric delta_ms and positive period_ms")
            scripts = {n: strobe_script(path, d, p) for n in value.get("nodes", [])}
        else:
            raise ValueError(f"clock value {value!r}: expected mode 'bump' or 'strobe'")

        def one(remote: Any) -> None:
            res = sh(remote, scripts[remote.node.name], check=False)
            if res.exit_code != 0:
                raise NemesisError(f"clock on {remote.node.name}: {res.stderr.strip()}")

        on_nodes(test, one, scripts)
        return complete(op, value)
