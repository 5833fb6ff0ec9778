"""Loading plug-ins: DBs, workloads, nemeses and checkers named on the command line.

A plug-in is named either ``module:attr`` (imported from ``sys.path``: ``chaos run --db
mystore.chaos:MyStoreDB``) or by a registered name: the built-ins below, then the entry points of
the installed distributions in the groups :data:`GROUPS` (``chaos.dbs``, ``chaos.workloads``,
``chaos.nemeses``, ``chaos.checkers``), as Python packaging declares them::

    [options.entry_points]
    chaos.dbs =
        mystore = mystore.chaos:MyStoreDB

What each kind's object must be:

- a DB (``chaos.dbs``): a factory called with the parsed ``--db-opt`` options as keyword
  arguments, returning a :class:`chaos.cluster.db.DB`; its options are declared in
  ``db_options`` (see :mod:`chaos.cluster.db`). A ready DB object is accepted too.
- a workload (``chaos.workloads``): a function ``opts -> chaos.workloads.Workload``.
- a nemesis (``chaos.nemeses``): a factory ``opts -> Nemesis`` with ``kind`` (its ops are
  ``start-<kind>``/``stop-<kind>``), ``requires`` (capability names, see
  :func:`chaos.cluster.db.capabilities`) and ``nemesis_options`` (``{key: kind}`` as
  :data:`chaos.nemesis.NEMESIS_OPTIONS`); see :func:`chaos.nemesis.build`.
- a checker (``chaos.checkers``): a factory ``() -> Checker`` (``chaos.history.checkers``).

Errors are :class:`chaos.control.test.ConfigError` (one line naming the flag, the plug-in and what
was wrong: the module that is missing, the attribute that is not there, the object that is not a
DB); the CLI prints it and exits 254. Source: Jepsen tests are Clojure namespaces passing their
``:db``, ``:client`` and ``:nemesis`` in the test map; this is that, for Python modules.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from typing import Any

from chaos.control.test import ConfigError

GROUPS: Mapping[str, str] = {
    "db": "chaos.dbs",
    "workload": "chaos.workloads",
    "nemesis": "chaos.nemeses",
    "checker": "chaos.checkers",
}
"""kind -> entry-point group."""

BUILTINS: Mapping[str, Mapping[str, str]] = {
    "db": {"dledger": "chaos.cluster.dledger_db:DLedgerDB", "noop": "chaos.cluster.db:NoopDB"},
    "workload": {"register": "chaos.workloads.register:workload", "log": "chaos.workloads.log:workload"},
    "nemesis": {},  # the built-in fault kinds live in chaos.nemesis.NEMESES
    "checker": {},  # the built-in checkers live in chaos.history.checkers.checkers_for
}
"""The tool's own plug-ins by kind and name (also declared as entry points in ``setup.cfg``; kept
here so a source checkout without installed metadata finds them)."""

DEFAULT_DB = "dledger"

_FLAGS = {"db": "--db", "workload": "--workload", "nemesis": "--nemesis", "checker": "--checker"}


def entry_points(kind: str) -> dict[str, Any]:
    """Name -> ``importlib.metadata.EntryPoint`` of the installed distributions in ``kind``'s group."""
    from importlib.metadata import entry_points as eps

    return {ep.name: ep for ep in eps(group=GROUPS[kind])}


def names(kind: str) -> list[str]:
    """Every registered name of ``kind``: the built-ins, then the entry points."""
    return list(dict.fromkeys([*BUILTINS[kind], *sorted(entry_points(kind))]))


def is_reference(spec: str) -> bool:
    """Whether ``spec`` is a ``module:attr`` reference rather than a registered name."""
    return ":" in spec


def import_object(ref: str, flag: str = "plug-in") -> Any:
    """The object ``module:attr`` names (``attr`` may be dotted). ConfigError naming the module when
    it cannot be imported (one line, with the import's own message when it failed inside)."""
    module_name, _, attr = ref.partition(":")
    module_name, attr = module_name.strip(), attr.strip()
    if not module_name or not attr:
        raise ConfigError(f"{flag} {ref}: expected module:attr")
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as e:
        if e.name and (module_name == e.name or module_name.startswith(e.name + ".")):
            raise ConfigError(f"{flag} {ref}: no module named {module_name!r} on the Python path") from None
        raise ConfigError(f"{flag} {ref}: importing {module_name} failed: {e}") from None
    except Exception as e:  # a plug-in that fails to import is bad input, named as such
        raise ConfigError(f"{flag} {ref}: importing {module_name} failed: {type(e).__name__}: {e}") from None
    obj: Any = module
    for part in attr.split("."):
        if not hasattr(obj, part):
            raise ConfigError(f"{flag} {ref}: module {module_name} has no attribute {attr!r}")
        obj = getattr(obj, part)
    return obj


def resolve(kind: str, spec: str) -> Any:
    """The object a ``--<kind>`` value names: ``module:attr``, a built-in name or an entry point's
    name. ConfigError naming the flag and the known names for an unknown name."""
    flag = _FLAGS[kind]
    spec = str(spec).strip()
    if is_reference(spec):
        return import_object(spec, flag)
    if spec in BUILTINS[kind]:
        return import_object(BUILTINS[kind][spec], flag)
    if kind == "workload":
        from chaos.workloads import WORKLOADS

        if spec in WORKLOADS:  # a module chaos/workloads/<name>.py listed there
            return import_object(f"chaos.workloads.{spec}:workload", flag)
    ep = entry_points(kind).get(spec)
    if ep is None:
        known = ", ".join(names(kind)) or "none"
        raise ConfigError(f"{flag} {spec}: unknown {kind}; expected one of {known} or module:attr")
    try:
        return ep.load()
    except Exception as e:
        raise ConfigError(
            f"{flag} {spec}: loading entry point {ep.value} failed: {type(e).__name__}: {e}"
        ) from None


# -- DBs -------------------------------------------------------------------------------------------


def db_factory(spec: str | None) -> Any:
    """The DB factory (or DB object) ``--db`` names; default DLedger."""
    return resolve("db", spec or DEFAULT_DB)


def build_db(
    spec: str | None, db_opts: list[str] | tuple[str, ...] = (), extra: Mapping[str, Any] | None = None
) -> Any:
    """The DB ``--db spec`` names, built with ``--db-opt`` items ``db_opts`` (parsed by the DB's
    declared options, :func:`chaos.cluster.db.parse_db_opts`) and keyword arguments ``extra``
    (already parsed, e.g. the DLedger aliases ``--flush``; the ``--db-opt`` items win).

    Raises ConfigError (one line): the loader's errors, a bad ``--db-opt`` item, a factory that
    rejects its options (its ValueError), or an object that is not a DB."""
    from chaos.cluster.db import check_db, db_name, parse_db_opts

    spec = spec or DEFAULT_DB
    factory = db_factory(spec)
    label = f"--db {spec}"
    if _is_db(factory):
        if db_opts:
            raise ConfigError(f"{label}: is a DB object, not a factory; it takes no --db-opt")
        return factory
    if not callable(factory):
        raise ConfigError(
            f"{label}: {type(factory).__name__} is not a DB or a DB factory (see chaos.cluster.db.DB)"
        )
    if isinstance(factory, type):
        missing = [m for m in ("name", "setup", "teardown", "describe") if not hasattr(factory, m)]
        if missing:
            raise ConfigError(
                f"{label}: class {factory.__name__} is not a DB (no {', '.join(missing)}; see chaos.cluster.db.DB)"
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
    try:
        check_db(db, f"{label} ({db_name(db)})")
    except TypeError as e:
        raise ConfigError(str(e)) from None
    return db


def parse_db_kwargs(spec: str | None, db_opts: list[str] | tuple[str, ...] = ()) -> dict[str, Any]:
    """The keyword arguments ``--db-opt`` items give the DB factory ``spec`` names (what ``test.json``
    records as ``db_opts``); ConfigError as :func:`build_db`."""
    from chaos.cluster.db import parse_db_opts

    factory = db_factory(spec)
    if _is_db(factory):
        return {}
    name = str(getattr(factory, "name", None) or getattr(factory, "__name__", spec))
    try:
        return parse_db_opts(factory, list(db_opts), name)
    except ValueError as e:
        raise ConfigError(str(e)) from None


def _is_db(obj: Any) -> bool:
    return not isinstance(obj, type) and all(
        callable(getattr(obj, m, None)) for m in ("setup", "teardown", "describe")
    )


# -- workloads, nemeses, checkers ------------------------------------------------------------------


def workload_function(spec: str) -> Callable[[dict[str, Any]], Any]:
    """The workload function ``--workload spec`` names (``opts -> Workload``)."""
    fn = resolve("workload", spec)
    if not callable(fn):
        raise ConfigError(
            f"--workload {spec}: {type(fn).__name__} is not a workload function (opts -> Workload)"
        )
    return fn  # type: ignore[no-any-return]


def nemesis_factory(spec: str) -> Any:
    """The plug-in nemesis factory ``spec`` names (``module:attr`` or an entry point's name); it must
    have ``kind``. ConfigError otherwise."""
    obj = resolve("nemesis", spec)
    if not callable(obj) or not isinstance(getattr(obj, "kind", None), str):
        raise ConfigError(
            f"--nemesis {spec}: {getattr(obj, '__name__', type(obj).__name__)} is not a nemesis factory "
            "(a callable opts -> Nemesis with a kind)"
        )
    return obj


def checker_factory(spec: str) -> Callable[[], Any]:
    """The checker factory ``spec`` names (``module:attr`` or an entry point's name)."""
    obj = resolve("checker", spec)
    if not callable(obj):
        raise ConfigError(f"--checker {spec}: {type(obj).__name__} is not a checker factory")
    return obj  # type: ignore[no-any-return]
