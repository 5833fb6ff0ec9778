"""Issue 36 item 7: bad input that was not 254. Malformed transaction micro-ops were "unknown"
(exit 2) as if the checker could not decide; a ``--consistency-model`` that no checker reads was
silently ignored; ``chaos sim --nemesis partition,,kill`` was accepted; a schedule event without
``params`` or ``victims`` crashed with KeyError (255). Each is one line naming the input and what
was expected, exit 254."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from chaos.history.synth import register_history, write_run

CODE = "import sys; from chaos.cli import main; sys.exit(main())"


def chaos(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", CODE, *args], capture_output=True, text=True, timeout=300, cwd=cwd
    )


def _txn_jsonl(path: Path, invoked: object, completed: object) -> Path:
    ops = [
        {"index": 0, "type": "invoke", "process": 0, "f": "txn", "value": invoked, "time": 1},
        {"index": 1, "type": "ok", "process": 0, "f": "txn", "value": completed, "time": 2},
    ]
    path.write_text("".join(json.dumps(op) + "\n" for op in ops))
    return path


def _one_line(r: subprocess.CompletedProcess[str]) -> str:
    assert r.returncode == 254, (r.returncode, r.stdout, r.stderr)
    (line,) = r.stderr.strip().splitlines()
    assert "Traceback" not in r.stderr and "unknown" not in r.stdout
    return line


@pytest.mark.parametrize(
    "workload, invoked, completed, expected",
    [
        ("list-append", [["frob", "x", 1]], [["frob", "x", 1]], "unexpected f 'frob' (list-append has append and r)"),
        ("list-append", [{"f": "r", "k": "x"}], [{"f": "r", "k": "x"}], "is not [f, key, value]"),
        ("list-append", [["r", "x"]], [["r", "x"]], "is not [f, key, value]"),
        ("list-append", None, None, "is not a transaction (expected a list of [f, key, value] micro-ops)"),
        ("list-append", [["append", "x", None]], [["append", "x", None]], "appends null (expected a value)"),
        ("list-append", [["r", "x", None]], [["r", "x", 5]], "returned 5 (expected a list or null)"),
        ("rw-register", [["append", "x", 1]], [["append", "x", 1]], "unexpected f 'append' (rw-register has w and r)"),
        ("rw-register", [["w", "x", None]], [["w", "x", None]], "writes null (expected a value)"),
    ],
)  # fmt: skip
def test_malformed_micro_ops_are_bad_input_naming_file_and_line(
    tmp_path: Path, workload: str, invoked: object, completed: object, expected: str
) -> None:
    h = _txn_jsonl(tmp_path / "h.jsonl", invoked, completed)
    line = _one_line(chaos("check", str(h), "--workload", workload))
    assert line.startswith(f"chaos: malformed history: {h}: line 2: {workload} transaction: "), line
    assert expected in line, line


def test_malformed_micro_ops_in_a_stored_run_and_in_edn_are_bad_input(tmp_path: Path) -> None:
    run = tmp_path / "store" / "la" / "20260101T000000.000"
    run.mkdir(parents=True)
    _txn_jsonl(run / "history.jsonl", [["frob", "x", 1]], [["frob", "x", 1]])
    (run / "test.json").write_text(json.dumps({"name": "la", "workload": "list-append", "nemesis": "none"}))
    line = _one_line(chaos("check", str(run)))
    assert f"{run / 'history.jsonl'}: line 2: list-append transaction: micro-op" in line, line

    edn = tmp_path / "h.edn"
    edn.write_text(
        "{:process 0, :type :invoke, :f :txn, :value [[:append :x 1]]}\n"
        "{:process 0, :type :ok, :f :txn, :value [[:append :x 1]]}\n"
    )
    line = _one_line(chaos("check", str(edn), "--workload", "rw-register"))
    assert f"{edn}: line 2: rw-register transaction:" in line and "unexpected f 'append'" in line, line


def test_a_well_formed_txn_history_still_checks(tmp_path: Path) -> None:
    h = _txn_jsonl(
        tmp_path / "h.jsonl", [["append", "x", 1], ["r", "x", None]], [["append", "x", 1], ["r", "x", [1]]]
    )
    r = chaos("check", str(h), "--workload", "list-append")
    assert r.returncode == 2 and "empty-transaction-graph" in r.stdout, (
        r.stdout,
        r.stderr,
    )  # one txn: Elle's unknown


# -- --consistency-model where no elle checker reads it -------------------------------------------


def test_consistency_model_on_a_register_run_is_refused(tmp_path: Path) -> None:
    ops, _ = register_history(60, keys=2, processes=2, seed=3, violations=0)
    run = write_run(tmp_path / "store", "register-synth", "20260101T000000.000", ops, {})
    line = _one_line(chaos("check", str(run), "--consistency-model", "serializable"))
    assert line.startswith(
        "chaos: --consistency-model serializable: the register workload is not checked by elle"
    )
    assert not (run / "results.json").exists()

    line = _one_line(chaos("check", str(run / "history.jsonl"), "--consistency-model", "serializable"))
    assert "--consistency-model serializable" in line

    # chaos run refuses before any node is touched (no cluster of this name exists)
    r = chaos(
        "run", "--workload", "register", "--consistency-model", "serializable", "--cluster-name", "tnocm",
        "--time-limit", "1", "--no-live", "--store", str(tmp_path / "runs"),
    )  # fmt: skip
    line = _one_line(r)
    assert line.startswith(
        "chaos: --consistency-model serializable: the register workload is not checked by elle"
    )
    assert not (tmp_path / "runs").exists()


# -- chaos sim ---------------------------------------------------------------------------------


@pytest.mark.parametrize("nemesis", ["partition,,kill", "partition,", ",kill"])
def test_sim_refuses_an_empty_nemesis_name(nemesis: str) -> None:
    line = _one_line(chaos("sim", "--seed", "1", "--nemesis", nemesis, "--time-limit", "1"))
    assert line.startswith(f"chaos: --nemesis {nemesis!r}: an empty name; expected"), line


@pytest.mark.parametrize(
    "event, expected",
    [
        ({"at": 5, "op": "start", "kind": "kill"}, "'params' of a kill start must be {\"victims\""),
        ({"at": 5, "op": "start", "kind": "kill", "params": {}}, "'params' of a kill start"),
        ({"at": 5, "op": "start", "kind": "kill", "params": {"victims": ["n9"]}}, "members s1, s2"),
        ({"at": 5, "op": "start", "kind": "partition"}, "'params' of a partition start must be a list of sides"),
        ({"at": 5, "op": "start", "kind": "clog", "params": {"node": "s1"}}, "'params' of a clog start"),
        ({"at": 5, "op": "start", "kind": "clock-skew", "params": {"s1": "fast"}}, "clock rate"),
        ({"at": 5, "op": "start", "kind": "pause-round", "params": {"node": "s1"}}, "a pause point"),
    ],
)  # fmt: skip
def test_a_schedule_event_without_its_params_is_one_line(tmp_path: Path, event: dict, expected: str) -> None:
    f = tmp_path / "schedule.json"
    f.write_text(json.dumps([event]))
    r = chaos(
        "sim", "--seed", "1", "--workload", "register", "--nemesis", f"{event['kind']}", "--schedule", str(f),
        "--time-limit", "2", "--store", str(tmp_path / "store"),
    )  # fmt: skip
    line = _one_line(r)
    assert line.startswith(f"chaos: --schedule {f}: event 0 "), line
    assert expected in line, line


def test_a_well_formed_schedule_still_replays(tmp_path: Path) -> None:
    f = tmp_path / "schedule.json"
    events = [
        {"at": 500, "op": "start", "kind": "kill", "params": {"victims": ["s1"], "damage": None}},
        {"at": 1500, "op": "stop", "kind": "kill"},
    ]
    f.write_text(json.dumps(events))
    r = chaos(
        "sim", "--seed", "1", "--workload", "register", "--nemesis", "kill", "--schedule", str(f),
        "--time-limit", "3", "--store", str(tmp_path / "store"),
    )  # fmt: skip
    assert r.returncode == 0, (r.stdout, r.stderr)
