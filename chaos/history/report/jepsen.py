"""The report's sections for Jepsen's bank, counter, set-full and long-fork checkers, as their users
expect them: bank, the total of every ok read over time with the bad reads marked (Jepsen's
``bank.png``); counter, each read against its lower and upper bound; set-full, the timeline of each
lost element (added, known, last present, last absent); long-fork, the forked read pairs.
Rendered from ``results.json`` only (:mod:`chaos.history.checkers.bank`, :mod:`chaos.history.checkers.counter`,
:mod:`chaos.history.checkers.setfull`, :mod:`chaos.history.checkers.longfork`); plain HTML and inline SVG, every text
escaped, no script. Entry point for ``chaos.history.report.html``: :func:`sections_html`.
"""

from __future__ import annotations

import html
from collections.abc import Sequence
from typing import Any

W, H, PAD = 720, 220, 40  # px of a plot and its margin
MAX_ROWS = 20  # table rows per section; the counts say how many there were
BAD = "#d62728"
GOOD = "#1f77b4"


def _esc(x: object) -> str:
    return html.escape(str(x))


def _scatter(points: Sequence[tuple[float, float, str]], y_label: str, ref: float | None = None) -> str:
    """An SVG scatter of ``(x seconds, y, colour)``; ``ref`` draws a dashed horizontal line."""
    if not points:
        return ""
    xs = [p[0] for p in points]
    ys = [p[1] for p in points] + ([ref] if ref is not None else [])
    x0, x1 = min(xs), max(xs) or 1.0
    y0, y1 = min(ys), max(ys)
    if y1 == y0:
        y0, y1 = y0 - 1, y1 + 1

    def sx(x: float) -> float:
        return PAD + (x - x0) / ((x1 - x0) or 1) * (W - 2 * PAD)

    def sy(y: float) -> float:
        return H - PAD - (y - y0) / (y1 - y0) * (H - 2 * PAD)

    out = [f'<svg class="jepsen-plot" width="{W}" height="{H}" role="img" aria-label="{_esc(y_label)}">']
    out.append(f'<text x="4" y="14" font-size="11">{_esc(y_label)} ({y0:g} .. {y1:g})</text>')
    out.append(
        f'<text x="{W - PAD}" y="{H - 8}" font-size="11" text-anchor="end">time (s), {x0:g} .. {x1:g}</text>'
    )
    if ref is not None:
        out.append(f'<line x1="{PAD}" x2="{W - PAD}" y1="{sy(ref):.1f}" y2="{sy(ref):.1f}" stroke="#999" stroke-dasharray="4 3"/>')  # fmt: skip
    for x, y, colour in points:
        out.append(f'<circle cx="{sx(x):.1f}" cy="{sy(y):.1f}" r="2.5" fill="{colour}"/>')
    out.append("</svg>")
    return "".join(out)


def _table(head: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    th = "".join(f"<th>{_esc(h)}</th>" for h in head)
    trs = "".join("<tr>" + "".join(f"<td>{_esc(c)}</td>" for c in r) + "</tr>" for r in rows[:MAX_ROWS])
    return f'<table class="jepsen-table"><tr>{th}</tr>{trs}</table>'


def bank_html(r: dict[str, Any]) -> str:
    """The bank section: totals over time (bad reads red) and the bad reads by kind."""
    pts = [(p[0], p[1], BAD if p[2] else GOOD) for p in r.get("totals") or [] if p[1] is not None]
    body = [f"<p>{r.get('read_count', 0)} reads, {r.get('error_count', 0)} bad; expected total "
            f"{_esc(r.get('total'))}.</p>", _scatter(pts, "total of all accounts", r.get("total"))]  # fmt: skip
    rows = [[kind, e.get("count"), e.get("first", {}).get("op", {}).get("index"), _esc(e.get("worst", {}))[:160]]
            for kind, e in (r.get("errors") or {}).items()]  # fmt: skip
    if rows:
        body.append(_table(["kind", "count", "first at op", "worst"], rows))
    return _section("bank", r, "".join(body))


def counter_html(r: dict[str, Any]) -> str:
    """The counter section: each read (red when out of bounds) and its bounds."""
    pts: list[tuple[float, float, str]] = []
    for t, lo, v, hi in r.get("reads") or []:
        if isinstance(v, int):
            pts.append((t, v, GOOD if lo <= v <= hi else BAD))
    rows = [
        [e.get("op"), e.get("lower"), e.get("value"), e.get("upper"), e.get("node", "")]
        for e in r.get("errors") or []
    ]
    body = f"<p>{r.get('read_count', 0)} reads, {r.get('error_count', 0)} out of bounds.</p>"
    body += _scatter(pts, "counter read")
    if rows:
        body += _table(["op", "lower", "read", "upper", "node"], rows)
    return _section("counter", r, body)


def set_full_html(name: str, r: dict[str, Any]) -> str:
    """The set-full section: counts, latencies, and the lost elements' timelines."""
    counts = ", ".join(f"{r.get(k + '_count', 0)} {k.replace('_', '-')}" for k in
                       ("stable", "lost", "stale", "never_read", "duplicated", "unexpected"))  # fmt: skip
    body = f"<p>{r.get('attempt_count', 0)} elements: {_esc(counts)}.</p>"
    lat = r.get("stable_latencies")
    if lat:
        body += f"<p>stable latency (ms) by quantile: {_esc(lat)}</p>"

    def at(p: Any) -> str:
        return "" if not p else f"op {p.get('index')} at {p.get('time_s')} s {p.get('node') or ''}".strip()

    rows = [[t["element"], at(t.get("add")), at(t.get("known")), at(t.get("last_present")), at(t.get("last_absent"))]
            for t in r.get("lost_timelines") or []]  # fmt: skip
    if rows:
        body += "<p>Lost elements, each's timeline:</p>"
        body += _table(
            ["element", "add invoked", "known", "last present (read invoked)", "last absent"], rows
        )
    stale = [
        [s["element"], s["stable_latency_ms"], at(s.get("last_absent"))] for s in r.get("worst_stale") or []
    ]
    if stale:
        body += _table(["stale element", "stable latency (ms)", "last absent"], stale)
    return _section(name, r, body)


def long_fork_html(r: dict[str, Any]) -> str:
    """The long-fork section: the forked read pairs."""
    rows = [[f["ops"][0], f["ops"][1], f["keys"][0], f["keys"][1]] for f in r.get("forks") or []]
    body = f"<p>{r.get('read_count', 0)} reads in {r.get('group_count', 0)} groups, {r.get('fork_count', 0)} forked pairs.</p>"
    if rows:
        body += _table(
            ["read op", "other read op", "keys only the first saw", "keys only the other saw"], rows
        )
    return _section("long-fork", r, body)


def _section(name: str, r: dict[str, object], body: str) -> str:
    v = r.get("valid")
    verdict = "valid" if v is True else "invalid" if v is False else "unknown"
    err = f" ({_esc(r['error'])})" if r.get("error") else ""
    return f'<section class="jepsen-{_esc(name)}"><h2>{_esc(name)}: {verdict}{err}</h2>{body}</section>'


def sections_html(results: dict[str, Any] | None) -> str:
    """Every section whose checker is in ``results["checkers"]``, in a fixed order; "" for none."""
    checkers = (results or {}).get("checkers") or {}
    out = []
    for name, render in (("bank", bank_html), ("counter", counter_html), ("long-fork", long_fork_html)):
        if isinstance(checkers.get(name), dict):
            out.append(render(checkers[name]))
    for name in ("set-full", "set-full-linearizable"):
        if isinstance(checkers.get(name), dict):
            out.append(set_full_html(name, checkers[name]))
    return "".join(out)
