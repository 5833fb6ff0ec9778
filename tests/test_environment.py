"""Environment failures are not verdicts on the system (issue 26, item 11).

A node whose disk fills with no fault injected stops the server safely; the run must then be
``unknown`` with the cause quoted (it tells nothing of the system's liveness), not INVALID. When
the run's nemesis injects that condition on purpose, the liveness rule applies as usual.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest

from chaos.history.checkers.liveness import LivenessChecker, environment_causes

ROOT = Path(__file__).resolve().parents[1]

FAILED = {
    "recovered": False,
    "bound_s": 10.0,
    "problems": ["n3 does not answer: connection refused"],
    "environment": {
        "n3": [{"kind": "disk-full", "evidence": "/var/lib/dledger is full (100% used, 0 KiB free)"}]
    },
}


def test_a_failed_recovery_with_a_full_disk_is_unknown_unless_the_nemesis_filled_it() -> None:
    r = LivenessChecker().check({"recovery": FAILED, "nemesis": "partition-ring,kill"}, Path("-"), {})
    assert r["valid"] == "unknown" and "n3: /var/lib/dledger is full" in r["cause"]
    assert environment_causes(FAILED, "disk-full") == []
    r = LivenessChecker().check({"recovery": FAILED, "nemesis": "plug:disk-full"}, Path("-"), {})
    assert r["valid"] is False  # injected on purpose: the liveness rule applies
    no_env = {k: v for k, v in FAILED.items() if k != "environment"}
    assert LivenessChecker().check({"recovery": no_env, "nemesis": "none"}, Path("-"), {})["valid"] is False


PLUG = '''
"""DLedger whose data directory on n3 is a small tmpfs (a disk that can fill)."""
from chaos_dledger.db import DLedgerDB


class SmallDiskDB(DLedgerDB):
    name = "small-disk"

    def _setup_node(self, remote, pyz):
        if remote.node.name == "n3":
            remote.exec_raw(
                f"umount {self.data_dir} 2>/dev/null; mkdir -p {self.data_dir} && "
                f"mount -t tmpfs -o size=96m tmpfs {self.data_dir}",
                sudo=True,
            )
        super()._setup_node(remote, pyz)

    def teardown(self, control):
        super().teardown(control)
        control.remote("n3").exec_raw(f"umount {self.data_dir} 2>/dev/null; true", sudo=True)
'''


@pytest.mark.docker
@pytest.mark.slow
def test_a_disk_that_fills_on_its_own_makes_the_run_unknown_not_invalid(tmp_path: Path) -> None:
    from chaos.cluster.docker import DockerProvider
    from chaos.control.ssh import Control

    (tmp_path / "smalldisk.py").write_text(textwrap.dedent(PLUG))
    provider = DockerProvider(3, name="envfull")
    nodes = provider.up()
    control = Control(nodes)
    try:
        store = tmp_path / "store"
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), str(ROOT)])}

        def fill_n3_later() -> None:  # the environment, not a nemesis: nothing in the history
            deadline = time.monotonic() + 300
            while not list(store.glob("*/*/history.jsonl")) and time.monotonic() < deadline:
                time.sleep(0.5)  # the generator phase has begun (setup wipes the data dir)
            time.sleep(3)
            control.remote("n3").exec_raw(
                "dd if=/dev/zero of=/var/lib/dledger/filler bs=1M count=200 2>/dev/null; sync; true",
                sudo=True,
                timeout=60,
            )

        filler = threading.Thread(target=fill_n3_later, daemon=True)
        filler.start()
        r = subprocess.run(
            [sys.executable, "-c", "import sys; from chaos.cli import main; sys.exit(main())", "run",
             "--cluster-name", "envfull", "--db", "smalldisk:SmallDiskDB", "--workload", "log",
             "--db-opt", "recovery-timeout=10", "--rate", "200", "--time-limit", "20",
             "--store", str(store), "--no-live"],
            cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600,
        )  # fmt: skip
        filler.join(60)
        (run,) = {p.parent.resolve() for p in store.glob("*/*/results.json")}
        results = json.loads((run / "results.json").read_text())
        liveness = results["checkers"]["liveness"]
        assert r.returncode == 2, (r.returncode, liveness, r.stdout[-3000:])
        assert liveness["valid"] == "unknown" and "n3:" in liveness["cause"], liveness
        assert "full" in liveness["cause"] or "No space left" in liveness["cause"], liveness
    finally:
        control.close()
        provider.down()
