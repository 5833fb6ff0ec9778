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

import heapq
import json
import math
import os
import shutil
import socket
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

_CONF = (
    ("spark.ui.enabled", "false"),
    ("spark.ui.showConsoleProgress", "false"),
    ("spark.sql.shuffle.partitions", "8"),
    ("spark.sql.session.timeZone", "UTC"),
    ("spark.python.worker.reuse", "true"),
    # the workers' daemon imports the installed pyspark, compiled, not Spark's zip of its source
    ("spark.python.daemon.module", "chaos.history.spark_daemon"),
    # the driver JVM only schedules tasks and moves small rows: the client compiler alone and one
    # GC thread take half the CPU of its start-up (issue 27); a user's extraJavaOptions still win
    ("spark.driver.defaultJavaOptions", "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"),
)


def _cds_option() -> str:
    """A JVM option for a class-data-sharing archive of the classes Spark's driver loads, kept in
    ``$XDG_CACHE_HOME/chaos`` (``~/.cache/chaos``): with it the driver JVM starts on about a third
    less CPU (issue 27). The first start writes the archive as its JVM exits (some 70 MB, a name
    per process; the JVM may write it after the command returned), and a later start adopts it
    once 10 s unchanged; a JVM that cannot use it starts without (its CDS log lines are off).
    ``CHAOS_SPARK_CDS=0``: no archive. Keyed by the pyspark install and the java binary, so an
    upgrade of either makes a new one."""
    if os.environ.get("CHAOS_SPARK_CDS", "1") == "0":
        return ""
    import hashlib

    import pyspark

    home = os.environ.get("JAVA_HOME")
    java = shutil.which("java", path=os.path.join(home, "bin") if home else None)
    if java is None:
        return ""  # Spark will say Java is missing
    real = os.path.realpath(java)
    st = os.stat(real)
    ident = f"{pyspark.__version__}|{pyspark.__file__}|{real}|{st.st_size}|{st.st_mtime_ns}"
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "chaos"
    archive = cache / f"spark-{hashlib.sha256(ident.encode()).hexdigest()[:16]}.jsa"
    if not archive.is_file():
        try:  # another start may adopt the same files at the same time: either one's rename wins
            done = [p for p in cache.glob(archive.name + ".*") if time.time() - p.stat().st_mtime > 10]
            for n, p in enumerate(sorted(done, key=lambda p: p.stat().st_size, reverse=True)):
                if n == 0:
                    os.replace(p, archive)
                else:
                    p.unlink()
        except OSError:
            pass
    # the JVM logs CDS warnings (classes it leaves out of the archive) to its stdout, which is the
    # tool's own stdout when no log file is given: the archive is an optimisation, not news
    quiet = "-Xlog:cds*=off"
    if archive.is_file():
        return f"-XX:SharedArchiveFile={archive} {quiet}"
    try:
        cache.mkdir(parents=True, exist_ok=True)
    except OSError:
        return ""
    return f"-XX:ArchiveClassesAtExit={archive}.{os.getpid()} {quiet}"


def spark_context(master: str = "local[*]", app: str = "chaos-analyze", log: Path | None = None) -> Any:
    """A SparkContext for ``master`` (the one running in this process, if any); the UI is off and
    the local IP pinned for local masters. No Spark SQL session: ``chaos analyze`` needs none, and
    creating one costs the driver JVM some 2 s of CPU.

    ``log``: when this call starts the JVM, its stdout and stderr (Spark's start-up lines and
    warnings, the Python workers' stderr in local mode) go to this file instead of the terminal.
    A JVM already running in this process is reused as it is (and ``log`` ignored).

    Raises RuntimeError naming the master (and the end of ``log``) when Spark or Java cannot start.
    """
    if master.startswith("local"):
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    try:
        from pyspark import SparkConf, SparkContext
    except ImportError as e:  # pragma: no cover - depends on the install
        raise RuntimeError(
            "pyspark is not installed: pip install pyspark pyarrow pandas (the package's [spark] extra)"
        ) from e
    if SparkContext._active_spark_context is not None:
        return SparkContext._active_spark_context
    if master.startswith("spark://"):
        probe_standalone_master(master)
    conf = SparkConf().setMaster(master).setAppName(app).setAll(list(_CONF))
    cds = _cds_option() if SparkContext._gateway is None else ""
    if cds:
        conf.set("spark.driver.defaultJavaOptions", f"{conf.get('spark.driver.defaultJavaOptions')} {cds}")
    try:
        gateway = None
        if log is not None and SparkContext._gateway is None:
            from pyspark.java_gateway import launch_gateway

            with open(log, "ab") as sink:  # the JVM keeps its own descriptor
                gateway = launch_gateway(conf, popen_kwargs={"stdout": sink, "stderr": sink})
        sc = SparkContext(conf=conf, gateway=gateway)
    except Exception as e:
        tail = ""
        if log is not None and log.is_file():
            lines = [x for x in log.read_text(errors="replace").splitlines() if x.strip()]
            tail = f" (Spark said: {' | '.join(lines[-5:])})" if lines else ""
        raise RuntimeError(f"cannot start Spark with --master {master}: {e}{tail}") from e
    sc.setLogLevel("ERROR")
    return sc


MASTER_PROBE_S = 5.0  # seconds to wait for a standalone master's port to answer


def probe_standalone_master(master: str, timeout: float = MASTER_PROBE_S) -> None:
    """Raise RuntimeError (one line, naming ``master``) unless some master of a standalone URL
    (``spark://host:port[,host:port...]``, Spark's high-availability form) accepts a TCP connection
    within ``timeout`` seconds. Spark itself retries an unreachable master for a minute and then
    fails inside Py4J; this answers at once."""
    hosts = master[len("spark://") :].split(",")
    errors = []
    for hp in hosts:
        host, _, port = hp.rpartition(":")
        if not host or not port.isdigit():
            raise RuntimeError(f"--master {master}: expected spark://HOST:PORT[,HOST:PORT...]")
        try:
            socket.create_connection((host.strip("[]"), int(port)), timeout=timeout).close()
            return
        except OSError as e:
            errors.append(f"{hp}: {e.strerror or e}")
    raise RuntimeError(
        f"cannot reach the Spark master {master} ({'; '.join(errors)}); expected a running standalone "
        "master there (docs/spark-cluster.md), or --master local[*]"
    )


def spark_session(master: str = "local[*]", app: str = "chaos-analyze", log: Path | None = None) -> Any:
    """A SparkSession (Spark SQL) over :func:`spark_context`'s context, with its options and errors."""
    spark_context(master, app, log)
    from pyspark.sql import SparkSession

    return SparkSession.builder.getOrCreate()  # wraps the running context


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


# --- the executors' task: parse once, check, statistics, Parquet ----------------------------------


def _partition_dir(parquet_dir: Path, rid: str) -> Path:
    """``<parquet_dir>/run=<rid>`` with the id escaped as Spark's partition discovery unescapes it."""
    from urllib.parse import quote

    return parquet_dir / f"run={quote(rid, safe='')}"


def _key_text(key: Any) -> str | None:
    if key is None or type(key) is str:
        return key
    if type(key) is int:
        return str(key)  # what json.dumps gives an int, at a tenth of its cost
    return json.dumps(key, default=str)


def _texts(values: list[Any], text: Callable[[Any], str | None]) -> list[str | None]:
    """``[text(v) for v in values]``, each distinct hashable value converted once: a run has a
    few processes and keys over thousands of ops. Values that compare equal across types (``1``,
    ``1.0``, ``true``) would share one entry, so a list holding floats or booleans is converted
    one by one."""
    kinds = set(map(type, values))
    if float in kinds or bool in kinds:
        return [text(v) for v in values]
    seen: dict[Any, str | None] = {}
    out = []
    for v in values:
        try:
            t = seen[v]
        except KeyError:
            t = seen[v] = text(v)
        except TypeError:  # a list or dict key
            t = text(v)
        out.append(t)
    return out


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
            "process": pa.array(_texts([op.process for op in ops], str), pa.string()),
            "f": pa.array([op.f for op in ops], pa.string()),
            "time": pa.array([op.time for op in ops], pa.int64()),
            "node": pa.array([op.node if isinstance(op.node, str) else None for op in ops], pa.string()),
            "error": pa.array([op.error if isinstance(op.error, str) else None for op in ops], pa.string()),
            "key": pa.array(_texts([op.key for op in ops], _key_text), pa.string()),
            "log_index": pa.array(log_index, pa.int64()),
            "raw": pa.array([op.to_json() if op.process == NEMESIS else None for op in ops], pa.string()),
        }
    )
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(table, str(path))


def _nearest_rank(sorted_ns: list[int], q: float) -> float:
    """The nearest-rank ``q`` quantile of sorted ns values in ms rounded to the µs (the rule of
    :func:`chaos.history.perf.quantiles`)."""
    n = len(sorted_ns)
    return round(sorted_ns[min(n - 1, max(0, math.ceil(q * n) - 1))] / 1e6, 3)


def run_stats(ops: list[Any], windows: list[list[Any]]) -> dict[str, list[dict[str, Any]]]:
    """One run's latency and throughput rows from its calls, computed in the worker.

    A call is a client invocation and the next op of its process (``process`` compared as text).
    ``windows``: ``[kind, start, end]`` in ns; a call is under every window with ``start <=
    invocation time < end``, its ``fault`` the kinds sorted and joined with ``+`` (``none`` if
    none). Returns ``{"latency": [{f, n, ok, fail, info, p50, p95, p99, max}], "by_fault":
    [{fault, n, p50, p99, max}], "throughput": [{second, ok}]}`` sorted by f / fault / second;
    latencies in ms, nearest-rank quantiles rounded to the µs as the perf checker's
    (:func:`chaos.history.perf.quantiles`); ``second`` is the ok completion's time // 1 s. These
    are the rows :func:`perf` computes with Spark SQL from the ops.
    """
    from chaos.history.op import FAIL, INFO, INVOKE, NEMESIS, OK

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
    checkers as ``chaos check`` does (:func:`chaos.history.checkers.load_run_test`,
    :func:`chaos.history.checkers.checkers_for`) and runs their composition with the options
    ``chaos check`` gives it (the linearizability search in this worker: the executors are the
    parallelism); computes the run's statistics (:func:`run_stats`); writes the ops to
    ``<parquet_dir>/run=<rid>/part-0.parquet``.

    Row: ``{"valid", "checkers", "test", "order", "model", "windows": [[kind, start, end]],
    "stats", ["longest_unavailable_s"]}``, or ``{"error": "history"|"value"|"missing", "message",
    ...}`` for a malformed history (with ``reason``, ``line``, ``path``), a bad test.json, a missing
    file: what ``chaos check`` raises for them.
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
    spark: Any,
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
    from chaos.history.store import HistoryError

    rows = dict(done or {})
    jobs = [(run_id(d), str(d)) for d in run_dirs]
    target = None if parquet_dir is None else str(parquet_dir)

    def task(batch: list[tuple[str, str]]) -> list[tuple[str, str]]:
        return [(rid, check_run_task(path, rid, time_limit, target)) for rid, path in batch]

    todo = [j for j in jobs if j[0] not in rows]
    if todo:
        sc = getattr(spark, "sparkContext", spark)  # a SparkSession or a SparkContext
        tasks = batches(todo, sc.defaultParallelism)
        rows.update(sc.parallelize(tasks, len(tasks)).flatMap(task).collect())
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


def _import_task_modules(_: object) -> None:
    """Import what a first :func:`check_run_task` would: the checkers' modules, and pyarrow with
    the pandas its first ``pa.array`` imports when pandas is installed (half a second)."""
    import pyarrow as pa
    import pyarrow.parquet  # noqa: F401

    import chaos.history.analysis  # noqa: F401
    import chaos.history.checkers  # noqa: F401
    import chaos.history.faults  # noqa: F401
    import chaos.history.linear  # noqa: F401
    import chaos.history.perf  # noqa: F401
    import chaos.history.store  # noqa: F401

    pa.array([0], pa.int64())


def warm_workers(sc: Any) -> Any:
    """``sc`` after one task per slot has imported what :func:`check_run_task` needs: the first
    Python job starts the executors' Python daemon and forks their workers (about a second), so
    this runs while the driver still checks runs (:func:`check_while_starting`), and the reused
    workers (``spark.python.worker.reuse``) start the real tasks ready."""
    n = sc.defaultParallelism
    sc.parallelize(range(n), n).foreach(_import_task_modules)
    return sc


def _start_warm(master: str, log: Path) -> Any:
    """A new context for ``master`` (:func:`spark_context`) with its workers warm
    (:func:`warm_workers`); stopped again, not left running, when the workers cannot start."""
    sc = spark_context(master, log=log)
    try:
        return warm_workers(sc)
    except BaseException:
        sc.stop()
        raise


def check_while_starting(
    start: Callable[[], Any], run_dirs: list[Path], parquet_dir: Path, time_limit: float | None
) -> tuple[Any, dict[str, str]]:
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
            done[run_id(d)] = check_run_task(str(d), run_id(d), time_limit, str(parquet_dir))
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


def stats_rows(rows: dict[str, dict[str, Any]], verdicts: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """The executors' per-run statistics (:func:`run_stats`) as the tables :func:`perf` returns,
    each row with its ``run``, ordered by run then f / fault / second."""
    out: dict[str, Any] = {"latency": [], "by_fault": [], "throughput": []}
    for rid in sorted(rows):
        stats = rows[rid].get("stats") or {}
        for table in out:
            out[table].extend({"run": rid, **r} for r in stats.get(table) or [])
    out["availability"] = availability_rows(verdicts)
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


def perf(df: Any, verdicts: dict[str, dict[str, Any]] | None = None, windows: Any = None) -> dict[str, Any]:
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


def _calls_sql(df: Any, windows: Any) -> Any:
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
    stop: bool = True,
) -> dict[str, Any]:
    """Run the pipeline over ``run_dirs``; write Parquet, ``summary.json`` and ``index.html`` to
    ``out``; return the summary (with ``timings`` in seconds per stage). ``say`` is told, in one
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
    try:
        t = time.monotonic()
        sc = getattr(spark, "sparkContext", spark) if spark is not None else _active_context()
        done: dict[str, str] = {}
        if sc is None:
            tell(f"starting Spark ({master}; its output to spark.log), checking runs here meanwhile")
            sc, done = check_while_starting(
                lambda: _start_warm(master, staging / "spark.log"),
                dirs,
                staging / "history.parquet",
                time_limit,
            )
            own = True
        timings["spark_start"] = time.monotonic() - t
        t = time.monotonic()
        tell(f"checking {len(dirs) - len(done)} run(s) on the executors (ops to history.parquet)")
        driver = check_on_executors(sc, dirs, staging / "history.parquet", time_limit=time_limit, done=done)
        timings["check_and_write_on_executors"] = time.monotonic() - t
        timings["runs_checked_while_spark_started"] = len(done)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        for d in reversed(created):  # parents made for the staging directory, if left empty
            if d.exists() and not any(d.iterdir()):
                d.rmdir()
        raise
    finally:
        if own and stop:
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


def write_summary(summary: dict[str, Any], out: Path) -> None:
    """``summary.json`` and ``index.html`` of ``summary`` in ``out`` (again after the gate adds a
    DB's simulation campaign rows: :func:`add_runs`)."""
    doc = {k: v for k, v in summary.items() if k != "out"}
    with open(out / "summary.json", "w") as f:
        json.dump(doc, f, indent=1, default=str)
    write_summary_html(doc, out / "index.html")


def add_runs(summary: dict[str, Any], rows: list[dict[str, Any]]) -> None:
    """Add rows that are not run directories (a DB's simulation campaign, ``"simulated": True``)
    to ``summary``: the overall verdict merges theirs (a failing campaign makes the summary
    invalid, an undecided one unknown), and ``summary.json`` / ``index.html`` in ``summary["out"]``
    are written again so that the files say what the gate's table says."""
    from chaos.history.analysis import merge_valid

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


def write_summary_parquet(runs: list[dict[str, Any]], path: Path) -> None:
    """The per-run rows as a Parquet dataset (one file in directory ``path``, written by pyarrow
    in the driver) with a fixed schema; ``valid``, ``failures`` and ``faults`` as JSON text
    (``valid`` is true, false or "unknown")."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    arrow_type = {"string": pa.string(), "json": pa.string(), "long": pa.int64(), "double": pa.float64()}
    conv: dict[str, Callable[[Any], Any]] = {"string": str, "json": json.dumps, "long": int, "double": float}
    columns = {
        n: pa.array(
            [None if (r.get(n) is None and t != "json") else conv[t](r.get(n)) for r in runs], arrow_type[t]
        )
        for n, t in _SUMMARY_COLUMNS
    }
    _remove(path)
    path.mkdir(parents=True)
    pq.write_table(pa.table(columns), str(path / "part-00000.parquet"))


def _active_context() -> Any:
    try:
        from pyspark import SparkContext
    except ImportError:  # pragma: no cover - depends on the install
        return None
    return SparkContext._active_spark_context


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
