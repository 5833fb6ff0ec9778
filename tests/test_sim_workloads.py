"""``chaos sim --workload bank|counter|set|long-fork``: Jepsen's workloads through the simulated
members' drivers (the KV's init, add and sadd micro-ops), their ops shaped as the real clients
record them, checked valid on the correct server; the swarm draws them; the catalogue's class of each is caught
by its checker (bench/sim_power.py measures how soon)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from chaos_dledger.mutants import apply_mutant, load_mutants
from chaos_dledger.sim import KV_WORKLOADS, SIM_CHECKERS, SimOptions, draw_mix, run_seed

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("workload", KV_WORKLOADS)
def test_the_correct_server_is_valid_under_each_workload(workload: str) -> None:
    for seed, mode in ((0, "raft-log"), (1, "read-index")):
        opts = SimOptions(
            workload=workload, nemesis=["partition", "kill"], seed=seed, time_limit=5, read_mode=mode
        )
        r = run_seed(opts)
        (name,) = SIM_CHECKERS[workload]
        assert r.valid is True, r.results["checkers"][name]
        ops = [json.loads(line) for line in r.history.splitlines()]
        oks = [o for o in ops if o["type"] == "ok"]
        if workload == "long-fork":
            assert r.results["checkers"][name]["read_count"] > 10
            assert all(o["f"] == "txn" for o in ops if o["process"] != "nemesis")
            continue
        reads = [o["value"] for o in oks if o["f"] == "read"]
        assert len(reads) > 10
        if workload == "bank":  # {"<account>": balance} summing to Jepsen's total
            assert all(sorted(v) == [str(a) for a in range(8)] and sum(v.values()) == 100 for v in reads)
            transfers = [o for o in ops if o["f"] == "transfer" and o["type"] != "invoke"]
            assert {"from", "to", "amount"} <= set(transfers[0]["value"])
            assert any(o["type"] == "ok" for o in transfers)
        elif workload == "counter":
            assert all(isinstance(v, int) for v in reads) and reads[-1] > 0
        else:
            assert all(isinstance(v, list) for v in reads) and reads[-1]
            assert len([o for o in ops if o["f"] == "read" and o["type"] == "ok"][-5:]) == 5


def test_an_overdrawing_transfer_aborts_and_fails() -> None:
    r = run_seed(SimOptions(workload="bank", nemesis=["none"], seed=3, time_limit=5, rate=100))
    ops = [json.loads(line) for line in r.history.splitlines()]
    aborted = [
        o
        for o in ops
        if o["f"] == "transfer" and o["type"] == "fail" and o.get("error") == "UNEXPECTED_ARGUMENT"
    ]
    assert aborted and r.valid is True
    # served, the balance did not cover it: a no match, as the real client records it, not an outage
    assert all(o.get("compare_failed") is True for o in aborted)


def test_the_swarm_draws_the_kv_workloads_with_read_modes() -> None:
    mixes = [draw_mix(s) for s in range(200)]
    for w in KV_WORKLOADS:
        assert {m["read_mode"] for m in mixes if m["workload"] == w} == {"raft-log", "read-index", "lease"}


# class -> (workload, nemesis, a seed that bench/sim_power.py's configuration found failing, the checker)
CAUGHT = {
    "transfer-applied-half-way": ("bank", "partition,kill", 0, "bank"),
    "add-lost-on-leader-change": ("set", "partition,kill,partition-leader", 0, "set-full-linearizable"),
    "increment-applied-twice": ("counter", "kill,leader-transfer", 12, "counter"),
}


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(CAUGHT))
def test_each_workloads_mutant_is_caught_by_its_checker(name: str, tmp_path: Path) -> None:
    workload, nemesis, seed, checker = CAUGHT[name]
    mutant = next(m for m in load_mutants() if m.name == name)
    assert mutant.sim is not None and mutant.sim.workload == workload
    apply_mutant(mutant, tmp_path / "m")
    code = (
        "from chaos_dledger.sim import SimOptions, run_seed; import dledger, json; "
        f"r = run_seed(SimOptions({workload!r}, {nemesis.split(',')!r}, {seed}, 5.0, 10, 50.0, 1.25)); "
        f"print(json.dumps([dledger.__file__, r.valid, r.results['checkers'][{checker!r}]['valid']]))"
    )
    env = {**os.environ, "PYTHONPATH": f"{tmp_path / 'm'}{os.pathsep}{ROOT}"}
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, cwd=tmp_path, capture_output=True, text=True, timeout=600
    )
    where, valid, checked = json.loads(out.stdout.strip().splitlines()[-1])
    assert where.startswith(str(tmp_path / "m"))  # the patched copy ran
    assert valid is False and checked is False, out.stderr[-2000:]
