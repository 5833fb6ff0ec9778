"""Anomaly names and the consistency-model lattice (after Elle's ``elle.consistency-model``).

Three relations, transcribed from Elle's namespace (our tables, same facts):

- ``IMPLIES``: anomaly a implies anomaly b (G0 implies G1c, X implies X-process implies X-realtime,
  G-single-item implies G-single and G-nonadjacent-item, lost-update implies G2-item, ...).
- ``MODEL_IMPLIES``: model a implies model b (a history satisfying a satisfies b), with Elle's
  canonical names (read-committed is PL-2, serializable PL-3, strict-serializable PL-SS, ...).
- ``DIRECT``: the anomalies each model proscribes on top of the models it implies.

:func:`prohibited_by` gives every anomaly a model rules out (its own, those of every model it
implies, and every anomaly implying one of those). :func:`boundary` gives the weakest models a set
of found anomalies rules out (Elle's ``:not``) and the stronger ones (``:also-not``).
"""

from __future__ import annotations

from collections.abc import Iterable
from functools import cache

# the models `chaos check --consistency-model` offers (weakest first)
MODEL_CHOICES = (
    "read-uncommitted",
    "read-committed",
    "repeatable-read",
    "snapshot-isolation",
    "serializable",
    "strict-serializable",
)
# further models accepted by name (Elle's session and strong variants)
EXTRA_MODELS = (
    "read-atomic",
    "cursor-stability",
    "consistent-view",
    "strong-session-read-committed",
    "strong-session-snapshot-isolation",
    "strong-session-serializable",
    "strong-snapshot-isolation",
)

# anomalies that are not proof of a violation: the check could not decide
UNKNOWN_TYPES = frozenset({"empty-transaction-graph", "cycle-search-timeout"})

# the cycle anomalies, in the order the search tries them (Elle's depth order, then variants)
CYCLE_BASES = ("G-single-item", "G0", "G-nonadjacent-item", "G1c", "G2-item")

IMPLIES: dict[str, tuple[str, ...]] = {
    "G0": ("G1c", "G0-process"),
    "G0-process": ("G1c-process", "G0-realtime"),
    "G0-realtime": ("G1c-realtime",),
    "G1a": ("G1",),
    "G1b": ("G1",),
    "G1c": ("G1", "G1c-process"),
    "G1c-process": ("G1c-realtime", "G1-process"),
    "G1c-realtime": ("G1-realtime",),
    "G1": ("G1-process",),
    "G1-process": ("G1-realtime",),
    "G-single-item": ("G-single", "G-single-item-process", "G-nonadjacent-item"),
    "G-single-item-process": ("G-single-process", "G-single-item-realtime", "G-nonadjacent-item-process"),
    "G-single-item-realtime": ("G-single-realtime", "G-nonadjacent-item-realtime"),
    "G-single": ("G-nonadjacent", "GSIb", "G-single-process"),
    "G-single-process": ("G-nonadjacent-process", "G-single-realtime"),
    "G-single-realtime": ("G-nonadjacent-realtime",),
    "G-nonadjacent-item": ("G-nonadjacent", "G2-item", "G-nonadjacent-item-process"),
    "G-nonadjacent-item-process": ("G-nonadjacent-process", "G2-item-process", "G-nonadjacent-item-realtime"),
    "G-nonadjacent-item-realtime": ("G2-item-realtime", "G-nonadjacent-realtime"),
    "G-nonadjacent": ("G2", "G-nonadjacent-process"),
    "G-nonadjacent-process": ("G2-process", "G-nonadjacent-realtime"),
    "G-nonadjacent-realtime": ("G2-realtime",),
    "G2": ("G2-process",),
    "G2-item": ("G2", "G2-item-process"),
    "G2-item-process": ("G2-process", "G2-item-realtime"),
    "G2-item-realtime": ("G2-realtime",),
    "G2-process": ("G2-realtime",),
    "GSIa": ("GSI",),
    "GSIb": ("GSI",),
    "incompatible-order": ("G1a",),
    "future-read": ("G1c",),
    "dirty-update": ("G1a",),
    "lost-update": ("write-skew", "G2-item"),
    "write-skew": ("G2",),
}

# friendly name -> Elle's canonical name
CANONICAL = {
    "consistent-view": "PL-2+",
    "conflict-serializable": "PL-3",
    "cursor-stability": "PL-CS",
    "forward-consistent-view": "PL-FCV",
    "monotonic-snapshot-read": "PL-MSR",
    "monotonic-view": "PL-2L",
    "read-committed": "PL-2",
    "read-uncommitted": "PL-1",
    "repeatable-read": "PL-2.99",
    "serializable": "PL-3",
    "snapshot-isolation": "PL-SI",
    "strict-serializable": "PL-SS",
    "strong-serializable": "PL-SS",
    "update-serializable": "PL-3U",
    "strong-session-read-uncommitted": "strong-session-PL-1",
    "strong-session-read-committed": "strong-session-PL-2",
    "strong-read-uncommitted": "strong-PL-1",
    "strong-read-committed": "strong-PL-2",
}
FRIENDLY = {v: k for k, v in CANONICAL.items()}
FRIENDLY["PL-3"] = "serializable"
FRIENDLY["PL-SS"] = "strict-serializable"


def canonical(model: str) -> str:
    return CANONICAL.get(model, model)


def friendly(model: str) -> str:
    return FRIENDLY.get(model, model)


_MODEL_IMPLIES_FRIENDLY: dict[str, tuple[str, ...]] = {
    "causal-cerone": ("read-atomic",),
    "consistent-view": ("cursor-stability", "monotonic-view"),
    "conflict-serializable": ("view-serializable",),
    "cursor-stability": ("read-committed", "PL-2"),
    "forward-consistent-view": ("consistent-view",),
    "PL-2": ("PL-1",),
    "PL-3": ("repeatable-read", "update-serializable"),
    "update-serializable": ("forward-consistent-view",),
    "monotonic-atomic-view": ("read-committed",),
    "monotonic-view": ("PL-2",),
    "monotonic-snapshot-read": ("PL-2",),
    "parallel-snapshot-isolation": ("causal-cerone", "ROLA"),
    "prefix": ("causal-cerone",),
    "read-atomic": ("monotonic-atomic-view",),
    "read-committed": ("read-uncommitted",),
    "repeatable-read": ("cursor-stability", "monotonic-atomic-view"),
    "ROLA": ("read-atomic",),
    "serializable": ("repeatable-read", "snapshot-isolation", "view-serializable"),
    "session-serializable": ("1SR",),
    "snapshot-isolation": (
        "forward-consistent-view",
        "monotonic-atomic-view",
        "monotonic-snapshot-read",
        "parallel-snapshot-isolation",
        "prefix",
    ),
    "strict-serializable": (
        "PL-3",
        "serializable",
        "linearizable",
        "snapshot-isolation",
        "strong-snapshot-isolation",
        "strong-session-serializable",
    ),
    "strong-session-PL-1": ("PL-1",),
    "strong-session-PL-2": ("PL-2", "strong-session-PL-1"),
    "strong-PL-1": ("strong-session-PL-1",),
    "strong-PL-2": ("strong-session-PL-2", "strong-PL-1"),
    "strong-session-serializable": ("serializable", "strong-session-snapshot-isolation"),
    "strong-session-snapshot-isolation": ("snapshot-isolation", "strong-session-PL-2"),
    "strong-serializable": ("session-serializable",),
    "strong-snapshot-isolation": ("strong-session-snapshot-isolation", "strong-PL-2"),
    "linearizable": ("sequential",),
    "sequential": ("causal",),
    "causal": ("writes-follow-reads", "PRAM"),
    "PRAM": ("monotonic-reads", "monotonic-writes", "read-your-writes"),
}

_DIRECT_FRIENDLY: dict[str, tuple[str, ...]] = {
    "causal-cerone": ("internal", "G1a"),
    "cursor-stability": ("G1", "G-cursor", "lost-update"),
    "monotonic-view": ("G1", "G-monotonic"),
    "monotonic-snapshot-read": ("G1", "G-MSR"),
    "consistent-view": ("G1", "G-single"),
    "forward-consistent-view": ("G1", "G-SIb"),
    "parallel-snapshot-isolation": ("internal", "G1a"),
    "PL-3": ("G1", "G2", "predicate-read-miss", "PL-3-cycle-exists"),
    "PL-2": ("G1", "PL-2-cycle-exists"),
    "PL-1": ("G0", "duplicate-elements", "garbage-read", "cyclic-versions", "PL-1-cycle-exists"),
    "prefix": ("internal", "G1a"),
    "serializable": ("internal",),
    "snapshot-isolation": ("internal", "G1", "G-SI", "G-nonadjacent", "PL-SI-cycle-exists"),
    "read-atomic": ("internal", "G1a", "future-read"),
    "repeatable-read": ("G1", "G2-item", "PL-2.99-cycle-exists", "lost-update"),
    "ROLA": ("lost-update",),
    "strict-serializable": ("G1", "G1c-realtime", "G2-realtime", "PL-SS-cycle-exists"),
    "strong-session-PL-1": ("strong-session-PL-1-cycle-exists", "G0-process"),
    "strong-session-PL-2": ("strong-session-PL-2-cycle-exists", "G1c-process"),
    "strong-PL-1": ("strong-PL-1-cycle-exists", "G0-realtime"),
    "strong-PL-2": ("strong-PL-2-cycle-exists", "G1c-realtime"),
    "strong-session-snapshot-isolation": (
        "internal",
        "G1-process",
        "G-nonadjacent-process",
        "strong-session-snapshot-isolation-cycle-exists",
    ),
    "strong-snapshot-isolation": (
        "internal",
        "G1-realtime",
        "G-nonadjacent-realtime",
        "strong-snapshot-isolation-cycle-exists",
    ),
    "strong-session-serializable": ("G1-process", "G2-process", "strong-session-serializable-cycle-exists"),
    "update-serializable": ("G1", "G-update"),
}


def _merge(table: dict[str, tuple[str, ...]], canon_values: bool) -> dict[str, set[str]]:
    out: dict[str, set[str]] = {}
    for k, vs in table.items():
        ck = canonical(k)
        out.setdefault(ck, set()).update(canonical(v) if canon_values else v for v in vs)
        if canon_values:
            for v in vs:
                out.setdefault(canonical(v), set())
    return out


MODEL_IMPLIES = _merge(_MODEL_IMPLIES_FRIENDLY, True)
DIRECT = _merge(_DIRECT_FRIENDLY, False)
ALL_MODELS = frozenset(MODEL_IMPLIES) | frozenset(DIRECT)


def _closure(start: Iterable[str], edges: dict[str, set[str]] | dict[str, tuple[str, ...]]) -> set[str]:
    seen = set(start)
    todo = list(seen)
    while todo:
        for b in edges.get(todo.pop(), ()):
            if b not in seen:
                seen.add(b)
                todo.append(b)
    return seen


def _reverse(edges: dict[str, set[str]] | dict[str, tuple[str, ...]]) -> dict[str, set[str]]:
    out: dict[str, set[str]] = {}
    for a, bs in edges.items():
        for b in bs:
            out.setdefault(b, set()).add(a)
    return out


_IMPLIED_BY = _reverse(IMPLIES)
_MODEL_IMPLIED_BY = _reverse(MODEL_IMPLIES)
_PROSCRIBERS = _reverse(DIRECT)


def implied(anomalies: Iterable[str]) -> set[str]:
    """The anomalies, and every anomaly they imply."""
    return _closure(anomalies, IMPLIES)


def check_model(model: str) -> str:
    """``model`` if Elle's lattice knows it (friendly or canonical name); else ValueError."""
    if canonical(model) not in ALL_MODELS:
        known = ", ".join((*MODEL_CHOICES, *EXTRA_MODELS))
        raise ValueError(f"unknown consistency model {model!r} (known: {known})")
    return model


@cache
def prohibited_by(model: str) -> frozenset[str]:
    """Every anomaly that ``model`` rules out (Elle's ``anomalies-prohibited-by``)."""
    models = _closure([canonical(check_model(model))], MODEL_IMPLIES)
    direct: set[str] = set()
    for m in models:
        direct |= DIRECT.get(m, set())
    return frozenset(_closure(direct, _IMPLIED_BY))


def impossible_models(anomalies: Iterable[str]) -> set[str]:
    """Canonical models that cannot hold given ``anomalies`` (and every stronger model)."""
    direct: set[str] = set()
    for a in implied(anomalies):
        direct |= _PROSCRIBERS.get(a, set())
    return _closure(direct, _MODEL_IMPLIED_BY)


def boundary(anomalies: Iterable[str]) -> tuple[list[str], list[str]]:
    """(``not``, ``also_not``) in friendly names: the weakest models the anomalies rule out, then
    every other model they rule out (Elle's ``friendly-boundary``)."""
    imp = impossible_models(anomalies)
    weakest = {m for m in imp if not (_closure([m], MODEL_IMPLIES) - {m}) & imp}
    return sorted(friendly(m) for m in weakest), sorted(friendly(m) for m in imp - weakest)


def needs_realtime(model: str) -> bool:
    """True if ``model`` proscribes a ``-realtime`` anomaly (so realtime edges join the graph)."""
    return any(a.endswith("-realtime") for a in prohibited_by(model))


def needs_process(model: str) -> bool:
    """True if ``model`` proscribes a ``-process`` anomaly."""
    return any(a.endswith("-process") for a in prohibited_by(model))
