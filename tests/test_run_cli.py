"""`chaos run` argument handling (real subprocesses; bad arguments fail before any node is touched)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import click
import pytest

from chaos.control.test import check_number, parse_concurrency, run_name
from chaos.errors import ConfigError
from chaos.runner.runner import exit_code, worst


def chaos(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "chaos.cli", *args], capture_output=True, text=True, timeout=120
    )


def test_help_lists_workloads_and_nemeses_one_line_each() -> None:
    r = chaos("run", "--help")
    assert r.returncode == 0
    out = r.stdout
    for name in ("register", "log", "partition-ring", "kill", "pause", "clock-skew", "none"):
        assert any(line.strip().startswith(name + " ") for line in out.splitlines()), name
    assert "254 bad arguments" in out


@pytest.mark.parametrize(
    "args, needle",
    [
        (["--workload", "nope"], "workload"),
        (["--nemesis", "partition-ring,bogus"], "bogus"),
        (["--concurrency", "xn"], "--concurrency"),
        (["--concurrency", "0"], "--concurrency"),
        (["--time-limit", "0"], "--time-limit"),
        (["--time-limit", "nan"], "--time-limit nan"),
        (["--time-limit", "inf"], "--time-limit inf"),
        (["--time-limit", "-5"], "--time-limit"),
        (["--recovery-time", "nan"], "--recovery-time nan"),
        (["--recovery-time", "-1"], "--recovery-time"),
        (["--rate", "nan"], "--rate nan"),
        (["--rate", "-1"], "--rate"),
        (["--nemesis-interval", "nan"], "--nemesis-interval nan"),
        (["--nemesis-interval", "-2"], "--nemesis-interval"),
        (["--nemesis-interval", "0"], "--nemesis-interval"),
        (["--per-key-limit", "0"], "--per-key-limit 0"),
        (["--test-count", "0"], "--test-count"),
        (["--node-count", "0"], "--node-count"),
        (["--provider", "ssh", "--nodes", "n1=10.0.0.1", "--ssh-port", "0"], "--ssh-port 0"),
        (["--provider", "ssh", "--nodes", "n1=10.0.0.1", "--ssh-port", "65536"], "--ssh-port"),
        (["--read-mode", "dirty"], "read-mode"),
        (["--provider", "ssh"], "--nodes"),
        (["--bogus-option"], "--bogus-option"),
        (["--nemesis-opt", "kill_targets"], "--nemesis-opt 'kill_targets'"),
        (["--nemesis-opt", "no_such_knob=1"], "no_such_knob"),
        (["--nemesis-opt", "clock_max_rate=nan"], "clock_max_rate"),
        (["--nemesis-opt", "bitflip_count=two"], "bitflip_count"),
    ],
)
def test_bad_arguments_exit_254_with_one_clear_line(args: list[str], needle: str, tmp_path) -> None:
    r = chaos("run", "--store", str(tmp_path), "--no-live", *args)
    assert r.returncode == 254, r.stdout + r.stderr
    assert needle in r.stderr
    assert r.stdout == "" and len(r.stderr.splitlines()) == 1, r.stderr  # no Usage:, no Try -h
    assert "Traceback" not in r.stderr
    assert not any(tmp_path.iterdir())  # nothing was run


def test_a_binary_nodes_file_is_bad_input_naming_the_file(tmp_path) -> None:
    f = tmp_path / "nodes.bin"
    f.write_bytes(b"n1=10.0.0.1\n\x00\xff\xfe\x89PNG")
    store = tmp_path / "store"
    r = chaos("run", "--store", str(store), "--no-live", "--provider", "ssh", "--nodes-file", str(f))
    assert r.returncode == 254, r.stdout + r.stderr
    assert r.stderr.strip() == f"chaos: --nodes-file {f}: line 2: not a text file (binary or not UTF-8)"
    assert not store.exists()


def test_store_that_is_a_file_is_bad_input_before_any_node_is_touched(tmp_path) -> None:
    f = tmp_path / "store-file"
    f.write_text("not a directory\n")
    for store in (f, f / "sub"):
        # the docker provider would provision the cluster first: this must fail before that
        r = chaos("run", "--store", str(store), "--no-live", "--time-limit", "5")
        assert r.returncode == 254, r.stdout + r.stderr
        assert r.stderr.startswith(f"chaos: --store {store}: ") and len(r.stderr.splitlines()) == 1
        assert "Traceback" not in r.stderr
    assert f.read_text() == "not a directory\n"


def test_unreachable_nodes_leave_no_run_directory_and_keep_latest(tmp_path) -> None:
    store = tmp_path / "store"
    old = store / "register-none" / "20260101T000000.000"
    old.mkdir(parents=True)
    (store / "latest").symlink_to(old)
    # port 1 on loopback refuses at once: a real connection attempt, nothing listening
    r = chaos(
        "run",
        "--store",
        str(store),
        "--no-live",
        "--provider",
        "ssh",
        "--nodes",
        "n1=127.0.0.1:1,n2=127.0.0.1:2",
        "--no-strict-host-key-checking",
        "--time-limit",
        "5",
    )
    assert r.returncode == 255, r.stdout + r.stderr
    assert "cannot reach the nodes: n1" in r.stderr and "Traceback" not in r.stderr
    assert sorted(p.name for p in (store / "register-none").iterdir()) == [old.name]
    assert (store / "latest").resolve() == old.resolve()


def test_heal_reports_each_unreachable_node_without_a_traceback() -> None:
    r = chaos("heal", "--provider", "ssh", "--nodes", "n1=127.0.0.1:1,n2=127.0.0.1:2")
    assert r.returncode == 255, r.stdout + r.stderr
    lines = r.stdout.splitlines()
    assert [line.split(":")[0] for line in lines] == ["n1", "n2"]
    assert all("not healed: NodeUnreachable" in line for line in lines)
    assert "Traceback" not in r.stderr


@pytest.mark.parametrize(
    "args, needle",
    [
        (["--provider", "ssh", "--nodes", "n1=10.0.0.1", "--ssh-port", "0"], "--ssh-port 0"),
        (["--provider", "ssh"], "--nodes"),
    ],
)
def test_heal_bad_arguments_are_one_line(args: list[str], needle: str) -> None:
    r = chaos("heal", *args)
    assert r.returncode == 254 and needle in r.stderr and len(r.stderr.splitlines()) == 1, r.stderr


def test_concurrency_forms() -> None:
    assert parse_concurrency("2n", 5) == 10
    assert parse_concurrency("7", 5) == 7
    assert parse_concurrency(3, 5) == 3
    with pytest.raises(ConfigError, match="--concurrency"):
        parse_concurrency("0n", 5)


def test_check_number_rejects_non_finite_and_out_of_range_values() -> None:
    assert check_number("rate", "0") == 0.0
    assert check_number("ssh_port", 22) == 22
    for key, bad in [
        ("time_limit", "nan"),
        ("time_limit", float("inf")),
        ("time_limit", 0),
        ("recovery_time", -0.5),
        ("per_key_limit", 0),
        ("per_key_limit", "1.5"),
        ("ssh_port", 65536),
        ("test_count", True),
    ]:
        with pytest.raises(ConfigError, match="^--" + key.replace("_", "-")):
            check_number(key, bad)


def test_exit_codes_and_worst() -> None:
    assert [exit_code(v) for v in (True, False, "unknown")] == [0, 1, 2]
    assert worst([0, 2, 1]) == 1
    assert worst([0, 2]) == 2
    assert worst([1, 255]) == 255
    assert (
        run_name({"workload": "register", "nemesis": "partition-ring,kill"}) == "register-partition-ring+kill"
    )


@pytest.mark.parametrize(
    "args",
    [
        ["nosuchcmd"],
        ["check"],
        ["check", "/nonexistent/run"],
        ["report", "/nonexistent/run"],
        ["serve", "--port", "-1"],
        ["run", "--workload"],
        ["run", "--provider", "x"],
        # a server flag the server would refuse: before any node is touched, not a crash at start
        ["run", "--cluster-name", "tbadarg", "--server-arg=--bogus-flag"],
    ],
)
def test_every_bad_argument_of_every_command_is_one_line(args: list[str]) -> None:
    r = chaos(*args)
    assert r.returncode == 254, r.stdout + r.stderr
    assert len(r.stderr.splitlines()) == 1 and r.stderr.startswith("chaos: "), r.stderr
    assert "Usage:" not in r.stderr and "Try " not in r.stderr


@click.command("boom")
def _boom_command() -> None:
    raise RuntimeError("injected\nsecond line")


def test_an_unexpected_error_is_one_line_and_255(monkeypatch: pytest.MonkeyPatch, capsys) -> None:
    # whatever a command does not handle must not end in a traceback and exit 1 ("invalid")
    import chaos.cli
    from chaos import plugins

    monkeypatch.setitem(plugins.BUILTINS["command"], "boom", f"{__name__}:_boom_command")
    monkeypatch.delenv("CHAOS_TRACEBACK", raising=False)
    with pytest.raises(SystemExit) as e:
        chaos.cli.main(["boom"])
    assert e.value.code == 255
    err = capsys.readouterr().err
    assert err == "chaos: crashed: RuntimeError: injected second line\n"


def test_nemesis_opts_reach_the_nemeses_build_makes() -> None:
    """``--nemesis-opt`` values are parsed by kind and read by ``chaos.nemesis.build``."""
    from chaos.nemesis import build, parse_nemesis_opts

    opts = parse_nemesis_opts(["kill_targets=leader, minority", "clock_max_rate=1.5", "bitflip_count=3"])
    assert opts == {"kill_targets": ["leader", "minority"], "clock_max_rate": 1.5, "bitflip_count": 3}
    nem, _ = build("kill,clock-skew", {"nemesis_interval": 5.0, **opts})
    parts = {type(p).__name__: p for p in nem.nemeses}
    assert parts["KillNemesis"].targets == ["leader", "minority"]
    assert parts["ClockNemesis"].max_rate == 1.5


def test_run_options_are_typed_frozen_and_keep_plugin_options() -> None:
    """RunOptions.parse checks and converts every option once; unknown keys (a nemesis's or a
    plug-in's) stay in extra; the object cannot be changed after the checks."""
    import dataclasses

    from chaos.control.test import RunOptions

    o = RunOptions.parse({"time_limit": "12.5", "rate": 0, "kill_targets": ["leader"], "store": "store"})
    assert o.time_limit == 12.5 and isinstance(o.time_limit, float) and o.rate == 0.0
    assert o.extra["kill_targets"] == ["leader"] and o.as_dict()["kill_targets"] == ["leader"]
    assert o.as_dict()["workload"] == "register"  # a default
    with pytest.raises(dataclasses.FrozenInstanceError):
        o.time_limit = 1.0  # type: ignore[misc]
    with pytest.raises(ConfigError, match="--time-limit nan"):
        RunOptions.parse({"time_limit": "nan"})


def test_sigterm_is_not_swallowed_by_code_catching_exception() -> None:
    """A SIGTERM that lands inside ``except Exception`` (here logging's ``emit``, which turns any
    Exception into a "Logging error" and goes on) still ends the run; and a raise swallowed anyway
    is raised again at the next phase boundary."""
    import io
    import logging
    import os
    import signal

    from chaos.runner import runner

    class SignalOnWrite(io.StringIO):
        def write(self, s: str) -> int:
            os.kill(os.getpid(), signal.SIGTERM)
            return super().write(s)

    log = logging.getLogger("test-sigterm")
    log.propagate = False
    handler = logging.StreamHandler(SignalOnWrite())
    log.addHandler(handler)
    old = signal.signal(signal.SIGTERM, runner._sigterm)
    runner._TERMINATED.clear()
    try:
        with pytest.raises(runner.RunAborted, match="signal 15"):
            log.warning("a line the scheduler writes")
            for _ in range(1000):  # the handler runs between bytecodes, soon after the write
                pass
        with pytest.raises(runner.RunAborted, match="signal 15"):
            runner._raise_if_terminated()
    finally:
        signal.signal(signal.SIGTERM, old)
        runner._TERMINATED.clear()
        log.removeHandler(handler)


def test_no_test_sees_the_checkouts_store(request: pytest.FixtureRequest) -> None:
    """Issue 35 item 7b: the README's first command leaves ``store/latest`` in the checkout, where
    a bare ``chaos check`` then found a run and the bad-argument test above failed. Every test
    runs in an empty directory of its own (tests/conftest.py), so none sees it."""
    assert Path.cwd().resolve() != Path(str(request.config.rootpath)).resolve()
    assert list(Path.cwd().iterdir()) == []


def test_a_bare_check_checks_the_working_directorys_store(tmp_path: Path) -> None:
    """What a bare ``chaos check`` depends on is the working directory's ``store/latest``: a run
    there is checked (its verdict, its summary); without one it is one line, 254."""
    from chaos.history.store import RunDir

    run = RunDir.create(tmp_path / "store", "log-none")
    run.write_test({"workload": "log"})
    ops = [
        {"index": 0, "type": "invoke", "process": 0, "f": "append", "value": 1, "time": 1},
        {"index": 1, "type": "ok", "process": 0, "f": "append", "value": 1, "time": 2, "log_index": 0},
        {"index": 2, "type": "invoke", "process": 1, "f": "read", "value": None, "time": 3},
        {"index": 3, "type": "ok", "process": 1, "f": "read", "value": [1], "time": 4},
    ]
    run.history_path.write_text("".join(json.dumps(o) + "\n" for o in ops))
    r = subprocess.run(
        [sys.executable, "-m", "chaos.cli", "check"],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
    )
    assert r.returncode in (0, 2) and str(run.path) in r.stdout.splitlines()[-1], r.stdout + r.stderr
    assert chaos("check").returncode == 254  # the test's own directory has no store


def test_a_long_step_says_it_is_still_running_and_a_short_one_says_nothing() -> None:
    """Issue 34: a long step (an OS package install, a DB's setup) is never silent: ``progress``
    says ``still <what> (<N> s)`` every period while it runs, and nothing once it has ended."""
    import time

    from chaos.runner.output import progress

    said: list[str] = []
    with progress(said.append, "installing the OS packages", every=0.05):
        time.sleep(0.28)
    n = len(said)
    assert n >= 3 and all(s.startswith("still installing the OS packages (") for s in said), said
    time.sleep(0.15)
    assert len(said) == n  # the beat stops with the step
    quiet: list[str] = []
    with progress(quiet.append, "in setup", every=5.0):
        pass
    assert quiet == []

    def broken(line: str) -> None:
        raise OSError("closed console")

    with progress(broken, "in setup", every=0.02):  # a status line never breaks its step
        time.sleep(0.08)
