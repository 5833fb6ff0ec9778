"""``chaos sim`` refuses bad numbers and hostile schedules with one 254 line (issue 26, item 3):
``--time-limit nan|inf`` was a failing seed (a bad argument posing as a consensus bug) and
``--rate nan`` ran unthrottled."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest


def sim(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", "import sys; from chaos.cli import main; sys.exit(main())", "sim", *args],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip


@pytest.mark.parametrize(
    "args, named",
    [
        (["--time-limit", "nan"], "--time-limit nan"),
        (["--time-limit", "inf"], "--time-limit inf"),
        (["--time-limit", "-1"], "--time-limit -1.0"),
        (["--rate", "nan"], "--rate nan"),
        (["--rate", "-inf"], "--rate -inf"),
    ],
)
def test_non_finite_numbers_are_bad_arguments(args: list[str], named: str) -> None:
    r = sim("--seeds", "1", *args)
    assert r.returncode == 254, (r.stdout, r.stderr)
    (line,) = r.stderr.strip().splitlines()
    assert line.startswith(f"chaos: {named}: expected a finite number"), line
    assert "seed" not in r.stdout  # nothing ran


@pytest.mark.parametrize(
    "events",
    [
        {"at": 1},  # not a list
        [{"at": 5, "op": "start", "kind": "partition"}, {"at": "x", "op": "start", "kind": "kill"}],
        [{"at": 5, "op": "start", "kind": "no-such-fault"}],
        [{"at": 5, "op": "start", "kind": "kill", "params": [1, 2]}],
        [{"at": -5, "op": "stop", "kind": "kill"}],
        ["start kill"],
    ],
)
def test_a_hostile_schedule_is_one_line_naming_the_event(tmp_path: Path, events: object) -> None:
    f = tmp_path / "schedule.json"
    f.write_text(json.dumps(events))
    r = sim("--seed", "1", "--workload", "register", "--nemesis", "partition,kill", "--schedule", str(f))
    assert r.returncode == 254, (r.stdout, r.stderr)
    (line,) = r.stderr.strip().splitlines()
    assert line.startswith(f"chaos: --schedule {f}: "), line
    if isinstance(events, list):
        assert "event" in line and "Traceback" not in r.stderr
