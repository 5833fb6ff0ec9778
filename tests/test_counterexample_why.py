"""The counterexample's sentence of why (chaos.history.checkers.why): each witness it names holds in every
linearization, and a failure that needs several ops says so instead of naming one."""

from __future__ import annotations

from pathlib import Path

from chaos.history.checkers.linear import check_calls
from chaos.history.checkers.models import UNKNOWN, Call

S = 1_000_000_000


def _call(
    i: int, f: str, value: object, output: object, call: float, ret: float | None, process: int
) -> Call:
    return Call(i, f, value, output, int(call * S), None if ret is None else int(ret * S), process, i)


def _why(calls: list[Call]) -> str:
    r = check_calls(calls, "cas-register")
    assert r.valid is False
    assert r.counterexample is not None
    why = r.counterexample["why"]
    assert isinstance(why, str)
    return why


def test_stale_read_names_the_later_write_and_its_times() -> None:
    calls = [
        _call(0, "write", 1, None, 1.0, 1.5, 0),
        _call(1, "write", 2, None, 2.0, 23.10, 3),
        _call(2, "read", None, 1, 23.18, 23.5, 1),
    ]
    why = _why(calls)
    assert why == (
        "read 1 (process 1), but write(2) by process 3 completed at 23.10 s, before this op began at "
        "23.18 s, after every write of 1 had completed (the last at 1.50 s)."
    )


def test_read_of_a_value_nobody_wrote() -> None:
    calls = [_call(0, "write", 1, None, 1.0, 1.5, 0), _call(1, "read", None, 7, 2.0, 2.5, 1)]
    assert _why(calls) == "read 7 (process 1, began at 2.00 s), but no op ever wrote 7."


def test_no_single_witness_when_a_write_of_the_value_may_still_take_effect() -> None:
    # the write of 1 crashed (info): it may take effect at any time after 1.0 s, so no one write
    # proves the read stale; here the failure needs the second read to explain it
    calls = [
        _call(0, "write", 1, UNKNOWN, 1.0, None, 0),
        _call(1, "write", 2, None, 2.0, 2.5, 3),
        _call(2, "read", None, 1, 3.0, 3.5, 1),
        _call(3, "read", None, 2, 4.0, 4.5, 2),
        _call(4, "read", None, 1, 5.0, 5.5, 4),
    ]
    why = _why(calls)
    assert "but no order of the ops lets the register hold" in why, why
    assert "completed at" not in why


def test_the_terminal_summary_prints_the_sentence(tmp_path: Path) -> None:
    import json

    from test_report_fixtures import make_long_invalid_register_run

    from chaos.history.report.summary import counterexample_lines

    d = make_long_invalid_register_run(tmp_path)
    lines = counterexample_lines(json.loads((d / "results.json").read_text()))
    assert lines[-1].startswith("  why: read 117 (process 4), but write(119) by process 2 completed at "), (
        lines
    )
