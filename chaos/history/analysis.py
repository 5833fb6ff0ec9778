"""The one history-analysis core: pairing, fault windows, availability and the verdict merge.

Every consumer of a history uses these rules and no copy of its own: the perf checker
(:mod:`chaos.history.checkers.perf`), the report (:mod:`chaos.history.report.html`), ``chaos serve`` and the Spark
pipeline (:mod:`chaos.history.spark.pipeline`, whose SQL statistics join on the windows computed here).

- **Reading** with validation is :func:`chaos.history.store.read_history` (re-exported): Jepsen's
  ``jepsen.history`` pairing rules, a malformed line raises ``HistoryError`` naming file and line.
- **Pairing**: a client completion closes the open invocation of its process; nemesis ops are
  ``info`` on both ends and pair per ``f`` (the first is the invocation, the next the completion),
  as :class:`chaos.history.store.Validator` and :func:`chaos.history.store.pair` do.
- **Fault windows** (docs/design.md, "Ops and histories"): a window of kind ``<kind>`` lasts from
  the completion of ``start-<kind>`` to the completion of ``stop-<kind>``. A ``start-<kind>``
  completing while that kind is in force changes nothing (the fault is already in force) unless
  it names nodes the open windows of the kind do not hold (:func:`fault_nodes`): then it is a
  fault of its own, with a window of its own (the simulator's kill of the leader while another
  kill is in force). A ``stop-<kind>`` closes the open windows of the kind whose nodes it names
  all of, and every open window of the kind when it names none of them or no nodes at all (a
  heal ends every partition); with no open window it closes nothing. A window not closed by the
  end of the history has ``end = None`` (it lasts until the end).
- **Availability** (after ``jepsen.checker.perf``): the longest stretches with no ok client
  completion while clients were trying (an op was in flight or invoked), from the first invocation
  on; a stretch still open at the end of the history ends there. An op whose client crashed
  (``client_error``, :mod:`chaos.history.checkers.clienterrors`) does not count as trying: the DB was not
  asked.
- **Failures apart** (Jepsen's op types are kept): a ``fail`` is either a definite *no match*, an
  answer the operation allows (a ``cas`` whose compare did not match: ``compare_failed: true``, as
  the register workload and porcupine's ``etcdModel`` record it), or *unavailable*, the DB
  refusing to serve (``NOT_LEADER``, a definite error), or *aborted*, a definite failure the
  system chose (a serialization failure, a deadlock: ``aborted: true``): :func:`fail_class`. Counts, the live view,
  the summary and the report show the two apart, so a healthy cas workload does not look like an
  outage.
- **Verdicts** merge worst-first with :func:`chaos.history.checkers.registry.merge_valid` (re-exported), the
  function ``chaos check`` uses: ``False`` over ``"unknown"`` over ``True``.
"""

from __future__ import annotations

import heapq
from collections.abc import Hashable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from chaos.history.op import INVOKE, NEMESIS, OK, Op
from chaos.history.store import HistoryError, Validator, pair, read_history
from chaos.history.verdict import UNKNOWN, merge_valid

__all__ = [
    "UNKNOWN",
    "Availability",
    "FaultWindow",
    "FaultWindows",
    "HistoryError",
    "NemesisPairing",
    "Validator",
    "fail_class",
    "served_rate",
    "fault_name",
    "fault_names",
    "fault_nodes",
    "run_config",
    "fault_value",
    "fault_windows",
    "merge_valid",
    "pair",
    "read_history",
]

MIN_GAP_NS = 1_000_000  # shorter stretches between ok ops are not worth listing

NO_MATCH = "no-match"
ABORTED = "aborted"
UNSUPPORTED = "unsupported"
UNAVAILABLE = "unavailable"
FAIL_CLASSES = (NO_MATCH, ABORTED, UNSUPPORTED, UNAVAILABLE)  # the last is the default


def fail_class(op: Op | dict[str, object]) -> str | None:
    """For a ``fail`` completion, :data:`NO_MATCH` (the op was served and its compare did not
    match: ``compare_failed: true``), :data:`ABORTED` (the system aborted it, a serialization
    failure or a deadlock victim: ``aborted: true``, a DB client's ``chaos.api.Aborted``),
    :data:`UNSUPPORTED` (the plug-in's client has no method for the op, optional in its protocol:
    ``unsupported: true``; the DB was not asked) or :data:`UNAVAILABLE` (any other definite
    failure); None for any other type. Takes an :class:`Op` or a history line as a dict."""
    extra = op if isinstance(op, dict) else (op.extra or {})
    typ = op.get("type") if isinstance(op, dict) else op.type
    if typ != "fail":
        return None
    if extra.get("compare_failed") is True:
        return NO_MATCH
    if extra.get("aborted") is True:
        return ABORTED
    return UNSUPPORTED if extra.get("unsupported") is True else UNAVAILABLE


class NemesisPairing:
    """Incremental pairing of nemesis ops per ``f``: the first op is the invocation, the next its
    completion (both ``info``, Jepsen); an explicit ``invoke`` always opens a pair."""

    __slots__ = ("open",)

    def __init__(self) -> None:
        self.open: dict[str, Op] = {}

    def step(self, op: Op) -> Op | None:
        """Feed a nemesis op; returns its invocation when ``op`` completes one, else None."""
        if op.type == INVOKE or op.f not in self.open:
            self.open[op.f] = op
            return None
        return self.open.pop(op.f)


def fault_value(invocation: Op, completion: Op) -> object:
    """What a nemesis op did: the invocation names the fault (often a spec such as
    ``"majorities-ring"``), the completion usually says exactly what was done (nodes, grudge);
    both are kept, the completion's fields winning."""
    inv, done = invocation.value, completion.value
    if isinstance(done, dict):
        if isinstance(inv, dict):
            return {**inv, **done}
        if inv is not None:
            return {"spec": inv, **done}
        return done
    return done if inv is None else inv


def fault_names(test: Mapping[str, object] | None) -> dict[str, list[str]]:
    """``{op kind: the --nemesis names the user typed that ran as it}`` of a run: test.json's
    ``nemesis_styles[kind]["names"]`` (the runner records them from the built nemesis,
    ``chaos.nemesis.styles``), else its ``nemesis_names`` (``{kind: [names]}``, as ``chaos sim``
    writes it); ``{}`` for a run recorded before them."""
    styles = test.get("nemesis_styles") if isinstance(test, Mapping) else None
    if not isinstance(styles, Mapping):
        # a run without fault modules' styles (chaos sim's) may record the names alone
        plain = test.get("nemesis_names") if isinstance(test, Mapping) else None
        styles = {k: {"names": v} for k, v in plain.items()} if isinstance(plain, Mapping) else {}
    out: dict[str, list[str]] = {}
    for kind, style in styles.items():
        names = style.get("names") if isinstance(style, Mapping) else None
        if isinstance(names, list) and names and all(isinstance(n, str) for n in names):
            out[str(kind)] = list(names)
    return out


def fault_name(kind: str, names: Mapping[str, Sequence[str]], value: object = None) -> str:
    """The name a person typed for a fault whose ops are ``start-<kind>``/``stop-<kind>`` (issue
    35 item 10: ``lose-unfsynced``, not the op kind ``file``): the op value's own ``fault`` when it
    is one of those names (the file faults say which of truncate, bitflip or lose-unfsynced each
    op was), else the names that ran as ``kind`` joined with ``+`` (:func:`fault_names`), else
    ``kind`` itself (a run recorded before the names were)."""
    typed = list(names.get(kind) or ())
    if isinstance(value, Mapping) and isinstance(value.get("fault"), str) and value["fault"] in typed:
        return str(value["fault"])
    return "+".join(typed) if typed else kind


def run_config(test: Mapping[str, object] | None) -> str:
    """What sets a run apart beyond its workload and nemesis names (issue 35 item 10: a gate's
    runs that differ only here are told apart): the DB options it was given, as typed
    (``read-mode=lease``, ``server-arg=--snapshot-every=20``), then the ``--nemesis-opt`` items
    (``lose_unfsynced_targets=majority-followers``), joined with ``"; "``; ``""`` when none. Read
    from test.json's ``opts`` (``db_opts``, ``nemesis_opts``)."""
    opts = test.get("opts") if isinstance(test, Mapping) else None
    if not isinstance(opts, Mapping):
        return ""
    words = [str(w) for w in opts.get("db_opts") or () if isinstance(w, str)]
    nemesis_opts = opts.get("nemesis_opts")
    for key, value in nemesis_opts.items() if isinstance(nemesis_opts, Mapping) else ():
        shown = ",".join(map(str, value)) if isinstance(value, list) else value
        words.append(f"{key}={shown}")
    return "; ".join(words)


def fault_nodes(value: object) -> list[str]:
    """The nodes a fault acted on, from a nemesis completion's value: ``killed``, ``restarted`` or
    ``nodes`` (a list, or a ``{node: ...}`` object), a grudge's nodes that drop something, a
    transfer's ``from``/``to``, or the value itself when it is a list of node names (sorted, as
    text; ``[]`` when the value names none)."""
    if isinstance(value, list):
        if value and all(type(x) is str or type(x) is int for x in value):
            return sorted({str(x) for x in value})
        return []
    if not isinstance(value, dict):
        return []
    for key in ("killed", "restarted", "nodes"):
        v = value.get(key)
        if isinstance(v, list) and v:
            return sorted(str(x) for x in v)
        if isinstance(v, dict) and v:
            return sorted(str(x) for x in v)
    grudge = value.get("grudge")
    if isinstance(grudge, dict):
        return sorted(n for n, drops in grudge.items() if drops)
    return sorted({str(value[k]) for k in ("from", "to") if value.get(k)})


@dataclass
class FaultWindow:
    """One fault window: ``kind``, ``start`` and ``end`` in ns since the test start (``end`` None
    while open at the end of the history), the ``start-<kind>`` invocation and completion, the
    ``stop-<kind>`` completion (or None), ``value`` (see :func:`fault_value`) and ``nodes``, the
    nodes it acted on (:func:`fault_nodes` of the completion's value, else the invocation's)."""

    id: int
    kind: str
    start: int
    end: int | None
    invocation: Op
    completion: Op
    value: object
    stop: Op | None = None
    nodes: tuple[str, ...] = ()

    def end_or(self, end_of_history: int) -> int:
        """``end``, or ``end_of_history`` for a window still open."""
        return self.end if self.end is not None else max(end_of_history, self.start)


class FaultWindows:
    """Fault windows built op by op (the rule is in the module docstring).

    Feed every op (client ops are ignored) to :meth:`step`; ``windows`` lists them in start order,
    ``active`` maps each kind in force to its open windows (in start order).
    """

    __slots__ = ("pairing", "windows", "active", "active_ids")

    def __init__(self) -> None:
        self.pairing = NemesisPairing()
        self.windows: list[FaultWindow] = []
        self.active: dict[str, list[FaultWindow]] = {}
        self.active_ids: tuple[int, ...] = ()  # ids of the windows in force, for tagging client ops

    def step(self, op: Op) -> Op | None:
        """Feed an op; for a nemesis completion returns its invocation (else None)."""
        if op.process != NEMESIS:
            return None
        inv = self.pairing.step(op)
        if inv is None:
            return None
        f = op.f
        if f.startswith("start-"):
            self._start(f[6:], inv, op)
        elif f.startswith("stop-"):
            self._stop(f[5:], inv, op)
        return inv

    def _start(self, kind: str, inv: Op, op: Op) -> None:
        nodes = tuple(fault_nodes(op.value) or fault_nodes(inv.value))
        in_force = self.active.get(kind)
        if in_force:
            held = {n for w in in_force for n in w.nodes}
            if not nodes or held.issuperset(nodes):
                return  # the fault is already in force
        w = FaultWindow(len(self.windows), kind, op.time, None, inv, op, fault_value(inv, op), nodes=nodes)
        self.windows.append(w)
        self.active.setdefault(kind, []).append(w)
        self.active_ids = tuple(x.id for ws in self.active.values() for x in ws)

    def _stop(self, kind: str, inv: Op, op: Op) -> None:
        in_force = self.active.get(kind)
        if not in_force:
            return
        named = set(fault_nodes(op.value) or fault_nodes(inv.value))
        named_all = [w for w in in_force if w.nodes and named.issuperset(w.nodes)] if named else []
        closing = named_all or list(in_force)  # a stop naming none of them ends them all
        for w in closing:
            w.end = op.time
            w.stop = op
        rest = [w for w in in_force if w not in closing]
        if rest:
            self.active[kind] = rest
        else:
            del self.active[kind]
        self.active_ids = tuple(x.id for ws in self.active.values() for x in ws)


def fault_windows(ops: Iterable[Op]) -> list[FaultWindow]:
    """The fault windows of a history (ops in file order), by the rule in the module docstring."""
    fw = FaultWindows()
    for op in ops:
        if op.process == NEMESIS:
            fw.step(op)
    return fw.windows


@dataclass(frozen=True, order=True)
class Gap:
    """A stretch with no ok client op: ``duration``, ``start`` and ``end`` in ns (``end`` None:
    until the end of the history), ``first_ok_f`` the f of the ok op that ended it."""

    duration: int
    start: int
    end: int | None
    first_ok_f: str | None


class Availability:
    """The longest stretches without an ok client op while clients were trying (streaming).

    Feed client invocations with :meth:`invoke` and completions with :meth:`complete` (times in ns,
    history order); :meth:`finish` returns the ``top`` longest :class:`Gap` s, longest first. A
    stretch starts at the previous ok completion (the first invocation for the first one) and counts
    only if an op was in flight at that ok or some op was invoked since; stretches shorter than
    ``min_gap_ns`` are not listed.
    """

    __slots__ = (
        "top",
        "min_gap_ns",
        "first_invoke",
        "last_ok",
        "pending",
        "pending_at_ok",
        "since_ok",
        "heap",
    )

    def __init__(self, top: int = 10, min_gap_ns: int = MIN_GAP_NS) -> None:
        self.top = top
        self.min_gap_ns = min_gap_ns
        self.first_invoke: int | None = None
        self.last_ok: int | None = None
        self.pending = 0
        self.pending_at_ok = 0
        self.since_ok = 0
        self.heap: list[tuple[int, int, int, str]] = []

    def invoke(self, t: int) -> None:
        self.pending += 1
        self.since_ok += 1
        if self.first_invoke is None:
            self.first_invoke = t

    def withdraw(self) -> None:
        """The op invoked last by its process completed with a client error (the client's own code
        crashed, chaos.history.checkers.clienterrors): it was not the DB failing to serve, so it no longer
        counts as a client trying. Call instead of :meth:`complete`."""
        self.pending -= 1
        self.since_ok = max(0, self.since_ok - 1)

    def complete(self, t: int, type_: str, f: str) -> None:
        self.pending -= 1
        if type_ != OK:
            return
        start = self.last_ok if self.last_ok is not None else self.first_invoke
        tried = self.last_ok is None or self.pending_at_ok > 0 or self.since_ok > 0
        if start is not None and tried and t - start >= self.min_gap_ns:
            item = (t - start, start, t, f)
            if len(self.heap) < self.top:
                heapq.heappush(self.heap, item)
            elif item > self.heap[0]:
                heapq.heapreplace(self.heap, item)
        self.last_ok = t
        self.pending_at_ok = self.pending
        self.since_ok = 0

    def finish(self, end_of_history: int) -> list[Gap]:
        """The longest gaps, longest first, including one still open at ``end_of_history``."""
        gaps = [Gap(d, s, e, f) for d, s, e, f in sorted(self.heap, reverse=True)]
        t_last = self.last_ok if self.last_ok is not None else self.first_invoke
        if (
            t_last is not None
            and (self.pending > 0 or self.since_ok > 0)
            and end_of_history - t_last >= self.min_gap_ns
        ):
            gaps.append(Gap(end_of_history - t_last, t_last, None, None))
            gaps.sort(key=lambda g: -g.duration)
        return gaps[: self.top]


def availability(ops: Iterable[Op], top: int = 10) -> list[Gap]:
    """:class:`Availability` over a whole history (ops in file order)."""
    av = Availability(top)
    open_: set[Hashable] = set()
    end = 0
    for op in ops:
        end = max(end, op.time)
        if op.process == NEMESIS:
            continue
        if op.type == INVOKE:
            open_.add(op.process)
            av.invoke(op.time)
        elif op.process in open_:
            open_.discard(op.process)
            if op.extra and "client_error" in op.extra:
                av.withdraw()
            else:
                av.complete(op.time, op.type, op.f)
    return av.finish(end)


def client_pairs(ops: Iterable[Op]) -> Iterator[tuple[Op, Op | None]]:
    """Client ops only of :func:`chaos.history.store.pair`."""
    for inv, done in pair(ops):
        if inv.process != NEMESIS:
            yield inv, done


def served_rate(ops: Mapping[str, Any]) -> float | None:
    """The share of a run's completed client ops the DB served: ok ones and the fails that were
    answers (:func:`chaos.history.analysis.fail_class`: no match, aborted, unsupported), over all
    completions; a fail the DB did not serve (unavailable) and an indeterminate ``info`` count
    against it. ``ops``: the perf checker's ``ops`` counts (``count``, ``ok``,
    ``fail_<class>``). None without completions or without the per-class counts."""
    count = ops.get("count")
    if not isinstance(count, int) or count <= 0 or f"fail_{UNAVAILABLE}" not in ops:
        return None
    answered = sum(int(ops.get(f"fail_{c.replace('-', '_')}") or 0) for c in FAIL_CLASSES if c != UNAVAILABLE)
    return (int(ops.get("ok") or 0) + answered) / count
