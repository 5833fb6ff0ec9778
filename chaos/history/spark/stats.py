"""The statistics tables of ``chaos analyze``: merged from the executors' per-run rows
(:func:`stats_rows`), or computed again with Spark SQL from ``history.parquet`` (:func:`perf`;
a test holds both to the same rows). Latencies in ns, quantiles by nearest rank.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from chaos.history.analysis import fault_windows as core_windows
from chaos.history.spark.tasks import _ops_from_raw

if TYPE_CHECKING:  # pyspark is the [spark] extra: imported where a function runs
    from pyspark.sql import DataFrame, SparkSession


def windows_frame(spark: SparkSession, rows: dict[str, dict[str, Any]]) -> DataFrame:
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


def read_ops_parquet(spark: SparkSession, parquet_dir: Path) -> DataFrame:
    """The ops the executors wrote, with the ``run`` column from the partition directories (kept as
    text: a run id is never read as a number or a date)."""
    conf = spark.conf
    key = "spark.sql.sources.partitionColumnTypeInference.enabled"
    before = conf.get(key, "true") or "true"
    conf.set(key, "false")
    try:
        return spark.read.parquet(str(parquet_dir))
    finally:
        conf.set(key, before)


# --- performance with Spark SQL ------------------------------------------------------------------


def fault_windows(df: DataFrame) -> DataFrame:
    """Nemesis fault windows per run as a DataFrame (run, kind, start, end) in ns.

    The windows are computed by :func:`chaos.history.analysis.fault_windows` (the one rule: from
    the completion of ``start-<kind>`` to the completion of ``stop-<kind>``) over each run's
    nemesis ops, which are few and collected to the driver; a window still open ends at the run's
    last op. The statistics that join on them stay in Spark SQL.
    """
    from pyspark.sql import functions as F
    from pyspark.sql import types as T

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
    df: DataFrame, verdicts: dict[str, dict[str, object]] | None = None, windows: DataFrame | None = None
) -> dict[str, object]:
    """Latency quantiles, throughput per run and per fault kind with Spark SQL from the ops
    (``df``, as :func:`read_ops_parquet` reads them); availability from the perf checker's
    results (``verdicts``), whose rule is :class:`chaos.history.analysis.Availability`.

    ``chaos analyze`` takes these rows from the executors instead (:func:`run_stats`,
    :func:`stats_rows`); this is the same computation over the Parquet, for queries of one's own.
    Returns ``{"latency": [rows], "availability": [rows], "throughput": [rows], "by_fault": [rows]}``;
    latencies in ms, times in s since the run started. ``windows``: the fault windows as a
    DataFrame (run, kind, start, end), if already known (:func:`windows_frame`); else
    :func:`fault_windows` of ``df``.
    """
    lat = _calls_sql(df, windows)
    lat.createOrReplaceTempView("lat")
    return _stats_sql(df.sparkSession, lat, verdicts)


def _calls_sql(df: DataFrame, windows: DataFrame | None) -> DataFrame:
    """One row per call from the ops, in Spark SQL (the rule :func:`run_stats` follows)."""
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


def _stats_sql(
    spark: SparkSession, lat: DataFrame, verdicts: dict[str, dict[str, Any]] | None
) -> dict[str, Any]:
    # nearest-rank quantiles over the exact latencies, as the perf checker computes them
    # (chaos.history.checkers.perf.quantiles), so the gate's --max-p99-ms reads the figure chaos check shows
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
    to the µs (the rule of :func:`chaos.history.checkers.perf.quantiles`)."""
    return (
        "round(element_at(array_sort(collect_list(latency_ms)), "
        f"CAST(greatest(1, ceil({q} * count(*))) AS INT)), 3)"
    )


def stats_rows(rows: dict[str, dict[str, Any]], verdicts: dict[str, dict[str, object]]) -> dict[str, object]:
    """The executors' per-run statistics (:func:`run_stats`) as the tables :func:`perf` returns,
    each row with its ``run``, ordered by run then f / fault / second."""
    out: dict[str, Any] = {"latency": [], "by_fault": [], "throughput": []}
    for rid in sorted(rows):
        stats = rows[rid].get("stats") or {}
        for table in out:
            out[table].extend({"run": rid, **r} for r in stats.get(table) or [])
    out["availability"] = availability_rows(verdicts)
    return out


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
