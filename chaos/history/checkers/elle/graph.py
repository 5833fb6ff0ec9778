"""The dependency graph, its strongly connected components and the cycle search (Elle's
``elle.graph``, ``elle.txn: cycles``, ``elle.bfs``).

Vertices are transaction ids (``TxnTable``). Edges arrive as three flat arrays (source, target,
relation bit) so that a million transactions never become per-edge Python objects. Relations are
bits, in Elle's explainer priority: an edge carrying several is explained, and counted, as the
lowest one (``ww`` before ``wr`` before ``rw`` before ``process`` before ``realtime``).

Steps:
1. Realtime order (a completed before b was invoked) joins the whole graph through one auxiliary
   vertex per ``ok`` completion, chained in completion order: a -> aux(a) -> ... -> aux(last
   completion before b's invocation) -> b. That is 3 edges per transaction instead of Elle's
   transitive reduction (about concurrency-many per transaction), with the same reachability.
2. rustworkx decides whether the graph is acyclic (the common, valid case stops here); otherwise
   its strongly connected components are taken, and each with two or more transactions is
   searched on its own (no cycle leaves a component).
3. Per component, the explicit edges (data, and Elle's realtime reduction or process order among
   its members) go into a dict adjacency. Elle's "cycle exists" pass asks, per model, whether the
   model's projection (ww; ww+wr; (ww+wr) then rw; ww+wr+rw; with process or realtime added) has a
   cycle; only then are the anomalies that model proscribes searched for.
4. The search (per anomaly type) is a breadth-first search from each edge of the type's rarest
   relation back to its source, with a small state (was the last edge rw, how many rw so far, were
   two rw adjacent, any wr, any process/realtime edge), so the first cycle found is short; a cycle
   is kept when its classification (Elle's ``cycle-explainer``) is exactly the type searched.
"""

from __future__ import annotations

import array
import time
from collections import deque
from collections.abc import Collection, Hashable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar

import numpy as np
import rustworkx as rx

from chaos.history.checkers.elle.anomalies import CYCLE_BASES, IMPLIES, implied, impossible_models
from chaos.history.checkers.elle.history import TxnTable

WW, WR, RW, PROCESS, REALTIME = 1, 2, 4, 8, 16
H = TypeVar("H", bound=Hashable)  # a node of has_cycle's graph: a txn id, or a key's value

DATA = WW | WR | RW
LABELS = {WW: "ww", WR: "wr", RW: "rw", PROCESS: "process", REALTIME: "realtime"}

# per base type: the data relations a cycle may use, and the one it must contain
_ALLOWED = {"G0": WW, "G1c": WW | WR, "G-single-item": DATA, "G-nonadjacent-item": DATA, "G2-item": DATA}
_FIRST = {"G0": WW, "G1c": WR, "G-single-item": RW, "G-nonadjacent-item": RW, "G2-item": RW}
# per base type: the cycle-exists projection it needs: (bits, extended by rw?)
_PROJECTION_OF = {"G0": 0, "G1c": 1, "G-single-item": 2, "G-nonadjacent-item": 2, "G2-item": 3}
_PROJECTIONS = ((WW, False), (WW | WR, False), (WW | WR, True), (DATA, False))
_EXISTS_NAMES = {
    0: ("PL-1", "PL-2", "PL-SI", "PL-2.99"),
    PROCESS: (
        "strong-session-PL-1",
        "strong-session-PL-2",
        "strong-session-snapshot-isolation",
        "strong-session-serializable",
    ),
    REALTIME: ("strong-PL-1", "strong-PL-2", "strong-snapshot-isolation", "PL-SS"),
}


class SearchTimeout(Exception):
    pass


@dataclass
class CycleResult:
    """What the search found: cycles per anomaly type (each a list of (from, to, label) edges),
    cycle-exists cases, timeouts, and the number of components searched."""

    cycles: dict[str, list[list[tuple[int, int, int]]]] = field(default_factory=dict)
    exists: list[dict[str, Any]] = field(default_factory=list)
    timeouts: list[dict[str, Any]] = field(default_factory=list)
    sccs: int = 0


def classify(labels: Iterable[int]) -> str:
    """Elle's classification of a cycle from its edge labels, in cycle order."""
    labs = list(labels)
    n = len(labs)
    nrw = sum(1 for x in labs if x == RW)
    if nrw == 1:
        base = "G-single-item"
    elif nrw >= 2:
        adjacent = any(labs[i] == RW and labs[(i + 1) % n] == RW for i in range(n))
        base = "G2-item" if adjacent else "G-nonadjacent-item"
    elif WR in labs:
        base = "G1c"
    else:
        base = "G0"
    if REALTIME in labs:
        return base + "-realtime"
    if PROCESS in labs:
        return base + "-process"
    return base


def _aux_realtime(table: TxnTable, n: int) -> tuple[np.ndarray, np.ndarray]:
    """Edges through auxiliary vertices n, n+1, ... (one per ok completion, in completion order)
    whose reachability between transactions is exactly realtime order."""
    ok = np.frombuffer(table.ok, dtype=np.int8).astype(bool)
    ok_ids = np.nonzero(ok)[0]  # txn ids are in completion order
    m = len(ok_ids)
    if m == 0:
        return np.empty(0, np.int64), np.empty(0, np.int64)
    aux = n + np.arange(m, dtype=np.int64)
    cpos = np.frombuffer(table.complete_pos, dtype=np.int64)[ok_ids]
    ipos = np.frombuffer(table.invoke_pos, dtype=np.int64)
    before = np.searchsorted(cpos, ipos, side="left")  # ok completions before each invocation
    has = (before > 0) & (ipos >= 0)
    targets = np.nonzero(has)[0]
    src = np.concatenate([ok_ids, aux[:-1], aux[before[targets] - 1]])
    dst = np.concatenate([aux, aux[1:], targets])
    return src, dst


def _process_edges(table: TxnTable, members: Iterable[int] | None = None) -> tuple[list[int], list[int]]:
    """Elle's process order: each ok txn -> the next ok txn of the same process."""
    last: dict[Hashable, int] = {}
    src: list[int] = []
    dst: list[int] = []
    ok, proc = table.ok, table.process
    for t in members if members is not None else range(len(table)):
        if not ok[t]:
            continue
        p = proc[t]
        prev = last.get(p)
        if prev is not None:
            src.append(prev)
            dst.append(t)
        last[p] = t
    return src, dst


def order_edges_exist(table: TxnTable, *, realtime: bool, process: bool) -> bool:
    """Whether the order the model adds gives the graph an edge between two transactions: with
    ``realtime``, a transaction invoked after some ok one completed; with ``process``, a process
    with two ok transactions. Elle builds these graphs into the one it tests for emptiness
    (``elle.txn/additional-graphs``), so a history they alone connect is not an empty graph."""
    if realtime:
        ok = np.frombuffer(table.ok, dtype=np.int8).astype(bool)
        if not ok.any():
            return False
        first_ok = int(np.frombuffer(table.complete_pos, dtype=np.int64)[ok].min())
        return bool((np.frombuffer(table.invoke_pos, dtype=np.int64) > first_ok).any())
    if process:
        return bool(_process_edges(table)[0])
    return False


def realtime_edges(table: TxnTable, members: list[int]) -> list[tuple[int, int]]:
    """Elle's transitive reduction of realtime order among ``members`` (its frontier pass)."""
    events = []
    for t in members:
        if table.invoke_pos[t] >= 0:
            events.append((table.invoke_pos[t], 0, t))
        events.append((table.complete_pos[t], 1, t))
    events.sort()
    frontier: set[int] = set()
    preds: dict[int, list[int]] = {}
    out: list[tuple[int, int]] = []
    for _, kind, t in events:
        if kind == 0:
            preds[t] = list(frontier)
            out.extend((f, t) for f in frontier)
        elif table.ok[t]:
            frontier.difference_update(preds.get(t, ()))
            frontier.add(t)
    return out


def components(
    table: TxnTable,
    src: array.array[int],
    dst: array.array[int],
    *,
    realtime: bool,
    process: bool,
) -> list[list[int]]:
    """The strongly connected components with two or more transactions (sorted ids each).

    With ``realtime``, a dependency edge from an ok transaction to one invoked after it completed
    is left out of the graph searched: realtime order (:func:`_aux_realtime`) already has a path
    between the two, so reachability, and so every component, is the same without it (about half
    the dependency edges of a valid history, which rustworkx then need not be handed)."""
    n = len(table)
    s = np.frombuffer(src, dtype=np.int32).astype(np.int64)
    d = np.frombuffer(dst, dtype=np.int32).astype(np.int64)
    if realtime and len(s):
        ok = np.frombuffer(table.ok, dtype=np.int8).astype(bool)
        ipos = np.frombuffer(table.invoke_pos, dtype=np.int64)[d]
        implied = ok[s] & (np.frombuffer(table.complete_pos, dtype=np.int64)[s] < ipos) & (ipos >= 0)
        keep = ~implied
        s, d = s[keep], d[keep]
    parts_s, parts_d = [s], [d]
    nodes = n
    if realtime:
        a, b = _aux_realtime(table, n)
        parts_s.append(a)
        parts_d.append(b)
        nodes = n + int(np.count_nonzero(np.frombuffer(table.ok, dtype=np.int8)))
    elif process:
        ps, pd = _process_edges(table)
        parts_s.append(np.array(ps, dtype=np.int64))
        parts_d.append(np.array(pd, dtype=np.int64))
    g = rx.PyDiGraph(check_cycle=False, multigraph=True)
    g.add_nodes_from(range(nodes))
    chunk = 1 << 20
    for ps_, pd_ in zip(parts_s, parts_d, strict=True):
        for i in range(0, len(ps_), chunk):
            g.extend_from_edge_list(
                list(zip(ps_[i : i + chunk].tolist(), pd_[i : i + chunk].tolist(), strict=True))
            )
    if rx.is_directed_acyclic_graph(g):
        return []
    out = []
    for comp in rx.strongly_connected_components(g):
        if len(comp) > 1:
            members = sorted(v for v in comp if v < n)
            if len(members) > 1:
                out.append(members)
    out.sort()
    return out


def component_adjacency(
    table: TxnTable,
    src: array.array[int],
    dst: array.array[int],
    rel: array.array[int],
    comps: list[list[int]],
    *,
    realtime: bool,
    process: bool,
) -> list[dict[int, dict[int, int]]]:
    """For each component, ``{u: {v: relation bits}}`` over its members."""
    n = len(table)
    label = np.full(n, -1, dtype=np.int64)
    for i, comp in enumerate(comps):
        label[comp] = i
    s = np.frombuffer(src, dtype=np.int32)
    d = np.frombuffer(dst, dtype=np.int32)
    r = np.frombuffer(rel, dtype=np.int8)
    ls = label[s]
    keep = np.nonzero((ls >= 0) & (ls == label[d]))[0]
    adjs: list[dict[int, dict[int, int]]] = [{u: {} for u in comp} for comp in comps]
    for u, v, b, c in zip(
        s[keep].tolist(), d[keep].tolist(), r[keep].tolist(), ls[keep].tolist(), strict=True
    ):
        row = adjs[c][u]
        row[v] = row.get(v, 0) | b
    for i, comp in enumerate(comps):
        adj = adjs[i]
        if realtime:
            for u, v in realtime_edges(table, comp):
                adj[u][v] = adj[u].get(v, 0) | REALTIME
        elif process:
            ps, pd = _process_edges(table, comp)
            for u, v in zip(ps, pd, strict=True):
                adj[u][v] = adj[u].get(v, 0) | PROCESS
    return adjs


def _projection(adj: dict[int, dict[int, int]], bits: int, extend: bool) -> dict[int, set[int]]:
    out: dict[int, set[int]] = {}
    for u, row in adj.items():
        nxt = {v for v, b in row.items() if b & bits}
        if extend:
            ext = set(nxt)
            for v in nxt:
                ext.update(w for w, b in adj[v].items() if b & RW)
            nxt = ext
        out[u] = nxt
    return out


def has_cycle(g: Mapping[H, Collection[H]]) -> bool:
    """True if the graph (node -> its successors) has a cycle (a self-loop counts); iterative
    three-colour DFS."""
    colour: dict[H, int] = {}
    for root in g:
        if root in colour:
            continue
        colour[root] = 1
        stack = [(root, iter(g[root]))]
        while stack:
            u, it = stack[-1]
            for v in it:
                c = colour.get(v, 0)
                if c == 1:
                    return True
                if c == 0:
                    colour[v] = 1
                    stack.append((v, iter(g.get(v, ()))))
                    break
            else:
                colour[u] = 2
                stack.pop()
    return False


def find_cycle(
    adj: dict[int, dict[int, int]], base: str, variant: int, deadline: float
) -> list[tuple[int, int, int]] | None:
    """A short simple cycle in ``adj`` classified exactly as ``base`` (+ the variant's suffix).

    Returns the cycle's edges ``(from, to, label)`` starting with the rarest relation, or None.
    Raises SearchTimeout past ``deadline`` (``time.monotonic()`` seconds).
    """
    allowed = _ALLOWED[base] | variant
    first = variant or _FIRST[base]
    target = base + ("-realtime" if variant == REALTIME else "-process" if variant == PROCESS else "")
    single = base == "G-single-item"
    nonadj = base == "G-nonadjacent-item"
    steps = 0
    for u in sorted(adj):
        for v, bits0 in sorted(adj[u].items()):
            lab0 = bits0 & -bits0
            if lab0 != first:
                continue
            # state: (vertex, last was rw, rw count capped at 2, adjacent rw pair, any wr)
            start = (v, lab0 == RW, 1 if lab0 == RW else 0, False, lab0 == WR)
            parent: dict[tuple[object, ...], tuple[object, ...] | None] = {start: None}
            labels_of: dict[tuple[object, ...], int] = {start: lab0}
            queue = deque([start])
            while queue:
                steps += 1
                if steps & 1023 == 0 and time.monotonic() > deadline:
                    raise SearchTimeout
                state = queue.popleft()
                x, last_rw, nrw, adjp, has_wr = state
                for y, bits in adj[x].items():
                    lab = bits & -bits
                    if not lab & allowed:
                        continue
                    is_rw = lab == RW
                    nrw2 = min(2, nrw + is_rw)
                    adj2 = adjp or (last_rw and is_rw)
                    if single and nrw + is_rw > 1:
                        continue
                    if nonadj and adj2:
                        continue
                    if y == u:
                        labs = _labels(parent, labels_of, state) + [lab]
                        path = _vertices(parent, state)
                        if classify(labs) == target and len(set(path)) == len(path) and u not in path:
                            verts = [u, *path]
                            return [
                                (verts[i], verts[(i + 1) % len(verts)], labs[i]) for i in range(len(verts))
                            ]
                        continue
                    nxt = (y, is_rw, nrw2, adj2, has_wr or lab == WR)
                    if nxt in parent:
                        continue
                    parent[nxt] = state
                    labels_of[nxt] = lab
                    queue.append(nxt)
    return None


def _vertices(parent: dict[Any, Any], state: Any) -> list[int]:
    out = []
    while state is not None:
        out.append(state[0])
        state = parent[state]
    out.reverse()
    return out


def _labels(parent: dict[Any, Any], labels_of: dict[Any, int], state: object) -> list[int]:
    out = []
    while state is not None:
        out.append(labels_of[state])
        state = parent[state]
    out.reverse()
    return out


def search_component(
    adj: dict[int, dict[int, int]], variant: int, budget: float, result: CycleResult, wanted: frozenset[str]
) -> None:
    """Search one component for every cycle type, weakest projections first; record into ``result``."""
    deadline = time.monotonic() + budget
    exists: dict[tuple[int, int], bool] = {}
    families = [0] + ([variant] if variant else [])
    for fam in families:
        for i, (bits, ext) in enumerate(_PROJECTIONS):
            exists[(fam, i)] = has_cycle(_projection(adj, bits | fam, ext))
    found: set[str] = set()
    skip: set[str] = set()
    searched: list[str] = []
    for fam in families:
        suffix = "-realtime" if fam == REALTIME else "-process" if fam == PROCESS else ""
        for base in CYCLE_BASES:
            name = base + suffix
            if name in skip or name not in wanted or not exists[(fam, _PROJECTION_OF[base])]:
                continue
            try:
                cyc = find_cycle(adj, base, fam, deadline)
            except SearchTimeout:
                result.timeouts.append(
                    {
                        "type": "cycle-search-timeout",
                        "anomaly_spec_type": name,
                        "does_not_contain": searched,
                        "scc_size": len(adj),
                    }
                )
                _cycle_exists(adj, exists, families, found, result, wanted)
                return
            searched.append(name)
            if cyc is not None:
                found.add(name)
                result.cycles.setdefault(name, []).append(cyc)
                skip |= implied([name]) - {name}
    _cycle_exists(adj, exists, families, found, result, wanted)


def _cycle_exists(
    adj: dict[int, dict[int, int]],
    exists: dict[tuple[int, int], bool],
    families: list[int],
    found: set[str],
    result: CycleResult,
    wanted: frozenset[str],
) -> None:
    """Elle's cycle-exists cases: per family, the weakest model whose projection has a cycle,
    unless an anomaly found in this component already rules that model out."""
    ruled_out = impossible_models(found)
    for fam in families:
        for i in range(len(_PROJECTIONS)):
            if exists[(fam, i)]:
                model = _EXISTS_NAMES[fam][i]
                if model not in ruled_out and f"{model}-cycle-exists" in wanted:
                    result.exists.append(
                        {
                            "type": f"{model}-cycle-exists",
                            "not": model,
                            "scc_size": len(adj),
                            "scc": sorted(adj),
                        }
                    )
                break


def search(
    table: TxnTable,
    src: array.array[int],
    dst: array.array[int],
    rel: array.array[int],
    *,
    realtime: bool,
    process: bool,
    budget: float,
    wanted: frozenset[str],
) -> CycleResult:
    """Components, then per component the search for the cycle types in ``wanted`` (the model's
    proscribed anomalies, as Elle searches only reportable ones), ``budget`` seconds each."""
    result = CycleResult()
    comps = components(table, src, dst, realtime=realtime, process=process)
    result.sccs = len(comps)
    if not comps:
        return result
    variant = REALTIME if realtime else PROCESS if process else 0
    for adj in component_adjacency(table, src, dst, rel, comps, realtime=realtime, process=process):
        search_component(adj, variant, budget, result, wanted)
    return result


__all__ = ["IMPLIES", "LABELS", "classify", "search", "CycleResult"]
