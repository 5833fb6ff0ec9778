"""`chaos run` argument handling (real subprocesses; bad arguments fail before any node is touched)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from chaos.control.runner import exit_code, worst
from chaos.control.test import parse_concurrency, run_name


def chaos(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "chaos.cli", *args], capture_output=True, text=True, timeout=120
    )


def test_help_lists_workloads_and_nemeses_one_line_each() -> None:
    r = chaos("run", "--help")
    assert r.returncode == 0
    out = r.stdout
    for name in ("register", "log", "partition-ring", "kill", "pause", "clock-skew", "none"):
        assert any(line.strip().startswith(name + " ") for line in out.splitlines()), name
    assert "254 bad arguments" in out


@pytest.mark.parametrize(
    "args, needle",
    [
        (["--workload", "nope"], "workload"),
        (["--nemesis", "partition-ring,bogus"], "bogus"),
        (["--concurrency", "xn"], "--concurrency"),
        (["--time-limit", "0"], "--time-limit"),
        (["--read-mode", "dirty"], "read-mode"),
        (["--provider", "ssh"], "--nodes"),
    ],
)
def test_bad_arguments_exit_254_with_a_clear_line(args: list[str], needle: str, tmp_path) -> None:
    r = chaos("run", "--store", str(tmp_path), "--no-live", *args)
    assert r.returncode == 254, r.stdout + r.stderr
    assert needle in (r.stdout + r.stderr)
    assert not any(tmp_path.iterdir())  # nothing was run


def test_concurrency_forms() -> None:
    assert parse_concurrency("2n", 5) == 10
    assert parse_concurrency("7", 5) == 7
    assert parse_concurrency(3, 5) == 3
    with pytest.raises(ValueError, match="concurrency"):
        parse_concurrency("0n", 5)


def test_exit_codes_and_worst() -> None:
    assert [exit_code(v) for v in (True, False, "unknown")] == [0, 1, 2]
    assert worst([0, 2, 1]) == 1
    assert worst([0, 2]) == 2
    assert worst([1, 255]) == 255
    assert (
        run_name({"workload": "register", "nemesis": "partition-ring,kill"}) == "register-partition-ring+kill"
    )
