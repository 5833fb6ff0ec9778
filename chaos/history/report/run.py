"""A run directory as the report reads it, and its ops paired for the timeline and the plots.

:func:`load_run` reads ``test.json``, ``results.json`` and ``history.jsonl`` (the validating
reader, :func:`chaos.history.analysis.read_history`; errors are :class:`ReportError` naming the
file); :func:`pair_ops` pairs client invocations with their completions column-wise
(:class:`Paired`, ``jepsen.history``'s one-op-per-process rule) and nemesis ops by the one pairing
rule of :class:`chaos.history.analysis.NemesisPairing`.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from chaos.history.analysis import (
    ABORTED,
    NO_MATCH,
    HistoryError,
    NemesisPairing,
    fail_class,
    read_history,
)
from chaos.history.op import Op

# Cap on characters of a value shown in the timeline tooltip.
MAX_VALUE_CHARS = 120

TYPE_ORDER = ("ok", "fail", "info")
TYPE_COLOURS = {"ok": "#2b83ba", "fail": "#d7191c", "info": "#fdae61"}


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
