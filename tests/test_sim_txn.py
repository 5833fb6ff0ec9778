"""``chaos sim --workload list-append``: transactions through the simulated members' drivers, checked
by Elle; the correct server is strict-serializable, and the catalogue's txn mutant is caught."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from chaos_dledger.mutants import apply_mutant, load_mutants
from chaos_dledger.sim import SimOptions, run_seed

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("read_mode", ["raft-log", "read-index"])
def test_list_append_in_the_simulator_is_strict_serializable(read_mode: str) -> None:
    for seed in range(2):
        opts = SimOptions(
            workload="list-append",
            nemesis=["partition", "kill"],
            seed=seed,
            time_limit=10,
            read_mode=read_mode,
        )
        r = run_seed(opts)
        elle = r.results["checkers"]["elle"]
        assert r.valid is True, elle["summary"]
        assert elle["consistency_model"] == "strict-serializable" and elle["txns"] > 200
        reads = [json.loads(line) for line in r.history.splitlines()]
        assert any(
            op["type"] == "ok" and any(m[0] == "r" and m[2] and len(m[2]) > 1 for m in op["value"])
            for op in reads
            if op.get("f") == "txn"
        )


@pytest.mark.slow
def test_the_txn_mutant_is_caught_by_the_simulator(tmp_path: Path) -> None:
    mutant = next(m for m in load_mutants() if m.name == "txn-reads-before-commit")
    assert mutant.sim is not None and mutant.sim.workload == "list-append"
    apply_mutant(mutant, tmp_path / "m")
    code = (
        "from chaos_dledger.sim import SimOptions, run_seed; import dledger, json; "
        "r = run_seed(SimOptions(workload='list-append', nemesis=['partition', 'kill'], seed=0, time_limit=10)); "
        "print(json.dumps([dledger.__file__, r.valid, r.results['checkers']['elle']['anomaly_types']]))"
    )
    env = {**os.environ, "PYTHONPATH": f"{tmp_path / 'm'}{os.pathsep}{ROOT}"}
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, cwd=tmp_path, capture_output=True, text=True, timeout=300
    )
    where, valid, types = json.loads(out.stdout.strip().splitlines()[-1])
    assert where.startswith(str(tmp_path / "m"))  # the patched copy ran
    assert valid is False and types, out.stderr[-2000:]


def test_the_swarm_draws_list_append_with_a_read_mode() -> None:
    from chaos_dledger.sim import WORKLOADS, draw_mix

    mixes = [draw_mix(s) for s in range(60)]
    assert {m["workload"] for m in mixes} == set(WORKLOADS)
    modes = {m["read_mode"] for m in mixes if m["workload"] == "list-append"}
    assert modes == {"raft-log", "read-index", "lease"}


def test_a_seed_whose_faults_let_nothing_commit_still_leaves_transactions_to_check() -> None:
    # figure8 and leader pauses for 3 s: no transaction of the run commits; the fault-free end
    # (one transaction per client, then a read of every active key) gives Elle its dependencies
    opts = SimOptions(
        "list-append",
        ["pause", "pause-leader", "figure8", "slow-network", "storage"],
        seed=9,
        time_limit=3.0,
        clients=10,
        rate=100.0,
        nemesis_interval=0.75,
    )
    r = run_seed(opts)
    assert r.valid is True, r.results["checkers"]["elle"]["summary"]
    ops = [json.loads(line) for line in r.history.splitlines()]
    end = int(opts.time_limit * 1e9)
    assert not any(op["type"] == "ok" and op["time"] < end for op in ops if op.get("f") == "txn")
    last = [op for op in ops if op.get("f") == "txn" and op["type"] == "ok"][-1]
    assert all(m[0] == "r" for m in last["value"]) and any(m[2] for m in last["value"])
