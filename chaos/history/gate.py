"""``chaos analyze`` and ``chaos gate``: the Spark pipeline over many runs, and the release gate.

``chaos gate`` runs a matrix of tests (or takes existing run directories), analyses them with the
pipeline in :mod:`chaos.history.spark`, prints a table, writes the summary page, and exits 0 only if
every run is valid and every threshold holds (1 otherwise; 2 when nothing failed but some verdict is
unknown). This is the command a CI job calls before a release.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import click

from chaos.cli import EXIT_BAD_ARGS, EXIT_INVALID, EXIT_UNKNOWN, EXIT_VALID, BadArguments


def _split(value: str) -> list[str]:
    return [v.strip() for v in value.split(",") if v.strip()]


def _run_dirs(paths: tuple[str, ...]) -> list[Path]:
    dirs = []
    for p in paths:
        path = Path(p)
        if path.is_symlink() or (path / "history.jsonl").is_file():
            path = path.resolve()
        if not (path / "history.jsonl").is_file():
            raise BadArguments(f"{p}: not a run directory (expected {p}/history.jsonl)")
        dirs.append(path)
    return dirs


def threshold_failures(
    summary: dict[str, Any],
    *,
    max_unavailable_s: float | None = None,
    max_p99_ms: float | None = None,
    min_ok_rate: float | None = None,
) -> list[str]:
    """One line per run that is not valid or breaks a threshold, naming the run and the reason."""
    out = []
    for r in summary["runs"]:
        if r["valid"] is not True:
            why = "invalid" if r["valid"] is False else "unknown"
            detail = f" ({'; '.join(r['failures'])})" if r["failures"] else ""
            out.append(f"{r['run']}: {why}{detail}")
        if max_unavailable_s is not None and (r["max_unavailable_s"] or 0) > max_unavailable_s:
            out.append(f"{r['run']}: unavailable {r['max_unavailable_s']:.2f} s > {max_unavailable_s} s")
        if max_p99_ms is not None and (r["p99_ms"] or 0) > max_p99_ms:
            out.append(f"{r['run']}: p99 {r['p99_ms']:.1f} ms > {max_p99_ms} ms")
        if min_ok_rate is not None and r["ok_rate"] is not None and r["ok_rate"] < min_ok_rate:
            out.append(f"{r['run']}: ok rate {r['ok_rate']:.1%} < {min_ok_rate:.1%}")
    return out


def print_table(summary: dict[str, Any]) -> None:
    from rich.console import Console
    from rich.table import Table

    from chaos.history.spark import iter_table_rows

    table = Table(title="runs")
    for col in ("run", "workload", "nemesis", "verdict", "ops", "ok rate", "p99 ms", "unavail s"):
        table.add_column(col)
    colours = {"valid": "green", "invalid": "red", "unknown": "yellow"}
    for row in iter_table_rows(summary):
        table.add_row(*row, style=colours.get(row[3]))
    Console(stderr=False).print(table)


def _analyze(dirs: list[Path], master: str, out: str | None, time_limit: float | None) -> dict[str, Any]:
    from chaos.history.spark import analyze

    try:
        return analyze(dirs, master=master, out=Path(out) if out else None, time_limit=time_limit)
    except (FileNotFoundError, ValueError) as e:
        raise BadArguments(str(e)) from e
    except RuntimeError as e:
        raise click.ClickException(str(e)) from e


def _exit_for(failures: list[str]) -> int:
    if any(": unknown" not in f for f in failures):
        return EXIT_INVALID
    return EXIT_UNKNOWN if failures else EXIT_VALID


@click.command("analyze")
@click.argument("run_dirs", nargs=-1, required=True)
@click.option("--master", default="local[*]", show_default=True, help="Spark master URL.")
@click.option("--out", default=None, help="Output directory (default store/analysis/<timestamp>).")
@click.option(
    "--time-limit", type=float, default=None, help="Seconds per key for the linearizability search."
)
def analyze_cmd(run_dirs: tuple[str, ...], master: str, out: str | None, time_limit: float | None) -> int:
    """Analyse RUN_DIRS on Spark: Parquet, verdicts, latency, availability, summary page."""
    summary = _analyze(_run_dirs(run_dirs), master, out, time_limit)
    print_table(summary)
    click.echo(f"summary: {summary['out']}/index.html")
    return _exit_for(threshold_failures(summary))


def run_matrix(
    workloads: list[str], nemeses: list[str], runs: int, store: str, run_args: list[str]
) -> list[Path]:
    """Run ``chaos run`` for every (workload, nemesis) ``runs`` times; return the run directories.

    A run that crashes (exit 255) or cannot start still counts: its directory, if any, is analysed
    and a missing one is reported.
    """
    dirs = []
    for workload in workloads:
        for nemesis in nemeses:
            for i in range(runs):
                click.echo(f"gate: run {i + 1}/{runs} workload={workload} nemesis={nemesis}", err=True)
                cmd = [sys.executable, "-m", "chaos.cli", "run", "--workload", workload, "--nemesis", nemesis]
                cmd += ["--store", store, *run_args]
                rc = subprocess.call(cmd)
                latest = Path(store) / "latest"
                if rc == EXIT_BAD_ARGS:
                    raise BadArguments(f"chaos run rejected its arguments: {' '.join(cmd[3:])}")
                if latest.exists():
                    run_dir = latest.resolve()
                    if run_dir not in dirs:
                        dirs.append(run_dir)
    return dirs


@click.command("gate")
@click.argument("run_dirs", nargs=-1)
@click.option("--workload", default="register,log", show_default=True, help="Comma-separated workloads.")
@click.option("--nemesis", default="partition-ring,kill", show_default=True, help="Comma-separated nemeses.")
@click.option("--runs", type=int, default=1, show_default=True, help="Runs per (workload, nemesis).")
@click.option("--store", default="store", show_default=True)
@click.option("--master", default="local[*]", show_default=True, help="Spark master URL.")
@click.option("--out", default=None, help="Summary directory.")
@click.option("--max-unavailable-s", type=float, default=None, help="Fail if any run was unavailable longer.")
@click.option("--max-p99-ms", type=float, default=None, help="Fail if any run's p99 latency is higher.")
@click.option(
    "--min-ok-rate", type=float, default=None, help="Fail if any run's ok/completed ratio is lower."
)
@click.option("--run-arg", "run_args", multiple=True, help="Extra argument passed to each `chaos run`.")
def gate_cmd(
    run_dirs: tuple[str, ...],
    workload: str,
    nemesis: str,
    runs: int,
    store: str,
    master: str,
    out: str | None,
    max_unavailable_s: float | None,
    max_p99_ms: float | None,
    min_ok_rate: float | None,
    run_args: tuple[str, ...],
) -> int:
    """Release gate: analyse RUN_DIRS (or run the matrix) and exit 0 only if every run is valid and
    every threshold holds."""
    if runs < 1:
        raise BadArguments(f"--runs {runs}: expected a positive number of runs")
    if min_ok_rate is not None and not 0 <= min_ok_rate <= 1:
        raise BadArguments(f"--min-ok-rate {min_ok_rate}: expected a fraction between 0 and 1")
    if run_dirs:
        dirs = _run_dirs(run_dirs)
    else:
        args = [a for arg in run_args for a in arg.split()]
        dirs = run_matrix(_split(workload), _split(nemesis), runs, store, args)
        if not dirs:
            raise click.ClickException("gate: no run produced a run directory")
    summary = _analyze(dirs, master, out, None)
    print_table(summary)
    failures = threshold_failures(
        summary, max_unavailable_s=max_unavailable_s, max_p99_ms=max_p99_ms, min_ok_rate=min_ok_rate
    )
    for line in failures:
        click.echo(f"FAIL {line}", err=True)
    click.echo(f"summary: {summary['out']}/index.html")
    code = _exit_for(failures)
    click.echo({EXIT_VALID: "gate: PASS", EXIT_UNKNOWN: "gate: UNKNOWN"}.get(code, "gate: FAIL"))
    return code
