"""Throughput and latency-quantile series of a run, for the report's plots and its PNG files.

After ``jepsen.checker.perf``: ``rate.png`` (completions per second over time), ``latency-raw.png``
(each op's latency at its invocation time) and ``latency-quantiles.png`` (p50 / p95 / p99 / max
latency per time bucket), fault windows shaded, written into the run directory beside
``index.html`` (:func:`write_pngs`, with matplotlib's Agg backend: no display, no browser).

- **Throughput** counts completions per bucket by completion time, in buckets of 1 s (2 s for runs
  longer than 10 minutes), stacked by outcome: ok, fail that was an answered no (a cas whose compare
  did not match), fail the system aborted (a serialization failure, a deadlock), fail that was the
  DB not serving, info (:func:`chaos.history.analysis.fail_class`).
  Per-f ok lines are there on demand (hidden until picked in the report's legend).
- **Latency quantiles** group completed ops by invocation time into the same buckets (at least
  :data:`MIN_QUANTILE_BUCKET_S`) and give nearest-rank p50, p95, p99 and the max, in ms, per
  bucket; a bucket without an op has none.
"""

from __future__ import annotations

import math
import os
from pathlib import Path
from typing import Any

LONG_RUN_S = 600.0
MIN_QUANTILE_BUCKET_S = 1.0
QUANTILES = (("p50", 0.5), ("p95", 0.95), ("p99", 0.99))
# outcome -> colour, bottom to top of the stack
OUTCOMES = (
    ("ok", "#2b83ba"),
    ("fail: no match", "#9e9ac8"),
    ("fail: aborted", "#8073ac"),
    ("fail: unavailable", "#d7191c"),
    ("info", "#fdae61"),
)
QUANTILE_COLOURS = {"p50": "#1b9e77", "p95": "#7570b3", "p99": "#d95f02", "max": "#636363"}
TYPE_COLOURS = {"ok": "#2b83ba", "fail": "#d7191c", "info": "#fdae61"}


def bucket_seconds(span_s: float) -> float:
    """The throughput bucket: 1 s, or 2 s for a run longer than :data:`LONG_RUN_S`."""
    return 1.0 if span_s <= LONG_RUN_S else 2.0


def _outcome(t: int, no_match: int, aborted: int = 0) -> str:
    if t == 0:
        return "ok"
    if t == 1:
        return "fail: no match" if no_match else "fail: aborted" if aborted else "fail: unavailable"
    return "info"


def rate_series(pairs: Any, end_ns: int) -> dict[str, Any]:
    """``{"bucket_s", "x": [bucket start s], "stack": {outcome: [ops/s]}, "by_f": {f: [ok ops/s]}}``
    from the report's paired ops (:class:`chaos.history.report.run.Paired`: ``t`` type index 0 ok /
    1 fail / 2 info, ``nm`` no-match flags, ``e`` completion µs, -1 never)."""
    span_s = max(end_ns / 1e9, 1e-3)
    width = bucket_seconds(span_s)
    nb = int(span_s / width) + 1
    stack = {name: [0] * nb for name, _ in OUTCOMES}
    by_f: dict[str, list[int]] = {}
    for m, e in enumerate(pairs.e):
        if e < 0:
            continue
        b = min(int(e / 1e6 / width), nb - 1)
        stack[_outcome(pairs.t[m], pairs.nm[m], pairs.ab[m] if m < len(pairs.ab) else 0)][b] += 1
        if pairs.t[m] == 0:
            by_f.setdefault(pairs.fs[pairs.f[m]], [0] * nb)[b] += 1
    return {
        "bucket_s": width,
        "x": [round(b * width, 3) for b in range(nb)],
        "stack": {k: [round(c / width, 3) for c in v] for k, v in stack.items()},
        "by_f": {f: [round(c / width, 3) for c in v] for f, v in sorted(by_f.items())},
    }


def _nearest_rank(sorted_ms: list[float], q: float) -> float:
    return sorted_ms[min(len(sorted_ms) - 1, max(0, math.ceil(q * len(sorted_ms)) - 1))]


def quantile_series(pairs: Any, end_ns: int) -> dict[str, Any]:
    """``{"bucket_s", "x": [bucket middle s], "p50", "p95", "p99", "max": [ms | None]}``: latency
    quantiles of the completed ops invoked in each bucket (module docstring)."""
    span_s = max(end_ns / 1e9, 1e-3)
    width = max(bucket_seconds(span_s), MIN_QUANTILE_BUCKET_S)
    nb = int(span_s / width) + 1
    per: list[list[float]] = [[] for _ in range(nb)]
    for m, e in enumerate(pairs.e):
        if e >= 0:
            per[min(int(pairs.s[m] / 1e6 / width), nb - 1)].append((e - pairs.s[m]) / 1e3)
    out: dict[str, Any] = {"bucket_s": width, "x": [round((b + 0.5) * width, 3) for b in range(nb)]}
    for name, _q in (*QUANTILES, ("max", 1.0)):
        out[name] = []
    for lat in per:
        lat.sort()
        for name, q in QUANTILES:
            out[name].append(round(_nearest_rank(lat, q), 3) if lat else None)
        out["max"].append(round(lat[-1], 3) if lat else None)
    return out


def rate_traces(series: dict[str, Any]) -> list[dict[str, object]]:
    """Plotly traces: the outcomes stacked (areas), then one ok line per f, hidden until picked."""
    traces: list[dict[str, object]] = []
    for name, colour in OUTCOMES:
        ys = series["stack"][name]
        if not any(ys):
            continue
        traces.append(
            {
                "type": "scatter",
                "mode": "lines",
                "name": name,
                "x": series["x"],
                "y": ys,
                "stackgroup": "outcome",
                "line": {"color": colour, "width": 0.5, "shape": "hv"},
                "fillcolor": colour,
                "hovertemplate": f"{name}<br>%{{x:.0f}} s: %{{y:.1f}} ops/s<extra></extra>",
            }
        )
    for f, ys in series["by_f"].items():
        traces.append(
            {
                "type": "scatter",
                "mode": "lines",
                "name": f"{f} ok",
                "x": series["x"],
                "y": ys,
                "visible": "legendonly",
                "line": {"width": 1.4, "dash": "dot", "shape": "hv"},
                "hovertemplate": f"{f} ok<br>%{{x:.0f}} s: %{{y:.1f}} ops/s<extra></extra>",
            }
        )
    return traces


def quantile_traces(series: dict[str, Any]) -> list[dict[str, object]]:
    """Plotly traces: one line per quantile (p50, p95, p99, max)."""
    return [
        {
            "type": "scatter",
            "mode": "lines+markers",
            "name": name,
            "x": series["x"],
            "y": series[name],
            "connectgaps": False,
            "marker": {"size": 3},
            "line": {"color": QUANTILE_COLOURS[name], "width": 1.5},
            "hovertemplate": f"{name}<br>%{{x:.1f}} s: %{{y:.2f}} ms<extra></extra>",
        }
        for name in ("p50", "p95", "p99", "max")
        if any(v is not None for v in series[name])
    ]


def write_pngs(
    run_dir: str | os.PathLike[str], pairs: Any, windows: list[dict[str, Any]], end_ns: int
) -> list[Path]:
    """Write ``latency-raw.png``, ``latency-quantiles.png`` and ``rate.png`` into ``run_dir``
    (``windows``: the report's fault windows, ``start``/``end`` ns and ``colour``, shaded); returns
    their paths. Raises ImportError when matplotlib is not installed."""
    import matplotlib

    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt

    out_dir = Path(run_dir)
    span_s = max(end_ns / 1e9, 1e-3)
    written = []

    def figure(title: str, ylabel: str) -> tuple[object, Any]:
        fig, ax = plt.subplots(figsize=(11, 4), dpi=100)
        ax.set_title(title, loc="left", fontsize=11)
        ax.set_xlabel("time (s)")
        ax.set_ylabel(ylabel)
        ax.set_xlim(0, span_s)
        for w in windows:
            ax.axvspan(w["start"] / 1e9, w["end"] / 1e9, color=w.get("colour") or "#999999", alpha=0.15, lw=0)
        return fig, ax

    def save(fig: Any, ax: Any, name: str) -> None:
        handles, _labels = ax.get_legend_handles_labels()
        if handles:
            ax.legend(loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize=8, frameon=False)
        fig.tight_layout()
        path = out_dir / name
        fig.savefig(path)
        plt.close(fig)
        written.append(path)

    fig, ax = figure("Latency per op (raw)", "latency (ms)")
    for ti, typ in enumerate(("ok", "fail", "info")):
        xs = [pairs.s[m] / 1e6 for m in range(len(pairs.e)) if pairs.e[m] >= 0 and pairs.t[m] == ti]
        ys = [
            (pairs.e[m] - pairs.s[m]) / 1e3
            for m in range(len(pairs.e))
            if pairs.e[m] >= 0 and pairs.t[m] == ti
        ]
        if xs:
            ax.scatter(
                xs, [max(y, 1e-3) for y in ys], s=3, color=TYPE_COLOURS[typ], label=typ, alpha=0.6, lw=0
            )
    if any(e >= 0 for e in pairs.e):
        ax.set_yscale("log")
    save(fig, ax, "latency-raw.png")

    q = quantile_series(pairs, end_ns)
    fig, ax = figure(f"Latency quantiles ({q['bucket_s']:g} s buckets)", "latency (ms)")
    for name in ("p50", "p95", "p99", "max"):
        pts = [(x, y) for x, y in zip(q["x"], q[name], strict=True) if y is not None]
        if pts:
            ax.plot(
                [p[0] for p in pts],
                [max(p[1], 1e-3) for p in pts],
                label=name,
                color=QUANTILE_COLOURS[name],
                lw=1.2,
            )
    if any(v is not None for v in q["max"]):
        ax.set_yscale("log")
    save(fig, ax, "latency-quantiles.png")

    r = rate_series(pairs, end_ns)
    fig, ax = figure(f"Throughput ({r['bucket_s']:g} s buckets)", "ops/s")
    names = [n for n, _c in OUTCOMES if any(r["stack"][n])]
    if names:
        ax.stackplot(
            r["x"],
            [r["stack"][n] for n in names],
            labels=names,
            colors=[dict(OUTCOMES)[n] for n in names],
            step="post",
        )
    ax.set_ylim(bottom=0)
    save(fig, ax, "rate.png")
    return written
