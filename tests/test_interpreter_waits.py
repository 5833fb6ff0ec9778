"""The interpreter's waits and watchdog (issue 12 item 11): real threads, real history files.

A run once hung forever: the scheduler waited on ``queue.SimpleQueue.get(timeout=t)`` with a
sub-microsecond ``t``, which CPython 3.11 can turn into an unbounded wait while every worker is idle.
These tests drive exactly that shape (many ops held a few microseconds in the future, workers idle in
between) and the watchdog that ends a run whose workers stop making progress. pytest-timeout makes a
hang a failure instead of a stalled CI job.
"""

from __future__ import annotations

import random
import threading
from pathlib import Path
from typing import Any

import pytest
from test_interpreter_core import DiscardHistory

from chaos.control import generator as gen
from chaos.control.interpreter import (
    NEMESIS_STALL_MIN_S,
    STALL_MIN_S,
    Interpreter,
    Stalled,
    _Mailbox,
    stall_bounds,
)
from chaos.history.op import INVOKE, OK, Op
from chaos.history.store import HistoryWriter, read_history


class InstantClient:
    def open(self, test: Any, node: str) -> InstantClient:
        return self

    def invoke(self, test: Any, op: Op) -> Op:
        return op.completion(OK, op.value)

    def close(self, test: Any) -> None:
        pass


class CountingWriter:
    def __init__(self) -> None:
        self.n = 0

    def write(self, op: Op) -> Op:
        self.n += 1
        return op


def _due_within(ns: int) -> Any:
    def op(test: Any, ctx: gen.Context) -> dict[str, Any]:
        # due 0..ns after "now": the scheduler holds it and waits a sub-microsecond time, often just
        # after taking a completion that a worker queued while the scheduler held the lock
        return {"f": "write", "value": 1, "time": ctx.time + ctx.rng.randrange(0, ns)}

    return op


class LiveViewLikeThread:
    """A Python thread that wakes every few ms, as the live view's refresh and leader poll do in a
    real run: its GIL hand-offs are what stretched SimpleQueue's wait past its deadline."""

    def __init__(self) -> None:
        self.stop = threading.Event()
        self.t = threading.Thread(target=self._loop, daemon=True)

    def _loop(self) -> None:
        n = 0
        while not self.stop.wait(0.002):
            n += 1

    def __enter__(self) -> LiveViewLikeThread:
        self.t.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.t.join()


@pytest.mark.timeout(300)
@pytest.mark.parametrize("ahead_ns, concurrency", [(300, 1), (300, 2), (2000, 2), (2000, 8)])
def test_many_short_held_ops_with_idle_workers_complete(ahead_ns: int, concurrency: int) -> None:
    # with the SimpleQueue wait this hung within a few rounds on the development machine (every
    # fresh interpreter's first wait, and every wait right after taking a queued completion)
    with LiveViewLikeThread():
        _run_rounds(ahead_ns, concurrency)


def _run_rounds(ahead_ns: int, concurrency: int) -> None:
    for seed in range(40):
        w = CountingWriter()
        it = Interpreter(
            None,
            client=InstantClient(),
            nemesis=None,
            nodes=["n1"],
            concurrency=concurrency,
            history=w,
            rng=random.Random(seed),
        )
        it.run(gen.limit(1_000, _due_within(ahead_ns)))
        assert w.n == 2_000  # every op invoked and completed
        assert it.stats.ok == 1_000


@pytest.mark.timeout(120)
def test_rate_limited_ops_with_sub_millisecond_gaps_complete() -> None:
    w = CountingWriter()
    it = Interpreter(None, client=InstantClient(), nemesis=None, nodes=["n1"], concurrency=4, history=w)
    it.run(gen.limit(5_000, gen.delay(0.0002, gen.repeat({"f": "write", "value": 2}))))
    assert it.stats.ok == 5_000


@pytest.mark.timeout(60)
def test_mailbox_timed_get_returns_for_tiny_zero_and_negative_timeouts() -> None:
    box: _Mailbox[object] = _Mailbox()
    for t in (1e-9, 5e-7, 0.0, -1.0, 0.001):
        assert box.get(t) is None
    box.put("a")
    box.put("b")
    assert not box.empty()
    assert box.pop() == "a"
    assert box.get(1e-9) == "b"
    assert box.empty()
    # the pattern that hangs SimpleQueue.get(timeout=...) on CPython 3.11 within a few thousand
    # rounds: a get that finds an item, then a get with a sub-microsecond timeout on an empty queue
    for _ in range(50_000):
        box.put(1)
        assert box.get(0.1) == 1
        assert box.get(1e-7) is None
    # a put from another thread wakes a waiting get
    threading.Timer(0.05, box.put, args=("c",)).start()
    got = None
    while got is None:
        got = box.get(0.5)
    assert got == "c"


class BlockingClient:
    """Thread 0's first write never returns (until the test releases it); everything else is instant."""

    def __init__(self, release: threading.Event) -> None:
        self.release = release

    def open(self, test: Any, node: str) -> BlockingClient:
        return self

    def invoke(self, test: Any, op: Op) -> Op:
        if op.value == "stuck":
            self.release.wait()
        return op.completion(OK, op.value)

    def close(self, test: Any) -> None:
        pass


@pytest.mark.timeout(120)
def test_a_client_that_never_returns_ends_the_run_as_stalled_with_the_history_kept(tmp_path: Path) -> None:
    release = threading.Event()
    path = tmp_path / "history.jsonl"
    w = HistoryWriter(path)
    it = Interpreter(
        None,
        client=BlockingClient(release),
        nemesis=None,
        nodes=["n1", "n2"],
        concurrency=2,
        history=w,
        stall_timeout=1.0,
    )
    first = [{"f": "write", "value": "stuck", "process": 0}]
    rest = gen.limit(50, gen.on_threads([1], gen.repeat({"f": "write", "value": 1})))
    try:
        with pytest.raises(Stalled, match=r"thread 0 \(n1\): op write in flight"):
            # with no watchdog this generator never ends: the stuck op is never completed
            it.run(gen.any_gen(first, rest))
    finally:
        release.set()
        w.close()
    ops = list(read_history(path))
    stuck = [o for o in ops if o.value == "stuck"]
    assert [o.type for o in stuck] == [INVOKE]  # left open, as any op a crashed run abandons
    assert sum(1 for o in ops if o.type == OK) == 50  # the other thread's ops were all recorded


@pytest.mark.timeout(120)
def test_a_stuck_nemesis_op_is_caught_by_its_own_bound(tmp_path: Path) -> None:
    release = threading.Event()

    class StuckNemesis:
        def invoke(self, test: Any, op: Op) -> Op:
            release.wait()
            return op

    w = CountingWriter()
    it = Interpreter(
        None,
        client=None,
        nemesis=StuckNemesis(),
        nodes=[],
        concurrency=1,
        history=w,
        stall_timeout=60.0,
        nemesis_stall_timeout=1.0,
    )
    try:
        with pytest.raises(Stalled, match="nemesis"):
            it.run(gen.nemesis([{"f": "start-partition", "value": None}]))
    finally:
        release.set()
    assert w.n == 1  # the invocation was recorded before the nemesis hung


def test_sleep_ops_are_not_stalls() -> None:
    w = CountingWriter()
    it = Interpreter(
        None, client=InstantClient(), nemesis=None, nodes=["n1"], concurrency=1, history=w, stall_timeout=0.2
    )
    # a 1.5 s sleep is longer than the 0.2 s client bound: its own length is added to its bound
    it.run(gen.clients([gen.sleep(1.5), {"f": "write", "value": 3}]))
    assert it.stats.ok == 1


def test_stall_bounds_follow_the_db_client_timeout_and_options() -> None:
    class DB:
        client_timeout = 10.0

    class T:
        db = DB()
        opts: dict[str, Any] = {}

    assert stall_bounds(None) == (STALL_MIN_S, NEMESIS_STALL_MIN_S)
    assert stall_bounds(T()) == (1000.0, 3000.0)
    T.opts = {"stall_timeout": 2.0}
    assert stall_bounds(T()) == (2.0, NEMESIS_STALL_MIN_S)
    for bad in (0, -1.0, float("nan"), float("inf")):
        with pytest.raises(ValueError, match="stall_timeout"):
            Interpreter(
                None,
                client=InstantClient(),
                nemesis=None,
                nodes=["n1"],
                concurrency=1,
                history=DiscardHistory(),
                stall_timeout=bad,
            )
