"""Server-log anomalies in the verdict: Jepsen's ``jepsen.checker/log-file-pattern`` for a run's node logs.

The DB declares what to look for (its ``log_patterns``): a list of :class:`LogPattern`, each a
``kind`` (e.g. ``safety-guard``), a regular expression matched against every line, a ``severity``
(``invalid``: one match makes the run invalid; ``warning``: matches are counted and reported) and a
one-line ``description``. The runner records the patterns and the log file names in ``test.json``
(``"server_logs": {"files": [...], "patterns": [...]}``), so ``chaos check`` on a stored run scans
the same downloaded files (``nodes/<node>/<file>``) with the same patterns and reaches the same verdict.

A line counts for the first pattern (in declared order) it matches, so a safety-guard ERROR line is a
``safety-guard`` match, not also a plain ``error``. For a ``Traceback (most recent call last):``
line the quote also carries the exception line that ends the traceback.
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from chaos.history.verdict import UNKNOWN

INVALID = "invalid"
WARNING = "warning"
SEVERITIES = (INVALID, WARNING)
MAX_QUOTED = 20  # lines quoted per kind in results.json; the counts are complete
MAX_LINE_CHARS = 500


@dataclass(frozen=True)
class LogPattern:
    """One anomaly a DB's log may show: ``kind`` (short name), ``regex`` (Python ``re`` syntax,
    searched in each line), ``severity`` (``invalid`` or ``warning``), ``description`` (one line)."""

    kind: str
    regex: str
    severity: str
    description: str = ""

    def __post_init__(self) -> None:
        if self.severity not in SEVERITIES:
            raise ValueError(
                f"log pattern {self.kind!r}: severity {self.severity!r}, expected one of {SEVERITIES}"
            )
        re.compile(self.regex)

    def to_dict(self) -> dict[str, str]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: object) -> LogPattern:
        """Inverse of :meth:`to_dict`; ValueError naming the bad field."""
        if not isinstance(d, dict):
            raise ValueError(f"log pattern {d!r}: expected an object with kind, regex, severity")
        for k in ("kind", "regex", "severity"):
            if not isinstance(d.get(k), str):
                raise ValueError(f"log pattern {d!r}: {k} must be a string")
        try:
            return cls(d["kind"], d["regex"], d["severity"], str(d.get("description") or ""))
        except re.error as e:
            raise ValueError(f"log pattern {d['kind']!r}: bad regex {d['regex']!r}: {e}") from None


def patterns_doc(files: list[str], patterns: list[LogPattern]) -> dict[str, object]:
    """What the runner stores in ``test.json`` under ``server_logs``."""
    return {"files": list(files), "patterns": [p.to_dict() for p in patterns]}


def scan_file(path: Path, patterns: list[LogPattern]) -> dict[str, list[tuple[int, str]]]:
    """Matches in one log file: kind -> [(1-based line number, quoted text)], every match.

    Undecodable bytes are replaced (a corrupt log is still scanned). Raises OSError when the file
    cannot be read.
    """
    compiled = [(p.kind, re.compile(p.regex)) for p in patterns]
    out: dict[str, list[tuple[int, str]]] = {}
    open_tb: tuple[str, int] | None = None  # (kind, index into out[kind]) of a traceback being read
    with open(path, encoding="utf-8", errors="replace") as f:
        for no, raw in enumerate(f, 1):
            line = raw.rstrip("\n")
            if open_tb is not None:
                if line[:1] in (" ", "\t") or not line.strip():
                    continue
                kind, i = open_tb
                n, text = out[kind][i]
                out[kind][i] = (n, f"{text} ... {line.strip()}"[:MAX_LINE_CHARS])
                open_tb = None
            for kind, rx in compiled:
                if rx.search(line):
                    out.setdefault(kind, []).append((no, line[:MAX_LINE_CHARS]))
                    if line.lstrip().startswith("Traceback (most recent call last)"):
                        open_tb = (kind, len(out[kind]) - 1)
                    break
    return out


class ServerLogChecker:
    """Scans every node's downloaded server logs for the DB's declared anomaly patterns.

    Reads ``test["server_logs"]`` (see the module docstring) and ``nodes/<node>/<file>`` beside the
    history. Result: ``valid`` (False when an ``invalid``-severity pattern matched; ``unknown`` when a
    node's log is missing or unreadable, so nothing can be said about it; else True), ``kinds``:
    ``{kind: {"severity", "description", "count", "by_node": {node: n}, "lines": [{"node", "file",
    "line", "text"}, ...]}}`` (the first :data:`MAX_QUOTED` lines), ``scanned`` (``node/file`` paths
    relative to the run directory), ``missing``, ``not_downloaded`` (declared logs a node did not
    have, from test.json's ``node_logs``), ``summary`` (one line), and ``cause`` when invalid.
    Follows ``jepsen.checker/log-file-pattern``.
    """

    name = "server-logs"

    def check(self, test: dict[str, Any], history_path: Path, opts: dict[str, Any]) -> dict[str, Any]:
        spec = test.get("server_logs")
        if not isinstance(spec, dict):
            return {"valid": UNKNOWN, "error": "test.json has no server_logs patterns"}
        patterns = [LogPattern.from_dict(d) for d in spec.get("patterns") or []]
        files = [str(f) for f in spec.get("files") or []]
        nodes = [n.get("name") if isinstance(n, dict) else str(n) for n in test.get("nodes") or []]
        run_dir = Path(history_path).parent
        kinds: dict[str, dict[str, Any]] = {
            p.kind: {
                "severity": p.severity,
                "description": p.description,
                "count": 0,
                "by_node": {},
                "lines": [],
            }
            for p in patterns
        }
        scanned, missing = [], []
        for node in nodes:
            names = files
            if not files and patterns:  # the DB named no files: every file downloaded from the node
                node_dir = run_dir / "nodes" / str(node)
                names = sorted(f.name for f in node_dir.iterdir() if f.is_file()) if node_dir.is_dir() else []
                if not names:
                    missing.append(f"nodes/{node}/ (no file downloaded)")
            for name in names:
                rel = f"nodes/{node}/{name}"
                path = run_dir / rel
                try:
                    found = scan_file(path, patterns)
                except OSError as e:
                    missing.append(f"{rel} ({e.strerror or e})")
                    continue
                scanned.append(rel)
                for kind, hits in found.items():
                    k = kinds[kind]
                    k["count"] += len(hits)
                    k["by_node"][node] = k["by_node"].get(node, 0) + len(hits)
                    room = MAX_QUOTED - len(k["lines"])
                    for no, text in hits[: max(room, 0)]:
                        k["lines"].append({"node": node, "file": rel, "line": no, "text": text})
        bad = {kind: k for kind, k in kinds.items() if k["severity"] == INVALID and k["count"]}
        warn = {kind: k for kind, k in kinds.items() if k["severity"] == WARNING and k["count"]}
        out: dict[str, object] = {"kinds": kinds, "scanned": scanned, "missing": missing}
        parts = [f"{k['count']} {kind}" for kind, k in bad.items()]
        parts += [f"{k['count']} {kind} (warning)" for kind, k in warn.items()]
        if bad:
            out["valid"] = False
            first = next(iter(bad.values()))["lines"][0]
            out["cause"] = f"{first['file']}:{first['line']}: {first['text']}"
        elif missing:
            out["valid"] = UNKNOWN
            parts.append(f"{len(missing)} log(s) missing: {', '.join(missing)}")
        else:
            out["valid"] = True
        declared = (
            (test.get("node_logs") or {}).get("missing") if isinstance(test.get("node_logs"), dict) else None
        )
        if declared:  # logs the DB named that a node did not have (the runner's download)
            out["not_downloaded"] = list(declared)
            parts.append(f"{len(declared)} declared log(s) not on their node: {', '.join(declared[:3])}")
        if not patterns:
            downloaded = _downloaded(run_dir)
            parts.append(
                f"the DB declared no log patterns: {downloaded} log(s) downloaded, none scanned"
                if downloaded
                else "the DB declared no log patterns and no log was downloaded"
            )
        elif not parts:
            parts.append(f"no anomalies in {len(scanned)} log(s)")
        out["summary"] = "; ".join(parts)
        return out


def _downloaded(run_dir: Path) -> int:
    """How many files were downloaded under ``nodes/`` of a run directory."""
    nodes = run_dir / "nodes"
    return sum(1 for f in nodes.rglob("*") if f.is_file()) if nodes.is_dir() else 0


def report_rows(results: dict[str, Any] | None, first: int = 5) -> list[dict[str, Any]]:
    """The report's "server log anomalies" section: one row per matched kind, invalid kinds first:
    ``{"kind", "severity", "description", "count", "by_node", "lines"}`` with the first ``first``
    quoted lines (``node``, ``file``, ``line``, ``text``)."""
    r = ((results or {}).get("checkers") or {}).get(ServerLogChecker.name)
    if not isinstance(r, dict) or not isinstance(r.get("kinds"), dict):
        return []
    rows = []
    for kind, k in r["kinds"].items():
        if not isinstance(k, dict) or not k.get("count"):
            continue
        rows.append(
            {
                "kind": kind,
                "severity": k.get("severity", WARNING),
                "description": k.get("description", ""),
                "count": k.get("count", 0),
                "by_node": k.get("by_node") or {},
                "lines": list(k.get("lines") or [])[:first],
            }
        )
    rows.sort(key=lambda row: (row["severity"] != INVALID, row["kind"]))
    return rows
