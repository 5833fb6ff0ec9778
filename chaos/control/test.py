"""The test object handed to clients, nemeses and generators (Jepsen's test map), what it holds
(the DB, :mod:`chaos.control.db`; the :class:`Workload`; the :class:`Nemesis`), and option parsing.

These are the seams a plug-in implements or reads, typed in the kit so that every layer above
(the nemeses, the workloads, the runner) takes the same typed :class:`Test`."""

from __future__ import annotations

import logging
import math
import os
import random
import re
from collections.abc import Mapping
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from chaos.control.db import DB
from chaos.errors import ConfigError
from chaos.history.op import Op
from chaos.history.store import RunDir

if TYPE_CHECKING:
    from chaos.control.node import Node
    from chaos.control.ssh import Control

DEFAULTS: dict[str, Any] = {
    "db": None,  # chaos.plugins.default_db()
    "db_opts": [],
    "workload": "register",
    "nemesis": "none",
    "nemesis_interval": 10.0,
    "time_limit": 60.0,
    "concurrency": "2n",
    "rate": 50.0,
    "provider": "docker",
    "cluster_name": None,  # the default docker cluster
    "node_count": None,  # the named docker cluster's, else 5
    "test_count": 1,
    "store": "store",
    "seed": None,
    "leave_db_running": False,
    "recovery_time": 5.0,
    "final_time_limit": 120.0,
    "check_time_limit": 120.0,
}


@dataclass(frozen=True)
class RunOptions:
    """The options of one run, checked and typed (``chaos run``'s flags; defaults in
    :data:`DEFAULTS`): the one source of a run's options. Built once by :meth:`parse` before any
    node is touched (``chaos run`` builds it, the runner reads it, :attr:`Test.options` carries
    it); what the runner learns later (the seed it drew, the nodes it got) is a new copy
    (:meth:`with_`). Plug-in and nemesis options the tool does not know stay in :attr:`extra`
    (``--nemesis-opt`` keys, a plug-in's own); :meth:`as_dict` is the flat dict plug-ins read as
    ``test.opts``.

    Times in seconds, rates in ops/s. ``concurrency`` is ``N`` or ``"Kn"`` (K x nodes).
    ``nemesis_opts``: the ``--nemesis-opt`` items parsed (their keys are also in :attr:`extra`,
    where the nemeses read them); ``node_names``: the nodes' names once known.
    """

    db: str | None
    db_opts: tuple[str, ...]
    workload: str
    nemesis: str
    nemesis_interval: float
    time_limit: float
    concurrency: int | str
    rate: float
    provider: str
    cluster_name: str | None
    node_count: int | None
    test_count: int
    store: str
    seed: int | None
    leave_db_running: bool
    recovery_time: float
    final_time_limit: float
    check_time_limit: float
    checkers: tuple[str, ...] = ()
    extra: Mapping[str, Any] = field(default_factory=dict)
    consistency_model: str | None = None
    break_lock: bool = False
    node_names: tuple[str, ...] = ()
    nemesis_opts: Mapping[str, Any] = field(default_factory=dict)

    @classmethod
    def parse(cls, opts: Mapping[str, Any]) -> RunOptions:
        """The options ``opts`` (a dict with :data:`DEFAULTS`' keys and any others) as a
        RunOptions: numbers checked and converted (:func:`validate_options`), ``store`` and
        ``nodes_file`` checked. Raises ConfigError naming the option."""
        merged = {**DEFAULTS, **{k: v for k, v in opts.items() if v is not None}}
        validate_options(merged)
        known = {f.name for f in fields(cls)} - {"extra"}
        return cls(
            db=merged["db"],
            db_opts=tuple(merged["db_opts"] or ()),
            workload=str(merged["workload"]),
            nemesis=str(merged["nemesis"]),
            nemesis_interval=float(merged["nemesis_interval"]),
            time_limit=float(merged["time_limit"]),
            concurrency=merged["concurrency"],
            rate=float(merged["rate"]),
            provider=str(merged["provider"]),
            cluster_name=merged["cluster_name"],
            node_count=None if merged["node_count"] is None else int(merged["node_count"]),
            test_count=int(merged["test_count"]),
            store=str(merged["store"]),
            seed=None if merged["seed"] is None else int(merged["seed"]),
            leave_db_running=bool(merged["leave_db_running"]),
            recovery_time=float(merged["recovery_time"]),
            final_time_limit=float(merged["final_time_limit"]),
            check_time_limit=float(merged["check_time_limit"]),
            checkers=tuple(merged.get("checkers") or ()),
            extra=MappingProxyType({k: v for k, v in merged.items() if k not in known}),
            consistency_model=merged.get("consistency_model"),
            break_lock=bool(merged.get("break_lock")),
            node_names=tuple(str(n) for n in merged.get("node_names") or ()),
            nemesis_opts=MappingProxyType(dict(merged.get("nemesis_opts") or {})),
        )

    def with_(self, **changes: Any) -> RunOptions:
        """A copy with ``changes`` (typed fields by name): what the runner learns as it goes."""
        return replace(self, **changes)

    def as_dict(self) -> dict[str, Any]:
        """The options as one flat dict (what plug-ins read as ``test.opts``, and test.json's
        ``opts``)."""
        out = {f.name: getattr(self, f.name) for f in fields(self) if f.name != "extra"}
        out["db_opts"], out["checkers"] = list(self.db_opts), list(self.checkers)
        out["node_names"], out["nemesis_opts"] = list(self.node_names), dict(self.nemesis_opts)
        return {**out, **self.extra}


@dataclass
class Workload:
    """What a workload function (``opts -> Workload``, :mod:`chaos.workloads`) returns: ``name``;
    ``client``, a client template (``open(test, node) -> client``, ``invoke(test, op) -> op``,
    ``close(test)``; Jepsen's jepsen.client), one opened per worker thread; ``generator``, the
    client ops of the main phase (:mod:`chaos.control.generator`); ``final_generator``, client ops
    after the faults are healed (or None); ``checkers`` and ``model`` for the checkers;
    ``idempotent``, fs whose indeterminate completions are recorded ``fail``; ``protocol``, the
    client protocol the DB must offer (None: the client talks to the system itself);
    ``value_kind``, what a ``txn`` key holds (``"list"`` or ``"register"``)."""

    name: str
    client: Any
    generator: Any
    final_generator: Any = None
    checkers: list[str] = field(default_factory=lambda: ["stats", "perf"])
    model: str | None = None
    idempotent: frozenset[str] = frozenset({"read"})
    protocol: str | None = None
    value_kind: str | None = None


@runtime_checkable
class Nemesis(Protocol):
    """Jepsen's Nemesis protocol (``jepsen.nemesis``: ``setup!``, ``invoke!``, ``teardown!``,
    ``Reflection/fs``) plus ``heal`` (idempotent, used on every exit path). ``invoke`` gets an
    invocation op and returns its completion (:func:`chaos.nemesis.base.complete`); the nemesis
    thread calls it, the runner the others (docs/design.md, "Ops and histories")."""

    def setup(self, test: Test) -> None: ...

    def invoke(self, test: Test, op: Op) -> Op: ...

    def teardown(self, test: Test) -> None: ...

    def heal(self, test: Test) -> None: ...

    def fs(self) -> set[str]: ...


@dataclass
class Test:
    """One test run (Jepsen's test map), handed to clients, nemeses and generators.

    ``nodes``: the :class:`~chaos.control.node.Node`\\ s; ``control``: their SSH connections;
    ``db``: the system under test (:class:`chaos.control.db.DB`; ask for a capability with
    :func:`chaos.control.db.has` before using it); ``rng``: seeded with the run's
    seed (generator and nemesis choices are reproducible); ``opts``: every option as a dict (what
    plug-ins read), ``options`` the same typed (:class:`RunOptions`, None for a test built by
    hand); ``log``: the run's logger (also written to ``chaos.log``); ``concurrency``: client
    threads; ``workload``, ``nemesis``, ``run_dir``: the run's, once known.
    """

    name: str
    nodes: list[Node]
    control: Control
    db: DB
    rng: random.Random
    opts: dict[str, Any]
    log: logging.Logger
    concurrency: int
    workload: Workload | None = None
    nemesis: Nemesis | None = None
    run_dir: RunDir | None = None
    options: RunOptions | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def node_names(self) -> list[str]:
        return [n.name for n in self.nodes]


# option -> (type, least value, whether the least value itself is allowed, greatest value or None)
NUMBER_OPTIONS: dict[str, tuple[type, float, bool, float | None]] = {
    "time_limit": (float, 0.0, False, None),
    "nemesis_interval": (float, 0.0, False, None),
    "rate": (float, 0.0, True, None),
    "recovery_time": (float, 0.0, True, None),
    "final_time_limit": (float, 0.0, False, None),
    "check_time_limit": (float, 0.0, False, None),
    "stall_timeout": (float, 0.0, False, None),
    "per_key_limit": (int, 1, True, None),
    "ssh_port": (int, 1, True, 65535),
    "node_count": (int, 1, True, None),
    "test_count": (int, 1, True, None),
}


def option_flag(key: str) -> str:
    """``"time_limit"`` -> ``"--time-limit"``."""
    return "--" + key.replace("_", "-")


def check_number(key: str, value: Any) -> int | float:
    """``value`` of the numeric option ``key`` (see :data:`NUMBER_OPTIONS`), converted to its type.

    Floats must be finite (no ``nan``/``inf``); every number must lie in its range; an int option
    takes only whole numbers. Raises ConfigError naming the option and the range.
    """
    kind, least, least_ok, greatest = NUMBER_OPTIONS[key]
    flag = option_flag(key)
    rng = f"{'>=' if least_ok else '>'} {least:g}" + (f" and <= {greatest:g}" if greatest is not None else "")
    what = "a finite number" if kind is float else "a whole number"
    try:
        if isinstance(value, bool):
            raise TypeError
        x: int | float = float(value) if kind is float else int(str(value).strip())
    except (TypeError, ValueError):
        raise ConfigError(f"{flag} {value}: expected {what} {rng}") from None
    if (
        not math.isfinite(x)
        or x < least
        or (x == least and not least_ok)
        or (greatest is not None and x > greatest)
    ):
        raise ConfigError(f"{flag} {value}: expected {what} {rng}")
    return x


def validate_options(opts: dict[str, Any]) -> None:
    """Check every option a run needs before any node is touched; numbers are converted in place.

    Covers the numbers of :data:`NUMBER_OPTIONS` (None means "the default"), ``--store`` (must be,
    or be creatable as, a directory) and ``--nodes-file`` (readable UTF-8 text). Raises ConfigError
    (one line naming the option or file).
    """
    for key in NUMBER_OPTIONS:
        if opts.get(key) is not None:
            opts[key] = check_number(key, opts[key])
    store = opts.get("store")
    if store is not None:
        check_store(str(store))
    nodes_file = opts.get("nodes_file")
    if nodes_file:
        check_text_file(str(nodes_file), "--nodes-file")


def check_store(store: str) -> None:
    """``--store``: an existing directory, or a path whose nearest existing ancestor is a writable
    directory. Raises ConfigError."""
    p = Path(store)
    if p.exists():
        if not p.is_dir():
            raise ConfigError(f"--store {store}: not a directory")
        if not os.access(p, os.W_OK | os.X_OK):
            raise ConfigError(f"--store {store}: directory is not writable")
        return
    for parent in p.absolute().parents:
        if parent.exists():
            if not parent.is_dir():
                raise ConfigError(f"--store {store}: {parent} is not a directory")
            if not os.access(parent, os.W_OK | os.X_OK):
                raise ConfigError(f"--store {store}: cannot create it in {parent} (not writable)")
            return


def check_text_file(path: str, flag: str) -> None:
    """A file given by ``flag`` must exist and be UTF-8 text without NUL bytes. Raises ConfigError
    naming the file (and the line of the first bad byte)."""
    p = Path(path)
    try:
        data = p.read_bytes()
    except OSError as e:
        raise ConfigError(f"{flag} {path}: cannot read it ({e.strerror or e})") from None
    bad = data.find(b"\0")
    if bad < 0:
        try:
            data.decode("utf-8")
            return
        except UnicodeDecodeError as e:
            bad = e.start
    line = data.count(b"\n", 0, bad) + 1
    raise ConfigError(f"{flag} {path}: line {line}: not a text file (binary or not UTF-8)")


_CONC = re.compile(r"^\s*(\d+)\s*(n?)\s*$")


def parse_concurrency(value: Any, n_nodes: int) -> int:
    """``10`` -> 10; ``"3n"`` -> 3 x nodes (Jepsen's ``--concurrency``). Raises ConfigError otherwise."""
    if isinstance(value, int) and not isinstance(value, bool):
        c = value
    else:
        m = _CONC.match(str(value))
        if not m:
            raise ConfigError(
                f"--concurrency {value!r}: expected a positive integer or a multiple of nodes like 2n"
            )
        c = int(m.group(1)) * (n_nodes if m.group(2) else 1)
    if c < 1:
        raise ConfigError(f"--concurrency {value!r}: expected at least 1 client")
    return c


def run_name(opts: dict[str, Any]) -> str:
    """``<workload>-<nemeses>`` e.g. ``register-partition-ring``; ``none`` for no nemesis."""
    nem = str(opts.get("nemesis") or "none").replace(",", "+")
    return re.sub(r"[^A-Za-z0-9_.+-]", "_", f"{opts.get('workload')}-{nem}")
