"""`chaos sim --nemesis bitflip` damages what it says (issue 23): bitflip alone brings the kill that
exposes a member's disk, as the real-cluster bitflip nemesis kills, damages and restarts; before,
a campaign with bitflip alone ran with no fault at all and counted no storage fault."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

from chaos_dledger.sim import with_bitflip_kills


def test_bitflip_alone_brings_kill_and_keeps_an_explicit_kill() -> None:
    assert with_bitflip_kills(["bitflip"]) == ["bitflip", "kill"]
    assert with_bitflip_kills(["kill-leader", "bitflip"]) == ["kill-leader", "bitflip"]
    assert with_bitflip_kills(["partition"]) == ["partition"]


def test_a_bitflip_campaign_damages_and_repairs_every_seed(tmp_path: Path) -> None:
    res = subprocess.run(
        [sys.executable, "-m", "chaos.cli", "sim", "--workload", "log", "--nemesis", "bitflip"]
        + ["--seeds", "3", "--jobs", "1", "--time-limit", "20", "--store", str(tmp_path)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert res.returncode == 0, res.stdout + res.stderr
    coverage = next(line for line in res.stdout.splitlines() if line.startswith("coverage"))
    assert re.search(r"storage faults 3\b", coverage), coverage
    done = re.search(r"repairs (\d+) of (\d+) completed", coverage)
    assert done and int(done.group(2)) > 0, coverage


def test_the_swarm_never_draws_a_bitflip_that_cannot_fire() -> None:
    """bitflip damages a member a kill stopped: every swarm mix with it has a kill too."""
    from chaos_dledger.sim import draw_mix

    mixes = [draw_mix(seed)["nemesis"] for seed in range(3000)]
    with_bitflip = [m for m in mixes if "bitflip" in m]
    assert len(with_bitflip) > 500
    assert all({"kill", "kill-leader"} & set(m) for m in with_bitflip)
