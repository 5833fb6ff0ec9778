"""The transactional part of the report: each anomaly's cycle drawn as a graph (its transactions
and the labelled dependency edges between them, as Elle's ``elle.viz`` plots), the transactions'
micro-ops and why each edge holds, and the anomaly types with their counts for the verdict band.
Rendered from ``results.json`` ``checkers.elle`` (:mod:`chaos.history.checkers.elle`) only; plain HTML and
inline SVG, every text escaped, no script.

Entry points for ``chaos.history.report.html``: :func:`elle_result` (the result or None),
:func:`anomaly_band_html` (the verdict band's line) and :func:`txn_section_html` (the section).
"""

from __future__ import annotations

import html
import math
from typing import Any

EDGE_COLOURS = {
    "ww": "#1f77b4",
    "wr": "#2ca02c",
    "rw": "#d62728",
    "realtime": "#9467bd",
    "process": "#8c564b",
}
OTHER_COLOUR = "#555555"
NODE_R = 22  # px, a transaction's circle
MAX_CASES = 4  # drawn per anomaly type; the counts say how many were found


def elle_result(results: dict[str, Any] | None) -> dict[str, Any] | None:
    """``results["checkers"]["elle"]`` when it is an Elle result (has ``anomalies``), else None."""
    r = ((results or {}).get("checkers") or {}).get("elle")
    return r if isinstance(r, dict) and isinstance(r.get("anomalies"), dict) else None


def anomaly_counts(r: dict[str, Any]) -> list[tuple[str, int]]:
    """``[(anomaly type, count)]`` most frequent first, then by name."""
    counts = r.get("counts") or {}
    pairs = [(str(k), int(v)) for k, v in counts.items() if isinstance(v, int)]
    return sorted(pairs, key=lambda kv: (-kv[1], kv[0]))


def anomaly_band_html(results: dict[str, object] | None) -> str:
    """One line for the verdict band: the model checked and each anomaly type with its count, e.g.
    ``strict-serializable: G-single-item-realtime x3, G2-item x1``; empty without an Elle result."""
    r = elle_result(results)
    if r is None:
        return ""
    model = html.escape(str(r.get("consistency_model") or ""))
    found = anomaly_counts(r)
    if not found:
        return f'<span class="txn-anomalies">{model}: no anomaly in {int(r.get("txns") or 0)} transactions</span>'
    items = ", ".join(f"<b>{html.escape(k)}</b> &times;{n}" for k, n in found)
    return f'<span class="txn-anomalies">{model}: {items}</span>'


def _mop_text(m: object) -> str:
    if isinstance(m, list | tuple) and len(m) == 3:
        f, k, v = m
        if f == "r":
            shown = (
                "nil" if v is None else ("[" + " ".join(map(str, v)) + "]" if isinstance(v, list) else str(v))
            )
            return f"r {k} {shown}"
        return f"{f} {k} {v}"
    return str(m)


def _point(i: int, n: int, radius: float, cx: float, cy: float) -> tuple[float, float]:
    a = -math.pi / 2 + 2 * math.pi * i / n
    return cx + radius * math.cos(a), cy + radius * math.sin(a)


def _edge_path(
    p: tuple[float, float], q: tuple[float, float], bend: float
) -> tuple[str, tuple[float, float]]:
    """A quadratic curve from circle ``p`` to circle ``q`` bent ``bend`` px to the left of the way
    (so ``a -> b`` and ``b -> a`` do not overlap), trimmed to the circles; with its midpoint."""
    (x0, y0), (x1, y1) = p, q
    dx, dy = x1 - x0, y1 - y0
    d = math.hypot(dx, dy) or 1.0
    cx, cy = (x0 + x1) / 2 - dy / d * bend, (y0 + y1) / 2 + dx / d * bend

    def trim(x: float, y: float, tx: float, ty: float, by: float) -> tuple[float, float]:
        ux, uy = tx - x, ty - y
        u = math.hypot(ux, uy) or 1.0
        return x + ux / u * by, y + uy / u * by

    sx, sy = trim(x0, y0, cx, cy, NODE_R)
    ex, ey = trim(x1, y1, cx, cy, NODE_R + 4)
    mid = (0.25 * sx + 0.5 * cx + 0.25 * ex, 0.25 * sy + 0.5 * cy + 0.25 * ey)
    return f"M{sx:.1f},{sy:.1f} Q{cx:.1f},{cy:.1f} {ex:.1f},{ey:.1f}", mid


def cycle_svg(case: dict[str, Any]) -> str:
    """The cycle of one case (``{"cycle": [{"name", ...}], "edges": [{"from", "to", "type"}]}``) as
    an SVG: its transactions on a circle in cycle order, one coloured, labelled arrow per edge.
    Empty for a case without edges (a non-cycle anomaly)."""
    names = [str(t.get("name")) for t in case.get("cycle") or [] if isinstance(t, dict)]
    edges = [e for e in case.get("edges") or [] if isinstance(e, dict)]
    if not names or not edges:
        return ""
    n = len(names)
    radius = max(70.0, 30.0 * n)
    w = h = 2 * radius + 2 * NODE_R + 60
    cx = cy = w / 2
    pos = {name: _point(i, n, radius if n > 1 else 0, cx, cy) for i, name in enumerate(names)}
    out = [
        f'<svg class="txn-cycle" xmlns="http://www.w3.org/2000/svg" width="{w:.0f}" height="{h:.0f}" '
        f'viewBox="0 0 {w:.0f} {h:.0f}" role="img" aria-label="{html.escape(str(case.get("type")))} cycle">',
        "<defs>",
    ]
    for kind, colour in [*EDGE_COLOURS.items(), ("other", OTHER_COLOUR)]:
        out.append(
            f'<marker id="txn-arrow-{kind}" viewBox="0 0 10 10" refX="9" refY="5" markerWidth="7" '
            f'markerHeight="7" orient="auto-start-reverse"><path d="M0,0 L10,5 L0,10 z" fill="{colour}"/></marker>'
        )
    out.append("</defs>")
    bend = 30.0 if n == 2 else 18.0
    for e in edges:
        a, b = pos.get(str(e.get("from"))), pos.get(str(e.get("to")))
        if a is None or b is None:
            continue
        kind = str(e.get("type"))
        colour = EDGE_COLOURS.get(kind, OTHER_COLOUR)
        marker = kind if kind in EDGE_COLOURS else "other"
        d, (mx, my) = _edge_path(a, b, bend)
        title = html.escape(str(e.get("why") or f"{e.get('from')} -{kind}-> {e.get('to')}"))
        out.append(
            f'<g class="txn-edge"><title>{title}</title><path d="{d}" fill="none" stroke="{colour}" '
            f'stroke-width="2" marker-end="url(#txn-arrow-{marker})"/>'
            f'<text x="{mx:.1f}" y="{my:.1f}" text-anchor="middle" dy="-4" font-size="12" '
            f'fill="{colour}" font-family="sans-serif">{html.escape(kind)}</text></g>'
        )
    for t in case.get("cycle") or []:
        name = str(t.get("name"))
        x, y = pos[name]
        tip = html.escape(f"{name}: op {t.get('index')}, process {t.get('process')}, {t.get('type')}")
        out.append(
            f'<g class="txn-node"><title>{tip}</title><circle cx="{x:.1f}" cy="{y:.1f}" r="{NODE_R}" '
            f'fill="#ffffff" stroke="#333333" stroke-width="1.5"/><text x="{x:.1f}" y="{y:.1f}" '
            f'text-anchor="middle" dy="4" font-size="13" font-family="sans-serif">{html.escape(name)}</text></g>'
        )
    out.append("</svg>")
    return "".join(out)


def _txn_table(case: dict[str, Any]) -> str:
    rows = []
    for t in case.get("cycle") or []:
        if not isinstance(t, dict):
            continue
        mops = ", ".join(_mop_text(m) for m in t.get("value") or [])
        rows.append(
            f"<tr><td>{html.escape(str(t.get('name')))}</td><td>{html.escape(str(t.get('index')))}</td>"
            f"<td>{html.escape(str(t.get('process')))}</td><td>{html.escape(str(t.get('type')))}</td>"
            f"<td><code>[{html.escape(mops)}]</code></td></tr>"
        )
    if not rows:
        return ""
    head = "<tr><th>txn</th><th>op</th><th>process</th><th>type</th><th>micro-ops</th></tr>"
    return f'<table class="txn-table">{head}{"".join(rows)}</table>'


def case_html(case: dict[str, Any]) -> str:
    """One anomaly case: its cycle drawing, its transactions, why each edge holds, and the cycle's
    conclusion (:func:`chaos.history.checkers.elle.explain.cycle_case`; a case without edges: its
    explanation alone), each said once."""
    parts = ['<div class="txn-case">']
    svg = cycle_svg(case)
    explanation = case.get("explanation")
    if svg:
        parts.append(svg)
        parts.append(_txn_table(case))
        whys = [f"<li>{html.escape(str(e.get('why')))}</li>" for e in case.get("edges") or [] if e.get("why")]
        if whys:
            parts.append(f'<ul class="txn-why">{"".join(whys)}</ul>')
            # the explanation tells these same whys again: only its closing sentence follows them
            explanation = case.get("conclusion") or explanation
    if explanation:
        parts.append(f'<p class="txn-explanation">{html.escape(str(explanation))}</p>')
    parts.append("</div>")
    return "".join(parts)


def txn_section_html(results: dict[str, object] | None, max_cases: int = MAX_CASES) -> str:
    """The report's transactional section: the verdict line (:func:`anomaly_band_html`), Elle's
    summary and, per anomaly type (most frequent first), up to ``max_cases`` cases drawn with
    :func:`case_html`. Empty without an Elle result."""
    r = elle_result(results)
    if r is None:
        return ""
    parts = [
        '<section class="txn-anomalies-section"><h2>Transactions</h2>',
        f"<p>{anomaly_band_html(results)}</p>",
        f'<p class="txn-summary">{html.escape(str(r.get("summary") or ""))}</p>',
    ]
    anomalies = r.get("anomalies") or {}
    for kind, count in anomaly_counts(r):
        cases = [c for c in anomalies.get(kind) or [] if isinstance(c, dict)]
        shown = cases[:max_cases]
        more = f" (showing {len(shown)})" if count > len(shown) else ""
        parts.append(f"<h3>{html.escape(kind)} &times;{count}{more}</h3>")
        parts.extend(case_html(c) for c in shown)
    parts.append("</section>")
    return "".join(parts)
