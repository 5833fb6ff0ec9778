"""Network partitions via iptables on the receiving node (``jepsen.nemesis`` partitioner, ``jepsen.net``).

A *grudge* maps each node name to the node names whose packets it drops: ``{"n1": ["n3", "n4"]}``
means packets from n3 and n4 never reach n1. Every node appears as a key (with ``[]`` if it drops
nothing). Rules live only in the tool's own chain :data:`CHAIN`, jumped to from ``INPUT``, and match
only the peers' DB addresses, so the control node's SSH link is never cut. Heal flushes and removes
that chain and its jump, never other rules.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from typing import TYPE_CHECKING

from chaos.control.test import Test
from chaos.history.op import Op
from chaos.nemesis.base import (
    NemesisError,
    NemesisKind,
    choose_nodes,
    complete,
    node_names,
    on_nodes,
    outcome,
    quote,
    sh,
)

if TYPE_CHECKING:
    from chaos.control.ssh import Remote

CHAIN = "CHAOS-PARTITION"

Grudge = dict[str, list[str]]

SHAPES = ("random-halves", "random-node", "majorities-ring", "bridge", "leader", "asymmetric", "halves")


# ---------------------------------------------------------------------------------------------
# Grudges (pure)


def _norm(nodes: Sequence[str], drops: dict[str, set[str]]) -> Grudge:
    return {n: sorted(drops.get(n, set())) for n in nodes}


def complete_grudge(components: Sequence[Sequence[str]]) -> Grudge:
    """Each node drops every node outside its own component (``jepsen.nemesis/complete-grudge``)."""
    allnodes = [n for c in components for n in c]
    if len(set(allnodes)) != len(allnodes):
        raise ValueError(f"components {components!r}: a node appears in two components")
    drops: dict[str, set[str]] = {}
    for comp in components:
        others = set(allnodes) - set(comp)
        for n in comp:
            drops[n] = set(others)
    return _norm(allnodes, drops)


def split_halves(nodes: Sequence[str]) -> tuple[list[str], list[str]]:
    """First ``len//2`` nodes and the rest (the rest is the majority when the count is odd)."""
    k = len(nodes) // 2
    return list(nodes[:k]), list(nodes[k:])


def halves(nodes: Sequence[str]) -> Grudge:
    """Cut the node list in two halves, in order."""
    _need(nodes, 2, "halves")
    return complete_grudge(split_halves(nodes))


def random_halves(nodes: Sequence[str], rng: random.Random) -> Grudge:
    """Shuffle, then cut in two halves (a minority and a majority)."""
    _need(nodes, 2, "random-halves")
    shuffled = list(nodes)
    rng.shuffle(shuffled)
    return complete_grudge(split_halves(shuffled))


def isolate(nodes: Sequence[str], alone: Sequence[str]) -> Grudge:
    """Each node in ``alone`` is cut off on its own; the others stay together."""
    rest = [n for n in nodes if n not in alone]
    comps = [[a] for a in alone] + ([rest] if rest else [])
    g = complete_grudge(comps)
    return {n: g[n] for n in nodes}


def random_node(nodes: Sequence[str], rng: random.Random) -> Grudge:
    """One random node isolated from all others."""
    _need(nodes, 2, "random-node")
    return isolate(nodes, [rng.choice(list(nodes))])


def bridge(nodes: Sequence[str]) -> Grudge:
    """Two halves that cannot talk, plus one bridge node (the first of the second half) that
    talks to both (``jepsen.nemesis/bridge``). Needs at least 3 nodes."""
    _need(nodes, 3, "bridge")
    a, b = split_halves(nodes)
    mid, b = b[0], b[1:]
    g = complete_grudge([a, b])
    g[mid] = []
    return {n: g[n] for n in nodes}


def majorities_ring(nodes: Sequence[str], rng: random.Random | None = None) -> Grudge:
    """Every node sees a majority (itself included) and no two nodes see the same majority.

    Nodes (shuffled when ``rng`` is given) sit on a ring; each sees the window of
    ``n//2 + 1`` nodes centred on itself and drops the rest (``jepsen.nemesis/majorities-ring``,
    exact version). For odd n and n=4 the grudge is symmetric. Needs at least 3 nodes.
    """
    _need(nodes, 3, "majorities-ring")
    ring = list(nodes)
    if rng is not None:
        rng.shuffle(ring)
    n = len(ring)
    m = n // 2 + 1
    lo = (m - 1) // 2
    drops: dict[str, set[str]] = {}
    for i, node in enumerate(ring):
        sees = {ring[(i + k) % n] for k in range(-lo, m - lo)}
        drops[node] = set(ring) - sees
    return _norm(list(nodes), drops)


def asymmetric(nodes: Sequence[str], rng: random.Random) -> Grudge:
    """One direction only: random halves A and B; B drops packets from A, A drops nothing.
    A's packets never reach B while B's packets still reach A."""
    _need(nodes, 2, "asymmetric")
    shuffled = list(nodes)
    rng.shuffle(shuffled)
    a, b = split_halves(shuffled)
    if rng.random() < 0.5:
        a, b = b, a
    drops = {n: set(a) for n in b}
    return _norm(list(nodes), drops)


def shape_grudge(shape: str, nodes: Sequence[str], rng: random.Random) -> Grudge:
    """The grudge of a partition shape that needs no DB state (every shape of :data:`SHAPES` but
    ``leader``) over ``nodes``, drawn with ``rng``: what ``start-partition`` installs on a real
    cluster and what ``chaos sim`` cuts on its simulated links, so both are the same fault.
    ValueError for ``leader`` or an unknown shape."""
    if shape == "random-halves":
        return random_halves(nodes, rng)
    if shape == "halves":
        return halves(nodes)
    if shape == "random-node":
        return random_node(nodes, rng)
    if shape == "majorities-ring":
        return majorities_ring(nodes, rng)
    if shape == "bridge":
        shuffled = list(nodes)
        rng.shuffle(shuffled)
        g = bridge(shuffled)
        return {n: g[n] for n in nodes}
    if shape == "asymmetric":
        return asymmetric(nodes, rng)
    raise ValueError(
        f"partition shape {shape!r}: expected one of {', '.join(s for s in SHAPES if s != 'leader')}"
    )


def visible(grudge: Grudge, node: str) -> set[str]:
    """Nodes whose packets reach ``node`` (itself included)."""
    return set(grudge) - set(grudge[node])


def expected_delivery(grudge: Grudge) -> dict[str, dict[str, bool]]:
    """``m[src][dst]``: whether a packet from src reaches dst under the grudge."""
    return {s: {d: s not in grudge[d] for d in grudge if d != s} for s in grudge}


def expected_connect(grudge: Grudge) -> dict[str, dict[str, bool]]:
    """``m[a][b]``: whether a TCP connect from a to b can succeed (both directions must pass)."""
    deliv = expected_delivery(grudge)
    return {a: {b: deliv[a][b] and deliv[b][a] for b in deliv[a]} for a in deliv}


def check_grudge(grudge: object, nodes: Sequence[str]) -> Grudge:
    """Validate a grudge given by a user or a replayed op; returns it normalised.
    Raises ValueError naming the bad entry."""
    if not isinstance(grudge, dict):
        raise ValueError(f"grudge {grudge!r}: expected an object {{node: [nodes it drops]}}")
    unknown = [k for k in grudge if k not in nodes]
    if unknown:
        raise ValueError(f"grudge: unknown nodes {unknown}; expected some of {list(nodes)}")
    out: dict[str, set[str]] = {}
    for k, v in grudge.items():
        if not isinstance(v, list) or any(x not in nodes for x in v):
            raise ValueError(f"grudge entry {k!r}: {v!r}: expected a list of node names from {list(nodes)}")
        out[k] = set(v) - {k}
    return _norm(list(nodes), out)


def _need(nodes: Sequence[str], k: int, shape: str) -> None:
    if len(nodes) < k:
        raise ValueError(f"partition shape {shape!r} needs at least {k} nodes, got {len(nodes)}")


# ---------------------------------------------------------------------------------------------
# iptables


def chain_script(chain: str, hook: str = "INPUT") -> str:
    """Shell that creates ``chain`` (if missing), empties it and jumps to it first from ``hook``."""
    return (
        f"iptables -w -N {chain} 2>/dev/null || true; "
        f"iptables -w -C {hook} -j {chain} 2>/dev/null || iptables -w -I {hook} 1 -j {chain}; "
        f"iptables -w -F {chain}"
    )


def drop_chain_script(chain: str, hook: str = "INPUT") -> str:
    """Shell that removes every jump from ``hook`` to ``chain``, then flushes and deletes the chain.
    Idempotent; touches no other rule."""
    return (
        f"while iptables -w -D {hook} -j {chain} 2>/dev/null; do :; done; "
        f"iptables -w -F {chain} 2>/dev/null || true; iptables -w -X {chain} 2>/dev/null || true"
    )


def partition_script(sources: Sequence[str]) -> str:
    """Shell for one receiving node: drop every packet from the given source addresses."""
    script = chain_script(CHAIN)
    if sources:
        script += "; " + quote("iptables", "-w", "-A", CHAIN, "-s", ",".join(sources), "-j", "DROP")
    return script


def heal_script() -> str:
    return drop_chain_script(CHAIN)


class PartitionNemesis:
    """``start-partition`` / ``stop-partition``.

    Invocation value: a shape name from :data:`SHAPES` (chosen by the schedule), or
    ``{"grudge": {...}}`` to replay an exact grudge. Completion value:
    ``{"shape": str, "grudge": {node: [dropped nodes]}, "applied": bool}`` (``applied`` false, with
    ``why``, when the grudge cuts no link, e.g. ``leader`` with no leader; a node that rejects the
    rules fails the whole start); ``stop-partition`` completes with ``{"healed": [nodes]}``. Follows ``jepsen.nemesis/partitioner`` and ``jepsen.net/iptables``.
    """

    kind = "partition"

    def __init__(self, shapes: Sequence[str] = ("random-halves",)) -> None:
        bad = [s for s in shapes if s not in SHAPES]
        if bad or not shapes:
            raise ValueError(f"partition shapes {list(shapes)!r}: expected some of {', '.join(SHAPES)}")
        self.shapes = list(shapes)

    def fs(self) -> set[str]:
        return {"start-partition", "stop-partition"}

    def setup(self, test: Test) -> None:
        self.heal(test)

    def teardown(self, test: Test) -> None:
        self.heal(test)

    def heal(self, test: Test) -> None:
        on_nodes(test, lambda r: sh(r, heal_script()))

    def grudge(self, test: Test, value: object, note: dict[str, object] | None = None) -> tuple[str, Grudge]:
        """Resolve an invocation value to ``(shape, grudge)``; ``note`` receives how the ``leader``
        shape chose among several primaries (:func:`chaos.nemesis.base.choose_nodes`)."""
        names = node_names(test)
        rng = test.rng
        if isinstance(value, dict) and "grudge" in value:
            return str(value.get("shape", "explicit")), check_grudge(value["grudge"], names)
        shape = value if isinstance(value, str) else rng.choice(self.shapes)
        if shape == "leader":
            return shape, isolate(names, choose_nodes(test, "leader", note=note))
        if shape in SHAPES:
            return shape, shape_grudge(shape, names, rng)
        raise ValueError(
            f"partition value {value!r}: expected a shape ({', '.join(SHAPES)}) or {{'grudge': ...}}"
        )

    def invoke(self, test: Test, op: Op) -> Op:
        if op.f == "stop-partition":
            self.heal(test)
            return complete(op, outcome({"healed": node_names(test)}, True))
        if op.f != "start-partition":
            raise ValueError(f"partition nemesis: unexpected f {op.f!r}")
        note: dict[str, object] = {}
        shape, grudge = self.grudge(test, op.value, note)
        cuts = any(grudge.values())
        if cuts:
            apply_grudge(test, grudge)
        why = "no leader to isolate" if shape == "leader" else "the grudge cuts no link"
        return complete(op, outcome({"shape": shape, "grudge": grudge, **note}, cuts, why))


def apply_grudge(test: Test, grudge: Grudge) -> None:
    """Install the grudge: on each node, drop packets from the DB addresses of its grudge.
    Raises NemesisError if a node rejects the rules."""
    addr = {n.name: n.peer_host for n in test.nodes}

    def one(remote: Remote) -> None:
        srcs = [addr[x] for x in grudge.get(remote.node.name, [])]
        res = sh(remote, partition_script(srcs), check=False)
        if res.exit_code != 0:
            raise NemesisError(f"partition on {remote.node.name}: iptables failed: {res.stderr.strip()}")

    on_nodes(test, one)


# ---------------------------------------------------------------------------------------------
# The descriptor (chaos.nemesis)

# --nemesis name -> partition shape
NAMES = {
    "partition-random-halves": ("random-halves", "cut the network into a random minority and majority"),
    "partition-random-node": ("random-node", "isolate one random node"),
    "partition-majorities-ring": ("majorities-ring", "every node sees a majority, no two the same majority"),
    "partition-ring": ("majorities-ring", "alias of partition-majorities-ring"),
    "partition-halves": ("halves", "cut the network into the first and second half of the node list"),
    "bridge": ("bridge", "two halves joined only through one bridge node"),
    "partition-leader": ("leader", "isolate the node the DB reports as leader"),
    "partition-asymmetric": (
        "asymmetric",
        "one half's packets never reach the other half (one direction only)",
    ),
}

# the run's partition names for the shapes :func:`shape_grudge` draws (``partition-ring`` is
# ``majorities-ring``): ``chaos sim`` takes the same names for the same grudges
PARTITION_SHAPES = {name: shape for name, (shape, _) in NAMES.items() if shape != "leader"}

RESIDUE = (
    f"iptables -w -S {CHAIN} >/dev/null 2>&1 && "
    f"echo \"iptables chain {CHAIN}: $(iptables -w -S {CHAIN} | grep -c -- '^-A') rules\"; "
    f"iptables -w -S 2>/dev/null | grep -E -- '-j {CHAIN}( |$)' | sed 's/^/iptables jump: /'; true"
)


def _build(chosen: Sequence[str], opts: object) -> object:
    shapes = sorted({NAMES[n][0] for n in chosen})
    return PartitionNemesis(shapes), lambda rng: rng.choice(shapes), None


def _heal(remote: Remote, db: object) -> list[str]:
    sh(remote, heal_script(), check=False)
    return []


def _residue(remote: Remote, db: object) -> list[str]:
    return str(sh(remote, RESIDUE, check=False).stdout).splitlines()


NEMESIS = NemesisKind(
    names={n: d for n, (_, d) in NAMES.items()},
    build=_build,
    requires={"partition-leader": frozenset({"primary"})},
    heal=_heal,
    residue=_residue,
    colours={"partition": "#e6550d"},
    verbs={"partition": {"start": "{nodes} partitioned", "stop": "partition healed"}},
)
"""The partition fault module (``chaos.nemeses`` entry point ``partition``)."""
