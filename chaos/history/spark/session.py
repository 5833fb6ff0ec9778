"""Starting Spark for ``chaos analyze``: a SparkContext (or a SparkSession over it) for a master,
with the UI off, the workers' daemon (:mod:`chaos.history.spark.daemon`) and a class-data-sharing
archive for the driver JVM (issue 27); a standalone master is probed first so an unreachable one
fails in one line. pyspark is imported on first use (the ``[spark]`` extra).
"""

from __future__ import annotations

import os
import shutil
import socket
import time
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # pyspark is the [spark] extra: imported where a function runs
    from pyspark import SparkContext

_CONF = (
    ("spark.ui.enabled", "false"),
    ("spark.ui.showConsoleProgress", "false"),
    ("spark.sql.shuffle.partitions", "8"),
    ("spark.sql.session.timeZone", "UTC"),
    ("spark.python.worker.reuse", "true"),
    # the workers' daemon imports the installed pyspark, compiled, not Spark's zip of its source
    ("spark.python.daemon.module", "chaos.history.spark.daemon"),
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


def spark_context(
    master: str = "local[*]", app: str = "chaos-analyze", log: Path | None = None
) -> SparkContext:
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
            conn = socket.create_connection((host.strip("[]"), int(port)), timeout=timeout)
        except OSError as e:
            errors.append(f"{hp}: {e.strerror or e}")
            continue
        with conn:
            if _answers_http(conn):
                errors.append(
                    f"{hp} answers HTTP (a web UI or a proxy?), not a master's RPC port (usually 7077)"
                )
                continue
        return
    raise RuntimeError(
        f"cannot reach the Spark master {master} ({'; '.join(errors)}); expected a running standalone "
        "master there (docs/spark-cluster.md), or --master local[*]"
    )


def _answers_http(conn: socket.socket, timeout: float = 1.0) -> bool:
    """Whether the peer answers an HTTP request: a standalone master's web UI (8080) or a proxy
    accepts TCP too, and Spark would then retry it for a minute before failing inside Py4J. The
    master's RPC port never answers with an HTTP status line (it reads a length-prefixed frame)."""
    try:
        conn.settimeout(timeout)
        conn.sendall(b"GET / HTTP/1.0\r\nHost: spark-master\r\n\r\n")
        return conn.recv(5) == b"HTTP/"
    except OSError:
        return False


def spark_session(master: str = "local[*]", app: str = "chaos-analyze", log: Path | None = None) -> object:
    """A SparkSession (Spark SQL) over :func:`spark_context`'s context, with its options and errors."""
    spark_context(master, app, log)
    from pyspark.sql import SparkSession

    return SparkSession.builder.getOrCreate()  # wraps the running context


def _active_context() -> SparkContext | None:
    try:
        from pyspark import SparkContext
    except ImportError:  # pragma: no cover - depends on the install
        return None
    return SparkContext._active_spark_context
