"""The one registry (issue 37, item 4): every kind (DBs, workloads, nemeses, checkers, models,
providers, commands) is read through :mod:`chaos.plugins`, the tool's own names are exactly the
entry points ``setup.cfg`` declares, each loads, and no module of the tool is loaded by a string
(``import_module("chaos...``) beside the registry."""

from __future__ import annotations

import configparser
import re
from pathlib import Path

import click
import pytest

from chaos import plugins
from chaos.history.checkers.models import get_model, model_names
from chaos.history.checkers.registry import checkers_for, make_checker

ROOT = Path(__file__).resolve().parents[1]


def declared() -> dict[str, dict[str, str]]:
    """setup.cfg's entry points, group -> {name: "module:attr"}."""
    cfg = configparser.ConfigParser()
    cfg.read(ROOT / "setup.cfg")
    out: dict[str, dict[str, str]] = {}
    for group, text in cfg["options.entry_points"].items():
        pairs = [line.split("=", 1) for line in text.strip().splitlines() if "=" in line]
        out[group] = {k.strip(): v.strip() for k, v in pairs}
    return out


def test_every_kind_has_a_group_and_the_builtins_equal_setup_cfg() -> None:
    groups = declared()
    assert set(plugins.GROUPS) == {"db", "workload", "nemesis", "checker", "model", "provider", "command"}
    assert set(plugins.BUILTINS) == set(plugins.GROUPS)
    for kind, group in plugins.GROUPS.items():
        ours = {n: ref for n, ref in groups.get(group, {}).items() if ref.startswith("chaos.")}
        assert ours == dict(plugins.BUILTINS[kind]), (kind, group)
    # the system under test is a plug-in like any other, declared beside the tool's own
    assert groups["chaos.dbs"]["dledger"] == "chaos_dledger.db:DLedgerDB"
    assert groups["chaos.commands"]["sim"] == "chaos_dledger.sim:sim"


@pytest.mark.parametrize("kind", sorted(plugins.GROUPS))
def test_every_builtin_loads_through_the_registry(kind: str) -> None:
    for name in plugins.BUILTINS[kind]:
        obj = plugins.resolve(kind, name)
        assert callable(obj) or hasattr(obj, "names"), (kind, name)
        if kind == "command":
            assert isinstance(obj, click.Command), name
        assert name in plugins.names(kind)


def test_checkers_and_models_are_built_from_the_registry() -> None:
    assert set(plugins.BUILTINS["checker"]) <= set(plugins.names("checker"))
    for name in plugins.BUILTINS["checker"]:
        checker = make_checker(name, {"workload": "list-append"}, None)
        assert callable(checker.check), name
    # the factories that read the run get it: the linear checker's model, elle's consistency model
    assert make_checker("linear", {"model": "kv"}).model == "kv"  # type: ignore[attr-defined]
    assert make_checker("linear", {"model": "kv"}, "register").model == "register"  # type: ignore[attr-defined]
    elle = make_checker("elle", {"workload": "rw-register", "consistency_model": "serializable"})
    assert "serializable" in repr(vars(elle)), vars(elle)
    assert list(checkers_for({"workload": "bank"})) == ["bank", "stats", "perf", "faults", "client-errors"]
    with pytest.raises(ValueError, match="unknown checker 'nope'"):
        checkers_for({"checkers": ["nope"]})
    assert model_names() == sorted(plugins.BUILTINS["model"])
    assert get_model("cas-register:init=0").name == "cas-register"
    with pytest.raises(ValueError, match="unknown model 'nope'"):
        get_model("nope")


def test_the_tool_loads_none_of_its_modules_by_a_string() -> None:
    pattern = re.compile(r"""import_module\(\s*["']chaos""")
    found = [
        f"{p.relative_to(ROOT)}:{i}"
        for p in sorted((ROOT / "chaos").rglob("*.py"))
        for i, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1)
        if pattern.search(line)
    ]
    assert found == []
