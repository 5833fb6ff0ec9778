"""``chaos heal`` reports from a check after the heal (issue 25 item 5): a process left stopped that
no fault module names (a plug-in DB's second daemon) is found, each leftover is printed once, and a
node is called clean only when that check found nothing."""

from __future__ import annotations

import signal
import subprocess
from collections.abc import Iterator

import pytest

from chaos.nemesis.cli import STOPPED_CHECK, STOPPED_SCRIPT, _report, stopped_processes


@pytest.fixture
def stopped_sleep() -> Iterator[int]:
    p = subprocess.Popen(["sleep", "60"])
    p.send_signal(signal.SIGSTOP)
    try:
        yield p.pid
    finally:
        p.kill()
        p.wait()


def test_the_check_after_the_heal_finds_any_stopped_process(stopped_sleep: int) -> None:
    """The same script a node runs, run here: a SIGSTOPped process is named with its command."""
    import time

    for _ in range(50):  # the stop is asynchronous
        out = subprocess.run(["sh", "-c", STOPPED_SCRIPT], capture_output=True, text=True).stdout
        if f"stopped process {stopped_sleep} (sleep)" in stopped_processes(out):
            break
        time.sleep(0.02)
    assert f"stopped process {stopped_sleep} (sleep)" in stopped_processes(out)
    assert stopped_processes("") == [] and stopped_processes("garbage\n") == []


def test_a_node_with_a_leftover_is_not_called_healed(capsys: pytest.CaptureFixture[str]) -> None:
    status = {
        "n1": ("ok", ["paused process 10", "paused process 10"], []),
        "n2": ("ok", ["paused process 20"], ["stopped process 21 (redis-sentinel)"]),
        "n3": ("ok", [], []),
    }
    assert _report(status, ["process", STOPPED_CHECK]) is False
    lines = capsys.readouterr().out.splitlines()
    assert lines == [
        "n1: healed: paused process 10",
        "n1: clean: nothing found after the heal (checked: process, stopped processes)",
        "n2: healed: paused process 20",
        "n2: still present: stopped process 21 (redis-sentinel)",
        "n2: not clean: 1 left after the heal (checked: process, stopped processes)",
        "n3: clean: nothing found after the heal (checked: process, stopped processes)",
    ]
    assert not any(line.startswith("n2: clean") or line == "n2: healed" for line in lines)
