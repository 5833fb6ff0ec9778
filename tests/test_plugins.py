"""Plug-ins (issue 15): DBs, workloads and nemeses named ``module:attr`` or by an entry point; the DB's
options (``--db-opt``); the capability checks that refuse, before any node is touched, a nemesis
the DB cannot support; the client helper's fail/info rule; and the runner/nemesis packages naming
no DB. The plug-in modules are real files on a temporary ``sys.path`` (an installed distribution is
a ``.dist-info`` directory with ``entry_points.txt``, as pip leaves it)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from chaos import plugins
from chaos.control import db as dbmod
from chaos.control.client import Answer, Failed, Indeterminate, NotSent, complete
from chaos.control.db import CAPABILITIES, NoopDB, capabilities, parse_db_opts
from chaos.errors import ConfigError
from chaos.history.op import Op
from chaos_dledger.db import DLedgerDB

ROOT = Path(__file__).resolve().parents[1]

TINY = '''
"""A tiny third-party DB and workload for the plug-in tests: process control, no pause."""
from chaos.control.db import DBOption
from chaos.workloads import Workload


class NoPauseDB:
    """A DB that can be killed and started but not paused."""

    name = "tiny"
    db_options = (DBOption("mode", choices=("safe", "fast"), help="how it runs"),
                  DBOption("port", parse=int, help="its port"))
    client_protocols = frozenset({"register"})

    def __init__(self, mode="safe", port=7000):
        if not 1 <= port <= 65535:
            raise ValueError(f"port {port}: expected 1..65535")
        self.mode, self.port = mode, port

    def describe(self):
        return f"mode {self.mode}, port {self.port}"

    def setup(self, control): pass
    def teardown(self, control): pass
    def start(self, remote): pass
    def kill(self, remote): pass
    def running(self, remote): return True
    def open_client(self, protocol, test, node, process): raise NotImplementedError


def workload(opts):
    return Workload(name="tiny", client=None, generator=None, protocol="register")


class StallNemesis:
    """A plug-in fault kind that needs the pause capability."""

    kind = "stall"
    requires = ("pause",)
    nemesis_options = {"stall_ms": "number"}

    def __init__(self, opts):
        self.ms = opts.get("stall_ms", 10)

    def setup(self, test): pass
    def teardown(self, test): pass
    def heal(self, test): pass
    def fs(self): return {"start-stall", "stop-stall"}
    def invoke(self, test, op): return op


NOT_A_DB = 42
'''


@pytest.fixture
def plugin_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A directory on sys.path with the module ``tinyplug`` and a distribution declaring it in the
    chaos entry-point groups."""
    (tmp_path / "tinyplug.py").write_text(textwrap.dedent(TINY))
    info = tmp_path / "tinyplug-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: tinyplug\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(
        "[chaos.dbs]\ntiny = tinyplug:NoPauseDB\n\n"
        "[chaos.workloads]\ntiny-wl = tinyplug:workload\n\n"
        "[chaos.nemeses]\nstall = tinyplug:StallNemesis\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    sys.modules.pop("tinyplug", None)
    return tmp_path


def chaos(*args: str, path: Path | None = None, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ)
    if path is not None:
        env["PYTHONPATH"] = os.pathsep.join([str(path), env.get("PYTHONPATH", "")])
    return subprocess.run(
        [sys.executable, "-m", "chaos.cli", *args],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
        cwd=cwd,
    )


def one_line_254(r: subprocess.CompletedProcess[str]) -> str:
    assert r.returncode == 254, (r.returncode, r.stdout, r.stderr)
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("chaos: "), r.stderr
    assert "Traceback" not in r.stderr
    return lines[0]


# -- the must-show lines -----------------------------------------------------------------------------


def test_a_missing_db_module_exits_254_naming_the_module(tmp_path: Path) -> None:
    line = one_line_254(chaos("run", "--db", "missing.module:X", "--store", str(tmp_path / "store")))
    assert "missing.module" in line and "--db" in line
    assert not (tmp_path / "store").exists()  # refused before anything was written


def test_a_nemesis_the_db_cannot_support_exits_254_naming_the_capability(plugin_path: Path) -> None:
    store = plugin_path / "store"
    line = one_line_254(
        chaos(
            "run", "--db", "tinyplug:NoPauseDB", "--nemesis", "pause", "--store", str(store), path=plugin_path
        )
    )
    assert "pause capability" in line and "tiny" in line and "--nemesis pause" in line
    # through the entry point's name too, and for a leader-aimed kind the primary capability
    line = one_line_254(
        chaos("run", "--db", "tiny", "--nemesis", "kill-leader", "--store", str(store), path=plugin_path)
    )
    assert "primary capability" in line and "kill-leader" in line
    # a *_targets option naming the leader needs the primary capability as well
    line = one_line_254(
        chaos(
            "run",
            "--db",
            "tiny",
            "--nemesis",
            "kill",
            "--nemesis-opt",
            "kill_targets=leader",
            "--store",
            str(store),
            path=plugin_path,
        )
    )
    assert "primary capability" in line
    assert not store.exists()


# -- loading ---------------------------------------------------------------------------------------


def test_a_db_and_workload_load_through_module_attr(plugin_path: Path) -> None:
    db = dbmod.build_db("tinyplug:NoPauseDB", ["mode=fast", "port=7100"])
    assert (db.name, db.describe()) == ("tiny", "mode fast, port 7100")
    assert capabilities(db) == {"process", "clients"}
    from chaos.workloads import get

    w = get("tinyplug:workload", {})
    assert (w.name, w.protocol) == ("tiny", "register")


def test_a_db_workload_and_nemesis_load_through_entry_points(plugin_path: Path) -> None:
    assert "tiny" in plugins.names("db") and plugins.names("db")[:2] == ["dledger", "noop"]
    assert "tiny-wl" in plugins.names("workload") and "stall" in plugins.names("nemesis")
    db = dbmod.build_db("tiny", ["port=7200"])
    assert type(db).__module__ == "tinyplug" and db.port == 7200
    from chaos.nemesis import build, parse_nemesis_opts, plugin_options, requirements

    assert plugin_options("stall,kill") == {"stall_ms": "number"}
    opts = parse_nemesis_opts(["stall_ms=25"], plugin_options("stall"))
    assert opts == {"stall_ms": 25.0}
    assert requirements("stall,kill", opts) == {"stall": {"pause"}, "kill": {"process"}}
    nem, generator = build("stall,kill", opts)
    assert {"start-stall", "stop-stall", "start-kill"} <= nem.fs() and generator is not None
    stall = next(n for n in nem.nemeses if getattr(n, "kind", None) == "stall")
    assert stall.ms == 25.0
    from chaos.workloads import get

    assert get("tiny-wl", {}).name == "tiny"


def test_the_help_lists_the_dbs_and_their_options(plugin_path: Path) -> None:
    r = chaos("run", "--help", path=plugin_path)
    assert r.returncode == 0, r.stderr
    assert re.search(r"^\s+dledger\s", r.stdout, re.M) and re.search(r"^\s+tiny\s", r.stdout, re.M)
    assert re.search(r"read-mode \(raft-log\|read-index\|lease\|unsafe\)", r.stdout)
    assert re.search(r"mode \(safe\|fast\)\s+how it runs", r.stdout)


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--db", "tinyplug:NOT_A_DB"], "int is not a DB"),
        (["--db", "chaos.control.db:DBError"], "class DBError is not a DB"),
        (["--db", "tinyplug:NoSuchName"], "module tinyplug has no attribute 'NoSuchName'"),
        (["--db", "no-such-db"], "unknown db; expected one of dledger, noop"),
        (["--db", "tinyplug:NoPauseDB", "--db-opt", "port=99999"], "port 99999: expected 1..65535"),
        (["--db", "tinyplug:NoPauseDB", "--workload", "log"], "offers no 'log' client"),
        (["--workload", "tinyplug:nope"], "--workload tinyplug:nope"),
        (["--nemesis", "tinyplug:NOT_A_DB"], "is not a nemesis factory"),
        (["--nemesis", "partition-ring", "--nemesis-opt", "stall_ms=1"], "stall_ms=1"),
    ],
)
def test_bad_plugins_are_one_line_254(plugin_path: Path, args: list[str], needle: str) -> None:
    line = one_line_254(chaos("run", *args, "--store", str(plugin_path / "store"), path=plugin_path))
    assert needle in line, line


# -- DB options ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("item", "needle"),
    [
        ("flush", "expected KEY=VALUE with KEY an option of DLedger (flush, read-mode, server-arg"),
        ("nope=1", "'nope=1'"),
        ("flush=fast", "expected flush one of sync, async"),
        ("port=abc", "bad value for port"),
        ("faketime=maybe", "not a boolean"),
        ("read-mode=lease", None),
    ],
)
def test_db_opt_items_are_parsed_by_the_db_or_refused_in_one_line(
    tmp_path: Path, item: str, needle: str | None
) -> None:
    if needle is None:
        assert parse_db_opts(DLedgerDB, [item], "DLedger") == {"read_mode": "lease"}
        return
    with pytest.raises(ValueError) as e:
        parse_db_opts(DLedgerDB, [item], "DLedger")
    assert needle in str(e.value) and "\n" not in str(e.value)
    line = one_line_254(chaos("run", "--db-opt", item, "--store", str(tmp_path / "store")))
    assert needle in line


def test_dledger_options_and_their_aliases_reach_the_db() -> None:
    kw = dbmod.parse_db_kwargs(None, ["flush=async", "server-arg=--heartbeat-ms", "server-arg=50"])
    assert kw == {"flush": "async", "server_args": ["--heartbeat-ms", "50"]}
    db = dbmod.build_db("dledger", ["flush=async", "read-mode=lease", "faketime=false"])
    assert db.describe() == "flush async, read mode lease"
    assert "clock" not in capabilities(db)  # no libfaketime: clock faults are refused
    assert capabilities(DLedgerDB()) == set(CAPABILITIES)
    with pytest.raises(ConfigError, match="flush given twice"):
        dbmod.build_db(None, ["flush=sync", "flush=async"])


def test_noop_db_capabilities() -> None:
    assert capabilities(NoopDB()) == {"process", "pause", "primary", "log-files", "recovery"}


# -- the client rule: not sent -> fail, sent without an answer -> info ------------------------------


def _op(f: str = "write", value: object = 3) -> Op:
    return Op("invoke", 0, f, value, time=0, index=0, key=1)


def test_complete_maps_not_sent_to_fail_and_no_answer_to_info() -> None:
    def raise_(e: Exception) -> object:
        raise e

    ok = complete(_op(), lambda: Answer(None, node="n2", fields={"sticky": True}), lambda _: 3)
    assert (ok.type, ok.value, ok.node, ok.extra) == ("ok", 3, "n2", {"sticky": True})
    not_sent = complete(_op(), lambda: raise_(NotSent("connection refused", node="n1")))
    assert (not_sent.type, not_sent.error, not_sent.node) == ("fail", "connection refused", "n1")
    refused = complete(_op(), lambda: raise_(Failed("NOT_LEADER", compare_failed=True)))
    assert refused.type == "fail" and refused.extra == {"compare_failed": True}
    timeout = complete(_op(), lambda: raise_(Indeterminate("timeout after 1 s")))
    assert (timeout.type, timeout.error) == ("info", "indeterminate: timeout after 1 s")
    crashed = complete(_op(), lambda: raise_(OSError("reset by peer")))
    assert crashed.type == "info" and crashed.error == "indeterminate: OSError: reset by peer"
    assert complete(_op("read", None), lambda: 4).value == 4


# -- the runner and the nemeses name no DB ---------------------------------------------------------


def test_no_file_under_control_or_nemesis_names_dledger() -> None:
    """Nothing in the generic packages names the system under test: every file under chaos/
    (docstrings, help texts, templates included) is free of DLedger, its msgpack dependency and
    its store's file names (``grep -rniE "dledger|msgpack|currterm|highwater" chaos``); DLedger's
    glue lives in chaos_dledger/."""
    pattern = re.compile(r"dledger|msgpack|currterm|highwater", re.I)
    named = []
    for p in sorted((ROOT / "chaos").rglob("*")):
        if p.is_file() and "__pycache__" not in p.parts and p.suffix != ".pyc":
            for no, line in enumerate(p.read_text(errors="replace").splitlines(), 1):
                if pattern.search(line):
                    named.append(f"{p.relative_to(ROOT)}:{no}: {line.strip()}")
    assert not named, "\n".join(named)


def test_the_imports_docs_plugins_lists_all_resolve() -> None:
    """docs/plugins.md's "imports a plug-in needs" block runs as written."""
    text = (ROOT / "docs" / "plugins.md").read_text()
    section = text.split("## The imports a plug-in needs", 1)[1]
    block = section.split("```python\n", 1)[1].split("```", 1)[0]
    names: dict[str, object] = {}
    exec(compile(block, "docs/plugins.md", "exec"), names)
    for name in (
        "DBError",
        "LogPattern",
        "DBOption",
        "Remote",
        "NotSent",
        "Indeterminate",
        "Workload",
        "Nemesis",
    ):
        assert name in names, name


# its owner (another branch of issue 22) rewords its docstring; drop it from here then
# -- a plug-in DB and workload through the real runner, on a named docker cluster --------------------

PLUGGED = '''
"""A plug-in DB (DLedger under another name) and workload (a short register), named module:attr."""
from chaos_dledger.db import DLedgerDB
from chaos.workloads import register


class Plugged(DLedgerDB):
    """DLedger, plugged in from outside the package."""

    name = "plugged"


def short_register(opts):
    return register.workload({**opts, "per_key_limit": 20})
'''


@pytest.mark.docker
@pytest.mark.slow
def test_a_plugged_db_and_workload_run_on_a_named_cluster(tmp_path: Path) -> None:
    from chaos.cluster.docker import DockerProvider

    (tmp_path / "plugged.py").write_text(textwrap.dedent(PLUGGED))
    provider = DockerProvider(3, name="plugtest")
    provider.up()
    try:
        store = tmp_path / "store"
        r = chaos(
            "run", "--cluster-name", "plugtest", "--db", "plugged:Plugged", "--db-opt", "flush=sync",
            "--workload", "plugged:short_register", "--nemesis", "pause", "--nemesis-interval", "3",
            "--time-limit", "15", "--store", str(store), "--no-live", path=tmp_path, cwd=tmp_path,
        )  # fmt: skip
        assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
        assert "plugged setup on 3 nodes (flush sync, read mode raft-log)" in r.stdout
        import json

        (test_json,) = {p.resolve() for p in store.glob("*/*/test.json")}  # "latest" links to it too
        test = json.loads(test_json.read_text())
        assert (test["db"], test["db_name"], test["db_opts"]) == (
            "plugged:Plugged",
            "plugged",
            {"flush": "sync"},
        )
        assert test["workload"] == "register" and len(test["nodes"]) == 3
        assert "pause" in test["db_capabilities"] and test["opts"]["cluster_name"] == "plugtest"
        history = (test_json.parent / "history.jsonl").read_text()
        assert '"start-pause"' in history and '"f":"read"' in history.replace(" ", "")
    finally:
        provider.down()
