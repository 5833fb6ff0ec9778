"""The run paths users rely on, against the real 5-container Docker cluster (issue 16 item 9, issue 12
item 11): SIGTERM and Ctrl-C during `chaos run` (healed, node logs downloaded, 143 / 130),
`--test-count 2` (the worst status) with `--leave-db-running`, docs/usage.md's "Adding a workload"
example run as written, a run whose client never returns (the watchdog ends it as a crash, history
kept, nodes healed), and `chaos heal` with one unreachable node.

Run under the shared cluster's lock: ``flock /tmp/chaos-docker.lock python3 -m pytest tests/test_run_paths.py``.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from chaos.history.store import RunDir, read_history

pytestmark = [pytest.mark.docker, pytest.mark.slow]

ROOT = Path(__file__).resolve().parent.parent


def _control() -> Any:
    from chaos.cluster.docker import load_nodes
    from chaos.control.ssh import Control

    return Control(load_nodes())


def _partition_rules(control: Any) -> dict[str, int]:
    def count(remote: Any) -> int:
        r = remote.exec_raw("iptables -w -S CHAOS-PARTITION 2>/dev/null || true", sudo=True)
        return sum(1 for line in r.stdout.splitlines() if "-j DROP" in line)

    return control.on_nodes(count)


def _servers_running(control: Any) -> dict[str, bool]:
    from chaos_dledger.db import DLedgerDB

    pidfile = DLedgerDB().pidfile

    def alive(remote: Any) -> bool:
        r = remote.exec_raw(
            f"kill -0 $(cat {pidfile} 2>/dev/null) 2>/dev/null && echo up", sudo=True, check=False
        )
        return r.stdout.strip() == "up"

    return control.on_nodes(alive)


def _wait_until(pred: Any, proc: subprocess.Popen[Any], what: str) -> None:
    """Wait for ``pred()`` (checked every 0.2 s); fail if ``proc`` exits first."""
    done = threading.Event()
    while not pred():
        if proc.poll() is not None:
            pytest.fail(f"chaos run exited {proc.returncode} before {what}")
        done.wait(0.2)


def _default_int_handler() -> None:
    # a shell that starts a job in the background hands it SIGINT ignored; a terminal's Ctrl-C needs
    # the default disposition, which Python turns into KeyboardInterrupt
    signal.signal(signal.SIGINT, signal.SIG_DFL)


@pytest.fixture(scope="module")
def cluster() -> Iterator[Any]:
    from chaos.cluster.providers import provision

    provision({"provider": "docker", "node_count": 5}, lambda s: None)  # up, or reused
    control = _control()
    yield control
    control.close()


@pytest.mark.parametrize("sig, status", [(signal.SIGTERM, 143), (signal.SIGINT, 130)])
def test_signal_during_run_heals_downloads_logs_and_exits(
    cluster: Any, tmp_path: Path, sig: int, status: int
) -> None:
    out = tmp_path / "out.txt"
    with out.open("w") as f:
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "chaos.cli",
                "run",
                "--workload",
                "register",
                "--nemesis",
                "partition-ring",
                "--nemesis-interval",
                "1",
                "--time-limit",
                "120",
                "--store",
                str(tmp_path / "store"),
                "--no-live",
            ],
            stdout=f,
            stderr=subprocess.STDOUT,
            preexec_fn=_default_int_handler,
        )
    try:
        history = tmp_path / "store" / "latest" / "history.jsonl"

        def partitioned_and_reported() -> bool:
            # a partition took effect, and --no-live printed a status line of the main phase
            if not history.is_file() or not re.search(r"/120s main ok \d+", out.read_text()):
                return False
            return any(o.f == "start-partition" and o.type == "info" for o in read_history(history))

        _wait_until(partitioned_and_reported, proc, "a partition and a status line")
        proc.send_signal(sig)
        rc = proc.wait(timeout=600)
    finally:
        if proc.poll() is None:
            proc.kill()
    text = out.read_text()
    assert rc == status, text[-3000:]
    assert "aborted" in text and "Traceback" not in text
    assert _partition_rules(cluster) == {n: 0 for n in cluster.names}  # healed
    run = RunDir(tmp_path / "store" / "latest")
    ops = list(read_history(run.history_path))
    assert any(o.type == "ok" for o in ops)
    test = run.load_test()
    assert "RunAborted" in test.get("crashed", "")
    for n in test["nodes"]:
        assert (run.path / "nodes" / n["name"] / "dledger.log").is_file()


def test_test_count_two_exits_with_the_worst_status_and_leaves_the_db_running(
    cluster: Any, tmp_path: Path
) -> None:
    from chaos.runner.runner import exit_code, worst
    from chaos_dledger.db import DLedgerDB

    store = tmp_path / "store"
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "chaos.cli",
            "run",
            "--test-count",
            "2",
            "--time-limit",
            "5",
            "--recovery-time",
            "1",
            "--leave-db-running",
            "--store",
            str(store),
            "--no-live",
        ],
        capture_output=True,
        text=True,
        timeout=900,
    )
    try:
        runs = sorted(p for p in (store / "register-none").iterdir() if p.name != "latest")
        assert len(runs) == 2, r.stdout[-3000:] + r.stderr[-3000:]
        codes = [exit_code(json.loads((p / "results.json").read_text())["valid"]) for p in runs]
        assert r.returncode == worst(codes), r.stdout[-3000:]
        assert r.stdout.count("test 1 of 2") == 1 and r.stdout.count("test 2 of 2") == 1
        assert _servers_running(cluster) == {n: True for n in cluster.names}
    finally:
        DLedgerDB().teardown(cluster)
    assert _servers_running(cluster) == {n: False for n in cluster.names}


def _readme_workload_file(tmp_path: Path) -> Path:
    """docs/usage.md's "Adding a workload" example, exactly as written, as ``<tmp>/appends.py``."""
    page = (ROOT / "docs" / "usage.md").read_text()
    section = page.split("## Adding a workload", 1)[1]
    code = section.split("```python\n", 1)[1].split("```", 1)[0]
    path = tmp_path / "appends.py"
    path.write_text(code)
    return path


def test_readme_adding_a_workload_example_runs(
    cluster: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from chaos.runner.runner import Runner

    # the page's step: appends.py on the Python path, run as --workload appends:workload
    monkeypatch.syspath_prepend(str(_readme_workload_file(tmp_path).parent))
    monkeypatch.delitem(sys.modules, "appends", raising=False)
    runner = Runner(
        {
            "workload": "appends:workload",
            "time_limit": 5.0,
            "recovery_time": 1.0,
            "store": str(tmp_path / "store"),
        },
        console=None,
        live=False,
    )
    assert runner.run() == 0
    ops = list(read_history(runner.run_dir.history_path))
    assert {o.f for o in ops if o.type == "ok"} == {"add", "read"}
    counts = [o.value for o in ops if o.type == "ok" and o.f == "read"]
    assert all(isinstance(n, int) for n in counts) and max(counts) > 0, counts
    results = json.loads(runner.run_dir.results_path.read_text())
    assert results["valid"] is True and set(results["checkers"]) >= {"stats", "perf"}


class _StuckClient:
    """A register client whose first write on process 0 never returns (until the test ends)."""

    def __init__(self, inner: Any, release: threading.Event) -> None:
        self.inner = inner
        self.release = release

    def open(self, test: Any, node: str) -> _StuckClient:
        return _StuckClient(self.inner.open(test, node), self.release)

    def invoke(self, test: Any, op: Any) -> Any:
        if op.process == 0 and op.f == "write":
            self.release.wait()
        return self.inner.invoke(test, op)

    def close(self, test: Any) -> None:
        self.inner.close(test)


def test_a_client_that_never_returns_ends_the_run_as_a_crash_with_healed_nodes(
    cluster: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from chaos import workloads
    from chaos.runner.runner import EXIT_CRASH, Runner

    release = threading.Event()
    real_get = workloads.get

    def get_stuck(name: str, opts: Any = None) -> Any:
        w = real_get(name, opts)
        w.client = _StuckClient(w.client, release)
        return w

    monkeypatch.setattr(workloads, "get", get_stuck)
    runner = Runner(
        {
            "workload": "register",
            "nemesis": "partition-ring",
            "nemesis_interval": 1.0,
            "time_limit": 600.0,  # the watchdog, not the time limit, ends this run
            "stall_timeout": 5.0,
            "store": str(tmp_path / "store"),
        },
        console=None,
        live=False,
    )
    try:
        assert runner.run() == EXIT_CRASH
    finally:
        release.set()
    test = runner.run_dir.load_test()
    assert "Stalled" in test["crashed"]
    ops = list(read_history(runner.run_dir.history_path))
    stuck = [o for o in ops if o.process == 0 and o.f == "write"]
    assert stuck and stuck[-1].type == "invoke"  # the history is kept, the stuck op left open
    assert _partition_rules(cluster) == {n: 0 for n in cluster.names}
    for n in test["nodes"]:
        assert (runner.run_dir.path / "nodes" / n["name"] / "dledger.log").is_file()


def test_heal_with_one_unreachable_node_heals_the_others_and_exits_255(cluster: Any) -> None:
    nodes = [cluster.node(n) for n in cluster.names[:2]]
    spec = ",".join(f"{n.name}={n.host}:{n.port}" for n in nodes) + ",gone=127.0.0.1:1"
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "chaos.cli",
            "heal",
            "--provider",
            "ssh",
            "--nodes",
            spec,
            "--username",
            nodes[0].user,
            "--ssh-private-key",
            str(nodes[0].key_path),
            "--no-strict-host-key-checking",  # containers as ssh hosts: their keys are in no known_hosts
        ],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ},
    )
    assert r.returncode == 255, r.stdout + r.stderr
    lines = dict(line.split(": ", 1) for line in r.stdout.splitlines())
    # each reachable node's last line: clean, from the check after the heal
    assert all(lines[n.name].startswith("clean: nothing found after the heal") for n in nodes[:2]), r.stdout
    assert lines["gone"].startswith("not healed: NodeUnreachable")
    assert "Traceback" not in r.stderr
