"""The interpreter with in-process clients (real threads, real history files; no DB needed)."""

from __future__ import annotations

import random
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from chaos.control import generator as gen
from chaos.control.interpreter import Interpreter
from chaos.history.op import FAIL, INFO, OK, Op
from chaos.history.store import HistoryWriter, read_history


class DiscardHistory:
    """A history sink that keeps nothing (for runs that must fail before recording)."""

    def write(self, op: Op) -> Op:
        return op


class RecordingClient:
    """A client whose behaviour depends on op.f: ok, crash (exception), timeout (info), fail."""

    opened: list[str] = []
    lock = threading.Lock()

    def __init__(self, node: str | None = None) -> None:
        self.node = node

    def open(self, test: Any, node: str) -> RecordingClient:
        with self.lock:
            RecordingClient.opened.append(node)
        return RecordingClient(node)

    def invoke(self, test: Any, op: Op) -> Op:
        time.sleep(0.001)
        if op.f == "crash":
            raise ConnectionError("boom")
        if op.f in ("timeout", "read-timeout"):
            return op.completion(INFO, error="timeout")
        if op.f == "bad":
            return "not an op"  # type: ignore[return-value]
        if op.f == "fail":
            return op.completion(FAIL, error="nope")
        return op.completion(OK, op.value, seen_node=self.node)

    def close(self, test: Any) -> None:
        pass


class Nem:
    def __init__(self) -> None:
        self.seen: list[str] = []

    def invoke(self, test: Any, op: Op) -> Op:
        self.seen.append(op.f)
        if op.f == "start-bad":
            raise RuntimeError("nemesis exploded")
        return op.completion(INFO, {"done": op.f})


def run(tmp_path: Path, g: Any, concurrency: int = 3, nodes=("n1", "n2"), idempotent=("read-timeout",)):
    path = tmp_path / "history.jsonl"
    w = HistoryWriter(path)
    nem = Nem()
    it = Interpreter(
        None,
        client=RecordingClient(),
        nemesis=nem,
        nodes=list(nodes),
        concurrency=concurrency,
        history=w,
        rng=random.Random(3),
        idempotent=idempotent,
    )
    it.run(g)
    w.close()
    return list(read_history(path)), it, nem


def test_ops_are_recorded_paired_and_routed_to_node_i_mod_n(tmp_path: Path) -> None:
    g = gen.clients(gen.each_thread(gen.limit(5, gen.repeat({"f": "write", "value": 1}))))
    ops, it, _ = run(tmp_path, g, concurrency=4, nodes=("n1", "n2", "n3"))
    assert len(ops) == 40 and [o.index for o in ops] == list(range(40))
    for o in ops:
        assert o.node == ["n1", "n2", "n3"][o.process % 3]
        if o.type == OK:
            assert o.extra["seen_node"] == o.node
    assert it.stats.ok == 20


def test_info_retires_process_and_exception_becomes_info(tmp_path: Path) -> None:
    g = gen.clients(gen.each_thread([{"f": "timeout"}, {"f": "crash"}, {"f": "write", "value": 2}]))
    ops, it, _ = run(tmp_path, g, concurrency=2)
    comps = [o for o in ops if o.type != "invoke"]
    crash = [o for o in comps if o.f == "crash"]
    assert all(o.type == INFO and "indeterminate: ConnectionError: boom" in o.error for o in crash)
    # thread t runs process t, then t+2 after the timeout, then t+4 after the crash
    for t in (0, 1):
        assert [o.process for o in ops if o.type == "invoke" and o.process % 2 == t] == [t, t + 2, t + 4]
    assert it.stats.info == 4 and it.stats.ok == 2


def test_idempotent_timeouts_are_fail_and_bad_completions_info(tmp_path: Path) -> None:
    g = gen.clients([{"f": "read-timeout"}, {"f": "bad"}, {"f": "fail"}])
    ops, _, _ = run(tmp_path, g, concurrency=1)
    types = {o.f: o.type for o in ops if o.type != "invoke"}
    assert types == {"read-timeout": FAIL, "bad": INFO, "fail": FAIL}
    bad = next(o for o in ops if o.f == "bad" and o.type == INFO)
    assert "not an Op" in bad.error


def test_nemesis_ops_are_info_and_sleep_is_not_recorded(tmp_path: Path) -> None:
    g = gen.nemesis([gen.sleep(0.2), {"f": "start-x", "value": [1]}, {"f": "start-bad"}, {"f": "stop-x"}])
    t0 = time.monotonic()
    ops, it, nem = run(tmp_path, g)
    assert time.monotonic() - t0 >= 0.2
    assert nem.seen == ["start-x", "start-bad", "stop-x"]
    assert [(o.process, o.type, o.f) for o in ops] == [
        ("nemesis", "info", f) for f in ("start-x", "start-x", "start-bad", "start-bad", "stop-x", "stop-x")
    ]
    assert ops[1].value == {"done": "start-x"}
    assert "nemesis exploded" in ops[3].error
    assert ops[0].time >= 0.2e9  # the sleep delayed it, but was not recorded
    assert "x" not in it.stats.faults  # stopped; "bad" failed to start, may be partly in force


def test_time_limit_and_rate_in_real_time(tmp_path: Path) -> None:
    g = gen.time_limit(1.0, gen.clients(gen.stagger(0.01, gen.repeat({"f": "write", "value": 3}))))
    t0 = time.monotonic()
    ops, _, _ = run(tmp_path, g)
    dt = time.monotonic() - t0
    inv = [o for o in ops if o.type == "invoke"]
    assert 0.9 < dt < 3.0
    assert 50 <= len(inv) <= 160  # ~100 ops/s
    assert all(o.time < 1.1e9 for o in inv)


def test_interpreter_runs_twice_without_reusing_retired_processes(tmp_path: Path) -> None:
    path = tmp_path / "h.jsonl"
    w = HistoryWriter(path)
    it = Interpreter(None, client=RecordingClient(), nemesis=None, nodes=["n1"], concurrency=1, history=w)
    it.run(gen.clients([{"f": "timeout"}]))
    it.run(gen.clients([{"f": "write", "value": 1}]))
    w.close()
    ops = list(read_history(path))
    assert [o.process for o in ops] == [0, 0, 1, 1]


def test_bad_arguments() -> None:
    with pytest.raises(ValueError, match="concurrency"):
        Interpreter(None, client=None, nemesis=None, nodes=[], concurrency=0, history=DiscardHistory())
    with pytest.raises(ValueError, match="node"):
        Interpreter(
            None, client=RecordingClient(), nemesis=None, nodes=[], concurrency=1, history=DiscardHistory()
        )
