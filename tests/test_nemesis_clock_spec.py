"""The clock nemesis's node-side spec rewrite, run locally with sh/awk against a real process
(/proc/<pid>/stat): offsets add up, rate changes are compensated for the process's age, and the
error always lands forward."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace

import pytest

from chaos.nemesis.clock import ClockNemesis, parse_spec, spec_update_script


@pytest.fixture
def proc(tmp_path: Path) -> Iterator[tuple[Path, Path, float]]:
    """(spec file, pidfile, start as seen by /proc in uptime seconds) of a live process."""
    p = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    pidfile = tmp_path / "pid"
    pidfile.write_text(str(p.pid))
    spec = tmp_path / "spec"
    spec.write_text("+0\n")
    hz = int(subprocess.run(["getconf", "CLK_TCK"], capture_output=True, text=True).stdout)
    start = int(Path(f"/proc/{p.pid}/stat").read_text().rsplit(")", 1)[1].split()[19]) / hz
    try:
        yield spec, pidfile, start
    finally:
        p.kill()
        p.wait()


def run(script: str) -> str:
    return subprocess.run(["sh", "-c", script], capture_output=True, text=True, check=True).stdout.strip()


def uptime() -> float:
    return float(Path("/proc/uptime").read_text().split()[0])


def test_bumps_add_and_keep_the_rate(proc: tuple[Path, Path, float]) -> None:
    spec, pidfile, _ = proc
    assert parse_spec(run(spec_update_script(str(spec), str(pidfile), 2.5))) == (2.5, 1.0)
    assert parse_spec(run(spec_update_script(str(spec), str(pidfile), 1.0))) == (3.5, 1.0)
    assert parse_spec(spec.read_text()) == (3.5, 1.0)


def test_rate_change_is_compensated_for_the_process_age(proc: tuple[Path, Path, float]) -> None:
    spec, pidfile, start = proc
    while uptime() - start < 1.0:  # an older process makes the compensation visible
        time.sleep(0.05)
    before = uptime() - start
    offset, rate = parse_spec(run(spec_update_script(str(spec), str(pidfile), 0.0, 3.0)))
    after = uptime() - start
    assert rate == 3.0
    # fake(t) = t + o + (r-1)(t-s) continuous at age e: o = -(3-1) e, plus a forward margin
    assert -2 * after - 0.05 <= offset <= -2 * before + 2 * 0.04 + 0.05
    offset2, rate2 = parse_spec(run(spec_update_script(str(spec), str(pidfile), 0.0, 1.0)))
    assert rate2 == 1.0 and offset2 > offset  # back to 1: the offset grows by (3-1) * age


def test_no_server_means_no_compensation(tmp_path: Path) -> None:
    spec = tmp_path / "spec"
    spec.write_text("+1.5 x2\n")
    out = run(spec_update_script(str(spec), str(tmp_path / "missing.pid"), 0.0, 0.5))
    assert parse_spec(out) == pytest.approx((1.5 + 1.5 * 0.04, 0.5))


def test_values_are_validated() -> None:
    nem = ClockNemesis()
    test = SimpleNamespace(
        db=SimpleNamespace(faketime_file="/var/run/db.faketime", pidfile="/var/run/db.pid")
    )
    with pytest.raises(ValueError, match="forward only"):
        nem.scripts(test, {"mode": "bump", "offsets_ms": {"n1": -5}})
    with pytest.raises(ValueError, match="rate > 0"):
        nem.scripts(test, {"mode": "rate", "rates": {"n1": 0}})
    with pytest.raises(ValueError, match="expected mode"):
        nem.scripts(test, {"mode": "wall"})
    with pytest.raises(ValueError, match="max rate"):
        ClockNemesis(max_rate=1.0)
    with pytest.raises(ValueError, match="faketime spec"):
        parse_spec("soon")


def test_slow_leader_without_a_leader_is_not_applied() -> None:
    import random

    from chaos.nemesis.base import nemesis_op
    from chaos.nemesis.clock import SlowLeaderNemesis

    with pytest.raises(ValueError, match=r"in \(0, 1\)"):
        SlowLeaderNemesis(rate=1.5)
    test = SimpleNamespace(
        db=SimpleNamespace(primaries=lambda control: []),
        control=None,
        nodes=[SimpleNamespace(name=f"n{i}") for i in range(1, 4)],
        rng=random.Random(1),
    )
    done = SlowLeaderNemesis().invoke(test, nemesis_op("start-slow-leader"))
    assert done.value == {"rate": 0.02, "nodes": [], "applied": False, "why": "no leader to slow and isolate"}
