"""``leadership.jsonl``: the leadership observer's samples (written by :mod:`chaos.runner.observer`),
and how the history layer reads them (:func:`chaos.history.checkers.faults.leadership_windows`).

A sample is ``{"time": ns, "nodes": {node: {"leader", "term"} | {"error"}}, "primaries": [...],
"leader": node | null, "term": int | null}``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson

LEADERSHIP_FILE = "leadership.jsonl"


def summarize(nodes: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """From each node's answer (``{"leader", "term"}`` or ``{"error"}``) the sample's ``primaries``,
    ``leader`` (the claiming node with the highest term) and ``term`` (highest answered)."""
    primaries = sorted(n for n, a in nodes.items() if a.get("leader") == n)
    terms = [a["term"] for a in nodes.values() if isinstance(a.get("term"), int)]
    leader = max(primaries, key=lambda n: (nodes[n].get("term") or 0, n)) if primaries else None
    return {"primaries": primaries, "leader": leader, "term": max(terms) if terms else None}


def read_leadership(path: Path | str) -> list[dict[str, Any]]:
    """The samples of a ``leadership.jsonl`` (``[]`` when the file is missing). A torn last line (a
    killed run) is dropped; a bad line in the middle raises ValueError naming the file and line."""
    p = Path(path)
    if not p.is_file():
        return []
    lines = p.read_bytes().split(b"\n")
    out: list[dict[str, Any]] = []
    last = max((i for i, ln in enumerate(lines) if ln.strip()), default=-1)
    for i, ln in enumerate(lines):
        if not ln.strip():
            continue
        try:
            sample = orjson.loads(ln)
            if not isinstance(sample, dict) or not isinstance(sample.get("time"), int):
                raise ValueError("expected an object with an integer time")
        except (orjson.JSONDecodeError, ValueError) as e:
            if i == last:
                break
            raise ValueError(f"{p}:{i + 1}: bad leadership sample: {e}") from None
        out.append(sample)
    return out
