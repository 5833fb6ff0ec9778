"""``chaos sim --master URL`` (issue 27, item 3): seeds run as Spark tasks on a real local Spark
(``local[2]``) give, seed by seed, the local campaign's verdicts, failure reasons and coverage
stats; the command prints the same lines and exits with the same status; ``--stop-on-failure``
stops at the same seed; a mutant's failing seed found on Spark replays to the same verdict on this
machine with ``--seed``."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from chaos_dledger.sim import SimOptions, _run_one, sim
from chaos_dledger.sim_spark import MAX_CHUNK, chunk_sizes, failure, spark_imap

pytestmark = [pytest.mark.spark, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def spark() -> Any:
    from chaos.history.spark.session import spark_session

    return spark_session("local[2]")  # getOrCreate: shared with the other Spark tests of the session


def _lines(out: str) -> list[str]:
    """The command's output without the timing line (seeds/s differ run to run)."""
    return [ln for ln in out.splitlines() if "seeds/s" not in ln]


@pytest.mark.parametrize("total, lanes", [(1, 2), (7, 2), (60, 2), (2000, 2), (2000, 16), (5, 8)])
def test_chunks_cover_every_seed_once_start_small_and_stay_bounded(total: int, lanes: int) -> None:
    sizes = chunk_sizes(total, lanes)
    assert sum(sizes) == total and min(sizes) >= 1 and max(sizes) <= MAX_CHUNK
    assert sizes[:lanes] == [1] * min(lanes, total)  # the first verdicts come back fast


def test_rows_on_spark_equal_the_local_rows_seed_by_seed(spark: Any) -> None:
    todo = [(SimOptions.swarm_for(s),) for s in range(40)]
    with spark_imap(todo, "local[2]", run=_run_one) as rows:
        on_spark = list(rows)
    local = [_run_one(t) for t in todo]
    assert [r[0] for r in on_spark] == list(range(40))  # every seed once, in seed order
    assert on_spark == local  # verdict, failing checkers, coverage stats


def test_the_command_prints_and_exits_as_the_local_run(spark: Any, tmp_path: Path) -> None:
    """A known-bad configuration (unsafe reads) fails some seeds: the same failing-seed lines, the
    same summary and replay line, the same coverage line, the same exit status; with
    ``--stop-on-failure`` both stop at the same seed."""
    bad = ["--workload", "register", "--read-mode", "unsafe", "--nemesis", "partition,pause",
           "--time-limit", "3", "--seeds", "30", "--store", str(tmp_path)]  # fmt: skip
    for extra in ([], ["--stop-on-failure"]):
        local = CliRunner().invoke(sim, [*bad, *extra, "--jobs", "1"])
        on_spark = CliRunner().invoke(sim, [*bad, *extra, "--master", "local[2]"])
        assert local.exit_code == 1, local.output
        assert on_spark.exit_code == 1, on_spark.output
        assert _lines(on_spark.stdout) == _lines(local.stdout)
        assert re.search(r"^seed \d+: INVALID: linear", on_spark.stdout, re.M)
    assert "1 not valid; replay one with: chaos sim" in on_spark.stdout  # stopped at the first


@pytest.mark.parametrize(
    "args, named",
    [
        (["--seeds", "3", "--jobs", "2", "--master", "local[2]"], "--master local[2]"),
        (["--seed", "3", "--master", "local[2]"], "--master local[2]"),
    ],
)
def test_master_with_jobs_or_a_single_seed_is_one_bad_arguments_line(args: list[str], named: str) -> None:
    p = subprocess.run([sys.executable, "-m", "chaos.cli", "sim", *args], capture_output=True, text=True,
                       timeout=120, check=False)  # fmt: skip
    assert p.returncode == 254, p.stdout + p.stderr
    assert named in p.stderr and "--jobs" in p.stderr and "Traceback" not in p.stderr


def test_a_master_spark_refuses_is_one_line_naming_it(tmp_path: Path) -> None:
    p = subprocess.run([sys.executable, "-m", "chaos.cli", "sim", "--seeds", "2", "--master", "bogus://x",
                        "--store", str(tmp_path)], capture_output=True, text=True, timeout=300, check=False)  # fmt: skip
    assert p.returncode == 254, p.stdout + p.stderr
    (line,) = [ln for ln in p.stderr.splitlines() if ln.startswith("chaos: ")]
    assert "cannot start Spark with --master bogus://x" in line and "Traceback" not in p.stderr


def test_a_failed_task_is_named_by_the_workers_exception(spark: Any) -> None:
    """What the executors could not import (say, an executor without the package) is the line."""
    with pytest.raises(Exception) as e:
        spark.sparkContext.parallelize([1], 1).map(lambda _: __import__("no_such_module_27")).collect()
    assert failure(e.value) == "ModuleNotFoundError: No module named 'no_such_module_27'"


def test_a_mutants_failing_seed_found_on_spark_replays_locally(tmp_path: Path) -> None:
    """The catalogue's vote-without-log-check, applied to a copy of the package first on
    ``PYTHONPATH``: the executors run the copy too; the default swarm's failing seeds on Spark are
    the local pool's, and the first replays with ``--seed`` to the same verdict and reason."""
    from chaos_dledger.mutants import apply_mutant, load_mutants

    mutant = {m.name: m for m in load_mutants()}["vote-without-log-check"]
    copy = apply_mutant(mutant, tmp_path / "mutant")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(copy), str(ROOT)])}

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "chaos.cli", "sim", "--store", str(tmp_path / "store"),
                               *args], cwd=tmp_path, env=env, capture_output=True, text=True, check=False)  # fmt: skip

    on_spark = run("--seeds", "30", "--master", "local[2]")
    assert on_spark.returncode == 1, on_spark.stdout + on_spark.stderr
    local = run("--seeds", "30", "--jobs", "2")
    assert _lines(on_spark.stdout) == _lines(local.stdout)
    failing = re.findall(r"^seed (\d+): INVALID: (.*?) \[swarm mix", on_spark.stdout, re.M)
    assert failing, on_spark.stdout
    seed, why = failing[0]
    replay = run("--seed", seed)
    assert replay.returncode == 1, replay.stdout + replay.stderr
    assert f"seed {seed}: INVALID; run directory" in replay.stdout
    breach = re.search(r"safety \((.*)\)$", why)  # the invariant this mutant breaks, at the same step
    assert breach, why
    assert f"safety: {breach[1]}" in replay.stdout


def test_the_first_spark_start_on_a_machine_prints_nothing_of_the_jvms_own(tmp_path: Path) -> None:
    """A fresh cache: the driver JVM writes its class-data archive as it exits and logs the classes
    it leaves out (CDS warnings) to its stdout, the command's own. The command prints only its own
    lines, the same as the local run's."""
    env = {**os.environ, "XDG_CACHE_HOME": str(tmp_path / "cache")}

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "chaos.cli", "sim", "--store", str(tmp_path / "store"),
                               "--seeds", "4", *args], cwd=tmp_path, env=env, capture_output=True, text=True,
                              check=False)  # fmt: skip

    on_spark = run("--master", "local[1]")
    assert on_spark.returncode == 0, on_spark.stdout + on_spark.stderr
    assert list((tmp_path / "cache" / "chaos").glob("spark-*.jsa.*"))  # it did write an archive
    assert _lines(on_spark.stdout) == _lines(run("--jobs", "1").stdout)
    assert "[cds]" not in on_spark.stdout + on_spark.stderr


def test_the_gates_campaign_on_a_spark_master_is_the_local_one(spark: Any) -> None:
    """``chaos gate --master URL``: DLedger's simulation row computed as Spark tasks has the local
    pool's verdict, ops and failing seeds."""
    from chaos_dledger.sim import gate_campaign

    (local,) = gate_campaign("store", seeds=6, jobs=1)
    (on_spark,) = gate_campaign("store", seeds=6, master="local[2]")
    assert on_spark == local and local["ops"] > 0
