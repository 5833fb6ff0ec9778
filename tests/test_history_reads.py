"""A run's check and report read its history once (issue 37, item 3): the runner's end of a run
(history.txt, the checkers, index.html and its PNGs, the terminal summary) and ``chaos check RUN``
open ``history.jsonl`` at most 3 times, counted at the open calls themselves; the report pairs ops
with the checkers' one pairing, on ops, not dicts."""

from __future__ import annotations

import builtins
import io
import json
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from rich.console import Console

from chaos.history.op import Op
from chaos.history.report.run import pair_ops
from chaos.history.store import RunDir, pair
from chaos.history.synth import register_history, write_run
from chaos.runner.check import check_and_report

MS = 1_000_000


@contextmanager
def counting_opens(name: str = "history.jsonl") -> Iterator[list[str]]:
    """Every open of a file called ``name`` while the block runs (builtins.open, io.open, which
    Path.open uses, and os.open), as a list of the paths opened."""
    seen: list[str] = []
    real_open, real_io_open, real_os_open = builtins.open, io.open, os.open

    def note(path: Any) -> None:
        if isinstance(path, str | os.PathLike) and os.fspath(path).endswith(name):
            seen.append(os.fspath(path))  # type: ignore[arg-type]

    def b_open(file: Any, *a: Any, **k: Any) -> Any:
        note(file)
        return real_open(file, *a, **k)

    def i_open(file: Any, *a: Any, **k: Any) -> Any:
        note(file)
        return real_io_open(file, *a, **k)

    def o_open(path: Any, *a: Any, **k: Any) -> int:
        note(path)
        return real_os_open(path, *a, **k)

    builtins.open, io.open, os.open = b_open, i_open, o_open  # type: ignore[assignment]
    try:
        yield seen
    finally:
        builtins.open, io.open, os.open = real_open, real_io_open, real_os_open  # type: ignore[assignment]


def _nemesis(ops: list[Op], kind: str, start: int, stop: int) -> None:
    for f, t in ((f"start-{kind}", start), (f"stop-{kind}", stop)):
        ops.append(Op("info", "nemesis", f, None, t))
        ops.append(Op("info", "nemesis", f, {"nodes": ["n1"], "applied": True}, t + MS))


def _register_run(tmp_path: Path, violations: int = 0) -> Path:
    ops, _ = register_history(400, keys=4, seed=3, violations=violations)
    _nemesis(ops, "kill", ops[100].time, ops[300].time)
    ops.sort(key=lambda o: o.time)
    for n, o in enumerate(ops):
        o.index = n
    opts = {"checkers": ["linear", "stats", "perf"], "model": "cas-register", "nodes": ["n1", "n2", "n3"]}
    return write_run(tmp_path / "store", "register-kill", "20260101T000000.000", ops, opts)


def _list_append_run(tmp_path: Path) -> Path:
    ops: list[Op] = []
    t = 0
    for n in range(60):
        p = n % 3
        value = [["append", n % 5, n], ["r", n % 5, None]]
        ops.append(Op("invoke", p, "txn", value, t))
        t += MS
        seen = list(range(n % 5, n + 1, 5))
        ops.append(Op("ok", p, "txn", [["append", n % 5, n], ["r", n % 5, seen]], t))
        t += MS
    for n, o in enumerate(ops):
        o.index = n
    return write_run(
        tmp_path / "store", "list-append-none", "20260101T000000.000", ops, {"workload": "list-append"}
    )


@pytest.mark.parametrize("make", [_register_run, _list_append_run])
def test_the_runs_check_and_report_open_the_history_at_most_three_times(tmp_path: Path, make: Any) -> None:
    run = RunDir(make(tmp_path))
    said: list[str] = []
    out = io.StringIO()
    with counting_opens() as opens:
        results = check_and_report(
            run,
            time_limit=60.0,
            say=lambda text, **_: said.append(text),
            console=Console(file=out, width=100),
        )
    assert results["valid"] is True, results
    assert len(opens) <= 3, opens
    # each step did its part from that one read
    assert (run.path / "history.txt").is_file() and (run.path / "index.html").is_file()
    assert json.loads((run.path / "results.json").read_text())["valid"] is True
    assert out.getvalue().rstrip().splitlines()[-1].startswith("valid")
    assert any(s.startswith("report ") for s in said), said


def test_chaos_check_of_a_run_opens_its_history_at_most_three_times(tmp_path: Path) -> None:
    from chaos.history.report.cli import check

    run_dir = _register_run(tmp_path, violations=1)
    with counting_opens() as opens:
        res = CliRunner().invoke(check, [str(run_dir)])
    assert res.exit_code == 1, res.output
    assert len(opens) <= 3, opens
    assert "INVALID" in res.output.splitlines()[-1]


def test_the_report_pairs_ops_as_the_checkers_do(tmp_path: Path) -> None:
    ops, _ = register_history(200, keys=3, seed=5, info_rate=0.05)
    _nemesis(ops, "pause", ops[40].time, ops[80].time)
    ops.sort(key=lambda o: o.time)
    for n, o in enumerate(ops):
        o.index = n
    pairs, nem, end = pair_ops(ops)
    theirs = sorted(((inv.index, -1 if done is None else done.index) for inv, done in pair(ops)))
    ours = sorted([*zip(pairs.i, pairs.j, strict=True), *((d.i, d.j) for d in nem)])
    assert ours == theirs
    assert pairs.i == sorted(pairs.i)  # laid out in invocation order
    assert end == max(o.time for o in ops)
    assert [d.f for d in nem] == ["start-pause", "stop-pause"]
