"""The interpreter's fast paths: history lines (orjson) written whole, passive
generators, workers doing the scheduler's step, abandoned ops across runs (real threads and files)."""

from __future__ import annotations

import json
import random
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from chaos.control import generator as gen
from chaos.control.interpreter import Interpreter, Stats
from chaos.history.op import FAIL, INFO, OK, Op
from chaos.history.store import HistoryWriter, encode_line, read_history

# ---- history lines


_json = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=True) | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=4), inner, max_size=3),
    max_leaves=8,
)
_ops = st.builds(
    Op,
    type=st.sampled_from(["invoke", "ok", "fail", "info"]) | st.text(max_size=4),
    process=st.integers(-5, 10**6) | st.just("nemesis") | st.booleans(),
    f=st.sampled_from(["read", "write", "cas", "append", "start-partition"]) | st.text(max_size=6),
    value=_json | st.lists(st.integers(), max_size=5) | st.tuples(st.integers(), st.integers()),
    time=st.integers(0, 2**63),
    index=st.integers(-1, 10**9),
    node=st.none() | st.sampled_from(["n1", "n5", "n40"]) | st.text(max_size=4),
    error=st.none() | st.text(max_size=10),
    key=st.none() | st.integers() | st.text(max_size=3),
    extra=st.dictionaries(
        st.sampled_from(["log_index", "time", "f", "seen_node", 'é"x']) | st.text(max_size=4),
        _json,
        max_size=3,
    ),
)


@settings(max_examples=400, deadline=None)
@given(_ops)
def test_encoded_line_is_byte_for_byte_op_to_json(op: Op) -> None:
    assert encode_line(op) == (op.to_json() + "\n").encode()


def test_common_lines_parse_back_to_the_same_op(tmp_path: Path) -> None:
    p = tmp_path / "h.jsonl"
    ops = [
        Op("invoke", 3, "cas", [1, 2], 10, node="n3", key=7),
        Op("ok", 3, "cas", [1, 2], 11, node="n3", key=7, extra={"log_index": 4}),
        Op("invoke", 4, "write", 'x\n"y"', 12),
        Op("info", 4, "write", None, 13, error="indeterminate: timeout \u2028"),
    ]
    with HistoryWriter(p) as w:
        for op in ops:
            w.write(op)
    back = list(read_history(p))
    assert [(o.type, o.process, o.f, o.value, o.key, o.node, o.error, o.extra) for o in back] == [
        (o.type, o.process, o.f, o.value, o.key, o.node, o.error, o.extra) for o in ops
    ]
    assert json.loads(p.read_text().splitlines()[2])["value"] == 'x\n"y"'


def test_big_lines_and_small_lines_interleave_whole(tmp_path: Path) -> None:
    p = tmp_path / "h.jsonl"
    big = list(range(40_000))  # a final read of a long log: a line of over 200 KB
    assert len(encode_line(Op("ok", 0, "read", big))) > 200_000
    with HistoryWriter(p) as w:
        for i in range(3):
            w.write(Op("invoke", i, "read"))
            w.write(Op("ok", i, "read", big if i == 1 else [i]))
    back = list(read_history(p))
    assert [o.index for o in back] == list(range(6)) and back[3].value == big and back[5].value == [2]


# ---- passive generators


def test_passive_is_derived_from_the_children() -> None:
    reads = gen.repeat({"f": "read"})
    assert gen.clients(gen.limit(5, gen.mix([reads, {"f": "write", "value": 1}]))).passive
    assert gen.time_limit(1, gen.stagger(0.1, reads)).passive
    assert not gen.until_ok(reads).passive
    assert not gen.clients(gen.limit(5, gen.until_ok(reads))).passive
    assert not gen.any_gen(reads, gen.until_ok(reads)).passive
    assert not gen.each_thread(gen.until_ok(reads)).passive
    assert not gen.independent_concurrent(1, [1], lambda k: reads).passive
    # a list's update goes to its current element only
    seq = gen.to_gen([gen.until_ok(reads), reads])
    assert seq is not None and not seq.passive

    class Custom(gen.Generator):
        def op(self, test: Any, ctx: gen.Context) -> gen.OpResult:
            return None, None

    assert not Custom().passive and not gen.limit(3, Custom()).passive


# ---- interpreter


class FlakyClient:
    """``try`` fails ``fails`` times, then is ok; ``block`` waits for ``release``; others are ok."""

    def __init__(self, fails: int = 0, release: threading.Event | None = None) -> None:
        self.fails = fails
        self.release = release or threading.Event()
        self.calls = 0
        self.lock = threading.Lock()

    def open(self, test: Any, node: str) -> FlakyClient:
        return self

    def invoke(self, test: Any, op: Op) -> Op:
        if op.f == "block":
            self.release.wait(10)
            return op.completion(OK)
        if op.f == "try":
            with self.lock:
                self.calls += 1
                n = self.calls
            return op.completion(FAIL if n <= self.fails else OK)
        return op.completion(OK, op.value)

    def close(self, test: Any) -> None:
        pass


def _interp(tmp_path: Path, client: Any, concurrency: int, **kw: Any) -> tuple[Interpreter, HistoryWriter]:
    w = HistoryWriter(tmp_path / "history.jsonl")
    it = Interpreter(
        None,
        client=client,
        nemesis=None,
        nodes=["n1", "n2"],
        concurrency=concurrency,
        history=w,
        rng=random.Random(7),
        **kw,
    )
    return it, w


def test_many_fast_ops_are_paired_in_order_and_seen_by_on_op_in_history_order(tmp_path: Path) -> None:
    seen: list[Op] = []
    it, w = _interp(tmp_path, FlakyClient(), 8, on_op=seen.append)
    it.run(
        gen.clients(
            gen.limit(3000, gen.mix([gen.repeat({"f": "read"}), gen.repeat({"f": "write", "value": 2})]))
        )
    )
    w.close()
    ops = list(read_history(tmp_path / "history.jsonl"))  # validates pairing and time order
    assert len(ops) == 6000 and [o.index for o in seen] == list(range(6000))
    assert sum(1 for o in ops if o.type == OK) == 3000 == it.stats.ok
    assert {o.process for o in ops} == set(range(8))  # every thread worked, nobody was retired


def test_non_passive_generator_gets_updates_from_worker_steps(tmp_path: Path) -> None:
    it, w = _interp(tmp_path, FlakyClient(fails=3), 1)
    it.run(gen.clients(gen.until_ok(gen.repeat({"f": "try"}))))
    w.close()
    ops = list(read_history(tmp_path / "history.jsonl"))
    assert [o.type for o in ops if o.type != "invoke"] == [FAIL, FAIL, FAIL, OK]


def test_stagger_rate_holds_with_fast_clients(tmp_path: Path) -> None:
    # a worker that dispatches an op and finds the next one in the future must wake the scheduler,
    # or the next op would wait for the scheduler's poll
    it, w = _interp(tmp_path, FlakyClient(), 10)
    t0 = time.monotonic()
    it.run(gen.time_limit(1.0, gen.clients(gen.stagger(0.005, gen.repeat({"f": "read"})))))
    dt = time.monotonic() - t0
    w.close()
    inv = [o for o in read_history(tmp_path / "history.jsonl") if o.type == "invoke"]
    assert 0.9 < dt < 2.0
    assert 130 <= len(inv) <= 280  # ~200 ops/s


def test_a_generator_raising_in_a_worker_step_is_raised_by_run(tmp_path: Path) -> None:
    n = [0]

    def g(test: Any, ctx: gen.Context) -> Any:
        n[0] += 1
        if n[0] > 50:
            raise RuntimeError("generator broke at op 51")
        return {"f": "write", "value": n[0]}

    it, w = _interp(tmp_path, FlakyClient(), 2)
    with pytest.raises(RuntimeError, match="op 51"):
        it.run(gen.clients(g))
    w.close()
    ops = list(read_history(tmp_path / "history.jsonl"))  # still a valid history
    assert 45 <= sum(1 for o in ops if o.type == "invoke") <= 50


def test_stopped_run_leaves_the_blocked_op_open_and_retires_its_process(tmp_path: Path) -> None:
    release = threading.Event()
    it, w = _interp(tmp_path, FlakyClient(release=release), 1)
    threading.Timer(0.2, it.stop).start()
    it.run(gen.clients([{"f": "block"}, {"f": "write", "value": 1}]))
    release.set()  # the abandoned op completes after its run: not recorded
    time.sleep(0.2)
    it._stop.clear()
    it.run(gen.clients({"f": "write", "value": 5}))
    w.close()
    ops = list(read_history(tmp_path / "history.jsonl"))  # no two open invocations on a process
    assert [(o.type, o.process, o.f) for o in ops] == [
        ("invoke", 0, "block"),
        ("invoke", 1, "write"),
        ("ok", 1, "write"),
    ]


def test_info_in_a_worker_step_retires_the_process(tmp_path: Path) -> None:
    class TimeoutClient(FlakyClient):
        def invoke(self, test: Any, op: Op) -> Op:
            return op.completion(INFO, error="timeout")

    it, w = _interp(tmp_path, TimeoutClient(), 2)
    it.run(gen.clients(gen.limit(6, gen.repeat({"f": "write", "value": 1}))))
    w.close()
    procs = [o.process for o in read_history(tmp_path / "history.jsonl") if o.type == "invoke"]
    assert len(procs) == 6 and len(set(procs)) == 6  # every info retired its process


def test_rate_counts_completions_over_the_last_seconds() -> None:
    s = Stats()
    for i in range(1000):  # 1000 ops/s for 1 s, then 10 s quiet, then 100 ops in 1 s
        s.completed(Op("ok", 0, "read", time=i * 1_000_000))
    assert 900 < s.rate() < 1100
    for i in range(100):
        s.completed(Op("ok", 0, "read", time=11_000_000_000 + i * 10_000_000))
    assert 80 < s.rate() < 120 and len(s.buckets) <= 51
    assert s.ok == 1100
