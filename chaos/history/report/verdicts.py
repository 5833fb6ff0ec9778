"""One line per checker, worst first, and what the counterexample section says when it shows
none: the verdict text the HTML report and the terminal summary share (``results.json`` in,
strings out; Jepsen's ``jepsen.checker`` verdicts ``true``/``false``/``:unknown``).
"""

from __future__ import annotations

from typing import Any

from chaos.history.checkers.perf import ops_line
from chaos.history.report.run import _short


def _verdict(v: object) -> str:
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
        n = r.get(f"{k}_count")  # chaos.history.checkers.logcheck caps the lists and gives the full counts
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
