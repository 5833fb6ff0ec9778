"""``chaos heal`` heals a plug-in fault module's leftovers (issue 22): a fault module in a temporary
directory, registered as a ``chaos.nemeses`` entry point (a ``.dist-info`` directory, as pip leaves
it), leaves a marker file and an empty iptables chain on two real node containers; ``chaos heal``
lists both as healed and removes them. Unregistered, the same module is healed only when named with
``--nemesis module:attr``."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from test_nemesis_support import make_test, node_cluster

from chaos.nemesis.base import nemesis_op

pytestmark = [pytest.mark.docker, pytest.mark.slow]

CLUSTER = os.environ.get("CHAOS_NEMESIS_PLUGIN_CLUSTER", "nemplug")
ROOT = Path(__file__).resolve().parents[1]

MARKER = '''
"""A plug-in fault module whose fault leaves state on a node: a marker file and a chain."""
from chaos.nemesis.base import NemesisKind, NoState, complete, on_nodes

FILE = "/var/run/chaos-marker-fault"
CHAIN = "CHAOS-MARKER"


class Marker(NoState):
    kind = "marker"

    def fs(self):
        return {"start-marker", "stop-marker"}

    def invoke(self, test, op):
        if op.f == "start-marker":
            script = (f"touch {FILE}; iptables -w -N {CHAIN}; iptables -w -A INPUT -j {CHAIN}")
            on_nodes(test, lambda r: r.exec_raw(script, sudo=True), op.value)
        return complete(op, {"nodes": op.value})


def heal(remote, db):
    remote.exec_raw(
        f"rm -f {FILE}; while iptables -w -D INPUT -j {CHAIN} 2>/dev/null; do :; done; "
        f"iptables -w -X {CHAIN} 2>/dev/null; true",
        sudo=True,
    )
    return []


def residue(remote, db):
    out = remote.exec_raw(
        f"[ -f {FILE} ] && echo 'marker file {FILE}'; "
        f"iptables -w -S {CHAIN} >/dev/null 2>&1 && echo 'iptables chain {CHAIN}'; true",
        sudo=True,
        check=False,
    ).stdout
    return out.splitlines()


NEMESIS = NemesisKind(
    names={"marker": "leave a marker file and a chain"},
    build=lambda chosen, opts: (Marker(), lambda rng: ["n1"], None),
    heal=heal,
    residue=residue,
)
'''


@pytest.fixture(scope="module")
def env() -> Iterator[Any]:
    with node_cluster(CLUSTER) as (nodes, control):
        yield make_test(nodes, control)


def _plugin_dir(root: Path, registered: bool) -> Path:
    root.mkdir()
    (root / "markerplug.py").write_text(MARKER)
    if registered:
        info = root / "markerplug-0.1.dist-info"
        info.mkdir()
        (info / "METADATA").write_text("Metadata-Version: 2.1\nName: markerplug\nVersion: 0.1\n")
        (info / "entry_points.txt").write_text("[chaos.nemeses]\nmarker = markerplug:NEMESIS\n")
    return root


def _chaos_heal(path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(path), str(ROOT)]))
    return subprocess.run(
        [sys.executable, "-m", "chaos.cli", "heal", "--cluster-name", CLUSTER, *args],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
    )


def _leftovers(env: Any, module: Any) -> dict[str, list[str]]:
    from chaos.nemesis.cli import residue

    return dict(env.control.on_nodes(lambda r: residue(r, env.db, [("marker", module.NEMESIS)])))


def test_chaos_heal_lists_and_removes_a_registered_plug_ins_residue(
    env: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from chaos.nemesis import load

    path = _plugin_dir(tmp_path / "registered", registered=True)
    monkeypatch.syspath_prepend(str(path))
    sys.modules.pop("markerplug", None)
    module = __import__("markerplug")
    (nem, _, _) = load("marker").parts(["marker"], {})[0]  # resolved through the registry
    nem.invoke(env, nemesis_op("start-marker", ["n1", "n3"]))
    before = _leftovers(env, module)
    assert before["n1"] == before["n3"] == [f"marker file {module.FILE}", "iptables chain CHAOS-MARKER"]
    assert before["n2"] == []

    res = _chaos_heal(path)
    assert res.returncode == 0, res.stdout + res.stderr
    lines = res.stdout.splitlines()
    for node in ("n1", "n3"):
        assert f"{node}: healed: marker file {module.FILE}" in lines, lines
        assert f"{node}: healed: iptables chain CHAOS-MARKER" in lines, lines
        assert any(x.startswith(f"{node}: clean: nothing found after the heal") for x in lines), lines
    assert _leftovers(env, module) == {n.name: [] for n in env.nodes}


def test_an_unregistered_plug_in_is_healed_when_named(
    env: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = _plugin_dir(tmp_path / "unregistered", registered=False)
    monkeypatch.syspath_prepend(str(path))
    sys.modules.pop("markerplug", None)
    module = __import__("markerplug")
    nem = module.Marker()
    nem.invoke(env, nemesis_op("start-marker", ["n2"]))
    try:
        res = _chaos_heal(path)  # chaos heal cannot know of it: the marker stays
        assert res.returncode == 0, res.stdout + res.stderr
        assert _leftovers(env, module)["n2"] == [f"marker file {module.FILE}", "iptables chain CHAOS-MARKER"]
        res = _chaos_heal(path, "--nemesis", "markerplug:NEMESIS")
        assert res.returncode == 0, res.stdout + res.stderr
        assert f"n2: healed: marker file {module.FILE}" in res.stdout.splitlines(), res.stdout
        assert _leftovers(env, module)["n2"] == []
    finally:
        env.control.on_nodes(lambda r: module.heal(r, env.db))
