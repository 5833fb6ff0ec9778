"""Nemeses: the faults a test injects, and their schedule (``jepsen.nemesis.combined``).

Every fault module, built-in or plug-in, is one :class:`chaos.nemesis.base.NemesisKind` descriptor
registered in the ``chaos.nemeses`` entry-point group (:mod:`chaos.plugins`; the built-ins are
``partition``, ``process``, ``clock``, ``packet``, ``files`` and ``leadership``, each the
``NEMESIS`` of its module). This package holds no table of its own: names, requirements, options,
schedules, heal, residue and report styles all come from the registered descriptors. A
``--nemesis`` value is a name one of them declares, ``module:attr`` naming a descriptor (all its
names) or an older plug-in factory (see :func:`chaos.nemesis.base.from_factory`), or the
entry-point name of such a factory.

``build(names, opts) -> (nemesis, generator)`` turns ``--nemesis partition-ring,kill,pause`` into one
combined nemesis (:class:`chaos.nemesis.base.Compose`) and a generator for the nemesis thread:
every fault kind flip-flops start/stop on its own staggered schedule (mean gap
``opts["nemesis_interval"]`` seconds, default 10; each gap uniform in 0..2x). Names of the same kind
share one nemesis: ``kill,kill-leader`` gives one ``kill`` schedule whose targets include the leader.

The combined nemesis also carries ``final_ops``: the stop op of every kind, for the runner's final
(healing) phase. ``heal`` is idempotent and is what ``chaos heal`` runs.

Options read from ``opts`` (all optional; each descriptor declares its own in ``options``, the
built-in ones are ``NEMESIS_OPTIONS``): ``nemesis_interval`` (s), ``kill_targets``,
``pause_targets``, ``restart_targets``, ``clock_max_offset_ms`` (default 240000), ``clock_modes``
(``bump``/``rate``/``strobe``), ``clock_max_rate`` (default 1.2), ``slow_leader_rate``,
``packet_targets``, ``packet_loss`` (probability), ``packet_delay_ms``,
``packet_delay_jitter_ms``, ``packet_rate_kbit``, ``packet_duplicate``, ``packet_reorder``,
``file_targets``, ``lose_unfsynced_targets`` (default ``["all"]``), ``truncate_bytes``,
``bitflip_count``, ``bitflip_region`` (``tail``/``anywhere``), ``transfer_targets``
(``random``/``behind``: the leader-transfer nemesis's transferee).
"""

from __future__ import annotations

import json
import math
import random
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from chaos import plugins
from chaos.control import generator as gen
from chaos.control.db import CAPABILITIES, capabilities, db_name
from chaos.errors import ConfigError, did_you_mean
from chaos.nemesis.base import Compose, Nemesis, NemesisKind, Schedule, from_factory


def registered(strict: bool = False) -> tuple[list[tuple[str, NemesisKind]], list[str]]:
    """The registered fault modules, built-ins first (:data:`chaos.plugins.BUILTINS`), then the
    ``chaos.nemeses`` entry points: ``([(registered name, descriptor)], [problems])``. A plug-in that
    does not load is a problem line naming it (ConfigError instead with ``strict``)."""
    out: list[tuple[str, NemesisKind]] = []
    problems: list[str] = []
    for key in dict.fromkeys([*plugins.BUILTINS["nemesis"], *plugins.entry_points("nemesis")]):
        try:
            out.append((key, load(key)))
        except ConfigError as e:
            if strict:
                raise
            problems.append(str(e))
    return out, problems


def load(spec: str) -> NemesisKind:
    """The descriptor ``spec`` names (a registered name or ``module:attr``): a
    :class:`NemesisKind` as it is, an older plug-in factory (callable, with a ``kind``) wrapped by
    :func:`chaos.nemesis.base.from_factory`. ConfigError for anything else."""
    obj = plugins.resolve("nemesis", spec)
    if isinstance(obj, NemesisKind):
        return obj
    if callable(obj) and isinstance(getattr(obj, "kind", None), str):
        return from_factory(spec, obj)
    raise ConfigError(
        f"--nemesis {spec}: {getattr(obj, '__name__', type(obj).__name__)} is not a nemesis factory "
        "(a NemesisKind, or a callable opts -> Nemesis with a kind)"
    )


def _index() -> dict[str, NemesisKind]:
    """--nemesis name -> the registered descriptor declaring it (the first, in registry order)."""
    index: dict[str, NemesisKind] = {}
    for _, kind in registered()[0]:
        for name in kind.names:
            index.setdefault(name, kind)
    return index


def _resolve(chosen: Iterable[str]) -> list[tuple[str, NemesisKind, list[str]]]:
    """``[(chosen entry, its descriptor, the descriptor's names it selects)]``: a declared name
    selects itself, a reference or entry-point name every name of what it loads."""
    index = _index()
    out = []
    for n in chosen:
        kind = index.get(n)
        if kind is not None:
            out.append((n, kind, [n]))
        else:
            kind = load(n)
            out.append((n, kind, list(kind.names)))
    return out


@dataclass(frozen=True)
class NemesisSpec:
    """A ``--nemesis`` value parsed once (:meth:`parse`): ``text`` as given, and ``chosen``, each
    entry with the registered descriptor it names and the descriptor's names it selects (a
    declared name selects itself; a reference or entry-point name every name of what it loads).
    ``none`` selects nothing. Every function of this package taking names takes one too, so a run
    parses its ``--nemesis`` once and hands this value on."""

    text: str
    chosen: tuple[tuple[str, NemesisKind, tuple[str, ...]], ...]

    @classmethod
    def parse(cls, names: str | Iterable[str] | NemesisSpec) -> NemesisSpec:
        """``"partition-ring,kill"`` (or a list of such) parsed and its descriptors loaded;
        ConfigError as :func:`parse_names` and :func:`load` raise it."""
        if isinstance(names, NemesisSpec):
            return names
        text = names if isinstance(names, str) else ",".join(str(n) for n in names)
        chosen = tuple((entry, kind, tuple(sel)) for entry, kind, sel in _resolve(parse_names(names)))
        return cls(text or "none", chosen)

    @property
    def names(self) -> tuple[str, ...]:
        """The chosen entries, in order, each once (``none`` dropped)."""
        return tuple(entry for entry, _, _ in self.chosen)


def _spec(names: str | Iterable[str] | NemesisSpec) -> NemesisSpec:
    return NemesisSpec.parse(names)


def _builtin_kinds() -> list[NemesisKind]:
    return [load(key) for key in plugins.BUILTINS["nemesis"]]


def __getattr__(attr: str) -> Any:
    """``NEMESES`` ({name: one-line description}: ``none`` and every registered descriptor's names)
    and ``NEMESIS_OPTIONS`` (the built-in descriptors' ``--nemesis-opt`` keys and kinds), computed
    from the registry when asked (PEP 562)."""
    if attr == "NEMESES":
        out = {"none": "no faults"}
        for _, kind in registered()[0]:
            for name, doc in kind.names.items():
                out.setdefault(name, doc)
        return out
    if attr == "NEMESIS_OPTIONS":
        return {k: v for kind in _builtin_kinds() for k, v in kind.options.items()}
    raise AttributeError(f"module {__name__!r} has no attribute {attr!r}")


def parse_nemesis_opts(
    items: Iterable[str], extra: Mapping[str, str] | None = None, *, read: Mapping[str, str] | None = None
) -> dict[str, object]:
    """``["kill_targets=leader,minority", "clock_max_rate=1.5"]`` -> ``{"kill_targets": ["leader",
    "minority"], "clock_max_rate": 1.5}``, each value parsed as the built-in descriptors' ``options``
    (``NEMESIS_OPTIONS``) say.

    ``extra``: the options plug-in nemeses declare (``{key: kind}``, see :func:`plugin_options`),
    accepted beside the built-in ones. ``read``: the options the chosen nemeses read
    (:func:`selected_options`, what ``chaos run`` passes); when given, only these keys are accepted,
    since a key no chosen nemesis reads would be ignored silently by the run.

    Raises ValueError (one line naming the item and what was expected) for an item without ``=``,
    an unknown key or one no chosen nemesis reads, or a value of the wrong kind (NaN and infinities
    are not numbers here)."""
    known = dict(read) if read is not None else {**_builtin_options(), **(extra or {})}
    out: dict[str, object] = {}
    for item in items:
        key, sep, raw = item.partition("=")
        key = key.strip()
        if not sep or key not in known:
            if sep and read is not None and key in {**_builtin_options(), **(extra or {})}:
                theirs = ", ".join(known) or "none"
                raise ValueError(
                    f"--nemesis-opt {item!r}: no chosen nemesis reads {key} (they read: {theirs})"
                )
            if not known:
                raise ValueError(f"--nemesis-opt {item!r}: the chosen nemeses read no options")
            raise ValueError(f"--nemesis-opt {item!r}: expected KEY=VALUE with KEY one of {', '.join(known)}")
        kind = known[key]
        try:
            if kind == "list":
                value: object = [w.strip() for w in raw.split(",") if w.strip()]
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


def parse_names(names: str | Iterable[str] | NemesisSpec) -> list[str]:
    """``"a,b"`` or ``["a", "b,c"]`` -> ``["a", "b", "c"]`` (``none`` dropped), each a name a
    registered descriptor declares, a ``module:attr`` reference or a ``chaos.nemeses`` entry-point
    name (loaded later, by :func:`build`). Raises :class:`chaos.errors.ConfigError` naming the
    unknown names, or for an empty name (``""``, ``"a,,b"``)."""
    if isinstance(names, NemesisSpec):
        return list(names.names)
    raw = [names] if isinstance(names, str) else list(names)
    out: list[str] = []
    for item in raw:
        words = [n.strip() for n in str(item).split(",")]
        if not all(words):  # '' or 'partition-ring,,kill': a name lost, not "no faults"
            raise ConfigError(
                f"--nemesis {str(item)!r}: an empty name; expected comma-separated names, or none"
            )
        out += [n for n in dict.fromkeys(words) if n not in out]
    known = _index()
    unknown = [
        n
        for n in out
        if n != "none"
        and n not in known
        and not plugins.is_reference(n)
        and n not in plugins.entry_points("nemesis")
    ]
    if unknown:
        expected = ", ".join(["none", *known])
        hint = did_you_mean(unknown, ["none", *known])
        raise ConfigError(
            f"--nemesis: unknown nemesis {', '.join(unknown)}{hint}; expected some of {expected}"
        )
    return [n for n in out if n != "none"]


def _builtin_options() -> dict[str, str]:
    return {k: v for kind in _builtin_kinds() for k, v in kind.options.items()}


def plugin_names(names: str | Iterable[str] | NemesisSpec) -> list[str]:
    """The names among ``names`` (after :func:`parse_names`) that no built-in descriptor declares."""
    builtin = {n for kind in _builtin_kinds() for n in kind.names}
    return [n for n in parse_names(names) if n not in builtin]


def selected_options(names: str | Iterable[str] | NemesisSpec) -> dict[str, str]:
    """The ``--nemesis-opt`` keys the nemeses among ``names`` read: their descriptors' ``options``
    (``{key: kind}`` as ``NEMESIS_OPTIONS``), built-in and plug-in alike; ``{}`` for ``none``.
    ConfigError for an unknown name or a plug-in that does not load."""
    out: dict[str, str] = {}
    for _, kind, _ in _spec(names).chosen:
        out.update(kind.options)
    return out


def plugin_options(names: str | Iterable[str] | NemesisSpec) -> dict[str, str]:
    """The ``--nemesis-opt`` keys the plug-in nemeses among ``names`` declare (their descriptors'
    ``options``, ``{key: kind}`` as ``NEMESIS_OPTIONS``); ConfigError when one does not load."""
    out: dict[str, str] = {}
    for _, kind, _ in _resolve(plugin_names(names)):
        out.update(kind.options)
    return out


def requirements(
    names: str | Iterable[str] | NemesisSpec, opts: Mapping[str, Any] | None = None
) -> dict[str, set[str]]:
    """name -> the DB capabilities that nemesis needs (its descriptor's ``requires``; for a
    reference, those of every name it selects); an option of the descriptor's ``target_options``
    naming ``leader`` or ``primaries`` adds ``primary`` to the names it aims."""
    opts = opts or {}
    out: dict[str, set[str]] = {}
    for entry, kind, selected in _spec(names).chosen:
        need = {c for n in selected for c in kind.requires.get(n, ())}
        for key, aimed in kind.target_options.items():
            if any(t in ("leader", "primaries") for t in opts.get(key) or ()) and set(selected) & set(aimed):
                need.add("primary")
        out[entry] = need
    return out


def check_capabilities(
    names: str | Iterable[str] | NemesisSpec, opts: Mapping[str, object] | None, db: object
) -> None:
    """Raise :class:`chaos.errors.ConfigError` (one line naming the DB, the nemesis and the missing
    capability) when ``db`` cannot support a nemesis among ``names``."""
    has = capabilities(db)
    for n, need in requirements(names, opts).items():
        missing = sorted(need - has)
        if missing:
            members = "; ".join(f"{c}: {', '.join(CAPABILITIES[c][1])}" for c in missing if c in CAPABILITIES)
            raise ConfigError(
                f"--nemesis {n}: the DB {db_name(db)} lacks the {', '.join(missing)} capability "
                f"({members}); it offers {', '.join(sorted(has)) or 'none'}"
            )


def _grouped(spec: NemesisSpec) -> list[tuple[NemesisKind, list[str]]]:
    """The chosen names by descriptor, each descriptor once, in the order first chosen."""
    groups: dict[int, tuple[NemesisKind, list[str]]] = {}
    for _, kind, selected in spec.chosen:
        names = groups.setdefault(id(kind), (kind, []))[1]
        names += [n for n in selected if n not in names]
    return list(groups.values())


def build(
    names: str | Iterable[str] | NemesisSpec, opts: Mapping[str, Any] | None = None
) -> tuple[Compose, object]:
    """The combined nemesis and its nemesis-thread generator for the named faults: each chosen
    descriptor's ``build`` gives its nemeses, one flip-flop :class:`Schedule` each (mean gap
    ``nemesis_interval``). The generator is None when nothing was chosen.

    Raises :class:`chaos.errors.ConfigError` for unknown names or bad options. Faults a node cannot
    do (packet faults without a mechanism) are detected in the nemesis's ``setup``, before the
    run's generator starts.
    """
    opts = dict(opts or {})
    spec = _spec(names)
    given = opts.get("nemesis_interval")
    interval = float(10.0 if given is None else given)
    if interval <= 0:
        raise ConfigError(f"--nemesis-interval {interval}: expected a positive number of seconds")
    parts: list[Any] = []
    schedules: list[Schedule] = []
    typed: dict[str, list[str]] = {}
    try:
        for kind, selected in _grouped(spec):
            built = kind.parts(selected, opts)
            for nem, start, stop in built:
                parts.append(nem)
                schedules.append(Schedule(nem.kind, start, stop, interval))
            for op_kind, names in _typed_names(kind, selected, built, opts).items():
                typed.setdefault(op_kind, []).extend(n for n in names if n not in typed.get(op_kind, []))
    except ValueError as e:
        raise ConfigError(f"--nemesis: {e}") from e
    nemesis = Compose(parts)
    nemesis.final_ops = [s.stop_op() for s in schedules]
    nemesis.schedules = schedules
    nemesis.names = _as_typed(spec, typed)
    if not schedules:
        return nemesis, None
    # Each kind's first fault comes after its own random gap (uniform 0..2x interval), so kinds
    # do not all start together at time 0 and the workload gets a fault-free start.
    first = random.Random(opts.get("seed"))
    gens = [s.generator(first_s=first.uniform(0, 2 * interval)) for s in schedules]
    # on the nemesis thread only (wrapping again in gen.nemesis is harmless)
    return nemesis, gen.nemesis(gen.any_gen(*gens))


def _typed_names(
    kind: NemesisKind, selected: list[str], built: list[Any], opts: Mapping[str, object]
) -> dict[str, list[str]]:
    """``{op kind: the chosen names of one descriptor that run as it}``: every chosen name, when
    the descriptor built one nemesis for them; else each name's own nemeses, built alone."""
    if len(built) == 1:
        return {built[0][0].kind: list(selected)}
    out: dict[str, list[str]] = {}
    for name in selected:
        for nem, _, _ in kind.parts([name], opts):
            out.setdefault(nem.kind, []).append(name)
    return out


def _as_typed(spec: NemesisSpec, typed: dict[str, list[str]]) -> dict[str, list[str]]:
    """``typed`` with the names a reference or an entry-point name selected (``--nemesis
    partition``: every partition fault) shown as that entry, as the user typed it."""
    alias = {n: entry for entry, _, selected in spec.chosen if entry not in selected for n in selected}
    return {k: list(dict.fromkeys(alias.get(n, n) for n in names)) for k, names in typed.items()}


def styles(
    names: str | Iterable[str] | NemesisSpec, typed: Mapping[str, Sequence[str]] | None = None
) -> dict[str, dict[str, object]]:
    """How the report draws, names and the perf checker words each op kind of the chosen
    nemeses: ``{op kind: {"colour": "#rrggbb" | None, "verbs": {"start": phrase, "stop": phrase},
    "names": [--nemesis names]}}`` from their descriptors (``colours``, ``verbs``) and ``typed``
    (``Compose.names`` of the built nemesis: the names the user typed that run as each op kind,
    so every table and page says ``lose-unfsynced``, not the op kind ``file``), for test.json's
    ``nemesis_styles``. The history layer reads it from there (it must not import this package):
    :func:`chaos.history.analysis.fault_names`."""
    out: dict[str, dict[str, object]] = {}
    for kind, _ in _grouped(_spec(names)):
        for op_kind, style in kind.styles().items():
            out.setdefault(op_kind, style)
    for op_kind, typed_names in (typed or {}).items():
        out.setdefault(op_kind, {"colour": None, "verbs": {}})["names"] = list(typed_names)
    return out


__all__ = [
    "NEMESES",
    "NEMESIS_OPTIONS",
    "NemesisKind",
    "build",
    "parse_names",
    "parse_nemesis_opts",
    "selected_options",
    "requirements",
    "check_capabilities",
    "styles",
    "NemesisSpec",
    "registered",
    "load",
    "Compose",
    "Nemesis",
    "Schedule",
]
