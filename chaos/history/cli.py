"""Click commands of ``chaos.history``: ``check`` here; ``report``, ``serve``, ``analyze``, ``gate`` below.

Keep this module small and import the heavy parts inside the commands, so ``chaos --help`` and
``chaos check`` stay fast. Exit status as ``jepsen.cli``: 0 valid, 1 invalid, 2 unknown, 254 bad
arguments.
"""

from __future__ import annotations

import importlib
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import click

from chaos.errors import BadArguments, exit_code, printable
from chaos.history.elle.anomalies import MODEL_CHOICES

FORMATS = ("auto", "jsonl", "edn", "porcupine-etcd", "porcupine-kv")


def _verdict(valid: Any) -> str:
    return "valid" if valid is True else "INVALID" if valid is False else "unknown"


def _summary_line(name: str, r: dict[str, Any]) -> str:
    detail = r.get("error") or ""
    if not detail:
        if name == "linear":
            fails = r.get("failures") or []
            keys = r.get("keys") or {}
            if fails:
                detail = f"not linearizable: key {', '.join(map(str, fails[:5]))}" + (
                    " ..." if len(fails) > 5 else ""
                )
            elif r.get("unknown"):
                detail = f"undecided: key {', '.join(map(str, r['unknown'][:5]))}"
            else:
                detail = f"{len(keys)} key(s), {r.get('ops', '?')} ops"
        elif name == "perf":
            detail = (r.get("availability") or {}).get("summary", "")
        elif name == "stats":
            detail = f"{r.get('ok', 0)} ok, {r.get('fail', 0)} fail, {r.get('info', 0)} info"
        elif name == "elle":
            counts = r.get("counts") or {}
            found = ", ".join(f"{a} x{counts.get(a, '?')}" for a in r.get("anomaly_types") or [])
            detail = f"{r.get('consistency_model')}: " + (found or r.get("cause") or "no anomaly")
            if r.get("not"):
                detail += f"; not {', '.join(r['not'])}"
        elif name in ("log", "set"):
            detail = f"{r.get('acknowledged', r.get('acknowledged_count', 0))} acknowledged, none lost"
    return f"  {name:<8} {_verdict(r.get('valid')):<8} {detail}".rstrip()


def _examples(r: dict[str, Any], limit: int = 3) -> list[str]:
    """A few anomalies of a log/set result, each with the ops involved."""
    out = []
    for kind in ("lost", "duplicated", "unexpected", "reordered", "divergent"):
        for a in (r.get(kind) or [])[:limit]:
            if not isinstance(a, dict):
                continue
            if kind == "divergent":
                vals = ", ".join(f"{n}={v}" for n, v in (a.get("values") or {}).items())
                out.append(f"    divergent at index {a.get('index')}: {vals}")
                continue
            ops = [f"{k} op {a[k]}" for k in ("invoke", "complete") if k in a]
            where = f"found at {a['found']}" if a.get("found") else ""
            why = a.get("reason", "")
            bits = ", ".join(x for x in (*ops, where, why) if x)
            out.append(f"    {kind} {a.get('value')!r}" + (f" ({bits})" if bits else ""))
    return out


def _first_explanation(r: dict[str, Any]) -> list[str]:
    """The first anomaly of an invalid elle result, as Elle explains it: the cycle's steps."""
    for kind, cases in (r.get("anomalies") or {}).items():
        for case in cases or []:
            if isinstance(case, dict) and case.get("explanation"):
                return [f"    {kind}: " + "\n      ".join(str(case["explanation"]).splitlines())]
    return []


def print_summary(results: dict[str, Any], where: str) -> None:
    """One verdict line, then one line per checker, with a few anomalies of invalid log/set checks."""
    click.echo(printable(f"{_verdict(results.get('valid'))}: {where}"))
    checkers = results.get("checkers")
    if isinstance(checkers, dict):
        for name, r in checkers.items():
            if isinstance(r, dict):
                click.echo(printable(_summary_line(name, r)))
                if r.get("valid") is False:
                    for line in _examples(r):
                        click.echo(printable(line))
                    if name == "elle":
                        for line in _first_explanation(r):
                            click.echo(printable(line, keep="\n"))


def _check_foreign(
    path: Path, fmt: str, model: str | None, time_limit: float | None, workers: int | None, txn: TxnCheck
) -> dict[str, Any]:
    """An imported history: transactions with the Elle checker (``txn`` names the workload and
    model, or the ops are ``txn``), else linearizability (chaos.history.formats + linear)."""
    from chaos.history.models import ModelError
    from chaos.history.store import HistoryError

    formats = importlib.import_module("chaos.history.formats")
    ops, default_model = formats.load_history(path, format=fmt)
    if txn.workload in TXN_WORKLOADS or (txn.workload is None and model is None and _all_txn(ops)):
        elle = importlib.import_module("chaos.history.elle")
        workload = txn.workload or ("list-append" if _any_append(ops) else "rw-register")
        result = elle.check_ops(ops, workload, txn.consistency_model or elle.DEFAULT_MODEL, time_limit)
        return {"valid": result["valid"], "checkers": {"elle": result}}
    linear = importlib.import_module("chaos.history.linear")
    spec = model or default_model
    formats.require_checkable(ops, spec, path)
    try:
        result = linear.check_history(ops, spec, time_limit=time_limit, workers=workers)
    except ModelError as e:  # an op the model cannot check: name its line
        line = next((op.extra.get("line") for op in ops if op.index == e.index), None)
        raise HistoryError(str(e), line=line if isinstance(line, int) else None, path=path) from None
    return {"valid": result["valid"], "checkers": {"linear": result}}


TXN_WORKLOADS = ("list-append", "rw-register")
WORKLOADS = ("register", "log", "set", "mutex", *TXN_WORKLOADS)


@dataclass(frozen=True)
class TxnCheck:
    """What ``chaos check`` was told of a history's workload: ``workload`` (None: inferred) and,
    for transactions, ``consistency_model`` (None: the run's, else strict-serializable)."""

    workload: str | None = None
    consistency_model: str | None = None


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


def run_check(
    path: Path,
    *,
    model: str | None,
    fmt: str,
    time_limit: float | None,
    workers: int | None = None,
    txn: TxnCheck = TxnCheck(),
) -> tuple[dict[str, Any], str]:
    """Check a run directory or a history file; returns (results, description). Raises BadArguments.

    The checkers come from the run's ``test.json``; for a bare JSON Lines history, or a run without
    ``test.json``, from the workload the whole history shows (``--model`` when it cannot be told).
    """
    from chaos.history.checkers import check_run, checkers_for, compose, infer_test
    from chaos.history.store import HISTORY_FILE, TEST_FILE, HistoryError, find_run

    try:
        if model is not None:
            importlib.import_module("chaos.history.models").get_model(model)  # a bad name fails here
        if path.is_dir() or (path.name == HISTORY_FILE and (path.parent / TEST_FILE).is_file()):
            run = find_run(path.parent if path.is_file() else path)
            results = check_run(
                run,
                model=model,
                time_limit=time_limit,
                workers=workers,
                consistency_model=txn.consistency_model,
            )
            return results, f"{run.path} (results in {run.results_path.name})"
        if not path.is_file():
            raise BadArguments(f"{path}: no such run directory or history file")
        formats = importlib.import_module("chaos.history.formats")
        fmt = formats.detect_format(path) if fmt == "auto" else formats.check_format(path, fmt)
        if fmt != "jsonl":
            return _check_foreign(path, fmt, model, time_limit, workers, txn), f"{path} ({fmt})"
        test = {"workload": txn.workload} if txn.workload else infer_test(path, model=model)
        if txn.consistency_model:
            test["consistency_model"] = txn.consistency_model
        opts: dict[str, Any] = {"time_limit": time_limit, "model": model, "workers": workers}
        results = compose(checkers_for(test, model=model)).check(test, path, opts)
        return results, f"{path} ({test.get('workload') or model})"
    except HistoryError as e:
        raise BadArguments(f"malformed history: {e}") from None
    except (FileNotFoundError, IsADirectoryError, PermissionError) as e:
        raise BadArguments(str(e)) from None
    except ValueError as e:  # bad test.json, unknown model or checker name, unreadable import
        raise BadArguments(str(e)) from None


@click.command(name="check")
@click.argument("path", type=click.Path(path_type=Path))
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
) -> None:
    """Re-check PATH: a run directory (store/latest, a store root) or a history file.

    A run directory is checked with the checkers its test.json names and results.json is rewritten.
    Without test.json (or for a bare history) the workload is what ALL the client ops show;
    when it cannot be told, pass --model. Exit status: 0 valid, 1 invalid, 2 unknown (a checker
    could not decide), 254 bad arguments or malformed input.
    """
    if time_limit is not None and not (math.isfinite(time_limit) and time_limit > 0):
        raise BadArguments(f"--time-limit must be a positive number of seconds, got {time_limit}")
    if workers is not None and workers < 1:
        raise BadArguments(f"--workers must be at least 1, got {workers}")
    txn = TxnCheck(workload, consistency_model)
    results, where = run_check(path, model=model, fmt=fmt, time_limit=time_limit, workers=workers, txn=txn)
    print_summary(results, where)
    ctx.exit(exit_code(results.get("valid")))


# ----------------------------------------------------------------------------------------------
# Room for the other helpers' commands (chaos/cli.py COMMANDS points here):
#   report, serve  -- the report helper (chaos/history/report*.py, serve.py)
#   analyze, gate  -- the Spark helper (chaos/history/spark.py, gate.py)
# Define each as a small click command that imports its module inside the function body.
# ----------------------------------------------------------------------------------------------
