"""`chaos gate`'s default matrix (issue 13): with no matrix arguments the gate runs the "power"
preset, every run of it is a `chaos run` the run command accepts (options, read modes, nemeses,
workloads), and every class it names is a catalogued bug class. No Docker: `--list` prints the runs
the gate would start, from the same list the gate runs."""

from __future__ import annotations

import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from chaos.control.db import GateRun
from chaos.runner.gate import matrix
from chaos_dledger.presets import DEFAULT_PRESET, PRESETS


def gate(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "chaos.cli", "gate", *args], capture_output=True, text=True, check=False
    )


def listed(*args: str) -> list[list[str]]:
    res = gate("--list", *args)
    assert res.returncode == 0, res.stderr
    return [shlex.split(line) for line in res.stdout.splitlines()]


def test_gate_without_matrix_arguments_runs_the_default_preset() -> None:
    assert DEFAULT_PRESET == "power"
    runs = listed()
    expected = [["chaos", *c.run_args("store", [])] for c in PRESETS["power"]]
    # the real-cluster runs, then the DB's simulation campaign (issue 35 item 10: --list shows it)
    assert runs[:-1] == expected
    assert runs[-1][:4] == ["chaos", "sim", "--seeds", "300"], runs[-1]
    assert listed("--preset", "power") == runs
    # --runs repeats each configuration in a row; --run-arg comes last, so it overrides the preset's
    twice = listed("--runs", "2", "--run-arg", "--time-limit 45", "--store", "/tmp/s")[:-1]
    assert len(twice) == 2 * len(expected)
    assert twice[0] == twice[1]
    assert all(cmd[-2:] == ["--time-limit", "45"] and "/tmp/s" in cmd for cmd in twice)
    # a matrix named by --workload/--nemesis runs no campaign, and lists none
    assert all(cmd[1] == "run" for cmd in listed("--workload", "register", "--nemesis", "kill"))


def test_every_preset_run_is_accepted_by_chaos_run(tmp_path: Path) -> None:
    from chaos import nemesis, workloads
    from chaos.runner.cli import run, run_options

    for name, configs in PRESETS.items():
        for cfg in configs:
            words = cfg.run_args(str(tmp_path / "store"), [])
            ctx = run.make_context("run", words[1:])  # click checks options and choices (read modes)
            options, spec = run_options(ctx.params, ctx.args)  # the DB's own options (read modes) too
            opts, extra = options.as_dict(), dict(options.nemesis_opts)
            assert list(spec.names) == cfg.nemesis.split("+")
            assert opts["workload"] == cfg.workload
            assert workloads.get(cfg.workload, {"node_count": 5}).name == cfg.workload
            names = nemesis.parse_names(opts["nemesis"])
            assert names == cfg.nemesis.split("+"), (name, cfg)
            nemesis.build(names, {**opts, **extra})
            if name == "power":
                assert opts["time_limit"] <= 30, "the preset's runs are kept short (30 min in all)"


def test_the_preset_names_catalogued_classes_and_covers_the_read_paths() -> None:
    from chaos_dledger.mutants import load_mutants

    classes = {m.name for m in load_mutants()}
    caught = [c for cfg in PRESETS["power"] for c in cfg.catches]
    assert caught and set(caught) <= classes
    read_modes = {
        cfg.args[cfg.args.index("--read-mode") + 1] for cfg in PRESETS["power"] if "--read-mode" in cfg.args
    }
    assert {"lease", "read-index", "raft-log"} <= read_modes
    assert {cfg.workload for cfg in PRESETS["power"]} == {"register", "log", "list-append"}


def test_the_preset_runs_snapshots_under_kills_and_partitions_and_transfers_to_lagging_members() -> None:
    """Issue 33, item 4: snapshots with small segments (compaction while members lag) under kills
    and partitions for list-append and register, and leadership handed to the member furthest
    behind; `chaos gate --list` shows them."""
    snapshots = ["--server-arg=--snapshot-every=20", "--server-arg=--data-file-size=16384"]
    rows = [cfg for cfg in PRESETS["power"] if all(a in cfg.args for a in snapshots)]
    faults = {(cfg.workload, f) for cfg in rows for f in cfg.nemesis.split("+")}
    for workload in ("list-append", "register"):
        assert {(workload, "kill"), (workload, "partition-ring")} <= faults

    def aims_behind(args: tuple[str, ...] | list[str]) -> bool:
        return any(
            a.startswith("transfer_targets=") and "behind" in a.split("=", 1)[1].split(",") for a in args
        )

    behind = [cfg for cfg in PRESETS["power"] if aims_behind(cfg.args)]
    assert behind and all("leader-transfer" in cfg.nemesis.split("+") for cfg in behind)
    shown = [" ".join(cmd) for cmd in listed()]
    assert any("--snapshot-every=20" in line and "list-append" in line for line in shown)
    assert any("leader-transfer" in line and aims_behind(line.split()) for line in shown)


def test_matrix_arguments_replace_the_preset() -> None:
    assert matrix(None, "log", None, 1, PRESETS) == [
        GateRun("log", "partition-ring+kill-leader"),
        GateRun("log", "kill"),
    ]
    assert [c.label() for c in matrix(None, None, "pause", 2, PRESETS)] == ["register pause"] * 2 + [
        "log pause"
    ] * 2
    assert listed("--workload", "register", "--nemesis", "pause+kill") == [
        ["chaos", "run", "--workload", "register", "--nemesis", "pause,kill", "--store", "store"]
    ]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--preset", "nope"], "--preset nope: expected one of power, elections"),
        (["--preset", "power", "--nemesis", "kill"], "--preset power with --workload/--nemesis"),
        (["--workload", ","], "--workload/--nemesis: expected at least one name each"),
    ],
)
def test_bad_preset_arguments_are_one_line(args: list[str], message: str) -> None:
    res = gate("--list", *args)
    assert res.returncode == 254
    assert message in res.stderr
    assert len(res.stderr.strip().splitlines()) == 1


def _catalogue_module() -> object:
    import importlib.util

    path = Path(__file__).resolve().parents[1] / "bench" / "catalogue.py"
    spec = importlib.util.spec_from_file_location("catalogue_bench", path)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_catalogue_bench_runs_each_class_against_the_preset_listing_its_configuration_first() -> None:
    from types import SimpleNamespace

    from chaos_dledger.mutants import load_mutants

    cat: object = _catalogue_module()
    mutants = {m.name: m for m in load_mutants()}
    args = SimpleNamespace(configs=[], preset="power")
    by_label = {(c.workload, c.nemesis.replace("+", ","), c.args): c for c in PRESETS["power"]}
    for cls in {c for cfg in PRESETS["power"] for c in cfg.catches}:
        configs = cat.configs_for(mutants[cls], args)  # type: ignore[attr-defined]
        assert len(configs) == len(PRESETS["power"])
        first = by_label[(configs[0].workload, configs[0].nemesis, configs[0].args)]
        assert cls in first.catches, (cls, first)
    one = cat.parse_config("register pause+kill --read-mode lease", "--config")  # type: ignore[attr-defined]
    assert (one.workload, one.nemesis, one.args) == ("register", "pause,kill", ("--read-mode", "lease"))


def test_catalogue_bench_rejects_a_bad_preset_or_configuration_in_one_line(tmp_path: Path) -> None:
    bench = Path(__file__).resolve().parents[1] / "bench" / "catalogue.py"
    for args in (["--preset", "nope"], ["--config=register"]):
        res = subprocess.run(
            [sys.executable, str(bench), *args, "--table-only", "--results", str(tmp_path / "r.jsonl")],
            capture_output=True,
            text=True,
            check=False,
        )
        assert res.returncode == 254, res.stderr
        assert len(res.stderr.strip().splitlines()) == 1
        assert "expected" in res.stderr


def test_gate_table_on_a_pipe_keeps_every_column_of_a_long_run_directory() -> None:
    # A CI log is a pipe: at rich's default 80 columns a long directory squeezed the verdicts away.
    import io

    from chaos.runner.gate import print_table

    long_dir = "/tmp/" + "store/" * 12 + "log-bitflip/20261125T210122.615"
    summary = {
        "runs": [
            {
                "dir": long_dir,
                "run": "r1",
                "workload": "log",
                "nemesis": "bitflip",
                "valid": True,
                "ops": 1476,
                "ok_rate": 0.983,
                "p99_ms": 12.5,
                "max_unavailable_s": 1.63,
            },
            {
                "dir": None,
                "run": "chaos sim --seeds 300",
                "workload": "swarm",
                "nemesis": "simulation",
                "valid": False,
                "ops": 300,
                "ok_rate": None,
                "p99_ms": None,
                "max_unavailable_s": None,
            },
        ]
    }
    out = io.StringIO()
    print_table(summary, file=out)
    lines = out.getvalue().splitlines()
    first = next(line for line in lines if "log-bitflip" in line)
    assert long_dir in first and "valid" in first and "1476" in first and "98.3%" in first
    sim = next(line for line in lines if "chaos sim --seeds 300" in line)
    assert "invalid" in sim and "simulation" in sim
