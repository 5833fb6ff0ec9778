"""The Elle checker's pipeline and result (see the package docstring, :mod:`chaos.history.checkers.elle`)."""

from __future__ import annotations

import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from chaos.history.checkers.elle import anomalies as lattice
from chaos.history.checkers.elle.edn import collect_edn
from chaos.history.checkers.elle.explain import cycle_case
from chaos.history.checkers.elle.graph import order_edges_exist, search
from chaos.history.checkers.elle.history import (
    FastPathRefused,
    MalformedTxn,
    TxnTable,
    Unsupported,
    collect_file,
    collect_ops,
    gc_paused,
)
from chaos.history.checkers.elle.listappend import ListAppend, _show
from chaos.history.checkers.elle.rwregister import RwRegister
from chaos.history.op import Op
from chaos.history.store import HistoryError, read_history

UNKNOWN = "unknown"
WORKLOADS = ("list-append", "rw-register")
DEFAULT_MODEL = "strict-serializable"
DEFAULT_BUDGET = 5.0  # seconds of cycle search per strongly connected component (Elle: 1 s)
MAX_EXAMPLES = 8


def _workload(name: str, opts: dict[str, object]) -> Any:
    if name == "list-append":
        return ListAppend()
    if name == "rw-register":
        return RwRegister(wfr_keys=bool(opts.get("wfr_keys")))
    raise ValueError(f"unknown workload {name!r} (expected {' or '.join(WORKLOADS)})")


def check_ops(
    ops: Iterable[Op],
    workload: str = "list-append",
    consistency_model: str = DEFAULT_MODEL,
    time_limit: float | None = None,
    **opts: object,
) -> dict[str, object]:
    """Check a history given as Op objects (file order). ``time_limit``: seconds of cycle search
    per component (default 5). Options: ``wfr_keys`` (rw-register), ``max_examples``.

    Raises HistoryError (no path; ``line`` from the op's ``extra["line"]`` when an importer set
    it, else its position + 1) for a transaction not of the workload's shape (:class:`MalformedTxn`)."""
    lattice.check_model(consistency_model)
    w = _workload(workload, opts)
    t0 = time.perf_counter()
    with gc_paused():
        try:
            table = collect_ops(ops, w.add)
        except MalformedTxn as e:
            line = getattr(e.op, "extra", {}).get("line") if e.op is not None else None
            raise _malformed(e, workload, line if isinstance(line, int) else None, None) from None
        except Unsupported as e:
            return _unsupported(workload, consistency_model, str(e))
        return _analyse(
            w, workload, table, consistency_model, time_limit, opts, {"parse": time.perf_counter() - t0}
        )


def check_file(
    path: str | Path,
    workload: str = "list-append",
    consistency_model: str = DEFAULT_MODEL,
    time_limit: float | None = None,
    **opts: object,
) -> dict[str, object]:
    """Check a JSON Lines history file, or an EDN one (a ``.edn`` name: read by
    ``chaos.history.checkers.elle.edn.collect_edn``), see :func:`check_ops`. Raises HistoryError for a
    malformed file (as ``chaos.history.store.read_history`` does), a malformed transaction included
    (naming the file and line)."""
    lattice.check_model(consistency_model)
    p = Path(path)
    t0 = time.perf_counter()
    with gc_paused():
        w = _workload(workload, opts)
        try:
            try:
                if p.suffix.lower() == ".edn":
                    table = collect_edn(p, w.add)
                else:
                    table = collect_file(p, w.add)
            except FastPathRefused:
                w = _workload(workload, opts)
                table = collect_ops(read_history(p), w.add)
        except MalformedTxn as e:
            raise _malformed(e, workload, None, p) from None
        except Unsupported as e:
            return _unsupported(workload, consistency_model, str(e))
        return _analyse(
            w, workload, table, consistency_model, time_limit, opts, {"parse": time.perf_counter() - t0}
        )


def _malformed(e: MalformedTxn, workload: str, line: int | None, path: Path | None) -> Exception:
    if line is None and e.position is not None and e.position >= 0:
        line = e.position + 1
    return HistoryError(f"{workload} transaction: {e}", line=line, path=path)


def _unsupported(workload: str, model: str, cause: str) -> dict[str, object]:
    return {
        "valid": UNKNOWN,
        "workload": workload,
        "consistency_model": model,
        "anomaly_types": [],
        "anomalies": {},
        "counts": {},
        "not": [],
        "also_not": [],
        "txns": 0,
        "cause": cause,
        "summary": f"Cannot check this history as {workload}: {cause}.",
    }


def _analyse(
    w: Any,
    workload: str,
    table: TxnTable,
    model: str,
    time_limit: float | None,
    opts: dict[str, Any],
    phases: dict[str, float],
) -> dict[str, object]:
    t = time.perf_counter()
    found, src, dst, rel = w.finish(table)
    phases["infer"] = time.perf_counter() - t
    realtime = lattice.needs_realtime(model)
    process = not realtime and lattice.needs_process(model)
    t = time.perf_counter()
    budget = DEFAULT_BUDGET if time_limit is None else float(time_limit)
    prohibited = lattice.prohibited_by(model)
    cyc = search(table, src, dst, rel, realtime=realtime, process=process, budget=budget, wanted=prohibited)
    phases["graph+search"] = time.perf_counter() - t
    t = time.perf_counter()
    max_examples = int(opts.get("max_examples", MAX_EXAMPLES))
    cases: dict[str, list[dict[str, object]]] = {}
    counts: dict[str, int] = {}
    for kind, cycles in cyc.cycles.items():
        counts[kind] = len(cycles)
        cases[kind] = [cycle_case(table, w, kind, c) for c in cycles[:max_examples]]
    for kind, items in found.items():
        counts[kind] = len(items)
        cases[kind] = [w.describe(table, kind, c) for c in items[:max_examples]]
    concrete = set(counts)
    ruled_out = lattice.impossible_models(concrete)
    for case in cyc.exists:
        if case["not"] not in ruled_out:
            counts[case["type"]] = counts.get(case["type"], 0) + 1
            cases.setdefault(case["type"], []).append(
                {
                    **case,
                    "explanation": f"A component of {case['scc_size']} transactions has a cycle in the "
                    f"dependencies {lattice.friendly(case['not'])} forbids, but the search found no short "
                    "cycle of a named anomaly in it.",
                }
            )
    if cyc.timeouts:
        counts["cycle-search-timeout"] = len(cyc.timeouts)
        cases["cycle-search-timeout"] = cyc.timeouts
    if len(table) and len(src) == 0 and not order_edges_exist(table, realtime=realtime, process=process):
        counts["empty-transaction-graph"] = 1
        cases["empty-transaction-graph"] = [
            {"explanation": "No dependency between transactions could be inferred, so nothing was checked."}
        ]
    types = sorted(counts)
    bad = sorted(a for a in types if a in prohibited)
    undecided = sorted(a for a in types if a in lattice.UNKNOWN_TYPES)
    valid: bool | str = False if bad else (UNKNOWN if undecided or not len(table) else True)
    is_not, also_not = lattice.boundary(a for a in types if a not in lattice.UNKNOWN_TYPES)
    phases["explain"] = time.perf_counter() - t
    result: dict[str, object] = {
        "valid": valid,
        "workload": workload,
        "consistency_model": model,
        "anomaly_types": types,
        "counts": counts,
        "anomalies": cases,
        "not": is_not,
        "also_not": also_not,
        "txns": len(table),
        "sccs": cyc.sccs,
        "phases": {k: round(v, 4) for k, v in phases.items()},
    }
    if valid == UNKNOWN:
        if not len(table):
            result["cause"] = "no transaction completed"
        elif cyc.timeouts:
            result["cause"] = (
                f"the cycle search ran out of its budget ({budget:g} s per component) in "
                f"{len(cyc.timeouts)} component(s)"
            )
        else:
            result["cause"] = "no dependency between transactions could be inferred (empty transaction graph)"
    result["summary"] = _summary(result, bad)
    return result


def _summary(r: dict[str, Any], bad: list[str]) -> str:
    n, model = r["txns"], r["consistency_model"]
    found = ", ".join(f"{a} x{r['counts'][a]}" for a in r["anomaly_types"])
    if r["valid"] is True:
        extra = f"; found {found}, which {model} allows" if found else ""
        return f"{n} transactions are {model}{extra}."
    if r["valid"] is False:
        nots = ", ".join(r["not"]) or model
        return f"{n} transactions are not {model}: found {found}; ruled out: {nots} (and stronger)."
    return f"{n} transactions: {model} unknown ({r.get('cause')}){'; found ' + found if found else ''}."


class ElleChecker:
    """Elle's transactional checker as a ``chaos.history.checkers.registry.Checker``.

    ``opts`` may override ``consistency_model``, ``workload`` and ``time_limit`` (seconds of
    cycle search per component). Reads the history file once, streaming (see :func:`check_file`).
    """

    name = "elle"

    def __init__(self, workload: str = "list-append", consistency_model: str = DEFAULT_MODEL):
        if workload not in WORKLOADS:
            raise ValueError(f"unknown workload {workload!r} (expected {' or '.join(WORKLOADS)})")
        self.workload = workload
        self.consistency_model = lattice.check_model(consistency_model)

    def check(self, test: dict[str, Any], history_path: Path, opts: dict[str, Any]) -> dict[str, Any]:
        model = opts.get("consistency_model") or self.consistency_model
        workload = opts.get("elle_workload") or self.workload
        return check_file(
            history_path,
            workload,
            model,
            time_limit=opts.get("elle_time_limit"),
            wfr_keys=opts.get("wfr_keys", False),
        )


__all__ = ["ElleChecker", "check_ops", "check_file", "WORKLOADS", "DEFAULT_MODEL", "_show"]
