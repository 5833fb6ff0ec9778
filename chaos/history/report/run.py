"""A run directory as the report reads it, and its ops paired for the timeline and the plots.

:func:`load_run` reads ``test.json``, ``results.json`` and ``history.jsonl`` (read and validated
once, :class:`chaos.history.store.ParsedHistory`, or the one the checkers already read, handed
over by the caller; errors are :class:`ReportError` naming the file); :func:`pair_ops` lays out
the ops as the checkers pair them (:func:`chaos.history.store.pair`, ``jepsen.history``'s
one-op-per-process rule for clients, per ``f`` for the nemesis) column-wise for the page
(:class:`Paired`).
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from chaos.history.analysis import ABORTED, NO_MATCH, HistoryError, fail_class
from chaos.history.op import NEMESIS, Op
from chaos.history.store import ParsedHistory, pair

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


def _read_json(path: Path, what: str) -> object:
    try:
        with path.open(encoding="utf-8") as fh:
            return json.load(fh)
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as e:
        raise ReportError(f"{what} {path}: expected a JSON document ({e})") from e


def read_history(path: Path) -> tuple[ParsedHistory | None, int]:
    """Read ``history.jsonl`` once with the validating reader every command uses
    (:class:`chaos.history.store.ParsedHistory`; docs/design.md, "Ops and histories").

    Returns (the parsed history, None for no file; the number of lines skipped: a torn last line
    of a run killed while writing, :func:`torn_lines`). A malformed history raises ReportError
    naming the file and line."""
    try:
        history = ParsedHistory.read(path)
    except FileNotFoundError:
        return None, 0
    except HistoryError as e:
        raise ReportError(f"history {e}") from None
    except OSError as e:
        raise ReportError(f"history {path}: cannot be read ({e})") from e
    return history, torn_lines(history)


def torn_lines(history: ParsedHistory) -> int:
    """1 when the history's file ends in a line without its newline that is no op (a writer killed
    mid-line, skipped by the reader), else 0. Reads the file's last bytes only."""
    try:
        with open(history.path, "rb") as f:
            size = f.seek(0, os.SEEK_END)
            if size == 0:
                return 0
            f.seek(max(0, size - 1))
            if f.read(1) == b"\n":
                return 0
            f.seek(0)
            lines = f.read().count(b"\n") + 1
    except OSError:
        return 0
    return 1 if not history.lines or history.lines[-1] < lines else 0


@dataclass
class Run:
    """A run directory's contents as the report needs them: ``history`` its ops, in file order."""

    path: Path
    test: dict[str, Any]
    results: dict[str, object] | None
    history: Sequence[Op]
    skipped_lines: int = 0
    files: list[str] = field(default_factory=list)


def load_run(run_dir: str | os.PathLike[str], history: ParsedHistory | None = None) -> Run:
    """Load test.json, results.json and history.jsonl of ``run_dir``; ``history``: the run's
    history as the checkers already read it (then the file is not read again).

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
    if test is None and history is None and not hist_path.exists():
        raise ReportError(f"run directory {path}: expected history.jsonl or test.json in it")
    if test is not None and not isinstance(test, dict):
        raise ReportError(f"test options {path / 'test.json'}: expected a JSON object")
    if results is not None and not isinstance(results, dict):
        raise ReportError(f"results {path / 'results.json'}: expected a JSON object")
    skipped = 0
    if history is None:
        history, skipped = read_history(hist_path)
    else:
        skipped = torn_lines(history)
    ops = history.ops if history is not None else []
    return Run(path, test or {}, results, ops, skipped, _list_files(path))


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


def _short(v: object, limit: int = MAX_VALUE_CHARS) -> str:
    if v is None:
        return "null"
    if type(v) is int:
        return str(v)
    s = v if isinstance(v, str) else _ENC.encode(v)
    return s if len(s) <= limit else s[: limit - 1] + "…"


def _proc_sort_key(p: object) -> tuple[int, float, str]:
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


@dataclass
class NemesisOp:
    """A nemesis op paired as the checkers pair it (:func:`chaos.history.store.pair`): ``f``, the
    invocation's ``start`` time and ``value``, the completion's ``end`` time and ``result`` (None
    when it never completed), history indexes ``i`` and ``j`` (-1: none)."""

    f: str
    start: int
    end: int | None
    value: object
    result: object
    i: int
    j: int


def pair_ops(history: Sequence[Op]) -> tuple[Paired, list[NemesisOp], int]:
    """The ops of a history as the checkers pair them (:func:`chaos.history.store.pair`: a process
    runs one op at a time, jepsen.history; nemesis ops per ``f``), in invocation order.

    Returns (client pairs column-wise, nemesis pairs, end time in ns). An invocation with no
    completion is kept with completion time -1 (drawn to the end of the history, as Jepsen does).
    An op without an ``index`` is numbered by its place in the history.
    """
    where = {id(op): n for n, op in enumerate(history)} if any(op.index < 0 for op in history) else None

    def idx(op: Op) -> int:
        return op.index if op.index >= 0 or where is None else where[id(op)]

    procs = [str(p) for p in sorted({op.process: None for op in history}, key=_proc_sort_key)]
    pidx = {p: n for n, p in enumerate(procs)}
    out = Paired(procs=procs, fs=[])
    fidx: dict[str, int] = {}
    nem: list[NemesisOp] = []
    end = max((op.time for op in history), default=0)
    for inv, done in sorted(pair(history), key=lambda p: idx(p[0])):
        if inv.process == NEMESIS:
            nem.append(
                NemesisOp(
                    inv.f,
                    inv.time,
                    None if done is None else done.time,
                    inv.value,
                    None if done is None else done.value,
                    idx(inv),
                    -1 if done is None else idx(done),
                )
            )
            continue
        if inv.f not in fidx:
            fidx[inv.f] = len(fidx)
            out.fs.append(inv.f)
        _add_client(out, pidx[str(inv.process)], fidx[inv.f], inv, idx(inv))
        if done is not None:
            _complete(out, done, idx(done))
    return out, nem, end


def _add_client(out: Paired, proc: int, f: int, inv: Op, i: int) -> None:
    out.p.append(proc)
    out.f.append(f)
    out.t.append(2)
    out.s.append(inv.time // 1000)
    out.e.append(-1)
    out.i.append(i)
    out.j.append(-1)
    out.v.append(_short(inv.value))
    out.k.append("" if inv.key is None else _short(inv.key, 40))
    out.n.append(str(inv.node or ""))
    out.err.append("")
    out.nm.append(0)
    out.ab.append(0)


def _complete(out: Paired, done: Op, j: int) -> None:
    """The last client pair of ``out`` completed by ``done`` (history index ``j``)."""
    m = len(out.p) - 1
    out.t[m] = TYPE_ORDER.index(done.type) if done.type in TYPE_ORDER else 2
    cls = fail_class(done)
    out.nm[m] = 1 if cls == NO_MATCH else 0
    out.ab[m] = 1 if cls == ABORTED else 0
    out.e[m] = done.time // 1000
    out.j[m] = j
    text = out.v[m] + " → " + _short(done.value)
    if done.extra:
        text += " " + _short(done.extra, 60)
    out.v[m] = text[: MAX_VALUE_CHARS * 2]
    if done.node and not out.n[m]:
        out.n[m] = str(done.node)
    if done.error is not None:
        out.err[m] = _short(done.error, 200)
