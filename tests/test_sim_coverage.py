"""``chaos sim --coverage`` (issue 33, item 5): a real campaign measures the line and branch
coverage of the DB's declared source packages with coverage.py, writes coverage.py's JSON report
and each file's unreached functions into a campaign directory under the store, and prints one line
of figures; the data of several worker processes, or of Spark tasks, is combined into the same
figures a single process gives for the same seeds (one seed decides its run)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from chaos.control.db import NoopDB, source_packages
from chaos_dledger.db import DLedgerDB
from chaos_dledger.sim import sim

# a few short seeds of the default swarm, each on its drawn fault mix
ARGS = ["--seeds", "3", "--time-limit", "3", "--coverage"]
LINE = re.compile(
    r"^system under test: (\d+\.\d) % of lines, (\d+) of (\d+) functions reached "
    r"\((\d+\.\d) % of branches; dledger; (\d+\.\d) % of the lines of the \d+ of \d+ files the campaign ran\)$",
    re.M,
)


def _campaign(tmp_path: Path, *extra: str) -> tuple[str, dict[str, Any], str]:
    result = CliRunner().invoke(sim, [*ARGS, *extra, "--store", str(tmp_path)], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    (campaign,) = (tmp_path / "sim-campaigns").iterdir()
    assert not list(campaign.glob(".coverage.*"))  # the workers' data files, combined into .coverage
    assert (campaign / ".coverage").is_file()
    doc = json.loads((campaign / "coverage.json").read_text())
    return result.output, doc, (campaign / "unreached.txt").read_text()


def _executed(doc: dict[str, Any]) -> dict[str, list[int]]:
    return {
        Path(k).as_posix().split("/dledger/", 1)[-1]: v["executed_lines"] for k, v in doc["files"].items()
    }


def test_dledger_declares_its_package_and_a_plugin_need_not() -> None:
    assert source_packages(DLedgerDB) == (("dledger",), ("*/dledger/sim.py", "*/dledger/simdisk.py"))
    assert source_packages(NoopDB()) == ((), ())


def test_a_campaign_writes_coverage_json_and_the_unreached_functions(tmp_path: Path) -> None:
    out, doc, unreached = _campaign(tmp_path, "--jobs", "1")
    m = LINE.search(out)
    assert m, out
    lines, reached, functions = float(m[1]), int(m[2]), int(m[3])
    assert 20.0 < lines < 100.0 and 0 < reached < functions
    assert doc["meta"]["branch_coverage"] is True  # coverage.py's own JSON report, format 3
    names = {Path(k).as_posix() for k in doc["files"]}
    assert any(n.endswith("dledger/core/node.py") for n in names)
    assert not any(n.endswith(("dledger/sim.py", "dledger/simdisk.py")) for n in names)  # the world
    node = next(v for k, v in doc["files"].items() if Path(k).as_posix().endswith("dledger/core/node.py"))
    assert node["summary"]["covered_lines"] > node["summary"]["num_statements"] / 2  # the core ran
    # the listing: the line, then each file's figures and its unreached functions
    assert unreached.splitlines()[0] == m[0]
    assert re.search(r"^dledger/core/node\.py: \d+\.\d % of \d+ lines, \d+ of \d+ branches", unreached, re.M)
    # the real server's asyncio code never runs in the simulator: one line, not 70 functions
    assert re.search(r"^dledger/server\.py: 0\.0 % .*\(never imported: no function ran\)$", unreached, re.M)
    assert reached + unreached.count("\n    ") <= functions  # never-imported files' functions not listed


def test_two_workers_data_is_combined_into_the_single_process_figures(tmp_path: Path) -> None:
    one_out, one, _ = _campaign(tmp_path / "one", "--jobs", "1")
    two_out, two, _ = _campaign(tmp_path / "two", "--jobs", "2")
    assert _executed(one) == _executed(two)  # the same seeds reach the same lines, however spread
    assert LINE.search(one_out)[0] == LINE.search(two_out)[0]  # type: ignore[index]


def test_coverage_is_for_a_campaign_not_a_replayed_seed(tmp_path: Path) -> None:
    r = subprocess.run(
        [sys.executable, "-c", "import sys; from chaos.cli import main; sys.exit(main())", "sim",
         "--seed", "1", "--coverage", "--store", str(tmp_path)],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert r.returncode == 254, (r.stdout, r.stderr)
    assert r.stderr.strip() == "chaos: --coverage measures a campaign: expected --seeds N with it, not --seed"
    assert not tmp_path.joinpath("sim-campaigns").exists()


@pytest.mark.spark
@pytest.mark.slow
def test_spark_tasks_data_is_combined_on_the_driver(tmp_path: Path) -> None:
    from pyspark.sql import SparkSession

    # a Python worker another test's job already ran has imported the server's modules before any
    # coverage started, so their module-level lines would go unmeasured: fresh workers, as a
    # `chaos sim --master` process gets
    active = SparkSession.getActiveSession()
    if active is not None:
        active.stop()
    local_out, local, _ = _campaign(tmp_path / "local", "--jobs", "2")
    spark_out, on_spark, _ = _campaign(tmp_path / "spark", "--master", "local[2]")
    assert _executed(local) == _executed(on_spark)
    assert LINE.search(local_out)[0] == LINE.search(spark_out)[0]  # type: ignore[index]
