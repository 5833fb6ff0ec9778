"""``chaos analyze`` and ``chaos gate``: the Spark pipeline over many runs, and the release gate.

``chaos gate`` runs a matrix of tests (or takes existing run directories), analyses them with the
pipeline in :mod:`chaos.history.spark.pipeline`, prints a table, writes the summary page, and exits 0 only if
every run is valid and every threshold holds (1 otherwise; 2 when nothing failed but some verdict is
unknown). This is the command a CI job calls before a release. It lives beside the runner it drives:
each run is a ``chaos run`` (:mod:`chaos.runner.cli`) in a process of its own, whose words the gate
checks with the run command itself (:func:`chaos.runner.cli.run_options`) before it starts any.

Without ``--workload``/``--nemesis`` the gate runs a preset of the DB's (its ``gate_presets()``,
:func:`chaos.control.db.gate_presets`; the first is the default): for the bundled server, the
configurations that caught the bug catalogue's classes on real clusters (``bench/catalogue.py
--preset``; Jepsen's habit of a fixed matrix of workload x nemesis packages).
A DB that declares none gets :data:`DEFAULT_MATRIX`.
"""

from __future__ import annotations

import json
import math
import os
import shlex
import subprocess
import sys
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import click
from click.core import ParameterSource
from rich.markup import escape
from rich.table import Table

from chaos import plugins
from chaos.control.db import GateRun, db_factory, db_name, gate_presets
from chaos.errors import (
    EXIT_BAD_ARGS,
    EXIT_INVALID,
    EXIT_UNKNOWN,
    EXIT_VALID,
    BadArguments,
    ConfigError,
    printable,
)
from chaos.history.analysis import run_config
from chaos.history.report.summary import console
from chaos.history.spark.pipeline import add_runs, analyze, iter_table_rows
from chaos.history.store import HistoryError
from chaos.runner.cli import run as run_command
from chaos.runner.cli import run_options

DEFAULT_MATRIX = ("register,log", "partition-ring+kill-leader,kill")
"""The workloads and nemeses of a gate named by neither a preset nor both lists (each missing
list takes its entry here), and of a bare gate when the DB declares no preset."""


def _split(value: str, option: str) -> list[str]:
    """``"a, b"`` -> ``["a", "b"]``; ValueError for an empty entry among others (``a,,b``), as
    ``chaos run --nemesis`` refuses one (all empty is left to the caller: no name at all)."""
    words = [v.strip() for v in value.split(",")]
    if any(words) and not all(words):
        raise ValueError(f"{option} {value!r}: an empty name; expected comma-separated names")
    return [w for w in words if w]


def _run_dirs(paths: tuple[str, ...]) -> list[Path]:
    dirs = []
    for p in paths:
        path = Path(p)
        if path.is_symlink() or (path / "history.jsonl").is_file():
            path = path.resolve()
        if not (path / "history.jsonl").is_file():
            raise ConfigError(f"{p}: not a run directory (expected {p}/history.jsonl)")
        dirs.append(path)
    return dirs


def check_threshold(option: str, value: float | None, *, upper: float | None = None) -> None:
    """Reject a threshold that is NaN, infinite, negative (or above ``upper``) with one line naming
    the option (ConfigError, exit 254), before anything runs."""
    if value is None:
        return
    if not math.isfinite(value) or value < 0 or (upper is not None and value > upper):
        bound = f"between 0 and {upper:g}" if upper is not None else "a finite number >= 0"
        raise ConfigError(f"{option} {value}: expected {bound}")


@dataclass(frozen=True)
class Failure:
    """Why the gate fails for a run: ``kind`` is "invalid", "unknown" or "threshold"."""

    run: str
    kind: str
    text: str

    def __str__(self) -> str:
        return f"{self.run}: {self.text}"


def threshold_failures(
    summary: dict[str, Any],
    *,
    max_unavailable_s: float | None = None,
    max_p99_ms: float | None = None,
    min_ok_rate: float | None = None,
    require_faults_applied: bool = False,
) -> list[Failure]:
    """One entry per run that is not valid or breaks a threshold, naming the run and the reason.

    A run without a figure the threshold needs (no completed ops) fails that threshold: the gate
    cannot show it holds. ``require_faults_applied``: each fault kind requested in a run was applied
    at least once (from the ``faults`` checker; runs without it are not judged, see :func:`notes`).
    """
    out = []
    for r in summary["runs"]:
        run = r["run"]
        if r["valid"] is not True:
            why = "invalid" if r["valid"] is False else "unknown"
            detail = f" ({'; '.join(r['failures'])})" if r["failures"] else ""
            out.append(Failure(run, why, f"{why}{detail}"))
        if r.get("simulated"):
            continue  # a DB's simulation campaign (see db_campaign_rows): a verdict, no live figures
        unavailable, p99, ok_rate = r["max_unavailable_s"], r["p99_ms"], r["ok_rate"]
        if max_unavailable_s is not None:
            if unavailable is None:
                out.append(Failure(run, "threshold", "no availability figure for --max-unavailable-s"))
            elif unavailable > max_unavailable_s:
                out.append(
                    Failure(run, "threshold", f"unavailable {unavailable:.2f} s > {max_unavailable_s} s")
                )
        if max_p99_ms is not None:
            if p99 is None:
                out.append(Failure(run, "threshold", "no completed op for --max-p99-ms"))
            elif p99 > max_p99_ms:
                out.append(Failure(run, "threshold", f"p99 {p99:.1f} ms > {max_p99_ms} ms"))
        if min_ok_rate is not None:
            if ok_rate is None:
                out.append(Failure(run, "threshold", "no completed op for --min-ok-rate"))
            elif ok_rate < min_ok_rate:
                out.append(Failure(run, "threshold", f"ok rate {ok_rate:.1%} < {min_ok_rate:.1%}"))
        if require_faults_applied and r.get("faults"):
            for kind, c in sorted(r["faults"].items()):
                if c["requested"] > 0 and c["applied"] == 0:
                    out.append(
                        Failure(
                            run,
                            "threshold",
                            f"fault {kind} requested {c['requested']} times, never applied ({c['failed']} failed)",
                        )
                    )
    return out


def notes(summary: dict[str, Any], *, require_faults_applied: bool = False) -> list[str]:
    """Things the gate could not judge, one line each (printed, not failing)."""
    out = []
    if require_faults_applied:
        for r in summary["runs"]:
            if r.get("faults") is None:
                out.append(f"{r['run']}: no faults result in the run; --require-faults-applied not checked")
    return out


def gate_db(run_args: list[str]) -> str:
    """The DB a gate's runs test: the ``--db`` of its ``--run-arg`` words (the last, as ``chaos
    run`` reads them), else the default DB (:func:`chaos.plugins.default_db`)."""
    name = None
    for i, a in enumerate(run_args):
        if a == "--db" and i + 1 < len(run_args):
            name = run_args[i + 1]
        elif a.startswith("--db="):
            name = a.partition("=")[2]
    return name or plugins.default_db()


def db_campaign_rows(run_args: list[str], store: str, master: str | None = None) -> list[dict[str, object]]:
    """The rows a DB plug-in adds to a default gate: its ``gate_campaign(store)`` (a callable
    attribute of the DB factory, e.g. a deterministic simulation campaign sized to the gate's
    time) returns summary rows (``run``, ``workload``, ``nemesis``, ``valid``, ``ops``, ``failures``
    and ``simulated: True``); none when the DB has no such attribute. The DB is :func:`gate_db`'s.
    ``master``: a Spark master URL the gate was given explicitly, passed as
    ``gate_campaign(store, master=URL)`` so the campaign runs there."""
    campaign = getattr(db_factory(gate_db(run_args)), "gate_campaign", None)
    if not callable(campaign):
        return []
    return list(campaign(store, master=master) if master is not None else campaign(store))


def db_campaign_command(run_args: list[str]) -> str | None:
    """What the DB's gate campaign runs, as its ``gate_campaign_command`` says (None when the DB
    declares none); the DB is :func:`gate_db`'s."""
    db = db_factory(gate_db(run_args))
    text = (
        getattr(db, "gate_campaign_command", None) if callable(getattr(db, "gate_campaign", None)) else None
    )
    return str(text) if text else None


def options_of_runs(summary: dict[str, Any]) -> None:
    """Each run's ``options``: the DB and nemesis options it was given, from its ``test.json``
    (:func:`chaos.history.analysis.run_config`: ``read-mode=lease;
    lose_unfsynced_targets=majority-followers``), so a gate's runs of the same workload and
    nemesis that differ only there are told apart in its table and ``summary.json``."""
    for row in summary.get("runs") or ():
        if row.get("options") is not None or not row.get("dir"):
            continue
        try:
            test = json.loads((Path(row["dir"]) / "test.json").read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        row["options"] = run_config(test if isinstance(test, dict) else None)


def print_table(summary: dict[str, Any], file: object = None) -> None:
    """The gate's table of runs on ``file`` (default stdout): a terminal's width, whole rows on a
    pipe (a CI log keeps every column however long a run's directory is)."""
    table = Table(title="runs")
    for col in ("run", "workload", "nemesis", "options", "verdict", "ops", "ok rate", "p99 ms", "unavail s"):
        table.add_column(col, no_wrap=col == "run")  # a run's directory pastes whole
    colours = {"valid": "green", "invalid": "red", "unknown": "yellow"}
    configs = [str(r.get("options") or "") for r in summary["runs"]]
    for row, options in zip(iter_table_rows(summary), configs, strict=True):
        cells = [*row[:3], options or "-", *row[3:]]  # runs differing only in options told apart
        table.add_row(*(escape(printable(cell)) for cell in cells), style=colours.get(row[3]))
    console(file).print(table)


def _analyze(
    dirs: list[Path], master: str, out: str | None, time_limit: float | None, stop: bool = True
) -> dict[str, object]:
    try:
        return analyze(
            dirs,
            master=master,
            out=Path(out) if out else None,
            time_limit=time_limit,
            stop=stop,
            # what Spark is doing, stage by stage, for a person at a terminal (bad input stays one line)
            say=(lambda m: click.echo(printable(m), err=True)) if sys.stderr.isatty() else None,
        )
    except HistoryError as e:  # the same line `chaos check` prints
        raise ConfigError(f"malformed history: {e}") from None
    except (FileNotFoundError, ValueError) as e:
        raise ConfigError(str(e)) from None
    except RuntimeError as e:
        raise click.ClickException(str(e)) from e


def _exit_for(failures: list[Failure]) -> int:
    """1 if any run is invalid or breaks a threshold, else 2 if any is unknown, else 0."""
    if any(f.kind != "unknown" for f in failures):
        return EXIT_INVALID
    return EXIT_UNKNOWN if failures else EXIT_VALID


def _check_time_limit(time_limit: float | None) -> None:
    if time_limit is not None and (not math.isfinite(time_limit) or time_limit <= 0):
        raise ConfigError(f"--time-limit {time_limit}: expected a positive number of seconds")


@click.command("analyze")
@click.argument("run_dirs", nargs=-1, required=True)
@click.option("--master", default="local[*]", show_default=True, help="Spark master URL.")
@click.option("--out", default=None, help="Output directory (default store/analysis/<timestamp>).")
@click.option(
    "--time-limit", type=float, default=None, help="Seconds per key for the linearizability search."
)
def analyze_cmd(run_dirs: tuple[str, ...], master: str, out: str | None, time_limit: float | None) -> int:
    """Analyse RUN_DIRS on Spark: Parquet, verdicts, latency, availability, summary page.

    Exit status: the worst verdict of the runs, as `chaos check` gives it for each (0 valid,
    1 invalid, 2 unknown); 254 for a bad argument or a malformed history.
    """
    _check_time_limit(time_limit)
    summary = _analyze(_run_dirs(run_dirs), master, out, time_limit, stop=False)  # the process ends next
    options_of_runs(summary)
    print_table(summary)
    click.echo(f"summary: {summary['out']}/index.html")
    return _exit_for(threshold_failures(summary))


def configurations(
    preset: str | None,
    workloads: str | None,
    nemeses: str | None,
    presets: Mapping[str, Sequence[GateRun]] | None = None,
) -> list[GateRun]:
    """The distinct configurations of one gate, in order: ``workloads`` x ``nemeses``
    (comma-separated; a missing one takes :data:`DEFAULT_MATRIX`'s) when either is given, else the
    ``preset`` of ``presets`` (the DB's, :func:`chaos.control.db.gate_presets`; default its first),
    else, when the DB declares none, :data:`DEFAULT_MATRIX`. ValueError for an unknown (or empty)
    preset, an empty list or name, or a preset given with a matrix."""
    presets = dict(presets or {})
    if preset is not None and (workloads is not None or nemeses is not None):
        raise ValueError(f"--preset {preset} with --workload/--nemesis: expected one or the other")
    if workloads is None and nemeses is None and (presets or preset is not None):
        name = next(iter(presets), "") if preset is None else preset
        if name not in presets:
            expected = f"expected one of {', '.join(presets)}" if presets else "the DB declares no preset"
            raise ValueError(f"--preset {name or repr(name)}: {expected}")
        return list(presets[name])
    ws = _split(workloads if workloads is not None else DEFAULT_MATRIX[0], "--workload")
    ns = _split(nemeses if nemeses is not None else DEFAULT_MATRIX[1], "--nemesis")
    if not ws or not ns:
        raise ValueError("--workload/--nemesis: expected at least one name each")
    for n in ns:
        if not all(part.strip() for part in n.split("+")):
            raise ValueError(f"--nemesis {n!r}: an empty fault; expected names joined with +")
    return [GateRun(w, n) for w in ws for n in ns]


def repeated(configs: list[GateRun], runs: int) -> Iterator[GateRun]:
    """Each configuration ``runs`` times in a row, lazily: ``--runs 1000000000`` costs no memory."""
    for c in configs:
        for _ in range(runs):
            yield c


def matrix(
    preset: str | None,
    workloads: str | None,
    nemeses: str | None,
    runs: int,
    presets: Mapping[str, Sequence[GateRun]] | None = None,
) -> list[GateRun]:
    """The runs of one gate as a list: :func:`configurations`, each ``runs`` times in a row."""
    return list(repeated(configurations(preset, workloads, nemeses, presets), runs))


def check_configurations(configs: list[GateRun], store: str, extra: list[str]) -> None:
    """What ``chaos run`` checks of each configuration's words before it starts, without starting
    it: the run command parses them (options, types, choices) and :func:`chaos.runner.cli.run_options`
    checks them as it does (the DB's own options, the nemesis names and options, numbers, the
    workload). BadArguments naming the words, as the real gate stops with 254 when ``chaos run``
    refuses a configuration."""
    for cfg in configs:
        words = cfg.run_args(store, extra)[1:]
        try:
            if "--help" in words or "-h" in words:
                raise click.exceptions.Exit(0)  # chaos run would print its help, not run
            with run_command.make_context("run", list(words)) as ctx:
                run_options(ctx.params, ctx.args)
        except click.exceptions.Exit:  # --help or --version among the words
            raise BadArguments(f"chaos run {shlex.join(words)}: would not run a test") from None
        except click.ClickException as e:
            what = e.format_message()
            if isinstance(e, BadArguments) and not what.startswith("No such option"):
                raise BadArguments(f"{what} (in chaos run {shlex.join(words)})") from None
            raise BadArguments(f"chaos run {shlex.join(words)}: {what}") from None
        except ConfigError as e:
            raise BadArguments(f"{e} (in chaos run {shlex.join(words)})") from None


def run_matrix(
    configs: Iterable[GateRun], store: str, run_args: list[str], total: int | None = None
) -> list[Path]:
    """Run ``chaos run`` once per entry of ``configs`` (``total`` of them, for the progress line;
    default ``len(configs)``); return the run directories.

    A run that crashes (exit 255) or cannot start still counts: its directory, if any, is analysed
    and a missing one is reported. ConfigError when ``chaos run`` rejects its arguments (254).
    """
    dirs: list[Path] = []
    if total is None:
        configs = list(configs)
        total = len(configs)
    for i, cfg in enumerate(configs):
        click.echo(f"gate: run {i + 1}/{total}: {cfg.label()}", err=True)
        cmd = [sys.executable, "-m", "chaos.cli", *cfg.run_args(store, run_args)]
        rc = subprocess.call(cmd)
        latest = Path(store) / "latest"
        if rc == EXIT_BAD_ARGS:
            raise ConfigError(
                f"chaos run refused to start (exit 254, its line above says why): {' '.join(cmd[3:])}"
            )
        if latest.exists():
            run_dir = latest.resolve()
            if run_dir not in dirs:
                dirs.append(run_dir)
    return dirs


# the options of this command, in --help order
_GATE_OPTIONS = [
    click.argument("run_dirs", nargs=-1),
    click.option(
        "--preset",
        default=None,
        help="A named matrix of the DB's (listed below); the default when neither --workload nor "
        "--nemesis is given: the DB's first.",
    ),
    click.option(
        "--workload",
        default=None,
        help="Comma-separated workloads, crossed with --nemesis (instead of a preset; with --nemesis "
        "alone: register,log).",
    ),
    click.option(
        "--nemesis",
        default=None,
        help="Comma-separated nemeses, one run each; join faults with + for one run with several "
        "(instead of a preset; with --workload alone: partition-ring+kill-leader,kill).",
    ),
    click.option("--runs", type=int, default=1, show_default=True, help="Runs per configuration."),
    click.option("--store", default="store", show_default=True),
    click.option("--master", default="local[*]", show_default=True, help="Spark master URL."),
    click.option("--out", default=None, help="Summary directory."),
    click.option(
        "--max-unavailable-s", type=float, default=None, help="Fail if any run was unavailable longer."
    ),
    click.option("--max-p99-ms", type=float, default=None, help="Fail if any run's p99 latency is higher."),
    click.option(
        "--min-ok-rate",
        type=float,
        default=None,
        help="Fail if any run's ok rate is lower: the completed ops the DB served (ok, or a fail that "
        "was an answer: no match, aborted, unsupported) over all completed.",
    ),
    click.option(
        "--require-faults-applied",
        is_flag=True,
        help="Fail if a fault kind a run requested was never applied (from the run's faults checker).",
    ),
    click.option(
        "--time-limit",
        type=float,
        default=None,
        help="Seconds per key for the analysis's linearizability search (as chaos check's); not the "
        "runs' length: that is --run-arg '--time-limit S'.",
    ),
    click.option(
        "--run-arg",
        "run_args",
        multiple=True,
        help="Extra argument passed to each `chaos run` (after the preset's, so it overrides them).",
    ),
    click.option("--list", "list_only", is_flag=True, help="Print the `chaos run` of each run and stop."),
]


def _list(configs: list[GateRun], runs: int, store: str, args: list[str], campaign: str | None = None) -> int:
    """Print each run's ``chaos run`` line as it comes (the first at once, whatever ``runs`` is),
    then the DB's campaign (``campaign``: its ``gate_campaign_command``), if any; a reader that
    stops early (``| head``) ends the listing quietly."""
    try:
        for cfg in repeated(configs, runs):
            click.echo(shlex.join(["chaos", *cfg.run_args(store, args)]))
        if campaign:
            click.echo(campaign)
    except BrokenPipeError:
        # nothing more can be written: point stdout at /dev/null so the exit's flush is silent
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    return EXIT_VALID


def presets_epilog(run_args: list[str]) -> list[str]:
    """What a bare ``chaos gate`` runs, for ``--help``: the DB's presets (the first the default),
    each run's ``chaos run`` words, then the DB's campaign."""
    db = gate_db(run_args)
    factory = db_factory(db)
    presets = gate_presets(factory)
    lines = [f"Presets of the DB {db_name(factory)} (--db {db}; another with --run-arg '--db NAME'):"]
    if not presets:
        ws, ns = DEFAULT_MATRIX
        lines.append(f"  none: a bare gate runs --workload {ws} x --nemesis {ns}")
    for i, (name, runs) in enumerate(presets.items()):
        lines.append(f"  {name}{' (the default)' if i == 0 else ''}: {len(runs)} runs")
        lines += [f"    {r.label()}" for r in runs]
    campaign = db_campaign_command(run_args)
    if campaign:
        lines.append(f"then, after a bare gate's runs: {campaign}")
    return lines


class _GateCommand(click.Command):
    def format_epilog(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        try:
            lines = presets_epilog([])
        except Exception as e:  # a DB that does not load must not break --help
            lines = [f"(the DB's presets are unavailable: {e})"]
        formatter.write_paragraph()
        for line in lines:
            formatter.write(f"{'':>{formatter.current_indent}}{line}\n")


def _with_gate_options(fn: Any) -> Any:
    for option in reversed(_GATE_OPTIONS):
        fn = option(fn)
    return fn


@click.command("gate", cls=_GateCommand)
@_with_gate_options
def gate_cmd(
    run_dirs: tuple[str, ...],
    preset: str | None,
    workload: str | None,
    nemesis: str | None,
    runs: int,
    store: str,
    master: str,
    out: str | None,
    max_unavailable_s: float | None,
    max_p99_ms: float | None,
    min_ok_rate: float | None,
    require_faults_applied: bool,
    time_limit: float | None,
    run_args: tuple[str, ...],
    list_only: bool,
) -> int:
    """Release gate: analyse RUN_DIRS (or run the matrix) and exit 0 only if every run is valid and
    every threshold holds.

    A bare `chaos gate` runs the DB's first preset (listed below: for the bundled server, one
    30-s run on 5 nodes of each configuration that caught a class of the bug catalogue on real
    clusters), then the DB's own campaign if it declares one (for the bundled server: 300 seeds of
    the simulation's default swarm, with coverage). `--list` prints every run of it without
    starting any (docs/catalogue.md, docs/gate-and-spark.md)."""
    if runs < 1:
        raise BadArguments(f"--runs {runs}: expected a positive number of runs")
    check_threshold("--max-unavailable-s", max_unavailable_s)
    check_threshold("--max-p99-ms", max_p99_ms)
    check_threshold("--min-ok-rate", min_ok_rate, upper=1.0)
    _check_time_limit(time_limit)
    try:
        args = [a for arg in run_args for a in shlex.split(arg)]
        presets = gate_presets(db_factory(gate_db(args))) if workload is None and nemesis is None else {}
        configs = configurations(preset, workload, nemesis, presets)
    except ValueError as e:  # shlex: an unclosed quote in --run-arg
        raise BadArguments(str(e)) from None
    if list_only or not run_dirs:
        check_configurations(configs, store, args)
    if list_only:
        default = not run_dirs and workload is None and nemesis is None
        return _list(configs, runs, store, args, db_campaign_command(args) if default else None)
    if run_dirs:
        dirs = _run_dirs(run_dirs)
    else:
        dirs = run_matrix(repeated(configs, runs), store, args, total=len(configs) * runs)
        if not dirs:
            raise click.ClickException("gate: no run produced a run directory")
    summary = _analyze(dirs, master, out, time_limit)
    options_of_runs(summary)
    if not run_dirs and workload is None and nemesis is None:
        # e.g. a DB's simulation campaign; on the Spark master the gate was pointed at, if it was
        # (it writes summary.json and the page again, with the rates and options above)
        given = click.get_current_context().get_parameter_source("master") == ParameterSource.COMMANDLINE
        add_runs(summary, db_campaign_rows(args, store, master if given else None))
    print_table(summary)
    failures = threshold_failures(
        summary,
        max_unavailable_s=max_unavailable_s,
        max_p99_ms=max_p99_ms,
        min_ok_rate=min_ok_rate,
        require_faults_applied=require_faults_applied,
    )
    for note in notes(summary, require_faults_applied=require_faults_applied):
        click.echo(printable(f"note: {note}"), err=True)
    for line in failures:
        click.echo(printable(f"FAIL {line}"), err=True)
    click.echo(f"summary: {summary['out']}/index.html")
    code = _exit_for(failures)
    click.echo({EXIT_VALID: "gate: PASS", EXIT_UNKNOWN: "gate: UNKNOWN"}.get(code, "gate: FAIL"))
    return code
