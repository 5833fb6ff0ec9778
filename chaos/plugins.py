"""The one registry: DBs, workloads, nemeses, checkers, models, providers and commands, by name.

A plug-in is named either ``module:attr`` (imported from ``sys.path``: ``chaos run --db
mystore.chaos:MyStoreDB``) or by a registered name: the tool's own (:data:`BUILTINS`, the mirror
of its entry points in ``setup.cfg``, so a source checkout without installed metadata finds them;
``tests/test_registry.py`` holds the two equal), then the entry points of the installed
distributions in the groups :data:`GROUPS` (``chaos.dbs``, ``chaos.workloads``, ``chaos.nemeses``,
``chaos.checkers``, ``chaos.models``, ``chaos.providers``, ``chaos.commands``), as Python
packaging declares them::

    [options.entry_points]
    chaos.dbs =
        mystore = mystore.chaos:MyStoreDB

What each kind's object must be:

- a DB (``chaos.dbs``): a factory called with the parsed ``--db-opt`` options as keyword
  arguments, returning a :class:`chaos.control.db.DB`; its options are declared in
  ``db_options`` (see :mod:`chaos.control.db`). A ready DB object is accepted too.
- a workload (``chaos.workloads``): a function ``opts -> chaos.workloads.Workload``.
- a nemesis (``chaos.nemeses``): a factory ``opts -> Nemesis`` with ``kind`` (its ops are
  ``start-<kind>``/``stop-<kind>``), ``requires`` (capability names, see
  :func:`chaos.control.db.capabilities`) and ``nemesis_options`` (``{key: kind}`` as
  :data:`chaos.nemesis.NEMESIS_OPTIONS`); see :func:`chaos.nemesis.build`.
- a checker (``chaos.checkers``): a factory ``() -> Checker``; it may take the keywords ``test``
  (the run's ``test.json`` dict) and ``model`` (a ``--model`` given to ``chaos check``), which
  :func:`chaos.history.checkers.registry.make_checker` passes when its signature names them.
- a model (``chaos.models``, for the ``linear`` checker and ``--model``): a factory
  ``(**options) -> Model`` (:mod:`chaos.history.checkers.models`; ``--model name:opt=value``).
- a provider (``chaos.providers``): where the nodes come from (:mod:`chaos.cluster.providers`).
- a command (``chaos.commands``): a click command, ``chaos <name>`` (:mod:`chaos.cli`).

Errors are :class:`chaos.control.test.ConfigError` (one line naming the flag, the plug-in and what
was wrong: the module that is missing, the attribute that is not there, the object that is not a
DB); the CLI prints it and exits 254. Source: Jepsen tests are Clojure namespaces passing their
``:db``, ``:client`` and ``:nemesis`` in the test map; this is that, for Python modules.
"""

from __future__ import annotations

import importlib
import sys
import warnings
from collections.abc import Callable, Mapping
from typing import Any

from chaos.errors import ConfigError, did_you_mean

API_VERSION = "1.2.0"
"""The version of the plug-in API (``chaos.api.VERSION``, semantic versioning; CHANGELOG.md at the
repository root says what each version added, changed, deprecated and removed). A plug-in may
declare the range it needs in an attribute ``API`` (a PEP 440 specifier such as ``">=1.0,<2"``) on
its object or its module; :func:`check_api` refuses it (one line, exit 254) when this version is
outside it."""

DEPRECATIONS: list[str] = []
"""The deprecation messages this process has seen (each once, in order): a plug-in that imports a
moved name gets a ``DeprecationWarning`` and the run summary shows the message once
(:func:`deprecated`)."""

GROUPS: Mapping[str, str] = {
    "db": "chaos.dbs",
    "workload": "chaos.workloads",
    "nemesis": "chaos.nemeses",
    "checker": "chaos.checkers",
    "model": "chaos.models",
    "provider": "chaos.providers",
    "command": "chaos.commands",
}
"""kind -> entry-point group."""

DEFAULTS_GROUP = "chaos.defaults"
"""Entry points naming the default plug-in of a kind: ``db = package.module:Factory`` (the same
object a name in that kind's group registers)."""

BUILTINS: Mapping[str, Mapping[str, str]] = {
    "db": {"noop": "chaos.control.db:NoopDB"},
    "workload": {
        "register": "chaos.workloads.register:workload",
        "log": "chaos.workloads.log:workload",
        "list-append": "chaos.workloads.list_append:workload",
        "rw-register": "chaos.workloads.rw_register:workload",
        "bank": "chaos.workloads.bank:workload",
        "set": "chaos.workloads.set:workload",
        "counter": "chaos.workloads.counter:workload",
        "long-fork": "chaos.workloads.long_fork:workload",
    },
    "nemesis": {
        "partition": "chaos.nemesis.partition:NEMESIS",
        "process": "chaos.nemesis.process:NEMESIS",
        "clock": "chaos.nemesis.clock:NEMESIS",
        "packet": "chaos.nemesis.packet:NEMESIS",
        "files": "chaos.nemesis.files:NEMESIS",
        "leadership": "chaos.nemesis.leadership:NEMESIS",
    },
    "checker": {
        "linear": "chaos.history.checkers.registry:linear_checker",
        "log": "chaos.history.checkers.logcheck:LogChecker",
        "log-reads": "chaos.history.checkers.logcheck:LogReadsChecker",
        "set": "chaos.history.checkers.logcheck:SetChecker",
        "stats": "chaos.history.checkers.registry:StatsChecker",
        "perf": "chaos.history.checkers.perf:PerfChecker",
        "server-logs": "chaos.history.checkers.nodelogs:ServerLogChecker",
        "liveness": "chaos.history.checkers.liveness:LivenessChecker",
        "faults": "chaos.history.checkers.faults:FaultsChecker",
        "bank": "chaos.history.checkers.bank:BankChecker",
        "counter": "chaos.history.checkers.counter:CounterChecker",
        "long-fork": "chaos.history.checkers.longfork:LongForkChecker",
        "set-full": "chaos.history.checkers.setfull:SetFullChecker",
        "set-full-linearizable": "chaos.history.checkers.setfull:linearizable",
        "client-errors": "chaos.history.checkers.clienterrors:ClientErrorsChecker",
        "elle": "chaos.history.checkers.registry:elle_checker",
    },
    "model": {
        "register": "chaos.history.checkers.models:Register",
        "cas-register": "chaos.history.checkers.models:CasRegister",
        "kv": "chaos.history.checkers.models:KV",
        "mutex": "chaos.history.checkers.models:Mutex",
        "set": "chaos.history.checkers.models:SetModel",
        "append-log": "chaos.history.checkers.models:AppendLog",
        "multi-register": "chaos.history.checkers.models:MultiRegister",
    },
    "provider": {"docker": "chaos.cluster.docker:DockerProvider", "ssh": "chaos.cluster.sshhosts:SSHHosts"},
    "command": {
        "run": "chaos.runner.cli:run",
        "heal": "chaos.nemesis.cli:heal",
        "cluster": "chaos.cluster.cli:cluster",
        "check": "chaos.history.report.cli:check",
        "report": "chaos.history.report.html:report",
        "serve": "chaos.history.report.serve:serve",
        "analyze": "chaos.runner.gate:analyze_cmd",
        "gate": "chaos.runner.gate:gate_cmd",
        "plugin": "chaos.runner.plugincheck:plugin",
    },
}
"""The tool's own plug-ins by kind and name: the mirror of the ``chaos.*`` entry points
``setup.cfg`` declares (``tests/test_registry.py`` holds them equal), kept here so a source checkout
without installed metadata finds them. Read through :func:`resolve` and :func:`names`, as a
plug-in's are."""

_FLAGS = {
    "db": "--db",
    "workload": "--workload",
    "nemesis": "--nemesis",
    "checker": "--checker",
    "model": "--model",
    "provider": "--provider",
    "command": "command",
}


def default_name(kind: str) -> str | None:
    """The registered name of ``kind``'s default plug-in: the name in ``kind``'s group whose
    entry point loads the same object as ``kind``'s entry point in :data:`DEFAULTS_GROUP`; None
    when no distribution declares one."""
    from importlib.metadata import entry_points as eps

    chosen = {ep.name: ep.value for ep in eps(group=DEFAULTS_GROUP)}.get(kind)
    if chosen is None:
        return None
    same = [n for n, ep in entry_points(kind).items() if ep.value == chosen]
    same += [n for n, ref in BUILTINS[kind].items() if ref == chosen]
    return same[0] if same else chosen


def default_db() -> str:
    """The DB ``chaos run`` tests when ``--db`` is not given; ConfigError when none is installed."""
    name = default_name("db")
    if name is None:
        raise ConfigError("--db: no DB named and no default DB installed (pass --db NAME or module:attr)")
    return name


def entry_points(kind: str) -> dict[str, Any]:
    """Name -> ``importlib.metadata.EntryPoint`` of the installed distributions in ``kind``'s group."""
    from importlib.metadata import entry_points as eps

    return {ep.name: ep for ep in eps(group=GROUPS[kind])}


def names(kind: str) -> list[str]:
    """Every registered name of ``kind`` (built-ins and entry points), sorted."""
    return sorted({*BUILTINS[kind], *entry_points(kind)})


def is_reference(spec: str) -> bool:
    """Whether ``spec`` is a ``module:attr`` reference rather than a registered name."""
    return ":" in spec


def import_object(ref: str, flag: str = "plug-in") -> Any:
    """The object ``module:attr`` names (``attr`` may be dotted). ConfigError naming the module when
    it cannot be imported (one line, with the import's own message when it failed inside), led by
    ``flag`` and ``ref`` (by ``ref`` alone when ``flag`` is empty: a command's own argument)."""
    where = f"{flag} {ref}" if flag else ref
    module_name, _, attr = ref.partition(":")
    module_name, attr = module_name.strip(), attr.strip()
    if not module_name or not attr:
        raise ConfigError(f"{where}: expected module:attr")
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as e:
        if e.name and (module_name == e.name or module_name.startswith(e.name + ".")):
            raise ConfigError(f"{where}: no module named {module_name!r} on the Python path") from None
        raise ConfigError(f"{where}: importing {module_name} failed: {e}") from None
    except Exception as e:  # a plug-in that fails to import is bad input, named as such
        raise ConfigError(f"{where}: importing {module_name} failed: {type(e).__name__}: {e}") from None
    obj: Any = module
    for part in attr.split("."):
        if not hasattr(obj, part):
            raise ConfigError(f"{where}: module {module_name} has no attribute {attr!r}")
        obj = getattr(obj, part)
    return obj


def deprecated(message: str, stacklevel: int = 3) -> None:
    """Warn (``DeprecationWarning``) that a name moved, once per message and process, and keep the
    message in :data:`DEPRECATIONS` for the run summary. ``message`` names the old and the new
    import and the API version that removes the old one."""
    if message not in DEPRECATIONS:
        DEPRECATIONS.append(message)
    warnings.warn(message, DeprecationWarning, stacklevel=stacklevel)


def declared_api(obj: Any) -> tuple[str, str] | None:
    """The API range a plug-in declares, with where: ``obj.API``, else its module's ``API`` (a
    string starting with a version operator, ``<>=~!``); None when neither declares one."""
    for holder in (obj, sys.modules.get(str(getattr(obj, "__module__", "") or ""))):
        spec = getattr(holder, "API", None) if holder is not None else None
        # a range starts with an operator (">=1.0,<2", "~=1.0", "==1.*"); another text named API
        # (a module's own HTTP path, say) is no declaration
        if isinstance(spec, str) and spec.strip()[:1] in ("<", ">", "=", "~", "!"):
            name = getattr(holder, "__name__", type(holder).__name__)
            return spec, name
    return None


def check_api(obj: Any, label: str) -> None:
    """Refuse a plug-in whose declared API range (:func:`declared_api`) excludes
    :data:`API_VERSION`: ConfigError, one line naming ``label`` (e.g. ``--db mod:X``), the range and
    this version. A range that is not a PEP 440 specifier is refused the same way."""
    declared = declared_api(obj)
    if declared is None:
        return
    spec, where = declared
    from packaging.specifiers import InvalidSpecifier, SpecifierSet

    try:
        wanted = SpecifierSet(spec)
    except InvalidSpecifier:
        raise ConfigError(
            f"{label}: API {spec!r} (in {where}) is not a version range; expected e.g. '>=1.0,<2'"
        ) from None
    if API_VERSION not in wanted:
        raise ConfigError(
            f"{label}: needs the chaos plug-in API {spec} (API in {where}); this chaos provides "
            f"API {API_VERSION} (see CHANGELOG.md)"
        )


def resolve(kind: str, spec: str, *, check: bool = True, flag: str | None = None) -> Any:
    """The object a ``--<kind>`` value names: ``module:attr``, a built-in name or an entry point's
    name. ConfigError naming the flag and the known names for an unknown name, and (``check``) for
    a plug-in whose declared API range excludes this tool's (:func:`check_api`). ``flag``: what
    the errors name the value by (default the kind's flag, e.g. ``--db``; ``""``: the value alone,
    when it is a command's own argument, as for ``chaos plugin check MODULE:ATTR``)."""
    flag = _FLAGS[kind] if flag is None else flag
    spec = str(spec).strip()
    where = f"{flag} {spec}" if flag else spec
    if is_reference(spec):
        obj = import_object(spec, flag)
    elif spec in BUILTINS[kind]:
        obj = import_object(BUILTINS[kind][spec], flag)
    else:
        ep = entry_points(kind).get(spec)
        if ep is None:
            known = ", ".join(names(kind)) or "none"
            hint = did_you_mean([spec], names(kind))
            raise ConfigError(f"{where}: unknown {kind}{hint}; expected one of {known} or module:attr")
        try:
            obj = ep.load()
        except Exception as e:
            raise ConfigError(
                f"{where}: loading entry point {ep.value} failed: {type(e).__name__}: {e}"
            ) from None
    if check:
        check_api(obj, where)
    return obj


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


def call(flag: str, spec: str, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """``fn(*args, **kwargs)`` for plug-in code (a factory, a workload function): an Exception it
    raises becomes one ConfigError line naming the option and the plug-in (``--db plug:make:
    RuntimeError: ...``). A BaseException that is not an Exception (``sys.exit`` in plug-in code)
    goes up untouched: ``chaos.cli.main`` reports it as a crash naming the code, never a pass."""
    try:
        return fn(*args, **kwargs)
    except ConfigError:
        raise
    except Exception as e:
        raise ConfigError(f"{flag} {spec}: {type(e).__name__}: {' '.join(str(e).split())}") from None


def checker(spec: str) -> Any:
    """The checker ``--checker spec`` names, built by its factory: ConfigError (exit 254, before any
    node is touched) when the factory raises or returns something without a ``check`` method."""
    made = call("--checker", spec, checker_factory(spec))
    if not callable(getattr(made, "check", None)):
        raise ConfigError(
            f"--checker {spec}: the factory returned {type(made).__name__}, not a checker "
            "(an object with check(test, history_path, opts); see chaos.history.verdict.Checker)"
        )
    return made


def checker_factory(spec: str) -> Callable[[], Any]:
    """The checker factory ``spec`` names (``module:attr`` or an entry point's name)."""
    obj = resolve("checker", spec)
    if not callable(obj):
        raise ConfigError(f"--checker {spec}: {type(obj).__name__} is not a checker factory")
    return obj  # type: ignore[no-any-return]
