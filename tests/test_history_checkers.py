"""Composition, merge_valid, the stats checker, checker choice from test.json, check_run."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from test_history_util import Builder

from chaos.history.checkers.registry import (
    Checker,
    StatsChecker,
    StreamChecker,
    check_run,
    checkers_for,
    compose,
    merge_valid,
)
from chaos.history.store import HistoryError, RunDir


@pytest.mark.parametrize(
    ("values", "merged"),
    [
        ([], True),
        ([True, True], True),
        ([True, "unknown"], "unknown"),
        (["unknown", False, True], False),
        ([True, None], "unknown"),
        ([False, "unknown"], False),
    ],
)
def test_merge_valid_worst_first(values: list[Any], merged: Any) -> None:
    assert merge_valid(values) == merged


def test_verdicts_that_crossed_pickling_merge_by_value() -> None:
    """An "unknown" that came back from a worker process is a different str object: still unknown."""
    import pickle

    from chaos.history.verdict import UNKNOWN, verdict

    far = pickle.loads(pickle.dumps("".join(["unk", "nown"])))
    assert far == UNKNOWN and far is not UNKNOWN
    assert merge_valid([True, far]) == UNKNOWN and merge_valid([far, False]) is False
    assert merge_valid(pickle.loads(pickle.dumps([True, True]))) is True
    assert [verdict(v) for v in (True, False, far, None, 1, "valid")] == [True, False, *[UNKNOWN] * 4]


@pytest.mark.parametrize(
    ("ops", "test"),
    [
        ([("write", 1, 1), ("read", None, 1)], {"workload": "register"}),
        ([("read", None, 1)], {"workload": "register"}),  # reads only, of a scalar: a register
        ([("cas", [1, 2], [1, 2])], {"workload": "register"}),
        ([("append", 1, 1), ("read", None, [1])], {"workload": "log"}),
        ([("append", 1, 1), ("read-range", [0, 1], [1])], {"workload": "log"}),
        ([("add", 1, 1), ("read", None, [1])], {"workload": "set"}),
        (
            [("transfer", {"from": 0, "to": 1, "amount": 1}, None), ("read", None, {"0": 1})],
            {"workload": "bank"},
        ),
        (
            [("acquire", None, None), ("release", None, None)],
            {"workload": "mutex", "model": "mutex", "checkers": ["linear", "stats", "perf"]},
        ),
    ],
)
def test_infer_test_from_the_whole_history(
    tmp_path: Path, ops: list[tuple[str, Any, Any]], test: Any
) -> None:
    from chaos.history.checkers.registry import infer_test

    b = Builder()
    for _ in range(2500):  # more than any prefix a guess would read
        b.nemesis("start-partition")
        b.nemesis("stop-partition")
    for p, (f, v, out) in enumerate(ops):
        b.op("invoke", p, f, v)
        b.op("ok", p, f, out)
    assert infer_test(b.write(tmp_path / "h.jsonl")) == test


@pytest.mark.parametrize(
    ("ops", "why"),
    [
        ([("write", 1, 1), ("append", 2, 2)], "no single workload uses all of them"),
        ([("read", None, [1, 2])], "reads only, returning lists"),
        ([("withdraw", 1, 1)], "no single workload uses all of them"),
    ],
)
def test_infer_test_refuses_to_guess(tmp_path: Path, ops: list[tuple[str, Any, Any]], why: str) -> None:
    from chaos.history.checkers.registry import infer_test

    b = Builder()
    for p, (f, v, out) in enumerate(ops):
        b.op("invoke", p, f, v)
        b.op("ok", p, f, out)
    path = b.write(tmp_path / "h.jsonl")
    with pytest.raises(HistoryError, match=f"{path}: cannot tell the model .*{why}.*pass --model"):
        infer_test(path)
    assert infer_test(path, model="register") == {"workload": None, "model": "register"}


def test_no_client_op_is_not_a_test(tmp_path: Path) -> None:
    from chaos.history.checkers.registry import infer_test

    b = Builder()
    b.nemesis("start-kill")
    path = b.write(tmp_path / "h.jsonl")
    for call in (
        lambda: infer_test(path, model="register"),
        lambda: compose([StatsChecker()]).check({}, path, {}),
    ):
        with pytest.raises(HistoryError, match=f"{path}: no client op: nothing was tested"):
            call()
    path.write_bytes(b"")
    with pytest.raises(HistoryError, match="no client op"):
        compose([StatsChecker()]).check({}, path, {})


def test_an_f_invoked_and_never_completed_is_unknown_not_valid(tmp_path: Path) -> None:
    """A cut history (the writer killed): invocations with no completion observed nothing, so the
    stats checker cannot call that f served (it said valid before), nor failed (invalid)."""
    b = Builder()
    b.op("invoke", 0, "read")
    r = compose([StatsChecker()]).check({}, b.write(tmp_path / "pending.jsonl"), {})
    assert r["valid"] == "unknown" and r["checkers"]["stats"]["by_f"]["read"]["count"] == 0
    assert "read: invoked, never completed" in r["checkers"]["stats"]["error"]
    b = Builder()
    b.op("invoke", 0, "write", 1)
    b.op("ok", 0, "write", 1)
    b.op("invoke", 1, "read")
    assert compose([StatsChecker()]).check({}, b.write(tmp_path / "cut.jsonl"), {})["valid"] == "unknown"
    b.op("info", 1, "read")  # completed, never ok: the DB never served a read
    assert compose([StatsChecker()]).check({}, b.write(tmp_path / "info.jsonl"), {})["valid"] is False


def test_a_run_without_test_json_is_checked_as_its_whole_history_shows(tmp_path: Path) -> None:
    """2,500 nemesis op pairs first, then one read of 1 from a never-written register: INVALID."""
    run = RunDir.create(tmp_path / "store", "bare")
    b = Builder()
    for _ in range(2500):
        b.nemesis("start-partition")
        b.nemesis("stop-partition")
    b.op("invoke", 0, "read", None)
    b.op("ok", 0, "read", 1)
    b.write(run.history_path)
    r = check_run(run)
    assert r["valid"] is False and r["checkers"]["linear"]["valid"] is False


class _Fixed:
    def __init__(self, name: str, valid: Any) -> None:
        self.name = name
        self.valid = valid

    def check(self, test: dict[str, Any], history_path: Path, opts: dict[str, Any]) -> dict[str, Any]:
        return {"valid": self.valid}


class _Boom:
    name = "boom"

    def check(self, test: dict[str, Any], history_path: Path, opts: dict[str, Any]) -> dict[str, Any]:
        raise RuntimeError("kaboom")


def _log_history(tmp_path: Path, lost: bool = False) -> Path:
    b = Builder()
    b.nemesis("start-kill", {"nodes": ["n1"]})
    for v in range(3):
        b.append(v, v, log_index=v)
    b.nemesis("stop-kill", {"nodes": ["n1"]})
    b.op("invoke", 9, "cas", [1, 2])
    b.op("fail", 9, "cas", [1, 2])
    b.read(10, "n1", [0, 1] if lost else [0, 1, 2])
    return b.write(tmp_path / "history.jsonl")


def test_compose_merges_and_reports_crashes_as_unknown(tmp_path: Path) -> None:
    path = _log_history(tmp_path)
    checkers: list[Checker] = [_Fixed("a", True), _Boom(), StatsChecker()]
    r = compose(checkers).check({}, path, {})
    assert r["valid"] is False  # stats: cas never ok
    assert list(r["checkers"]) == ["a", "boom", "stats"]
    assert r["checkers"]["boom"]["valid"] == "unknown"
    assert r["checkers"]["boom"]["error"] == "checker boom crashed: RuntimeError: kaboom"
    st = r["checkers"]["stats"]
    assert st["by_f"]["append"] == {"ok": 3, "fail": 0, "info": 0, "count": 3, "valid": True}
    assert st["by_f"]["cas"]["valid"] is False and st["error"] == "no ok cas"
    assert (st["ok"], st["fail"], st["count"]) == (4, 1, 5)  # nemesis ops are not counted
    assert compose([_Fixed("a", True), _Boom()]).check({}, path, {})["valid"] == "unknown"
    with pytest.raises(ValueError, match="two checkers named 'a'"):
        compose([_Fixed("a", True), _Fixed("a", False)])


def test_a_malformed_history_is_not_a_checker_crash(tmp_path: Path) -> None:
    path = tmp_path / "history.jsonl"
    path.write_text('{"index":0,"type":"ok","process":0,"f":"read","time":1}\n')
    with pytest.raises(HistoryError, match="line 1: ok completion of 'read' on process 0 without"):
        compose([StatsChecker()]).check({}, path, {})


def test_checkers_for_workloads() -> None:
    assert list(checkers_for({"workload": "log"})) == [
        "log",
        "log-reads",
        "stats",
        "perf",
        "faults",
        "client-errors",
    ]
    assert list(checkers_for({"workload": "set"})) == ["set", "stats", "perf", "faults", "client-errors"]
    assert list(checkers_for({"workload": "register"})) == [
        "linear",
        "stats",
        "perf",
        "faults",
        "client-errors",
    ]
    assert list(checkers_for({"workload": "bank"})) == ["bank", "stats", "perf", "faults", "client-errors"]
    assert list(checkers_for({"workload": "bank"}, model="register")) == [
        "linear",
        "bank",
        "stats",
        "perf",
        "faults",
        "client-errors",
    ]
    assert list(checkers_for({"workload": "log", "checkers": ["perf"]})) == [
        "perf",
        "faults",
        "client-errors",
    ]
    with pytest.raises(ValueError, match="unknown checker 'nope'"):
        checkers_for({"checkers": ["nope"]})


def test_check_run_writes_results_json(tmp_path: Path) -> None:
    run = RunDir.create(tmp_path / "store", "log-kill")
    run.write_test({"workload": "log", "checkers": ["log", "perf"]})
    _log_history(run.path, lost=True)
    r = check_run(tmp_path / "store")
    assert r["valid"] is False
    assert set(r["checkers"]) == {"log", "perf", "faults", "client-errors"}
    assert r["checkers"]["log"]["lost"][0]["value"] == 2
    assert run.load_results() == r
    with pytest.raises(FileNotFoundError, match="no history"):
        empty = RunDir.create(tmp_path / "store", "empty")
        empty.write_test({"workload": "log"})
        check_run(empty)


class _CrashOnThird:
    n = 0

    def step(self, op: Any) -> None:
        self.n += 1
        if self.n == 3:
            raise KeyError("third")

    def finish(self) -> dict[str, Any]:
        return {"valid": True}


class _StepBoom(StreamChecker):
    """A stream checker that crashes on its third op; the others must still see every op."""

    name = "stepboom"

    def begin(self, test: dict[str, Any], opts: dict[str, Any]) -> Any:
        return _CrashOnThird()


def test_a_stream_checker_crashing_midway_leaves_the_others(tmp_path: Path) -> None:
    path = _log_history(tmp_path)
    r = compose([_StepBoom(), StatsChecker()]).check({}, path, {})
    assert r["checkers"]["stepboom"]["error"] == "checker stepboom crashed: KeyError: 'third'"
    assert r["checkers"]["stats"]["count"] == 5
    assert r["valid"] is False


def _without_times(results: dict[str, Any]) -> dict[str, Any]:
    out = {}
    for name, r in results["checkers"].items():
        r = {k: v for k, v in r.items() if k not in ("elapsed_s", "seconds")}
        if name == "linear":
            r["keys"] = {k: {**v, "seconds": None} for k, v in r["keys"].items()}
        out[name] = r
    return {"valid": results["valid"], "checkers": out}


_FORKED = """
import json, sys
import chaos.history.checkers.registry as checkers
from chaos.history.store import ParsedHistory
h = ParsedHistory.read(sys.argv[1])
test = checkers.infer_test(h)
streams = {n: c.begin(test, {}) for n, c in checkers.checkers_for(test).items() if n != "linear"}
child = checkers._fork_streams(streams, h)
results = {}
joined = child is not None and checkers._join_streams(child, results)
composed = checkers.compose(checkers.checkers_for(test)).check(test, h, {"workers": 1})
checkers.FORK_STREAMS_AFTER = 10**9
here = checkers.compose(checkers.checkers_for(test)).check(test, h, {"workers": 1})
print(json.dumps({"forked": joined, "child": results, "composed": composed, "here": here}, default=str))
"""


@pytest.mark.parametrize("violations", [0, 2])
def test_stream_checkers_in_a_forked_child_give_the_results_of_this_process(
    tmp_path: Path, violations: int
) -> None:
    """A long history's stream checkers run in a forked child beside the linear search (a real
    process of its own here: a test runner's threads would rule the fork out); every result is
    the one the same checkers give in this process."""
    import json
    import subprocess
    import sys

    from chaos.history.store import write_history
    from chaos.history.synth import register_history

    ops, _ = register_history(12_000, keys=5, processes=6, seed=7, violations=violations)
    path = tmp_path / "h.jsonl"
    write_history(path, ops)
    p = subprocess.run(
        [sys.executable, "-c", _FORKED, str(path)], capture_output=True, text=True, timeout=300
    )
    assert p.returncode == 0, p.stderr
    out = json.loads(p.stdout)
    assert out["forked"]
    here = out["here"]["checkers"]
    assert set(out["child"]) == set(here) - {"linear"}
    for name, r in out["child"].items():
        assert {k: v for k, v in r.items() if k != "elapsed_s"} == {
            k: v for k, v in here[name].items() if k != "elapsed_s"
        }
    same = {n: {k: v for k, v in r.items() if k != "elapsed_s"} for n, r in here.items() if n != "linear"}
    assert {
        n: {k: v for k, v in r.items() if k != "elapsed_s"}
        for n, r in out["composed"]["checkers"].items()
        if n != "linear"
    } == same
    assert out["composed"]["valid"] is out["here"]["valid"] is (violations == 0)


def test_an_f_the_client_has_no_method_for_is_not_a_db_failure() -> None:
    """A register client without the optional ``delete`` fails each delete with ``unsupported``:
    the DB was asked nothing, so stats does not call the run invalid for "no ok delete"."""
    from chaos.history.checkers.registry import _StatsAcc
    from chaos.history.op import Op

    acc = _StatsAcc()
    for i, (t, f, extra) in enumerate(
        [
            ("ok", "read", {}),
            ("fail", "delete", {"unsupported": True}),
            ("fail", "delete", {"unsupported": True}),
        ]
    ):
        acc.step(Op(t, i, f, None, i, i, None, None, 0, extra))
    out = acc.finish()
    assert out["valid"] is True and out["by_f"]["delete"]["unsupported"] == 2
    acc.step(Op("fail", 9, "cas", [1, 2], 9, 9, None, None, 0, {}))  # a real refusal still counts
    assert acc.finish()["valid"] is False


def test_perf_files_an_unsupported_fail_apart_and_not_as_an_outage() -> None:
    """perf counts a fail the client could not send as ``unsupported``, never ``unavailable``, and
    leaves it out of availability (the DB was not asked)."""
    from chaos.history.checkers.perf import PerfChecker, ops_line
    from chaos.history.op import Op

    ops = []
    for i in range(40):  # one delete a second, each unsupported, between ok reads
        t = i * 500_000_000
        f, typ, extra = ("delete", "fail", {"unsupported": True}) if i % 2 else ("read", "ok", {})
        ops.append(Op("invoke", 0, f, None, t, 2 * i, None, None, 0, {}))
        ops.append(Op(typ, 0, f, None, t + 1_000_000, 2 * i + 1, None, None, 0, extra))

    def perf(history: list[Op]) -> dict:
        acc = PerfChecker().begin({}, {})
        for op in history:
            acc.step(op)
        return acc.finish()

    out = perf(ops)
    assert out["ops"]["fail_unsupported"] == 20 and out["ops"]["fail_unavailable"] == 0, out["ops"]
    assert "20 unsupported by the client" in ops_line(out["ops"])
    # nor a client error: the client-errors checker counts none, so the ops line must not say so
    assert out["ops"]["client_errors"] == 0 and "client errors" not in ops_line(out["ops"]), out["ops"]
    # availability is what it would be without the deletes at all
    reads_only = perf([o for o in ops if o.f == "read"])
    assert out["availability"] == reads_only["availability"]
