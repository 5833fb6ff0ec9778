"""``chaos check`` as a real subprocess: exit status 0/1/2/254 and the printed verdict."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from test_history_util import Builder

from chaos.history.store import RunDir

ROOT = Path(__file__).resolve().parent.parent


def _chaos(*args: str | Path, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    exe = shutil.which("chaos")
    argv = [exe] if exe else [sys.executable, "-m", "chaos.cli"]
    return subprocess.run([*argv, "check", *map(str, args)], capture_output=True, text=True, timeout=timeout)


REPORT_TIMEOUT = 600  # a run's check writes its report (plots: matplotlib) too; a loaded CI machine


def _log(path: Path, final: list[int] | None) -> Path:
    b = Builder()
    for v in range(4):
        b.append(v % 2, v, log_index=v)
    if final is not None:
        b.read(5, "n1", final)
    return b.write(path)


def test_valid_history_file_exits_0(tmp_path: Path) -> None:
    r = _chaos(_log(tmp_path / "h.jsonl", [0, 1, 2, 3]))
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert lines[-1] == f"valid: {tmp_path / 'h.jsonl'} (log)"  # the verdict last, as Jepsen's
    assert lines[0].split()[:2] == ["log", "valid"]


def test_invalid_history_file_exits_1(tmp_path: Path) -> None:
    r = _chaos(_log(tmp_path / "h.jsonl", [0, 1, 3]))
    assert r.returncode == 1, r.stderr
    assert r.stdout.splitlines()[-1].startswith("INVALID: ")
    assert "log      INVALID  1 lost" in r.stdout
    assert "    lost 2 (invoke op 4, complete op 5, acknowledged but missing from the final log)" in r.stdout


def test_unknown_history_file_exits_2(tmp_path: Path) -> None:
    r = _chaos(_log(tmp_path / "h.jsonl", None))
    assert r.returncode == 2, r.stderr
    assert r.stdout.splitlines()[-1].startswith("unknown: ")


def test_malformed_history_file_exits_254_with_the_line(tmp_path: Path) -> None:
    path = tmp_path / "h.jsonl"
    rows = [
        {"index": 0, "type": "invoke", "process": 0, "f": "append", "value": 1, "time": 1},
        {"index": 1, "type": "ok", "process": 0, "f": "append", "value": 1, "time": 2},
        {"index": 2, "type": "invoke", "process": 0, "f": "append", "value": 2, "time": 3},
        {"index": 3, "type": "invoke", "process": 0, "f": "append", "value": 3, "time": 4},
    ]
    path.write_text("".join(json.dumps(x) + "\n" for x in rows))
    r = _chaos(path)
    assert r.returncode == 254
    assert r.stderr.splitlines() == [
        f"chaos: malformed history: {path}: line 4: two open invocations on process 0: 'append' invoked "
        "while 'append' (op 2) has not completed"
    ]
    assert r.stdout == ""


def test_run_directory_is_rechecked_and_results_rewritten(tmp_path: Path) -> None:
    store = tmp_path / "store"
    run = RunDir.create(store, "log-kill")
    run.write_test({"workload": "log"})
    _log(run.history_path, [0, 1, 2, 3, 3])
    r = _chaos(store / "latest", timeout=REPORT_TIMEOUT)
    assert r.returncode == 1, r.stderr
    res = run.load_results()
    assert res["valid"] is False and res["checkers"]["log"]["duplicated"][0]["value"] == 3
    assert set(res["checkers"]) == {"log", "log-reads", "stats", "perf", "faults", "client-errors"}


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--format", "xml", "h.jsonl"], "Invalid value for '--format'"),
        (["missing.jsonl"], "no such run directory or history file"),
        (["--time-limit", "0", "h.jsonl"], "--time-limit must be a positive number"),
        (["--model", "nope", "h.jsonl"], "unknown model 'nope'"),
    ],
)
def test_bad_arguments_exit_254(tmp_path: Path, args: list[str], message: str) -> None:
    _log(tmp_path / "h.jsonl", [0, 1, 2, 3])
    r = _chaos(*[str(tmp_path / a) if a.endswith(".jsonl") else a for a in args])
    assert r.returncode == 254
    assert message in r.stderr


def test_porcupine_and_knossos_files(shared_data: Path) -> None:
    etcd = shared_data / "porcupine" / "test_data" / "jepsen"
    ok = _chaos(etcd / "etcd_002.log")
    assert ok.returncode == 0, ok.stderr + ok.stdout
    bad = _chaos("--format", "porcupine-etcd", etcd / "etcd_000.log")
    assert bad.returncode == 1 and "linear   INVALID  1 not linearizable: key all" in bad.stdout
    knossos = _chaos(shared_data / "knossos" / "data" / "cas-register" / "bad" / "bad-analysis.edn")
    assert knossos.returncode == 1


def test_register_history_without_test_json_is_checked_linearizable(tmp_path: Path) -> None:
    def hist(read_value: int) -> Path:
        b = Builder()
        b.op("invoke", 0, "write", 1, key=7)
        b.op("ok", 0, "write", 1, key=7)
        b.op("invoke", 2, "cas", [1, 3], key=7)
        b.op("ok", 2, "cas", [1, 3], key=7)
        b.op("invoke", 1, "read", None, key=7)
        b.op("ok", 1, "read", read_value, key=7)
        return b.write(tmp_path / f"r{read_value}.jsonl")

    ok = _chaos(hist(3))
    assert ok.returncode == 0, ok.stdout
    assert "(register)" in ok.stdout.splitlines()[-1]
    assert "linear   valid" in ok.stdout
    bad = _chaos(hist(2))
    assert bad.returncode == 1 and "linear   INVALID  1 not linearizable: key 7" in bad.stdout


def test_a_history_files_check_starts_without_what_it_does_not_use(tmp_path: Path) -> None:
    """Start-up (issue 38): a history file's check on a pipe prints its summary without the HTML
    report's templates (jinja2), the table library (rich) or a scan of the installed
    distributions' entry points (importlib.metadata) for the tool's own names."""
    b = Builder()
    b.op("invoke", 0, "write", 1, key=7)
    b.op("ok", 0, "write", 1, key=7)
    b.op("invoke", 1, "read", None, key=7)
    b.op("ok", 1, "read", 1, key=7)
    path = b.write(tmp_path / "h.jsonl")
    code = (
        "import sys\n"
        "from chaos.cli import main\n"
        "try:\n"
        f"    main(['check', {str(path)!r}])\n"
        "except SystemExit as e:\n"
        "    print('exit', e.code)\n"
        "print('loaded', *sorted(m for m in ('jinja2', 'rich', 'importlib.metadata') if m in sys.modules))\n"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    lines = r.stdout.splitlines()
    assert lines[-3:] == [f"valid: {path} (register)", "exit 0", "loaded"], r.stdout + r.stderr


def test_only_a_check_that_can_run_no_plugin_goes_without_the_supervisor(tmp_path: Path) -> None:
    """``chaos check`` of a history file with the tool's own options runs in one process; a
    ``--model`` (a plug-in's name or module:attr), a run directory or a history beside a test.json
    (which may name plug-in checkers), another option or command keeps the supervisor."""
    from chaos.cli import runs_plugins

    h = _log(tmp_path / "h.jsonl", [0, 1, 2, 3])
    run = tmp_path / "run"
    run.mkdir()
    (run / "test.json").write_text("{}")
    beside = _log(run / "history.jsonl", [0, 1, 2, 3])
    assert not runs_plugins(["check", str(h)])
    assert not runs_plugins(["check", "--format", "jsonl", "--fail-fast", "--workers=1", str(h)])
    assert not runs_plugins(["check", "--workload", "log", "--time-limit", "5", str(h)])
    for args in (
        ["check", "--model", "register", str(h)],
        ["check", "--model=plug:M", str(h)],
        ["check", str(run)],
        ["check", str(beside)],
        ["check"],
        ["check", str(h), str(h)],
        ["check", "--help"],
        ["check", str(tmp_path / "missing.jsonl")],
        ["run", "--workload", "register"],
        [],
    ):
        assert runs_plugins(args), args


def test_a_plugin_checker_ending_a_runs_check_is_a_crash_not_a_pass(tmp_path: Path) -> None:
    """A run's check stays supervised: a checker its test.json names (module:attr) whose factory
    calls os._exit(0) makes exit 255, one line naming it, never a pass."""
    (tmp_path / "exitcheck.py").write_text("import os\n\n\ndef checker():\n    os._exit(0)\n")
    run = tmp_path / "run"
    run.mkdir()
    _log(run / "history.jsonl", [0, 1, 2, 3])
    (run / "test.json").write_text(json.dumps({"workload": "log", "checkers": ["exitcheck:checker"]}))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), str(ROOT)])}
    env.pop("CHAOS_NO_SUPERVISOR", None)
    r = subprocess.run(
        [sys.executable, "-m", "chaos.cli", "check", str(run)],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert r.returncode == 255, (r.returncode, r.stdout, r.stderr)
    assert "crashed:" in r.stderr and "exitcheck.checker" in r.stderr, r.stderr


CORPUS = Path(__file__).resolve().parent / "data" / "verdicts"


@pytest.mark.parametrize("workers", ["1", "3"])
def test_two_hard_keys_are_unknown_with_any_number_of_workers(tmp_path: Path, workers: str) -> None:
    """Issue 12: 2 keys, each 40 crashed writes then a read of a value nobody wrote, --time-limit 5:
    unknown, exit 2, whether the keys are checked in this process or in worker processes."""
    run = tmp_path / "run"
    shutil.copytree(CORPUS / "register-undecided", run)
    r = _chaos("--time-limit", "5", "--workers", workers, run, timeout=REPORT_TIMEOUT)
    assert r.returncode == 2, r.stdout + r.stderr
    assert r.stdout.splitlines()[-1].startswith(f"unknown: {run}")
    assert "ops by f and type" in r.stdout  # the run summary chaos run prints
    assert "linear   unknown  undecided: 2 keys: 0, 1" in r.stdout
    linear = json.loads((run / "results.json").read_text())["checkers"]["linear"]
    assert sorted(linear["unknown"]) == ["0", "1"] and linear["failures"] == []
    assert all(k["valid"] == "unknown" and k["cause"] == "timeout" for k in linear["keys"].values())


def test_a_history_that_does_not_tell_its_model_asks_for_model(tmp_path: Path) -> None:
    path = tmp_path / "mixed.jsonl"
    shutil.copyfile(CORPUS / "mixed-workloads.jsonl", path)
    r = _chaos(path)
    assert r.returncode == 254 and r.stdout == ""
    assert r.stderr.splitlines() == [
        f"chaos: malformed history: {path}: cannot tell the model from the client ops' fs "
        "(append, cas, read, write: no single workload uses all of them); "
        "pass --model (register, cas-register, append-log, set, mutex, ...)"
    ]
    r = _chaos("--model", "cas-register", path)
    assert r.returncode == 254
    assert r.stderr.splitlines() == [
        f"chaos: malformed history: {path}: line 7: client op f 'append' is not one the cas-register "
        "model checks (it checks cas, delete, get, put, read, write; --model picks another model)"
    ]
    r = _chaos("--workers", "0", path)
    assert r.returncode == 254 and r.stderr.splitlines() == ["chaos: --workers must be at least 1, got 0"]


def test_an_op_the_model_cannot_check_names_its_line(tmp_path: Path) -> None:
    """A cas whose value is not [expected, new]: bad input (254) naming the file and line, in a run
    directory (JSON Lines, blank line skipped) and in an EDN file; never a checker crash or exit 1."""
    run = tmp_path / "run"
    run.mkdir()
    (run / "test.json").write_text('{"workload": "register"}')
    rows = [
        {"index": 0, "type": "invoke", "process": 0, "f": "write", "value": 1, "time": 1},
        {"index": 1, "type": "ok", "process": 0, "f": "write", "value": 1, "time": 2},
        {"index": 2, "type": "invoke", "process": 1, "f": "cas", "value": 5, "time": 3},
        {"index": 3, "type": "ok", "process": 1, "f": "cas", "value": 5, "time": 4},
    ]
    lines = [json.dumps(x) + "\n" for x in rows]
    (run / "history.jsonl").write_text("".join(lines[:2]) + "\n" + "".join(lines[2:]))
    r = _chaos(run)
    assert r.returncode == 254 and r.stdout == ""
    assert r.stderr.splitlines() == [
        f"chaos: malformed history: {run / 'history.jsonl'}: line 4: model cas-register: op 2 (process 1) "
        "has f='cas' value=5; expected cas value [expected, new]; pass --model"
    ]
    edn = tmp_path / "h.edn"
    edn.write_text(
        "[{:process 0, :type :invoke, :f :write, :value 1}\n {:process 0, :type :ok, :f :write, :value 1}\n"
        " {:process 1, :type :invoke, :f :cas, :value 5}\n {:process 1, :type :ok, :f :cas, :value 5}]\n"
    )
    r = _chaos(edn)
    assert r.returncode == 254 and f"{edn}: line 3: model cas-register: op 2" in r.stderr
    assert len(r.stderr.splitlines()) == 1


def test_porcupine_kv_logs_read_line_by_line_as_the_edn_reader_reads_them(shared_data: Path) -> None:
    """The kv logs in their written shape are read by one pattern per line: the same ops as the
    EDN reader gives, on every log porcupine ships; a line of another shape falls back to it."""
    from chaos.history import formats

    logs = sorted((shared_data / "porcupine" / "test_data" / "kv").glob("*.txt"))
    assert len(logs) == 6
    for log in logs:
        assert formats._kv_fast(log) == list(formats._edn_ops(log)), log
    assert formats._kv_fast(shared_data / "porcupine" / "test_data" / "jepsen" / "etcd_000.log") is None


def test_a_history_files_summary_on_a_pipe_is_the_text_rich_writes(shared_data: Path, tmp_path: Path) -> None:
    """On a pipe, chaos check writes a history file's summary as plain text (no rich import),
    which is exactly what rich writes there: checker lines, counterexample, verdict; names with
    markup, non-ASCII letters, control characters or an emoji code (left to rich) included."""
    import io

    from chaos.history.report import summary
    from chaos.history.report.cli import run_check

    kv = shared_data / "porcupine" / "test_data" / "kv"
    for src, name in (("c50-bad", "c50 \u00e9 [b]x \x1b.txt"), ("c01-ok", "ok :smile:.txt")):
        path = tmp_path / name
        shutil.copy(kv / f"{src}.txt", path)
        results, where, _ = run_check(path, model=None, fmt="porcupine-kv", time_limit=None, workers=1)
        rich = io.StringIO()
        summary.print_run_summary(summary.console(rich), results, None, where)
        r = _chaos("--format", "porcupine-kv", "--workers", "1", path)
        assert r.returncode == (1 if src.endswith("bad") else 0), r.stderr
        assert r.stdout == rich.getvalue()


def _report_verdict(run: RunDir) -> str:
    import re

    m = re.search(r'<body data-verdict="([a-z]+)"', (run.path / "index.html").read_text())
    assert m, "no verdict in the report"
    return m.group(1)


def test_check_writes_the_report_again_three_views_one_verdict(tmp_path: Path) -> None:
    """Issue 35 item 3: ``chaos check`` rewrote results.json, not index.html, and still printed the
    report's path: a run forced to unknown kept a green VALID report. The report is written again
    from the new results: the report, the check's output and results.json say one verdict."""
    from chaos.history.report.html import write_report

    store = tmp_path / "store"
    run = RunDir.create(store, "log-kill")
    run.write_test({"workload": "log"})
    b = Builder()
    for v in range(4):
        b.append(v % 2, v, log_index=v)
    b.read(5, "n1", [0, 1, 2, 3])
    b.write(run.history_path)
    first = _chaos(run.path, timeout=REPORT_TIMEOUT)
    assert first.returncode == 0, first.stdout + first.stderr
    write_report(run.path)
    assert _report_verdict(run) == "valid"
    # the run turns out to have asked for a fault that never took effect: unknown
    b.nemesis("start-kill", "leader", {"applied": False, "why": "no server running"})
    b.write(run.history_path)
    r = _chaos(run.path, timeout=REPORT_TIMEOUT)
    assert r.returncode == 2, r.stdout + r.stderr
    assert r.stdout.splitlines()[-1] == f"unknown: {run.path}"  # the verdict line last, short
    assert r.stdout.splitlines()[-2].startswith("results in results.json, report ")
    assert run.load_results()["valid"] == "unknown"
    assert _report_verdict(run) == "unknown"


def _txn_run(tmp_path: Path) -> RunDir:
    """A list-append run whose two sequential transactions are strict-serializable, checked."""
    run = RunDir.create(tmp_path / "store", "list-append")
    run.write_test({"workload": "list-append", "consistency_model": "strict-serializable"})
    ops = []
    for i, (inv, done) in enumerate(
        [([["append", "x", 1], ["r", "y", None]], [["append", "x", 1], ["r", "y", None]]),
         ([["r", "x", None]], [["r", "x", [1]]])]
    ):  # fmt: skip
        ops.append({"index": 2 * i, "type": "invoke", "process": i, "f": "txn", "value": inv, "time": 10 * i})
        ops.append(
            {"index": 2 * i + 1, "type": "ok", "process": i, "f": "txn", "value": done, "time": 10 * i + 5}
        )
    run.history_path.write_text("".join(json.dumps(o) + "\n" for o in ops))
    r = _chaos(run.path, timeout=REPORT_TIMEOUT)
    assert r.returncode == 0, r.stdout + r.stderr
    return run


def test_a_recheck_under_another_model_writes_beside_the_runs_results(tmp_path: Path) -> None:
    """Issue 34: ``chaos check RUN --consistency-model X`` overwrote the run's results.json; the
    re-check under another model goes to results-X.json, the run's results and report stay."""
    run = _txn_run(tmp_path)
    before = run.results_path.read_bytes()
    report = (run.path / "index.html").read_bytes()
    r = _chaos(run.path, "--consistency-model", "serializable", timeout=REPORT_TIMEOUT)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "results in results-serializable.json; the run's results.json and report unchanged" in r.stdout
    assert run.results_path.read_bytes() == before and (run.path / "index.html").read_bytes() == report
    other = json.loads((run.path / "results-serializable.json").read_text())
    assert other["checkers"]["elle"]["consistency_model"] == "serializable"
    assert run.load_results()["checkers"]["elle"]["consistency_model"] == "strict-serializable"
    # the run's own model is the run's own check: results.json, written again
    r = _chaos(run.path, "--consistency-model", "strict-serializable", timeout=REPORT_TIMEOUT)
    assert r.returncode == 0 and "results in results.json" in r.stdout


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--workload", "register"], "--workload register contradicts the run (workload list-append)"),
        (["--format", "edn"], "--format edn contradicts the run: a run directory's history is jsonl"),
        (
            ["--model", "register"],
            "--model register is a linearizability model; the run (workload list-append)",
        ),
    ],
)
def test_an_option_contradicting_test_json_is_refused(tmp_path: Path, args: list[str], message: str) -> None:
    """Issue 35 item 7: ``chaos check RUN --workload ...`` naming another workload than the run's
    test.json was silently ignored: one line, 254, and nothing written."""
    run = _txn_run(tmp_path)
    before = run.results_path.read_bytes()
    r = _chaos(run.path, *args)
    assert r.returncode == 254, r.stdout + r.stderr
    assert r.stderr.splitlines() == [f"chaos: {r.stderr.split('chaos: ', 1)[1].strip()}"]
    assert message in r.stderr and r.stdout == ""
    assert run.results_path.read_bytes() == before
    assert sorted(p.name for p in run.path.glob("results*.json")) == ["results.json"]


def test_a_register_run_refuses_a_consistency_model(tmp_path: Path) -> None:
    store = tmp_path / "store"
    run = RunDir.create(store, "log-kill")
    run.write_test({"workload": "log"})
    _log(run.history_path, [0, 1, 2, 3])
    r = _chaos(run.path, "--consistency-model", "serializable", timeout=REPORT_TIMEOUT)
    assert r.returncode == 254 and "the log workload is not checked by elle" in r.stderr
    assert r.stdout == "" and not run.results_path.exists()
    ok = _chaos(
        run.path, "--workload", "log", timeout=REPORT_TIMEOUT
    )  # agreeing with test.json is no contradiction
    assert ok.returncode == 0, ok.stdout + ok.stderr


def test_a_run_without_test_json_takes_a_consistency_model(tmp_path: Path) -> None:
    """A run whose workload only its history tells (no test.json) has nothing to contradict: its
    re-check under a model goes beside, as any re-check under a model the run was not checked at."""
    run = RunDir.create(tmp_path / "store", "bare")
    txn = [["append", "x", 1]]
    ops = [
        {"index": 0, "type": "invoke", "process": 0, "f": "txn", "value": txn, "time": 1},
        {"index": 1, "type": "ok", "process": 0, "f": "txn", "value": txn, "time": 2},
    ]
    run.history_path.write_text("".join(json.dumps(o) + "\n" for o in ops))
    r = _chaos(run.path, "--consistency-model", "serializable", timeout=REPORT_TIMEOUT)
    assert r.returncode in (0, 2), r.stdout + r.stderr
    assert (run.path / "results-serializable.json").is_file() and not run.results_path.exists()


@pytest.mark.parametrize("workload", ["bank", "counter", "long-fork"])
def test_check_takes_every_run_workload_with_a_checker_of_its_own(workload: str, tmp_path: Path) -> None:
    """``chaos check --workload`` offers Jepsen's bank, counter and long-fork as ``chaos run`` does
    (audit: only the inferred workload could check them), each judged by its own checker."""
    from click.testing import CliRunner

    from chaos_dledger.sim import sim

    r = CliRunner().invoke(
        sim,
        [
            "--workload",
            workload,
            "--nemesis",
            "none",
            "--seed",
            "1",
            "--time-limit",
            "2",
            "--store",
            str(tmp_path),
        ],
    )
    assert r.exit_code == 0, r.output
    (run,) = tmp_path.glob("*/latest")
    history = tmp_path / "h.jsonl"
    history.write_bytes((run / "history.jsonl").read_bytes())
    p = subprocess.run(
        [sys.executable, "-m", "chaos.cli", "check", str(history), "--workload", workload],
        capture_output=True,
        text=True,
        check=False,
    )
    assert p.returncode == 0, p.stdout + p.stderr
    assert re.search(rf"^\s+{workload}\s+valid", p.stdout, re.M), p.stdout
