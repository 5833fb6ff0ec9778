"""Near-miss names get a suggestion on their one 254 line (issue 35 item 10)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from chaos.errors import did_you_mean


def test_did_you_mean_suggests_close_names_only() -> None:
    assert did_you_mean(["clock-skwe"], ["kill", "clock-skew"]) == " (did you mean clock-skew?)"
    assert did_you_mean(["zzz"], ["kill", "clock-skew"]) == ""


@pytest.mark.parametrize(
    "args, hint",
    [
        (["run", "--workload", "register", "--nemesis", "clock-skwe"], "(did you mean clock-skew?)"),
        (["run", "--workload", "regster"], "(did you mean register?)"),
        (["sim", "--nemesis", "partiton", "--seeds", "1"], "(did you mean partition?)"),
    ],
)
def test_cli_lines_name_the_near_miss(args: list[str], hint: str) -> None:
    r = subprocess.run(
        [sys.executable, "-m", "chaos.cli", *args], capture_output=True, text=True, timeout=120
    )
    assert r.returncode == 254, r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and hint in lines[0], r.stderr
