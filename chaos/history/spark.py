"""The offline analysis pipeline on Apache Spark (PySpark): ``chaos analyze``.

Reads the histories of many runs into one DataFrame, writes it as Parquet partitioned by run, checks
each run with the same checker code ``chaos check`` uses (register runs split by (run, key), so the
linearizability search runs in parallel on the executors; other workloads one task per run), and
computes latency quantiles, throughput and availability per run and per fault kind with Spark SQL.

Local mode (``--master local[*]``) is the embedded default; any master Spark accepts works
(``spark://host:7077``, ``yarn``, ``k8s://...``). On a real cluster the run directories must be
readable by the driver; histories travel to the executors inside the job, not by path.

Outputs in ``--out`` (default ``store/analysis/<timestamp>``): ``history.parquet/run=<id>/``,
``summary.parquet``, ``summary.json`` and ``index.html``.
"""

from __future__ import annotations

import json
import os
import tempfile
import time
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

LINEAR_WORKLOADS = {"register": "cas-register"}

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
        raise RuntimeError("pyspark is not installed: pip install 'dledger-chaos[spark]'") from e
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


def load_test(run_dir: Path) -> dict[str, Any]:
    path = run_dir / "test.json"
    if not path.is_file():
        return {}
    with open(path) as f:
        data: dict[str, Any] = json.load(f)
    return data


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
    Lines that are not JSON objects (a torn last line of a killed writer) are dropped.
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


# --- checking on the executors -------------------------------------------------------------------


def _ops_from_raw(lines: Iterable[str]) -> list[Any]:
    from chaos.history.op import Op

    ops = [Op.from_dict(json.loads(line)) for line in lines]
    ops.sort(key=lambda op: op.index)
    return ops


def check_key(model: str, time_limit: float | None, lines: Iterable[str]) -> dict[str, Any]:
    """Linearizability of one key's ops (raw JSON lines); the same call ``chaos check`` makes."""
    from chaos.history.linear import check_history

    result: dict[str, Any] = check_history(_ops_from_raw(lines), model, time_limit=time_limit, workers=1)
    return result


def check_run_history(test: dict[str, Any], lines: Iterable[str]) -> dict[str, Any]:
    """Run a workload's checkers over one run's ops (raw JSON lines) on an executor.

    The history is written to a temporary run directory so that the checker code is exactly the
    code ``chaos check`` runs on a stored run.
    """
    from chaos.history.checkers import check_run

    with tempfile.TemporaryDirectory(prefix="chaos-analyze-") as tmp:
        run_dir = Path(tmp) / "run" / "0"
        run_dir.mkdir(parents=True)
        ops = _ops_from_raw(lines)
        with open(run_dir / "history.jsonl", "w") as f:
            for op in ops:
                f.write(op.to_json() + "\n")
        with open(run_dir / "test.json", "w") as f:
            json.dump(test, f)
        result: dict[str, Any] = check_run(run_dir)
        return result


def _merge(values: Iterable[Any]) -> Any:
    values = list(values)
    if any(v is False for v in values):
        return False
    if any(v == "unknown" for v in values):
        return "unknown"
    return True


def check_runs(
    spark: Any, df: Any, tests: dict[str, dict[str, Any]], time_limit: float | None = None
) -> dict[str, dict[str, Any]]:
    """Verdicts per run: ``{run: {"valid": ..., "checkers": {...}}}``.

    Register runs: the client ops of each (run, key) are grouped and checked in parallel tasks,
    then merged per run into the ``linear`` checker result of docs/design.md. Other workloads:
    one task per run running ``check_run``.
    """
    from pyspark.sql import functions as F

    linear_runs = [r for r, t in tests.items() if workload_of(t) in LINEAR_WORKLOADS]
    other_runs = [r for r in tests if r not in linear_runs]
    results: dict[str, dict[str, Any]] = {}

    if linear_runs:
        models = {r: LINEAR_WORKLOADS[workload_of(tests[r])] for r in linear_runs}
        keyed = (
            df.filter(F.col("run").isin(linear_runs))
            .filter(F.col("process") != "nemesis")
            .filter(F.col("key").isNotNull())
            .select("run", "key", "raw")
        )

        def check_group(pdf: Any) -> Any:
            import pandas as pd

            run, key = pdf["run"].iloc[0], pdf["key"].iloc[0]
            res = check_key(models[run], time_limit, pdf["raw"].tolist())
            return pd.DataFrame({"run": [run], "key": [key], "result": [json.dumps(res, default=str)]})

        # Arrow moves each (run, key) group to a Python worker in one batch
        per_key = [
            (row.run, json.loads(row.result))
            for row in keyed.groupBy("run", "key")
            .applyInPandas(check_group, schema="run string, key string, result string")
            .collect()
        ]
        for run in linear_runs:
            results[run] = {
                "valid": True,
                "checkers": {
                    "linear": {
                        "valid": True,
                        "model": models[run],
                        "keys": {},
                        "failures": [],
                        "unknown": [],
                    }
                },
            }
        for run, res in per_key:
            linear = results[run]["checkers"]["linear"]
            linear["keys"].update(res.get("keys", {}))
            linear["failures"].extend(res.get("failures", []))
            linear["unknown"].extend(res.get("unknown", []))
        for run in linear_runs:
            linear = results[run]["checkers"]["linear"]
            linear["failures"].sort()
            linear["unknown"].sort()
            linear["valid"] = _merge(k.get("valid") for k in linear["keys"].values())
            results[run]["valid"] = linear["valid"]

    if other_runs:
        by_run = (
            df.filter(F.col("run").isin(other_runs))
            .select("run", "raw")
            .rdd.map(lambda row: (row.run, row.raw))
            .groupByKey(numPartitions=max(len(other_runs), 1))
            .map(lambda kv: (kv[0], check_run_history(tests[kv[0]], kv[1])))
            .collect()
        )
        for run, res in by_run:
            results[run] = res
    return results


# --- performance with Spark SQL ------------------------------------------------------------------


def fault_windows(df: Any) -> Any:
    """Nemesis fault windows per run: (run, kind, start, end) in ns.

    A window lasts from the completion of ``start-<kind>`` to the completion of ``stop-<kind>``;
    nemesis invocations and completions are both ``info`` ops, so the completion is the second of
    each pair. An unclosed window ends at the run's last op.
    """
    df.filter("process = 'nemesis'").createOrReplaceTempView("nem_ops")
    df.createOrReplaceTempView("ops")
    spark = df.sparkSession
    return spark.sql(
        """
        WITH numbered AS (
          SELECT run, f, time, row_number() OVER (PARTITION BY run, f ORDER BY index) AS n
          FROM nem_ops WHERE f LIKE 'start-%' OR f LIKE 'stop-%'
        ),
        completions AS (
          SELECT run, f, time, CAST((n + 1) / 2 AS INT) AS k FROM numbered WHERE n % 2 = 0
        ),
        starts AS (SELECT run, substr(f, 7) AS kind, time, k FROM completions WHERE f LIKE 'start-%'),
        stops AS (SELECT run, substr(f, 6) AS kind, time, k FROM completions WHERE f LIKE 'stop-%'),
        ends AS (SELECT run, max(time) AS last FROM ops GROUP BY run)
        SELECT s.run, s.kind, s.time AS start, coalesce(t.time, e.last) AS end
        FROM starts s JOIN ends e ON s.run = e.run
        LEFT JOIN stops t ON s.run = t.run AND s.kind = t.kind AND s.k = t.k
        """
    )


def perf(df: Any) -> dict[str, Any]:
    """Latency quantiles, throughput and availability per run and per fault kind, with Spark SQL.

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
    lat = spark.sql(
        """
        SELECT c.run, c.f, c.done_type, c.time, c.done_time, (c.done_time - c.time) / 1e6 AS latency_ms,
               coalesce(w.kind, 'none') AS fault
        FROM calls c LEFT JOIN windows w
          ON c.run = w.run AND c.time >= w.start AND c.time < w.end
        """
    ).cache()
    lat.createOrReplaceTempView("lat")
    latency = spark.sql(
        """
        SELECT run, f, count(*) AS n,
               sum(CASE WHEN done_type = 'ok' THEN 1 ELSE 0 END) AS ok,
               sum(CASE WHEN done_type = 'fail' THEN 1 ELSE 0 END) AS fail,
               sum(CASE WHEN done_type = 'info' THEN 1 ELSE 0 END) AS info,
               percentile_approx(latency_ms, 0.5) AS p50, percentile_approx(latency_ms, 0.95) AS p95,
               percentile_approx(latency_ms, 0.99) AS p99, max(latency_ms) AS max
        FROM lat GROUP BY run, f ORDER BY run, f
        """
    )
    by_fault = spark.sql(
        """
        SELECT run, fault, count(*) AS n,
               percentile_approx(latency_ms, 0.5) AS p50, percentile_approx(latency_ms, 0.99) AS p99,
               max(latency_ms) AS max
        FROM lat GROUP BY run, fault ORDER BY run, fault
        """
    )
    throughput = spark.sql(
        """
        SELECT run, CAST(floor(done_time / 1e9) AS INT) AS second, count(*) AS ok
        FROM lat WHERE done_type = 'ok' GROUP BY run, second ORDER BY run, second
        """
    )
    # Availability: the longest gaps between successive ok completions (and from the start).
    availability = spark.sql(
        """
        WITH oks AS (
          SELECT run, done_time AS t, lag(done_time, 1, 0) OVER (PARTITION BY run ORDER BY done_time) AS prev
          FROM lat WHERE done_type = 'ok'
        ),
        gaps AS (SELECT run, prev AS start, t AS end, (t - prev) / 1e9 AS seconds FROM oks),
        ranked AS (
          SELECT g.*, row_number() OVER (PARTITION BY g.run ORDER BY g.seconds DESC) AS rank FROM gaps g
        )
        SELECT r.run, r.start / 1e9 AS start_s, r.end / 1e9 AS end_s, r.seconds, r.rank,
               (SELECT max_by(w.kind, w.start) FROM windows w
                 WHERE w.run = r.run AND w.start <= r.end AND w.start >= r.start - 1e9) AS fault
        FROM ranked r WHERE r.rank <= 3 ORDER BY r.run, r.rank
        """
    )
    out = {
        "latency": [row.asDict() for row in latency.collect()],
        "by_fault": [row.asDict() for row in by_fault.collect()],
        "throughput": [row.asDict() for row in throughput.collect()],
        "availability": [row.asDict() for row in availability.collect()],
    }
    lat.unpersist()
    return out


# --- the whole pipeline --------------------------------------------------------------------------


def summarize(
    run_dirs: list[Path],
    tests: dict[str, dict[str, Any]],
    verdicts: dict[str, Any],
    perf_rows: dict[str, Any],
) -> dict[str, Any]:
    """Per run: verdict, workload, nemesis, ok rate, worst p99 and longest unavailability;
    per (workload, nemesis): pass rate and the worst figures."""
    runs = []
    for run_dir in run_dirs:
        rid = run_id(run_dir)
        test = tests[rid]
        lat = [r for r in perf_rows["latency"] if r["run"] == rid]
        ok = sum(r["ok"] for r in lat)
        done = sum(r["n"] for r in lat)
        gaps = [r["seconds"] for r in perf_rows["availability"] if r["run"] == rid]
        verdict = verdicts.get(rid, {"valid": "unknown"})
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
                "max_unavailable_s": max(gaps, default=None),
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
        "valid": _merge(r["valid"] for r in runs),
        "runs": runs,
        "matrix": matrix,
        "perf": perf_rows,
        "verdicts": verdicts,
    }


def _failures(verdict: dict[str, Any]) -> list[str]:
    out = []
    for name, res in (verdict.get("checkers") or {}).items():
        if isinstance(res, dict) and res.get("valid") is not True:
            keys = res.get("failures") or []
            out.append(f"{name}: keys {', '.join(map(str, keys[:5]))}" if keys else name)
    return out


def analyze(
    run_dirs: Iterable[Path],
    *,
    master: str = "local[*]",
    out: Path | None = None,
    time_limit: float | None = None,
    spark: Any = None,
) -> dict[str, Any]:
    """Run the pipeline over ``run_dirs``; write Parquet, ``summary.json`` and ``index.html`` to
    ``out``; return the summary (with ``timings`` in seconds per stage).

    Raises FileNotFoundError naming a directory without a history.
    """
    dirs = [Path(d).resolve() for d in run_dirs]
    if not dirs:
        raise ValueError("no run directories given")
    tests = {run_id(d): load_test(d) for d in dirs}
    if out is None:
        out = dirs[0].parent.parent / "analysis" / time.strftime("%Y%m%dT%H%M%S")
    out.mkdir(parents=True, exist_ok=True)
    timings: dict[str, float] = {}
    t0 = time.monotonic()
    own = spark is None
    if own:
        spark = spark_session(master)
    timings["spark_start"] = time.monotonic() - t0
    try:
        t = time.monotonic()
        write_parquet(load_runs(spark, dirs), out)
        df = spark.read.parquet(str(out / "history.parquet")).cache()
        timings["parquet"] = time.monotonic() - t
        t = time.monotonic()
        verdicts = check_runs(spark, df, tests, time_limit=time_limit)
        timings["check"] = time.monotonic() - t
        t = time.monotonic()
        perf_rows = perf(df)
        timings["perf"] = time.monotonic() - t
        summary = summarize(dirs, tests, verdicts, perf_rows)
        summary["timings"] = timings
        summary["master"] = master
        spark.createDataFrame(
            [
                {k: (json.dumps(v) if isinstance(v, list) else v) for k, v in r.items()}
                for r in summary["runs"]
            ]
        ).write.mode("overwrite").parquet(str(out / "summary.parquet"))
        df.unpersist()
    finally:
        if own:
            spark.stop()
    with open(out / "summary.json", "w") as f:
        json.dump(summary, f, indent=1, default=str)
    write_summary_html(summary, out / "index.html")
    summary["out"] = str(out)
    return summary


def write_summary_html(summary: dict[str, Any], path: Path) -> Path:
    """A self-contained HTML page of the summary: the run table and the (workload, nemesis) matrix."""
    import jinja2

    env = jinja2.Environment(autoescape=True)
    html = env.from_string(_SUMMARY_TEMPLATE).render(s=summary, verdict=_verdict_word)
    path.write_text(html)
    return path


def _verdict_word(v: Any) -> str:
    return {True: "valid", False: "invalid"}.get(v, "unknown") if isinstance(v, bool) else "unknown"


def iter_table_rows(summary: dict[str, Any]) -> Iterator[list[str]]:
    """Rows for the terminal table: run, workload, nemesis, verdict, ops, ok rate, p99, unavailable."""
    for r in summary["runs"]:
        yield [
            r["run"],
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
