"""The report's figures as data: fault windows and their colours, latency points, availability
windows and the log-anomaly rows (``chaos.history.report.html`` draws them with plotly.js;
:mod:`chaos.history.report.plots` writes the PNGs). Times in ns unless a name says ``_s``.
"""

from __future__ import annotations

import bisect
import json
import math
from collections import defaultdict
from collections.abc import Mapping, Sequence
from typing import Any

from chaos.history.analysis import fault_name, fault_windows
from chaos.history.op import NEMESIS, Op
from chaos.history.report.run import TYPE_COLOURS, TYPE_ORDER, Paired, _short

# Cap on latency points in all (split over the (f, type) traces, at least LATENCY_MIN_PER_TRACE each);
# beyond it each time bucket of a trace keeps its lowest and highest point.
LATENCY_POINTS_TOTAL = 4000
LATENCY_MIN_PER_TRACE = 250
# Cap on rows of the log-anomaly table (the full lists stay in results.json).
MAX_ANOMALY_ROWS = 2000
# The fault colours of runs recorded before test.json carried ``nemesis_styles`` (data: a run
# records its fault modules' own colours, chaos.nemesis.styles); other kinds get _FALLBACK_COLOURS.
NEMESIS_COLOURS = {
    "partition": "#e6550d",
    "kill": "#756bb1",
    "pause": "#31a354",
    "clock": "#3182bd",
    "packet": "#e7ba52",
    "file": "#843c39",
    "leader-transfer": "#7b4173",
}
_FALLBACK_COLOURS = ("#636363", "#8c6d31", "#ad494a", "#5254a3", "#637939")


def nemesis_colours(test: object) -> dict[str, str]:
    """``{op kind: "#rrggbb"}`` for a run: its test.json's ``nemesis_styles`` (``{kind: {"colour",
    "verbs"}}``, written by the runner from the fault modules' descriptors), else
    :data:`NEMESIS_COLOURS` for runs recorded before it."""
    styles = test.get("nemesis_styles") if isinstance(test, dict) else None
    if not isinstance(styles, dict):
        return NEMESIS_COLOURS
    return {
        str(k): v["colour"]
        for k, v in styles.items()
        if isinstance(v, dict) and isinstance(v.get("colour"), str) and v["colour"]
    }


def nemesis_windows(
    history: Sequence[Op],
    end: int,
    known: dict[str, str] | None = None,
    names: Mapping[str, Sequence[str]] | None = None,
) -> list[dict[str, object]]:
    """Fault windows by the one rule of :func:`chaos.history.analysis.fault_windows`: from the
    completion of ``start-<kind>`` to the completion of ``stop-<kind>``.

    Returns dicts ``{kind, name, start, end, open, label, detail, result, colour}`` with times in
    ns: ``name`` is the fault as the user typed it (``names``, the run's
    :func:`chaos.history.analysis.fault_names`: ``lose-unfsynced``, not the op kind ``file``) and
    the ``label`` starts with it; a window never stopped runs to the end of the history (``end``)
    and has ``open`` true. Colours
    come from ``known`` (:func:`nemesis_colours`; default :data:`NEMESIS_COLOURS`), a neutral one
    of ``_FALLBACK_COLOURS`` for other kinds.
    """
    known = NEMESIS_COLOURS if known is None else known
    colours: dict[str, str] = {}
    wins: list[dict[str, object]] = []
    nem = (o for o in history if o.process == NEMESIS)
    for fw in fault_windows(nem):
        kind = fw.kind
        if kind not in colours:
            colours[kind] = known.get(kind) or _FALLBACK_COLOURS[len(colours) % len(_FALLBACK_COLOURS)]
        detail = _short(fw.invocation.value, 300)
        name = fault_name(kind, names or {}, fw.invocation.value)
        wins.append(
            {
                "kind": kind,
                "name": name,
                "start": fw.start,
                "end": fw.end_or(end),
                "open": fw.end is None,
                "detail": detail,
                "result": _short(fw.completion.value, 300),
                "colour": colours[kind],
                "label": name + _fault_nodes(detail),
            }
        )
    return wins


def _fault_nodes(detail: str) -> str:
    """A short ' n1,n2' suffix naming the nodes of a fault, when the value lists them."""
    try:
        v = json.loads(detail)
    except ValueError:
        return ""
    nodes: object = None
    if isinstance(v, dict):
        nodes = v.get("nodes") or v.get("node") or v.get("targets")
        if nodes is None and isinstance(v.get("grudge"), dict):
            nodes = [k for k, d in v["grudge"].items() if d]
    elif isinstance(v, list) and all(isinstance(x, str) for x in v):
        nodes = v
    if isinstance(nodes, str):
        return " " + nodes
    if isinstance(nodes, list) and nodes:
        return " " + ",".join(str(x) for x in nodes[:6])
    return ""


def _ptext(s: str) -> str:
    """Text for plotly labels, which read a subset of HTML: show ``<``, ``>`` and ``&`` literally."""
    return s.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def _nice_bucket(span_s: float, target: int = 150) -> float:
    raw = max(span_s / target, 1e-3)
    mag = 10 ** math.floor(math.log10(raw))
    for m in (1, 2, 5, 10):
        if raw <= m * mag:
            return float(m * mag)
    return float(10 * mag)


def _downsample(xs: list[float], ys: list[float], ids: list[int], cap: int) -> list[int]:
    """Indices to keep: all if few, else each time bucket's lowest and highest latency point."""
    n = len(xs)
    if n <= cap:
        return list(range(n))
    lo, hi = min(xs), max(xs)
    buckets = max(cap // 2, 1)
    width = (hi - lo) / buckets or 1.0
    best: dict[int, tuple[int, int]] = {}
    for m in range(n):
        b = min(int((xs[m] - lo) / width), buckets - 1)
        cur = best.get(b)
        if cur is None:
            best[b] = (m, m)
        else:
            a, z = cur
            best[b] = (m if ys[m] < ys[a] else a, m if ys[m] > ys[z] else z)
    keep = sorted({m for pair in best.values() for m in pair})
    return keep


def perf_figures(pairs: Paired, end_ns: int) -> dict[str, object]:
    """Plotly traces for latency-raw (per f and type) and rate (ops/s per f and type).

    Follows jepsen.checker.perf: latency is completion minus invocation, plotted at the invocation
    time; rate counts completions per bucket. Ops never completed are left out of latency.
    """
    symbols = ["circle", "square", "diamond", "triangle-up", "x", "cross", "star", "triangle-down"]
    dashes = ["solid", "dot", "dash", "longdash", "dashdot", "longdashdot"]
    span_s = max(end_ns / 1e9, 1e-3)
    done_n = sum(1 for e in pairs.e if e >= 0)
    # enough completions per bucket that the rate is not all noise: 20 to 150 buckets
    width = _nice_bucket(span_s, max(20, min(150, done_n // 15)))
    nb = int(span_s / width) + 1
    lat_traces: list[dict[str, Any]] = []
    rate_traces: list[dict[str, object]] = []
    groups: dict[tuple[int, int], list[int]] = defaultdict(list)
    for m in range(len(pairs.p)):
        groups[(pairs.f[m], pairs.t[m])].append(m)
    total_points = 0
    # SVG scatter stays fast up to a few thousand points in all, and avoids WebGL set-up
    n_all = max(len(pairs.p), 1)
    for (fi, ti), ms in sorted(groups.items()):
        # shares follow the trace sizes so that rare fail/info ops do not look as common as ok ones
        per_trace = max(LATENCY_MIN_PER_TRACE, LATENCY_POINTS_TOTAL * len(ms) // n_all)
        f = _ptext(pairs.fs[fi])
        typ = TYPE_ORDER[ti]
        done = [m for m in ms if pairs.e[m] >= 0]
        xs = [pairs.s[m] / 1e6 for m in done]
        ys = [(pairs.e[m] - pairs.s[m]) / 1e3 for m in done]
        ids = [pairs.i[m] for m in done]
        keep = _downsample(xs, ys, ids, per_trace)
        total_points += len(keep)
        name = f"{f} {typ}"
        if len(keep) < len(done):
            name += f" ({len(keep)} of {len(done)} shown)"
        lat_traces.append(
            {
                "type": "scattergl",
                "mode": "markers",
                "name": name,
                "legendgroup": f,
                "x": [round(xs[m], 6) for m in keep],
                "y": [round(ys[m], 3) for m in keep],
                "customdata": [[ids[m], _ptext(pairs.procs[pairs.p[done[m]]])] for m in keep],
                "marker": {
                    "color": TYPE_COLOURS[typ],
                    "symbol": symbols[fi % len(symbols)],
                    "size": 5,
                    "opacity": 0.75,
                },
                "hovertemplate": f"{f} {typ}<br>op #%{{customdata[0]}}, process %{{customdata[1]}}"
                "<br>invoked %{x:.3f} s<br>latency %{y:.2f} ms<extra></extra>",
            }
        )
        counts = [0] * nb
        for m in done:
            b = min(int(pairs.e[m] / 1e6 / width), nb - 1)
            counts[b] += 1
        rate_traces.append(
            {
                "type": "scatter",
                "mode": "lines",
                "name": f"{f} {typ}",
                "legendgroup": f,
                "x": [round(b * width, 6) for b in range(nb)],
                "y": [round(c / width, 3) for c in counts],
                "line": {
                    "color": TYPE_COLOURS[typ],
                    "dash": dashes[fi % len(dashes)],
                    "shape": "hv",
                    "width": 1.6,
                },
                "hovertemplate": f"{f} {typ}<br>%{{x:.2f}} s: %{{y:.1f}} ops/s<extra></extra>",
            }
        )
    ys_all = [y for t in lat_traces for y in t["y"] if y > 0]
    # powers of ten only when latencies span decades; plotly's 2-5 minor labels crowd otherwise
    decades = math.log10(max(ys_all) / min(ys_all)) if ys_all else 0.0
    return {
        "latency": lat_traces,
        "rate": rate_traces,
        "bucket_s": width,
        "points": total_points,
        "lat_dtick": 1 if decades >= 2 else None,
    }


def availability_windows(
    results: dict[str, Any] | None, pairs: Paired, wins: list[dict[str, object]], end_ns: int
) -> tuple[list[dict[str, Any]], str]:
    """Unavailability windows (ns) as ``results.json`` gives them (the perf checker, whose rule is
    :class:`chaos.history.analysis.Availability`); the report computes none of its own.

    Returns (windows, source description); no windows when results.json has no perf result.
    """
    perf = ((results or {}).get("checkers") or {}).get("perf") or {}
    av = perf.get("availability")
    out: list[dict[str, Any]] = []
    if not isinstance(av, dict) or not isinstance(av.get("windows"), list):
        return out, "none: results.json has no perf checker result"
    for w in av["windows"]:
        if not isinstance(w, dict) or not isinstance(w.get("start_s"), int | float):
            continue
        e = w.get("end_s")  # null: until the end of the history
        note = w.get("summary") if isinstance(w.get("summary"), str) else ""
        out.append(
            {
                "start": int(w["start_s"] * 1e9),
                "end": int(e * 1e9) if isinstance(e, int | float) else end_ns,
                "f": w.get("first_ok_f"),
                "note": _short(note, 300),
            }
        )
    source = "perf checker (results.json)"
    ends: dict[str, list[int]] = {t: [] for t in TYPE_ORDER}
    for m in range(len(pairs.p)):
        if pairs.e[m] >= 0:
            ends[TYPE_ORDER[pairs.t[m]]].append(pairs.e[m])
    for lst in ends.values():
        lst.sort()
    for w in out:
        w["faults"] = sorted({x["label"] for x in wins if x["start"] < w["end"] and x["end"] > w["start"]})
        s_us, e_us = w["start"] // 1000, w["end"] // 1000
        # completions strictly inside the window (its ends are the ok completions around it)
        w["counts"] = {
            t: bisect.bisect_left(lst, e_us) - bisect.bisect_right(lst, s_us) for t, lst in ends.items()
        }
    return out, source


def log_anomaly_rows(results: dict[str, Any] | None, history: Sequence[Op]) -> list[dict[str, Any]]:
    """Rows of the log-anomaly table: one per (kind, value), with the ops that wrote and read it.

    ``lost``/``duplicated``/``unexpected``/``reordered``/``divergent`` elements may be plain values
    or objects with a ``value`` field (chaos.history.checkers.logcheck); writers are the ``append`` ops with
    that value, readers the ok ``read`` ops whose list holds it (with the log indexes).
    """
    log = ((results or {}).get("checkers") or {}).get("log")
    if not isinstance(log, dict):
        return []
    kinds = ("lost", "duplicated", "unexpected", "reordered", "divergent")
    wanted: list[tuple[str, object, Any]] = []
    for kind in kinds:
        items = log.get(kind)
        if not isinstance(items, list):
            continue
        for it in items:
            if isinstance(it, dict):
                val = it.get("value", it.get("v"))
                detail = {k: v for k, v in it.items() if k not in ("value", "v")}
                if "value" not in it and "v" not in it and "index" in it:
                    val = None  # divergent entries are per log index, not per value
                    detail = it
                wanted.append((kind, val, detail or None))
            else:
                wanted.append((kind, it, None))
    if not wanted:
        return []
    vals = {json.dumps(v, sort_keys=True) for _k, v, _d in wanted if v is not None}
    writers: dict[str, list[str]] = defaultdict(list)
    readers: dict[str, list[str]] = defaultdict(list)
    for n, o in enumerate(history):
        if o.process == NEMESIS:
            continue
        proc = str(o.process)
        idx = o.index if o.index >= 0 else n
        if o.type == "invoke":
            if o.f == "append":
                kv = json.dumps(o.value, sort_keys=True)
                if kv in vals:
                    writers[kv].append(f"#{idx} p{proc} invoke")
            continue
        if o.f == "append":
            kv = json.dumps(o.value, sort_keys=True)
            if kv in vals:
                li = o.extra.get("log_index") if o.extra else None
                writers[kv].append(f"#{idx} p{proc} {o.type}" + (f" @index {li}" if li is not None else ""))
        elif o.f == "read" and o.type == "ok" and isinstance(o.value, list):
            where: dict[str, list[int]] = defaultdict(list)
            for pos, x in enumerate(o.value):
                kx = json.dumps(x, sort_keys=True)
                if x is not None and kx in vals:
                    where[kx].append(pos)
            for kx, positions in where.items():
                pos_s = ",".join(str(p) for p in positions[:8]) + ("…" if len(positions) > 8 else "")
                readers[kx].append(f"#{idx} {o.node or 'p' + proc} @index {pos_s}")
    rows = []
    for kind, val, detail in wanted[:MAX_ANOMALY_ROWS]:
        kv = json.dumps(val, sort_keys=True)
        rows.append(
            {
                "kind": kind,
                "value": _short(val, 200) if val is not None or not detail else "",
                "detail": _short(detail, 300) if detail else "",
                "wrote": writers.get(kv, [])[:20],
                "read": readers.get(kv, [])[:20],
            }
        )
    if len(wanted) > MAX_ANOMALY_ROWS:
        rows.append(
            {
                "kind": "…",
                "value": f"{len(wanted) - MAX_ANOMALY_ROWS} more in results.json",
                "detail": "",
                "wrote": [],
                "read": [],
            }
        )
    return rows
