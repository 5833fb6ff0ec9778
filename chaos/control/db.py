"""The DB contract: how a test installs, runs, observes and breaks the system under test.

Follows Jepsen's ``jepsen.db``: one required protocol (:class:`DB`: ``name``, ``setup``,
``teardown``, ``describe``) and optional *capabilities*, each a small ``runtime_checkable`` Protocol.
A DB offers a capability by having its members; :func:`capabilities` lists what a DB offers, and
``chaos run`` refuses at start (exit 254, one line naming the DB and the capability) a nemesis or
workload that needs one the DB lacks (the table is ``chaos.nemesis.REQUIRES``).

=====================  =========================  ==============================================================
capability             protocol                   used by
=====================  =========================  ==============================================================
``process``            :class:`Process`           kill, restart, file faults, ``stop-kill`` restarts
``pause``              :class:`Pause`             pause nemesis, ``chaos heal`` (resume)
``primary``            :class:`Primary`           ``*-leader`` targets, leader-transfer, the runner's leader wait
``log-files``          :class:`LogFiles`          node logs downloaded into the run, the ``server-logs`` checker
``data-dir``           :class:`DataDir`           truncate, bitflip, lose-unfsynced
``clock``              :class:`Clock`             clock-skew, clock-slow-leader (libfaketime)
``recovery``           :class:`Recovery`          the wait after healing, the ``liveness`` checker
``leadership``         :class:`Leadership`        the leadership observer (``leadership.jsonl``)
``leader-transfer``    :class:`LeaderTransfer`    the leader-transfer nemesis
``clients``            :class:`Clients`           every workload: the DB supplies the client of its protocol
=====================  =========================  ==============================================================

Who calls what: the runner (``chaos.runner.runner``) calls ``setup``/``teardown`` once per run on
the control node's main thread; nemeses call the per-node methods (``remote``: a
:class:`chaos.control.ssh.Remote`) from the nemesis thread, often for several nodes in parallel,
so a per-node method must be safe to run concurrently for *different* nodes. Unless a method says
otherwise it may raise; a nemesis records the error in its completion (``applied: false``, ``why``)
and never counts such a fault as injected.

Plugging a DB in: ``chaos run --db module:attr`` (or an entry point in the ``chaos.dbs`` group,
see :mod:`chaos.plugins`) names either a DB object or a factory (a class or function) called with
the parsed ``--db-opt key=value`` options as keyword arguments. The factory declares its options
in an attribute ``db_options`` (a sequence of :class:`DBOption`); the factory validates them itself
and raises ValueError (one line naming the option) for a bad value. The default DB is the one the
``chaos.defaults`` entry point names (:func:`chaos.plugins.default_db`); :class:`NoopDB` is the
smallest DB.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from chaos import plugins

# the contract's Protocols live beside the Test they are part of (one module: each names the
# other); this module re-exports them with the helpers that read a DB
from chaos.control.test import (
    CAPABILITIES,
    DB,
    Clients,
    Clock,
    DataDir,
    Leadership,
    LeaderTransfer,
    LogFiles,
    Pause,
    Primary,
    Process,
    Recovery,
    capabilities,
    has,
)
from chaos.errors import ConfigError, DBError

if TYPE_CHECKING:
    from chaos.control.ssh import Control, Remote
    from chaos.history.checkers.nodelogs import LogPattern

__all__ = [
    "CAPABILITIES",
    "DB",
    "Clients",
    "Clock",
    "DataDir",
    "DBError",
    "DBOption",
    "GateRun",
    "Leadership",
    "LeaderTransfer",
    "LogFiles",
    "NoopDB",
    "Pause",
    "Primary",
    "Process",
    "Recovery",
    "build_db",
    "capabilities",
    "check_db",
    "daemons",
    "data_files",
    "db_factory",
    "db_name",
    "db_options",
    "gate_presets",
    "has",
    "kill_all",
    "os_packages",
    "parse_db_kwargs",
    "parse_db_opts",
    "pause_all",
    "resume_all",
    "running_all",
    "running_any",
    "source_packages",
    "start_all",
]


# -- options -----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class DBOption:
    """One option a DB factory takes (``--db-opt name=value``).

    ``name``: the key (and the factory's keyword argument, ``-`` read as ``_``, unless ``dest``
    names another); ``parse``: text ->
    value (raises ValueError for bad text; default: the text itself); ``choices``: the allowed
    values (after parsing; empty: any); ``multiple``: the option may repeat and the factory gets a
    list; ``help``: one line for ``chaos run --help``.
    """

    name: str
    parse: Callable[[str], object] = str
    choices: Sequence[object] = ()
    multiple: bool = False
    help: str = ""
    dest: str = ""

    @property
    def keyword(self) -> str:
        return self.dest or self.name.replace("-", "_")


def db_options(factory: object) -> list[DBOption]:
    """The options ``factory`` declares (its ``db_options`` attribute; none when it has none)."""
    return list(getattr(factory, "db_options", ()) or ())


def parse_db_opts(factory: object, items: Sequence[str], db_name: str = "the DB") -> dict[str, object]:
    """``["flush=async", "server-arg=--x"]`` -> the factory's keyword arguments, each parsed as its
    :class:`DBOption` says (a ``multiple`` option collects a list).

    Raises ValueError, one line naming the item and what was expected: an item without ``=``, a key
    the DB does not declare (the declared keys are listed), a value its ``parse`` rejects or not
    among its ``choices``, a second value of a single option."""
    declared = {o.name: o for o in db_options(factory)}
    declared.update({o.keyword: o for o in declared.values()})
    out: dict[str, Any] = {}
    for item in items:
        key, sep, raw = str(item).partition("=")
        key = key.strip()
        if not sep or key not in declared:
            names = ", ".join(o.name for o in db_options(factory)) or "none"
            raise ValueError(
                f"--db-opt {item!r}: expected KEY=VALUE with KEY an option of {db_name} ({names})"
            )
        opt = declared[key]
        try:
            value = opt.parse(raw)
        except (TypeError, ValueError) as e:
            raise ValueError(f"--db-opt {item!r}: bad value for {opt.name} of {db_name}: {e}") from None
        if opt.choices and value not in opt.choices:
            raise ValueError(
                f"--db-opt {item!r}: expected {opt.name} one of {', '.join(map(str, opt.choices))}"
            )
        if opt.multiple:
            out.setdefault(opt.keyword, []).append(value)
        elif opt.keyword in out:
            raise ValueError(f"--db-opt {item!r}: {opt.name} given twice")
        else:
            out[opt.keyword] = value
    return out


def db_name(db: object) -> str:
    """``db.name``, else its class name."""
    return str(getattr(db, "name", None) or type(db).__name__)


def check_db(db: object, where: str = "the DB") -> None:
    """Raise TypeError naming ``where`` when ``db`` lacks a member of :class:`DB`."""
    missing = [m for m in ("name", "setup", "teardown", "describe") if getattr(db, m, None) is None]
    if missing:
        raise TypeError(f"{where} is not a DB (no {', '.join(missing)}); see chaos.control.db.DB")


# -- what a DB declares: packages, daemons, data files ------------------------------------------------


def declared_names(db: object, attr: str, default: Sequence[str] = ()) -> list[str]:
    """The names ``db`` declares in ``attr`` (``os_packages``, ``daemons``, ``data_files``, ...),
    ``default`` when absent or empty. A lone string is one name, never its characters:
    ``os_packages = ("redis-server")`` (the comma forgotten) installs ``redis-server``, not ``r``,
    ``e``, ... (``chaos plugin check`` reports the declaration, once)."""
    value = getattr(db, attr, None) or default
    if isinstance(value, str):
        value = (value,)
    return [str(v) for v in value]


def os_packages(db: object) -> list[str]:
    """The Debian packages ``db`` declares its nodes need (its ``os_packages``; none when absent)."""
    return declared_names(db, "os_packages")


def daemons(db: object) -> tuple[str | None, ...]:
    """The daemons ``db`` runs per node: its ``daemons`` names, or ``(None,)`` (one daemon, whose
    methods are called without the ``daemon`` keyword)."""
    names = tuple(declared_names(db, "daemons"))
    return names or (None,)


def source_packages(db: object) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """The packages of the system's own code ``db`` declares (its ``source_packages``) and the
    coverage.py ``omit`` patterns within them (its ``source_omit``); empty tuples when absent."""
    packages = tuple(declared_names(db, "source_packages"))
    return packages, tuple(declared_names(db, "source_omit"))


def data_files(db: object) -> list[str]:
    """Glob patterns (relative to ``data_dir``) of the files disk faults may damage: the DB's
    ``data_files``, default ``["**/*"]`` (every file)."""
    return declared_names(db, "data_files", ("**/*",))


@dataclass(frozen=True)
class GateRun:
    """One run of a DB's ``chaos gate`` preset (:func:`gate_presets`): ``workload``, ``nemesis``
    (faults joined with ``+`` run together in one run), extra ``chaos run`` words ``args`` (e.g.
    the DB's own options, ``("--read-mode", "lease")``), and ``catches``: the names of the bug
    classes this configuration caught (e.g. mutants of a bug catalogue), for the listing."""

    workload: str
    nemesis: str
    args: tuple[str, ...] = ()
    catches: tuple[str, ...] = ()

    def run_args(self, store: str, extra: Sequence[str]) -> list[str]:
        """The ``chaos run`` arguments: this configuration's, then ``extra`` (the gate's --run-arg
        words; a repeated option's last value wins, so they override the preset's)."""
        faults = self.nemesis.replace("+", ",")
        return ["run", "--workload", self.workload, "--nemesis", faults, "--store", store, *self.args, *extra]

    def label(self) -> str:
        return " ".join([self.workload, self.nemesis, *self.args])


def gate_presets(db: object) -> dict[str, tuple[GateRun, ...]]:
    """The ``chaos gate`` presets ``db`` (a DB or its factory) declares: its optional
    ``gate_presets()``, called with no argument, returns ``{name: [GateRun, ...]}``, the first
    name being the preset a bare ``chaos gate`` runs; ``{}`` when it declares none. ConfigError
    (one line naming the DB) when the hook raises or returns anything else."""
    hook = getattr(db, "gate_presets", None)
    if hook is None:
        return {}
    where = f"the DB {db_name(db)}: gate_presets()"
    try:
        presets = hook()
        out = {str(name): tuple(runs) for name, runs in dict(presets).items()}
    except Exception as e:
        raise ConfigError(f"{where}: {type(e).__name__}: {e}") from None
    for name, runs in out.items():
        if not runs or not all(isinstance(r, GateRun) for r in runs):
            raise ConfigError(f"{where}: preset {name!r} is not a non-empty sequence of GateRun")
    return out


def _call(method: object, remote: Remote, daemon: str | None) -> object:
    """``method(remote)`` for the one unnamed daemon, else ``method(remote, daemon=daemon)``;
    TypeError when the DB has no such method (a capability it does not offer)."""
    if not callable(method):
        raise TypeError(f"the DB has no {method!r} method for this capability")
    return method(remote) if daemon is None else method(remote, daemon=daemon)


def _each_daemon(db: object, method: str, remote: Remote) -> list[object]:
    return [_call(getattr(db, method), remote, d) for d in daemons(db)]


def kill_all(db: object, remote: Remote) -> None:
    """``db.kill`` for every daemon on ``remote`` (:func:`daemons`)."""
    _each_daemon(db, "kill", remote)


def start_all(db: object, remote: Remote) -> None:
    """``db.start`` for every daemon on ``remote``; the first failure raises after the others ran."""
    errors: list[Exception] = []
    for d in daemons(db):
        try:
            _call(getattr(db, "start", None), remote, d)
        except Exception as e:  # the other daemons still start
            errors.append(e)
    if errors:
        raise errors[0]


def running_any(db: object, remote: Remote) -> bool:
    """Whether some daemon of ``db`` runs on ``remote`` (True for a DB without ``running``)."""
    if getattr(db, "running", None) is None:
        return True
    return any(_each_daemon(db, "running", remote))


def running_all(db: object, remote: Remote) -> bool:
    """Whether every daemon of ``db`` runs on ``remote`` (True for a DB without ``running``)."""
    if getattr(db, "running", None) is None:
        return True
    return all(_each_daemon(db, "running", remote))


def pause_all(db: object, remote: Remote) -> None:
    """``db.pause`` for every daemon on ``remote``; raises (after trying all) when none was paused."""
    errors: list[Exception] = []
    names = daemons(db)
    for d in names:
        try:
            _call(getattr(db, "pause", None), remote, d)
        except Exception as e:  # a daemon that is down: the others are still paused
            errors.append(e)
    if len(errors) == len(names):
        raise errors[0]


def resume_all(db: object, remote: Remote) -> None:
    """``db.resume`` for every daemon on ``remote``."""
    _each_daemon(db, "resume", remote)


class NoopDB:
    """A DB that does nothing: every capability but ``clients``, ``data-dir`` and ``clock``; for
    exercising the control layer and the nemeses alone."""

    name = "noop"
    description = "installs nothing (the control layer and the nemeses alone)"
    log_patterns: Sequence[LogPattern] = ()
    pattern_files: Sequence[str] = ()
    recovery_timeout = 0.0

    def describe(self) -> str:
        return "nothing installed"

    def setup(self, control: Control) -> None:
        pass

    def teardown(self, control: Control) -> None:
        pass

    def start(self, remote: Remote) -> None:
        pass

    def kill(self, remote: Remote) -> None:
        pass

    def running(self, remote: Remote) -> bool:
        return True

    def pause(self, remote: Remote) -> None:
        pass

    def resume(self, remote: Remote) -> None:
        pass

    def primaries(self, control: Control) -> list[str]:
        return []

    def await_leader(self, control: Control, timeout: float) -> str:
        raise DBError("cluster", "the noop DB has no leader")

    def log_files(self, remote: Remote) -> list[str]:
        return []

    def await_recovery(self, control: Control, timeout: float) -> dict[str, object]:
        return {"recovered": True, "bound_s": timeout, "waited_s": 0.0, "problems": [], "nodes": {}}


# -- building the DB --db names (the loader is chaos.plugins) ----------------------------------------


def db_factory(spec: str | None, *, check_api: bool = True, flag: str | None = None) -> object:
    """The DB factory (or DB object) ``--db`` names; default :func:`chaos.plugins.default_db`
    (``check_api``: refuse one whose declared API range excludes this tool's; ``flag``: what errors
    name it by, :func:`chaos.plugins.resolve`'s)."""
    return plugins.resolve("db", spec or plugins.default_db(), check=check_api, flag=flag)


def build_db(
    spec: str | None,
    db_opts: list[str] | tuple[str, ...] = (),
    extra: Mapping[str, object] | None = None,
    *,
    check_api: bool = True,
) -> Any:
    """The DB ``--db spec`` names, built with ``--db-opt`` items ``db_opts`` (parsed by the DB's
    declared options, :func:`chaos.control.db.parse_db_opts`) and keyword arguments ``extra``
    (already parsed, e.g. a DB's own ``chaos run`` flags; the ``--db-opt`` items win).

    Raises ConfigError (one line): the loader's errors, a bad ``--db-opt`` item, a factory that
    rejects its options (its ValueError), or an object that is not a DB (``check_api``: also a
    plug-in whose declared API range excludes this tool's)."""
    spec = spec or plugins.default_db()
    factory = db_factory(spec, check_api=check_api)
    label = f"--db {spec}"
    if _is_db(factory):
        if db_opts:
            raise ConfigError(f"{label}: is a DB object, not a factory; it takes no --db-opt")
        return factory
    if not callable(factory):
        raise ConfigError(
            f"{label}: {type(factory).__name__} is not a DB or a DB factory (see chaos.control.db.DB)"
        )
    if isinstance(factory, type):
        missing = [m for m in ("name", "setup", "teardown", "describe") if not hasattr(factory, m)]
        if missing:
            raise ConfigError(
                f"{label}: class {factory.__name__} is not a DB (no {', '.join(missing)}; see chaos.control.db.DB)"
            )
    name = str(getattr(factory, "name", None) or getattr(factory, "__name__", spec))
    try:
        kwargs = parse_db_opts(factory, list(db_opts), name)
    except ValueError as e:
        raise ConfigError(str(e)) from None
    declared = {o.keyword for o in getattr(factory, "db_options", ()) or ()}
    for k, v in (extra or {}).items():
        if k in declared and k not in kwargs and v is not None:
            kwargs[k] = v
    try:
        db = factory(**kwargs)
    except ValueError as e:  # the DB's own verdict on its options
        raise ConfigError(f"{label}: {' '.join(str(e).split())}") from None
    except TypeError as e:
        raise ConfigError(f"{label}: calling the DB factory failed: {' '.join(str(e).split())}") from None
    except Exception as e:  # the plug-in's own failure, named by its option
        raise ConfigError(
            f"{label}: the DB factory raised {type(e).__name__}: {' '.join(str(e).split())}"
        ) from None
    try:
        check_db(db, f"{label} ({db_name(db)})")
    except TypeError as e:
        raise ConfigError(str(e)) from None
    return db


def parse_db_kwargs(spec: str | None, db_opts: list[str] | tuple[str, ...] = ()) -> dict[str, object]:
    """The keyword arguments ``--db-opt`` items give the DB factory ``spec`` names (what ``test.json``
    records as ``db_opts``); ConfigError as :func:`build_db`."""
    factory = db_factory(spec)
    if _is_db(factory):
        return {}
    name = str(getattr(factory, "name", None) or getattr(factory, "__name__", spec))
    try:
        return parse_db_opts(factory, list(db_opts), name)
    except ValueError as e:
        raise ConfigError(str(e)) from None


def _is_db(obj: object) -> bool:
    return not isinstance(obj, type) and all(
        callable(getattr(obj, m, None)) for m in ("setup", "teardown", "describe")
    )
