"""The offline analysis pipeline on Apache Spark (PySpark): ``chaos analyze``.

Gives every run the verdict ``chaos check`` gives it. The executors check what they read
themselves: each task gets a run directory, reads its history once in the Python worker with the
validating reader (:class:`chaos.history.store.ParsedHistory`), runs every checker of its
workload, linearizability included, exactly as ``chaos check`` picks and composes them
(:func:`check_run_task`), writes the run's ops as Parquet with pyarrow, and returns one small
result row (the verdicts, the fault windows by the one rule of :mod:`chaos.history.analysis`).
Nothing per op passes through the JVM as JSON. A malformed history is raised in the driver,
naming its file and line, as ``chaos check`` does. Then Spark SQL computes latency quantiles and
throughput per run and per fault kind from the Parquet, joining on the fault windows.
Availability is the perf checker's.

Local mode (``--master local[*]``) is the embedded default; any master Spark accepts works
(``spark://host:7077``, ``yarn``, ``k8s://...``). On a real cluster the run directories must be
readable by the executors at the same path (a shared file system), and ``--out`` writable by them.

Outputs in ``--out`` (default ``store/analysis/<timestamp>``): ``history.parquet/run=<id>/``,
``summary.parquet``, ``summary.json`` and ``index.html``.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

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


def spark_session(master: str = "local[*]", app: str = "chaos-analyze") -> Any:
    """A SparkSession for ``master``; the UI is off and the local IP pinned for local masters.

    Raises RuntimeError naming the master when Spark (or Java) cannot start.
    """
    if master.startswith("local"):
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    try:
        from pyspark.sql import SparkSession
    except ImportError as e:  # pragma: no cover - depends on the install
        raise RuntimeError(
            "pyspark is not installed: pip install pyspark pyarrow pandas (the package's [spark] extra)"
        ) from e
    try:
        spark = (
            SparkSession.builder.master(master)
            .appName(app)
            .config("spark.ui.enabled", "false")
            .config("spark.ui.showConsoleProgress", "false")
            .config("spark.sql.shuffle.partitions", "8")
            .config("spark.sql.session.timeZone", "UTC")
            .config("spark.python.worker.reuse", "true")
            .getOrCreate()
        )
    except Exception as e:
        raise RuntimeError(f"cannot start Spark with --master {master}: {e}") from e
    spark.sparkContext.setLogLevel("ERROR")
    return spark


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


def _ops_from_raw(lines: Iterable[str]) -> list[Any]:
    from chaos.history.op import Op

    ops = [Op.from_dict(json.loads(line)) for line in lines]
    ops.sort(key=lambda op: op.index)
    return ops


# --- the executors' task: parse once, check, write Parquet ------------------------------------------


CALLS_DIR = "calls.parquet"  # beside history.parquet: one row per call, for the latency SQL


def _partition_dir(parquet_dir: Path, rid: str) -> Path:
    """``<parquet_dir>/run=<rid>`` with the id escaped as Spark's partition discovery unescapes it."""
    from urllib.parse import quote

    return parquet_dir / f"run={quote(rid, safe='')}"


def _key_text(key: Any) -> str | None:
    if key is None or isinstance(key, str):
        return key
    return json.dumps(key, default=str)


def write_ops_parquet(ops: list[Any], path: Path) -> None:
    """One run's ops as a Parquet file (pyarrow, in the worker that parsed them).

    Columns as :data:`_SCHEMA_FIELDS` (``process`` as text, ``key`` as JSON text unless a string)
    plus ``raw``: the op's JSON line for nemesis ops (what :func:`fault_windows` re-reads), null for
    client ops.
    """
    import pyarrow as pa
    import pyarrow.parquet as pq

    from chaos.history.op import NEMESIS

    log_index = []
    for op in ops:
        li = op.extra.get("log_index") if op.extra else None
        log_index.append(li if type(li) is int else None)
    table = pa.table(
        {
            "index": pa.array([op.index for op in ops], pa.int64()),
            "type": pa.array([op.type for op in ops], pa.string()),
            "process": pa.array([str(op.process) for op in ops], pa.string()),
            "f": pa.array([op.f for op in ops], pa.string()),
            "time": pa.array([op.time for op in ops], pa.int64()),
            "node": pa.array([op.node if isinstance(op.node, str) else None for op in ops], pa.string()),
            "error": pa.array([op.error if isinstance(op.error, str) else None for op in ops], pa.string()),
            "key": pa.array([_key_text(op.key) for op in ops], pa.string()),
            "log_index": pa.array(log_index, pa.int64()),
            "raw": pa.array([op.to_json() if op.process == NEMESIS else None for op in ops], pa.string()),
        }
    )
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(table, str(path))


def write_calls_parquet(ops: list[Any], windows: list[list[Any]], path: Path) -> None:
    """One run's calls (an invocation and its completion) as a Parquet file, for the latency SQL:
    columns process (text), index, f, done_type, time, done_time (ns), latency_ms and fault (the
    fault windows the call started in, kinds sorted and joined with '+', else ``none``), the rows
    :func:`perf` would otherwise build with a window function and a join over every op."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from chaos.history.op import INVOKE, NEMESIS

    cols: dict[str, list[Any]] = {
        k: [] for k in ("process", "index", "f", "done_type", "time", "done_time", "latency_ms", "fault")
    }
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
        kinds = sorted({k for k, start, end in windows if start <= inv.time < end})
        cols["process"].append(p)
        cols["index"].append(inv.index)
        cols["f"].append(inv.f)
        cols["done_type"].append(op.type)
        cols["time"].append(inv.time)
        cols["done_time"].append(op.time)
        cols["latency_ms"].append((op.time - inv.time) / 1e6)
        cols["fault"].append("+".join(kinds) or "none")
    types = {"index": pa.int64(), "time": pa.int64(), "done_time": pa.int64(), "latency_ms": pa.float64()}
    table = pa.table({k: pa.array(v, types.get(k, pa.string())) for k, v in cols.items()})
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(table, str(path))


def check_run_task(run_dir: str, rid: str, time_limit: float | None, parquet_dir: str | None) -> str:
    """What an executor does for one run; returns its result row as JSON text.

    Reads the history once (:class:`chaos.history.store.ParsedHistory`), takes the test and its
    checkers as ``chaos check`` does (:func:`chaos.history.checkers.load_run_test`,
    :func:`chaos.history.checkers.checkers_for`) and runs their composition with the options
    ``chaos check`` gives it (the linearizability search in this worker: the executors are the
    parallelism); writes the ops to ``<parquet_dir>/run=<rid>/part-0.parquet`` and the calls to
    ``calls.parquet/run=<rid>/`` beside it (:func:`write_calls_parquet`).

    Row: ``{"valid", "checkers", "test", "order", "model", "windows": [[kind, start, end]],
    ["longest_unavailable_s"]}``, or ``{"error": "history"|"value"|"missing", "message", ...}``
    for a malformed history (with ``reason``, ``line``, ``path``), a bad test.json, a missing file.
    """
    from chaos.history.analysis import availability
    from chaos.history.analysis import fault_windows as core_windows
    from chaos.history.checkers import checkers_for, compose, load_run_test, needs_inference
    from chaos.history.store import HistoryError, ParsedHistory, RunDir
    from chaos.history.verdict import CheckOptions

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
    row: dict[str, Any] = {**result, "test": test, "order": order, "model": model, "windows": windows}
    if "perf" not in result["checkers"]:
        # the gate's availability threshold needs the figure even when the workload has no perf checker
        gaps = availability(iter(ops), top=1)
        row["longest_unavailable_s"] = round(gaps[0].duration / 1e9, 3) if gaps else 0.0
    if parquet_dir is not None:
        write_ops_parquet(ops, _partition_dir(Path(parquet_dir), rid) / "part-0.parquet")
        calls_dir = Path(parquet_dir).parent / CALLS_DIR
        write_calls_parquet(ops, windows, _partition_dir(calls_dir, rid) / "part-0.parquet")
    return json.dumps(row, default=str)


def preflight(run_dir: Path) -> None:
    """Refuse, in the driver and before Spark starts, what ``chaos check`` refuses as bad input:
    a malformed history (HistoryError naming file and line), one with no client op, a bad
    ``test.json`` or checker name (ValueError), a client op whose ``f`` the run's model does not
    check. One streaming pass of the validating reader, no op kept and no checker run: the
    executors parse and check again, in parallel.
    """
    from chaos.history.checkers import checkers_for, infer_test, needs_inference
    from chaos.history.models import get_model
    from chaos.history.op import NEMESIS
    from chaos.history.store import HistoryError, RunDir, read_history_lines

    run = RunDir(run_dir)
    test = run.load_test() if run.test_path.is_file() else {}
    if needs_inference(test):
        test = {**test, **infer_test(run.history_path)}  # a whole validating pass of its own
        if test.get("model") is None:
            checkers_for(test)
            return
    linear = checkers_for(test).get("linear")
    model = get_model(linear.model) if linear is not None else None  # type: ignore[attr-defined]
    fs = getattr(model, "fs", None)
    client = False
    for line, op in read_history_lines(run.history_path):
        if op.process == NEMESIS:
            continue
        client = True
        if fs is not None and op.f not in fs:
            raise HistoryError(
                f"client op f {op.f!r} is not one the {model.name} model checks "  # type: ignore[union-attr]
                f"(expected {', '.join(sorted(fs))}; pass --model)",
                line=line,
                path=run.history_path,
            )
    if not client:
        raise HistoryError(
            "no client op: nothing was tested (an empty history is not a valid test)", path=run.history_path
        )


def check_on_executors(
    spark: Any, run_dirs: list[Path], parquet_dir: Path | None, time_limit: float | None = None
) -> dict[str, dict[str, Any]]:
    """Every run checked (and its ops written as Parquet) by :func:`check_run_task` on the
    executors, one task per run; returns ``{run id: row}`` in ``run_dirs`` order.

    Raises, for the first run (in ``run_dirs`` order) that failed, what ``chaos check`` raises:
    HistoryError naming file and line, FileNotFoundError, ValueError.
    """
    from chaos.history.store import HistoryError

    jobs = [(run_id(d), str(d)) for d in run_dirs]
    target = None if parquet_dir is None else str(parquet_dir)

    def task(job: tuple[str, str]) -> tuple[str, str]:
        rid, path = job
        return rid, check_run_task(path, rid, time_limit, target)

    rows = dict(spark.sparkContext.parallelize(jobs, max(1, len(jobs))).map(task).collect())
    out: dict[str, dict[str, Any]] = {}
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


def windows_frame(spark: Any, rows: dict[str, dict[str, Any]]) -> Any:
    """The fault windows the executors returned as a DataFrame (run, kind, start, end) in ns."""
    from pyspark.sql import types as T

    schema = T.StructType(
        [
            T.StructField("run", T.StringType()),
            T.StructField("kind", T.StringType()),
            T.StructField("start", T.LongType()),
            T.StructField("end", T.LongType()),
        ]
    )
    data = [(rid, k, s, e) for rid, row in sorted(rows.items()) for k, s, e in row.get("windows") or []]
    return spark.createDataFrame(data, schema)


def read_ops_parquet(spark: Any, parquet_dir: Path) -> Any:
    """The ops the executors wrote, with the ``run`` column from the partition directories (kept as
    text: a run id is never read as a number or a date)."""
    conf = spark.conf
    key = "spark.sql.sources.partitionColumnTypeInference.enabled"
    before = conf.get(key, "true")
    conf.set(key, "false")
    try:
        return spark.read.parquet(str(parquet_dir))
    finally:
        conf.set(key, before)


# --- performance with Spark SQL ------------------------------------------------------------------


def fault_windows(df: Any) -> Any:
    """Nemesis fault windows per run as a DataFrame (run, kind, start, end) in ns.

    The windows are computed by :func:`chaos.history.analysis.fault_windows` (the one rule: from
    the completion of ``start-<kind>`` to the completion of ``stop-<kind>``) over each run's
    nemesis ops, which are few and collected to the driver; a window still open ends at the run's
    last op. The statistics that join on them stay in Spark SQL.
    """
    from pyspark.sql import functions as F
    from pyspark.sql import types as T

    from chaos.history.analysis import fault_windows as core_windows

    spark = df.sparkSession
    nem: dict[str, list[str]] = {}
    for row in df.filter("process = 'nemesis'").select("run", "raw").collect():
        nem.setdefault(row.run, []).append(row.raw)
    ends = {}
    if nem:
        last = df.filter(F.col("run").isin(list(nem))).groupBy("run").agg(F.max("time").alias("last"))
        ends = {row.run: row.last for row in last.collect()}
    rows = []
    for run, lines in sorted(nem.items()):
        for w in core_windows(_ops_from_raw(lines)):
            rows.append((run, w.kind, w.start, w.end_or(ends.get(run) or w.start)))
    schema = T.StructType(
        [
            T.StructField("run", T.StringType()),
            T.StructField("kind", T.StringType()),
            T.StructField("start", T.LongType()),
            T.StructField("end", T.LongType()),
        ]
    )
    return spark.createDataFrame(rows, schema)


def perf(
    df: Any, verdicts: dict[str, dict[str, Any]] | None = None, windows: Any = None, calls: Any = None
) -> dict[str, Any]:
    """Latency quantiles, throughput per run and per fault kind with Spark SQL; availability from
    the perf checker's results (``verdicts``), whose rule is :class:`chaos.history.analysis.Availability`.

    Returns ``{"latency": [rows], "availability": [rows], "throughput": [rows], "by_fault": [rows]}``;
    latencies in ms, times in s since the run started. ``windows``: the fault windows as a
    DataFrame (run, kind, start, end), if already known (:func:`windows_frame`); else
    :func:`fault_windows` of ``df``. ``calls``: the calls the executors wrote
    (:func:`write_calls_parquet`), if any; else they are built here from ``df`` and the windows.
    """
    spark = df.sparkSession
    if calls is not None:
        lat = calls.cache()
    else:
        lat = _calls_sql(df, windows)
    lat.createOrReplaceTempView("lat")
    return _stats_sql(spark, lat, verdicts)


def _calls_sql(df: Any, windows: Any) -> Any:
    """One row per call from the ops, in Spark SQL (the rule :func:`write_calls_parquet` follows)."""
    spark = df.sparkSession
    (windows if windows is not None else fault_windows(df)).createOrReplaceTempView("windows")
    client = df.filter("process != 'nemesis'")
    client.createOrReplaceTempView("client_ops")
    spark.sql(
        """
        SELECT * FROM (
          SELECT run, process, f, type, time, index,
                 lead(type) OVER w AS done_type, lead(time) OVER w AS done_time
          FROM client_ops WINDOW w AS (PARTITION BY run, process ORDER BY index)
        ) WHERE type = 'invoke' AND done_type IN ('ok', 'fail', 'info')
        """
    ).createOrReplaceTempView("calls")
    # one row per call, whatever the number of fault windows it falls in: overlapping windows
    # (a kill during a partition) name the call's faults together ("kill+partition"), never twice
    lat = spark.sql(
        """
        SELECT c.run, c.process, c.index, first(c.f) AS f, first(c.done_type) AS done_type,
               first(c.time) AS time, first(c.done_time) AS done_time,
               first(c.done_time - c.time) / 1e6 AS latency_ms,
               coalesce(nullif(array_join(array_sort(collect_set(w.kind)), '+'), ''), 'none') AS fault
        FROM calls c LEFT JOIN windows w
          ON c.run = w.run AND c.time >= w.start AND c.time < w.end
        GROUP BY c.run, c.process, c.index
        """
    ).cache()
    return lat


def _stats_sql(spark: Any, lat: Any, verdicts: dict[str, dict[str, Any]] | None) -> dict[str, Any]:
    # nearest-rank quantiles over the exact latencies, as the perf checker computes them
    # (chaos.history.perf.quantiles), so the gate's --max-p99-ms reads the figure chaos check shows
    q = {name: _nearest_rank_sql(frac) for name, frac in (("p50", 0.5), ("p95", 0.95), ("p99", 0.99))}
    latency = spark.sql(
        f"""
        SELECT run, f, count(*) AS n,
               sum(CASE WHEN done_type = 'ok' THEN 1 ELSE 0 END) AS ok,
               sum(CASE WHEN done_type = 'fail' THEN 1 ELSE 0 END) AS fail,
               sum(CASE WHEN done_type = 'info' THEN 1 ELSE 0 END) AS info,
               {q["p50"]} AS p50, {q["p95"]} AS p95, {q["p99"]} AS p99, round(max(latency_ms), 3) AS max
        FROM lat GROUP BY run, f ORDER BY run, f
        """
    )
    by_fault = spark.sql(
        f"""
        SELECT run, fault, count(*) AS n, {q["p50"]} AS p50, {q["p99"]} AS p99,
               round(max(latency_ms), 3) AS max
        FROM lat GROUP BY run, fault ORDER BY run, fault
        """
    )
    throughput = spark.sql(
        """
        SELECT run, CAST(floor(done_time / 1e9) AS INT) AS second, count(*) AS ok
        FROM lat WHERE done_type = 'ok' GROUP BY run, second ORDER BY run, second
        """
    )
    out = {
        "latency": [row.asDict() for row in latency.collect()],
        "by_fault": [row.asDict() for row in by_fault.collect()],
        "throughput": [row.asDict() for row in throughput.collect()],
        "availability": availability_rows(verdicts or {}),
    }
    lat.unpersist()
    return out


def _nearest_rank_sql(q: float) -> str:
    """Spark SQL for the nearest-rank ``q`` quantile of ``latency_ms`` in a group, in ms rounded
    to the µs (the rule of :func:`chaos.history.perf.quantiles`)."""
    return (
        "round(element_at(array_sort(collect_list(latency_ms)), "
        f"CAST(greatest(1, ceil({q} * count(*))) AS INT)), 3)"
    )


def availability_rows(verdicts: dict[str, dict[str, Any]], top: int = 3) -> list[dict[str, Any]]:
    """The ``top`` longest unavailability windows per run, from each run's perf checker result."""
    rows = []
    for run, v in sorted(verdicts.items()):
        perf_result = (v.get("checkers") or {}).get("perf") or {}
        windows = (perf_result.get("availability") or {}).get("windows") or []
        for rank, w in enumerate(windows[:top], 1):
            rows.append(
                {
                    "run": run,
                    "start_s": w.get("start_s"),
                    "end_s": w.get("end_s"),
                    "seconds": w.get("duration_s"),
                    "rank": rank,
                    "fault": ",".join(w.get("faults_active") or []) or None,
                    "summary": w.get("summary"),
                }
            )
    return rows


# --- the whole pipeline --------------------------------------------------------------------------


def summarize(
    run_dirs: list[Path],
    tests: dict[str, dict[str, Any]],
    verdicts: dict[str, Any],
    perf_rows: dict[str, Any],
    driver: dict[str, dict[str, Any]] | None = None,
) -> dict[str, Any]:
    """Per run: verdict, workload, nemesis, ok rate, worst p99 and longest unavailability (the perf
    checker's, :class:`chaos.history.analysis.Availability`); per (workload, nemesis): pass rate and
    the worst figures. The overall verdict merges the runs' with ``merge_valid``."""
    from chaos.history.analysis import UNKNOWN, merge_valid

    runs = []
    for run_dir in run_dirs:
        rid = run_id(run_dir)
        test = tests[rid]
        lat = [r for r in perf_rows["latency"] if r["run"] == rid]
        ok = sum(r["ok"] for r in lat)
        done = sum(r["n"] for r in lat)
        verdict = verdicts.get(rid, {"valid": UNKNOWN})
        perf_result = (verdict.get("checkers") or {}).get("perf") or {}
        longest = (perf_result.get("availability") or {}).get("longest_s")
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
                "ok_rate": (ok / done) if done else None,
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
) -> dict[str, Any]:
    """Run the pipeline over ``run_dirs``; write Parquet, ``summary.json`` and ``index.html`` to
    ``out``; return the summary (with ``timings`` in seconds per stage). ``say`` is told, in one
    line each, what the pipeline is doing as each stage starts (and how long the last one took).

    First the driver refuses bad input (:func:`preflight`: one streaming validating pass per
    history, before Spark starts). Then the executors check the runs, one task per run (:func:`check_on_executors`: the history read
    once, every checker of ``chaos check``, the ops written as Parquet with pyarrow); a malformed
    history is raised here, in the driver, before any statistics. Then Spark SQL computes the
    statistics from the Parquet. ``spark``: a session to use (left running); without
    one, the active session is used or one is started for ``master`` and stopped at the end.

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
    timings: dict[str, float] = {}
    tell = say or (lambda _msg: None)
    t = time.monotonic()
    for d in dirs:  # bad input is refused before Spark starts, in one line, as chaos check does
        preflight(d)
    timings["validate_in_driver"] = time.monotonic() - t
    if out is None:
        out = dirs[0].parent.parent / "analysis" / time.strftime("%Y%m%dT%H%M%S")
    out.mkdir(parents=True, exist_ok=True)
    t0 = time.monotonic()
    own = False
    if spark is None:
        spark = _active_session()
    if spark is None:
        tell(f"starting Spark ({master})")
        spark, own = spark_session(master), True
    timings["spark_start"] = time.monotonic() - t0
    try:
        t = time.monotonic()
        parquet_dir = out / "history.parquet"
        for old in (parquet_dir, out / CALLS_DIR):
            if old.exists():
                import shutil

                shutil.rmtree(old)
        tell(f"checking {len(dirs)} run(s) on the executors (one task per run; ops to {parquet_dir})")
        driver = check_on_executors(spark, dirs, parquet_dir, time_limit=time_limit)
        tests = {rid: d["test"] for rid, d in driver.items()}
        verdicts = {rid: {"valid": d["valid"], "checkers": d["checkers"]} for rid, d in driver.items()}
        timings["check_and_write_on_executors"] = time.monotonic() - t
        t = time.monotonic()
        tell(
            f"latency and throughput with Spark SQL (checking took {timings['check_and_write_on_executors']:.1f} s)"
        )
        df = read_ops_parquet(spark, parquet_dir)
        calls = read_ops_parquet(spark, out / CALLS_DIR)
        perf_rows = perf(df, verdicts, windows_frame(spark, driver), calls)
        timings["perf"] = time.monotonic() - t
        summary = summarize(dirs, tests, verdicts, perf_rows, driver)
        summary["timings"] = timings
        summary["master"] = master
        write_summary_parquet(spark, summary["runs"], out / "summary.parquet")
    finally:
        if own:
            spark.stop()
    with open(out / "summary.json", "w") as f:
        json.dump(summary, f, indent=1, default=str)
    write_summary_html(summary, out / "index.html")
    summary["out"] = str(out)
    return summary


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


def write_summary_parquet(spark: Any, runs: list[dict[str, Any]], path: Path) -> None:
    """The per-run rows as Parquet with a fixed schema; ``valid``, ``failures`` and ``faults`` as
    JSON text (``valid`` is true, false or "unknown")."""
    from pyspark.sql import types as T

    spark_type = {
        "string": T.StringType(),
        "json": T.StringType(),
        "long": T.LongType(),
        "double": T.DoubleType(),
    }
    schema = T.StructType([T.StructField(n, spark_type[t]) for n, t in _SUMMARY_COLUMNS])
    conv: dict[str, Callable[[Any], Any]] = {"string": str, "json": json.dumps, "long": int, "double": float}
    rows = [
        tuple(None if (r.get(n) is None and t != "json") else conv[t](r.get(n)) for n, t in _SUMMARY_COLUMNS)
        for r in runs
    ]
    spark.createDataFrame(rows, schema).write.mode("overwrite").parquet(str(path))


def _active_session() -> Any:
    try:
        from pyspark.sql import SparkSession
    except ImportError:  # pragma: no cover - depends on the install
        return None
    return SparkSession.getActiveSession()


def write_summary_html(summary: dict[str, Any], path: Path) -> Path:
    """A self-contained HTML page of the summary: the run table and the (workload, nemesis) matrix."""
    import jinja2

    env = jinja2.Environment(autoescape=True)
    html = env.from_string(_SUMMARY_TEMPLATE).render(s=summary, verdict=_verdict_word)
    path.write_text(html)
    return path


def _verdict_word(v: Any) -> str:
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
<div class="banner {{ verdict(s.valid) }}">{{ verdict(s.valid) | upper }}: {{ s.runs|length }} runs
 ({{ s.master }})</div>
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
{% for r in s.runs %}<tr class="{{ verdict(r.valid) }}"><td><a href="{{ r.dir }}/index.html">{{ r.run }}</a></td>
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
