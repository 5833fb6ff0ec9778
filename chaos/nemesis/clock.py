"""Clock faults on the server's monotonic clock through libfaketime (``jepsen.nemesis.time``,
``jepsen.faketime``).

A Raft server's elections, heartbeats and leases run on ``CLOCK_MONOTONIC``. A DB with the
``clock`` capability (:class:`chaos.control.db.Clock`: ``faketime_file`` and ``pidfile``) starts
the server with ``LD_PRELOAD=libfaketime.so.1``, ``FAKETIME_TIMESTAMP_FILE=<spec file>`` and
``FAKETIME_NO_CACHE=1`` and with the monotonic clock faked (no ``FAKETIME_DONT_FAKE_MONOTONIC``):
rewriting the file moves the running server's monotonic and wall clocks at once. The file holds a
libfaketime spec ``"<offset s> x<rate>"`` such as ``+12.500000 x0.8``.

libfaketime 0.9.10 computes ``fake(t) = t + offset + (rate - 1) * (t - s)`` with ``s`` the process
start, so a rate change alone would jump the clock by the rate difference times the process age
(``FAKETIME_XRESET`` is no help: it loses offsets). Every rewrite here is done on the node by
:func:`spec_update_script`, which reads the server's start from ``/proc/<pid>/stat`` and moves the
offset so the clock stays continuous (to within a clock tick times the rate change, ~10-20 ms).
A kernel never steps ``CLOCK_MONOTONIC`` back and the server may rely on that, so the faults keep it
monotonic: bumps are forward steps, a slow clock is a rate below 1, and the stop / heal of a run
sets the rate back to 1 without undoing an offset (:func:`reset_script` writes ``+0`` only in
the nemesis teardown, after the final phase, and in ``chaos heal``). A restarted server starts at the file's offset.

Ops (the schedule draws a value; a recorded value replays exactly):

- ``start-clock`` ``{"mode": "bump", "offsets_ms": {node: ms > 0}}``: step forward;
- ``start-clock`` ``{"mode": "rate", "rates": {node: r}}``: run at ``r`` times real time (drift);
- ``start-clock`` ``{"mode": "strobe", "nodes": [...], "rate": r, "period_ms": p}``: a node-side
  loop flips the rate between ``r`` and ``1/r`` every ``p`` ms;
- ``stop-clock``: every node back to rate 1.

The completion carries the invocation's fields plus ``specs`` (``{node: spec written}``, read back
from the node) and ``clock: "monotonic+realtime"``, so the history records what the server's
clocks were set to.
"""

from __future__ import annotations

import math
import random
import shlex
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from chaos.control.db import capabilities
from chaos.control.test import Test
from chaos.history.op import Op
from chaos.nemesis.base import (
    STATE_DIR,
    NemesisError,
    NemesisKind,
    Part,
    choose_nodes,
    complete,
    node_names,
    on_nodes,
    outcome,
    sh,
)
from chaos.nemesis.partition import PartitionNemesis, apply_grudge, isolate

if TYPE_CHECKING:
    from chaos.control.ssh import Remote

STROBE_PID = f"{STATE_DIR}/strobe.pid"
MODES = ("bump", "rate", "strobe")
CLOCKS = "monotonic+realtime"


def offset_file(test: Test) -> str:
    """The DB's libfaketime offset file (the ``clock`` capability); NemesisError without one."""
    path = getattr(test.db, "faketime_file", None)
    if not path:
        raise NemesisError("the DB has no clock capability (no faketime_file): clock faults need it")
    return str(path)


def server_pidfile(test: Test) -> str:
    """The DB's server pidfile (the ``clock`` capability); NemesisError without one."""
    path = getattr(test.db, "pidfile", None)
    if not path:
        raise NemesisError("the DB has no clock capability (no pidfile): clock faults need it")
    return str(path)


def fmt_offset(ms: float) -> str:
    """libfaketime relative offset for ``ms`` milliseconds: ``+1.500`` / ``-90.000``."""
    if not isinstance(ms, int | float) or math.isnan(ms) or math.isinf(ms):
        raise ValueError(f"clock offset {ms!r}: expected a finite number of milliseconds")
    return f"{'+' if ms >= 0 else '-'}{abs(ms) / 1000:.3f}"


def parse_spec(spec: str) -> tuple[float, float]:
    """``(offset seconds, rate)`` of a spec file's text (``"+1.5 x2"``, ``"+0"``); ValueError otherwise."""
    words = spec.split()
    if not words:
        raise ValueError(f"faketime spec {spec!r}: expected '<offset s> [x<rate>]'")
    try:
        offset = float(words[0])
        rate = 1.0
        for w in words[1:]:
            if w.startswith("x"):
                rate = float(w[1:])
    except ValueError:
        raise ValueError(f"faketime spec {spec!r}: expected '<offset s> [x<rate>]'") from None
    return offset, rate


def random_offset_ms(rng: random.Random, max_ms: float) -> int:
    """Log-uniform magnitude between 10 ms and ``max_ms`` (Jepsen bumps span ~11 ms to ~288 s);
    always forward, see the module docstring."""
    return int(10 ** rng.uniform(1, math.log10(max(max_ms, 11))))


def random_rate(rng: random.Random, max_rate: float) -> float:
    """A rate log-uniform in ``[1/max_rate, max_rate]``, rounded to 3 decimals."""
    return round(math.exp(rng.uniform(-1, 1) * math.log(max_rate)), 3)


# awk program: the continuity-preserving new spec. Inputs: the current spec on stdin, up (node
# uptime, s), st (server start in clock ticks, empty when no server runs), hz, bump (s), rn (new
# rate, empty = keep), margin (s). fake(t) = t + o + (r-1)(t-s) stays continuous when
# o' = o + (r-r')(t-s); t-s is only known to a clock tick and the file is written a few ms after
# uptime was read, so |r-r'| * margin is added: the error becomes a small forward step, never a
# step back.
AGE_MARGIN_S = 0.04
_AWK = r"""{ o = $1 + 0; r = 1
  for (i = 2; i <= NF; i++) if ($i ~ /^x/) r = substr($i, 2) + 0
  if (rn == "") rn = r
  e = (st == "") ? 0 : up - st / hz
  d = r - rn; if (d < 0) d = -d
  o = o + (r - rn) * e + bump + d * margin
  printf "%+.6f x%s\n", o, rn }"""


def spec_update_script(path: str, pidfile: str, bump_s: float = 0.0, rate: float | None = None) -> str:
    """Shell that rewrites ``path`` atomically (rename): offset + ``bump_s``, rate ``rate`` (None:
    keep), compensating the rate change for the server's age so its clock does not jump; prints
    the new spec."""
    if not math.isfinite(bump_s) or (rate is not None and not (math.isfinite(rate) and rate > 0)):
        raise ValueError(f"clock bump {bump_s!r} s / rate {rate!r}: expected finite numbers, rate > 0")
    rn = "" if rate is None else f"{rate:g}"
    return (
        f"cur=$(cat {path} 2>/dev/null || echo +0); "
        f"p=$(cat {pidfile} 2>/dev/null); st=; "
        f'[ -n "$p" ] && st=$(sed "s/.*) //" /proc/$p/stat 2>/dev/null | cut -d" " -f20); '
        f"up=$(cut -d' ' -f1 /proc/uptime); hz=$(getconf CLK_TCK); "
        f'new=$(echo "$cur" | awk -v up="$up" -v st="$st" -v hz="$hz" -v bump={bump_s!r} -v rn="{rn}" -v margin={AGE_MARGIN_S} '
        f"{shlex.quote(_AWK)}); "
        f'printf \'%s\\n\' "$new" > {path}.chaos-tmp && mv -f {path}.chaos-tmp {path} && echo "$new"'
    )


def strobe_script(path: str, pidfile: str, rate: float, period_ms: float, max_s: int = 3600) -> str:
    """Shell starting a background loop that flips the rate between ``rate`` and ``1/rate`` every
    ``period_ms`` (continuity-preserving); its pid goes to :data:`STROBE_PID`. The loop ends by itself
    after ``max_s``, at rate 1."""
    half = max(period_ms, 1) / 1000
    fast = spec_update_script(path, pidfile, 0.0, rate)
    slow = spec_update_script(path, pidfile, 0.0, 1 / rate)
    one = spec_update_script(path, pidfile, 0.0, 1.0)
    loop = (
        f"end=$(( $(date +%s) + {max_s} )); "
        f'while [ "$(date +%s)" -lt "$end" ]; do sleep {half:.3f}; {slow} >/dev/null; '
        f"sleep {half:.3f}; {fast} >/dev/null; done; {one}"
    )
    # the first flip runs before the loop starts, so the completion records the spec in force
    return (
        f"mkdir -p {STATE_DIR}; {stop_strobe_script()}; {fast}; "
        f"setsid nohup sh -c {shlex.quote(loop)} >/dev/null 2>&1 </dev/null & echo $! > {STROBE_PID}"
    )


def stop_strobe_script() -> str:
    return f"if [ -f {STROBE_PID} ]; then kill $(cat {STROBE_PID}) 2>/dev/null; rm -f {STROBE_PID}; fi; true"


def write_script(path: str, spec: str) -> str:
    """Atomically replace the spec file with ``spec`` (rename)."""
    return f"printf '%s\\n' '{spec}' > {path}.chaos-tmp && mv -f {path}.chaos-tmp {path}"


def reset_script(path: str) -> str:
    """Between runs (``chaos heal``): stop any strobe loop and write ``+0`` (real time; a running
    server's clock may step back), only if the file or its directory exists."""
    return f"{stop_strobe_script()}; if [ -d $(dirname {path}) ]; then {write_script(path, '+0')}; fi"


def soft_reset_script(path: str, pidfile: str) -> str:
    """Within a run: stop any strobe loop and set the rate to 1, keeping the clock continuous."""
    return (
        f"{stop_strobe_script()}; if [ -f {path} ]; then {spec_update_script(path, pidfile, 0.0, 1.0)}; "
        f"else echo +0; fi"
    )


class ClockNemesis:
    """``start-clock`` / ``stop-clock``: bump, drift or strobe the server's monotonic clock.

    ``targets``: node specs drawn from (``chaos.nemesis.base.choose_nodes``; ``leader`` is the
    moment leases care about). ``max_rate``: drift rates are drawn in ``[1/max_rate, max_rate]``;
    the default 1.2 keeps any two clocks within a ratio of 1.44, inside the 1.5 the server's lease
    tolerates (``lease_ms / (lease_ms - heartbeat_ms)``), so a correct server stays valid with
    ``--read-mode lease``; larger rates break the lease's assumption by design.
    """

    kind = "clock"

    def __init__(
        self,
        modes: Sequence[str] = MODES,
        max_offset_ms: float = 240_000,
        targets: Sequence[str] = ("one", "minority", "leader", "all"),
        max_rate: float = 1.2,
    ) -> None:
        modes = ["rate" if m == "skew" else m for m in modes]
        if not modes or any(m not in MODES for m in modes):
            raise ValueError(f"clock modes {list(modes)!r}: expected some of {', '.join(MODES)}")
        if not max_offset_ms or max_offset_ms <= 0:
            raise ValueError(f"clock max offset {max_offset_ms!r} ms: expected a positive number")
        if not (isinstance(max_rate, int | float) and 1 < max_rate <= 100):
            raise ValueError(f"clock max rate {max_rate!r}: expected a number in (1, 100]")
        self.modes = list(modes)
        self.max_offset_ms = max_offset_ms
        self.max_rate = float(max_rate)
        self.targets = list(targets)

    def fs(self) -> set[str]:
        return {"start-clock", "stop-clock"}

    def setup(self, test: Test) -> None:
        self.heal(test)

    def teardown(self, test: Test) -> None:
        """After the final phase (the runner tears the nemesis down last): real time again (``+0``),
        so no offset outlives the run; a server left running may see its clock step back."""
        path = offset_file(test)
        on_nodes(test, lambda r: sh(r, reset_script(path)))

    def heal(self, test: Test) -> None:
        path, pidfile = offset_file(test), server_pidfile(test)
        on_nodes(test, lambda r: sh(r, soft_reset_script(path, pidfile)))

    def draw(self, test: Test) -> dict[str, object]:
        """A random fault value (what the schedule asks for when the invocation value is None)."""
        rng = test.rng
        note: dict[str, object] = {}  # how a leader target chose among several primaries
        nodes = choose_nodes(test, rng.choice(self.targets), note=note)
        mode = rng.choice(self.modes)
        if mode == "bump":
            return {
                "mode": "bump",
                "offsets_ms": {n: random_offset_ms(rng, self.max_offset_ms) for n in nodes},
                **note,
            }
        if mode == "rate":
            return {"mode": "rate", "rates": {n: random_rate(rng, self.max_rate) for n in nodes}, **note}
        rate = random_rate(rng, self.max_rate)
        return {
            "mode": "strobe",
            "nodes": nodes,
            "rate": rate if rate != 1 else self.max_rate,
            "period_ms": int(10 ** rng.uniform(1, 3)),
            **note,
        }

    def scripts(self, test: Test, value: Any) -> dict[str, str]:
        """``{node: shell}`` for a ``start-clock`` value; ValueError for a malformed value."""
        path, pidfile = offset_file(test), server_pidfile(test)
        mode = value.get("mode") if isinstance(value, dict) else None
        if mode == "bump":
            offsets = value.get("offsets_ms")
            if not isinstance(offsets, dict) or not all(
                isinstance(ms, int | float) and math.isfinite(ms) and ms >= 0 for ms in offsets.values()
            ):
                raise ValueError(
                    f"clock bump {value!r}: expected offsets_ms {{node: ms >= 0}} (forward only)"
                )
            return {n: spec_update_script(path, pidfile, ms / 1000, None) for n, ms in offsets.items()}
        if mode == "rate":
            rates = value.get("rates")
            if not isinstance(rates, dict) or not all(
                isinstance(r, int | float) and math.isfinite(r) and r > 0 for r in rates.values()
            ):
                raise ValueError(f"clock rate {value!r}: expected rates {{node: rate > 0}}")
            return {n: spec_update_script(path, pidfile, 0.0, float(r)) for n, r in rates.items()}
        if mode == "strobe":
            r, p = value.get("rate"), value.get("period_ms")
            if not isinstance(r, int | float) or r <= 0 or not isinstance(p, int | float) or p <= 0:
                raise ValueError(f"clock strobe {value!r}: expected a positive rate and period_ms")
            return {n: strobe_script(path, pidfile, float(r), p) for n in value.get("nodes", [])}
        raise ValueError(f"clock value {value!r}: expected mode 'bump', 'rate' or 'strobe'")

    def invoke(self, test: Test, op: Op) -> Op:
        path, pidfile = offset_file(test), server_pidfile(test)
        if op.f == "stop-clock":
            specs = on_nodes(test, lambda r: sh(r, soft_reset_script(path, pidfile)).stdout.strip())
            return complete(op, {"rates": {n: 1 for n in node_names(test)}, "specs": specs, "clock": CLOCKS})
        if op.f != "start-clock":
            raise ValueError(f"clock nemesis: unexpected f {op.f!r}")
        value = op.value if isinstance(op.value, dict) else self.draw(test)
        scripts = self.scripts(test, value)

        def one(remote: Remote) -> str:
            res = sh(remote, scripts[remote.node.name], check=False)
            if res.exit_code != 0:
                raise NemesisError(f"clock on {remote.node.name}: {res.stderr.strip()}")
            return str(res.stdout.strip().splitlines()[-1]) if res.stdout.strip() else ""

        specs = on_nodes(test, one, scripts) if scripts else {}
        done = {**value, "nodes": sorted(specs), "specs": specs, "clock": CLOCKS}
        return complete(op, outcome(done, bool(specs), "no node chosen (e.g. target leader, no leader)"))


class SlowLeaderNemesis:
    """``start-slow-leader`` / ``stop-slow-leader``: slow the leader's monotonic clock to ``rate``
    and, at the same moment, isolate it (``jepsen.nemesis.combined`` composes clock and partition
    faults; this is the composition a lease depends on). With ``rate`` well below the drift the
    lease tolerates, a leader serving ``--read-mode lease`` reads keeps its lease long after the
    majority elected another leader and committed writes: the register workload's sticky
    processes on it see stale values (Raft thesis section 6.4.1: leases assume bounded drift).

    The clock is slowed first and the leader cut off right after: cut first (or both at once), the
    leader's lease can run out on its real clock in the ssh round trip the slowdown takes, and it
    steps down before the window opens. Start value ``{"rate": r}`` (default ``rate``) completes with
    ``{"rate", "leader", "grudge", "specs", "nodes", "applied"}`` (not applied without a leader);
    stop heals the partition and sets the rate back to 1 (no step back).
    """

    kind = "slow-leader"

    def __init__(self, rate: float = 0.02) -> None:
        if not (isinstance(rate, int | float) and 0 < rate < 1):
            raise ValueError(f"slow-leader rate {rate!r}: expected a number in (0, 1)")
        self.rate = float(rate)
        self.clock = ClockNemesis(modes=("rate",))

    def fs(self) -> set[str]:
        return {"start-slow-leader", "stop-slow-leader"}

    def setup(self, test: Test) -> None:
        self.heal(test)

    def teardown(self, test: Test) -> None:

        PartitionNemesis().heal(test)
        self.clock.teardown(test)

    def heal(self, test: Test) -> None:

        PartitionNemesis().heal(test)
        self.clock.heal(test)

    def invoke(self, test: Test, op: Op) -> Op:

        if op.f == "stop-slow-leader":
            self.heal(test)
            return complete(op, outcome({"healed": node_names(test), "rate": 1}, True))
        if op.f != "start-slow-leader":
            raise ValueError(f"slow-leader nemesis: unexpected f {op.f!r}")
        rate = op.value.get("rate", self.rate) if isinstance(op.value, dict) else self.rate
        note: dict[str, object] = {}
        leaders = choose_nodes(test, "leader", note=note)
        if not leaders:
            return complete(op, outcome({"rate": rate, "nodes": []}, False, "no leader to slow and isolate"))
        # several leaders of unknown terms (leader_choice): each is slowed and cut off on its own
        grudge = isolate(node_names(test), leaders)
        path, pidfile = offset_file(test), server_pidfile(test)
        slow = spec_update_script(path, pidfile, 0.0, rate)
        specs = on_nodes(test, lambda r: str(sh(r, slow).stdout.strip()), leaders)
        apply_grudge(test, grudge)
        done: dict[str, object] = {"rate": rate, "nodes": leaders, "grudge": grudge, **note}
        if len(leaders) == 1:
            done["leader"] = leaders[0]
        done.update(specs=specs, clock=CLOCKS)
        return complete(op, outcome(done, True))


# ---------------------------------------------------------------------------------------------
# The descriptor (chaos.nemesis)


def _opt(opts: Mapping[str, object], key: str, default: Any) -> Any:
    v = opts.get(key)
    return default if v is None else v


def _build(chosen: Sequence[str], opts: Mapping[str, object]) -> list[Part]:
    """clock-skew (``clock_modes``, ``clock_max_offset_ms``, ``clock_max_rate``) and
    clock-slow-leader (``slow_leader_rate``); each start value is drawn by the nemesis."""
    parts: list[Part] = []
    if "clock-skew" in chosen:
        clock = ClockNemesis(
            modes=list(_opt(opts, "clock_modes", ["bump", "rate", "strobe"])),
            max_offset_ms=float(_opt(opts, "clock_max_offset_ms", 240_000)),
            max_rate=float(_opt(opts, "clock_max_rate", 1.2)),
        )
        parts.append((clock, _none, _none))
    if "clock-slow-leader" in chosen:
        parts.append((SlowLeaderNemesis(rate=float(_opt(opts, "slow_leader_rate", 0.02))), _none, _none))
    return parts


def _none(rng: random.Random) -> None:
    return None


def _offset_file(db: object) -> str | None:

    return str(getattr(db, "faketime_file", None)) if "clock" in capabilities(db) else None


def _heal(remote: Remote, db: object) -> list[str]:
    """Stop the strobe loop; with the DB's ``clock`` capability write ``+0`` into its offset file."""
    path = _offset_file(db)
    sh(remote, reset_script(path) if path else stop_strobe_script(), check=False)
    return []


def _residue(remote: Remote, db: object) -> list[str]:
    script = f'[ -f {STROBE_PID} ] && kill -0 $(cat {STROBE_PID}) 2>/dev/null && echo "running strobe loop"; '
    path = _offset_file(db)
    if path:
        f = shlex.quote(path)
        script += (
            f"if [ -f {f} ]; then o=$(tr -d ' \\n' < {f}); case \"$o\" in ''|+0|-0|0|+0.000) ;; "
            '*) echo "clock offset $o";; esac; fi; '
        )
    return str(sh(remote, script + "true", check=False).stdout).splitlines()


NEMESIS = NemesisKind(
    names={
        "clock-skew": "bump, drift or strobe the server's monotonic clock (libfaketime, continuous)",
        "clock-slow-leader": "slow the leader's monotonic clock (x0.02) and isolate it at once (lease reads)",
    },
    build=_build,
    requires={"clock-skew": frozenset({"clock"}), "clock-slow-leader": frozenset({"clock", "primary"})},
    options={
        "clock_modes": "list",
        "clock_max_offset_ms": "number",
        "clock_max_rate": "number",
        "slow_leader_rate": "number",
    },
    heal=_heal,
    residue=_residue,
    colours={"clock": "#3182bd", "slow-leader": "#6baed6"},
    verbs={
        "clock": {"start": "[{nodes} ]clock skewed", "stop": "clocks reset"},
        "slow-leader": {"start": "{nodes} slowed and isolated", "stop": "slow leader healed"},
    },
)
"""The clock fault module (``chaos.nemeses`` entry point ``clock``)."""
