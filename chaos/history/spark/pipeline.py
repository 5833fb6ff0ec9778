"""The offline analysis pipeline on Apache Spark (PySpark): ``chaos analyze``.

Gives every run the verdict ``chaos check`` gives it, and does per run only the work ``chaos
check`` does plus two cheap passes. Each Spark task gets one run directory; the Python worker
reads its history once with the validating reader (:class:`chaos.history.store.ParsedHistory`),
runs every checker of its workload, linearizability included, exactly as ``chaos check`` picks
and composes them (:func:`check_run_task`), computes the run's latency quantiles, per-fault
latencies and throughput from its calls (:func:`run_stats`, the rule the perf checker follows),
writes the run's ops as Parquet with pyarrow, and returns one small result row. Nothing per op
passes through the JVM, and the driver runs no Spark SQL: it merges the rows. While the JVM
starts (seconds of one core), the driver checks runs itself with the same task function. Bad input (a
malformed history, a bad ``test.json``) is found by the worker that reads it and raised in the
driver, naming its file and line, as ``chaos check`` does; then nothing is written to ``--out``
(the executors write to a staging directory beside it, renamed into place on success) and
Spark's own output, which goes to ``spark.log`` there, is not shown.

Local mode (``--master local[*]``) is the embedded default; any master Spark accepts works
(``spark://host:7077``, ``yarn``, ``k8s://...``). On a real cluster the run directories must be
readable by the executors at the same path (a shared file system), and ``--out``'s parent
writable by them.

Outputs in ``--out`` (default ``store/analysis/<timestamp>``): ``history.parquet/run=<id>/``,
``summary.parquet``, ``summary.json``, ``index.html`` and ``spark.log``. :func:`perf` computes
the same statistics with Spark SQL from ``history.parquet`` (a test holds both to the same rows).
"""

from __future__ import annotations

import json
import os
import shutil
import time
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

from chaos.history.analysis import UNKNOWN, merge_valid, served_rate
from chaos.history.spark.session import _active_context
from chaos.history.spark.stats import stats_rows
from chaos.history.spark.tasks import (
    _start_warm,
    check_on_executors,
    check_while_starting,
    nemesis_of,
    run_id,
    workload_of,
)

# --- the whole pipeline --------------------------------------------------------------------------


def summarize(
    run_dirs: list[Path],
    tests: dict[str, dict[str, object]],
    verdicts: dict[str, Any],
    perf_rows: dict[str, Any],
    driver: dict[str, dict[str, object]] | None = None,
) -> dict[str, Any]:
    """Per run: verdict, workload, nemesis, ok rate, worst p99 and longest unavailability (the perf
    checker's, :class:`chaos.history.analysis.Availability`); per (workload, nemesis): pass rate and
    the worst figures. The overall verdict merges the runs' with ``merge_valid``."""
    by_run: dict[str, list[dict[str, Any]]] = {}
    for r in perf_rows["latency"]:
        by_run.setdefault(r["run"], []).append(r)
    runs = []
    for run_dir in run_dirs:
        rid = run_id(run_dir)
        test = tests[rid]
        lat = by_run.get(rid, [])
        ok = sum(r["ok"] for r in lat)
        done = sum(r["n"] for r in lat)
        verdict = verdicts.get(rid, {"valid": UNKNOWN})
        perf_result = (verdict.get("checkers") or {}).get("perf") or {}
        longest = (perf_result.get("availability") or {}).get("longest_s")
        # what the DB served (answered fails included), from perf's counts when the verdict has them
        served = served_rate(perf_result.get("ops") or {})
        if longest is None:
            longest = ((driver or {}).get(rid) or {}).get("longest_unavailable_s")
        runs.append(
            {
                "run": rid,
                "dir": str(run_dir),
                "workload": workload_of(test),
                "nemesis": nemesis_of(test),
                "valid": verdict.get("valid"),
                "failures": _failures(verdict),
                "ops": done,
                "ok_rate": served if served is not None else ((ok / done) if done else None),
                "p99_ms": max((r["p99"] for r in lat if r["p99"] is not None), default=None),
                "max_unavailable_s": longest,
                "faults": fault_counts(verdict),
            }
        )
    groups: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for r in runs:
        groups.setdefault((r["workload"], r["nemesis"]), []).append(r)
    matrix = []
    for (workload, nemesis), rs in sorted(groups.items()):
        matrix.append(
            {
                "workload": workload,
                "nemesis": nemesis,
                "runs": len(rs),
                "pass_rate": sum(1 for r in rs if r["valid"] is True) / len(rs),
                "worst_p99_ms": max((r["p99_ms"] for r in rs if r["p99_ms"] is not None), default=None),
                "longest_unavailable_s": max(
                    (r["max_unavailable_s"] for r in rs if r["max_unavailable_s"] is not None), default=None
                ),
            }
        )
    return {
        "valid": merge_valid(r["valid"] for r in runs),
        "runs": runs,
        "matrix": matrix,
        "perf": perf_rows,
        "verdicts": verdicts,
    }


def fault_counts(verdict: dict[str, Any]) -> dict[str, dict[str, int]] | None:
    """Requested / applied / failed faults per kind from the run's ``faults`` checker result, or
    None when the run has no such result. Accepts ``{"kinds"|"by_kind": {kind: {...}}}`` or the
    kinds at the top level."""
    res = (verdict.get("checkers") or {}).get("faults")
    if not isinstance(res, dict):
        return None
    kinds = res.get("kinds", res.get("by_kind", res))
    if not isinstance(kinds, dict):
        return None
    out = {}
    for kind, c in kinds.items():
        if isinstance(c, dict) and any(k in c for k in ("requested", "applied", "failed")):
            out[str(kind)] = {k: int(c.get(k) or 0) for k in ("requested", "applied", "failed")}
    return out


def _failures(verdict: dict[str, Any]) -> list[str]:
    out = []
    for name, res in (verdict.get("checkers") or {}).items():
        if isinstance(res, dict) and res.get("valid") is not True:
            keys = res.get("failures") or []
            out.append(f"{name}: keys {', '.join(map(str, keys))}" if keys else name)
    return out


def analyze(
    run_dirs: Iterable[Path],
    *,
    master: str = "local[*]",
    out: Path | None = None,
    time_limit: float | None = None,
    spark: Any = None,
    say: Callable[[str], None] | None = None,
    stop: bool = True,
    ops_parquet: bool = True,
) -> dict[str, object]:
    """Run the pipeline over ``run_dirs``; write Parquet, ``summary.json`` and ``index.html`` to
    ``out``; return the summary (with ``timings`` in seconds per stage). ``ops_parquet``: also
    write every run's ops as ``history.parquet`` (for Spark SQL over the ops, :func:`perf`); the
    summary does not read it, and without it a run's task costs about a tenth less. ``say`` is told, in one
    line each, what the pipeline is doing as each stage starts (and how long the last one took).

    The executors check the runs, a few per task (:func:`check_on_executors`: the history read
    and validated once, every checker of ``chaos check``, the statistics, the ops written as
    Parquet with pyarrow, into a staging directory beside ``out``); the driver merges their rows.
    While its own Spark starts, the driver checks runs itself with the same function
    (:func:`check_while_starting`; ``timings["runs_checked_while_spark_started"]`` counts them).
    Bad input found by a worker is raised here, and then nothing is written to ``out``.
    ``spark``: a SparkSession or SparkContext to use (left running); without one, the running
    context is used or one is started for ``master`` (:func:`spark_context`, its output to
    ``spark.log``) and stopped at the end, unless ``stop`` is False: a command that exits right
    after leaves the context it started running, and its JVM stops itself when this process
    exits (pyspark's gateway ends at its stdin's end, and Spark's shutdown hook stops the context
    and deletes its files), which spares the command about a second of waiting.

    Raises:
        FileNotFoundError: a directory without a history.
        HistoryError: a malformed history (names the file and line).
        ValueError: no directories, a bad ``test.json``, two runs with the same id.
        RuntimeError: Spark cannot start.
    """
    dirs = [Path(d).resolve() for d in run_dirs]
    if not dirs:
        raise ValueError("no run directories given")
    seen: set[str] = set()
    for d in dirs:
        if not (d / "history.jsonl").is_file():
            raise FileNotFoundError(f"{d}: no history.jsonl (expected a run directory)")
        if run_id(d) in seen:
            raise ValueError(f"{d}: two run directories named {run_id(d)!r}; give each run once")
        seen.add(run_id(d))
    if out is None:
        out = dirs[0].parent.parent / "analysis" / time.strftime("%Y%m%dT%H%M%S")
    if out.exists() and not out.is_dir():
        raise ValueError(
            f"--out {out}: exists and is not a directory; expected a new directory or an earlier analysis "
            "(whose files are replaced)"
        )
    timings: dict[str, float] = {}
    tell = say or (lambda _msg: None)
    created = [d for d in reversed(out.parents) if not d.exists()]
    staging = out.parent / f".{out.name}.partial-{os.getpid()}"
    staging.mkdir(parents=True, exist_ok=True)
    own = False
    ops_dir = staging / "history.parquet" if ops_parquet else None
    try:
        t = time.monotonic()
        sc = getattr(spark, "sparkContext", spark) if spark is not None else _active_context()
        done: dict[str, str] = {}
        if sc is None:
            tell(f"starting Spark ({master}; its output to spark.log), checking runs here meanwhile")
            sc, done = check_while_starting(
                lambda: _start_warm(master, staging / "spark.log"), dirs, ops_dir, time_limit
            )
            own = True
        timings["spark_start"] = time.monotonic() - t
        t = time.monotonic()
        where = " (ops to history.parquet)" if ops_dir is not None else ""
        tell(f"checking {len(dirs) - len(done)} run(s) on the executors{where}")
        driver = check_on_executors(sc, dirs, ops_dir, time_limit=time_limit, done=done)
        timings["check_and_write_on_executors"] = time.monotonic() - t
        timings["runs_checked_while_spark_started"] = len(done)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        for d in reversed(created):  # parents made for the staging directory, if left empty
            if d.exists() and not any(d.iterdir()):
                d.rmdir()
        raise
    finally:
        if own and stop and sc is not None:
            sc.stop()
    t = time.monotonic()
    tell(f"merging the executors' rows (checking took {timings['check_and_write_on_executors']:.1f} s)")
    tests = {rid: d["test"] for rid, d in driver.items()}
    verdicts = {rid: {"valid": d["valid"], "checkers": d["checkers"]} for rid, d in driver.items()}
    summary = summarize(dirs, tests, verdicts, stats_rows(driver, verdicts), driver)
    _publish(staging, out)
    write_summary_parquet(summary["runs"], out / "summary.parquet")
    timings["summary"] = time.monotonic() - t
    summary["timings"] = timings
    summary["master"] = master
    write_summary(summary, out)
    summary["out"] = str(out)
    return summary


def write_summary(summary: dict[str, object], out: Path) -> None:
    """``summary.json`` and ``index.html`` of ``summary`` in ``out`` (again after the gate adds a
    DB's simulation campaign rows: :func:`add_runs`)."""
    doc = {k: v for k, v in summary.items() if k != "out"}
    with open(out / "summary.json", "w") as f:
        json.dump(doc, f, indent=1, default=str)
    write_summary_html(doc, out / "index.html")


def add_runs(summary: dict[str, Any], rows: list[dict[str, object]]) -> None:
    """Add rows that are not run directories (a DB's simulation campaign, ``"simulated": True``)
    to ``summary``: the overall verdict merges theirs (a failing campaign makes the summary
    invalid, an undecided one unknown), and ``summary.json`` / ``index.html`` in ``summary["out"]``
    are written again so that the files say what the gate's table says."""
    if not rows:
        return
    summary["runs"] = [*summary["runs"], *rows]
    summary["valid"] = merge_valid(r["valid"] for r in summary["runs"])
    if summary.get("out"):
        write_summary(summary, Path(summary["out"]))


def _remove(path: Path) -> None:
    """Remove what an earlier analysis left at ``path``: a directory (not followed if a link), a
    file or a link, whatever it is now (a file where a directory is written next, or the reverse)."""
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    elif path.exists() or path.is_symlink():
        path.unlink()


def _publish(staging: Path, out: Path) -> None:
    """Move what the run wrote to ``staging`` into ``out`` (replacing an earlier analysis' files
    of the same names) and remove ``staging``."""
    out.mkdir(parents=True, exist_ok=True)
    for name in ("history.parquet", "spark.log", "calls.parquet"):
        old = out / name
        _remove(old)
        if (staging / name).exists():
            (staging / name).rename(old)
    shutil.rmtree(staging, ignore_errors=True)


_SUMMARY_COLUMNS = (
    ("run", "string"),
    ("dir", "string"),
    ("workload", "string"),
    ("nemesis", "string"),
    ("valid", "json"),
    ("failures", "json"),
    ("ops", "long"),
    ("ok_rate", "double"),
    ("p99_ms", "double"),
    ("max_unavailable_s", "double"),
    ("faults", "json"),
)


def write_summary_parquet(runs: list[dict[str, object]], path: Path) -> None:
    """The per-run rows as a Parquet dataset (one file in directory ``path``, written by pyarrow
    in the driver) with a fixed schema; ``valid``, ``failures`` and ``faults`` as JSON text
    (``valid`` is true, false or "unknown")."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    arrow_type = {"string": pa.string(), "json": pa.string(), "long": pa.int64(), "double": pa.float64()}
    conv: dict[str, Callable[[Any], object]] = {
        "string": str,
        "json": json.dumps,
        "long": int,
        "double": float,
    }
    columns = {
        n: pa.array(
            [None if (r.get(n) is None and t != "json") else conv[t](r.get(n)) for r in runs], arrow_type[t]
        )
        for n, t in _SUMMARY_COLUMNS
    }
    _remove(path)
    path.mkdir(parents=True)
    pq.write_table(pa.table(columns), str(path / "part-00000.parquet"))


def write_summary_html(summary: dict[str, object], path: Path) -> Path:
    """A self-contained HTML page of the summary: the run table and the (workload, nemesis) matrix."""
    import jinja2

    env = jinja2.Environment(autoescape=True)
    html = env.from_string(_SUMMARY_TEMPLATE).render(s=summary, verdict=_verdict_word)
    path.write_text(html)
    return path


def _verdict_word(v: object) -> str:
    return {True: "valid", False: "invalid"}.get(v, "unknown") if isinstance(v, bool) else "unknown"


def pasteable(run_dir: str) -> str:
    """A run directory as one can paste it into ``chaos check`` or ``chaos report``: relative to
    the working directory when it lies under it, else as given."""
    try:
        rel = os.path.relpath(run_dir)
    except ValueError:
        return run_dir
    return run_dir if rel.startswith("..") else rel


def iter_table_rows(summary: dict[str, Any]) -> Iterator[list[str]]:
    """Rows for the terminal table: run (its directory, pasteable: :func:`pasteable`), workload,
    nemesis, verdict, ops, ok rate, p99, unavailable."""
    for r in summary["runs"]:
        yield [
            pasteable(r["dir"]) if r.get("dir") else r["run"],
            r["workload"],
            r["nemesis"],
            _verdict_word(r["valid"]),
            str(r["ops"]),
            "-" if r["ok_rate"] is None else f"{r['ok_rate']:.1%}",
            "-" if r["p99_ms"] is None else f"{r['p99_ms']:.1f}",
            "-" if r["max_unavailable_s"] is None else f"{r['max_unavailable_s']:.2f}",
        ]


_SUMMARY_TEMPLATE = """<!doctype html>
<html><head><meta charset="utf-8"><title>chaos analyze: {{ verdict(s.valid) }}</title>
<style>
body{font:14px/1.4 system-ui,sans-serif;margin:2em;color:#222}
table{border-collapse:collapse;margin:1em 0}td,th{border:1px solid #ccc;padding:4px 8px;text-align:left}
.valid{background:#d4f4d4}.invalid{background:#f8d0d0}.unknown{background:#fff0c0}
.banner{padding:1em;font-size:1.4em;font-weight:bold}
</style></head><body>
{% set real = s.runs | rejectattr("simulated") | list %}{% set sims = s.runs | selectattr("simulated") | list %}
<div class="banner {{ verdict(s.valid) }}">{{ verdict(s.valid) | upper }}: {{ real|length }} run{{ '' if real|length == 1 else 's' }}
{%- if sims %} and {{ sims|length }} simulation campaign{{ '' if sims|length == 1 else 's' }}{% endif %} ({{ s.master }})</div>
<h2>Pass rate per workload and nemesis</h2>
<table><tr><th>workload</th><th>nemesis</th><th>runs</th><th>pass rate</th><th>worst p99 (ms)</th>
<th>longest unavailable (s)</th></tr>
{% for m in s.matrix %}<tr><td>{{ m.workload }}</td><td>{{ m.nemesis }}</td><td>{{ m.runs }}</td>
<td>{{ '%.0f%%' % (m.pass_rate * 100) }}</td><td>{{ m.worst_p99_ms or '-' }}</td>
<td>{{ m.longest_unavailable_s or '-' }}</td></tr>{% endfor %}
</table>
<h2>Runs</h2>
<table><tr><th>run</th><th>workload</th><th>nemesis</th><th>verdict</th><th>failures</th><th>ops</th>
<th>ok rate</th><th>p99 (ms)</th><th>longest unavailable (s)</th></tr>
{% for r in s.runs %}<tr class="{{ verdict(r.valid) }}"><td>{% if r.dir %}<a href="{{ r.dir }}/index.html">{{ r.run }}</a>{% else %}{{ r.run }}{% endif %}</td>
<td>{{ r.workload }}</td><td>{{ r.nemesis }}</td><td>{{ verdict(r.valid) }}</td>
<td>{{ r.failures|join('; ') }}</td><td>{{ r.ops }}</td>
<td>{{ '-' if r.ok_rate is none else '%.1f%%' % (r.ok_rate * 100) }}</td>
<td>{{ '-' if r.p99_ms is none else '%.1f' % r.p99_ms }}</td>
<td>{{ '-' if r.max_unavailable_s is none else '%.2f' % r.max_unavailable_s }}</td></tr>{% endfor %}
</table>
<h2>Timings (s)</h2>
<table>{% for k, v in s.timings.items() %}<tr><td>{{ k }}</td><td>{{ '%.2f' % v }}</td></tr>{% endfor %}</table>
</body></html>
"""
