"""``chaos analyze`` and ``chaos sim`` on a real Spark standalone cluster (issue 38, item 3).

The fixture starts a standalone master and two workers (one core each) from the installed pyspark
(``spark-class org.apache.spark.deploy.master.Master`` / ``...worker.Worker``, the pip wheel has no
``sbin/``), each its own process bound to 127.0.0.1, and stops them (their executors with them) in a
finalizer. The commands run as separate driver processes with ``--master spark://127.0.0.1:PORT``,
as a user runs them (docs/spark-cluster.md), and their verdicts are compared with the local path:
run by run with ``chaos check``'s checkers, seed by seed with the local campaign's (the
rows themselves are compared with the local ones on ``local[2]`` in ``test_sim_spark.py``).
"""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from chaos.history.op import Op
from chaos.history.synth import register_history, write_run

pytestmark = [pytest.mark.spark, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[1]
START_S = 240.0  # the master and both workers registered, on a loaded 2-core machine
COMMAND_S = 600.0
_QUICK_JVM = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _spark_class() -> Path:
    import pyspark

    return Path(pyspark.__file__).parent / "bin" / "spark-class"


def _wait_for(log: Path, pattern: str, procs: list[subprocess.Popen[bytes]], deadline: float) -> None:
    while time.monotonic() < deadline:
        if log.is_file() and re.search(pattern, log.read_text(errors="replace")):
            return
        dead = [p for p in procs if p.poll() is not None]
        if dead:
            raise RuntimeError(f"a Spark daemon exited ({dead[0].args}); see {log}")
        time.sleep(0.5)
    raise TimeoutError(f"no {pattern!r} in {log} within {START_S:.0f} s")


def _stop(procs: list[subprocess.Popen[bytes]]) -> None:
    """SIGTERM each daemon's process group (a worker's executors are in its group), then SIGKILL."""
    for p in procs:
        if p.poll() is None:
            try:
                os.killpg(p.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
    for p in procs:
        try:
            p.wait(timeout=30)
        except subprocess.TimeoutExpired:
            try:
                os.killpg(p.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            p.wait(timeout=30)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """``spark://127.0.0.1:PORT`` of a standalone master with two registered one-core workers."""
    base = tmp_path_factory.mktemp("spark-standalone")
    env = {
        **os.environ,
        "SPARK_LOCAL_IP": "127.0.0.1",
        "SPARK_NO_DAEMONIZE": "1",
        "PYSPARK_PYTHON": sys.executable,  # the executors' Python workers: this interpreter
        "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
        "SPARK_WORKER_OPTS": "-Dspark.worker.cleanup.enabled=false",
        "SPARK_DAEMON_JAVA_OPTS": _QUICK_JVM,  # the daemons only schedule: C1 alone starts them in half the CPU
    }
    env.pop("PYSPARK_SUBMIT_ARGS", None)
    port = _free_port()
    master = f"spark://127.0.0.1:{port}"
    procs: list[subprocess.Popen[bytes]] = []
    spark_class = str(_spark_class())

    def start(name: str, *args: str) -> Path:
        log = base / f"{name}.log"
        with open(log, "wb") as sink:
            procs.append(
                subprocess.Popen(
                    [spark_class, *args],
                    stdout=sink,
                    stderr=subprocess.STDOUT,
                    env=env,
                    start_new_session=True,
                )
            )
        return log

    try:
        deadline = time.monotonic() + START_S
        mlog = start(
            "master", "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1", "--port", str(port),
            "--webui-port", str(_free_port()),
        )  # fmt: skip
        _wait_for(mlog, r"I have been elected leader", procs, deadline)
        wlogs = [
            start(
                f"worker{i}",
                "org.apache.spark.deploy.worker.Worker",
                "--host",
                "127.0.0.1",
                "--webui-port",
                str(_free_port()),
                "--cores",
                "1",
                "--memory",
                "1g",
                "--work-dir",
                str(base / f"work{i}"),
                master,
            )  # fmt: skip
            for i in (1, 2)
        ]
        for wlog in wlogs:
            _wait_for(wlog, r"Successfully registered with master", procs, deadline)
        yield master
    finally:
        _stop(procs)


def _chaos(*args: object, timeout: float = COMMAND_S) -> subprocess.CompletedProcess[str]:
    env = {
        **os.environ,
        "CHAOS_SPARK_CDS": "0",
        "SPARK_LOCAL_IP": "127.0.0.1",
        # the executors run short Python tasks: their JVMs too on C1 alone (the driver's is, by _CONF)
        "PYSPARK_SUBMIT_ARGS": f'--conf "spark.executor.defaultJavaOptions={_QUICK_JVM}" pyspark-shell',
    }
    return subprocess.run(
        [sys.executable, "-m", "chaos.cli", *map(str, args)],
        capture_output=True,
        text=True,
        env=env,
        timeout=timeout,
        check=False,
    )


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    """Three register runs, two with linearizability violations, one with a partition window."""
    store = tmp_path_factory.mktemp("store")
    dirs = []
    for i, violations in enumerate([2, 1, 0]):
        ops, _ = register_history(1500, keys=8, processes=5, seed=300 + i, violations=violations)
        if i == 1:
            mid = ops[len(ops) // 2].time
            for t, f in ((mid, "start-partition"), (mid + 5_000_000, "stop-partition")):
                ops.append(Op(type="info", process="nemesis", f=f, value={"grudge": {}}, time=t))
                ops.append(Op(type="info", process="nemesis", f=f, value="done", time=t + 1))
            ops.sort(key=lambda op: op.time)
            for n, op in enumerate(ops):
                op.index = n
        dirs.append(
            write_run(store, "register-synth", f"2026020{i}T000000.000", ops, {"nemesis": "partition"})
        )
    return dirs


def test_analyze_on_a_standalone_cluster_gives_chaos_checks_verdicts(
    cluster: str, runs: list[Path], tmp_path: Path
) -> None:
    from chaos.history.checkers.registry import check_run
    from chaos.history.spark.tasks import run_id
    from chaos.history.store import find_run

    out = tmp_path / "analysis"
    res = _chaos("analyze", "--master", cluster, "--out", out, *runs)
    assert res.returncode == 1, res.stdout + res.stderr  # two runs are invalid
    summary = json.loads((out / "summary.json").read_text())
    assert summary["master"] == cluster
    on_cluster = {r["run"]: r["valid"] for r in summary["runs"]}
    local = {run_id(d): check_run(find_run(d))["valid"] for d in runs}
    assert on_cluster == local, (on_cluster, local)
    assert sorted(on_cluster.values(), key=str) == [False, False, True]
    # the executors wrote every run's ops
    assert len(list((out / "history.parquet").glob("run=*/part-0.parquet"))) == len(runs)


def test_sim_command_on_a_standalone_cluster_prints_and_exits_as_the_local_run(
    cluster: str, tmp_path: Path
) -> None:
    """A known-bad configuration (unsafe reads) fails some seeds: the same failing-seed lines,
    summary and exit status on the cluster as with the local pool; the command prints every seed
    that is not valid and counts the rest, so equal lines are equal verdicts seed by seed."""
    bad = ["sim", "--workload", "register", "--read-mode", "unsafe", "--nemesis", "partition,pause",
           "--time-limit", "3", "--seeds", "12", "--store", tmp_path]  # fmt: skip
    local = _chaos(*bad, "--jobs", "1")
    on_cluster = _chaos(*bad, "--master", cluster)
    assert local.returncode == 1, local.stdout + local.stderr
    assert on_cluster.returncode == 1, on_cluster.stdout + on_cluster.stderr[-3000:]

    def lines(out: str) -> list[str]:
        return [ln for ln in out.splitlines() if "seeds/s" not in ln]

    assert lines(on_cluster.stdout) == lines(local.stdout)
    failing = re.findall(r"^seed (\d+): INVALID", on_cluster.stdout, re.M)
    assert failing, on_cluster.stdout


def test_a_web_ui_given_as_master_is_one_line_at_once(tmp_path: Path) -> None:
    """A port that accepts TCP but answers HTTP (a master's web UI on 8080, a proxy) passed the
    probe, and Spark then retried it for 66 s before a Py4J trace (255). A real HTTP server on a
    free port: one line naming the port's HTTP answer and 7077, exit 254, within seconds."""
    import http.server
    import threading

    from chaos.history.spark.session import probe_standalone_master

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), http.server.SimpleHTTPRequestHandler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    port = server.server_address[1]
    try:
        with pytest.raises(RuntimeError, match=rf"127.0.0.1:{port} answers HTTP .*usually 7077"):
            probe_standalone_master(f"spark://127.0.0.1:{port}")
        t0 = time.monotonic()
        res = _chaos(
            "sim", "--master", f"spark://127.0.0.1:{port}", "--seeds", "2", "--store", tmp_path, timeout=120
        )
        assert res.returncode == 254 and "answers HTTP" in res.stderr, res.stdout + res.stderr
        assert len([ln for ln in res.stderr.splitlines() if ln.strip()]) == 1, res.stderr
        assert time.monotonic() - t0 < 60
    finally:
        server.shutdown()


def test_an_unreachable_master_is_one_line_at_once(tmp_path: Path, runs: list[Path]) -> None:
    """Issue 36 item 7: nothing listens on port 1; both commands say so in one line, exit 254,
    within seconds (Spark alone retries for a minute, then fails inside Py4J)."""
    for args in (
        ["sim", "--master", "spark://127.0.0.1:1", "--seeds", "4", "--store", tmp_path],
        ["analyze", "--master", "spark://127.0.0.1:1", "--out", tmp_path / "a", runs[0]],
    ):
        t0 = time.monotonic()
        res = _chaos(*args, timeout=120)
        took = time.monotonic() - t0
        assert res.returncode == 254, res.stdout + res.stderr
        err = [ln for ln in res.stderr.splitlines() if ln.strip()]
        assert len(err) == 1 and "cannot reach the Spark master spark://127.0.0.1:1" in err[0], res.stderr
        assert "Traceback" not in res.stderr and "py4j" not in res.stderr.lower()
        assert took < 60, took
        assert not (tmp_path / "a").exists()
