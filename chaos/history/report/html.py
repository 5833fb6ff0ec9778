"""The run's HTML report (``index.html``), ``chaos report``, and the terminal closing summary.

A report is one self-contained HTML file written into the run directory (see docs/design.md, "Run
directory"): styles, scripts (plotly.js from the installed ``plotly`` package) and the data are all
inlined, so it opens from disk without network. It follows what Jepsen's checkers draw
(``jepsen.checker.perf``: latency-raw and rate plots with nemesis windows shaded;
``jepsen.checker.timeline``: one lane per process) and porcupine's visualizer for counterexamples
(one row per process, ops as boxes, the longest linearizable prefix, the op that cannot be placed).

Every history value reaches the page only through one ``<script type="application/json">`` block
whose ``<``, ``>`` and ``&`` are escaped as ``\\u003c`` etc.; the page's script sets text with
``textContent`` only, so a value such as ``<script>`` shows as text.

The data sent to the browser is prepared here: ops are paired (invoke with completion) and stored
column-wise, latency points are downsampled per (f, type) trace to keep the page fast for 100,000-op
histories, rates are bucketed. The history is read, paired and cut into fault windows by the one
analysis core (:mod:`chaos.history.analysis`); verdicts and availability come from ``results.json``
only, never recomputed here.
"""

from __future__ import annotations

import bisect
import datetime as _dt
import json
import math
import os
import urllib.parse
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import click
import jinja2
from rich.table import Table
from rich.text import Text

from chaos.history import plots, report_jepsen, report_txn
from chaos.history.analysis import (
    ABORTED,
    NO_MATCH,
    HistoryError,
    NemesisPairing,
    fail_class,
    fault_windows,
    read_history,
)
from chaos.history.op import NEMESIS, Op
from chaos.history.perf import ops_line
from chaos.history.summary import counterexamples

TEMPLATES = Path(__file__).resolve().parent / "templates"

# Cap on latency points in all (split over the (f, type) traces, at least LATENCY_MIN_PER_TRACE each);
# beyond it each time bucket of a trace keeps its lowest and highest point.
LATENCY_POINTS_TOTAL = 4000
LATENCY_MIN_PER_TRACE = 250
# Cap on rows of the log-anomaly table (the full lists stay in results.json).
MAX_ANOMALY_ROWS = 2000
# Cap on characters of a value shown in the timeline tooltip.
MAX_VALUE_CHARS = 120

TYPE_ORDER = ("ok", "fail", "info")
TYPE_COLOURS = {"ok": "#2b83ba", "fail": "#d7191c", "info": "#fdae61"}
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


# The PNG plots written into the run directory beside index.html (Jepsen's file names)
PLOT_FILES = ("latency-raw.png", "latency-quantiles.png", "rate.png")


class ReportError(Exception):
    """A run directory or one of its files cannot be read; the message names the file."""


# --------------------------------------------------------------------------------------------
# reading a run directory


def _read_json(path: Path, what: str) -> Any:
    try:
        with path.open(encoding="utf-8") as fh:
            return json.load(fh)
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as e:
        raise ReportError(f"{what} {path}: expected a JSON document ({e})") from e


def read_history_lines(path: Path) -> tuple[list[dict[str, Any]], int]:
    """Read ``history.jsonl`` with the validating reader every command uses
    (:func:`chaos.history.analysis.read_history`; docs/design.md, "Ops and histories").

    Returns (ops as dicts, number of lines skipped: a torn last line of a run killed while
    writing). A malformed history raises ReportError naming the file and line.
    """
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return [], 0
    except OSError as e:
        raise ReportError(f"history {path}: cannot be read ({e})") from e
    try:
        ops = [op.to_dict() for op in read_history(path)]
    except HistoryError as e:
        raise ReportError(f"history {e}") from None
    lines = sum(1 for line in data.split(b"\n") if line.strip())
    return ops, lines - len(ops)


@dataclass
class Run:
    """A run directory's contents as the report needs them."""

    path: Path
    test: dict[str, Any]
    results: dict[str, Any] | None
    history: list[dict[str, Any]]
    skipped_lines: int = 0
    files: list[str] = field(default_factory=list)


def load_run(run_dir: str | os.PathLike[str]) -> Run:
    """Load test.json, results.json and history.jsonl of ``run_dir``.

    ``run_dir`` may be a link such as ``store/latest``: the run is named by the directory it resolves
    to. Raises ReportError if ``run_dir`` is not a directory or holds neither a history nor a test.json.
    """
    path = Path(run_dir)
    if not path.is_dir():
        raise ReportError(f"run directory {path}: expected an existing directory")
    path = path.resolve()
    test = _read_json(path / "test.json", "test options")
    results = _read_json(path / "results.json", "results")
    hist_path = path / "history.jsonl"
    if test is None and not hist_path.exists():
        raise ReportError(f"run directory {path}: expected history.jsonl or test.json in it")
    if test is not None and not isinstance(test, dict):
        raise ReportError(f"test options {path / 'test.json'}: expected a JSON object")
    if results is not None and not isinstance(results, dict):
        raise ReportError(f"results {path / 'results.json'}: expected a JSON object")
    history, skipped = read_history_lines(hist_path)
    return Run(path, test or {}, results, history, skipped, _list_files(path))


def _list_files(path: Path) -> list[str]:
    """Raw files worth linking: history, test, results, logs, and everything under nodes/."""
    names = ("history.jsonl", "history.txt", "test.json", "results.json", "chaos.log", *PLOT_FILES)
    out = [n for n in names if (path / n).is_file()]
    nodes = path / "nodes"
    if nodes.is_dir():
        for root, _dirs, files in sorted(os.walk(nodes)):
            for f in sorted(files):
                out.append(str((Path(root) / f).relative_to(path)))
    return out


# --------------------------------------------------------------------------------------------
# turning the history into page data


_ENC = json.JSONEncoder(separators=(",", ":"), default=str, ensure_ascii=False)


def _short(v: Any, limit: int = MAX_VALUE_CHARS) -> str:
    if v is None:
        return "null"
    if type(v) is int:
        return str(v)
    s = v if isinstance(v, str) else _ENC.encode(v)
    return s if len(s) <= limit else s[: limit - 1] + "…"


def _proc_sort_key(p: Any) -> tuple[int, float, str]:
    if p == "nemesis":
        return (0, 0.0, "")
    if isinstance(p, int | float) and not isinstance(p, bool):
        return (1, float(p), "")
    return (2, 0.0, str(p))


@dataclass
class Paired:
    """Client ops paired invoke→completion, column-wise (what the timeline and plots use)."""

    procs: list[str]
    fs: list[str]
    p: list[int] = field(default_factory=list)
    f: list[int] = field(default_factory=list)
    t: list[int] = field(default_factory=list)  # index into TYPE_ORDER; 2 also for never completed
    s: list[int] = field(default_factory=list)  # invoke time, µs
    e: list[int] = field(default_factory=list)  # completion time, µs; -1 never completed
    i: list[int] = field(default_factory=list)  # history index of the invocation
    j: list[int] = field(default_factory=list)  # history index of the completion; -1 none
    v: list[str] = field(default_factory=list)  # "invoke value → completion value"
    k: list[str] = field(default_factory=list)  # key or ""
    n: list[str] = field(default_factory=list)  # node or ""
    err: list[str] = field(default_factory=list)
    nm: list[int] = field(default_factory=list)  # 1: a fail that was an answered no (fail_class)
    ab: list[int] = field(default_factory=list)  # 1: a fail the system aborted (fail_class)


def pair_ops(history: list[dict[str, Any]]) -> tuple[Paired, list[dict[str, Any]], int]:
    """Pair client invocations with completions (a process runs one op at a time, jepsen.history).

    Returns (client pairs, nemesis pairs as dicts, end time in ns). An invocation with no
    completion is kept with completion time -1 (drawn to the end of the history, as Jepsen does).
    """
    procs_set = {str(o["process"]): o["process"] for o in history}
    procs = [str(p) for p in sorted(procs_set.values(), key=_proc_sort_key)]
    pidx = {p: n for n, p in enumerate(procs)}
    fidx: dict[str, int] = {}
    out = Paired(procs=procs, fs=[])
    pending: dict[str, int] = {}
    nem: list[dict[str, Any]] = []
    nem_pending: dict[str, dict[str, Any]] = {}
    nem_pairing = NemesisPairing()
    end = 0
    for n, o in enumerate(history):
        idx = int(o.get("index", n)) if isinstance(o.get("index", n), int) else n
        time = int(o.get("time") or 0)
        end = max(end, time)
        proc = str(o["process"])
        if proc == "nemesis":
            f = str(o["f"])
            if nem_pairing.step(Op.from_dict(o)) is not None:  # the one pairing rule (analysis)
                inv = nem_pending.pop(f)
                inv["end"] = time
                inv["result"] = o.get("value")
                inv["j"] = idx
            else:
                d = {
                    "f": f,
                    "start": time,
                    "end": None,
                    "value": o.get("value"),
                    "result": None,
                    "i": idx,
                    "j": -1,
                }
                nem_pending[f] = d
                nem.append(d)
            continue
        typ = o["type"]
        if typ == "invoke":
            f = str(o["f"])
            if f not in fidx:
                fidx[f] = len(fidx)
                out.fs.append(f)
            pending[proc] = len(out.p)
            out.p.append(pidx[proc])
            out.f.append(fidx[f])
            out.t.append(2)
            out.s.append(time // 1000)
            out.e.append(-1)
            out.i.append(idx)
            out.j.append(-1)
            out.v.append(_short(o.get("value")))
            out.k.append("" if o.get("key") is None else _short(o.get("key"), 40))
            out.n.append(str(o.get("node") or ""))
            out.err.append("")
            out.nm.append(0)
            out.ab.append(0)
        elif proc in pending:
            m = pending.pop(proc)
            out.t[m] = TYPE_ORDER.index(typ) if typ in TYPE_ORDER else 2
            cls = fail_class(o)
            out.nm[m] = 1 if cls == NO_MATCH else 0
            out.ab[m] = 1 if cls == ABORTED else 0
            out.e[m] = time // 1000
            out.j[m] = idx
            val = o.get("value")
            extra = {k: v for k, v in o.items() if k not in _OP_FIELDS}
            text = out.v[m] + " → " + _short(val)
            if extra:
                text += " " + _short(extra, 60)
            out.v[m] = text[: MAX_VALUE_CHARS * 2]
            if o.get("node") and not out.n[m]:
                out.n[m] = str(o["node"])
            if o.get("error") is not None:
                out.err[m] = _short(o.get("error"), 200)
    return out, nem, end


_OP_FIELDS = {"index", "type", "process", "f", "value", "time", "node", "error", "key"}


def nemesis_colours(test: Any) -> dict[str, str]:
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
    history: list[dict[str, Any]], end: int, known: dict[str, str] | None = None
) -> list[dict[str, Any]]:
    """Fault windows by the one rule of :func:`chaos.history.analysis.fault_windows`: from the
    completion of ``start-<kind>`` to the completion of ``stop-<kind>``.

    Returns dicts ``{kind, start, end, open, label, detail, result, colour}`` with times in ns; a
    window never stopped runs to the end of the history (``end``) and has ``open`` true. Colours
    come from ``known`` (:func:`nemesis_colours`; default :data:`NEMESIS_COLOURS`), a neutral one
    of ``_FALLBACK_COLOURS`` for other kinds.
    """
    known = NEMESIS_COLOURS if known is None else known
    colours: dict[str, str] = {}
    wins: list[dict[str, Any]] = []
    nem = (Op.from_dict(o) for o in history if o.get("process") == NEMESIS)
    for fw in fault_windows(nem):
        kind = fw.kind
        if kind not in colours:
            colours[kind] = known.get(kind) or _FALLBACK_COLOURS[len(colours) % len(_FALLBACK_COLOURS)]
        detail = _short(fw.invocation.value, 300)
        wins.append(
            {
                "kind": kind,
                "start": fw.start,
                "end": fw.end_or(end),
                "open": fw.end is None,
                "detail": detail,
                "result": _short(fw.completion.value, 300),
                "colour": colours[kind],
                "label": kind + _fault_nodes(detail),
            }
        )
    return wins


def _fault_nodes(detail: str) -> str:
    """A short ' n1,n2' suffix naming the nodes of a fault, when the value lists them."""
    try:
        v = json.loads(detail)
    except ValueError:
        return ""
    nodes: Any = None
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


def perf_figures(pairs: Paired, end_ns: int) -> dict[str, Any]:
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
    rate_traces: list[dict[str, Any]] = []
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
    results: dict[str, Any] | None, pairs: Paired, wins: list[dict[str, Any]], end_ns: int
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


def log_anomaly_rows(results: dict[str, Any] | None, history: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Rows of the log-anomaly table: one per (kind, value), with the ops that wrote and read it.

    ``lost``/``duplicated``/``unexpected``/``reordered``/``divergent`` elements may be plain values
    or objects with a ``value`` field (chaos.history.logcheck); writers are the ``append`` ops with
    that value, readers the ok ``read`` ops whose list holds it (with the log indexes).
    """
    log = ((results or {}).get("checkers") or {}).get("log")
    if not isinstance(log, dict):
        return []
    kinds = ("lost", "duplicated", "unexpected", "reordered", "divergent")
    wanted: list[tuple[str, Any, Any]] = []
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
    pending: dict[str, dict[str, Any]] = {}
    for n, o in enumerate(history):
        if o.get("process") == "nemesis":
            continue
        proc = str(o["process"])
        idx = o.get("index", n)
        if o["type"] == "invoke":
            pending[proc] = o
            if o.get("f") == "append":
                kv = json.dumps(o.get("value"), sort_keys=True)
                if kv in vals:
                    writers[kv].append(f"#{idx} p{proc} invoke")
            continue
        pending.pop(proc, None)
        if o.get("f") == "append":
            kv = json.dumps(o.get("value"), sort_keys=True)
            if kv in vals:
                li = o.get("log_index")
                writers[kv].append(
                    f"#{idx} p{proc} {o['type']}" + (f" @index {li}" if li is not None else "")
                )
        elif o.get("f") == "read" and o["type"] == "ok" and isinstance(o.get("value"), list):
            where: dict[str, list[int]] = defaultdict(list)
            for pos, x in enumerate(o["value"]):
                kx = json.dumps(x, sort_keys=True)
                if x is not None and kx in vals:
                    where[kx].append(pos)
            for kx, positions in where.items():
                pos_s = ",".join(str(p) for p in positions[:8]) + ("…" if len(positions) > 8 else "")
                readers[kx].append(f"#{idx} {o.get('node') or 'p' + proc} @index {pos_s}")
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


def _verdict(v: Any) -> str:
    if v is True:
        return "valid"
    if v is False:
        return "invalid"
    return "unknown"


_RANK = {"invalid": 0, "unknown": 1, "valid": 2}


def checker_summaries(results: dict[str, Any] | None) -> list[dict[str, Any]]:
    """One line per checker, failing checkers first (invalid, then unknown, then valid)."""
    checkers = (results or {}).get("checkers") or {}
    out = []
    for name, r in checkers.items():
        if not isinstance(r, dict):
            continue
        verdict = _verdict(r.get("valid"))
        out.append({"name": name, "verdict": verdict, "summary": _checker_line(name, r)})
    out.sort(key=lambda c: (_RANK[c["verdict"]], c["name"]))
    return out


def _checker_line(name: str, r: dict[str, Any]) -> str:
    parts = []
    fails = r.get("failures")
    if isinstance(fails, list) and fails:
        parts.append(
            f"{len(fails)} non-linearizable key{'s' if len(fails) != 1 else ''}: "
            + _short(", ".join(map(str, fails)), 80)
        )
    unk = r.get("unknown")
    if isinstance(unk, list) and unk:
        parts.append(
            f"{len(unk)} undecided key{'s' if len(unk) != 1 else ''}: " + _short(", ".join(map(str, unk)), 80)
        )
    keys = r.get("keys")
    if isinstance(keys, dict) and not parts:
        parts.append(f"{len(keys)} key{'s' if len(keys) != 1 else ''} checked")
    for k in ("lost", "duplicated", "unexpected", "reordered", "divergent"):
        v = r.get(k)
        n = r.get(f"{k}_count")  # chaos.history.logcheck caps the lists and gives the full counts
        if isinstance(n, int) and n:
            parts.append(f"{n} {k}")
        elif isinstance(v, list) and v:
            parts.append(f"{len(v)} {k}")
    for k in ("attempted", "acknowledged"):
        if isinstance(r.get(k), int):
            parts.append(f"{r[k]} {k}")
    if r.get("model"):
        parts.append(f"model {r['model']}")
    if name == "perf" and isinstance(r.get("ops"), dict):
        parts.append(ops_line(r["ops"]))
    if isinstance(r.get("summary"), str) and r["summary"]:  # checkers that say it in one line
        parts.append(r["summary"])
    if r.get("error"):
        parts.append("error: " + _short(r["error"], 120))
    if r.get("cause"):
        parts.append("cause: " + _short(r["cause"], 120))
    return "; ".join(parts)


def counterexample_note(results: dict[str, Any] | None) -> str:
    """What the counterexample section says when it shows none: that every key is linearizable
    only when the ``linear`` checker said valid; for an undecided check, how many keys were not
    decided or not checked and why (no proof either way)."""
    linear = ((results or {}).get("checkers") or {}).get("linear")
    if not isinstance(linear, dict):
        return "No linearizability checker in this run."
    valid = linear.get("valid")
    if valid is True:
        return "Every key is linearizable: no counterexample."
    if valid is False:
        return "Not linearizable, but the checker recorded no counterexample."
    unk = linear.get("unknown") if isinstance(linear.get("unknown"), list) else []
    unchecked = linear.get("not_checked") if isinstance(linear.get("not_checked"), list) else []
    parts = []
    if unk:
        parts.append(f"{len(unk)} key{'s' if len(unk) != 1 else ''} undecided")
    if unchecked:
        parts.append(f"{len(unchecked)} key{'s' if len(unchecked) != 1 else ''} not checked")
    why = linear.get("cause") or linear.get("error")
    text = "Linearizability is unknown" + (f" ({', '.join(parts)})" if parts else "")
    text += f": {_short(why, 200)}" if why else ""
    return text + ". No counterexample, and no proof of linearizability either."


def _fmt_duration(ns: float) -> str:
    s = ns / 1e9
    if s < 60:
        return f"{s:.1f} s"
    m, s = divmod(int(s), 60)
    h, m = divmod(m, 60)
    return f"{h}h{m:02d}m{s:02d}s" if h else f"{m}m{s:02d}s"


def _fmt_start(v: Any) -> str:
    """Wall-clock start: a unix timestamp (s) as UTC ISO text; anything else as given."""
    if isinstance(v, int | float) and not isinstance(v, bool) and 1e8 < v < 1e11:
        return _dt.datetime.fromtimestamp(v, _dt.UTC).strftime("%Y-%m-%d %H:%M:%S.%f")[:-3] + " UTC"
    return str(v)


def _meta(run: Run, end_ns: int, n_client: int) -> dict[str, Any]:
    t = run.test
    name = t.get("name") or run.path.parent.name
    nodes = t.get("nodes") or []
    node_names = (
        [n.get("name", str(n)) if isinstance(n, dict) else str(n) for n in nodes]
        if isinstance(nodes, list)
        else []
    )
    nem = t.get("nemesis", t.get("nemeses"))
    if isinstance(nem, list):
        nem = ", ".join(str(x) for x in nem) or "none"
    opts = t.get("opts") if isinstance(t.get("opts"), dict) else None
    options = {k: _short(v, 300) for k, v in (opts or t).items() if k not in ("nodes", "versions")}
    versions = t.get("versions")
    dur = t.get("duration_ns") or t.get("duration")
    if isinstance(dur, int | float) and not t.get("duration_ns") and dur < 1e6:
        dur = dur * 1e9  # seconds
    return {
        "name": str(name),
        "run": run.path.name,
        "workload": str(t.get("workload") or (opts or {}).get("workload") or "?"),
        "nemesis": str(nem if nem is not None else (opts or {}).get("nemesis") or "none"),
        "nodes": node_names,
        "versions": versions if isinstance(versions, dict) else ({"": versions} if versions else {}),
        "seed": t.get("seed", (opts or {}).get("seed")),
        "start": _fmt_start(t.get("start_time") or t.get("start") or run.path.name),
        "duration": _fmt_duration(float(dur) if isinstance(dur, int | float) else end_ns),
        "ops": len(run.history),
        "client_ops": n_client,
        "options": options,
        "skipped_lines": run.skipped_lines,
    }


def build_data(run: Run) -> dict[str, Any]:
    """Everything the page draws, as one JSON-ready dict (see templates/report.js for its use)."""
    pairs, nem, end = pair_ops(run.history)
    wins = nemesis_windows(run.history, end, nemesis_colours(run.test))
    figs = perf_figures(pairs, end)
    rate, quant = plots.rate_series(pairs, end), plots.quantile_series(pairs, end)
    avail, avail_src = availability_windows(run.results, pairs, wins, end)
    verdict = _verdict((run.results or {}).get("valid")) if run.results is not None else "unknown"
    return {
        "verdict": verdict,
        "has_results": run.results is not None,
        "checkers": checker_summaries(run.results),
        "meta": _meta(run, end, len(pairs.p)),
        "end_us": end // 1000,
        "procs": pairs.procs,
        "fs": pairs.fs,
        "types": list(TYPE_ORDER),
        "type_colours": TYPE_COLOURS,
        "ops": {
            "p": pairs.p,
            "f": pairs.f,
            "t": pairs.t,
            "s": pairs.s,
            "e": pairs.e,
            "i": pairs.i,
            "j": pairs.j,
            "v": pairs.v,
            "k": pairs.k,
            "n": pairs.n,
            "err": pairs.err,
        },
        "nemesis": [
            {
                "kind": w["kind"],
                "label": w["label"],
                "plot_label": _ptext(w["label"]),
                "start_s": w["start"] / 1e9,
                "end_s": w["end"] / 1e9,
                "open": w["open"],
                "detail": w["detail"],
                "result": w["result"],
                "colour": w["colour"],
            }
            for w in wins
        ],
        "nemesis_ops": [
            {
                "f": d["f"],
                "start_s": d["start"] / 1e9,
                "end_s": (d["end"] if d["end"] is not None else d["start"]) / 1e9,
                "value": _short(d["value"], 300),
                "result": _short(d["result"], 300),
                "i": d["i"],
            }
            for d in nem
        ],
        "latency": figs["latency"],
        "rate": plots.rate_traces(rate),
        "rate_bucket_s": rate["bucket_s"],
        "quantiles": plots.quantile_traces(quant),
        "quantile_bucket_s": quant["bucket_s"],
        "lat_dtick": figs["lat_dtick"],
        "availability": [
            {
                "start_s": w["start"] / 1e9,
                "end_s": w["end"] / 1e9,
                "f": w.get("f"),
                "faults": w["faults"],
                "counts": w["counts"],
                "note": w["note"],
            }
            for w in avail
        ],
        "availability_source": avail_src,
        "counterexamples": counterexamples(run.results),
        "counterexample_note": counterexample_note(run.results),
        "log_rows": log_anomaly_rows(run.results, run.history),
        "files": run.files,
    }


def json_for_script(data: Any) -> str:
    """JSON safe inside ``<script type="application/json">``: ``<``, ``>``, ``&``, U+2028/9 escaped."""
    s = json.dumps(data, separators=(",", ":"), default=str, ensure_ascii=False, allow_nan=False)
    return (
        s.replace("&", "\\u0026")
        .replace("<", "\\u003c")
        .replace(">", "\\u003e")
        .replace("\u2028", "\\u2028")
        .replace("\u2029", "\\u2029")
    )


def _inline_js(text: str) -> str:
    # A literal "</script" inside inlined code would end the element early.
    return text.replace("</script", "<\\/script")


def _plotly_js() -> str:
    import plotly

    path = Path(plotly.__file__).resolve().parent / "package_data" / "plotly.min.js"
    try:
        return path.read_text(encoding="utf-8")
    except OSError as e:
        raise ReportError(f"plotly.js {path}: expected the installed plotly package's bundle ({e})") from e


def render_html(run: Run) -> str:
    """The report page as a string (see ``write_report``)."""
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(TEMPLATES)),
        autoescape=jinja2.select_autoescape(["html"], default=True),
        undefined=jinja2.StrictUndefined,
    )
    data = build_data(run)
    tpl = env.get_template("report.html")
    return tpl.render(
        title=f"{data['meta']['name']} {data['meta']['run']}: {data['verdict']}",
        verdict=data["verdict"],
        meta=data["meta"],
        checkers=data["checkers"],
        data_json=jinja2.utils.markupsafe.Markup(json_for_script(data)),
        css=jinja2.utils.markupsafe.Markup((TEMPLATES / "report.css").read_text(encoding="utf-8")),
        report_js=jinja2.utils.markupsafe.Markup(
            _inline_js((TEMPLATES / "report.js").read_text(encoding="utf-8"))
        ),
        plotly_js=jinja2.utils.markupsafe.Markup(_inline_js(_plotly_js())),
        generated=_dt.datetime.now(_dt.UTC).strftime("%Y-%m-%d %H:%M:%S UTC"),
        data_files=[(urllib.parse.quote(f), f) for f in run.files],
        server_log_rows=_server_log_rows(run.results),
        # transactions: the anomaly counts in the banner, each anomaly's cycle drawn (Elle results)
        txn_band=jinja2.utils.markupsafe.Markup(report_txn.anomaly_band_html(run.results)),
        txn_section=jinja2.utils.markupsafe.Markup(
            report_txn.txn_section_html(run.results) + report_jepsen.sections_html(run.results)
        ),
        **_fault_sections(run.results),
    )


def _fault_sections(results: dict[str, Any] | None) -> dict[str, Any]:
    # the "faults" section (chaos.history.report_faults): per kind, per window with leadership
    from chaos.history import report_faults

    r = report_faults.faults_result(results)
    return {
        "fault_kinds": report_faults.kind_rows(results),
        "fault_windows": report_faults.window_rows(results),
        "fault_summary": (r or {}).get("summary") or "",
        "split_brain": list(((r or {}).get("leadership") or {}).get("split_brain") or []),
    }


def _server_log_rows(results: dict[str, Any] | None) -> list[dict[str, Any]]:
    # the "server log anomalies" section (chaos.history.nodelogs), with a link to each quoted log
    from chaos.history.nodelogs import report_rows

    rows = report_rows(results)
    for row in rows:
        for ln in row["lines"]:
            ln["href"] = urllib.parse.quote(str(ln.get("file", "")))
    return rows


def write_plot_pngs(run: Run) -> list[Path]:
    """``latency-raw.png``, ``latency-quantiles.png`` and ``rate.png`` in the run directory
    (:func:`chaos.history.plots.write_pngs`); none when matplotlib is not installed (logged)."""
    import logging

    pairs, _nem, end = pair_ops(run.history)
    wins = nemesis_windows(run.history, end, nemesis_colours(run.test))
    try:
        return plots.write_pngs(run.path, pairs, wins, end)
    except ImportError as e:
        logging.getLogger("chaos.report").warning("no PNG plots (matplotlib: %s)", e)
        return []


def write_report(run_dir: str | os.PathLike[str]) -> Path:
    """Write ``index.html`` into ``run_dir`` and return its path.

    Reads ``history.jsonl``, ``test.json`` and ``results.json`` (docs/design.md); writes the PNG
    plots beside it (:func:`write_plot_pngs`). A missing
    results.json gives an "unknown" banner (checkers not run). Writes atomically (temp file, rename).
    Raises ReportError for a missing directory or unreadable files.
    """
    run = load_run(run_dir)
    write_plot_pngs(run)
    run.files = _list_files(run.path)
    html = render_html(run)
    out = run.path / "index.html"
    tmp = run.path / ".index.html.tmp"
    tmp.write_text(html, encoding="utf-8")
    os.replace(tmp, out)
    return out


# --------------------------------------------------------------------------------------------
# terminal summary

_VERDICT_STYLE = {"valid": "bold green", "invalid": "bold red", "unknown": "bold yellow"}


def _ops_by_f(results: dict[str, Any] | None, hp: Path) -> tuple[dict[str, dict[str, int]], int]:
    """Per f, the counts of ok / fail / info and of the fails that were no match or aborted (from
    the history, else the stats checker's ``by_f``); and how many faults were requested."""
    by_f: dict[str, dict[str, int]] = defaultdict(
        lambda: {"ok": 0, "fail": 0, "info": 0, "no_match": 0, "aborted": 0}
    )
    nemesis_ops = 0
    try:
        hist, _ = read_history_lines(hp)
    except ReportError:
        hist = []
    if hist:
        pairs, nem, _end = pair_ops(hist)
        for m in range(len(pairs.p)):
            counts = by_f[pairs.fs[pairs.f[m]]]
            counts[TYPE_ORDER[pairs.t[m]]] += 1
            counts["no_match"] += pairs.nm[m]
            counts["aborted"] += pairs.ab[m]
        nemesis_ops = sum(1 for d in nem if d["f"].startswith("start-"))
    else:
        stats = ((results or {}).get("checkers") or {}).get("stats") or {}
        for f, c in (stats.get("by_f") or {}).items():
            if isinstance(c, dict):
                for t in TYPE_ORDER:
                    by_f[str(f)][t] = int(c.get(t, 0) or 0)
    return by_f, nemesis_ops


def _ops_table(by_f: dict[str, dict[str, int]]) -> Table:
    """The "ops by f and type" table, fails apart, with a total row."""
    ops = Table(title="ops by f and type", title_justify="left", expand=False)
    ops.add_column("f")
    ops.add_column("ok", justify="right", style="green")
    ops.add_column("fail: no match", justify="right", style="magenta")
    aborted = any(c.get("aborted") for c in by_f.values())
    if aborted:  # a definite failure the system chose (chaos.api.Aborted), not an outage
        ops.add_column("fail: aborted", justify="right", style="magenta")
    ops.add_column("fail: unavailable", justify="right", style="red")
    ops.add_column("info", justify="right", style="yellow")
    tot = {"ok": 0, "fail": 0, "info": 0, "no_match": 0, "aborted": 0}
    for f in sorted(by_f):
        ops.add_row(f, *_op_cells(by_f[f], aborted), end_section=f == max(by_f))
        for t in tot:
            tot[t] += by_f[f].get(t, 0)
    ops.add_row(Text("total", style="bold"), *_op_cells(tot, aborted))
    return ops


def summary_table(
    results: dict[str, Any] | None,
    history_path: str | os.PathLike[str],
    checkers_table: bool = True,
    compact: bool = False,
) -> Table:
    """The closing summary's tables: ops by f and type (fails apart), checker verdicts (unless
    ``checkers_table`` is false: :mod:`chaos.history.summary` gives one line per checker after
    the tables instead), faults and leadership, anomalies, the report's path. The verdict comes
    last, after these (:func:`chaos.history.summary.print_run_summary`).

    ``results`` is the results.json dict (None if the checkers did not run); ``history_path`` is the
    run's history.jsonl, whose directory holds ``index.html``. Counts come from the history (the
    stats checker's ``by_f`` when the history cannot be read). ``compact`` (a valid run): no ops
    table and no fault tables, which the report holds; client errors, the faults' caption and the
    report's path stay.
    """
    hp = Path(history_path)
    by_f, nemesis_ops = _ops_by_f(results, hp)
    outer = Table.grid(padding=(0, 0))
    outer.add_column()
    outer.add_row(
        Text(
            "Run summary" + (" (ops by f, fault windows and leadership: in the report)" if compact else ""),
            style="bold",
        )
    )
    ops = _ops_table(by_f)
    from chaos.history import report_faults

    fault_caption = report_faults.caption(results)  # took effect, not merely requested
    if fault_caption is None and nemesis_ops:
        ops.caption = f"{nemesis_ops} nemesis fault{'s' if nemesis_ops != 1 else ''} requested"
        ops.caption_justify = "left"
    if not compact:
        outer.add_row(ops)
    elif ops.caption:
        outer.add_row(Text(str(ops.caption)))
    crashed = client_errors_row(results)
    if crashed is not None:
        outer.add_row(Text(f"client errors: {crashed}", style="bold yellow"))
    if fault_caption is not None and nemesis_ops:
        outer.add_row(Text(fault_caption))
    checkers = checker_summaries(results)
    chk = Table(title="checkers", title_justify="left", expand=False)
    chk.add_column("checker")
    chk.add_column("verdict")
    chk.add_column("details", overflow="fold")
    for c in checkers:
        chk.add_row(
            Text(c["name"]), Text(c["verdict"], style=_VERDICT_STYLE[c["verdict"]]), Text(c["summary"])
        )
    if not checkers:
        chk.add_row("none", Text("unknown", style=_VERDICT_STYLE["unknown"]), "results.json missing")
    if checkers_table or not checkers:
        outer.add_row(chk)
    for part in [] if compact else report_faults.summary_tables(results):
        outer.add_row(part)
    anomalies = _anomaly_counts(results)
    if anomalies:
        an = Table(title="anomalies", title_justify="left", expand=False)
        an.add_column("anomaly")
        an.add_column("count", justify="right", style="red")
        for k, v in anomalies.items():
            an.add_row(k, str(v))
        outer.add_row(an)
    report = hp.parent / "index.html"
    outer.add_row(
        Text.assemble(
            "report: ", (str(report), "bold cyan") if report.exists() else (f"{report} (not written)", "dim")
        )
    )
    return outer


def _op_cells(c: dict[str, int], aborted: bool = False) -> list[str]:
    """ok, fail that was an answered no, (fail the system aborted,) fail that was the DB not
    serving, info."""
    ab = int(c.get("aborted", 0))
    mid = [str(ab)] if aborted else []
    return [str(c["ok"]), str(c["no_match"]), *mid, str(c["fail"] - c["no_match"] - ab), str(c["info"])]


def client_errors_row(results: dict[str, Any] | None) -> str | None:
    """The "client errors" row (``ValueError: ... at etcd_db.py:42, 1,499 of 1,499 ops``) of a
    run whose client code crashed, else None (:func:`chaos.history.clienterrors.row`)."""
    from chaos.history.clienterrors import NAME, row

    return row(((results or {}).get("checkers") or {}).get(NAME))


def _anomaly_counts(results: dict[str, Any] | None) -> dict[str, int]:
    out: dict[str, int] = {}
    checkers = (results or {}).get("checkers") or {}
    lin = checkers.get("linear")
    if isinstance(lin, dict) and isinstance(lin.get("failures"), list) and lin["failures"]:
        out["non-linearizable keys"] = len(lin["failures"])
    log = checkers.get("log")
    if isinstance(log, dict):
        for k in ("lost", "duplicated", "unexpected", "reordered", "divergent"):
            if isinstance(log.get(f"{k}_count"), int) and log[f"{k}_count"]:
                out[k] = log[f"{k}_count"]
            elif isinstance(log.get(k), list) and log[k]:
                out[k] = len(log[k])
    return out


class RunProgress:
    """Rich live progress for a running test: elapsed / limit, ops per second, current faults, leader.

    For the runner (issue 8, "Terminal"); use as a context manager and call ``update`` from any
    thread as ops complete::

        with RunProgress(time_limit_s=60) as p:
            p.update(ops=1, faults=["partition"], leader="n2")

    ``ops`` adds completed client ops; ops/s is over the last ``window_s`` seconds (monotonic clock).
    ``faults`` replaces the list of active faults; ``leader`` the node that claims leadership.
    Raises ValueError for a time limit that is not a positive number.
    """

    def __init__(self, time_limit_s: float, console: Any = None, window_s: float = 5.0) -> None:
        import threading
        import time as _time

        from rich.console import Console
        from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

        if not isinstance(time_limit_s, int | float) or time_limit_s <= 0:
            raise ValueError(f"time_limit_s: expected a positive number of seconds, got {time_limit_s!r}")
        self._time = _time.monotonic
        self._lock = threading.Lock()
        self.limit = float(time_limit_s)
        self.window = window_s
        self.total_ops = 0
        self.faults: list[str] = []
        self.leader: str | None = None
        self._stamps: list[tuple[float, int]] = []
        self.progress = Progress(
            TextColumn("[bold]run"),
            BarColumn(),
            TimeElapsedColumn(),
            TextColumn("/ {task.fields[limit]}"),
            TextColumn("{task.fields[rate]} ops/s"),
            TextColumn("{task.fields[ops]} ops"),
            TextColumn("faults: {task.fields[faults]}"),
            TextColumn("leader: {task.fields[leader]}"),
            console=console or Console(stderr=True),
            transient=False,
        )
        self.task = self.progress.add_task(
            "run", total=self.limit, limit=f"{self.limit:.0f} s", rate="0.0", ops=0, faults="none", leader="?"
        )
        self._start = self._time()

    def __enter__(self) -> RunProgress:
        self._start = self._time()
        self.progress.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.refresh()
        self.progress.stop()

    def rate(self) -> float:
        """Completed ops per second over the last ``window_s`` seconds."""
        now = self._time()
        with self._lock:
            self._stamps = [(t, n) for t, n in self._stamps if now - t <= self.window]
            n = sum(k for _t, k in self._stamps)
        span = min(self.window, max(now - self._start, 1e-3))
        return n / span

    def update(self, ops: int = 0, faults: list[str] | None = None, leader: str | None = None) -> None:
        with self._lock:
            if ops:
                self.total_ops += ops
                self._stamps.append((self._time(), ops))
            if faults is not None:
                self.faults = list(faults)
            if leader is not None:
                self.leader = leader
        self.refresh()

    def refresh(self) -> None:
        elapsed = self._time() - self._start
        self.progress.update(
            self.task,
            completed=min(elapsed, self.limit),
            rate=f"{self.rate():.1f}",
            ops=self.total_ops,
            faults=", ".join(self.faults) or "none",
            leader=self.leader or "?",
        )


# --------------------------------------------------------------------------------------------
# chaos report


@click.command(name="report")
@click.argument(
    "run_dir", type=click.Path(file_okay=False, path_type=Path), required=False, default=Path("store/latest")
)
def report(run_dir: Path) -> int:
    """Write RUN_DIR/index.html (default store/latest; a store root means its latest run), the
    run's HTML report, and print its path."""
    from chaos.errors import BadArguments
    from chaos.history.store import find_run

    try:
        if (
            run_dir.is_dir()
            and not (run_dir / "history.jsonl").exists()
            and not (run_dir / "test.json").exists()
        ):
            run_dir = Path(find_run(run_dir).path)
        out = write_report(run_dir)
    except (ReportError, FileNotFoundError) as e:
        raise BadArguments(str(e)) from e
    click.echo(str(out))
    return 0
