"""Nemeses: the faults a test injects, and their schedule (``jepsen.nemesis.combined``).

``build(names, opts) -> (nemesis, generator)`` turns ``--nemesis partition-ring,kill,pause`` into one
combined nemesis (:class:`chaos.nemesis.base.Compose`) and a generator for the nemesis thread:
every fault kind flip-flops start/stop on its own staggered schedule (mean gap
``opts["nemesis_interval"]`` seconds, default 10; each gap uniform in 0..2x). Names of the same kind
share one nemesis: ``kill,kill-leader`` gives one ``kill`` schedule whose targets include the leader.

The combined nemesis also carries ``final_ops``: the stop op of every kind, for the runner's final
(healing) phase. ``heal`` is idempotent and is what ``chaos heal`` runs.

Options read from ``opts`` (all optional): ``nemesis_interval`` (s), ``kill_targets``,
``pause_targets``, ``restart_targets``, ``clock_max_offset_ms`` (default 240000), ``clock_modes``
(``bump``/``rate``/``strobe``), ``clock_max_rate`` (default 1.2), ``packet_targets``, ``packet_loss`` (probability), ``packet_delay_ms``,
``packet_delay_jitter_ms``, ``packet_rate_kbit``, ``packet_duplicate``, ``packet_reorder``,
``file_targets``, ``lose_unfsynced_targets`` (default ``["all"]``), ``truncate_bytes``,
``bitflip_count``, ``bitflip_region`` (``tail``/``anywhere``).
"""

from __future__ import annotations

import random
from collections.abc import Iterable, Mapping
from typing import Any

from chaos.nemesis.base import Compose, Nemesis, Schedule

# name -> one-line description (for `chaos run --help`)
NEMESES: dict[str, str] = {
    "none": "no faults",
    "partition-random-halves": "cut the network into a random minority and majority",
    "partition-random-node": "isolate one random node",
    "partition-majorities-ring": "every node sees a majority, no two the same majority",
    "partition-ring": "alias of partition-majorities-ring",
    "partition-halves": "cut the network into the first and second half of the node list",
    "bridge": "two halves joined only through one bridge node",
    "partition-leader": "isolate the node the DB reports as leader",
    "partition-asymmetric": "one half's packets never reach the other half (one direction only)",
    "kill": "SIGKILL the server on one node, a minority or all; restart on stop",
    "kill-leader": "SIGKILL the leader's server; restart on stop",
    "pause": "SIGSTOP the server on one node, a minority or all; SIGCONT on stop",
    "pause-leader": "SIGSTOP the leader's server; SIGCONT on stop",
    "restart": "clean restart (SIGTERM, then start) of one node, a minority or all",
    "clock-skew": "bump, drift or strobe the server's monotonic clock (libfaketime, continuous)",
    "clock-slow-leader": "slow the leader's monotonic clock (x0.02) and isolate it at once (lease reads)",
    "packet-loss": "drop a fraction of DB packets (netem, else iptables statistic)",
    "packet-delay": "delay DB packets (netem, else an NFQUEUE delayer on the node)",
    "packet-rate": "limit the DB traffic rate (htb)",
    "packet-duplicate": "duplicate DB packets (netem, else the NFQUEUE delayer re-sends copies)",
    "packet-reorder": "reorder DB packets (netem, else NFQUEUE verdicts out of order)",
    "truncate": "kill, drop the tail of the newest data segment (torn write), restart on stop",
    "bitflip": "kill, flip bits in the data files' tail (or anywhere), restart on stop",
    "lose-unfsynced": "kill every server, cut data files back to the last fsync, restart on stop",
    "leader-transfer": "ask the leader to hand leadership to a random node",
}

_PARTITION_SHAPES = {
    "partition-random-halves": "random-halves",
    "partition-random-node": "random-node",
    "partition-majorities-ring": "majorities-ring",
    "partition-ring": "majorities-ring",
    "partition-halves": "halves",
    "bridge": "bridge",
    "partition-leader": "leader",
    "partition-asymmetric": "asymmetric",
}
_PACKET = {
    "packet-loss": "loss",
    "packet-delay": "delay",
    "packet-rate": "rate",
    "packet-duplicate": "duplicate",
    "packet-reorder": "reorder",
}
_FILE = ("truncate", "bitflip", "lose-unfsynced")
_DEFAULT_TARGETS = ["one", "minority", "all"]

# What each fault kind needs from the DB (capability names, chaos.cluster.db.CAPABILITIES); chaos run
# refuses at start a nemesis the DB cannot support. Kinds not listed need nothing from the DB
# (partitions and packet faults act on the network alone).
REQUIRES: dict[str, frozenset[str]] = {
    "partition-leader": frozenset({"primary"}),
    "kill": frozenset({"process"}),
    "kill-leader": frozenset({"process", "primary"}),
    "pause": frozenset({"pause"}),
    "pause-leader": frozenset({"pause", "primary"}),
    "restart": frozenset({"process"}),
    "clock-skew": frozenset({"clock"}),
    "clock-slow-leader": frozenset({"clock", "primary"}),
    # file faults (chaos.nemesis.files): kill, change the files under the data dir, start again
    "truncate": frozenset({"data-dir", "process"}),
    "bitflip": frozenset({"data-dir", "process"}),
    "lose-unfsynced": frozenset({"data-dir", "process"}),
    "leader-transfer": frozenset({"primary", "leader-transfer"}),
}
# a *_targets option naming the leader needs the DB to tell it
_TARGET_OPTIONS = (
    "kill_targets",
    "pause_targets",
    "restart_targets",
    "packet_targets",
    "file_targets",
    "lose_unfsynced_targets",
)

# Every option build() reads, and how `--nemesis-opt KEY=VALUE` parses its value: "list" is a
# comma-separated list of words, "number" a finite float, "int" an integer, "str" a word, "json" JSON.
NEMESIS_OPTIONS: dict[str, str] = {
    "kill_targets": "list",
    "pause_targets": "list",
    "restart_targets": "list",
    "clock_modes": "list",
    "clock_max_offset_ms": "number",
    "clock_max_rate": "number",
    "slow_leader_rate": "number",
    "packet_loss": "json",
    "packet_delay_ms": "number",
    "packet_delay_jitter_ms": "number",
    "packet_rate_kbit": "number",
    "packet_duplicate": "json",
    "packet_reorder": "json",
    "packet_targets": "list",
    "file_targets": "list",
    "lose_unfsynced_targets": "list",
    "truncate_bytes": "int",
    "bitflip_count": "int",
    "bitflip_region": "str",
}


def parse_nemesis_opts(items: Iterable[str], extra: Mapping[str, str] | None = None) -> dict[str, Any]:
    """``["kill_targets=leader,minority", "clock_max_rate=1.5"]`` -> ``{"kill_targets": ["leader",
    "minority"], "clock_max_rate": 1.5}``, each value parsed as :data:`NEMESIS_OPTIONS` says.

    ``extra``: the options plug-in nemeses declare (``{key: kind}``, see :func:`plugin_options`).

    Raises ValueError (one line naming the item and what was expected) for an item without ``=``,
    an unknown key, or a value of the wrong kind (NaN and infinities are not numbers here)."""
    import json
    import math

    known = {**NEMESIS_OPTIONS, **(extra or {})}
    out: dict[str, Any] = {}
    for item in items:
        key, sep, raw = item.partition("=")
        key = key.strip()
        if not sep or key not in known:
            raise ValueError(f"--nemesis-opt {item!r}: expected KEY=VALUE with KEY one of {', '.join(known)}")
        kind = known[key]
        try:
            if kind == "list":
                value: Any = [w.strip() for w in raw.split(",") if w.strip()]
                if not value:
                    raise ValueError
            elif kind == "number":
                value = float(raw)
                if not math.isfinite(value) or value < 0:
                    raise ValueError
            elif kind == "int":
                value = int(raw)
                if value < 0:
                    raise ValueError
            elif kind == "json":
                value = json.loads(raw)
            else:
                value = raw.strip()
                if not value:
                    raise ValueError
        except ValueError:
            what = {"list": "a comma-separated list", "number": "a finite number >= 0"}.get(kind, kind)
            what = {"int": "an integer >= 0", "json": "a JSON value", "str": "a word"}.get(kind, what)
            raise ValueError(f"--nemesis-opt {item!r}: expected {what} for {key}") from None
        out[key] = value
    return out


def parse_names(names: str | Iterable[str]) -> list[str]:
    """``"a,b"`` or ``["a", "b,c"]`` -> ``["a", "b", "c"]``, checked against :data:`NEMESES`; a
    ``module:attr`` reference or the name of a ``chaos.nemeses`` entry point is a plug-in nemesis
    (:mod:`chaos.plugins`). Raises :class:`chaos.control.test.ConfigError` naming the unknown names."""
    from chaos.errors import ConfigError

    raw = [names] if isinstance(names, str) else list(names)
    out: list[str] = []
    for item in raw:
        for n in str(item).split(","):
            n = n.strip()
            if n and n not in out:
                out.append(n)
    unknown = [n for n in out if n not in NEMESES and not _is_plugin(n)]
    if unknown:
        raise ConfigError(
            f"--nemesis: unknown nemesis {', '.join(unknown)}; expected some of {', '.join(NEMESES)}"
        )
    return [n for n in out if n != "none"]


def _is_plugin(name: str) -> bool:
    from chaos import plugins

    return plugins.is_reference(name) or name in plugins.entry_points("nemesis")


def plugin_names(names: str | Iterable[str]) -> list[str]:
    """The plug-in nemeses among ``names`` (after :func:`parse_names`)."""
    return [n for n in parse_names(names) if n not in NEMESES]


def plugin_factories(names: str | Iterable[str]) -> dict[str, Any]:
    """name -> the factory of each plug-in nemesis among ``names`` (ConfigError when one does not load)."""
    from chaos import plugins

    return {n: plugins.nemesis_factory(n) for n in plugin_names(names)}


def plugin_options(names: str | Iterable[str]) -> dict[str, str]:
    """The ``--nemesis-opt`` keys the plug-in nemeses among ``names`` declare (``nemesis_options``:
    ``{key: kind}`` with the kinds of :data:`NEMESIS_OPTIONS`)."""
    out: dict[str, str] = {}
    for f in plugin_factories(names).values():
        out.update(dict(getattr(f, "nemesis_options", None) or {}))
    return out


def requirements(names: str | Iterable[str], opts: Mapping[str, Any] | None = None) -> dict[str, set[str]]:
    """name -> the DB capabilities that nemesis needs (:data:`REQUIRES`; a plug-in's ``requires``);
    a ``*_targets`` option naming ``leader`` or ``primaries`` adds ``primary`` to the kinds it aims."""
    opts = opts or {}
    factories = plugin_factories(names)
    out: dict[str, set[str]] = {}
    for n in parse_names(names):
        need = set(REQUIRES.get(n, ())) if n in NEMESES else set(getattr(factories[n], "requires", ()) or ())
        out[n] = need
    for key in _TARGET_OPTIONS:
        targets = opts.get(key) or []
        if any(t in ("leader", "primaries") for t in targets):
            kind = key.removesuffix("_targets").replace("_", "-")
            for n in out:
                if n == kind or (kind == "file" and n in _FILE) or (kind == "packet" and n in _PACKET):
                    out[n].add("primary")
    return out


def check_capabilities(names: str | Iterable[str], opts: Mapping[str, Any] | None, db: Any) -> None:
    """Raise :class:`chaos.control.test.ConfigError` (one line naming the DB, the nemesis and the
    missing capability) when ``db`` cannot support a nemesis among ``names``."""
    from chaos.cluster.db import CAPABILITIES, capabilities, db_name
    from chaos.errors import ConfigError

    has = capabilities(db)
    for n, need in requirements(names, opts).items():
        missing = sorted(need - has)
        if missing:
            members = "; ".join(f"{c}: {', '.join(CAPABILITIES[c][1])}" for c in missing if c in CAPABILITIES)
            raise ConfigError(
                f"--nemesis {n}: the DB {db_name(db)} lacks the {', '.join(missing)} capability "
                f"({members}); it offers {', '.join(sorted(has)) or 'none'}"
            )


def _opt(opts: Mapping[str, Any], key: str, default: Any) -> Any:
    v = opts.get(key)
    return default if v is None else v


def build(names: str | Iterable[str], opts: Mapping[str, Any] | None = None) -> tuple[Nemesis, Any]:
    """The combined nemesis and its nemesis-thread generator for the named faults.

    Raises :class:`chaos.control.test.ConfigError` for unknown names or bad options. Faults a node cannot
    do (packet faults without a mechanism) are detected in the nemesis's ``setup``, before the
    run's generator starts.
    """
    from chaos.control import generator as gen
    from chaos.errors import ConfigError
    from chaos.nemesis.clock import ClockNemesis
    from chaos.nemesis.leadership import LeaderTransferNemesis
    from chaos.nemesis.packet import DEFAULTS, PacketNemesis
    from chaos.nemesis.partition import PartitionNemesis
    from chaos.nemesis.process import KillNemesis, PauseNemesis, RestartNemesis

    opts = dict(opts or {})
    chosen = parse_names(names)
    interval = float(_opt(opts, "nemesis_interval", 10.0))
    if interval <= 0:
        raise ConfigError(f"--nemesis-interval {interval}: expected a positive number of seconds")

    parts: list[Any] = []
    schedules: list[Schedule] = []

    def add(nem: Any, start: Any, stop: Any = lambda rng: None) -> None:
        parts.append(nem)
        schedules.append(Schedule(nem.kind, start, stop, interval))

    def pick(choices: list[Any]) -> Any:
        return lambda rng: rng.choice(choices)

    try:
        shapes = sorted({_PARTITION_SHAPES[n] for n in chosen if n in _PARTITION_SHAPES})
        if shapes:
            add(PartitionNemesis(shapes), pick(shapes))
        for kind, cls, leader_name in (
            ("kill", KillNemesis, "kill-leader"),
            ("pause", PauseNemesis, "pause-leader"),
        ):
            targets: list[str] = []
            if kind in chosen:
                targets += list(_opt(opts, f"{kind}_targets", _DEFAULT_TARGETS))
            if leader_name in chosen:
                targets.append("leader")
            if targets:
                targets = list(dict.fromkeys(targets))
                add(cls(targets), pick(targets))
        if "restart" in chosen:
            rt = list(_opt(opts, "restart_targets", _DEFAULT_TARGETS))
            add(RestartNemesis(rt), pick(rt))
        if "clock-skew" in chosen:
            clock = ClockNemesis(
                modes=list(_opt(opts, "clock_modes", ["bump", "rate", "strobe"])),
                max_offset_ms=float(_opt(opts, "clock_max_offset_ms", 240_000)),
                max_rate=float(_opt(opts, "clock_max_rate", 1.2)),
            )
            add(clock, lambda rng: None)
        if "clock-slow-leader" in chosen:
            from chaos.nemesis.clock import SlowLeaderNemesis

            add(SlowLeaderNemesis(rate=float(_opt(opts, "slow_leader_rate", 0.02))), lambda rng: None)
        behaviours: dict[str, Any] = {}
        for n in chosen:
            if n in _PACKET:
                b = _PACKET[n]
                behaviours[b] = DEFAULTS[b]
        if behaviours:
            if "packet_loss" in opts:
                behaviours["loss"] = opts["packet_loss"]
            if "delay" in behaviours and "packet_delay_ms" in opts:
                behaviours["delay"] = {
                    "ms": opts["packet_delay_ms"],
                    "jitter_ms": _opt(opts, "packet_delay_jitter_ms", 0),
                }
            if "rate" in behaviours and "packet_rate_kbit" in opts:
                behaviours["rate"] = {"kbit": opts["packet_rate_kbit"]}
            for b in ("duplicate", "reorder"):
                if b in behaviours and f"packet_{b}" in opts:
                    behaviours[b] = opts[f"packet_{b}"]
            packet_targets = list(_opt(opts, "packet_targets", ["one", "minority", "majority", "all"]))
            packet = PacketNemesis({k: behaviours[k] for k in behaviours if k in behaviours}, packet_targets)
            bnames = sorted(packet.behaviours)
            add(
                packet,
                lambda rng: {
                    "behaviour": {(b := rng.choice(bnames)): packet.behaviours[b]},
                    "targets": rng.choice(packet_targets),
                },
            )
        faults = [n for n in _FILE if n in chosen]
        if faults:
            from chaos.nemesis.files import FileNemesis

            file_targets = list(_opt(opts, "file_targets", ["one", "minority"]))
            lu_targets = list(_opt(opts, "lose_unfsynced_targets", ["all"]))
            files = FileNemesis(
                faults,
                targets=file_targets,
                lose_unfsynced_targets=lu_targets,
                truncate_bytes=int(_opt(opts, "truncate_bytes", 64)),
                bitflip_count=int(_opt(opts, "bitflip_count", 1)),
                bitflip_region=str(_opt(opts, "bitflip_region", "tail")),
            )

            def file_value(rng: Any) -> dict[str, Any]:
                f = rng.choice(faults)
                return {
                    "fault": f,
                    "targets": rng.choice(lu_targets if f == "lose-unfsynced" else file_targets),
                }

            add(files, file_value)
        if "leader-transfer" in chosen:
            add(LeaderTransferNemesis(), lambda rng: None)
        for factory in plugin_factories(chosen).values():
            plug = factory(opts)
            start = getattr(plug, "start_value", None)
            add(plug, start if callable(start) else (lambda rng: None))
    except ValueError as e:
        raise ConfigError(f"--nemesis: {e}") from e

    nemesis = Compose(parts)
    nemesis.final_ops = [s.stop_op() for s in schedules]
    nemesis.schedules = schedules
    if not schedules:
        return nemesis, None
    # Each kind's first fault comes after its own random gap (uniform 0..2x interval), so kinds
    # do not all start together at time 0 and the workload gets a fault-free start.
    first = random.Random(opts.get("seed"))
    gens = [s.generator(first_s=first.uniform(0, 2 * interval)) for s in schedules]
    # on the nemesis thread only (wrapping again in gen.nemesis is harmless)
    generator = gen.nemesis(gen.any_gen(*gens))
    return nemesis, generator


def heal_all(test: Any) -> None:
    """Heal every fault kind the tool knows on every node of ``test`` (what ``chaos heal`` does):
    partition and packet iptables chains, the tool's qdiscs, clock offsets and strobe loops,
    paused servers (SIGCONT). Killed servers are not restarted."""
    from chaos.nemesis.cli import heal_nodes

    heal_nodes(test)


__all__ = ["NEMESES", "build", "parse_names", "heal_all", "Compose", "Nemesis", "Schedule"]
