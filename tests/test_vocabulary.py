"""One vocabulary (issue 35 item 10): the nemesis names a user typed are the names every summary,
table and report shows (``lose-unfsynced``, not the op kind ``file`` or "file corrupted";
``clock-slow-leader``, not ``slow-leader``); ``chaos run`` and ``chaos gate`` take ``chaos sim``'s
names where they mean the same fault; the gate's table, the report and ``chaos serve`` show the DB
and nemesis options, so runs that differ only there are told apart. Real checkers, a real report,
a real HTTP index and the real commands; no Docker."""

from __future__ import annotations

import io
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

from chaos import nemesis
from chaos.history.checkers.perf import describe_nemesis
from chaos.history.checkers.registry import check_run
from chaos.history.op import Op
from chaos.history.report import faults as report_faults
from chaos.history.report.html import write_report
from chaos.history.report.serve import render_index
from chaos.history.report.summary import summary_table
from chaos.history.store import RunDir
from chaos.history.synth import register_history, write_run
from chaos.runner.gate import options_of_runs, print_table

MS = 1_000_000


def _styles(names: str) -> dict[str, Any]:
    """test.json's nemesis_styles as the runner writes them for ``--nemesis names``."""
    built, _ = nemesis.build(names, {"seed": 1})
    return nemesis.styles(names, built.names)


def _fault(ops: list[Op], kind: str, start: int, stop: int, value: dict[str, Any]) -> None:
    done = {**value, "nodes": ["n2", "n3"], "applied": True}
    ops += [
        Op("info", "nemesis", f"start-{kind}", value, start),
        Op("info", "nemesis", f"start-{kind}", done, start + MS),
        Op("info", "nemesis", f"stop-{kind}", None, stop),
        Op("info", "nemesis", f"stop-{kind}", {"nodes": ["n2", "n3"], "applied": True}, stop + MS),
    ]


def _run(
    tmp_path: Path, name: str, typed: str, faults: list[tuple[str, dict[str, Any]]], **opts: Any
) -> Path:
    ops, _ = register_history(300, keys=3, seed=7)
    span = ops[-1].time
    for i, (kind, value) in enumerate(faults):
        _fault(ops, kind, span // 4 + i * MS * 10, span // 2 + i * MS * 10, value)
    ops.sort(key=lambda o: o.time)
    for n, o in enumerate(ops):
        o.index = n
    test = {
        "workload": "register",
        "nemesis": typed,
        "nemesis_styles": _styles(typed),
        "nodes": ["n1", "n2", "n3"],
        "checkers": ["linear", "stats", "perf", "faults"],
        "opts": {"db_opts": opts.get("db_opts", []), "nemesis_opts": opts.get("nemesis_opts", {})},
    }
    return write_run(tmp_path / "store", name, f"20260101T00000{len(faults)}.000", ops, test)


def test_the_names_typed_are_recorded_for_each_op_kind() -> None:
    assert _styles("lose-unfsynced")["file"]["names"] == ["lose-unfsynced"]
    styles = _styles("clock-skew,clock-slow-leader,kill,kill-leader")
    assert styles["slow-leader"]["names"] == ["clock-slow-leader"]
    assert styles["clock"]["names"] == ["clock-skew"]
    assert styles["kill"]["names"] == ["kill", "kill-leader"]
    assert _styles("partition")["partition"]["names"] == ["partition"]  # an entry point, as typed


def test_every_table_and_page_says_the_fault_as_typed(tmp_path: Path) -> None:
    run_dir = _run(
        tmp_path,
        "register-lose-unfsynced+clock-slow-leader",
        "lose-unfsynced,clock-slow-leader",
        [("file", {"fault": "lose-unfsynced", "targets": "all"}), ("slow-leader", {"rate": 0.02})],
    )
    results = check_run(RunDir(run_dir))
    faults = results["checkers"]["faults"]
    assert {k: r["name"] for k, r in faults["kinds"].items()} == {
        "file": "lose-unfsynced",
        "slow-leader": "clock-slow-leader",
    }
    assert [w["name"] for w in faults["windows"]] == ["lose-unfsynced", "clock-slow-leader"]
    assert {r["kind"] for r in report_faults.kind_rows(results)} == {"lose-unfsynced", "clock-slow-leader"}
    assert [r["kind"] for r in report_faults.window_rows(results)] == ["lose-unfsynced", "clock-slow-leader"]
    # the terminal summary's tables (a run with faults shows them)
    out = io.StringIO()
    Console(file=out, width=200).print(summary_table(results, run_dir / "history.jsonl"))
    text = out.getvalue()
    assert "lose-unfsynced" in text and "clock-slow-leader" in text
    assert (
        "file corrupted" not in text
        and " file " not in text
        and "slow-leader " not in text.replace("clock-slow-leader", "")
    )
    # the report: lanes, labels and fault tables
    page = write_report(run_dir).read_text()
    data = json.loads(page.split('id="report-data" type="application/json">', 1)[1].split("</script>", 1)[0])
    assert [w["kind"] for w in data["nemesis"]] == ["lose-unfsynced", "clock-slow-leader"]
    assert all(w["label"].startswith(w["kind"]) for w in data["nemesis"])
    assert "<td>lose-unfsynced</td>" in page and "<td>file</td>" not in page
    assert "<td>clock-slow-leader</td>" in page and "<td>slow-leader</td>" not in page


def test_the_availability_sentences_say_the_fault_as_typed() -> None:
    styles = _styles("lose-unfsynced,clock-slow-leader,kill-leader")
    verbs = {k: s["verbs"] for k, s in styles.items()}
    names = {k: s["names"] for k, s in styles.items() if "names" in s}
    start = describe_nemesis("start-file", {"fault": "lose-unfsynced", "nodes": ["n2"]}, verbs, names)
    assert start == "lose-unfsynced on n2" and "corrupt" not in start
    assert describe_nemesis("start-slow-leader", {"nodes": ["n1"]}, verbs, names).startswith(
        "clock-slow-leader: "
    )
    assert describe_nemesis("start-kill", {"nodes": ["n1"], "targets": "leader"}, verbs, names) == (
        "kill-leader: leader n1 killed"
    )


# names chaos sim and chaos run share for the same fault (chaos_dledger/sim.py NEMESES)
SHARED = (
    "partition",
    "partition-leader",
    "kill",
    "kill-leader",
    "pause",
    "pause-leader",
    "clock-skew",
    "clock-slow-leader",
    "bitflip",
    "leader-transfer",
    "power-failure",
    "slow-network",
    "network",
)


def test_run_gate_and_sim_take_the_same_names_for_the_same_faults() -> None:
    from chaos_dledger.sim import NEMESES as SIM

    assert set(SHARED) <= set(SIM)
    assert nemesis.parse_names(",".join(SHARED)) == list(SHARED)
    built, _ = nemesis.build("power-failure", {})
    assert built.nemeses[0].lu_targets == ["all"]  # type: ignore[attr-defined]
    built, _ = nemesis.build("network,slow-network", {})
    assert set(built.nemeses[0].behaviours) == {"loss", "duplicate", "delay"}  # type: ignore[attr-defined]
    res = subprocess.run(
        [sys.executable, "-m", "chaos.cli", "gate", "--list", "--workload", "log", "--nemesis",
         "+".join(SHARED)],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert res.returncode == 0, res.stderr
    assert f"--nemesis {','.join(SHARED)}" in res.stdout


def test_runs_differing_only_in_options_are_told_apart(tmp_path: Path) -> None:
    lease = _run(tmp_path, "register-partition-leader", "partition-leader", [], db_opts=["read-mode=lease"])
    index = _run(
        tmp_path,
        "register-partition-leader",
        "partition-leader",
        [("partition", {"spec": "leader"})],
        db_opts=["read-mode=read-index"],
        nemesis_opts={"partition_targets": ["leader"]},
    )
    row = {"workload": "register", "nemesis": "partition-leader", "valid": True, "ops": 600, "ok_rate": 1.0,
           "p99_ms": 3.0, "max_unavailable_s": 0.0}  # fmt: skip
    summary = {"runs": [{**row, "run": "a", "dir": str(lease)}, {**row, "run": "b", "dir": str(index)}]}
    options_of_runs(summary)
    assert [r["options"] for r in summary["runs"]] == [
        "read-mode=lease",
        "read-mode=read-index; partition_targets=leader",
    ]
    out = io.StringIO()
    print_table(summary, out)
    assert "read-mode=lease" in out.getvalue() and "read-mode=read-index" in out.getvalue()
    html = render_index(tmp_path / "store")
    assert "read-mode=lease" in html and "read-mode=read-index; partition_targets=leader" in html
    write_report(index)
    assert "read-mode=read-index; partition_targets=leader" in (index / "index.html").read_text()


@pytest.mark.parametrize("typo", ["lose-unfsync", "clock-slow-leadr"])
def test_a_near_miss_names_the_fault_it_was_probably(typo: str) -> None:
    from chaos.errors import ConfigError

    with pytest.raises(ConfigError, match="did you mean"):
        nemesis.parse_names(typo)
