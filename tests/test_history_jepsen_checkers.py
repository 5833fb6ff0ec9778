"""Jepsen's bank, counter, long-fork and set-full checkers on hand-made histories with known
verdicts, valid and invalid, and against brute-force oracles on random small histories."""

from __future__ import annotations

import itertools
import random
from pathlib import Path
from typing import Any

import pytest
from test_history_util import Builder

from chaos.history.checkers.bank import BankChecker, check_read
from chaos.history.checkers.counter import CounterChecker
from chaos.history.checkers.longfork import LongForkChecker
from chaos.history.checkers.setfull import SetFullChecker

MS = 1_000_000


def _run(tmp_path: Path, b: Builder, checker: Any, test: dict[str, Any] | None = None) -> dict[str, Any]:
    return checker.check(test or {}, b.write(tmp_path / "history.jsonl"), {})


def _pair(b: Builder, p: int, f: str, value: Any, out: Any, outcome: str = "ok", **kw: Any) -> None:
    b.op("invoke", p, f, value)
    b.op(outcome, p, f, out, **kw)


# -- bank ----------------------------------------------------------------------------------------

BANK = {"bank": {"accounts": [0, 1, 2], "total": 30}}


def test_bank_reads_summing_to_the_total_are_valid(tmp_path: Path) -> None:
    b = Builder()
    _pair(b, 0, "transfer", {"from": 0, "to": 1, "amount": 5}, {"from": 0, "to": 1, "amount": 5})
    _pair(b, 1, "read", None, {"0": 5, "1": 15, "2": 10})
    _pair(b, 2, "transfer", {"from": 2, "to": 0, "amount": 20}, None, outcome="fail")  # cannot afford
    _pair(b, 1, "read", None, {"0": 5, "1": 15, "2": 10})
    r = _run(tmp_path, b, BankChecker(), BANK)
    assert r["valid"] is True and r["read_count"] == 2 and r["error_count"] == 0, r
    assert [p[1:] for p in r["totals"]] == [[30, None], [30, None]]


def test_each_kind_of_bad_read_is_named_with_jepsens_precedence(tmp_path: Path) -> None:
    acc = {"0", "1", "2"}
    assert check_read({"0": 10, "1": 10, "7": 10}, acc, 30)["type"] == "unexpected-key"
    assert check_read({"0": 10, "1": None, "2": 20}, acc, 30) == {"type": "nil-balance", "nils": ["1"]}
    assert check_read({"0": 10, "1": 20}, acc, 30) == {"type": "nil-balance", "nils": ["2"]}  # missing
    assert check_read({"0": 10, "1": 10, "2": 5}, acc, 30) == {"type": "wrong-total", "total": 25, "diff": -5}
    assert check_read({"0": -5, "1": 15, "2": 20}, acc, 30) == {"type": "negative-value", "negative": [-5]}
    assert check_read({"0": -5, "1": 15, "2": 20}, acc, 30, negative_ok=True) is None
    assert check_read({"0": -5, "1": 15, "2": 5}, acc, 30)["type"] == "wrong-total"  # total first


def test_a_read_seeing_half_a_transfer_is_a_wrong_total(tmp_path: Path) -> None:
    b = Builder()
    _pair(b, 1, "read", None, {"0": 10, "1": 10, "2": 10})
    _pair(b, 1, "read", None, {"0": 7, "1": 10, "2": 10})  # the debit, not the credit
    _pair(b, 1, "read", None, {"0": 7, "1": 13, "2": 13})
    _pair(b, 1, "read", None, {"0": -1, "1": 21, "2": 10})
    r = _run(tmp_path, b, BankChecker(), BANK)
    assert r["valid"] is False and r["error_count"] == 3
    wt = r["errors"]["wrong-total"]
    assert wt["count"] == 2 and wt["lowest"]["total"] == 27 and wt["highest"]["total"] == 33
    assert r["errors"]["negative-value"]["count"] == 1
    assert r["first_error"]["op"]["index"] == 3
    assert [p[2] for p in r["totals"]] == [None, "wrong-total", "wrong-total", "negative-value"]


def test_bank_without_an_ok_read_is_unknown(tmp_path: Path) -> None:
    b = Builder()
    _pair(b, 1, "read", None, None, outcome="fail")
    assert _run(tmp_path, b, BankChecker())["valid"] == "unknown"


def test_bank_defaults_are_jepsens_eight_accounts_of_100(tmp_path: Path) -> None:
    b = Builder()
    _pair(b, 1, "read", None, {str(i): (100 if i == 0 else 0) for i in range(8)})
    assert _run(tmp_path, b, BankChecker())["valid"] is True


def test_bank_against_a_serial_bank_with_torn_reads(tmp_path: Path) -> None:
    """A serial bank's reads are valid; a read of the state between a debit and its credit (a torn
    transfer) is exactly a wrong-total read."""
    rng = random.Random(7)
    for trial in range(20):
        bal = {i: (30 if i == 0 else 0) for i in range(3)}
        b = Builder()
        torn = 0
        for _ in range(40):
            frm, to = rng.sample(range(3), 2)
            amt = rng.randint(1, 5)
            if bal[frm] < amt:
                _pair(b, 0, "transfer", {"from": frm, "to": to, "amount": amt}, None, outcome="fail")
                continue
            bal[frm] -= amt
            if rng.random() < 0.2:
                torn += 1
                _pair(b, 1, "read", None, {str(k): v for k, v in bal.items()})
            bal[to] += amt
            _pair(
                b,
                0,
                "transfer",
                {"from": frm, "to": to, "amount": amt},
                {"from": frm, "to": to, "amount": amt},
            )
            _pair(b, 2, "read", None, {str(k): v for k, v in bal.items()})
        r = _run(tmp_path, b, BankChecker(), BANK)
        assert r["error_count"] == torn, trial
        assert r["valid"] is (torn == 0)
        assert set(r["errors"]) <= {"wrong-total"}


# -- counter ---------------------------------------------------------------------------------------


def test_counter_reads_within_bounds_are_valid(tmp_path: Path) -> None:
    b = Builder()
    _pair(b, 0, "add", 1, 1)
    b.op("invoke", 1, "read", None)
    b.op("invoke", 0, "add", 2)  # concurrent with the read: it may or may not count
    b.op("ok", 1, "read", 3)
    b.op("ok", 0, "add", 2)
    _pair(b, 0, "add", 5, 5, outcome="info")  # may count forever after
    _pair(b, 1, "read", None, 3)
    _pair(b, 1, "read", None, 8)
    r = _run(tmp_path, b, CounterChecker())
    assert r["valid"] is True and r["read_count"] == 3, r
    assert [x[1:] for x in r["reads"]] == [[1, 3, 3], [3, 3, 8], [3, 8, 8]]


def test_counter_reads_below_the_acknowledged_or_above_the_attempted_are_errors(tmp_path: Path) -> None:
    b = Builder()
    _pair(b, 0, "add", 1, 1)
    _pair(b, 0, "add", 1, 1)
    _pair(b, 1, "read", None, 1)  # stale: two acknowledged
    _pair(b, 0, "add", 4, 4, outcome="fail")  # definitely not applied
    _pair(b, 1, "read", None, 6)  # counted a failed add
    _pair(b, 1, "read", None, None)  # null is 0
    r = _run(tmp_path, b, CounterChecker())
    assert r["valid"] is False and r["error_count"] == 3
    assert [(e["lower"], e["value"], e["upper"]) for e in r["errors"]] == [(2, 1, 2), (2, 6, 2), (2, 0, 2)]
    assert r["errors"][0]["below"] == 1 and r["errors"][1]["above"] == 4


def test_counter_with_no_ok_read_is_unknown_and_a_negative_add_is_refused(tmp_path: Path) -> None:
    b = Builder()
    _pair(b, 0, "add", 1, 1)
    assert _run(tmp_path, b, CounterChecker())["valid"] == "unknown"
    b2 = Builder()
    _pair(b2, 0, "add", -1, -1)
    _pair(b2, 1, "read", None, 0)
    r = _run(tmp_path / "..", b2, CounterChecker())
    assert r["valid"] == "unknown" and "non-negative" in r["error"]


def _counter_oracle(ops: list[tuple[str, int, int, int, str]], read: tuple[int, int, int]) -> bool:
    """Brute force: the read's value is the sum of some subset of adds, containing every ok add
    completed before the read's invocation and only adds invoked before its completion that did not
    fail; Jepsen's bounds are the hull of those sums."""
    inv, comp, value = read
    must = [v for f, v, i, c, t in ops if t == "ok" and c < inv]
    may = [v for f, v, i, c, t in ops if t != "fail" and i < comp and not (t == "ok" and c < inv)]
    sums = {sum(must) + sum(s) for n in range(len(may) + 1) for s in itertools.combinations(may, n)}
    return min(sums) <= value <= max(sums)


def test_counter_matches_a_brute_force_oracle_on_random_histories(tmp_path: Path) -> None:
    rng = random.Random(3)
    for trial in range(60):
        events: list[tuple[int, str, int, str, Any]] = []  # (time, type, process, f, value)
        adds = []
        reads = []
        t = 0
        for p in range(4):
            t = rng.randint(0, 5)
            for _ in range(3):
                start, end = t, t + rng.randint(1, 6)
                t = end + 1
                if p < 2:
                    v, outcome = rng.randint(0, 3), rng.choice(["ok", "ok", "fail", "info"])
                    adds.append(("add", v, start, end, outcome))
                    events += [(start, "invoke", p, "add", v)]
                    if outcome != "info":
                        events += [(end, outcome, p, "add", v)]
                    else:
                        break  # a crashed process never invokes again
                else:
                    v = rng.randint(0, 8)
                    reads.append((start, end, v))
                    events += [(start, "invoke", p, "read", None), (end, "ok", p, "read", v)]
        events.sort(key=lambda e: (e[0], e[1] == "invoke"))  # completions before invocations at a tie
        b = Builder()
        for time_, type_, p, f, v in events:
            b.at(time_)
            b.op(type_, p, f, v, dt=0)
        r = _run(tmp_path, b, CounterChecker())
        expect = all(_counter_oracle(adds, rd) for rd in reads)
        assert r["valid"] is expect, (trial, events, r)


# -- long-fork -------------------------------------------------------------------------------------


def _txn(b: Builder, p: int, mops: list[list[Any]], done: list[list[Any]] | None = None) -> None:
    b.op("invoke", p, "txn", [[f, k, None if f == "r" else v] for f, k, v in mops])
    b.op("ok", p, "txn", done or mops)


def test_jepsens_long_fork_is_found(tmp_path: Path) -> None:
    b = Builder()
    _txn(b, 0, [["w", 0, 1]])
    _txn(b, 1, [["w", 1, 1]])
    _txn(b, 2, [["r", 0, None], ["r", 1, 1]])  # T3: saw y, not x
    _txn(b, 3, [["r", 1, None], ["r", 0, 1]])  # T4: saw x, not y
    _txn(b, 2, [["r", 0, 1], ["r", 1, 1]])
    r = _run(tmp_path, b, LongForkChecker())
    assert r["valid"] is False and r["fork_count"] == 1, r
    assert r["forks"][0]["ops"] == [5, 7] and r["forks"][0]["keys"] == [[1], [0]]


def test_reads_in_one_order_are_valid_and_appends_count_as_writes(tmp_path: Path) -> None:
    b = Builder()
    _txn(b, 2, [["r", 0, None], ["r", 1, None]])
    _txn(b, 0, [["append", 0, 1]])
    _txn(b, 2, [["r", 1, None], ["r", 0, [1]]])
    _txn(b, 1, [["append", 1, 1]])
    _txn(b, 3, [["r", 0, [1]], ["r", 1, [1]]])
    _txn(b, 3, [["r", 0, [1]], ["r", 1, [1]]])
    r = _run(tmp_path, b, LongForkChecker())
    assert r["valid"] is True and r["read_count"] == 4 and r["group_count"] == 1, r


def test_long_fork_unknown_and_unexpected_cases(tmp_path: Path) -> None:
    b = Builder()
    _txn(b, 0, [["w", 0, 1]])
    _txn(b, 1, [["w", 0, 1]])
    _txn(b, 2, [["r", 0, 1], ["r", 1, None]])
    assert "written twice" in _run(tmp_path, b, LongForkChecker())["error"]
    b = Builder()
    _txn(b, 2, [["r", 0, None], ["r", 1, None], ["r", 2, None]])
    assert _run(tmp_path, b, LongForkChecker())["valid"] == "unknown"  # not a group of 2
    b = Builder()
    _txn(b, 2, [["r", 0, None], ["r", 1, 1]])  # 1 was never written
    r = _run(tmp_path, b, LongForkChecker())
    assert r["valid"] is False and r["unexpected_count"] == 1


def _fork_free(reads: list[set[int]], keys: list[int]) -> bool:
    """Brute force: some order of the writes makes every read's seen set a prefix of it."""
    for perm in itertools.permutations(keys):
        prefixes = [set(perm[:i]) for i in range(len(perm) + 1)]
        if all(r in prefixes for r in reads):
            return True
    return False


@pytest.mark.parametrize("n", [2, 3])
def test_long_fork_matches_a_brute_force_oracle(tmp_path: Path, n: int) -> None:
    rng = random.Random(n)
    for trial in range(80):
        b = Builder()
        keys = list(range(n))
        for k in keys:
            _txn(b, 0, [["w", k, 1]])
        reads = []
        for _ in range(rng.randint(1, 4)):
            seen = {k for k in keys if rng.random() < 0.5}
            reads.append(seen)
            order = rng.sample(keys, n)
            _txn(b, 1, [["r", k, 1 if k in seen else None] for k in order])
        r = _run(tmp_path, b, LongForkChecker(n))
        assert (r["valid"] is True) is _fork_free(reads, keys), (trial, reads, r)


# -- set-full ----------------------------------------------------------------------------------------


def _read(b: Builder, p: int, elements: list[int], dt: int = MS, node: str | None = None) -> None:
    b.op("invoke", p, "read", None, node=node)
    b.op("ok", p, "read", elements, dt=dt, node=node)


def test_set_full_stable_elements_are_valid_with_zero_latency(tmp_path: Path) -> None:
    b = Builder()
    _pair(b, 0, "add", 1, 1)
    _pair(b, 0, "add", 2, 2)
    _read(b, 1, [1, 2])
    _read(b, 1, [2, 1])
    r = _run(tmp_path, b, SetFullChecker())
    assert r["valid"] is True and r["stable_count"] == 2 and r["stale_count"] == 0, r
    assert r["stable_latencies"]["1.0"] == 0


def test_set_full_stale_read_is_reported_and_invalid_only_when_linearizable(tmp_path: Path) -> None:
    b = Builder()
    _pair(b, 0, "add", 1, 1)  # known at 2 ms
    b.at(0.010)
    _read(b, 1, [], node="n2")  # invoked at 11 ms, 9 ms after known: stale
    _read(b, 1, [1])
    r = _run(tmp_path, b, SetFullChecker())
    assert r["valid"] is True and r["stale_count"] == 1 and r["stale"] == [1], r
    assert r["worst_stale"][0]["stable_latency_ms"] == 9
    assert r["worst_stale"][0]["last_absent"]["node"] == "n2"
    rl = _run(tmp_path, b, SetFullChecker(linearizable=True))
    assert rl["valid"] is False and rl["error"] == "1 stale"


def test_set_full_lost_element_with_its_timeline(tmp_path: Path) -> None:
    b = Builder()
    _pair(b, 0, "add", 1, 1)
    _pair(b, 0, "add", 2, 2)
    _read(b, 1, [1, 2])
    _read(b, 1, [2])  # 1 vanished after it was read
    r = _run(tmp_path, b, SetFullChecker())
    assert r["valid"] is False and r["lost"] == [1] and r["lost_count"] == 1, r
    tl = r["lost_timelines"][0]
    assert (tl["add"]["index"], tl["known"]["index"], tl["last_present"]["index"], tl["last_absent"]["index"]) == (
        0, 1, 4, 6,
    )  # fmt: skip
    assert r["lost_latencies"]["0.0"] == 3  # last present invoked 3 ms after known


def test_set_full_concurrent_absence_is_never_read_not_lost(tmp_path: Path) -> None:
    b = Builder()
    b.op("invoke", 1, "read", None)  # invoked before the add completed
    _pair(b, 0, "add", 1, 1)
    b.op("ok", 1, "read", [])
    _pair(b, 0, "add", 2, 2, outcome="info")  # never known, never read
    _pair(b, 0, "add", 3, 3)
    _read(b, 1, [3])
    r = _run(tmp_path, b, SetFullChecker())
    assert r["valid"] is False
    assert r["never_read"] == [2] and r["lost"] == [1]  # 1: known, then absent from a later read
    b = Builder()
    b.op("invoke", 1, "read", None)
    _pair(b, 0, "add", 1, 1)
    b.op("ok", 1, "read", [])
    r = _run(tmp_path, b, SetFullChecker())
    assert r["never_read"] == [1] and r["lost_count"] == 0 and r["valid"] == "unknown"


def test_set_full_info_add_read_later_is_known_and_stable(tmp_path: Path) -> None:
    b = Builder()
    _pair(b, 0, "add", 1, 1, outcome="info")
    _read(b, 1, [1])
    r = _run(tmp_path, b, SetFullChecker(linearizable=True))
    assert r["valid"] is True and r["stable_count"] == 1


def test_set_full_duplicates_and_unexpected_elements_are_invalid(tmp_path: Path) -> None:
    b = Builder()
    _pair(b, 0, "add", 1, 1)
    _read(b, 1, [1, 1, 9])
    r = _run(tmp_path, b, SetFullChecker())
    assert r["valid"] is False
    assert r["duplicated"] == [{"element": 1, "multiplicity": 2}]
    assert r["unexpected"][0]["element"] == 9
