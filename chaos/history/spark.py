"""The offline analysis pipeline on Apache Spark (PySpark): ``chaos analyze``.

Gives every run the verdict ``chaos check`` gives it. In the driver, each run's history is read
with the validating reader and every checker of its workload but ``linear`` runs, exactly as
``chaos check`` picks and composes them (:func:`check_in_driver`); a malformed history stops here,
before Spark. Then the histories go into one DataFrame, written as Parquet partitioned by run; the
linearizability search runs per (run, key) in parallel on the executors with the run's model; each
run's checker results merge with :func:`chaos.history.analysis.merge_valid`; and Spark SQL computes
latency quantiles and throughput per run and per fault kind, joining on fault windows made by the
one rule of :mod:`chaos.history.analysis`. Availability is the perf checker's.

Local mode (``--master local[*]``) is the embedded default; any master Spark accepts works
(``spark://host:7077``, ``yarn``, ``k8s://...``). On a real cluster the run directories must be
readable by the driver; histories travel to the executors inside the job, not by path.

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


def load_runs(spark: Any, run_dirs: list[Path]) -> Any:
    """One DataFrame of every run's ops.

    Columns: ``run`` (run id), ``raw`` (the JSON line, exact), and the parsed fields
    index, type, process, f, time (ns), node, error, key (JSON text) and log_index.
    Every history was validated in the driver first (:func:`check_in_driver`); the lines dropped
    here are blank ones and a torn last line, which the reader skips too.
    """
    from pyspark.sql import functions as F
    from pyspark.sql import types as T

    type_of = {"long": T.LongType(), "string": T.StringType()}
    schema = T.StructType([T.StructField(n, type_of[t]) for n, t in _SCHEMA_FIELDS])
    paths = []
    for run_dir in run_dirs:
        history = run_dir / "history.jsonl"
        if not history.is_file():
            raise FileNotFoundError(f"{run_dir}: no history.jsonl (expected a run directory)")
        paths.append(str(history.resolve()))
    # one scan over every file; the run id comes from the file's path (<test>/<stamp>/history.jsonl)
    df = spark.read.text(paths).withColumnRenamed("value", "raw")
    path_re = r"([^/]+)/([^/]+)/history\.jsonl$"
    df = df.withColumn(
        "run",
        F.concat_ws(
            "__",
            F.regexp_extract(F.input_file_name(), path_re, 1),
            F.regexp_extract(F.input_file_name(), path_re, 2),
        ),
    )
    parsed = df.withColumn("o", F.from_json("raw", schema)).filter(F.col("o.type").isNotNull())
    return parsed.select("run", "raw", "o.*")


def write_parquet(df: Any, out: Path) -> Path:
    """Write the ops as one Parquet dataset partitioned by run; returns its path."""
    path = out / "history.parquet"
    # one task (and one file) per run instead of every scan partition writing into every run
    df.repartition("run").write.mode("overwrite").partitionBy("run").parquet(str(path))
    return path


# --- checking: linearizability on the executors, the other checkers per run -------------------


def check_in_driver(run_dir: Path, time_limit: float | None) -> dict[str, Any]:
    """Validate a run's history and run every checker of its workload except ``linear``.

    The test and its checkers come exactly as ``chaos check`` gets them
    (:func:`chaos.history.checkers.load_run_test`: ``test.json``, or the workload told by the whole
    history; :func:`chaos.history.checkers.checkers_for`), and they run through the same
    composition, which reads the history with the validating reader, so a malformed history fails
    here, in the driver, before Spark sees it.

    Returns ``{"test": dict, "order": [checker names], "model": linear model or None,
    "checkers": {name: result}}`` (and ``longest_unavailable_s`` when there is no perf checker).
    Raises HistoryError (malformed history, naming file and line) and ValueError (bad test.json).
    """
    from chaos.history.analysis import availability, read_history
    from chaos.history.checkers import checkers_for, compose, load_run_test, model_ops
    from chaos.history.models import get_model
    from chaos.history.store import RunDir

    run = RunDir(run_dir)
    history = run.history_path
    test = load_run_test(run)
    chosen = checkers_for(test)
    order = list(chosen)
    linear = chosen.pop("linear", None)
    model = getattr(linear, "model", None) if linear is not None else None
    results: dict[str, Any] = compose(chosen).check(test, history, {"time_limit": time_limit})["checkers"]
    if model is not None or not results:
        # the whole file is read (validated) here when no stream checker read it; with a model, the
        # same rule as LinearChecker.check: a client op the model does not check is bad input
        for _ in model_ops(history, get_model(model) if model is not None else None):
            pass
    out: dict[str, Any] = {
        "test": test,
        "history": history,
        "order": order,
        "model": model,
        "checkers": results,
    }
    if "perf" not in results:
        # the gate's availability threshold needs the figure even when the workload has no perf checker
        gaps = availability(read_history(history), top=1)
        out["longest_unavailable_s"] = round(gaps[0].duration / 1e9, 3) if gaps else 0.0
    return out


def _ops_from_raw(lines: Iterable[str]) -> list[Any]:
    from chaos.history.op import Op

    ops = [Op.from_dict(json.loads(line)) for line in lines]
    ops.sort(key=lambda op: op.index)
    return ops


def check_key(model: str, time_limit: float | None, lines: Iterable[str]) -> dict[str, Any]:
    """Linearizability of one key's ops (raw JSON lines); the same call ``chaos check`` makes.

    ``time_limit`` applies to this key (``chaos check`` gives it to the whole history).
    """
    from chaos.history.linear import check_history

    result: dict[str, Any] = check_history(_ops_from_raw(lines), model, time_limit=time_limit, workers=1)
    return result


def merge_linear(model: str, parts: list[dict[str, Any]]) -> dict[str, Any]:
    """One ``linear`` result (docs/design.md) from the per-(run, key) results of a run.

    A part that crashed makes the whole checker ``unknown`` with the error, as a crashing checker
    is in ``chaos check``; otherwise the verdicts merge with :func:`chaos.history.analysis.merge_valid`.
    """
    from chaos.history.analysis import UNKNOWN, merge_valid

    errors = [p["error"] for p in parts if "error" in p and "keys" not in p and "valid" not in p]
    if errors:
        return {"valid": UNKNOWN, "model": model, "error": f"checker linear crashed: {errors[0]}"}
    out: dict[str, Any] = {"valid": True, "model": model, "keys": {}, "failures": [], "unknown": [], "ops": 0}
    for p in parts:
        out["keys"].update(p.get("keys") or {})
        out["failures"].extend(p.get("failures") or [])
        out["unknown"].extend(p.get("unknown") or [])
        out["ops"] += int(p.get("ops") or 0)
    out["failures"].sort()
    out["unknown"].sort()
    out["valid"] = merge_valid(p.get("valid", UNKNOWN) for p in parts)
    return out


def check_runs(
    spark: Any,
    df: Any,
    driver: dict[str, dict[str, Any]],
    time_limit: float | None = None,
) -> dict[str, dict[str, Any]]:
    """Verdicts per run: ``{run: {"valid": ..., "checkers": {...}}}``, as ``chaos check`` gives them.

    ``driver`` holds each run's :func:`check_in_driver` result. For runs whose workload has the
    ``linear`` checker, the client ops of each (run, key) are grouped and checked in parallel tasks
    on the executors with the run's model, then merged per run (:func:`merge_linear`); the
    checkers' results are ordered as the workload names them and merged with
    :func:`chaos.history.analysis.merge_valid`, the function ``chaos check`` uses.
    """
    from pyspark.sql import functions as F

    from chaos.history.analysis import UNKNOWN, merge_valid

    models = {r: d["model"] for r, d in driver.items() if d["model"] is not None}
    per_run: dict[str, list[dict[str, Any]]] = {r: [] for r in models}
    if models:
        # every key of a run, unkeyed ops included, goes to one group; keys whose text is equal
        # (1 and "1") share a group, where the checker tells them apart by their JSON values
        keyed = (
            df.filter(F.col("run").isin(list(models)))
            .filter(F.col("process") != "nemesis")
            .select("run", "key", "raw")
        )

        def check_group(pdf: Any) -> Any:
            import traceback

            import pandas as pd

            run, key = pdf["run"].iloc[0], pdf["key"].iloc[0]
            from chaos.history.models import ModelError

            try:
                res = check_key(models[run], time_limit, pdf["raw"].tolist())
            except ModelError as e:  # an op the model cannot check: bad input, as in chaos check
                res = {"model_error": str(e), "index": e.index}
            except Exception as e:  # reported unknown, as a crashing checker is (Jepsen's check-safe)
                res = {"error": traceback.format_exception_only(type(e), e)[-1].strip()}
            return pd.DataFrame({"run": [run], "key": [key], "result": [json.dumps(res, default=str)]})

        # Arrow moves each (run, key) group to a Python worker in one batch. The groups are small
        # but each is a search: adaptive execution would coalesce them into one task and check
        # them one after another, so it keeps the shuffle's partitions here
        conf = spark.conf
        before = conf.get("spark.sql.adaptive.coalescePartitions.enabled", "true")
        conf.set("spark.sql.adaptive.coalescePartitions.enabled", "false")
        try:
            rows = (
                keyed.groupBy("run", "key")
                .applyInPandas(check_group, schema="run string, key string, result string")
                .collect()
            )
        finally:
            conf.set("spark.sql.adaptive.coalescePartitions.enabled", before)
        for row in rows:
            per_run[row.run].append(json.loads(row.result))
    for run, parts in per_run.items():
        bad = [p for p in parts if "model_error" in p]
        if bad:
            _raise_model_error(driver[run]["history"], min(bad, key=lambda p: p["index"]))
    results: dict[str, dict[str, Any]] = {}
    for run, d in driver.items():
        checkers = dict(d["checkers"])
        if run in models:
            checkers["linear"] = merge_linear(models[run], per_run[run])
        ordered = {name: checkers[name] for name in d["order"] if name in checkers}
        results[run] = {
            "valid": merge_valid(r.get("valid", UNKNOWN) for r in ordered.values()),
            "checkers": ordered,
        }
    return results


def _raise_model_error(history: Path, part: dict[str, Any]) -> None:
    """Raise the HistoryError ``chaos check`` raises for an op the model cannot check: the model's
    message and the op's line (the linear checker's rule, :class:`chaos.history.checkers.LinearChecker`)."""
    from chaos.history.analysis import HistoryError
    from chaos.history.store import read_history_lines

    at = next((n for n, o in read_history_lines(history) if o.index == part["index"]), None)
    raise HistoryError(f"{part['model_error']}; pass --model", line=at, path=history)


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


def perf(df: Any, verdicts: dict[str, dict[str, Any]] | None = None) -> dict[str, Any]:
    """Latency quantiles, throughput per run and per fault kind with Spark SQL; availability from
    the perf checker's results (``verdicts``), whose rule is :class:`chaos.history.analysis.Availability`.

    Returns ``{"latency": [rows], "availability": [rows], "throughput": [rows], "by_fault": [rows]}``;
    latencies in ms, times in s since the run started.
    """
    spark = df.sparkSession
    fault_windows(df).createOrReplaceTempView("windows")
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
    lat.createOrReplaceTempView("lat")
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

    First, in the driver, each history is read with the validating reader and every checker of its
    workload but ``linear`` runs (:func:`check_in_driver`); nothing reaches Spark before every
    history is known good. Then Spark writes Parquet, checks linearizability per (run, key) on the
    executors and computes the statistics. ``spark``: a session to use (left running); without
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
    tell(f"checking {len(dirs)} run(s) in the driver (every checker but linearizability)")
    driver = {run_id(d): check_in_driver(d, time_limit) for d in dirs}
    tests = {rid: d["test"] for rid, d in driver.items()}
    timings["validate_and_check_per_run"] = time.monotonic() - t
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
        tell(f"writing the histories as Parquet to {out / 'history.parquet'}")
        write_parquet(load_runs(spark, dirs), out)
        df = spark.read.parquet(str(out / "history.parquet")).cache()
        timings["parquet"] = time.monotonic() - t
        t = time.monotonic()
        tell("checking linearizability per (run, key) on the executors")
        verdicts = check_runs(spark, df, driver, time_limit=time_limit)
        timings["check_linear"] = time.monotonic() - t
        t = time.monotonic()
        tell(f"latency and throughput with Spark SQL (linearizability took {timings['check_linear']:.1f} s)")
        perf_rows = perf(df, verdicts)
        timings["perf"] = time.monotonic() - t
        summary = summarize(dirs, tests, verdicts, perf_rows, driver)
        summary["timings"] = timings
        summary["master"] = master
        write_summary_parquet(spark, summary["runs"], out / "summary.parquet")
        df.unpersist()
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
