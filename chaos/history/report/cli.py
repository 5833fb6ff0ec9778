"""``chaos check``: a stored run or a history file checked again, its results and report written.

The Elle checker (rustworkx, numpy) is loaded on first use by its package, so ``chaos check`` of a
register or log history does not load it. Exit status as ``jepsen.cli``: 0 valid, 1 invalid, 2 unknown, 254 bad
arguments.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import click

from chaos.errors import BadArguments, exit_code
from chaos.history import formats, report  # report.write_report: jinja2 loaded on a run's re-check only
from chaos.history.checkers import elle, linear
from chaos.history.checkers.elle.anomalies import MODEL_CHOICES
from chaos.history.checkers.models import ModelError, get_model, require_checkable
from chaos.history.checkers.registry import (
    check_run,
    checkers_for,
    compose,
    infer_test,
    refuse_consistency_model,
)
from chaos.history.report.summary import print_summary
from chaos.history.store import (
    HISTORY_FILE,
    RESULTS_FILE,
    TEST_FILE,
    HistoryError,
    ParsedHistory,
    _write_json_atomic,
    find_run,
)

FORMATS = ("auto", "jsonl", "edn", "porcupine-etcd", "porcupine-kv")


def _check_foreign(
    path: Path, fmt: str, model: str | None, time_limit: float | None, workers: int | None, txn: CheckFlags
) -> dict[str, object]:
    """An imported history: transactions with the Elle checker (``txn`` names the workload and
    model, or the ops are ``txn``), else linearizability (chaos.history.formats + linear)."""

    if fmt == "edn" and model is None and path.suffix.lower() == ".edn":  # streamed, never all in memory
        workload = txn.workload if txn.workload in TXN_WORKLOADS else formats.edn_txn_workload(path)
        if workload is not None and txn.workload in (None, workload):
            result = elle.check_file(path, workload, txn.consistency_model or elle.DEFAULT_MODEL, time_limit)
            return {"valid": result["valid"], "checkers": {"elle": result}}
    ops, default_model = formats.load_history(path, format=fmt)
    if txn.workload in TXN_WORKLOADS or (txn.workload is None and model is None and _all_txn(ops)):
        workload = txn.workload or ("list-append" if _any_append(ops) else "rw-register")
        try:
            result = elle.check_ops(ops, workload, txn.consistency_model or elle.DEFAULT_MODEL, time_limit)
        except HistoryError as e:  # a malformed transaction: name the file
            raise HistoryError(e.reason, line=e.line, path=path) from None
        return {"valid": result["valid"], "checkers": {"elle": result}}
    if txn.consistency_model:
        raise ValueError(
            f"--consistency-model {txn.consistency_model}: {path} holds no transactions (elle, which alone "
            "reads the option, checks list-append and rw-register); drop the option"
        )
    spec = model or default_model
    require_checkable(ops, spec, path)
    try:
        result = linear.check_history(
            ops, spec, time_limit=time_limit, workers=workers, cancel_on_failure=txn.fail_fast
        )
    except ModelError as e:  # an op the model cannot check: name its line
        line = next((op.extra.get("line") for op in ops if op.index == e.index), None)
        raise HistoryError(str(e), line=line if isinstance(line, int) else None, path=path) from None
    return {"valid": result["valid"], "checkers": {"linear": result}}


TXN_WORKLOADS = ("list-append", "rw-register")
WORKLOADS = ("register", "log", "set", "bank", "counter", "long-fork", "mutex", *TXN_WORKLOADS)


@dataclass(frozen=True)
class CheckFlags:
    """What ``chaos check`` was told besides the path: the history's ``workload`` (None: inferred),
    for transactions the ``consistency_model`` (None: the run's, else strict-serializable), and
    ``fail_fast`` (stop the linearizability check at the first invalid key)."""

    workload: str | None = None
    consistency_model: str | None = None
    fail_fast: bool = False


def _all_txn(ops: list[Any]) -> bool:
    client = [op for op in ops if op.process != "nemesis"]
    return bool(client) and all(op.f == "txn" for op in client)


def _any_append(ops: list[Any]) -> bool:
    return any(
        isinstance(m, list) and m[:1] == ["append"]
        for op in ops
        if isinstance(op.value, list)
        for m in op.value
    )


def results_file(test: dict[str, object], model: str | None, fmt: str, txn: CheckFlags) -> str:
    """Where ``chaos check`` writes a run's re-check, from the run's ``test.json`` and the options:
    ``results.json`` when the checkers are the run's own (its report is then written again),
    ``results-<model>.json`` beside it when ``--consistency-model`` or ``--model`` asks for a
    model the run was not checked under (the run's results stay as they are). Raises
    BadArguments for an option that contradicts ``test.json`` (``--workload`` naming another
    workload, ``--format`` other than jsonl, a model option the run's checkers do not take), as
    the option would otherwise be ignored."""
    workload = test.get("workload")
    checkers = test.get("checkers")
    named: list[object] = checkers if isinstance(checkers, list) else []
    is_txn = workload in TXN_WORKLOADS or "elle" in named
    shown = f"workload {workload}" if workload else "no workload in its test.json"
    if txn.workload is not None and txn.workload != workload:
        raise BadArguments(
            f"--workload {txn.workload} contradicts the run ({shown}): a run is checked as its "
            "test.json says; to check its history as another workload, pass the history.jsonl file"
            if workload
            else f"--workload {txn.workload}: the run has {shown}; pass its history.jsonl file to "
            "check it as a given workload"
        )
    if fmt not in ("auto", "jsonl"):
        raise BadArguments(f"--format {fmt} contradicts the run: a run directory's history is jsonl")
    if workload is None and not named:  # the history tells the workload (inferred): nothing to contradict
        return _beside_or_own(test, model, txn)
    if txn.consistency_model is not None and not is_txn:
        refuse_consistency_model(txn.consistency_model, test)  # one wording for run and check
    if model is not None and is_txn:
        raise BadArguments(
            f"--model {model} is a linearizability model; the run ({shown}) is checked by Elle "
            "(use --consistency-model)"
        )
    return _beside_or_own(test, model, txn)


def _beside_or_own(test: dict[str, object], model: str | None, txn: CheckFlags) -> str:
    """``results-<model>.json`` for a model the run was not checked under, else ``results.json``."""

    ours = str(test.get("consistency_model") or "strict-serializable")
    if txn.consistency_model is not None and txn.consistency_model != ours:
        return f"results-{txn.consistency_model}.json"
    if model is not None and model != (test.get("model") or "cas-register"):
        return f"results-model-{model}.json"
    return RESULTS_FILE


def _write_beside(path: Path, results: dict[str, object]) -> None:

    _write_json_atomic(path, results)


def _rewrite_report(run_dir: Path, history: ParsedHistory | None = None) -> str:
    """Write the run's ``index.html`` again from the results just written, so the report never
    shows another verdict than ``results.json`` and ``chaos check``; if that fails, the old
    report is removed (``chaos serve`` and ``chaos report`` write a new one) and a line on stderr
    says why. Returns what the description says of it."""

    try:
        return f"{report.write_report(run_dir, history).name} written again"
    except Exception as e:  # a report that cannot be written must not keep the old verdict
        (run_dir / "index.html").unlink(missing_ok=True)
        click.echo(
            f"chaos check: report not written ({type(e).__name__}: {e}); the old one removed", err=True
        )
        return "removed (not written again)"


def run_check(
    path: Path,
    *,
    model: str | None,
    fmt: str,
    time_limit: float | None,
    workers: int | None = None,
    txn: CheckFlags = CheckFlags(),
    history: ParsedHistory | None = None,
) -> tuple[dict[str, object], str, list[str]]:
    """Check a run directory or a history file; returns (results, description, notes: where a run's
    results went, printed before the verdict). ``history``: the run's history already read, shared
    by the checkers and the report. Raises BadArguments.

    The checkers come from the run's ``test.json``; for a bare JSON Lines history, or a run without
    ``test.json``, from the workload the whole history shows (``--model`` when it cannot be told).
    """

    try:
        if model is not None:
            get_model(model)  # a bad name fails here
        if path.is_dir() and (path / "history.edn").is_file() and not (path / HISTORY_FILE).exists():
            path = path / "history.edn"  # a Jepsen store directory (history.edn, results.edn, test.fressian)
        if path.is_dir() or (path.name == HISTORY_FILE and (path.parent / TEST_FILE).is_file()):
            run = find_run(path.parent if path.is_file() else path)
            target = results_file(run.load_test() if run.test_path.is_file() else {}, model, fmt, txn)
            results = check_run(
                run,
                model=model,
                time_limit=time_limit,
                workers=workers,
                consistency_model=txn.consistency_model,
                fail_fast=txn.fail_fast,
                write=False,
                history=history,
            )
            # where the results went is a note before the verdict line, which stays short
            if target != RESULTS_FILE:  # another model's verdict: beside the run's, never over it
                _write_beside(run.path / target, results)
                note = f"results in {target}; the run's {RESULTS_FILE} and report unchanged"
            else:
                run.write_results(results)
                note = f"results in {run.results_path.name}, report {_rewrite_report(run.path, history)}"
            return results, str(run.path), [note]
        if not path.is_file():
            raise BadArguments(f"{path}: no such run directory or history file")
        fmt = formats.detect_format(path) if fmt == "auto" else formats.check_format(path, fmt)
        if fmt != "jsonl":
            return _check_foreign(path, fmt, model, time_limit, workers, txn), f"{path} ({fmt})", []
        # inference reads the whole history: read it once, and the checkers reuse what it read
        source: Path | ParsedHistory = path if txn.workload else ParsedHistory.read(path)
        test = {"workload": txn.workload} if txn.workload else infer_test(source, model=model)
        if txn.consistency_model:
            test["consistency_model"] = txn.consistency_model
        checkers = checkers_for(test, model=model)
        if txn.consistency_model and "elle" not in checkers:
            refuse_consistency_model(txn.consistency_model, test)
        opts: dict[str, object] = {
            "time_limit": time_limit,
            "model": model,
            "workers": workers,
            "fail_fast": txn.fail_fast,
        }
        results = compose(checkers).check(test, source, opts)
        return results, f"{path} ({test.get('workload') or model})", []
    except HistoryError as e:
        raise BadArguments(f"malformed history: {e}") from None
    except (FileNotFoundError, IsADirectoryError, PermissionError) as e:
        raise BadArguments(str(e)) from None
    except ValueError as e:  # bad test.json, unknown model or checker name, unreadable import
        raise BadArguments(str(e)) from None


@click.command(name="check")
@click.argument("path", type=click.Path(path_type=Path), required=False, default=Path("store/latest"))
@click.option(
    "--model",
    default=None,
    help="Linearizability model (register, cas-register, kv, mutex, set, append-log).",
)
@click.option(
    "--format",
    "fmt",
    type=click.Choice(FORMATS),
    default="auto",
    show_default=True,
    help="History file format.",
)
@click.option(
    "--time-limit", type=float, default=None, help="Seconds for the linearizability search; then unknown."
)
@click.option(
    "--workers",
    type=int,
    default=None,
    help="Processes for the linearizability search (default: the CPU count; 1 = this process).",
)
@click.option(
    "--workload",
    type=click.Choice(WORKLOADS),
    default=None,
    help="The history's workload (default: test.json's, else what the client ops show).",
)
@click.option(
    "--consistency-model",
    type=click.Choice(MODEL_CHOICES),
    default=None,
    help="list-append / rw-register: the isolation level to check (default strict-serializable).",
)
@click.option(
    "--fail-fast",
    is_flag=True,
    help="Stop the linearizability check at the first invalid key (the rest are listed as not checked).",
)
@click.pass_context
def check(
    ctx: click.Context,
    path: Path,
    model: str | None,
    fmt: str,
    time_limit: float | None,
    workers: int | None,
    workload: str | None,
    consistency_model: str | None,
    fail_fast: bool,
) -> None:
    """Re-check PATH (default store/latest): a run directory (a latest link, a store root) or a
    history file. Prints the same summary as chaos run, the verdict last.

    A run directory is checked with the checkers its test.json names; results.json and the report
    (index.html) are written again. Under another --consistency-model or --model the results go
    to results-<model>.json beside them, which stay as they were; an option that contradicts
    test.json (another --workload, --format) is refused. Without test.json (or for a bare history) the workload is what ALL the client ops show;
    when it cannot be told, pass --model. Exit status: 0 valid, 1 invalid, 2 unknown (a checker
    could not decide), 254 bad arguments or malformed input.
    """
    if time_limit is not None and not (math.isfinite(time_limit) and time_limit > 0):
        raise BadArguments(f"--time-limit must be a positive number of seconds, got {time_limit}")
    if workers is not None and workers < 1:
        raise BadArguments(f"--workers must be at least 1, got {workers}")
    txn = CheckFlags(workload, consistency_model, fail_fast)
    run_history = _run_history(path)
    history = _read_once(run_history)  # one read, shared by the checkers, the report and the summary
    results, where, notes = run_check(
        path, model=model, fmt=fmt, time_limit=time_limit, workers=workers, txn=txn, history=history
    )
    print_summary(results, where, run_history, notes, history.ops if history is not None else None)
    ctx.exit(exit_code(results.get("valid")))


def _read_once(history_path: Path | None) -> ParsedHistory | None:
    """A run's history read and validated once, or None (no run, or a history that does not read:
    the check then reads the file itself and names the problem)."""
    if history_path is None:
        return None
    try:
        return ParsedHistory.read(history_path)
    except (HistoryError, OSError):
        return None


def _run_history(path: Path) -> Path | None:
    """The history of the run directory ``path`` names (a run, ``latest``, a store root), or None
    for a history file."""

    if path.is_dir() or (path.name == HISTORY_FILE and (path.parent / TEST_FILE).is_file()):
        try:
            return Path(find_run(path.parent if path.is_file() else path).history_path)
        except (OSError, ValueError):
            return None
    return None
