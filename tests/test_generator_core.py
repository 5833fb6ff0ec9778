"""Pure-logic tests of the generator model (chaos.control.generator), run in simulated time."""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest

from chaos.control import generator as g

NS = 1_000_000_000


def invokes(h):
    return [o for o in h if o.type == "invoke"]


def test_dict_is_one_shot_and_repeat_is_not():
    assert len(invokes(g.simulate({"f": "read"}))) == 1
    assert len(invokes(g.simulate(g.limit(7, g.repeat({"f": "read"}))))) == 7
    assert len(invokes(g.simulate(g.repeat({"f": "read"}, 3)))) == 3
    assert len(invokes(g.simulate(g.once(g.repeat({"f": "read"}))))) == 1


def test_list_runs_in_order_and_function_until_none():
    h = g.simulate([{"f": "a"}, {"f": "b"}, {"f": "c"}], concurrency=1, nemesis=False)
    assert [o.f for o in invokes(h)] == ["a", "b", "c"]
    state = iter(range(4))

    def fn():
        i = next(state, None)
        return None if i is None else {"f": "w", "value": i}

    h = g.simulate(fn, concurrency=2, nemesis=False, latency=0.01)
    assert [o.value for o in invokes(h)] == [0, 1, 2, 3]


def test_cycle_restarts():
    h = g.simulate(g.cycle([{"f": "a"}, {"f": "b"}], 3), concurrency=1, nemesis=False)
    assert [o.f for o in invokes(h)] == ["a", "b"] * 3


def test_deterministic_given_seed_and_differs_across_seeds():
    def run(seed):
        gen = g.time_limit(5, g.stagger(0.05, g.mix([g.repeat({"f": "read"}), g.repeat({"f": "write"})])))
        return [(o.time, o.process, o.f) for o in g.simulate(gen, concurrency=4, seed=seed, latency=0.01)]

    assert run(1) == run(1)
    assert run(1) != run(2)


def test_time_limit_and_stagger_rate():
    gen = g.time_limit(10, g.stagger(0.1, g.repeat({"f": "read"})))
    h = g.simulate(gen, concurrency=5, latency=0.001)
    inv = invokes(h)
    assert all(o.time < 10 * NS for o in inv)
    # uniform gaps in [0, 0.2] s: about 100 ops in 10 s
    assert 70 <= len(inv) <= 130


def test_delay_is_exact():
    h = g.simulate(g.limit(5, g.delay(0.5, g.repeat({"f": "x"}))), concurrency=1, nemesis=False)
    assert [o.time for o in invokes(h)] == [0, NS // 2, NS, 3 * NS // 2, 2 * NS]


def test_mix_uses_every_branch():
    gen = g.limit(400, g.mix([g.repeat({"f": "read"}), g.repeat({"f": "write"}), g.repeat({"f": "cas"})]))
    c = Counter(o.f for o in invokes(g.simulate(gen, concurrency=3)))
    assert set(c) == {"read", "write", "cas"} and min(c.values()) > 80


def test_clients_and_nemesis_routing():
    gen = g.time_limit(
        3,
        g.clients(
            g.stagger(0.01, g.repeat({"f": "read"})),
            g.cycle([g.sleep(1), {"f": "start-partition"}, g.sleep(0.5), {"f": "stop-partition"}]),
        ),
    )
    h = g.simulate(gen, concurrency=3, latency=0.001)
    for o in h:
        if o.f.startswith(("start", "stop")):
            assert o.process == "nemesis" and o.type in ("invoke", "info")
        else:
            assert isinstance(o.process, int) and 0 <= o.process < 3
    nem = [o.f for o in invokes(h) if o.process == "nemesis"]
    assert nem[:3] == ["start-partition", "stop-partition", "start-partition"]
    starts = [o.time for o in invokes(h) if o.f == "start-partition"]
    assert starts[0] == NS


def test_flip_flop_alternates():
    gen = g.flip_flop(g.repeat({"f": "start"}), g.repeat({"f": "stop"}))
    h = g.simulate(g.limit(6, gen), concurrency=1, nemesis=False)
    assert [o.f for o in invokes(h)] == ["start", "stop"] * 3
    # a finite start side still ends with its stop
    h = g.simulate(g.flip_flop(g.repeat({"f": "start"}, 2), g.repeat({"f": "stop"})), nemesis=False)
    assert [o.f for o in invokes(h)] == ["start", "stop", "start", "stop"]


def test_each_thread_gives_every_thread_its_copy():
    h = g.simulate(g.clients(g.each_thread([{"f": "a"}, {"f": "b"}])), concurrency=4, latency=0.01)
    per: dict[int | str, list[str]] = {}
    for o in invokes(h):
        per.setdefault(o.process, []).append(o.f)
    assert per == {p: ["a", "b"] for p in range(4)}


def test_phases_wait_for_all_threads():
    gen = g.clients(g.phases(g.each_thread({"f": "slow"}), {"f": "after"}))
    h = g.simulate(gen, concurrency=3, latency=1.0)
    slow_done = max(o.time for o in h if o.f == "slow" and o.type == "ok")
    after = [o for o in invokes(h) if o.f == "after"]
    assert len(after) == 1 and after[0].time >= slow_done


def test_info_retires_process():
    def complete(op):
        return ("info", None) if op["f"] == "w" else ("ok", op.get("value"))

    gen = g.clients(g.limit(4, g.repeat({"f": "w"})))
    h = g.simulate(gen, concurrency=2, complete=complete, latency=0.1)
    procs = [o.process for o in invokes(h)]
    assert len(set(procs)) == 4  # every op ran on a fresh process
    assert all(p % 2 in (0, 1) for p in procs) and max(procs) >= 2


def test_independent_concurrent_groups_and_keys():
    gen = g.independent_concurrent(2, range(4), lambda k: g.limit(5, g.repeat({"f": "read"})))
    h = g.simulate(g.clients(gen), concurrency=4, latency=0.01)
    by_key = Counter(o.key for o in invokes(h))
    assert by_key == {0: 5, 1: 5, 2: 5, 3: 5}
    # at most 2 threads work on one key: processes per key come from one group of threads
    for k in range(4):
        threads = {o.process % 4 for o in invokes(h) if o.key == k}
        assert threads <= {0, 1} or threads <= {2, 3}


def test_until_ok():
    seen = []

    def complete(op):
        seen.append(op)
        return ("ok", 1) if len(seen) == 3 else ("fail", None)

    h = g.simulate(g.until_ok(g.repeat({"f": "r"})), concurrency=1, complete=complete, nemesis=False)
    assert [o.type for o in h if o.type != "invoke"] == ["fail", "fail", "ok"]


def test_bad_input_is_named():
    with pytest.raises(TypeError, match="'f'"):
        g.to_gen({"value": 1})
    with pytest.raises(TypeError, match="not a generator"):
        g.to_gen(42)
    with pytest.raises(ValueError, match="time limit"):
        g.time_limit(-1, {"f": "x"})
    with pytest.raises(RuntimeError, match="pending"):
        g.simulate({"f": "x", "process": "nemesis"}, concurrency=1, nemesis=False)


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), -1.0, True, "5"])
def test_durations_must_be_finite_non_negative_seconds(bad: Any) -> None:
    for make, what in (
        (lambda s: g.time_limit(s, {"f": "read"}), "time limit"),
        (lambda s: g.stagger(s, {"f": "read"}), "stagger interval"),
        (lambda s: g.delay(s, {"f": "read"}), "delay"),
        (g.sleep, "sleep"),
    ):
        with pytest.raises(ValueError, match=what):
            make(bad)


def test_independent_groups_take_turns_under_a_rate_limit() -> None:
    """Issue 35 item 5: under a rate limit every key group is due at once; a fixed order gave all
    ops to the first group (threads 5-9 of 10 issued nothing in 60 s of the register workload)."""
    from chaos.workloads.register import workload

    w = workload({"node_count": 5, "seed": 1})
    gn = g.time_limit(60, g.clients(g.stagger(1 / 50, w.generator)))
    h = g.simulate(gn, concurrency=10, latency=0.01, nemesis=False, max_ops=5000)
    per_thread = Counter(int(o.process) % 10 for o in h if o.type == "invoke")
    assert set(per_thread) == set(range(10)), per_thread
    total = sum(per_thread.values())
    assert min(per_thread.values()) > total / 10 / 2, per_thread  # each near its share
