"""Plug-in code can never make a run exit 0 (issue 26, item 2): ``sys.exit(0)``, a
KeyboardInterrupt it raises itself, or a failing factory is a crash or a refusal naming it. Nor can
it by ending the process itself (issue 36, item 6): ``os._exit(0)`` or the C library's ``exit(0)``
is a crash (255) that the supervisor (:mod:`chaos.supervisor`) reports, since the exit status comes
from the command's own completion."""

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

HARD = """
import ctypes
import os


def os_exit_workload(opts):
    os._exit(0)


class CExitDB:
    name = "c-exit"

    def __init__(self):
        ctypes.CDLL(None).exit(0)  # the C library's exit: no Python frame sees it

    def setup(self, control): ...
    def teardown(self, control): ...
    def describe(self): return "exits in C"


def os_exit_checker():
    os._exit(0)
"""


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
    (tmp_path / "hard.py").write_text(textwrap.dedent(HARD))
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


@pytest.mark.parametrize(
    "entry, args, said",
    [
        ("-m", ["--workload", "hard:os_exit_workload"], "os._exit(0) in hard.os_exit_workload (" ),
        ("-c", ["--workload", "hard:os_exit_workload"], "os._exit(0) in hard.os_exit_workload ("),
        ("-m", ["--checker", "hard:os_exit_checker"], "os._exit(0) in hard.os_exit_checker ("),
        ("-m", ["--db", "hard:CExitDB"], "exit status 0 without finishing"),
    ],
)  # fmt: skip
def test_plugin_ending_the_process_is_a_crash_not_a_pass(
    plug: Path, entry: str, args: list[str], said: str
) -> None:
    """The console script and ``python -m chaos.cli`` both run the command under the supervisor;
    a process that ends without the command's completion is 255 with one line saying so."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(plug), str(ROOT)])}
    env.pop("CHAOS_NO_SUPERVISOR", None)
    start = (
        ["-m", "chaos.cli"]
        if entry == "-m"
        else ["-c", "import sys; from chaos.cli import main; sys.exit(main())"]
    )
    r = subprocess.run(
        [sys.executable, *start, "run", *args, "--time-limit", "1", "--store", str(plug / "store"), "--no-live"],
        cwd=plug, env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert r.returncode == 255, (r.returncode, r.stdout, r.stderr)
    (line,) = r.stderr.strip().splitlines()
    assert line.startswith("chaos: crashed: the command ended before it finished: "), line
    assert said in line and line.endswith("; no verdict"), line


def test_the_supervisor_passes_the_command_status_and_mirrors_a_killed_command(plug: Path) -> None:
    """Verdicts and refusals pass through unchanged; a command killed by a signal is not a pass."""
    import json
    import signal
    import time

    h = plug / "h.jsonl"
    ops = [
        {"index": 0, "type": "invoke", "process": 0, "f": "write", "value": 1, "time": 1},
        {"index": 1, "type": "ok", "process": 0, "f": "write", "value": 1, "time": 2},
        {"index": 2, "type": "invoke", "process": 0, "f": "read", "value": None, "time": 3},
        {"index": 3, "type": "ok", "process": 0, "f": "read", "value": 2, "time": 4},
    ]
    h.write_text("".join(json.dumps(o) + "\n" for o in ops))
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    r = subprocess.run(
        [sys.executable, "-m", "chaos.cli", "check", str(h)], env=env, capture_output=True, text=True
    )
    assert r.returncode == 1, (r.stdout, r.stderr)  # invalid: read 2, never written
    r = subprocess.run(
        [sys.executable, "-m", "chaos.cli", "check", "--nope"], env=env, capture_output=True, text=True
    )
    assert r.returncode == 254, r.stderr

    (plug / "store").mkdir()
    proc = subprocess.Popen(
        [sys.executable, "-m", "chaos.cli", "serve", "--store", str(plug / "store"), "--port", "0"],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert proc.stdout is not None and "Serving" in proc.stdout.readline()
        deadline = time.monotonic() + 10
        children: list[str] = []
        while not children and time.monotonic() < deadline:
            children = Path(f"/proc/{proc.pid}/task/{proc.pid}/children").read_text().split()
        (child,) = children  # the command runs in the supervisor's one child
        os.kill(int(child), signal.SIGKILL)
        assert proc.wait(30) == -signal.SIGKILL
    finally:
        if proc.poll() is None:
            proc.kill()
