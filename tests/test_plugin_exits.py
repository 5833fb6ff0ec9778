"""Plug-in code can never make a run exit 0 (issue 26, item 2): ``sys.exit(0)``, a
KeyboardInterrupt it raises itself, or a failing factory is a crash or a refusal naming it."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

PLUG = """
import sys


class ExitingDB:
    name = "exiting"

    def __init__(self):
        sys.exit(0)

    def setup(self, control): ...
    def teardown(self, control): ...
    def describe(self): return "exits"


def exiting_workload(opts):
    sys.exit(0)


def interrupting_workload(opts):
    raise KeyboardInterrupt


def raising_db():
    raise RuntimeError("cannot build")


def raising_checker():
    raise RuntimeError("no checker today")


def not_a_checker():
    return 42
"""

IMPORT_EXIT = "import sys\nsys.exit(0)\n"


def chaos(tmp: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp), str(ROOT)])}
    return subprocess.run(
        [sys.executable, "-c", "import sys; from chaos.cli import main; sys.exit(main())", *args],
        cwd=tmp, env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip


@pytest.fixture
def plug(tmp_path: Path) -> Path:
    (tmp_path / "plug.py").write_text(textwrap.dedent(PLUG))
    (tmp_path / "exit_on_import.py").write_text(IMPORT_EXIT)
    return tmp_path


@pytest.mark.parametrize(
    "args, named",
    [
        (["--db", "plug:ExitingDB"], "plug.ExitingDB.__init__"),
        (["--workload", "plug:exiting_workload"], "plug.exiting_workload"),
        (["--workload", "plug:interrupting_workload"], "plug.interrupting_workload"),
        (["--db", "exit_on_import:X"], "exit_on_import"),
    ],
)
def test_plugin_exit_is_a_crash_naming_it(plug: Path, args: list[str], named: str) -> None:
    r = chaos(plug, "run", *args, "--time-limit", "1", "--store", str(plug / "store"), "--no-live")
    assert r.returncode == 255, (r.returncode, r.stdout, r.stderr)
    assert "crashed:" in r.stderr and named in r.stderr, r.stderr
    assert "faults healed" not in r.stdout
    assert not (plug / "store").exists()  # nothing ran


@pytest.mark.parametrize(
    "args, line",
    [
        (
            ["--db", "plug:raising_db"],
            "--db plug:raising_db: the DB factory raised RuntimeError: cannot build",
        ),
        (
            ["--checker", "plug:raising_checker"],
            "--checker plug:raising_checker: RuntimeError: no checker today",
        ),
        (
            ["--checker", "plug:not_a_checker"],
            "--checker plug:not_a_checker: the factory returned int, not a checker",
        ),
    ],
)
def test_failing_factories_are_refused_before_any_node(plug: Path, args: list[str], line: str) -> None:
    r = chaos(plug, "run", *args, "--time-limit", "1", "--store", str(plug / "store"), "--no-live")
    assert r.returncode == 254, (r.returncode, r.stdout, r.stderr)
    (only,) = r.stderr.strip().splitlines()
    assert only.startswith(f"chaos: {line}"), only
    assert not (plug / "store").exists()
