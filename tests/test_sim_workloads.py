"""``chaos sim --workload bank|counter|set|long-fork``: Jepsen's workloads through the simulated
members' drivers (the KV's init, add and sadd micro-ops), their ops shaped as the real clients
record them, checked valid on the correct server; the swarm draws them."""

from __future__ import annotations

import json

import pytest

from chaos_dledger.sim import KV_WORKLOADS, SIM_CHECKERS, SimOptions, draw_mix, run_seed


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


def test_the_swarm_draws_the_kv_workloads_with_read_modes() -> None:
    mixes = [draw_mix(s) for s in range(200)]
    for w in KV_WORKLOADS:
        assert {m["read_mode"] for m in mixes if m["workload"] == w} == {"raft-log", "read-index", "lease"}
