"""The faults section of the report and the terminal summary: requested / applied / failed faults
per kind and leadership per fault window, rendered from ``results.json`` ``checkers.faults``
(:mod:`chaos.history.checkers.faults`) only."""

from __future__ import annotations

from typing import Any


def faults_result(results: dict[str, Any] | None) -> dict[str, Any] | None:
    """``results["checkers"]["faults"]`` when it is a result with ``kinds``, else None."""
    r = ((results or {}).get("checkers") or {}).get("faults")
    return r if isinstance(r, dict) and isinstance(r.get("kinds"), dict) else None


def caption(results: dict[str, object] | None) -> str | None:
    """The ops table's caption: faults that took effect of those requested (None: no result)."""
    r = faults_result(results)
    if r is None:
        return None
    if not r.get("requested"):
        return "no nemesis faults requested"
    text = f"{r.get('applied', 0)} of {r['requested']} requested nemesis faults took effect"
    if r.get("failed"):
        text += f", {r['failed']} did not"
    return text


def _span(w: dict[str, object]) -> str:
    end = w.get("end_s")
    return f"{w.get('start_s', 0):.1f}-{'end' if end is None else f'{end:.1f}'}"


def _leaders(w: dict[str, Any]) -> str:
    if w.get("leaders") is None:
        return "not observed"
    seq = [w.get("leader_before") or "none", *w["leaders"]]
    seq = [x for i, x in enumerate(seq) if i == 0 or x != seq[i - 1]]
    return " -> ".join(seq)


def _terms(w: dict[str, Any]) -> str:
    terms = [t for t in [w.get("term_before"), *(w.get("terms") or [])] if t is not None]
    terms = list(dict.fromkeys(terms))
    return "-".join(str(t) for t in terms) if terms else "-"


def _changes(w: dict[str, object]) -> str:
    """``"1"``, or ``"0 (+1 within 0.9 s after)"`` when the claim changed after the window ended."""
    lc = w.get("leader_changes")
    if lc is None:
        return "?"
    after = w.get("leader_changes_after") or 0
    if not after:
        return str(lc)
    at = w.get("changed_after_s")
    return f"{lc} (+{after}" + (f" within {at:.1f} s after)" if isinstance(at, int | float) else " after)")


def _ops(c: object) -> str:
    c = c if isinstance(c, dict) else {}
    return f"{c.get('ok', 0)}/{c.get('fail', 0)}/{c.get('info', 0)}"


def window_rows(results: dict[str, object] | None) -> list[dict[str, str]]:
    """One row of strings per fault window: kind, span (s), applied, nodes, leaders, leader
    changes, terms, time without a leader, client ops ok/fail/info (all, and on the faulted nodes)."""
    r = faults_result(results)
    rows = []
    for w in (r or {}).get("windows") or []:
        if not isinstance(w, dict):
            continue
        rows.append(
            {
                "kind": str(w.get("name") or w.get("kind")),  # the fault as typed (issue 35 item 10)
                "span": _span(w),
                "applied": "yes" if w.get("applied", True) else "no",
                "nodes": ", ".join(w.get("nodes") or []) or "-",
                "leaders": _leaders(w),
                "leader_changes": _changes(w),
                "terms": _terms(w),
                "leaderless": "?" if w.get("leaderless_s") is None else f"{w['leaderless_s']:.1f}",
                "ops": _ops(w.get("ops")),
                "ops_on_faulted": _ops(w.get("ops_on_faulted")),
            }
        )
    return rows


def kind_rows(results: dict[str, object] | None) -> list[dict[str, Any]]:
    """One row per fault kind: requested, applied, failed, stop_failed, errors (first 3); ``kind``
    is the fault as the user typed it (the checker's ``name``: ``lose-unfsynced``, not the op kind
    ``file``; the op kind for results recorded before names were)."""
    r = faults_result(results)
    out = []
    for kind, row in sorted(((r or {}).get("kinds") or {}).items()):
        out.append({**row, "kind": str(row.get("name") or kind), "errors": list(row.get("errors") or [])[:3]})
    return out


def summary_tables(results: dict[str, object] | None) -> list[Any]:
    """The terminal summary's fault rows: a per-kind table, a per-window table, and the plain
    sentence (``checkers.faults.summary``). Empty when there is no faults result."""
    from rich.table import Table  # rich only when a table is drawn: a plain chaos check starts without it
    from rich.text import Text

    r = faults_result(results)
    if r is None:
        return []
    if not r.get("requested"):  # no faults: still say what leadership did (a split brain above all)
        lead = r.get("leadership") or {}
        return [Text(f"leadership: {r['summary']}", style="bold red")] if lead.get("split_brain") else []
    out: list[object] = []
    kinds = Table(title="faults", title_justify="left", expand=False)
    for col, just in (("fault", "left"), ("requested", "right"), ("applied", "right"), ("failed", "right")):
        kinds.add_column(col, justify=just)  # type: ignore[arg-type]
    kinds.add_column("why not", overflow="fold")
    for row in kind_rows(results):
        style = "red" if row["applied"] == 0 else ("yellow" if row["failed"] else "")
        kinds.add_row(
            Text(row["kind"], style=style),
            str(row["requested"]),
            str(row["applied"]),
            str(row["failed"]),
            Text("; ".join(row["errors"])),
        )
    out.append(kinds)
    rows = window_rows(results)
    if rows:
        win = Table(title="fault windows (leadership observed)", title_justify="left", expand=False)
        for col in ("fault", "s", "applied", "nodes", "leaders", "changes", "terms", "leaderless s"):
            win.add_column(col)
        win.add_column("ops ok/fail/info (faulted nodes)")
        for w in rows:
            win.add_row(
                w["kind"],
                w["span"],
                w["applied"],
                w["nodes"],
                w["leaders"],
                Text(w["leader_changes"], style="bold" if w["leader_changes"] not in ("0", "?") else "dim"),
                w["terms"],
                w["leaderless"],
                f"{w['ops']} ({w['ops_on_faulted']})",
            )
        out.append(win)
    if r.get("summary"):
        bit = (r.get("bite") or {}).get("changed_leadership")
        split = bool((r.get("leadership") or {}).get("split_brain"))
        style = "bold red" if split else ("yellow" if bit is False else "")
        out.append(Text(f"faults: {r['summary']}", style=style))
    return out
