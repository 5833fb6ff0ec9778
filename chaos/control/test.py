"""The test object handed to clients, nemeses and generators (Jepsen's test map), what it holds
(the DB contract: :class:`DB` and its capabilities, Jepsen's ``jepsen.db``, re-exported with the
helpers that read a DB by :mod:`chaos.control.db`; the :class:`Workload`; the :class:`Nemesis`),
and option parsing.

These are the seams a plug-in implements or reads, typed in the kit so that every layer above
(the nemeses, the workloads, the runner) takes the same typed :class:`Test`."""

from __future__ import annotations

import logging
import math
import os
import random
import re
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Protocol, TypeGuard, TypeVar, runtime_checkable

from chaos.errors import ConfigError
from chaos.history.op import Op
from chaos.history.store import RunDir

if TYPE_CHECKING:
    from chaos.control.node import Node
    from chaos.control.ssh import Control, Remote

DEFAULTS: dict[str, object] = {
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
    "lock_wait": 0.0,
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
    lock_wait: float = 0.0
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
            lock_wait=float(merged["lock_wait"]),
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


# -- the DB contract (chaos.control.db re-exports it with the helpers that read a DB): the required protocol ---------------------------------------------------------------------------


@runtime_checkable
class DB(Protocol):
    """The protocol every system under test implements (``jepsen.db/DB`` plus a name).

    ``name``: the system's name for messages and ``test.json`` (e.g. ``"etcd"``).
    ``setup(control)``: install and start the system on every node of ``control`` (in parallel,
    ``control.on_nodes``) and return when it is ready to serve clients; called once by the runner
    after OS setup; raises :class:`DBError` (naming the node, with its log tail) when it cannot.
    ``teardown(control)``: stop it and wipe its state on every node; called by the runner at the
    end of every run (also after a crash) and by setup retries; must be idempotent and should not
    raise for a system that is already down. ``describe()``: one short phrase of the options in
    force, for the runner's ``"<name> setup on N nodes (<describe>)"`` line; must not raise.

    Optional members: ``description`` (one line for ``chaos run --help``); ``loggers`` (names of
    Python loggers, e.g. the system's client library's, the runner writes into the run's
    ``chaos.log``); ``kill_match`` (a ``pkill -f`` regex of the server's command line: ``chaos
    heal`` resumes stopped processes it matches, leftovers the pidfile does not name);
    ``client_timeout`` (s, one client call's bound: the interpreter's watchdog allows a multiple
    of it); ``os_packages`` (names of the Debian packages the DB's nodes need, e.g.
    ``("redis-server", "redis-sentinel")``: the tool's OS setup, :class:`chaos.cluster.osetup.DebianOS`, installs
    them with apt-get next to the tool's own before ``setup``; read by :func:`os_packages`);
    ``daemons`` (names of the processes the DB runs on every node, e.g. ``("server", "sentinel")``;
    default one unnamed daemon; see :class:`Process` and :func:`daemons`); ``source_packages``
    (importable names of the packages holding the system's own code, e.g. ``("myserver",)``, and
    optionally ``source_omit``, coverage.py ``omit`` patterns of files in them that are not the
    system's, e.g. a simulator living beside it: what a campaign that runs the system's code in
    process measures the coverage of, :mod:`chaos.history.codecov`; read by :func:`source_packages`); ``client_errors``
    (exception classes its clients let through that are answers of the database or its network,
    recorded ``info``; any other exception from client code is a client error, no verdict on the
    database: :func:`chaos.control.client.is_declared`); ``API`` (the plug-in API range it was
    written for, e.g. ``">=1.0,<2"``: :func:`chaos.plugins.check_api`).

    The tool resets nothing of a DB on the nodes (files, offsets, processes): ``setup`` starts
    from whatever a previous run left and ``teardown`` cleans up after itself.
    """

    name: str

    def setup(self, control: Control) -> None: ...

    def teardown(self, control: Control) -> None: ...

    def describe(self) -> str: ...


# -- capabilities ------------------------------------------------------------------------------------


@runtime_checkable
class Process(Protocol):
    """``jepsen.db/Process``: start and kill the server on one node.

    Several daemons per node: a DB that declares ``daemons`` (names) gets every method of this
    capability and of :class:`Pause` called with the keyword ``daemon=<name>``, once per daemon
    (kill, pause, resume and heal act on every declared daemon; start starts each); a DB that
    declares none is called without the keyword, for its one daemon. :func:`kill_all`,
    :func:`start_all`, :func:`running_any`, :func:`pause_all` and :func:`resume_all` do that
    loop; ``log_files`` (:class:`LogFiles`) returns the files of every daemon.

    ``start(remote)``: start the server unless it already runs (idempotent); called by the kill,
    restart and file nemeses and by ``heal``; raises :class:`DBError` if it cannot start.
    ``kill(remote)``: SIGKILL the server and return when it is gone (idempotent: no server is not
    an error). ``running(remote)``: whether the server process exists (a paused one counts as
    running); must not raise for a node that answers. Optional: an attribute ``pidfile`` (the
    server's pidfile on the node) lets the restart nemesis stop it cleanly (SIGTERM, then wait)
    instead of killing it. ``chaos.control.util`` has the daemon helpers to write these in a line.
    """

    def start(self, remote: Remote) -> None: ...

    def kill(self, remote: Remote) -> None: ...

    def running(self, remote: Remote) -> bool: ...


@runtime_checkable
class Pause(Protocol):
    """``jepsen.db/Pause``: SIGSTOP and SIGCONT the server on one node.

    ``pause(remote)``: called by the pause nemesis; raises when no server runs (the nemesis records
    that node as not paused). ``resume(remote)``: called by the pause nemesis's stop and ``heal``
    and by ``chaos heal``; idempotent, a no-op when nothing is paused or nothing runs; should not
    raise for a node that answers.
    """

    def pause(self, remote: Remote) -> None: ...

    def resume(self, remote: Remote) -> None: ...


@runtime_checkable
class Primary(Protocol):
    """``jepsen.db/Primary``: which nodes lead.

    ``primaries(control)``: names of the nodes that claim leadership now, each by its own account
    (may be empty, or several during a partition); called by ``leader``/``primaries`` targets,
    the live view and the observer; should not raise for unreachable nodes (they are not primaries).
    ``await_leader(control, timeout)``: wait up to ``timeout`` s until some node claims leadership
    and return its name; raises :class:`DBError` after the timeout. The runner calls it after setup
    (when the DB offers this capability) so the workload starts against a serving cluster.
    """

    def primaries(self, control: Control) -> list[str]: ...

    def await_leader(self, control: Control, timeout: float) -> str: ...


@runtime_checkable
class LogFiles(Protocol):
    """``jepsen.db/LogFiles``: files to collect from each node, and what may go wrong in them.

    ``log_files(remote)``: remote paths the runner downloads into ``nodes/<node>/`` at the end of a
    run (on every exit path; may write a file first, e.g. a listing), the files of every daemon
    the DB runs there (``daemons``); a file missing on a node is reported as missing (a status
    line, ``test.json``'s ``node_logs.missing``, the ``server-logs`` summary), never kept as an
    empty file; two files of one node must differ in base name. Optional: ``log_patterns``,
    :class:`chaos.history.checkers.nodelogs.LogPattern` s (Jepsen's ``log-file-pattern``) the
    ``server-logs`` checker searches, and ``pattern_files``, base names of the downloaded files
    those patterns apply to (empty: every downloaded file); without patterns the logs are still
    downloaded, and nothing is searched.
    """

    def log_files(self, remote: Remote) -> list[str]: ...


@runtime_checkable
class DataDir(Protocol):
    """The server's durable state, for disk faults (``jepsen.nemesis.file``, LazyFS).

    ``data_dir``: the directory on every node that holds it (a string, or a function of the
    ``remote`` giving one). File faults kill the server (:class:`Process`), change files under it,
    and start it again, so this capability is only useful with ``process``. ``data_files``
    (optional): glob patterns relative to ``data_dir`` (``**`` spans directories, as Python's
    ``glob`` with ``recursive=True``) of the files that truncate and bitflip may damage, e.g. the
    log segments ``("*/data/*",)``; the newest of them (numeric names by number, then modification
    time) is the one damaged; default every file under ``data_dir`` (:func:`data_files`).
    ``log_tail(remote, lines)`` (optional) lets the file nemesis record why a server did not come
    back.
    """

    data_dir: Any


@runtime_checkable
class Clock(Protocol):
    """Clock control for clock faults through libfaketime (``jepsen.faketime``).

    A DB opts in by starting its server with ``LD_PRELOAD=<libfaketime.so.1>``,
    ``FAKETIME_TIMESTAMP_FILE=<faketime_file>`` and ``FAKETIME_NO_CACHE=1`` (monotonic clock faked
    too) and writing ``+0`` into ``faketime_file`` before the first start; the clock nemesis then
    rewrites that file (the running server's clocks move at once). ``pidfile`` names the server's
    pid, whose start time keeps a rate change continuous. Both are paths on every node.
    ``chaos.control.util`` starts a daemon that way.
    """

    faketime_file: str
    pidfile: str


@runtime_checkable
class Recovery(Protocol):
    """Waiting until the cluster serves again after healing (the ``liveness`` checker's record).

    ``await_recovery(control, timeout)``: called once by the runner after the heal, before the
    final phase; waits up to ``timeout`` s (the runner passes the larger of ``recovery_timeout`` and
    ``--recovery-time``) and returns ``{"recovered": bool, "bound_s", "waited_s", "problems":
    [one line each], ...}`` (see :mod:`chaos.history.checkers.liveness`). An unhealthy cluster is the answer,
    not an error: raise only when the wait itself broke. ``recovery_timeout``: seconds.
    Without this capability the run records no recovery and liveness is ``unknown``.
    """

    recovery_timeout: float

    def await_recovery(self, control: Control, timeout: float) -> dict[str, Any]: ...


@runtime_checkable
class Leadership(Protocol):
    """Each node's own view of leadership, for the observer (``leadership.jsonl``).

    ``leadership(node, timeout_s)``: ``{"leader": name | None, "term": int | None}`` as ``node``
    (a :class:`chaos.control.node.Node`) answers for itself, or ``{"error": text}``; called every
    few hundred ms from the observer's thread pool, concurrently for different nodes; must not
    raise; may keep a connection per node. ``close_leadership()``: drop those connections
    (idempotent). Without it the observer samples ``primaries`` only.
    """

    def leadership(self, node: Node, timeout_s: float) -> dict[str, Any]: ...

    def close_leadership(self) -> None: ...


@runtime_checkable
class Clients(Protocol):
    """The DB supplies the client of a workload's client protocol (``chaos.control.client``).

    ``client_protocols``: the protocols offered (e.g. ``{"register", "log"}``); the runner refuses
    at start a workload whose ``protocol`` is not among them. ``open_client(protocol, test, node,
    process)``: a client talking to ``node`` first (a :class:`chaos.control.node.Node`: ``name``,
    ``host`` the address the control node reaches it at, ``peer_host`` the one other nodes use),
    for one process (Jepsen opens a new client for a process that crashed); ``test.nodes`` lists
    every node; called from the worker's thread; raises
    :class:`chaos.control.client.NotSent` when it cannot connect. The client's methods are the
    protocol's (see :mod:`chaos.control.client`).
    """

    client_protocols: Collection[str]

    def open_client(self, protocol: str, test: Test, node: Node, process: Any) -> object: ...


@runtime_checkable
class LeaderTransfer(Protocol):
    """Asking the leader to hand leadership over (Raft's TimeoutNow, Ongaro's thesis section 3.10).

    ``transfer_leadership(control, leader, to)``: ask node ``leader`` to make ``to`` leader; returns
    ``{"outcome": "ok"|"fail"|"info", "code": the system's response code or None, "error": text or
    None}`` (ok: ``to`` took over). Called by the leader-transfer nemesis; raises only when the
    request could not be made at all. Optional: ``log_positions(control)`` -> ``{node name: the
    index its log ends at}`` for the nodes that answer (absent: no answer), for the nemesis's
    ``transfer_targets=behind`` (a transfer to the member furthest behind); must not raise.
    """

    def transfer_leadership(self, control: Control, leader: str, to: str) -> dict[str, Any]: ...


CAPABILITIES: Mapping[str, tuple[type, tuple[str, ...]]] = {
    "process": (Process, ("start", "kill", "running")),
    "pause": (Pause, ("pause", "resume")),
    "primary": (Primary, ("primaries", "await_leader")),
    "log-files": (LogFiles, ("log_files",)),
    "data-dir": (DataDir, ("data_dir",)),
    "clock": (Clock, ("faketime_file", "pidfile")),
    "recovery": (Recovery, ("await_recovery", "recovery_timeout")),
    "leadership": (Leadership, ("leadership", "close_leadership")),
    "clients": (Clients, ("open_client", "client_protocols")),
    "leader-transfer": (LeaderTransfer, ("transfer_leadership",)),
}
"""capability name -> (its Protocol, the members a DB must have for it)."""


def capabilities(db: object) -> set[str]:
    """The capability names (:data:`CAPABILITIES`) ``db`` offers: those whose members it has all of
    (an attribute set to ``None`` does not count, so a DB can switch a capability off per
    instance, e.g. no ``faketime_file`` when it does not run under libfaketime)."""
    return {
        name
        for name, (_, members) in CAPABILITIES.items()
        if all(getattr(db, m, None) is not None for m in members)
    }


_T = TypeVar("_T")


def has(db: object, capability: type[_T]) -> TypeGuard[_T]:
    """Whether ``db`` offers ``capability`` (one of the Protocols of :data:`CAPABILITIES`, e.g.
    ``has(db, Primary)``), by the same rule as :func:`capabilities`; a type guard, so the checker
    knows the capability's members afterwards. Raises ValueError for a class that is no capability."""
    for _, (proto, members) in CAPABILITIES.items():
        if proto is capability:
            return all(getattr(db, m, None) is not None for m in members)
    raise ValueError(f"{capability.__name__} is not a DB capability (see chaos.control.db.CAPABILITIES)")


# option -> (type, least value, whether the least value itself is allowed, greatest value or None)
NUMBER_OPTIONS: dict[str, tuple[type, float, bool, float | None]] = {
    "time_limit": (float, 0.0, False, None),
    "nemesis_interval": (float, 0.0, False, None),
    "rate": (float, 0.0, True, None),
    "recovery_time": (float, 0.0, True, None),
    "lock_wait": (float, 0.0, True, None),
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


def validate_options(opts: dict[str, object]) -> None:
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


def parse_concurrency(value: object, n_nodes: int) -> int:
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


def run_name(opts: dict[str, object]) -> str:
    """``<workload>-<nemeses>`` e.g. ``register-partition-ring``; ``none`` for no nemesis."""
    nem = str(opts.get("nemesis") or "none").replace(",", "+")
    return re.sub(r"[^A-Za-z0-9_.+-]", "_", f"{opts.get('workload')}-{nem}")
