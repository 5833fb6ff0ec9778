"""The executors' task of ``chaos analyze``: parse a run once, check it as ``chaos check`` does,
compute its statistics and write its ops as Parquet (:func:`check_run_task`); batches of runs
to the executors, the workers warmed while the driver checks the smallest runs itself
(:func:`check_while_starting`). A run's row is JSON text; bad input raises in the driver naming
the file and line.
"""

from __future__ import annotations

import heapq
import json
import math
import os
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from chaos.history.analysis import availability
from chaos.history.analysis import fault_windows as core_windows
from chaos.history.checkers.registry import checkers_for, compose, load_run_test, needs_inference
from chaos.history.op import FAIL, INFO, INVOKE, NEMESIS, OK, Op
from chaos.history.spark.session import spark_context
from chaos.history.store import HistoryError, ParsedHistory, RunDir
from chaos.history.verdict import CheckOptions

if TYPE_CHECKING:  # pyspark is the [spark] extra: imported where a function runs
    from pyspark import SparkContext
    from pyspark.sql import SparkSession

_SCHEMA_FIELDS = (
    ("index", "long"),
    ("type", "string"),
    ("process", "string"),
    ("f", "string"),
    ("time", "long"),
    ("node", "string"),
    ("error", "string"),
    ("key", "string"),
    ("log_index", "long"),
)


def run_id(run_dir: Path) -> str:
    """A stable id for a run directory: ``<test-name>/<timestamp>`` with '/' made safe for paths."""
    run_dir = run_dir.resolve()
    return f"{run_dir.parent.name}__{run_dir.name}"


def workload_of(test: dict[str, Any]) -> str:
    opts = test.get("opts", test)
    return str(opts.get("workload") or test.get("workload") or "register")


def nemesis_of(test: dict[str, Any]) -> str:
    opts = test.get("opts", test)
    nem = opts.get("nemesis") or test.get("nemesis") or "none"
    if isinstance(nem, list | tuple):
        nem = ",".join(str(n) for n in nem) or "none"
    return str(nem)


def _ops_from_raw(lines: Iterable[str]) -> list[Op]:
    ops = [Op.from_dict(json.loads(line)) for line in lines]
    ops.sort(key=lambda op: op.index)
    return ops


# --- the executors' task: parse once, check, statistics, Parquet ----------------------------------


def _partition_dir(parquet_dir: Path, rid: str) -> Path:
    """``<parquet_dir>/run=<rid>`` with the id escaped as Spark's partition discovery unescapes it."""
    from urllib.parse import quote

    return parquet_dir / f"run={quote(rid, safe='')}"


def _key_text(key: object) -> str | None:
    if key is None or type(key) is str:
        return key
    if type(key) is int:
        return str(key)  # what json.dumps gives an int, at a tenth of its cost
    return json.dumps(key, default=str)


def _texts(values: list[object], text: Callable[[object], str | None]) -> list[str | None]:
    """``[text(v) for v in values]``, each distinct hashable value converted once: a run has a
    few processes and keys over thousands of ops. Values that compare equal across types (``1``,
    ``1.0``, ``true``) would share one entry, so a list holding floats or booleans is converted
    one by one."""
    kinds = set(map(type, values))
    if float in kinds or bool in kinds:
        return [text(v) for v in values]
    try:
        seen = {v: text(v) for v in set(values)}
    except TypeError:  # a list or dict key
        return [text(v) for v in values]
    return list(map(seen.__getitem__, values))


def _str_column(values: list[object]) -> object:
    """A pyarrow string column of ``values``, anything not a string as null."""
    import pyarrow as pa

    try:
        return pa.array(values, pa.string())
    except (pa.ArrowInvalid, pa.ArrowTypeError):
        return pa.array([v if isinstance(v, str) else None for v in values], pa.string())


def write_ops_parquet(ops: list[Op], path: Path) -> None:
    """One run's ops as a Parquet file (pyarrow, in the worker that parsed them).

    Columns as :data:`_SCHEMA_FIELDS` (``process`` as text, ``key`` as JSON text unless a string)
    plus ``raw``: the op's JSON line for nemesis ops (what :func:`fault_windows` re-reads), null for
    client ops. Each column is taken from the ops by C-level ``map`` calls (a run's Parquet cost a
    quarter of its task when built op by op in Python).
    """
    import operator

    import pyarrow as pa
    import pyarrow.parquet as pq

    def column(name: str) -> list[Any]:
        return list(map(operator.attrgetter(name), ops))

    extras = column("extra")
    if any(extras):
        log_index = []
        for extra in extras:
            li = extra.get("log_index") if extra else None
            log_index.append(li if type(li) is int else None)
        log_col = pa.array(log_index, pa.int64())
    else:
        log_col = pa.nulls(len(ops), pa.int64())
    processes = column("process")
    raw: list[str | None] = [None] * len(ops)
    if NEMESIS in processes:
        for i, (p, op) in enumerate(zip(processes, ops, strict=True)):
            if p == NEMESIS:
                raw[i] = op.to_json()
    table = pa.table(
        {
            "index": pa.array(column("index"), pa.int64()),
            "type": pa.array(column("type"), pa.string()),
            "process": pa.array(_texts(processes, str), pa.string()),
            "f": pa.array(column("f"), pa.string()),
            "time": pa.array(column("time"), pa.int64()),
            "node": _str_column(column("node")),
            "error": _str_column(column("error")),
            "key": pa.array(_texts(column("key"), _key_text), pa.string()),
            "log_index": log_col,
            "raw": pa.array(raw, pa.string()),
        }
    )
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(table, str(path))


def _nearest_rank(sorted_ns: list[int], q: float) -> float:
    """The nearest-rank ``q`` quantile of sorted ns values in ms rounded to the µs (the rule of
    :func:`chaos.history.checkers.perf.quantiles`)."""
    n = len(sorted_ns)
    return round(sorted_ns[min(n - 1, max(0, math.ceil(q * n) - 1))] / 1e6, 3)


def run_stats(ops: list[Op], windows: list[list[Any]]) -> dict[str, list[dict[str, Any]]]:
    """One run's latency and throughput rows from its calls, computed in the worker.

    A call is a client invocation and the next op of its process (``process`` compared as text).
    ``windows``: ``[kind, start, end]`` in ns; a call is under every window with ``start <=
    invocation time < end``, its ``fault`` the kinds sorted and joined with ``+`` (``none`` if
    none). Returns ``{"latency": [{f, n, ok, fail, info, p50, p95, p99, max}], "by_fault":
    [{fault, n, p50, p99, max}], "throughput": [{second, ok}]}`` sorted by f / fault / second;
    latencies in ms, nearest-rank quantiles rounded to the µs as the perf checker's
    (:func:`chaos.history.checkers.perf.quantiles`); ``second`` is the ok completion's time // 1 s. These
    are the rows :func:`perf` computes with Spark SQL from the ops.
    """
    lat_f: dict[str, list[int]] = {}
    types: dict[str, list[int]] = {}  # f -> [ok, fail, info]
    lat_fault: dict[str, list[int]] = {}
    seconds: dict[int, int] = {}
    slot = {OK: 0, FAIL: 1, INFO: 2}
    open_: dict[str, Any] = {}
    for op in ops:
        if op.process == NEMESIS:
            continue
        p = str(op.process)
        if op.type == INVOKE:
            open_[p] = op
            continue
        inv = open_.pop(p, None)
        if inv is None:
            continue
        lat = op.time - inv.time
        f = inv.f
        lat_f.setdefault(f, []).append(lat)
        counts = types.get(f)
        if counts is None:
            counts = types[f] = [0, 0, 0]
        k = slot.get(op.type)
        if k is not None:
            counts[k] += 1
        t = inv.time
        fault = "+".join(sorted({w[0] for w in windows if w[1] <= t < w[2]})) if windows else ""
        lat_fault.setdefault(fault or "none", []).append(lat)
        if op.type == OK:
            sec = op.time // 1_000_000_000
            seconds[sec] = seconds.get(sec, 0) + 1
    latency = []
    for f, xs in sorted(lat_f.items()):
        xs.sort()
        ok, fail, info = types[f]
        q = {name: _nearest_rank(xs, frac) for name, frac in (("p50", 0.5), ("p95", 0.95), ("p99", 0.99))}
        latency.append(
            {"f": f, "n": len(xs), "ok": ok, "fail": fail, "info": info, **q, "max": round(xs[-1] / 1e6, 3)}
        )
    by_fault = []
    for fault, xs in sorted(lat_fault.items()):
        xs.sort()
        by_fault.append(
            {"fault": fault, "n": len(xs), "p50": _nearest_rank(xs, 0.5), "p99": _nearest_rank(xs, 0.99),
             "max": round(xs[-1] / 1e6, 3)}
        )  # fmt: skip
    throughput = [{"second": s, "ok": n} for s, n in sorted(seconds.items())]
    return {"latency": latency, "by_fault": by_fault, "throughput": throughput}


def check_run_task(run_dir: str, rid: str, time_limit: float | None, parquet_dir: str | None) -> str:
    """What an executor does for one run; returns its result row as JSON text.

    Reads the history once (:class:`chaos.history.store.ParsedHistory`), takes the test and its
    checkers as ``chaos check`` does (:func:`chaos.history.checkers.registry.load_run_test`,
    :func:`chaos.history.checkers.registry.checkers_for`) and runs their composition with the options
    ``chaos check`` gives it (the linearizability search in this worker: the executors are the
    parallelism); computes the run's statistics (:func:`run_stats`); writes the ops to
    ``<parquet_dir>/run=<rid>/part-0.parquet``.

    Row: ``{"valid", "checkers", "test", "order", "model", "windows": [[kind, start, end]],
    "stats", ["longest_unavailable_s"]}``, or ``{"error": "history"|"value"|"missing", "message",
    ...}`` for a malformed history (with ``reason``, ``line``, ``path``), a bad test.json, a missing
    file: what ``chaos check`` raises for them.
    """
    run = RunDir(run_dir)
    try:
        history = ParsedHistory.read(run.history_path)
        test = run.load_test() if run.test_path.is_file() else {}
        if needs_inference(test):
            test = load_run_test(run, history=history)
        chosen = checkers_for(test)
        order = list(chosen)
        linear = chosen.get("linear")
        model = getattr(linear, "model", None) if linear is not None else None
        opts = CheckOptions(time_limit=time_limit, workers=1, run_dir=str(run.path)).as_dict()
        result = compose(chosen).check(test, history, opts)
    except HistoryError as e:
        return json.dumps({"error": "history", "reason": e.reason, "line": e.line, "path": e.path})
    except FileNotFoundError as e:
        return json.dumps({"error": "missing", "message": str(e)})
    except ValueError as e:
        return json.dumps({"error": "value", "message": str(e)})
    ops = history.ops
    end = max((op.time for op in ops), default=0)
    windows = [[w.kind, w.start, w.end_or(end or w.start)] for w in core_windows(ops)]
    row: dict[str, object] = {**result, "test": test, "order": order, "model": model, "windows": windows}
    row["stats"] = run_stats(ops, windows)
    if "perf" not in result["checkers"]:
        # the gate's availability threshold needs the figure even when the workload has no perf checker
        gaps = availability(iter(ops), top=1)
        row["longest_unavailable_s"] = round(gaps[0].duration / 1e9, 3) if gaps else 0.0
    if parquet_dir is not None:
        write_ops_parquet(ops, _partition_dir(Path(parquet_dir), rid) / "part-0.parquet")
    return json.dumps(row, default=str)


def batches(jobs: list[tuple[str, str]], slots: int, per_task: int = 8) -> list[list[tuple[str, str]]]:
    """``jobs`` (run id, directory) grouped into Spark tasks of about equal work.

    A task costs the executors some 20 ms of CPU whatever it does, so small runs share one; but
    the tasks are at least ``8 * slots`` (when there are that many runs), so a slot that finishes
    early takes another and none waits long at the end. Work is taken as the history's size in
    bytes; the largest runs are placed first, each in the least loaded task (LPT).
    """
    k = min(len(jobs), max(8 * slots, math.ceil(len(jobs) / per_task)))
    size = {rid: _size(d) for rid, d in jobs}
    loads = [(0, i) for i in range(k)]
    out: list[list[tuple[str, str]]] = [[] for _ in range(k)]
    for job in sorted(jobs, key=lambda j: -size[j[0]]):
        load, i = heapq.heappop(loads)
        out[i].append(job)
        heapq.heappush(loads, (load + size[job[0]], i))
    return [b for b in out if b]


def check_on_executors(
    spark: SparkSession | SparkContext,
    run_dirs: list[Path],
    parquet_dir: Path | None,
    time_limit: float | None = None,
    done: dict[str, str] | None = None,
) -> dict[str, dict[str, Any]]:
    """Every run checked (and its ops written as Parquet) by :func:`check_run_task` on the
    executors, the runs grouped into tasks by :func:`batches`; returns ``{run id: row}`` in
    ``run_dirs`` order. ``done``: rows (JSON text) already computed for some runs, by the same
    function elsewhere (:func:`check_while_starting`); those runs are not sent.

    Raises, for the first run (in ``run_dirs`` order) that failed, what ``chaos check`` raises:
    HistoryError naming file and line, FileNotFoundError, ValueError.
    """
    rows = dict(done or {})
    jobs = [(run_id(d), str(d)) for d in run_dirs]
    target = None if parquet_dir is None else str(parquet_dir)

    def task(batch: list[tuple[str, str]]) -> list[tuple[str, str]]:
        return [(rid, check_run_task(path, rid, time_limit, target)) for rid, path in batch]

    todo = [j for j in jobs if j[0] not in rows]
    if todo:
        sc = cast("SparkContext", getattr(spark, "sparkContext", spark))  # a SparkSession or a SparkContext
        tasks = batches(todo, sc.defaultParallelism)
        rows.update(sc.parallelize(tasks, len(tasks)).flatMap(task).collect())
    out: dict[str, dict[str, object]] = {}
    for rid, _ in jobs:
        row = json.loads(rows[rid])
        kind = row.get("error")
        if kind == "history":
            raise HistoryError(row["reason"], line=row.get("line"), path=row.get("path"))
        if kind == "missing":
            raise FileNotFoundError(row["message"])
        if kind == "value":
            raise ValueError(row["message"])
        out[rid] = row
    return out


def _import_task_modules(_: object) -> None:
    """Import what a first :func:`check_run_task` would: pyarrow with the pandas its first
    ``pa.array`` imports when pandas is installed (half a second), and the checkers every run gets,
    which the registry loads on first use (this module's own imports come with unpickling it)."""
    import pyarrow as pa
    import pyarrow.parquet  # noqa: F401

    # deferred on purpose: this function's job is to load them into a worker ahead of its tasks
    import chaos.history.checkers.faults  # noqa: F401
    import chaos.history.checkers.linear  # noqa: F401
    import chaos.history.checkers.perf  # noqa: F401

    pa.array([0], pa.int64())


def warm_workers(sc: SparkContext) -> SparkContext:
    """``sc`` after one task per slot has imported what :func:`check_run_task` needs: the first
    Python job starts the executors' Python daemon and forks their workers (about a second), so
    this runs while the driver still checks runs (:func:`check_while_starting`), and the reused
    workers (``spark.python.worker.reuse``) start the real tasks ready."""
    n = sc.defaultParallelism
    sc.parallelize(range(n), n).foreach(_import_task_modules)
    return sc


def _start_warm(master: str, log: Path) -> SparkContext:
    """A new context for ``master`` (:func:`spark_context`) with its workers warm
    (:func:`warm_workers`); stopped again, not left running, when the workers cannot start."""
    sc = spark_context(master, log=log)
    try:
        return warm_workers(sc)
    except BaseException:
        sc.stop()
        raise


def check_while_starting(
    start: Callable[[], SparkContext],
    run_dirs: list[Path],
    parquet_dir: Path | None,
    time_limit: float | None,
) -> tuple[SparkContext, dict[str, str]]:
    """Call ``start`` (which starts Spark: mostly waiting on the JVM) in a thread while this
    thread checks runs with :func:`check_run_task`, smallest history first, until Spark is up.
    Returns (what ``start`` returned, ``{run id: row}`` for the runs checked here); raises what
    ``start`` raised. The JVM's start takes seconds of one core; the other cores would idle.
    """
    import sys
    import threading

    box: dict[str, Any] = {}

    def run() -> None:
        try:
            box["value"] = start()
        except BaseException as e:  # handed to the caller below
            box["error"] = e

    thread = threading.Thread(target=run, name="spark-start", daemon=True)
    switch = sys.getswitchinterval()
    sys.setswitchinterval(0.0005)  # the start's many short py4j calls wait less for this thread
    thread.start()
    done: dict[str, str] = {}
    try:
        by_size = sorted(run_dirs, key=lambda d: -_size(d))
        while by_size and thread.is_alive():
            d = by_size.pop()
            target = None if parquet_dir is None else str(parquet_dir)
            done[run_id(d)] = check_run_task(str(d), run_id(d), time_limit, target)
    except BaseException:
        thread.join()
        if "value" in box:
            box["value"].stop()
        raise
    finally:
        thread.join()
        sys.setswitchinterval(switch)
    if "error" in box:
        raise box["error"]
    return box["value"], done


def _size(run_dir: Path | str) -> int:
    try:
        return os.path.getsize(os.path.join(run_dir, "history.jsonl"))
    except OSError:
        return 0
