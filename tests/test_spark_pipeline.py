"""The Spark pipeline with a real local Spark: verdicts equal the in-process checkers', the gate's
exit status follows the runs, and the SQL statistics describe the histories."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from chaos.history.op import Op
from chaos.history.synth import register_history, write_run

pytestmark = [pytest.mark.spark, pytest.mark.slow]


@pytest.fixture(scope="module")
def spark():
    from chaos.history.spark import spark_session

    session = spark_session("local[2]")
    yield session
    session.stop()


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> tuple[Path, list[Path], dict[str, list[str]]]:
    from chaos.history.spark import run_id

    store = tmp_path_factory.mktemp("store")
    dirs, expected = [], {}
    for i, violations in enumerate([0, 2, 0]):
        ops, violated = register_history(3000, keys=20, processes=6, seed=100 + i, violations=violations)
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


def test_spark_verdicts_equal_in_process_checker(spark, runs, tmp_path):
    from chaos.history.checkers import check_run
    from chaos.history.spark import analyze, run_id

    _, dirs, expected = runs
    summary = analyze(dirs, out=tmp_path / "out", spark=spark)
    for run_dir in dirs:
        rid = run_id(run_dir)
        spark_result = summary["verdicts"][rid]
        local_result = check_run(run_dir)
        assert spark_result["valid"] == local_result["valid"], rid
        assert sorted(spark_result["checkers"]["linear"]["failures"]) == expected[rid]
        # in one process the first invalid key cancels the rest (P-compositionality); Spark checks all
        local_failures = set(local_result["checkers"]["linear"]["failures"])
        assert local_failures <= set(expected[rid])
        assert bool(local_failures) == bool(expected[rid])
    assert [r["valid"] for r in summary["runs"]] == [True, False, True]
    assert summary["valid"] is False
    matrix = summary["matrix"]
    assert matrix == [
        {**matrix[0], "workload": "register", "nemesis": "partition-ring", "runs": 3, "pass_rate": 2 / 3}
    ]
    out = tmp_path / "out"
    assert (out / "history.parquet").is_dir()
    assert (out / "summary.parquet").is_dir()
    assert json.loads((out / "summary.json").read_text())["valid"] is False
    assert "invalid" in (out / "index.html").read_text()
    # Parquet is partitioned by run and keeps every op
    parquet = spark.read.parquet(str(out / "history.parquet"))
    assert parquet.select("run").distinct().count() == 3
    assert parquet.count() == sum(len((d / "history.jsonl").read_text().splitlines()) for d in dirs)


def test_spark_statistics(spark, runs, tmp_path):
    from chaos.history.spark import analyze, run_id

    _, dirs, _ = runs
    summary = analyze(dirs[2:], out=tmp_path / "out", spark=spark)
    rid = run_id(dirs[2])
    lat = {row["f"]: row for row in summary["perf"]["latency"] if row["run"] == rid}
    assert set(lat) == {"read", "write", "cas"}
    ops = [json.loads(line) for line in (dirs[2] / "history.jsonl").read_text().splitlines()]
    reads = sum(1 for op in ops if op["f"] == "read" and op["type"] == "invoke")
    assert lat["read"]["n"] == reads
    for row in lat.values():
        assert 0 < row["p50"] <= row["p95"] <= row["p99"] <= row["max"]
    faults = {row["fault"] for row in summary["perf"]["by_fault"]}
    assert faults == {"none", "partition"}
    run = summary["runs"][0]
    assert 0 < run["ok_rate"] <= 1
    assert run["max_unavailable_s"] > 0
    assert sum(row["ok"] for row in summary["perf"]["throughput"]) == sum(r["ok"] for r in lat.values())


def test_gate_exit_status_names_the_invalid_run(runs, tmp_path):
    _, dirs, _ = runs
    chaos = [sys.executable, "-m", "chaos.cli", "gate", "--master", "local[2]"]
    bad = subprocess.run(
        [*chaos, "--out", str(tmp_path / "a"), *map(str, dirs)], capture_output=True, text=True
    )
    assert bad.returncode == 1, bad.stderr
    assert f"FAIL register-synth__{dirs[1].name}: invalid" in bad.stderr
    good = subprocess.run(
        [*chaos, "--out", str(tmp_path / "b"), str(dirs[0]), str(dirs[2])], capture_output=True, text=True
    )
    assert good.returncode == 0, good.stderr + good.stdout
    assert "gate: PASS" in good.stdout
    strict = subprocess.run(
        [*chaos, "--out", str(tmp_path / "c"), "--max-p99-ms", "0.001", str(dirs[0])],
        capture_output=True,
        text=True,
    )
    assert strict.returncode == 1
    assert "p99" in strict.stderr


def test_gate_bad_arguments(tmp_path):
    res = subprocess.run(
        [sys.executable, "-m", "chaos.cli", "gate", str(tmp_path / "nope")], capture_output=True, text=True
    )
    assert res.returncode == 254
    assert "not a run directory" in res.stderr
