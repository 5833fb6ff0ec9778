"""``chaos plugin check MODULE:ATTR`` (issue 34): a deliberately broken plug-in gets one line per
violation, each with its fix, and exit 1; the examples conform (the contract here; the smoke on a
cluster in the docker test below); a module that does not load is one line, exit 254."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

BROKEN = '''
API = ">=1.0,<2"


class BrokenDB:
    """Every kind of violation the contract check knows, one each."""

    name = ""                                   # 1 name: empty
    os_packages = "postgresql"                  # 2 os_packages: a str, not a tuple of names
    daemons = ("server", "sentinel")
    client_protocols = ("register",)
    log_patterns = ("panic",)                   # 3 log_patterns: not a LogPattern
    client_timeout = -1                         # 4 client_timeout: negative
    client_errors = ("ConnectionError",)        # 5 client_errors: not a class

    def setup(self):                            # 6 setup: takes no control
        pass

    def teardown(self, control):
        pass

    def describe(self):
        raise RuntimeError("no description")    # 7 describe() raises

    def start(self, remote, daemon="server"):
        pass

    def kill(self, remote):                     # 8 kill: no daemon= though daemons are declared
        pass

    def running(self, remote, daemon="server"):
        return True

    def pause(self, remote, daemon="server"):   # 9 the pause capability: no resume
        pass

    def open_client(self, protocol, test, node):  # 10 open_client: no process
        return None
'''

VIOLATIONS = [
    "violation: name: is ''; fix: set name",
    "violation: the pause capability: has pause but not resume, so it is off; fix: define resume",
    "violation: setup: is setup(), but the tool calls setup(control); fix: define it as setup(control)",
    "violation: kill: takes no daemon= keyword, but the DB declares daemons ['server', 'sentinel']; fix:",
    "violation: open_client: is open_client(protocol, test, node), but the tool calls "
    "open_client(protocol, test, node, process)",
    "violation: os_packages: is 'postgresql'; fix: declare a tuple of names, e.g. os_packages = ('postgresql',)",
    "violation: log_patterns: 'panic' is not a LogPattern; fix: use chaos.api.LogPattern",
    "violation: client_timeout: is -1; fix: declare a number of seconds >= 0",
    "violation: client_errors: 'ConnectionError' is not an exception class; fix: list exception classes",
    "violation: describe(): raised RuntimeError: no description at brokenplug.py:",
]


def chaos(*args: str, path: Path | None = None) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(path or ROOT), str(ROOT)])}
    return subprocess.run(
        [sys.executable, "-m", "chaos.cli", "plugin", "check", *args],
        capture_output=True, text=True, timeout=1200, env=env, cwd=path or ROOT,
    )  # fmt: skip


def test_a_broken_plugin_gets_one_line_per_violation_with_its_fix(tmp_path: Path) -> None:
    (tmp_path / "brokenplug.py").write_text(BROKEN)
    r = chaos("brokenplug:BrokenDB", "--no-smoke", path=tmp_path)
    assert r.returncode == 1, (r.returncode, r.stdout, r.stderr)
    lines = [ln for ln in r.stdout.splitlines() if ln.startswith("violation: ")]
    assert len(lines) == len(VIOLATIONS), "\n".join(lines)
    for want in VIOLATIONS:
        assert sum(ln.startswith(want) for ln in lines) == 1, f"{want!r} not once in:\n" + "\n".join(lines)
    assert all("; fix: " in ln for ln in lines)
    assert r.stdout.rstrip().endswith(f"brokenplug:BrokenDB: {len(VIOLATIONS)} violations")


def test_a_broken_setup_is_one_violation_and_the_smoke_touches_no_node(tmp_path: Path) -> None:
    """Without --no-smoke a setup the tool cannot call is still one line: the smoke does not call it
    again (once a second violation, 'setup(control): raised TypeError'), nor provision a node for
    it (the ssh node here is unreachable, TEST-NET-1). The members the contract found unusable are
    the ones the smoke skips."""
    from chaos.runner.plugincheck import Findings, check_contract

    (tmp_path / "brokenplug.py").write_text(BROKEN)
    r = chaos("brokenplug:BrokenDB", "--provider", "ssh", "--nodes", "192.0.2.1", path=tmp_path)
    assert r.returncode == 1, (r.returncode, r.stdout, r.stderr)
    lines = [ln for ln in r.stdout.splitlines() if ln.startswith("violation: ")]
    assert len(lines) == len(VIOLATIONS) and "TypeError" not in r.stdout, r.stdout
    assert "note: the smoke skipped: setup cannot be called as the tool calls it (above)" in r.stdout
    sys.path.insert(0, str(tmp_path))
    try:
        found = Findings(lambda line: None)
        check_contract("brokenplug:BrokenDB", (), found)
    finally:
        sys.path.remove(str(tmp_path))
        sys.modules.pop("brokenplug", None)
    assert found.unusable == {"setup", "kill", "open_client"}, found.unusable


def test_unreachable_nodes_are_one_line_as_in_chaos_run_not_a_crash() -> None:
    """The smoke on nodes it cannot reach says so as chaos run does (exit 255, one line), not
    'crashed: NodeUnreachable'. Port 1 on loopback refuses at once."""
    r = chaos("examples.etcd:EtcdDB", "--provider", "ssh", "--nodes", "n1=127.0.0.1:1",
              "--no-strict-host-key-checking")  # fmt: skip
    assert r.returncode == 255, (r.returncode, r.stdout, r.stderr)
    assert r.stderr.startswith("chaos: cannot reach the nodes: n1") and r.stderr.count("\n") == 1, r.stderr
    assert "crashed" not in r.stderr and "Traceback" not in r.stderr


def test_a_plugin_outside_its_api_range_is_a_violation(tmp_path: Path) -> None:
    (tmp_path / "oldplug.py").write_text(
        'API = "<1"\n\nclass OldDB:\n    name = "old"\n    def setup(self, control): pass\n'
        "    def teardown(self, control): pass\n    def describe(self): return 'old'\n"
    )
    r = chaos("oldplug:OldDB", "--no-smoke", path=tmp_path)
    assert r.returncode == 1, r.stdout + r.stderr
    (line,) = [ln for ln in r.stdout.splitlines() if ln.startswith("violation: ")]
    assert line.startswith(
        "violation: API: needs the chaos plug-in API <1 (API in oldplug); this chaos provides"
    )


@pytest.mark.parametrize("spec", ["examples.etcd:EtcdDB", "examples.postgres:PostgresDB"])
def test_the_examples_conform_to_the_contract(spec: str) -> None:
    r = chaos(spec, "--no-smoke")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "violation: " not in r.stdout and "note: " not in r.stdout, r.stdout
    assert r.stdout.rstrip().endswith(f"{spec}: 0 violations, conforms to the plug-in API")


def test_a_module_that_does_not_load_is_one_line_254(tmp_path: Path) -> None:
    r = chaos("nosuchplug:DB", "--no-smoke", path=tmp_path)
    assert r.returncode == 254 and r.stderr.strip().count("\n") == 0, r.stdout + r.stderr
    assert "no module named 'nosuchplug'" in r.stderr
    assert r.stderr.startswith("chaos: nosuchplug:DB: ")  # the argument as given, not chaos run's --db


@pytest.mark.docker
@pytest.mark.slow
def test_the_etcd_example_passes_the_smoke_on_a_cluster(tmp_path: Path) -> None:
    from chaos.cluster.docker import DockerProvider

    provider = DockerProvider(3, name="plugcheck", ssh_timeout=300)
    try:
        provider.up()
        r = chaos("examples.etcd:EtcdDB", "--cluster-name", "plugcheck")
    finally:
        provider.down()
    assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-2000:]
    for step in ("ok: setup(control)", "ok: register cas: ok [1, 2]", "ok: register read after cas: ok 2",
                 "ok: log_files on every node", "ok: teardown(control) again"):  # fmt: skip
        assert step in r.stdout, r.stdout[-4000:]
