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
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from chaos.control import generator as gen
from chaos.control.db import db_name
from chaos.control.test import Nemesis as Nemesis  # re-exported: chaos.api, chaos.nemesis
from chaos.control.test import Test
from chaos.history.op import INFO, NEMESIS, Op

if TYPE_CHECKING:
    from chaos.control.ssh import Remote

log = logging.getLogger("chaos.nemesis")

# State the tool leaves on nodes lives here (strobe pids, delayer pids); heal removes it.
STATE_DIR = "/var/run/chaos-nemesis"


class NemesisError(Exception):
    """A fault could not be injected or healed; the message names the node and the command."""


def nemesis_op(f: str, value: object = None) -> Op:
    """An invocation op for the nemesis process: ``Op(type="info", process="nemesis", f, value)``."""
    return Op(type=INFO, process=NEMESIS, f=f, value=value)


def complete(op: Op, value: object, error: str | None = None) -> Op:
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


def not_applied(op: Op, why: str, **value: object) -> Op:
    """A completion for a fault that did not take effect: ``{..., "applied": false, "why": why}``."""
    return complete(op, outcome(dict(value), False, why))


# ---------------------------------------------------------------------------------------------
# Node targeting (jepsen.nemesis.combined/db-nodes)

TARGETS = ("one", "minority", "majority", "minority-third", "all", "leader", "primaries")


def node_names(test: Test) -> list[str]:
    """Names of the test's nodes, in order."""
    return [n.name for n in test.nodes]


def primaries(test: Test) -> list[str]:
    """The nodes the DB names as primaries (its ``primary`` capability, :class:`chaos.control.db.Primary`);
    ValueError when the DB has no such capability (``chaos run`` refuses a leader-targeted fault
    for such a DB before it starts)."""
    ask = getattr(test.db, "primaries", None)
    if not callable(ask):
        raise ValueError(f"the DB {db_name(test.db)} has no primary capability: no leader to aim at")
    return [str(n) for n in ask(test.control)]


def choose_nodes(
    test: Test, spec: object, rng: random.Random | None = None, note: dict[str, Any] | None = None
) -> list[str]:
    """Resolve a node spec to node names (sorted).

    ``spec`` is one of :data:`TARGETS` or an explicit list of node names. ``primaries`` asks the DB
    (``test.db.primaries(test.control)``); ``leader`` is :func:`leader_choice` (every primary at
    the highest term, when the DB reports several). An empty answer gives ``[]``. When the DB
    reported several primaries for ``leader`` and ``note`` is given (the completion value), the
    choice is recorded there as ``note["leader_choice"]``. Raises ValueError for an unknown spec or
    unknown node names.
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
    elif spec == "primaries":
        picked = primaries(test)
    elif spec == "leader":
        picked, choice = leader_choice(test)
        if note is not None and len(choice["primaries"]) > 1:
            note["leader_choice"] = choice
    else:
        raise ValueError(f"node spec {spec!r}: expected one of {', '.join(TARGETS)} or a list of node names")
    return sorted(picked)


def pick_leaders(primaries: Sequence[str], terms: Mapping[str, int | None]) -> tuple[list[str], str]:
    """The ``leader`` target among the nodes that claim leadership: ``(chosen names sorted, why)``.

    Raft's election safety (Ongaro's thesis, section 3.6.3) allows at most one leader per term, so
    when several nodes claim leadership the one at the highest term is the current leader and the
    others are stale leaders that have not heard of it yet (e.g. behind a partition). The rule:
    one primary is chosen; of several, every primary at the highest known term, plus every primary
    whose term is unknown (``terms`` lacks it or maps it to None: it cannot be ruled out), so
    without terms every primary is chosen. ``terms``: node -> the term it reports."""
    names = sorted(dict.fromkeys(primaries))
    if len(names) <= 1:
        return names, "no node claims leadership" if not names else "the only primary"
    known = {n: t for n in names if isinstance(t := terms.get(n), int)}
    unknown = [n for n in names if n not in known]
    if not known:
        return names, f"{len(names)} primaries, terms unknown: all of them"
    top = max(known.values())
    chosen = sorted([n for n, t in known.items() if t == top] + unknown)
    why = f"{len(names)} primaries; the highest term is {top}"
    if unknown:
        why += f"; {', '.join(unknown)} kept (term unknown)"
    return chosen, why


def leader_choice(test: Test, timeout_s: float = 2.0) -> tuple[list[str], dict[str, Any]]:
    """``(nodes, record)`` of the ``leader`` target: the DB's ``primaries``; of several, each one's
    term from the DB's ``leadership`` capability when it has one (a node that no longer names
    itself leader has no known term), then :func:`pick_leaders`. ``record``: ``{"primaries",
    "terms", "chosen", "why"}``, what a completion value records."""
    claimed = sorted(dict.fromkeys(primaries(test)))
    terms: dict[str, int | None] = {}
    ask = getattr(test.db, "leadership", None)
    if len(claimed) > 1 and callable(ask):
        by_name = {n.name: n for n in test.nodes}
        for name in claimed:
            try:
                answer = dict(ask(by_name[name], timeout_s)) if name in by_name else {}
            except Exception:  # noqa: BLE001 - the capability must not raise; an answer-less node has no term
                answer = {}
            term = answer.get("term") if answer.get("leader") == name else None
            terms[name] = term if isinstance(term, int) else None
    chosen, why = pick_leaders(claimed, terms)
    return chosen, {"primaries": claimed, "terms": terms, "chosen": chosen, "why": why}


# ---------------------------------------------------------------------------------------------
# Remote helpers


def sh(remote: Remote, script: str, *, timeout: float | None = None, check: bool = True) -> Any:
    """Run a shell script on a node as root (``Remote.exec_raw(..., sudo=True)``); ``timeout`` in
    seconds, None for the remote's own default (``Control(nodes, timeout=)``, 60 s)."""
    return remote.exec_raw(script, sudo=True, timeout=timeout, check=check)


def quote(*words: str) -> str:
    return " ".join(shlex.quote(w) for w in words)


def on_nodes(test: Test, fn: Callable[[Any], object], names: Iterable[str] | None = None) -> dict[str, Any]:
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
        self.final_ops: list[dict[str, object]] = []  # stop op of every kind, for the final phase
        self.schedules: list[Schedule] = []
        # op kind -> the --nemesis names the user typed that run as it (chaos.nemesis.build)
        self.names: dict[str, list[str]] = {}
        self.routes: dict[str, Nemesis] = {}
        for nem in self.nemeses:
            for f in nem.fs():
                if f in self.routes:
                    raise ValueError(f"nemesis op {f!r} is handled by two nemeses; combine them first")
                self.routes[f] = nem

    def setup(self, test: Test) -> None:
        for nem in self.nemeses:
            nem.setup(test)

    def invoke(self, test: Test, op: Op) -> Op:
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

    def teardown(self, test: Test) -> None:
        for nem in self.nemeses:
            nem.teardown(test)

    def heal(self, test: Test) -> None:
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

    def setup(self, test: Test) -> None:
        pass

    def teardown(self, test: Test) -> None:
        pass

    def heal(self, test: Test) -> None:
        pass


class Noop(NoState):
    """A nemesis that does nothing (``--nemesis none``)."""

    def invoke(self, test: Test, op: Op) -> Op:
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
    start: Callable[[random.Random], object]
    stop: Callable[[random.Random], object]
    interval: float

    def start_op(self, rng: random.Random) -> dict[str, object]:
        return {"f": f"start-{self.kind}", "value": self.start(rng)}

    def stop_op(self, rng: random.Random | None = None) -> dict[str, object]:
        return {"f": f"stop-{self.kind}", "value": self.stop(rng or random.Random(0))}

    def generator(self, first_s: float | None = None) -> Any:
        """A ``chaos.control.generator`` generator for the nemesis thread (infinite; the runner
        bounds it with its time limit). The first start comes ``first_s`` seconds after the test
        starts (default: right away, as Jepsen's stagger does); later gaps are staggered."""

        flip = gen.flip_flop(
            lambda test, ctx: self.start_op(ctx.rng), lambda test, ctx: self.stop_op(ctx.rng)
        )
        if not first_s:
            return gen.stagger(self.interval, flip)
        return gen.Stagger(int(self.interval * gen.NS), flip, int(first_s * gen.NS))


# ---------------------------------------------------------------------------------------------
# The descriptor of a fault module

StartValue = Callable[[random.Random], object]
Part = tuple[Any, StartValue, StartValue]
"""One scheduled nemesis: ``(nemesis, start value of rng, stop value of rng)``."""


def _no_value(rng: random.Random) -> None:
    return None


@dataclass(frozen=True)
class NemesisKind:
    """Everything the tool knows of one fault module, built-in or plug-in (registered in the
    ``chaos.nemeses`` group, :mod:`chaos.plugins`).

    - ``names``: ``{--nemesis name: one-line description}``.
    - ``build(chosen, opts)``: the nemeses for the chosen names (a subset of ``names``) and the run's
      options: a list of :data:`Part` (one schedule each), or one Part. Each nemesis has ``kind``
      (its ops are ``start-<kind>``/``stop-<kind>``). ValueError for bad options.
    - ``requires``: ``{name: DB capability names}`` (:data:`chaos.control.db.CAPABILITIES`).
    - ``options``: ``{--nemesis-opt key: kind}``, kinds ``list``/``number``/``int``/``str``/``json``.
    - ``target_options``: ``{option key: names it aims}``; naming ``leader``/``primaries`` there
      adds the ``primary`` capability to those names.
    - ``heal(remote, db)``: remove this module's faults from one node, idempotently (``chaos heal``,
      and before every run); returns what it did, one line each (may be empty).
    - ``residue(remote, db)``: this module's faults still present on one node, one line each.
    - ``colours``: ``{op kind: "#rrggbb"}`` (the report's fault windows).
    - ``verbs``: ``{op kind: {"start": phrase, "stop": phrase}}`` for the availability sentences
      (:func:`chaos.history.checkers.perf.describe_nemesis`; ``{nodes}`` stands for the nodes).
    """

    names: Mapping[str, str]
    build: Callable[[Sequence[str], Mapping[str, Any]], Any]
    requires: Mapping[str, frozenset[str]] = field(default_factory=dict)
    options: Mapping[str, str] = field(default_factory=dict)
    target_options: Mapping[str, Sequence[str]] = field(default_factory=dict)
    heal: Callable[[Any, Any], Iterable[str] | None] | None = None
    residue: Callable[[Any, Any], Iterable[str]] | None = None
    colours: Mapping[str, str] = field(default_factory=dict)
    verbs: Mapping[str, Mapping[str, str]] = field(default_factory=dict)

    def parts(self, chosen: Sequence[str], opts: Mapping[str, object]) -> list[Part]:
        """:attr:`build`'s answer as a list of parts (a missing stop value is None)."""
        built = self.build(list(chosen), opts)
        if built is None:
            return []
        items = [built] if isinstance(built, tuple) else list(built)
        out: list[Part] = []
        for item in items:
            nem, start, *rest = item
            stop = rest[0] if rest and callable(rest[0]) else _no_value
            out.append((nem, start if callable(start) else _no_value, stop))
        return out

    def heal_node(self, remote: Remote, db: object) -> list[str]:
        """:attr:`heal` on one node (nothing without one)."""
        return [str(x) for x in (self.heal(remote, db) or ())] if self.heal is not None else []

    def residue_node(self, remote: Remote, db: object) -> list[str]:
        """:attr:`residue` on one node, blank lines dropped (nothing without one)."""
        if self.residue is None:
            return []
        return [str(x) for x in self.residue(remote, db) if str(x).strip()]

    def styles(self) -> dict[str, dict[str, object]]:
        """``{op kind: {"colour": str | None, "verbs": {"start", "stop"}}}`` for test.json."""
        kinds = dict.fromkeys([*self.colours, *self.verbs])
        return {k: {"colour": self.colours.get(k), "verbs": dict(self.verbs.get(k) or {})} for k in kinds}


def from_factory(name: str, factory: Any) -> NemesisKind:
    """A :class:`NemesisKind` for a plug-in of the older shape: a factory ``opts -> Nemesis`` with
    ``kind``, and optionally ``requires`` (capability names), ``nemesis_options`` (``{key: kind}``),
    ``start_value`` (on the nemesis: rng -> start value), ``colour`` and ``verbs``; ``name`` is
    what ``--nemesis`` called it. Such a plug-in has nothing for ``chaos heal`` (a module that
    leaves state on nodes exposes a :class:`NemesisKind` with ``heal`` and ``residue``)."""
    doc = (getattr(factory, "__doc__", None) or "").strip().splitlines()
    kind = str(factory.kind)

    def build(chosen: Sequence[str], opts: Mapping[str, object]) -> Part:
        plug = factory(dict(opts))
        start = getattr(plug, "start_value", None)
        return plug, start if callable(start) else _no_value, _no_value

    colour = getattr(factory, "colour", None)
    verbs = getattr(factory, "verbs", None)
    return NemesisKind(
        names={name: doc[0] if doc else f"plug-in fault kind {kind}"},
        build=build,
        requires={name: frozenset(getattr(factory, "requires", ()) or ())},
        options=dict(getattr(factory, "nemesis_options", None) or {}),
        colours={kind: str(colour)} if colour else {},
        verbs={kind: dict(verbs)} if isinstance(verbs, Mapping) else {},
    )
