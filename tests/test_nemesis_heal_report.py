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


def test_foreign_drop_rules_and_shaping_qdiscs_are_found_the_tools_own_are_not() -> None:
    """Issue 35 item 2: what ``chaos heal`` reads of a node's filter and qdiscs besides the fault
    modules' own: DROP/REJECT rules outside ``CHAOS-*`` chains, root qdiscs a kernel does not
    install, ingress qdiscs; never ACCEPT rules, the tool's chains or handles, default qdiscs."""
    from chaos.nemesis.netstate import _foreign, _lines

    listing = "\n".join(
        [
            "rule iptables -A INPUT -s 10.89.5.11/32 -j DROP",
            "rule ip6tables -A OUTPUT -d fd00::3/128 -p tcp -j REJECT --reject-with tcp-reset",
            "qdisc eth0 qdisc netem 8001: root refcnt 2 limit 1000 delay 50ms",
            "qdisc eth0 qdisc ingress ffff: parent ffff:fff1 ----------------",
            "qdisc eth1 qdisc htb c4a5: root refcnt 2 r2q 10 default 0x1",
            "qdisc eth1 qdisc netem c4a6: parent c4a5:2 limit 1000 loss 30%",
            "qdisc lo qdisc noqueue 0: root refcnt 2",
            "qdisc eth2 qdisc fq_codel 0: root refcnt 2 limit 10240p",
            "qdisc eth2 qdisc tbf 10: parent 1:1 rate 1Mbit",
        ]
    )
    rules, qdiscs = _foreign(listing)
    assert rules == [
        ("iptables", "-A INPUT -s 10.89.5.11/32 -j DROP"),
        ("ip6tables", "-A OUTPUT -d fd00::3/128 -p tcp -j REJECT --reject-with tcp-reset"),
    ]
    assert [(d, w) for d, w, _ in qdiscs] == [("eth0", "root"), ("eth0", "ingress")]
    assert _lines(rules, qdiscs)[0] == "iptables rule not created by chaos: -A INPUT -s 10.89.5.11/32 -j DROP"
    assert _lines(rules, qdiscs)[2] == (
        "qdisc not created by chaos on eth0: netem 8001: root refcnt 2 limit 1000 delay 50ms"
    )


def test_clean_names_what_was_checked_and_what_was_not(capsys: pytest.CaptureFixture[str]) -> None:
    """Never "clean" about what was not looked at: a module without a residue check is named."""
    assert _report({"n1": ("ok", [], [])}, ["partition", "network"], ["plugin:THING"])
    out = capsys.readouterr().out
    assert out == (
        "n1: clean: nothing found after the heal (checked: partition, network; not checked: "
        "plugin:THING (they cannot tell their leftovers))\n"
    )
