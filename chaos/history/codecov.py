"""Line and branch coverage of the system under test over a campaign, with coverage.py.

A campaign that runs the system's own code in-process (a deterministic simulation: the default
DB plug-in's ``chaos sim`` runs its server's consensus core, driver and store on a simulated world) measures which of its lines, branches and functions the campaign
reached: FoundationDB counts code probes per simulation campaign; this measures the code itself.
The packages measured are the DB's declared ``source_packages`` (:func:`chaos.control.db.source_packages`).

How the parts fit, each step coverage.py's own API (https://coverage.readthedocs.io/en/latest/api.html):

- :class:`Spec` (picklable) names the packages, the coverage.py ``omit`` patterns and the
  campaign's data directory.
- A local worker process calls :func:`start` once, before it imports the measured packages (a
  ``multiprocessing`` pool's initializer), and :func:`save` after each seed: one data file per
  process (``.coverage.<host>.<pid>.<random>``, ``data_suffix=True``), written after every seed, so
  a worker the pool terminates early loses nothing finished. :func:`paused` stops measuring for
  the tool's own work in between (checking a seed's history), which then runs at full speed.
- A remote worker (a Spark executor) runs a chunk under :func:`measured` and returns
  :func:`chunk_data` (coverage.py's serialized data, ``CoverageData.dumps``); the driver writes it
  into the data directory with :func:`add_data`.
- :func:`report` combines the data files (``Coverage.combine``), writes coverage.py's JSON report
  ``coverage.json`` (format 3) and ``unreached.txt`` (per file: its line and branch figures and the
  functions never reached, with their first line) into the campaign directory, and returns a
  :class:`Summary` whose :meth:`Summary.line` is the campaign's one-line figure.

A function is *reached* when at least one of its statements ran; nested functions and methods are
counted on their own (coverage.py's ``functions`` of the JSON report, qualified names). A file
none of whose statements ran (never imported in the campaign) is listed as one line, not per
function.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

DATA_FILE = ".coverage"
JSON_REPORT = "coverage.json"
UNREACHED = "unreached.txt"

_active: Any = None  # this process's Coverage, when start() started one


@dataclass(frozen=True)
class Spec:
    """What a campaign measures: ``packages`` (importable names, e.g. ``("myserver",)``), ``omit``
    (coverage.py ``omit`` file patterns, e.g. ``("*/myserver/sim.py",)``) and ``data_dir`` (the
    directory the data files and reports go to; absolute)."""

    packages: tuple[str, ...]
    omit: tuple[str, ...] = ()
    data_dir: str = ""

    def coverage(self, data_file: str | None, suffix: bool = False) -> Any:
        """A ``coverage.Coverage`` measuring lines and branches of the packages (no config file)."""
        import coverage

        return coverage.Coverage(
            data_file=data_file,
            data_suffix=suffix or None,
            source=list(self.packages),
            omit=list(self.omit) or None,
            branch=True,
            config_file=False,
        )


def campaign_dir(store: str | os.PathLike[str], kind: str = "sim") -> Path:
    """A new ``<store>/<kind>-campaigns/<YYYYmmddTHHMMSS.fff>/`` for one campaign's reports."""
    now = time.time()
    stamp = time.strftime("%Y%m%dT%H%M%S", time.localtime(now)) + f".{int(now * 1000) % 1000:03d}"
    path = Path(store) / f"{kind}-campaigns" / stamp
    path.mkdir(parents=True, exist_ok=False)
    return path.resolve()


def start(spec: Spec) -> None:
    """Start measuring in this process (once; a second call does nothing), its data going to a
    data file of its own in ``spec.data_dir``. Call before the measured packages are imported, or
    their module-level lines count as not reached."""
    global _active
    if _active is not None:
        return
    _active = spec.coverage(os.path.join(spec.data_dir, DATA_FILE), suffix=True)
    _active.start()


def save() -> None:
    """Write what this process measured so far to its data file (nothing when not measuring)."""
    if _active is not None:
        _active.save()


@contextlib.contextmanager
def measured(spec: Spec) -> Iterator[Any]:
    """Measure the block in memory (no data file): yields the ``Coverage`` for :func:`chunk_data`."""
    global _active
    cov = spec.coverage(None)
    cov.start()
    before, _active = _active, cov
    try:
        yield cov
    finally:
        _active = before
        cov.stop()


@contextlib.contextmanager
def paused() -> Iterator[None]:
    """Stop measuring for the block (the tool's own work between the system's, e.g. checking a
    history: traced it runs several times slower and its time limits would decide verdicts)."""
    cov = _active
    if cov is None:
        yield
        return
    cov.stop()
    try:
        yield
    finally:
        cov.start()


def chunk_data(cov: Any) -> bytes:
    """The data ``cov`` measured, serialized (``CoverageData.dumps``) to travel to the driver."""
    return bytes(cov.get_data().dumps())


def add_data(spec: Spec, blob: bytes, name: str) -> None:
    """Write serialized data (:func:`chunk_data`) as the data file ``.coverage.<name>`` of
    ``spec.data_dir``, for :func:`report` to combine."""
    from coverage import CoverageData

    data = CoverageData(os.path.join(spec.data_dir, f"{DATA_FILE}.{name}"))
    data.loads(blob)
    data.write()


@dataclass
class FileFigures:
    """One file's figures: ``path`` (relative to its package's parent, e.g. ``myserver/core/node.py``),
    statements and branches reached of all, and the functions never reached as
    ``(qualified name, first line)``."""

    path: str
    lines: int
    lines_reached: int
    branches: int
    branches_reached: int
    functions: int
    unreached: list[tuple[str, int]] = field(default_factory=list)

    @property
    def percent(self) -> float:
        return 100.0 * self.lines_reached / self.lines if self.lines else 100.0


@dataclass
class Summary:
    """A campaign's coverage: the files (:class:`FileFigures`, by path) and where the reports are."""

    packages: tuple[str, ...]
    files: list[FileFigures]
    json_path: Path
    unreached_path: Path

    def totals(self, prefix: str = "") -> FileFigures:
        """The sums over the files whose path starts with ``prefix`` (all by default)."""
        chosen = [f for f in self.files if f.path.startswith(prefix)]
        return FileFigures(
            prefix or "+".join(self.packages),
            sum(f.lines for f in chosen),
            sum(f.lines_reached for f in chosen),
            sum(f.branches for f in chosen),
            sum(f.branches_reached for f in chosen),
            sum(f.functions for f in chosen),
            [u for f in chosen for u in f.unreached],
        )

    def line(self) -> str:
        """``system under test: 93.1 % of lines, 412 of 430 functions reached`` (plus branches)."""
        t = self.totals()
        branches = 100.0 * t.branches_reached / t.branches if t.branches else 100.0
        ran = [f for f in self.files if f.lines_reached]
        run = sum(f.lines_reached for f in ran) / max(sum(f.lines for f in ran), 1) * 100.0
        return (
            f"system under test: {t.percent:.1f} % of lines, {t.functions - len(t.unreached)} of "
            f"{t.functions} functions reached ({branches:.1f} % of branches; {', '.join(self.packages)}; "
            f"{run:.1f} % of the lines of the {len(ran)} of {len(self.files)} files the campaign ran)"
        )


def _display_path(filename: str, packages: Sequence[str]) -> str:
    """``filename`` relative to the directory holding its package (``myserver/core/node.py``)."""
    absolute = os.path.realpath(filename)
    for name in packages:
        spec = importlib.util.find_spec(name)
        for location in (spec.submodule_search_locations or []) if spec else []:
            root = os.path.dirname(os.path.realpath(location))
            if absolute.startswith(root + os.sep):
                return os.path.relpath(absolute, root)
    return filename


def _figures(name: str, entry: dict[str, Any]) -> FileFigures:
    s = entry["summary"]
    funcs = {k: v for k, v in entry.get("functions", {}).items() if k and v["summary"]["num_statements"]}
    unreached = sorted(
        ((k, int(v.get("start_line") or 0)) for k, v in funcs.items() if not v["summary"]["covered_lines"]),
        key=lambda u: u[1],
    )
    return FileFigures(
        name,
        s["num_statements"],
        s["covered_lines"],
        s.get("num_branches", 0),
        s.get("covered_branches", 0),
        len(funcs),
        unreached,
    )


def report(spec: Spec, out_dir: Path | None = None) -> Summary:
    """Combine the data files of ``spec.data_dir`` and write ``coverage.json`` (coverage.py's JSON
    report) and ``unreached.txt`` into ``out_dir`` (default: the data directory).

    Raises ValueError when there is no data to combine (no seed ran) or a data file cannot be read
    (e.g. a worker terminated while it wrote, after ``--stop-on-failure``)."""
    out = Path(out_dir or spec.data_dir)
    cov = spec.coverage(os.path.join(spec.data_dir, DATA_FILE))
    import coverage

    try:
        cov.combine([spec.data_dir], keep=False)
    except coverage.exceptions.NoDataError as e:
        raise ValueError(f"no coverage data in {spec.data_dir}: {e}") from None
    except coverage.exceptions.CoverageException as e:
        raise ValueError(f"coverage data in {spec.data_dir} not combined: {e}") from None
    cov.save()
    json_path = out / JSON_REPORT
    with contextlib.redirect_stdout(None):  # coverage.py prints "Wrote JSON report to ..."
        cov.json_report(outfile=str(json_path), ignore_errors=True)
    doc = json.loads(json_path.read_text())
    files = sorted(
        (_figures(_display_path(name, spec.packages), entry) for name, entry in doc["files"].items()),
        key=lambda f: f.path,
    )
    summary = Summary(spec.packages, files, json_path, out / UNREACHED)
    summary.unreached_path.write_text(unreached_text(summary))
    return summary


def unreached_text(summary: Summary) -> str:
    """The per-file listing: each file's figures, then its unreached functions (name, line)."""
    lines = [summary.line(), ""]
    for f in summary.files:
        branches = f"{f.branches_reached} of {f.branches} branches" if f.branches else "no branches"
        functions = (
            f", {f.functions - len(f.unreached)} of {f.functions} functions reached" if f.functions else ""
        )
        head = f"{f.path}: {f.percent:.1f} % of {f.lines} lines, {branches}{functions}"
        if f.lines and not f.lines_reached:
            lines.append(f"{head} (never imported: no function ran)")
            continue
        lines.append(head)
        lines.extend(f"    {name} (line {first})" for name, first in f.unreached)
    return "\n".join(lines) + "\n"
