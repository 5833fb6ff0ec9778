"""Pure-logic tests of the nemeses: grudges, registry, schedules, op values (no nodes needed)."""

from __future__ import annotations

import itertools
import random
from pathlib import Path
from types import SimpleNamespace

import pytest

from chaos.control import generator as gen
from chaos.errors import ConfigError
from chaos.nemesis import NEMESES, build, parse_names
from chaos.nemesis.base import Compose, choose_nodes
from chaos.nemesis.clock import fmt_offset, random_offset_ms
from chaos.nemesis.packet import mechanism, netem_args, parse_probe, shape_script
from chaos.nemesis.partition import (
    asymmetric,
    bridge,
    check_grudge,
    complete_grudge,
    expected_connect,
    expected_delivery,
    majorities_ring,
    random_halves,
    random_node,
    visible,
)

N5 = ["n1", "n2", "n3", "n4", "n5"]


@pytest.mark.parametrize("seed", range(20))
def test_majorities_ring_5_nodes_distinct_majorities(seed: int) -> None:
    g = majorities_ring(N5, random.Random(seed))
    views = [frozenset(visible(g, n)) for n in N5]
    assert all(len(v) == 3 for v in views)  # a majority of 5, itself included
    assert all(n in visible(g, n) for n in N5)
    assert len(set(views)) == 5
    # symmetric: a drops b iff b drops a
    for a, b in itertools.permutations(N5, 2):
        assert (b in g[a]) == (a in g[b])


@pytest.mark.parametrize("n", [3, 4, 5, 6, 7, 9])
def test_majorities_ring_every_node_sees_a_majority(n: int) -> None:
    nodes = [f"n{i}" for i in range(1, n + 1)]
    g = majorities_ring(nodes, random.Random(1))
    views = {frozenset(visible(g, x)) for x in nodes}
    assert all(len(visible(g, x)) >= n // 2 + 1 for x in nodes)
    assert len(views) == n
    # no node sees everyone (otherwise it is not a partition)
    assert all(g[x] for x in nodes)


def test_majorities_ring_needs_three_nodes() -> None:
    with pytest.raises(ValueError, match="at least 3 nodes"):
        majorities_ring(["n1", "n2"])


def test_bridge_shape() -> None:
    g = bridge(N5)
    # halves [n1 n2] and [n3 n4 n5]; n3 is the bridge
    assert g["n3"] == []
    assert g["n1"] == ["n4", "n5"] and g["n2"] == ["n4", "n5"]
    assert g["n4"] == ["n1", "n2"] and g["n5"] == ["n1", "n2"]
    conn = expected_connect(g)
    assert all(conn["n3"][x] for x in N5 if x != "n3")
    assert not conn["n1"]["n4"]


def test_random_halves_and_node() -> None:
    rng = random.Random(3)
    g = random_halves(N5, rng)
    sizes = sorted(len(visible(g, n)) for n in N5)
    assert sizes == [2, 2, 3, 3, 3]
    g = random_node(N5, rng)
    alone = [n for n in N5 if len(g[n]) == 4]
    assert len(alone) == 1
    assert all(g[n] == alone for n in N5 if n != alone[0])


def test_asymmetric_is_one_directional() -> None:
    g = asymmetric(N5, random.Random(5))
    d = expected_delivery(g)
    one_way = [(a, b) for a, b in itertools.permutations(N5, 2) if d[a][b] and not d[b][a]]
    assert one_way
    assert not any(not d[a][b] and not d[b][a] for a, b in itertools.permutations(N5, 2))


def test_complete_grudge_and_check() -> None:
    g = complete_grudge([["n1"], ["n2", "n3"]])
    assert g == {"n1": ["n2", "n3"], "n2": ["n1"], "n3": ["n1"]}
    with pytest.raises(ValueError, match="two components"):
        complete_grudge([["n1"], ["n1"]])
    with pytest.raises(ValueError, match="unknown nodes"):
        check_grudge({"n9": []}, N5)
    with pytest.raises(ValueError, match="expected a list"):
        check_grudge({"n1": "n2"}, N5)
    assert check_grudge({"n1": ["n2", "n1"]}, ["n1", "n2"]) == {"n1": ["n2"], "n2": []}


def fake_test(seed: int = 0, leader: str | None = "n2") -> SimpleNamespace:
    nodes = [SimpleNamespace(name=n, peer_host=f"10.0.0.{i}") for i, n in enumerate(N5, 1)]
    db = SimpleNamespace(primaries=lambda control: [leader] if leader else [])
    return SimpleNamespace(nodes=nodes, rng=random.Random(seed), db=db, control=None)


def test_choose_nodes_specs() -> None:
    t = fake_test()
    assert len(choose_nodes(t, "one")) == 1
    for _ in range(20):
        assert 1 <= len(choose_nodes(t, "minority")) <= 2
    assert len(choose_nodes(t, "majority")) == 3
    assert choose_nodes(t, "all") == N5
    assert choose_nodes(t, "leader") == ["n2"]
    assert choose_nodes(fake_test(leader=None), "leader") == []
    assert choose_nodes(t, ["n3", "n1"]) == ["n1", "n3"]
    with pytest.raises(ValueError, match="node spec 'most'"):
        choose_nodes(t, "most")
    with pytest.raises(ValueError, match="unknown nodes"):
        choose_nodes(t, ["n7"])


def test_registry_and_parse_names() -> None:
    assert "partition-ring" in NEMESES and "lose-unfsynced" in NEMESES
    assert all(isinstance(v, str) and v for v in NEMESES.values())
    assert parse_names("partition-ring, kill,pause") == ["partition-ring", "kill", "pause"]
    assert parse_names("none") == []
    with pytest.raises(ConfigError, match="unknown nemesis partition-rung"):
        parse_names("partition-rung,kill")


def test_build_groups_names_by_kind() -> None:
    nem, g = build("partition-ring,bridge,kill,kill-leader,pause,clock-skew", {"nemesis_interval": 5})
    assert isinstance(nem, Compose)
    assert nem.fs() == {
        "start-partition",
        "stop-partition",
        "start-kill",
        "stop-kill",
        "start-pause",
        "stop-pause",
        "start-clock",
        "stop-clock",
    }
    assert {op["f"] for op in nem.final_ops} == {"stop-partition", "stop-kill", "stop-pause", "stop-clock"}
    kill = nem.routes["start-kill"]
    assert "leader" in kill.targets  # type: ignore[attr-defined]
    assert g is not None
    with pytest.raises(ConfigError, match="nemesis-interval"):
        build("kill", {"nemesis_interval": 0})
    assert build("none", {})[1] is None


def test_schedule_each_kind_flip_flops_staggered() -> None:
    _, g = build("partition-ring,kill,pause", {"nemesis_interval": 10})
    hist = gen.simulate(gen.time_limit(600, g), concurrency=1, seed=7)
    invokes = [op for op in hist if op.type == "invoke" and op.process == "nemesis"]
    assert invokes
    by_kind: dict[str, list[str]] = {}
    for op in invokes:
        kind = op.f.split("-", 1)[1]
        by_kind.setdefault(kind, []).append(op.f.split("-", 1)[0])
    assert set(by_kind) == {"partition", "kill", "pause"}
    for kind, seq in by_kind.items():
        # each kind alternates start, stop, start, ... on its own schedule
        assert seq == [("start", "stop")[i % 2] for i in range(len(seq))], kind
    # three kinds at a mean gap of 10 s each: roughly 3 * 600 / 10 ops, never one per 10 s total
    assert 100 < len(invokes) < 260
    # each kind's first fault after its own random gap, not all at time 0
    firsts = {k: next(op.time for op in invokes if op.f == f"start-{k}") for k in by_kind}
    assert len(set(firsts.values())) == 3 and all(0 < t <= 20 * 10**9 for t in firsts.values())
    starts = [op.value for op in invokes if op.f == "start-partition"]
    assert set(starts) == {"majorities-ring"}
    kills = {op.value for op in invokes if op.f == "start-kill"}
    assert kills <= {"one", "minority", "all"} and len(kills) > 1


def test_packet_mechanisms_and_scripts() -> None:
    caps = parse_probe("netem=no\nhtb=yes\nstatistic=yes\nnfqueue=no\n")
    assert caps == {"netem": False, "htb": True, "statistic": True, "nfqueue": False}
    assert mechanism("loss", caps) == "iptables-statistic"
    assert mechanism("rate", caps) == "htb"
    assert mechanism("delay", caps) is None
    assert mechanism("duplicate", caps) is None
    assert mechanism("delay", {"netem": True}) == "netem"
    assert mechanism("delay", {"nfqueue": True}) == "nfqueue"
    s = shape_script(["10.0.0.2"], {"loss": 0.3}, {"loss": "iptables-statistic"})
    assert "--probability 0.3000" in s and "CHAOS-PACKET" in s and "tc qdisc add" not in s
    s = shape_script(["10.0.0.2"], {"rate": {"kbit": 500}}, {"rate": "htb"})
    assert "rate 500kbit" in s and "u32 match ip dst" in s
    assert netem_args({"reorder": 0.2})[:2] == ["delay", "10ms"]


def test_packet_setup_rejects_unsupported_before_run() -> None:
    from chaos.nemesis.packet import PacketNemesis, Unsupported

    nem = PacketNemesis({"delay": {"ms": 50, "jitter_ms": 0}, "loss": 0.1})
    nem.caps = {"n1": parse_probe("netem=no\nhtb=yes\nstatistic=yes\nnfqueue=no")}
    nem.probe = lambda test: nem.caps  # type: ignore[method-assign]
    with pytest.raises(Unsupported, match="packet-delay on n1: tc netem is missing"):
        nem.setup(SimpleNamespace())
    with pytest.raises(ValueError, match="probability"):
        PacketNemesis({"loss": 2})


def test_clock_offsets() -> None:
    assert fmt_offset(1500) == "+1.500"
    assert fmt_offset(-90000) == "-90.000"
    with pytest.raises(ValueError, match="finite"):
        fmt_offset(float("nan"))
    rng = random.Random(1)
    offs = [random_offset_ms(rng, 240_000) for _ in range(500)]
    assert all(10 <= o <= 240_000 for o in offs)  # forward only: the monotonic clock never steps back
    assert max(abs(o) for o in offs) > 60_000  # minutes are reachable


class _Raises:
    kind = "boom"

    def fs(self) -> set[str]:
        return {"start-boom", "stop-boom"}

    def invoke(self, test: object, op: object) -> object:
        raise RuntimeError("iptables: no such chain on n2")


class _Plain:
    kind = "plain"

    def fs(self) -> set[str]:
        return {"start-plain", "stop-plain"}

    def invoke(self, test: object, op: object) -> object:
        from chaos.nemesis.base import complete

        return complete(op, {"nodes": ["n1"]})  # type: ignore[arg-type]


def test_compose_records_whether_a_fault_took_effect() -> None:
    from chaos.nemesis.base import nemesis_op

    nem = Compose([_Raises(), _Plain()])  # type: ignore[list-item]
    failed = nem.invoke(None, nemesis_op("start-boom", "minority"))
    assert failed.type == "info" and failed.error == "RuntimeError: iptables: no such chain on n2"
    assert failed.value == {"request": "minority", "applied": False, "why": failed.error}
    done = nem.invoke(None, nemesis_op("start-plain"))
    assert done.value == {"nodes": ["n1"], "applied": True}  # a part that does not say: no error


def test_leader_targeted_faults_without_a_leader_do_not_take_effect() -> None:
    from chaos.nemesis.base import nemesis_op
    from chaos.nemesis.partition import PartitionNemesis
    from chaos.nemesis.process import KillNemesis

    nodes = [SimpleNamespace(name=f"n{i}", peer_host=f"10.0.0.{i}") for i in range(1, 6)]
    no_leader = SimpleNamespace(primaries=lambda control: [])
    test = SimpleNamespace(nodes=nodes, control=None, db=no_leader, rng=random.Random(1), opts={})
    part = PartitionNemesis(["leader"]).invoke(test, nemesis_op("start-partition", "leader"))
    assert part.value["applied"] is False and part.value["why"] == "no leader to isolate"
    assert not any(part.value["grudge"].values())
    kill = KillNemesis(["leader"]).invoke(test, nemesis_op("start-kill", "leader"))
    assert kill.value == {
        "targets": "leader",
        "nodes": [],
        "applied": False,
        "why": "no node matched target 'leader'",
    }


# -- the leader target with several primaries (issue 22) ---------------------------------------------


def test_the_leader_is_every_primary_at_the_highest_term_and_all_when_terms_are_unknown() -> None:
    from chaos.nemesis.base import pick_leaders

    assert pick_leaders([], {}) == ([], "no node claims leadership")
    assert pick_leaders(["n3"], {}) == (["n3"], "the only primary")
    # a stale leader behind a partition still claims term 3; the current one is at term 5
    chosen, why = pick_leaders(["n4", "n1"], {"n1": 3, "n4": 5})
    assert chosen == ["n4"] and "highest term is 5" in why
    assert pick_leaders(["n2", "n1"], {}) == (["n1", "n2"], "2 primaries, terms unknown: all of them")
    assert pick_leaders(["n2", "n1"], {"n1": None, "n2": None})[0] == ["n1", "n2"]
    # a primary whose term is unknown cannot be ruled out
    chosen, why = pick_leaders(["n1", "n2", "n3"], {"n1": 4, "n2": 2})
    assert chosen == ["n1", "n3"] and "n3 kept (term unknown)" in why


def test_a_leader_partition_records_how_it_chose_among_several_primaries() -> None:
    from chaos.nemesis.partition import PartitionNemesis

    t = fake_test()
    terms = {"n1": 3, "n4": 5}
    t.db = SimpleNamespace(
        primaries=lambda control: ["n1", "n4"],
        leadership=lambda node, timeout_s: {"leader": node.name, "term": terms[node.name]},
    )
    note: dict[str, object] = {}
    shape, grudge = PartitionNemesis(["leader"]).grudge(t, "leader", note)
    assert shape == "leader" and grudge["n4"] == ["n1", "n2", "n3", "n5"] and grudge["n1"] == ["n4"]
    assert note["leader_choice"] == {
        "primaries": ["n1", "n4"],
        "terms": {"n1": 3, "n4": 5},
        "chosen": ["n4"],
        "why": "2 primaries; the highest term is 5",
    }
    # without the leadership capability the terms are unknown: both are isolated
    t.db = SimpleNamespace(primaries=lambda control: ["n4", "n1"])
    note = {}
    _, grudge = PartitionNemesis(["leader"]).grudge(t, "leader", note)
    assert grudge["n1"] == ["n2", "n3", "n4", "n5"] and grudge["n4"] == ["n1", "n2", "n3", "n5"]
    assert note["leader_choice"]["chosen"] == ["n1", "n4"]  # type: ignore[index]
    # one primary: nothing to record
    note = {}
    PartitionNemesis(["leader"]).grudge(fake_test(), "leader", note)
    assert note == {}


# -- one registry of fault modules (issue 22) ----------------------------------------------------------


def test_every_built_in_fault_module_is_one_registered_descriptor() -> None:
    import importlib

    from chaos import plugins
    from chaos.nemesis import NEMESIS_OPTIONS, registered, requirements, styles
    from chaos.nemesis.base import NemesisKind

    declared: dict[str, str] = {}
    for key, ref in plugins.BUILTINS["nemesis"].items():
        module = importlib.import_module(ref.split(":")[0])
        kinds = [v for v in vars(module).values() if isinstance(v, NemesisKind)]
        assert len(kinds) == 1 and kinds[0] is plugins.resolve("nemesis", key), key
        for name in kinds[0].names:
            assert name not in declared, (name, key, declared.get(name))
            declared[name] = key
        assert set(kinds[0].requires) <= set(kinds[0].names), key
    assert [k for k, _ in registered()[0]][:6] == list(plugins.BUILTINS["nemesis"])
    assert list(NEMESES) == ["none", *declared]
    assert NEMESIS_OPTIONS["kill_targets"] == "list" and NEMESIS_OPTIONS["bitflip_region"] == "str"
    # the target options aim the names of their own module
    assert requirements(
        "kill,packet-loss,pause", {"kill_targets": ["leader"], "packet_targets": ["primaries"]}
    ) == {
        "kill": {"process", "primary"},
        "packet-loss": {"primary"},
        "pause": {"pause"},
    }
    s = styles("kill-leader,partition-ring,leader-transfer")
    assert s["kill"] == {
        "colour": "#756bb1",
        "verbs": {"start": "{nodes} killed", "stop": "{nodes} restarted"},
    }
    assert s["partition"]["colour"] == "#e6550d" and "clock" not in s
    assert s["leader-transfer"]["verbs"] == {"start": "{nodes} leadership transferred"}


PLUGIN = '''
"""A plug-in fault module: one descriptor, two names."""
from chaos.nemesis.base import NemesisKind, NoState, complete


class Stall(NoState):
    kind = "stall"

    def __init__(self, ms):
        self.ms = ms

    def fs(self):
        return {"start-stall", "stop-stall"}

    def invoke(self, test, op):
        return complete(op, {"ms": self.ms})


def build(chosen, opts):
    ms = opts.get("stall_ms") or 10
    return [(Stall(ms * (2 if "stall-long" in chosen else 1)), lambda rng: {"ms": ms}, None)]


NEMESIS = NemesisKind(
    names={"stall": "stall the server", "stall-long": "stall it twice as long"},
    build=build,
    requires={"stall-long": frozenset({"pause"})},
    options={"stall_ms": "number"},
    colours={"stall": "#abcdef"},
    verbs={"stall": {"start": "{nodes} stalled", "stop": "stall over"}},
)
'''


def test_a_plug_in_descriptor_builds_and_styles_as_a_built_in(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import sys

    from chaos.nemesis import parse_nemesis_opts, plugin_options, requirements, styles

    (tmp_path / "stallplug.py").write_text(PLUGIN)
    monkeypatch.syspath_prepend(str(tmp_path))
    sys.modules.pop("stallplug", None)
    ref = "stallplug:NEMESIS"
    assert parse_names(f"kill,{ref}") == ["kill", ref]
    assert plugin_options(f"kill,{ref}") == {"stall_ms": "number"}
    opts = parse_nemesis_opts(["stall_ms=25"], plugin_options(ref))
    assert requirements(f"{ref},kill", opts) == {ref: {"pause"}, "kill": {"process"}}
    nem, g = build(f"{ref},kill", {**opts, "nemesis_interval": 1})
    assert isinstance(nem, Compose)
    stall = nem.routes["start-stall"]
    # a reference selects every name of its descriptor, stall-long too
    assert stall.ms == 50  # type: ignore[attr-defined]
    assert [s.kind for s in nem.schedules] == ["stall", "kill"] and g is not None
    assert styles(ref) == {
        "stall": {"colour": "#abcdef", "verbs": {"start": "{nodes} stalled", "stop": "stall over"}}
    }
    with pytest.raises(ConfigError, match="is not a nemesis factory"):
        build("stallplug:Stall.fs", {})  # callable, but neither a descriptor nor has a kind


class _TransferDB:
    """A DB that leads from n1, reports log positions and records the transfers it was asked for."""

    def __init__(self, positions: dict[str, int] | None) -> None:
        self.positions = positions
        self.asked: list[str] = []
        if positions is None:
            self.log_positions = None  # type: ignore[assignment]

    def primaries(self, control: object) -> list[str]:
        return ["n1"]

    def log_positions(self, control: object) -> dict[str, int]:
        return dict(self.positions or {})

    def transfer_leadership(self, control: object, leader: str, to: str) -> dict[str, object]:
        self.asked.append(to)
        return {"outcome": "ok", "code": 200, "error": None}


def _transfer_test(db: _TransferDB) -> SimpleNamespace:
    return SimpleNamespace(
        db=db, control=None, nodes=[SimpleNamespace(name=n) for n in N5], rng=random.Random(3)
    )


def test_a_transfer_behind_goes_to_the_member_whose_log_ends_furthest_behind() -> None:
    from chaos.history.op import Op
    from chaos.nemesis.leadership import LeaderTransferNemesis

    db = _TransferDB({"n1": 90, "n2": 90, "n3": 41, "n4": 88})  # n5 did not answer (down, cut off)
    nem = LeaderTransferNemesis(("behind",))
    done = nem.invoke(_transfer_test(db), Op("invoke", "nemesis", "start-leader-transfer", None))
    assert db.asked == ["n3"] and done.value["to"] == "n3" and done.value["target"] == "behind"
    assert done.value["log_positions"]["n3"] == 41 and done.value["applied"] is True
    # no positions from the DB: a random member, and the completion says so
    db = _TransferDB(None)
    done = nem.invoke(_transfer_test(db), Op("invoke", "nemesis", "start-leader-transfer", None))
    assert done.value["target"] == "random (no log positions)" and db.asked[0] in N5[1:]
    # built from --nemesis-opt transfer_targets=...; an unknown target is a bad option
    built = build(["leader-transfer"], {"transfer_targets": ["random", "behind"]})
    assert built is not None
    with pytest.raises(ValueError, match="transfer_targets"):
        LeaderTransferNemesis(("slowest",))


def test_every_nemesis_option_is_in_the_usage_guide() -> None:
    """docs/usage.md's `--nemesis-opt` row names every key chaos run accepts (four were missing)."""
    from pathlib import Path

    from chaos.nemesis import NEMESIS_OPTIONS

    row = next(
        line
        for line in (Path(__file__).parent.parent / "docs" / "usage.md").read_text().splitlines()
        if line.startswith("| `--nemesis-opt")
    )
    assert [k for k in sorted(NEMESIS_OPTIONS) if f"`{k}`" not in row] == []
