"""The Spark pipeline with a real local Spark: verdicts equal the in-process checkers', the gate's
exit status follows the runs, and the SQL statistics describe the histories."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from chaos.history.op import Op
from chaos.history.synth import register_history, write_run

pytestmark = [pytest.mark.spark, pytest.mark.slow]


@pytest.fixture(scope="module")
def spark():
    from chaos.history.spark.session import spark_session

    # getOrCreate: every Spark test module of the session shares this JVM; the process ends it
    return spark_session("local[2]")


def chaos_here(capsys: pytest.CaptureFixture[str], *args: object) -> tuple[int, str, str]:
    """``chaos ARGS`` in this process, reusing the running Spark session: (exit, stdout, stderr)."""
    from chaos.cli import main

    with pytest.raises(SystemExit) as e:
        main([str(a) for a in args])
    out = capsys.readouterr()
    code = e.value.code
    return (code if isinstance(code, int) else 0), out.out, out.err


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> tuple[Path, list[Path], dict[str, list[str]]]:
    from chaos.history.spark.tasks import run_id

    store = tmp_path_factory.mktemp("store")
    dirs, expected = [], {}
    for i, violations in enumerate([0, 2, 0]):
        ops, violated = register_history(2000, keys=12, processes=6, seed=100 + i, violations=violations)
        if i == 2:
            # a nemesis window around the middle of the run, for the per-fault statistics
            mid = ops[len(ops) // 2].time
            for t, f in ((mid, "start-partition"), (mid + 5_000_000, "stop-partition")):
                ops.append(Op(type="info", process="nemesis", f=f, value={"grudge": {}}, time=t))
                ops.append(Op(type="info", process="nemesis", f=f, value="done", time=t + 1))
            ops.sort(key=lambda op: op.time)
            for n, op in enumerate(ops):
                op.index = n
        run_dir = write_run(
            store, "register-synth", f"2026010{i}T000000.000", ops, {"nemesis": "partition-ring"}
        )
        dirs.append(run_dir)
        expected[run_id(run_dir)] = sorted(str(k) for k in violated)
    return store, dirs, expected


@pytest.fixture(scope="module")
def analyzed(spark, runs, tmp_path_factory) -> tuple[dict, Path]:
    from chaos.history.spark.pipeline import analyze

    _, dirs, _ = runs
    out = tmp_path_factory.mktemp("analysis") / "out"
    return analyze(dirs, out=out, spark=spark), out


def test_spark_verdicts_equal_in_process_checker(spark, runs, analyzed):
    from chaos.history.checkers.registry import check_run
    from chaos.history.spark.tasks import run_id

    _, dirs, expected = runs
    summary, out = analyzed
    for run_dir in dirs:
        rid = run_id(run_dir)
        spark_result = summary["verdicts"][rid]
        local_result = check_run(run_dir)
        assert spark_result["valid"] == local_result["valid"], rid
        # every checker of the workload ran, each with chaos check's verdict
        assert list(spark_result["checkers"]) == list(local_result["checkers"])
        assert {"linear", "stats", "perf"} <= set(local_result["checkers"])
        for name, res in local_result["checkers"].items():
            assert spark_result["checkers"][name]["valid"] == res["valid"], (rid, name)
        assert (
            spark_result["checkers"]["perf"]["availability"]
            == local_result["checkers"]["perf"]["availability"]
        )
        assert sorted(spark_result["checkers"]["linear"]["failures"]) == expected[rid]
        # every key is checked in one process too (issue 25): the same non-linearizable keys
        assert sorted(local_result["checkers"]["linear"]["failures"]) == expected[rid]
        assert local_result["checkers"]["linear"]["unknown"] == []
    assert [r["valid"] for r in summary["runs"]] == [True, False, True]
    assert summary["valid"] is False
    matrix = summary["matrix"]
    assert matrix == [
        {**matrix[0], "workload": "register", "nemesis": "partition-ring", "runs": 3, "pass_rate": 2 / 3}
    ]
    assert (out / "history.parquet").is_dir()
    assert (out / "summary.parquet").is_dir()
    assert json.loads((out / "summary.json").read_text())["valid"] is False
    assert "invalid" in (out / "index.html").read_text()
    # Parquet is partitioned by run and keeps every op
    parquet = spark.read.parquet(str(out / "history.parquet"))
    assert parquet.select("run").distinct().count() == 3
    assert parquet.count() == sum(len((d / "history.jsonl").read_text().splitlines()) for d in dirs)
    rows = spark.read.parquet(str(out / "summary.parquet")).collect()
    assert sorted(json.loads(r["valid"]) for r in rows) == [False, True, True]


def test_without_the_ops_parquet_the_summary_is_the_same(spark, runs, analyzed, tmp_path):
    """``ops_parquet=False`` writes no ``history.parquet`` (and removes an earlier analysis' one)
    and changes nothing the summary holds."""
    from chaos.history.spark.pipeline import analyze

    _, dirs, _ = runs
    summary, _ = analyzed
    out = tmp_path / "out"
    (out / "history.parquet").mkdir(parents=True)  # an earlier analysis' ops
    lean = analyze(dirs, out=out, spark=spark, ops_parquet=False)
    assert not (out / "history.parquet").exists()
    assert (out / "summary.parquet").is_dir()
    for key in ("valid", "runs", "matrix"):
        assert lean[key] == summary[key], key
    verdicts = lambda s: {  # noqa: E731  (timings differ between two analyses)
        rid: {name: res["valid"] for name, res in v["checkers"].items()} for rid, v in s["verdicts"].items()
    }
    assert verdicts(lean) == verdicts(summary)


def test_spark_statistics(runs, analyzed):
    from chaos.history.spark.tasks import run_id

    _, dirs, _ = runs
    summary, _ = analyzed
    rid = run_id(dirs[2])
    lat = {row["f"]: row for row in summary["perf"]["latency"] if row["run"] == rid}
    assert set(lat) == {"read", "write", "cas"}
    ops = [json.loads(line) for line in (dirs[2] / "history.jsonl").read_text().splitlines()]
    reads = sum(1 for op in ops if op["f"] == "read" and op["type"] == "invoke")
    assert lat["read"]["n"] == reads
    for row in lat.values():
        assert 0 < row["p50"] <= row["p95"] <= row["p99"] <= row["max"]
    faults = {row["fault"] for row in summary["perf"]["by_fault"] if row["run"] == rid}
    assert faults == {"none", "partition"}
    run = next(r for r in summary["runs"] if r["run"] == rid)
    assert 0 < run["ok_rate"] <= 1
    # the longest unavailability is the perf checker's (the one analysis core), not a second rule
    perf = summary["verdicts"][rid]["checkers"]["perf"]
    assert run["max_unavailable_s"] == perf["availability"]["longest_s"] > 0
    throughput = [row for row in summary["perf"]["throughput"] if row["run"] == rid]
    assert sum(row["ok"] for row in throughput) == sum(r["ok"] for r in lat.values())


def test_statistics_of_the_executors_equal_spark_sql_over_the_ops(spark, analyzed):
    """The latency, per-fault and throughput rows the executors computed per run (run_stats)
    equal those Spark SQL builds from every op in the Parquet (window function, join on the
    fault windows)."""
    from chaos.history.spark.stats import perf, read_ops_parquet

    summary, out = analyzed
    from_ops = perf(read_ops_parquet(spark, out / "history.parquet"), summary["verdicts"])
    for table in ("latency", "by_fault", "throughput"):
        assert from_ops[table] == summary["perf"][table], table
    assert summary["perf"]["by_fault"]


def test_spark_fault_windows_follow_the_core_rule(spark, tmp_path):
    """Windows as Spark joins on them equal chaos.history.analysis's on the same history, including
    a start completing while its kind is in force, a stop with nothing open and a window left open."""
    from chaos.history.analysis import fault_windows as core_windows
    from chaos.history.spark.stats import fault_windows, read_ops_parquet, windows_frame
    from chaos.history.spark.tasks import check_on_executors
    from chaos.history.store import read_history

    ops, _ = register_history(200, keys=2, processes=3, seed=7)
    t = [ops[n].time for n in (20, 60, 90, 120, 150, 180)]
    nem = [
        ("start-partition", t[0]),
        ("start-partition", t[1]),  # already in force: no second window
        ("stop-partition", t[2]),
        ("stop-kill", t[2]),  # nothing open
        ("start-kill", t[3]),
        ("stop-kill", t[4]),
        ("start-clock", t[5]),  # never stopped
    ]
    for f, when in nem:
        ops.append(Op(type="info", process="nemesis", f=f, value=None, time=when))
        ops.append(Op(type="info", process="nemesis", f=f, value="done", time=when + 1000))
    ops.sort(key=lambda op: op.time)
    for n, op in enumerate(ops):
        op.index = n
    run_dir = write_run(tmp_path, "register-windows", "20260101T000000.000", ops)
    core = core_windows(read_history(run_dir / "history.jsonl"))
    end = max(op.time for op in ops)
    assert [(w.kind, w.start, w.end_or(end)) for w in core] == [
        ("partition", t[0] + 1000, t[2] + 1000),
        ("kill", t[3] + 1000, t[4] + 1000),
        ("clock", t[5] + 1000, end),
    ]
    # as the executors return them, and as Spark re-reads them from the Parquet the executors wrote
    checked = check_on_executors(spark, [run_dir], tmp_path / "history.parquet")
    for frame in (
        windows_frame(spark, checked),
        fault_windows(read_ops_parquet(spark, tmp_path / "history.parquet")),
    ):
        rows = frame.collect()
        assert [(r.kind, r.start, r.end) for r in sorted(rows, key=lambda r: r.start)] == [
            (w.kind, w.start, w.end_or(end)) for w in core
        ]


def test_gate_exit_status_names_the_invalid_run(spark, runs, tmp_path, capsys):
    _, dirs, _ = runs
    # all three runs with an impossible p99: the invalid run is named, and so is every p99 breach
    code, out, err = chaos_here(capsys, "gate", "--out", tmp_path / "a", "--max-p99-ms", "0.001", *dirs)
    assert code == 1, err
    assert f"FAIL register-synth__{dirs[1].name}: invalid" in err
    for d in dirs:
        assert re.search(rf"FAIL register-synth__{d.name}: p99 [0-9.]+ ms > 0.001 ms", err), err
    assert "gate: FAIL" in out
    code, out, err = chaos_here(capsys, "gate", "--out", tmp_path / "b", dirs[0], dirs[2])
    assert code == 0, err + out
    assert "gate: PASS" in out
    assert "FAIL" not in err


@pytest.mark.parametrize(
    "option,value",
    [
        ("--max-p99-ms", "nan"),
        ("--max-p99-ms", "-1"),
        ("--max-unavailable-s", "nan"),
        ("--max-unavailable-s", "inf"),
        ("--min-ok-rate", "nan"),
        ("--min-ok-rate", "1.5"),
        ("--time-limit", "nan"),
        ("--time-limit", "0"),
    ],
)
def test_gate_rejects_bad_thresholds_before_anything_runs(runs, tmp_path, option, value):
    _, dirs, _ = runs
    res = subprocess.run(
        [
            sys.executable,
            "-m",
            "chaos.cli",
            "gate",
            "--out",
            str(tmp_path / "out"),
            option,
            value,
            str(dirs[0]),
        ],
        capture_output=True,
        text=True,
    )
    assert res.returncode == 254, res.stderr
    lines = res.stderr.splitlines()
    assert len(lines) == 1 and option in lines[0] and "Traceback" not in res.stderr, res.stderr
    assert not (tmp_path / "out").exists()


def test_require_faults_applied():
    from chaos.runner.gate import _exit_for, notes, threshold_failures

    def run(name, faults):
        return {"run": name, "valid": True, "failures": [], "max_unavailable_s": 0.0, "p99_ms": 1.0,
                "ok_rate": 1.0, "faults": faults}  # fmt: skip

    summary = {
        "runs": [
            run("a", {"kill": {"requested": 3, "applied": 3, "failed": 0}}),
            run(
                "b",
                {
                    "kill": {"requested": 2, "applied": 1, "failed": 1},
                    "restart": {"requested": 4, "applied": 0, "failed": 4},
                },
            ),  # fmt: skip
            run("c", None),
        ]
    }
    assert threshold_failures(summary) == []
    failures = threshold_failures(summary, require_faults_applied=True)
    assert [str(f) for f in failures] == ["b: fault restart requested 4 times, never applied (4 failed)"]
    assert _exit_for(failures) == 1
    assert notes(summary, require_faults_applied=True) == [
        "c: no faults result in the run; --require-faults-applied not checked"
    ]


def test_fault_counts_read_from_the_faults_checker():
    from chaos.history.spark.pipeline import fault_counts

    verdict = {
        "checkers": {
            "faults": {"valid": True, "kinds": {"kill": {"requested": 2, "applied": 1, "failed": 1}}}
        }
    }
    assert fault_counts(verdict) == {"kill": {"requested": 2, "applied": 1, "failed": 1}}
    assert fault_counts({"checkers": {"stats": {"valid": True}}}) is None


def test_gate_bad_arguments(tmp_path):
    res = subprocess.run(
        [sys.executable, "-m", "chaos.cli", "gate", str(tmp_path / "nope")], capture_output=True, text=True
    )
    assert res.returncode == 254
    assert "not a run directory" in res.stderr


def test_spark_totals_equal_the_history_with_overlapping_windows(spark, tmp_path):
    """Issue 25 item 2: a kill inside a partition puts many calls in two fault windows at once;
    each call still counts once, so per-run ops, ok / fail / info and the p99 the gate reads equal
    the history's and ``chaos check``'s perf figures; the calls under both faults are one group."""
    from chaos.history.checkers.registry import check_run
    from chaos.history.spark.pipeline import analyze
    from chaos.history.spark.tasks import run_id

    ops, _ = register_history(1500, keys=6, processes=5, seed=11)
    t = [ops[n].time for n in (300, 600, 900, 1200)]
    for f, when in (
        ("start-partition", t[0]),
        ("start-kill", t[1]),  # inside the partition: the two overlap from t[1] to t[2]
        ("stop-partition", t[2]),
        ("stop-kill", t[3]),
    ):
        ops.append(Op(type="info", process="nemesis", f=f, value=None, time=when))
        ops.append(Op(type="info", process="nemesis", f=f, value="done", time=when + 1000))
    ops.sort(key=lambda op: op.time)
    for n, op in enumerate(ops):
        op.index = n
    run_dir = write_run(tmp_path / "store", "register-overlap", "20260101T000000.000", ops)
    rid = run_id(run_dir)
    summary = analyze([run_dir], out=tmp_path / "out", spark=spark)
    lines = [json.loads(x) for x in (run_dir / "history.jsonl").read_text().splitlines()]
    completions = [x for x in lines if x["process"] != "nemesis" and x["type"] != "invoke"]
    row = next(r for r in summary["runs"] if r["run"] == rid)
    assert row["ops"] == len(completions)
    perf = check_run(run_dir)["checkers"]["perf"]
    assert perf["ops"]["count"] == len(completions)
    lat = {r["f"]: r for r in summary["perf"]["latency"] if r["run"] == rid}
    for typ in ("ok", "fail", "info"):
        assert (
            sum(r[typ] for r in lat.values())
            == perf["ops"][typ]
            == sum(1 for x in completions if x["type"] == typ)
        )
    assert row["ok_rate"] == pytest.approx(perf["ops"]["ok"] / perf["ops"]["count"])
    for f, r in lat.items():
        assert r["n"] == perf["latency"]["by_f_all"][f]["count"]
        assert (r["p50"], r["p99"], r["max"]) == tuple(
            perf["latency"]["by_f_all"][f][q] for q in ("p50", "p99", "max")
        )
    by_fault = {r["fault"]: r["n"] for r in summary["perf"]["by_fault"] if r["run"] == rid}
    assert sum(by_fault.values()) == len(completions)
    assert {"none", "partition", "kill", "kill+partition"} <= set(by_fault)
    throughput = [r for r in summary["perf"]["throughput"] if r["run"] == rid]
    assert sum(r["ok"] for r in throughput) == perf["ops"]["ok"]


def test_runs_are_grouped_into_tasks_of_about_equal_work(tmp_path):
    """Every run lands in exactly one task; at least 8 tasks per slot while there are runs for
    them, about 8 runs a task beyond that; the largest histories are spread first."""
    from chaos.history.spark.tasks import batches

    jobs = []
    for i in range(100):
        d = tmp_path / f"r{i}"
        d.mkdir()
        (d / "history.jsonl").write_text("x" * (1000 if i < 4 else 10))
        jobs.append((f"r{i}", str(d)))
    tasks = batches(jobs, slots=2)
    assert sorted(j for t in tasks for j in t) == sorted(jobs)
    assert len(tasks) == 16
    assert all(sum(j[0] in {"r0", "r1", "r2", "r3"} for j in t) <= 1 for t in tasks)
    assert len(batches(jobs[:5], slots=2)) == 5
    assert len(batches(jobs * 10, slots=2)) == 125


def test_bad_input_found_by_a_worker_leaves_no_output(spark, runs, tmp_path):
    """A malformed history among good ones is raised as chaos check raises it (file and line),
    and --out is not created: the executors wrote to a staging directory, removed."""
    from chaos.history.spark.pipeline import analyze
    from chaos.history.store import HistoryError

    _, dirs, _ = runs
    bad = tmp_path / "store" / "register-bad" / "20260101T000000.000"
    bad.mkdir(parents=True)
    lines = (dirs[0] / "history.jsonl").read_text().splitlines()
    (bad / "history.jsonl").write_text("\n".join([*lines[:5], "{not json", *lines[5:]]) + "\n")
    out = tmp_path / "analysis" / "out"
    with pytest.raises(HistoryError) as e:
        analyze([dirs[0], bad], out=out, spark=spark)
    assert e.value.line == 6 and "history.jsonl" in str(e.value)
    assert not out.exists() and not out.parent.exists()


def test_workers_import_the_installed_pyspark_compiled(spark):
    """The executors' Python daemon is chaos's (``spark.python.daemon.module``): the workers import
    the installed pyspark package, not the copy of its source in Spark's ``pyspark.zip``, which
    Python compiles at every daemon start (a second or more)."""
    sc = spark.sparkContext
    assert sc.getConf().get("spark.python.daemon.module") == "chaos.history.spark.daemon"
    files = sc.parallelize(range(2), 2).map(lambda _: __import__("pyspark").__file__).collect()
    assert files and all(".zip" not in f for f in files), files


def test_analyze_command_keeps_spark_output_in_its_log(runs, tmp_path):
    """`chaos analyze` that starts its own Spark: the terminal shows the table and the summary
    line, not Spark's start-up lines, which are in ``spark.log`` beside the summary."""
    _, dirs, _ = runs
    out = tmp_path / "out"
    env = {**os.environ, "CHAOS_SPARK_CDS": "0"}
    res = subprocess.run(
        [
            sys.executable,
            "-m",
            "chaos.cli",
            "analyze",
            "--master",
            "local[1]",
            "--out",
            str(out),
            str(dirs[0]),
        ],
        capture_output=True,
        text=True,
        env=env,
    )
    assert res.returncode == 0, res.stderr
    assert res.stderr == "", res.stderr
    assert f"summary: {out}/index.html" in res.stdout
    assert "log4j" in (out / "spark.log").read_text()
    assert json.loads((out / "summary.json").read_text())["valid"] is True
    assert not list(tmp_path.glob(".out.partial-*"))
