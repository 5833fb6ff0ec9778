"""The nemesis protocol, the combinator, node targeting and the per-kind schedule.

Follows Jepsen's ``jepsen.nemesis`` (``Nemesis`` + ``Reflection/fs``, ``compose``) and
``jepsen.nemesis.combined`` (node specs, one flip-flop schedule per fault kind, staggered).

A nemesis op has ``process="nemesis"`` and ``type="info"`` on invocation and completion;
``f`` is ``start-<kind>`` or ``stop-<kind>``. The invocation value says what to do (a target
spec like ``"minority"`` or an exact fault such as a grudge, so a recorded fault can be replayed);
the completion value is the exact fault applied, as a JSON object, with ``applied`` (bool: did
the fault take effect?) and, when it did not, ``why`` (see :func:`outcome`).
"""

from __future__ import annotations

import logging
import random
import shlex
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from chaos.history.op import INFO, NEMESIS, Op

log = logging.getLogger("chaos.nemesis")

# State the tool leaves on nodes lives here (strobe pids, delayer pids); heal removes it.
STATE_DIR = "/var/run/chaos-nemesis"


class NemesisError(Exception):
    """A fault could not be injected or healed; the message names the node and the command."""


@runtime_checkable
class Nemesis(Protocol):
    """Jepsen's Nemesis protocol plus ``heal`` (idempotent, used on every exit path)."""

    def setup(self, test: Any) -> None: ...

    def invoke(self, test: Any, op: Op) -> Op: ...

    def teardown(self, test: Any) -> None: ...

    def heal(self, test: Any) -> None: ...

    def fs(self) -> set[str]: ...


def nemesis_op(f: str, value: Any = None) -> Op:
    """An invocation op for the nemesis process: ``Op(type="info", process="nemesis", f, value)``."""
    return Op(type=INFO, process=NEMESIS, f=f, value=value)


def complete(op: Op, value: Any, error: str | None = None) -> Op:
    """The info completion of a nemesis invocation with the exact fault as ``value``."""
    done = op.completion(INFO, value)
    if error is not None:
        done.error = error
    return done


def outcome(value: dict[str, Any], applied: bool, why: str | None = None) -> dict[str, Any]:
    """``value`` with the completion's verdict on the fault: ``applied`` (whether it took effect on
    at least one node, as requested) and, when it did not, ``why`` (one sentence)."""
    value["applied"] = bool(applied)
    if not applied:
        value["why"] = why or "the fault did not take effect"
    return value


def not_applied(op: Op, why: str, **value: Any) -> Op:
    """A completion for a fault that did not take effect: ``{..., "applied": false, "why": why}``."""
    return complete(op, outcome(dict(value), False, why))


# ---------------------------------------------------------------------------------------------
# Node targeting (jepsen.nemesis.combined/db-nodes)

TARGETS = ("one", "minority", "majority", "minority-third", "all", "leader", "primaries")


def node_names(test: Any) -> list[str]:
    """Names of the test's nodes, in order."""
    return [n.name for n in test.nodes]


def choose_nodes(test: Any, spec: Any, rng: random.Random | None = None) -> list[str]:
    """Resolve a node spec to node names (sorted).

    ``spec`` is one of :data:`TARGETS` or an explicit list of node names. ``leader`` and
    ``primaries`` ask the DB (``test.db.primaries(test.control)``); an empty answer gives ``[]``.
    Raises ValueError for an unknown spec or unknown node names.
    """
    rng = rng or test.rng
    names = node_names(test)
    n = len(names)
    if isinstance(spec, list | tuple):
        unknown = [x for x in spec if x not in names]
        if unknown:
            raise ValueError(f"node list {list(spec)!r}: unknown nodes {unknown}; expected some of {names}")
        return sorted(spec)
    shuffled = names[:]
    rng.shuffle(shuffled)
    if spec == "one":
        picked = shuffled[:1]
    elif spec == "minority":
        picked = shuffled[: rng.randint(1, max(1, (n - 1) // 2))]
    elif spec == "majority":
        picked = shuffled[: n // 2 + 1]
    elif spec == "minority-third":
        picked = shuffled[: max(1, (n - 1) // 3)]
    elif spec == "all":
        picked = names[:]
    elif spec in ("leader", "primaries"):
        primaries = list(test.db.primaries(test.control))
        picked = primaries[:1] if spec == "leader" else primaries
    else:
        raise ValueError(f"node spec {spec!r}: expected one of {', '.join(TARGETS)} or a list of node names")
    return sorted(picked)


# ---------------------------------------------------------------------------------------------
# Remote helpers


def sh(remote: Any, script: str, *, timeout: float = 60.0, check: bool = True) -> Any:
    """Run a shell script on a node as root (``Remote.exec_raw(..., sudo=True)``)."""
    return remote.exec_raw(script, sudo=True, timeout=timeout, check=check)


def quote(*words: str) -> str:
    return " ".join(shlex.quote(w) for w in words)


def on_nodes(test: Any, fn: Callable[[Any], Any], names: Iterable[str] | None = None) -> dict[str, Any]:
    """Run ``fn(remote)`` on the named nodes (all by default) in parallel; returns name -> result."""
    return dict(test.control.on_nodes(fn, list(names) if names is not None else None))


# ---------------------------------------------------------------------------------------------
# The combinator


class Compose:
    """Several nemeses as one: routes each op by ``f`` to the nemesis whose ``fs`` holds it.

    Follows ``jepsen.nemesis/compose``. ``setup``/``teardown``/``heal`` reach every part;
    ``heal`` runs all parts even if one fails and then raises the first error.
    Raises ValueError if two parts claim the same ``f``.
    """

    def __init__(self, nemeses: Sequence[Nemesis]) -> None:
        self.nemeses = list(nemeses)
        self.final_ops: list[dict[str, Any]] = []  # stop op of every kind, for the final phase
        self.schedules: list[Schedule] = []
        self.routes: dict[str, Nemesis] = {}
        for nem in self.nemeses:
            for f in nem.fs():
                if f in self.routes:
                    raise ValueError(f"nemesis op {f!r} is handled by two nemeses; combine them first")
                self.routes[f] = nem

    def setup(self, test: Any) -> None:
        for nem in self.nemeses:
            nem.setup(test)

    def invoke(self, test: Any, op: Op) -> Op:
        """Route ``op`` to its nemesis. Every completion value that is an object carries
        ``applied`` (the part's own verdict, else ``true`` unless the completion has an error); a
        part that raises gives ``{"applied": false, "why": "<error>", "request": op.value}`` with
        the op's ``error`` set, so a fault that failed is recorded as such, never as injected."""
        nem = self.routes.get(op.f)
        if nem is None:
            raise ValueError(
                f"nemesis op f={op.f!r}: no nemesis handles it; expected one of {sorted(self.routes)}"
            )
        try:
            done = nem.invoke(test, op)
        except Exception as e:
            why = f"{type(e).__name__}: {e}"
            log.warning("nemesis %s failed: %s", op.f, why)
            return complete(op, {"request": op.value, "applied": False, "why": why}, error=why)
        if isinstance(done, Op) and isinstance(done.value, dict) and "applied" not in done.value:
            outcome(done.value, done.error is None, done.error)
        return done

    def teardown(self, test: Any) -> None:
        for nem in self.nemeses:
            nem.teardown(test)

    def heal(self, test: Any) -> None:
        first: BaseException | None = None
        for nem in self.nemeses:
            try:
                nem.heal(test)
            except Exception as e:  # keep healing the rest
                log.warning("heal of %s failed: %s", type(nem).__name__, e)
                first = first or e
        if first is not None:
            raise first

    def fs(self) -> set[str]:
        return set(self.routes)


class NoState:
    """Base for nemeses whose faults leave nothing behind on the nodes (instantaneous ones, such as
    a restart or a leadership transfer): ``setup``, ``teardown`` and ``heal`` do nothing."""

    def setup(self, test: Any) -> None:
        pass

    def teardown(self, test: Any) -> None:
        pass

    def heal(self, test: Any) -> None:
        pass


class Noop(NoState):
    """A nemesis that does nothing (``--nemesis none``)."""

    def invoke(self, test: Any, op: Op) -> Op:
        return complete(op, None)

    def fs(self) -> set[str]:
        return set()


# ---------------------------------------------------------------------------------------------
# Schedules


@dataclass
class Schedule:
    """One fault kind's schedule: alternating start/stop ops, staggered (Jepsen's
    ``(->> (gen/flip-flop start stop) (gen/stagger interval))``).

    ``start`` and ``stop`` are functions of the generator context's seeded ``random.Random``
    returning the invocation value (a spec such as ``"majorities-ring"``; the nemesis resolves it
    to the exact fault, which its completion records). ``interval`` is the mean delay between ops
    in seconds (each gap uniform in ``[0, 2*interval]``).
    """

    kind: str
    start: Callable[[random.Random], Any]
    stop: Callable[[random.Random], Any]
    interval: float

    def start_op(self, rng: random.Random) -> dict[str, Any]:
        return {"f": f"start-{self.kind}", "value": self.start(rng)}

    def stop_op(self, rng: random.Random | None = None) -> dict[str, Any]:
        return {"f": f"stop-{self.kind}", "value": self.stop(rng or random.Random(0))}

    def generator(self, first_s: float | None = None) -> Any:
        """A ``chaos.control.generator`` generator for the nemesis thread (infinite; the runner
        bounds it with its time limit). The first start comes ``first_s`` seconds after the test
        starts (default: right away, as Jepsen's stagger does); later gaps are staggered."""
        from chaos.control import generator as gen

        flip = gen.flip_flop(
            lambda test, ctx: self.start_op(ctx.rng), lambda test, ctx: self.stop_op(ctx.rng)
        )
        if not first_s:
            return gen.stagger(self.interval, flip)
        return gen.Stagger(int(self.interval * gen.NS), flip, int(first_s * gen.NS))
