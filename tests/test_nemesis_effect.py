"""Did the fault take effect? Against real DLedger servers on the local docker cluster:

- a leadership transfer to a node that is down, and a pause through a DB whose pidfile names no
  process (a DB lacking what the nemesis needs), complete with ``applied: false`` and a reason; a run
  whose requested kinds all failed is ``unknown`` for the faults checker, and the terminal summary
  says how many faults took effect, not how many were requested;
- the leadership observer records a leader change when the leader is killed, and the per-window
  analysis attributes it to the kill window.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest
from test_nemesis_support import dledger_test, make_test

from chaos.control.interpreter import Clock
from chaos.history.checkers.faults import leadership_windows, overall_leadership
from chaos.history.checkers.registry import check_run
from chaos.history.leadership import LEADERSHIP_FILE, read_leadership
from chaos.history.op import Op
from chaos.history.store import RunDir
from chaos.nemesis.base import Compose, nemesis_op
from chaos.nemesis.leadership import LeaderTransferNemesis
from chaos.nemesis.process import KillNemesis, PauseNemesis
from chaos.runner.observer import LeadershipObserver

pytestmark = [pytest.mark.docker, pytest.mark.slow]


@pytest.fixture(scope="module")
def env() -> Iterator[Any]:
    """The shared local cluster (``chaos-n1..n5``; reused, never removed) with DLedger set up."""
    from chaos.cluster.docker import DockerProvider
    from chaos.control.ssh import Control

    nodes = DockerProvider(5).up()
    control = Control(nodes)
    try:
        with dledger_test(nodes, control) as test:
            yield test
    finally:
        control.close()


def wait_for(pred: Any, what: str, limit: float = 60.0) -> None:
    """Poll ``pred`` until true; fail naming ``what`` if it never holds (a hang guard, not a speed bound)."""
    deadline = time.monotonic() + limit
    while not pred():
        assert time.monotonic() < deadline, f"never happened: {what}"
        time.sleep(0.2)


def settle(test: Any) -> str:
    for n in test.nodes:
        test.db.start(test.control.remote(n.name))
    return str(test.db.await_leader(test.control, 30))


class _History:
    """Ops as the interpreter records them: index and time assigned, written as they complete."""

    def __init__(self, run: RunDir, clock: Clock) -> None:
        self.writer = run.writer()
        self.clock = clock

    def add(self, op: Op) -> Op:
        op.time = self.clock()
        self.writer.write(op)
        return op

    def nemesis(self, nem: Any, test: Any, f: str, value: Any = None) -> Op:
        self.add(nemesis_op(f, value))
        return self.add(nem.invoke(test, nemesis_op(f, value)))

    def client_op(self, node: str) -> None:
        self.add(Op(type="invoke", process=0, f="read", value=None, key=0, node=node))
        self.add(Op(type="ok", process=0, f="read", value=None, key=0, node=node))


class _NoPidfileDB:
    """The real DLedgerDB, but its pidfile is one the server never writes."""

    def __init__(self, db: Any) -> None:
        self._db = db
        self.pidfile = "/var/run/chaos-test-no-such.pid"

    def __getattr__(self, name: str) -> Any:
        return getattr(self._db, name)

    def pause(self, remote: Any) -> None:
        type(self._db)._signal(self, remote, "STOP")  # the DB's own code, with this pidfile

    def resume(self, remote: Any) -> None:
        type(self._db).resume(self, remote)


def test_faults_that_cannot_take_effect_are_recorded_and_not_counted(env: Any, tmp_path: Any) -> None:
    leader = settle(env)
    down = next(n.name for n in env.nodes if n.name != leader)
    run = RunDir.create(tmp_path, "register-leader-transfer")
    run.write_test({"workload": "register", "checkers": ["stats"]})
    h = _History(run, Clock())
    nem = Compose([KillNemesis(["one"]), LeaderTransferNemesis()])
    h.client_op(leader)
    kill = h.nemesis(nem, env, "start-kill", [down])
    assert kill.value["applied"] is True and kill.value["killed"] == [down]
    transfer = h.nemesis(nem, env, "start-leader-transfer", {"to": down})
    h.nemesis(nem, env, "stop-leader-transfer")
    h.nemesis(nem, env, "stop-kill")
    # a transfer to a node that is down does not move leadership
    assert transfer.value["applied"] is False and transfer.value["to"] == down, transfer.value
    assert transfer.value["why"]
    assert down not in env.db.primaries(env.control)

    lacking = make_test(env.nodes, env.control, _NoPidfileDB(env.db))
    pause = Compose([PauseNemesis(["one"])])
    paused = h.nemesis(pause, lacking, "start-pause", [leader])
    h.nemesis(pause, lacking, "stop-pause")
    assert paused.value["applied"] is False and leader in paused.value["why"], paused.value
    # the leader was never stopped (an election after the killed member's restart may briefly
    # leave the group without a leader, so a leader is awaited, not sampled)
    assert "T" not in _state(env, leader) and env.db.await_leader(env.control, 30)
    h.client_op(leader)
    h.writer.close()

    results = check_run(run)
    faults = results["checkers"]["faults"]
    assert faults["kinds"]["kill"]["applied"] == 1
    assert faults["kinds"]["leader-transfer"] == {
        "requested": 1,
        "applied": 0,
        "failed": 1,
        "errors": [transfer.value["why"]],
        "stop_failed": 0,
        "name": "leader-transfer",  # the fault as the user typed it (issue 35 item 10)
    }
    assert faults["kinds"]["pause"]["applied"] == 0
    assert faults["valid"] == "unknown" and results["valid"] == "unknown"
    assert "leader-transfer" in faults["cause"] and "pause" in faults["cause"]

    from rich.console import Console

    from chaos.history.report.summary import summary_table

    console = Console(width=300, record=True)
    console.print(summary_table(results, run.history_path))
    text = console.export_text()
    assert "1 of 3 requested nemesis faults took effect, 2 did not" in text
    assert "injected" not in text


def _state(test: Any, name: str) -> str:
    r = test.control.remote(name)
    pid = test.db.pid(r)
    return "" if pid is None else str(r.exec_raw(f"ps -o stat= -p {pid}").stdout.strip())


def test_observer_records_a_leader_change_when_the_leader_is_killed(env: Any, tmp_path: Any) -> None:
    leader = settle(env)
    clock = Clock()
    path = tmp_path / LEADERSHIP_FILE
    obs = LeadershipObserver(env.db, env.nodes, env.control, path, clock)
    obs.start()
    nem = KillNemesis(["leader"])
    try:
        wait_for(lambda: obs.samples >= 3, "three leadership samples")
        start = clock()
        done = nem.invoke(env, nemesis_op("start-kill", "leader"))
        assert done.value["killed"] == [leader] and done.value["applied"] is True
        wait_for(
            lambda: any(s.get("leader") not in (None, leader) for s in read_leadership(path)),
            "a new leader observed",
        )
        stop = nem.invoke(env, nemesis_op("stop-kill"))
        end = clock()
        assert stop.value["applied"] is True and stop.value["nodes"] == [leader]
    finally:
        obs.stop()
        nem.heal(env)
    samples = read_leadership(path)
    assert all(set(s["nodes"]) == {n.name for n in env.nodes} for s in samples)
    whole = overall_leadership(samples)
    assert whole["leaders"][0] == leader and whole["leader_changes"] >= 1
    [w] = leadership_windows([{"start": start, "end": end}], samples)
    assert w["leader_before"] == leader and w["leader_changes"] >= 1, w
    assert w["leaders"][-1] != leader and w["new_terms"] >= 1
    # while it was down the killed node answered nothing
    assert any("error" in s["nodes"][leader] for s in samples if start < s["time"] <= end)
