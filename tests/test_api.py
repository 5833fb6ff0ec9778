"""The plug-in API (issue 34): one public module (``chaos.api``) with a semantic version and a
changelog, the only ``chaos`` import of the examples and the plug-in guide; a plug-in's declared
API range checked at load; moved names that keep working with a deprecation naming the new
import; node lookups taking a Node or a name; and a client's own exception recorded as a client
error (type, message, the plug-in's file:line) that never makes a run invalid or "unavailable"."""

from __future__ import annotations

import ast
import json
import os
import re
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

import chaos.api as api
from chaos import plugins
from chaos.errors import ConfigError

ROOT = Path(__file__).resolve().parents[1]


def test_every_name_of_the_api_resolves_and_the_version_is_semver_in_the_changelog() -> None:
    missing = [n for n in api.__all__ if not hasattr(api, n)]
    assert not missing, missing
    assert len(set(api.__all__)) == len(api.__all__)
    assert re.fullmatch(r"\d+\.\d+\.\d+", api.VERSION), api.VERSION
    changelog = (ROOT / "CHANGELOG.md").read_text()
    section = changelog.split(f"## [{api.VERSION}]", 1)
    assert len(section) == 2, f"CHANGELOG.md has no section for {api.VERSION}"
    body = section[1].split("\n## [", 1)[0]
    assert "### Added" in body or "### Changed" in body or "### Removed" in body, body
    first = changelog.split("## [1.0.0]", 1)[1].split("\n## [", 1)[0]
    for heading in ("### Added", "### Changed", "### Deprecated", "### Removed"):
        assert heading in first, heading
    # the moves that broke last week's plug-ins are written down
    assert "chaos.workloads.clients" in first and "receives the\n  worker's `Node`" in first
    # what a plug-in needs is there
    for name in ("DB", "DBOption", "Node", "Control", "Remote", "Test", "Op", "Workload", "NemesisKind",
                 "DaemonProcess", "Failed", "Indeterminate", "Aborted", "DBError", "Checker",
                 "capabilities", "value_kind"):  # fmt: skip
        assert name in api.__all__, name


_IMPORT = re.compile(r"^\s*(?:from\s+(chaos(?:\.\w+)*)\s+import|import\s+(chaos(?:\.\w+)*))", re.M)


@pytest.mark.parametrize("path", [*sorted((ROOT / "examples").glob("*.py")), ROOT / "docs" / "plugins.md"])
def test_the_examples_and_the_plugin_guide_import_only_chaos_api(path: Path) -> None:
    text = path.read_text()
    found = [m.group(1) or m.group(2) for m in _IMPORT.finditer(text)]
    assert found, f"{path.name} imports nothing of chaos: the test would prove nothing"
    others = sorted({m for m in found if m != "chaos.api"})
    assert not others, (
        f"{path.relative_to(ROOT)} imports {', '.join(others)}; a plug-in imports chaos.api only"
    )


def _chaos_imports(path: Path) -> list[str]:
    """Every module of ``chaos`` that ``path`` imports: module level, in functions and under
    ``if TYPE_CHECKING:`` alike."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [node.module]
        elif isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        else:
            continue
        found += [n for n in names if n == "chaos" or n.startswith("chaos.")]
    return found


def test_dledgers_glue_is_a_plugin_that_imports_chaos_api_only() -> None:
    """``chaos_dledger`` (the default DB, its clients, presets and ``chaos sim``) reaches the tool
    through ``chaos.api`` alone, as any plug-in must (setup.cfg's import-linter contract holds it
    too): what a simulator of its own needs is in the API (1.2.0)."""
    found = {p.name: _chaos_imports(p) for p in sorted((ROOT / "chaos_dledger").glob("*.py"))}
    assert sum(len(v) for v in found.values()) >= 10, found  # the glue does use the tool
    for name in ("db.py", "clients.py", "sim.py", "sim_spark.py", "presets.py"):
        assert found[name], f"{name} imports nothing of chaos: the test would prove nothing"
    others = {name: sorted(set(v) - {"chaos.api"}) for name, v in found.items() if set(v) - {"chaos.api"}}
    assert not others, f"chaos_dledger imports {others}; a plug-in imports chaos.api only"


def test_the_plugin_guide_import_block_runs() -> None:
    text = (ROOT / "docs" / "plugins.md").read_text()
    block = text.split("## The imports a plug-in needs", 1)[1].split("```python\n", 1)[1].split("```", 1)[0]
    names: dict[str, object] = {}
    exec(compile(block, "docs/plugins.md", "exec"), names)
    assert names["VERSION"] == api.VERSION and names["Node"] is api.Node


# -- the API range a plug-in declares ----------------------------------------------------------------

RANGED = """
API = "{module_range}"


class RangedDB:
    API = "{class_range}"
    name = "ranged"

    def setup(self, control): pass
    def teardown(self, control): pass
    def describe(self): return "nothing"
"""


def _ranged(tmp_path: Path, module_range: str, class_range: str) -> Path:
    d = tmp_path / f"r{abs(hash((module_range, class_range)))}"
    d.mkdir()
    (d / "rangedplug.py").write_text(RANGED.format(module_range=module_range, class_range=class_range))
    return d


def _chaos(*args: str, path: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(path), str(ROOT)])}
    return subprocess.run(
        [sys.executable, "-m", "chaos.cli", *args],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
        cwd=path,
    )


@pytest.mark.parametrize(
    ("module_range", "class_range", "needle"),
    [
        (">=1.0,<2", ">=2.0,<3", "needs the chaos plug-in API >=2.0,<3 (API in RangedDB); this chaos provides API 1.2.0"),
        ("<1", "", "needs the chaos plug-in API <1 (API in rangedplug)"),
        (">=1.0", ">= one point oh", "API '>= one point oh' (in RangedDB) is not a version range"),
    ],
)  # fmt: skip
def test_a_plugin_outside_its_declared_api_range_is_one_line_254(
    tmp_path: Path, module_range: str, class_range: str, needle: str
) -> None:
    d = _ranged(tmp_path, module_range, class_range)
    if not class_range:
        src = (d / "rangedplug.py").read_text().replace('    API = ""\n', "")
        (d / "rangedplug.py").write_text(src)
    r = _chaos("run", "--db", "rangedplug:RangedDB", "--time-limit", "1", path=d)
    assert r.returncode == 254, (r.returncode, r.stdout, r.stderr)
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("chaos: --db rangedplug:RangedDB: "), r.stderr
    assert needle in lines[0], lines[0]
    assert "Traceback" not in r.stderr


def test_a_plugin_inside_its_range_loads(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    d = _ranged(tmp_path, ">=1.0,<2", "~=1.0")
    monkeypatch.syspath_prepend(str(d))
    sys.modules.pop("rangedplug", None)
    assert plugins.resolve("db", "rangedplug:RangedDB").name == "ranged"
    with pytest.raises(ConfigError, match="provides API 1.2.0"):
        plugins.check_api(SimpleNamespace(API=">=3"), "--db x:Y")
    plugins.check_api(SimpleNamespace(API="/v3/kv"), "--db x:Y")  # a module's own API path: no range


# -- moved names ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("old", "name"), [("chaos.workloads.clients", "NotSent"), ("chaos.cluster.node", "Node")]
)
def test_a_moved_module_still_imports_with_a_deprecation_naming_chaos_api(old: str, name: str) -> None:
    code = (
        "import warnings; warnings.simplefilter('always')\n"
        f"from {old} import {name}\n"
        "import chaos.api, chaos.plugins\n"
        f"assert {name} is getattr(chaos.api, {name!r})\n"
        "print(chaos.plugins.DEPRECATIONS)\n"
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, env=env)
    assert r.returncode == 0, r.stderr
    assert "DeprecationWarning" in r.stderr and f"{old} is deprecated" in r.stderr, r.stderr
    assert "chaos.api" in r.stderr and "API 2.0" in r.stderr
    assert r.stdout.count("deprecated since API 1.0.0") == 1, r.stdout


def test_node_lookups_take_a_node_or_a_name() -> None:
    nodes = [api.Node("n1", "10.0.0.1"), api.Node("n2", "10.0.0.2")]
    control = api.Control(nodes)
    try:
        assert control.node(nodes[1]) is nodes[1] and control.node("n2") is nodes[1]
        assert control.remote(nodes[0]).node is nodes[0]
        with pytest.raises(ValueError, match="unknown node 'n9'; expected one of n1, n2"):
            control.node(api.Node("n9", "10.0.0.9"))
    finally:
        control.close()


# -- client errors ----------------------------------------------------------------------------------

CRASHY = """
class Reg:
    def __init__(self, node):
        self.node = node

    def read(self, key):
        raise ValueError(f"unknown node {self.node!r}")  # line 7

    def write(self, key, value):
        raise KeyError(key)  # line 10: declared by the DB below

    def cas(self, key, expected, new):
        raise FileNotFoundError("/etc/nothing")  # line 13: a file error is a bug, not the network

    def close(self):
        pass


class CrashyDB:
    name = "crashy"
    client_protocols = ("register",)
    client_errors = (KeyError,)

    def open_client(self, protocol, test, node, process):
        return Reg(node)
"""


def test_a_client_exception_is_a_client_error_naming_the_plugins_file_and_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from chaos.workloads.register import RegisterWorker

    (tmp_path / "crashyplug.py").write_text(CRASHY)
    monkeypatch.syspath_prepend(str(tmp_path))
    sys.modules.pop("crashyplug", None)
    import crashyplug  # type: ignore[import-not-found]

    test = SimpleNamespace(db=crashyplug.CrashyDB(), nodes=[api.Node("n1", "10.0.0.1")])
    w = RegisterWorker().open(test, "n1")

    def op(f: str, value: object) -> api.Op:
        return api.Op(api.INVOKE, 0, f, value, 0, 0, "n1", None, 3, {})

    read = w.invoke(test, op("read", None))
    ce = read.extra["client_error"]
    assert read.type == api.INFO and (ce["type"], ce["where"]) == ("ValueError", "crashyplug.py:7"), read
    assert ce["message"].startswith("unknown node Node(name='n1'")
    assert read.error.startswith("client error: ValueError: unknown node") and read.error.endswith(
        "at crashyplug.py:7"
    )
    write = w.invoke(test, op("write", 2))  # the DB declared KeyError: an answer, indeterminate
    assert write.type == api.INFO and "client_error" not in write.extra
    assert write.error.startswith("indeterminate: KeyError")
    cas = w.invoke(test, op("cas", [1, 2]))
    assert cas.extra["client_error"]["where"] == "crashyplug.py:13"


def test_an_aborted_op_is_a_fail_counted_apart_from_unavailable() -> None:
    from chaos.history.analysis import ABORTED, UNAVAILABLE, fail_class

    def abort() -> object:
        raise api.Aborted("could not serialize access")

    def refuse() -> object:
        raise api.Failed("not the leader")

    inv = api.Op(api.INVOKE, 0, "txn", [["r", 1, None]], 0, 0, "n1", None, None, {})
    aborted, refused = api.complete(inv, abort), api.complete(inv, refuse)
    assert (aborted.type, aborted.extra, fail_class(aborted)) == ("fail", {"aborted": True}, ABORTED)
    assert (refused.type, fail_class(refused)) == ("fail", UNAVAILABLE)


def _history(path: Path, completions: list[dict[str, object]]) -> Path:
    lines, t = [], 0
    for c in completions:
        f = str(c["f"])
        lines.append({"index": len(lines), "type": "invoke", "process": 0, "f": f, "value": None, "time": t})
        lines.append({"index": len(lines), "process": 0, "f": f, "value": None, "time": t + 1000, **c})
        t += 2000
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    return path


def test_client_errors_make_the_checks_unknown_never_invalid(tmp_path: Path) -> None:
    from chaos.history.checkers.clienterrors import ClientErrorsChecker
    from chaos.history.checkers.registry import StatsChecker, compose

    ce = {"type": "ValueError", "message": "unknown node 'n2'", "where": "etcd_db.py:42"}
    h = _history(tmp_path / "h.jsonl", [{"type": "info", "f": "read", "client_error": ce}] * 3)
    r = compose([StatsChecker(), ClientErrorsChecker()]).check({}, h, {})
    assert r["valid"] == "unknown", r
    assert r["checkers"]["stats"]["by_f"]["read"]["valid"] == "unknown"
    crashed = r["checkers"]["client-errors"]
    assert crashed["summary"] == "ValueError: unknown node 'n2' at etcd_db.py:42, 3 of 3 ops"
    assert crashed["cause"].startswith("client errors: ValueError: unknown node 'n2' at etcd_db.py:42")
    # without client errors an f that never succeeded is still invalid (Jepsen's stats)
    h2 = _history(tmp_path / "h2.jsonl", [{"type": "fail", "f": "read"}] * 2)
    r2 = compose([StatsChecker(), ClientErrorsChecker()]).check({}, h2, {})
    assert r2["valid"] is False and r2["checkers"]["client-errors"]["valid"] is True


def test_a_txn_client_is_told_what_the_keys_hold() -> None:
    from chaos.workloads import get

    for name, kind in (("list-append", "list"), ("rw-register", "register"), ("register", None)):
        wl = get(name, {})
        assert wl.value_kind == kind and api.value_kind(SimpleNamespace(workload=wl)) == kind


def test_the_summary_shows_aborted_fails_and_client_errors_apart(tmp_path: Path) -> None:
    from rich.console import Console

    from chaos.history.checkers.clienterrors import ClientErrorsChecker
    from chaos.history.checkers.perf import PerfChecker
    from chaos.history.checkers.registry import StatsChecker, compose
    from chaos.history.report.summary import summary_table

    ce = {"type": "KeyError", "message": "'n2'", "where": "mydb.py:7"}
    h = _history(
        tmp_path / "history.jsonl",
        [
            {"type": "ok", "f": "txn"},
            {"type": "fail", "f": "txn", "aborted": True},
            {"type": "fail", "f": "txn", "aborted": True},
            {"type": "fail", "f": "txn"},
            {"type": "info", "f": "txn", "client_error": ce},
        ],
    )
    results = compose([StatsChecker(), PerfChecker(), ClientErrorsChecker()]).check({}, h, {})
    assert results["checkers"]["perf"]["ops"]["fail_aborted"] == 2
    assert results["checkers"]["perf"]["ops"]["fail_unavailable"] == 1
    con = Console(width=200, record=True, file=open(os.devnull, "w"))  # noqa: SIM115
    con.print(summary_table(results, h, checkers_table=False))
    text = con.export_text()
    assert "fail: aborted" in text and "fail: unavailable" in text
    row = next(ln for ln in text.splitlines() if " txn " in ln)
    cells = [c.strip() for c in re.split(r"[│|]", row) if c.strip()]
    assert cells == ["txn", "1", "0", "2", "1", "1"], row  # ok, no match, aborted, unavailable, info
    assert "client errors: KeyError: 'n2' at mydb.py:7, 1 of 5 ops" in text
