"""``chaos sim`` takes ``chaos run``'s fault names where they mean the same fault (issue 35 item
10): run's partition shapes are the grudges run's partition nemesis draws, cut on the simulated
links; packet-delay is slow-network, packet-loss and packet-duplicate are network's loss or
duplication alone, lose-unfsynced a crash, restart a clean stop. A run fault the simulator does
not have is refused with one line naming it (254); the campaign's last line is its verdict."""

from __future__ import annotations

import json
import random
import subprocess
import sys
from pathlib import Path

import pytest

from chaos.api import PARTITION_SHAPES, partition_grudge
from chaos_dledger.sim import SimOptions, SimRun, run_seed

MEMBERS = [f"s{i + 1}" for i in range(5)]


def _chaos(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "chaos.cli", *args], capture_output=True, text=True, timeout=600, check=False
    )


def _nemesis_ops(history: bytes) -> list[dict]:
    ops = [json.loads(line) for line in history.splitlines() if line.strip()]
    return [op for op in ops if op.get("process") == "nemesis" and op.get("type") != "invoke"]


@pytest.mark.parametrize("name", sorted(PARTITION_SHAPES))
def test_a_run_partition_name_cuts_the_grudge_run_draws(name: str) -> None:
    shape = PARTITION_SHAPES[name]
    res = run_seed(SimOptions("register", [name], seed=3, time_limit=8.0, nemesis_interval=1.0))
    starts = [op for op in _nemesis_ops(res.history) if op["f"] == "start-partition"]
    assert starts, "the partition never started"
    for op in starts:
        assert op["value"]["shape"] == shape
        grudge = op["value"]["grudge"]
        assert sorted(grudge) == MEMBERS and any(grudge.values())
    # the same shape function as the real nemesis: its grudge for some draw equals the recorded one
    drawn = {
        json.dumps(partition_grudge(shape, MEMBERS, random.Random(i)), sort_keys=True) for i in range(200)
    }
    assert all(json.dumps(op["value"]["grudge"], sort_keys=True) in drawn for op in starts)
    if shape == "majorities-ring":  # every member sees a majority (itself and two others)
        assert all(len(d) == 2 for d in starts[0]["value"]["grudge"].values())
    if shape == "asymmetric":  # one direction only: some member drops nothing
        assert any(d == [] for d in starts[0]["value"]["grudge"].values())


def test_grudge_links_block_one_direction_only() -> None:
    run = SimRun(SimOptions("register", ["partition-asymmetric"], seed=1, time_limit=3.0), Path("/dev/null"))
    grudge = {"s1": [], "s2": [], "s3": ["s1", "s2"], "s4": ["s1", "s2"], "s5": ["s1", "s2"]}
    run._start("partition-asymmetric", {"shape": "asymmetric", "grudge": grudge})
    assert ("s1", "s3") in run.sim.blocked and ("s3", "s1") not in run.sim.blocked
    run._stop_fault("partition")
    assert run.sim.blocked == set()


def test_packet_loss_alone_draws_no_duplication_and_packet_delay_is_slow_network() -> None:
    loss = [SimRun(SimOptions("register", ["packet-loss"], seed=s), Path("/dev/null")) for s in range(12)]
    assert all(r.dup == 0.0 for r in loss) and any(r.loss > 0 for r in loss)
    dup = [SimRun(SimOptions("register", ["packet-duplicate"], seed=s), Path("/dev/null")) for s in range(12)]
    assert all(r.loss == 0.0 for r in dup) and any(r.dup > 0 for r in dup)
    network = [SimRun(SimOptions("register", ["network"], seed=s), Path("/dev/null")) for s in range(12)]
    assert [(r.loss, r.dup) for r in network] != [(0.0, 0.0)] * 12
    delay = SimRun(SimOptions("register", ["packet-delay"], seed=5), Path("/dev/null"))
    slow = SimRun(SimOptions("register", ["slow-network"], seed=5), Path("/dev/null"))
    assert delay.slow > 0 and (delay.slow, delay.late_dup, delay.term_late) == (
        slow.slow,
        slow.late_dup,
        slow.term_late,
    )


@pytest.mark.parametrize(("name", "graceful"), [("lose-unfsynced", False), ("restart", True)])
def test_lose_unfsynced_always_crashes_and_restart_always_stops_cleanly(name: str, graceful: bool) -> None:
    res = run_seed(SimOptions("register", [name], seed=2, time_limit=10.0, nemesis_interval=0.5))
    starts = [ev for ev in res.schedule if ev["op"] == "start" and ev["kind"] == name]
    assert len(starts) >= 2
    assert all(ev["params"]["graceful"] is graceful for ev in starts)
    assert (res.stats.get("graceful_stops", 0) > 0) is graceful


def test_a_run_fault_the_simulator_lacks_and_a_typo_are_one_line_254() -> None:
    p = _chaos("sim", "--nemesis", "kill,truncate", "--seeds", "1")
    assert p.returncode == 254 and len(p.stderr.strip().splitlines()) == 1
    assert "truncate is a chaos run fault the simulator does not have" in p.stderr
    p = _chaos("sim", "--nemesis", "partiton-ring", "--seeds", "1")
    assert p.returncode == 254 and "did you mean partition-ring?" in p.stderr


def test_a_campaign_of_run_names_ends_with_its_verdict() -> None:
    p = _chaos(
        "sim", "--nemesis", "partition-ring,lose-unfsynced,packet-delay", "--seeds", "3", "--time-limit", "4"
    )
    assert p.returncode == 0, p.stderr[-2000:]
    assert p.stdout.strip().splitlines()[-1] == "valid: 3 seeds, 0 not valid"


def test_summaries_name_simulated_faults_as_typed() -> None:
    from chaos.history.analysis import fault_name, fault_names
    from chaos_dledger.sim import test_doc

    test = test_doc(
        SimOptions("register", ["lose-unfsynced", "kill-leader", "partition-ring", "packet-delay"])
    )
    names = fault_names(test)
    assert names == {"kill": ["lose-unfsynced", "kill-leader"], "partition": ["partition-ring"]}
    assert fault_name("kill", names) == "lose-unfsynced+kill-leader"
    assert fault_name("partition", names) == "partition-ring"
