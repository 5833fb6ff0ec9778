"""A DB offering only the required members and ``clients`` runs ``chaos run`` to a verdict.

Such a DB has no process, primary, leadership, log-files or recovery capability: the runner must
not observe leadership, wait for a leader or a recovery, or scan logs it cannot have (issue 22: the
observer was stopped unconditionally, so such a run crashed with 255 and was never checked).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

MINIMAL = '''
"""A register kept in the control process: linearizable by construction (one lock)."""
import threading

from chaos.control.client import NotSent


class Registers:
    def __init__(self, lock, values):
        self.lock, self.values, self.closed = lock, values, False

    def read(self, key):
        with self.lock:
            return self.values.get(key)

    def write(self, key, value):
        with self.lock:
            self.values[key] = value

    def cas(self, key, expected, new):
        with self.lock:
            if self.values.get(key) != expected:
                return False
            self.values[key] = new
            return True

    def close(self):
        self.closed = True


class MinimalDB:
    """Only name, setup, teardown, describe and the clients capability."""

    name = "minimal"
    client_protocols = ("register",)

    def __init__(self):
        self.lock, self.values = threading.Lock(), {}

    def setup(self, control):
        pass

    def teardown(self, control):
        pass

    def describe(self):
        return "in-process registers [/v1] [bold]"  # printed as written, never read as markup

    def open_client(self, protocol, test, node, process):
        if protocol != "register":
            raise NotSent(f"no {protocol} client")
        return Registers(self.lock, self.values)
'''


@pytest.mark.docker
@pytest.mark.slow
def test_a_db_with_only_clients_runs_to_a_verdict(tmp_path: Path) -> None:
    from chaos.cluster.docker import DockerProvider

    (tmp_path / "minimal.py").write_text(textwrap.dedent(MINIMAL))
    provider = DockerProvider(3, name="mindb")
    provider.up()
    try:
        store = tmp_path / "store"
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), str(ROOT)])}
        r = subprocess.run(
            [sys.executable, "-c", "import sys; from chaos.cli import main; sys.exit(main())", "run",
             "--cluster-name", "mindb", "--db", "minimal:MinimalDB", "--workload", "register",
             "--time-limit", "8", "--store", str(store), "--no-live"],
            cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600,
        )  # fmt: skip
        assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
        assert "minimal setup on 3 nodes (in-process registers [/v1] [bold])" in r.stdout, r.stdout[-3000:]
        (test_json,) = {p.resolve() for p in store.glob("*/*/test.json")}
        test = json.loads(test_json.read_text())
        assert test["db_capabilities"] == ["clients"]
        assert "liveness" not in test["checkers"] and "server-logs" not in test["checkers"]
        assert not (test_json.parent / "leadership.jsonl").exists()
        results = json.loads((test_json.parent / "results.json").read_text())
        assert results["valid"] is True and results["checkers"]["linear"]["valid"] is True
        assert results["checkers"]["stats"]["ok"] > 0
    finally:
        provider.down()
