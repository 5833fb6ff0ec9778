"""``chaos plugin check MODULE:ATTR``: a DB plug-in's conformance kit.

Two parts, each printing one line per finding:

1. **The contract** (no node touched): the plug-in loads (``module:attr`` or a registered name);
   its declared API range (``API``) includes this tool's (:data:`chaos.plugins.API_VERSION`); it
   builds with its ``--db-opt`` items; it has the required members of ``chaos.api.DB`` with
   signatures the tool can call (``setup(control)``, ``teardown(control)``, ``describe()`` returning
   text); each capability it half-offers (some members, not all: the capability is then off) is
   named with the members missing; every method of the capabilities it offers accepts the call the
   tool makes (``kill(remote)``, with ``daemon=`` when it declares ``daemons``;
   ``open_client(protocol, test, node, process)``; ...); the declarations have their types
   (``os_packages``, ``daemons``, ``data_files`` and ``pattern_files`` sequences of names, not one
   string; ``log_patterns`` of ``LogPattern``; ``db_options`` of ``DBOption``; ``client_errors``
   exception classes; ``client_protocols`` non-empty; timeouts positive numbers).
2. **A fault-free smoke** on the cluster (unless ``--no-smoke``): the cluster lock, OS setup (the
   DB's ``os_packages``), ``setup``, the first leader (``primary``), for each client protocol one
   op of each ``f`` through the workloads' own client templates on the first node (register:
   read, write, cas; log: append, read-range, read; txn: one list-append and one rw-register
   transaction, each writing then reading), the recovery wait (``recovery``), ``chaos heal``'s heal
   of every node, the log download (``log-files``: every declared file must exist), and
   ``teardown`` twice (it must be idempotent).

A violation is ``violation: <what>: <problem>; fix: <what to do>``; a note (``note: ...``) is
advice that does not fail the check. Exit status: 0 no violation, 1 violations, 254 bad arguments
(no such module, a bad option), 255 crash. Source: the DB contract (``docs/design.md``,
``chaos/control/db.py``), Jepsen's ``jepsen.db`` and ``jepsen.client``.
"""

from __future__ import annotations

import inspect
import os
import random
import re
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from chaos import plugins
from chaos.cluster.lock import ClusterLock
from chaos.cluster.osetup import DebianOS
from chaos.cluster.providers import provision
from chaos.control import db as dbmod
from chaos.control.client import _TOOL_DIR, client_error, client_error_text, plugin_roots
from chaos.control.db import CAPABILITIES, DB, LogFiles, Primary, Recovery, capabilities, daemons, has
from chaos.control.ssh import Control, RemoteError
from chaos.control.test import Test
from chaos.errors import EXIT_CRASH, EXIT_INVALID, EXIT_VALID, BadArguments, ConfigError, error_line
from chaos.history.checkers.nodelogs import LogPattern
from chaos.history.op import INVOKE, Op
from chaos.nemesis.cli import heal_control
from chaos.runner.output import progress
from chaos.workloads import get

if TYPE_CHECKING:
    from chaos.control.ssh import Remote

KNOWN_PROTOCOLS = ("register", "log", "txn", "bank", "counter", "set")

# method -> (the arguments the tool passes, what the call looks like in a message)
CALLS: dict[str, tuple[tuple[str, ...], str]] = {
    "setup": (("control",), "setup(control)"),
    "teardown": (("control",), "teardown(control)"),
    "describe": ((), "describe()"),
    "start": (("remote",), "start(remote)"),
    "kill": (("remote",), "kill(remote)"),
    "running": (("remote",), "running(remote)"),
    "pause": (("remote",), "pause(remote)"),
    "resume": (("remote",), "resume(remote)"),
    "primaries": (("control",), "primaries(control)"),
    "await_leader": (("control", "timeout"), "await_leader(control, timeout)"),
    "log_files": (("remote",), "log_files(remote)"),
    "await_recovery": (("control", "timeout"), "await_recovery(control, timeout)"),
    "leadership": (("node", "timeout_s"), "leadership(node, timeout_s)"),
    "close_leadership": ((), "close_leadership()"),
    "open_client": (("protocol", "test", "node", "process"), "open_client(protocol, test, node, process)"),
    "transfer_leadership": (("control", "leader", "to"), "transfer_leadership(control, leader, to)"),
}
DAEMON_METHODS = ("start", "kill", "running", "pause", "resume")
SHARED_MEMBERS = frozenset({"pidfile"})  # declared for process control too: alone, no half capability


@dataclass
class Findings:
    """What the check found: violations (each one line with its fix) and notes; ``say`` prints
    each as it is found."""

    say: Callable[[str], None]
    violations: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    unusable: set[str] = field(default_factory=set)
    """Members the contract found missing or not callable as the tool calls them: the smoke skips
    the steps that would call them (the violation is said once, not again as a TypeError)."""

    def violation(self, what: str, problem: str, fix: str) -> None:
        line = f"violation: {what}: {problem}; fix: {fix}"
        self.violations.append(line)
        self.say(line)

    def note(self, text: str) -> None:
        self.notes.append(f"note: {text}")
        self.say(f"note: {text}")

    def ok(self, text: str) -> None:
        self.say(f"ok: {text}")


def _one_line(e: BaseException) -> str:
    return " ".join(f"{type(e).__name__}: {e}".split())[:300]


def _where(e: BaseException, db: object) -> str:
    """`` at file.py:42`` for an exception raised in the plug-in's code (not the tool's), else
    empty."""

    ce = client_error(e, plugin_roots(db))
    path = str(ce.get("path") or "")
    if not ce.get("where") or path.startswith(_TOOL_DIR + os.sep):
        return ""
    return f" at {ce['where']}"


# -- the contract -------------------------------------------------------------------------------------


def load(spec: str, db_opts: Sequence[str], found: Findings) -> object:
    """The DB ``spec`` names, built with ``db_opts``; an API range that excludes this tool is a
    violation (the DB is still built, to check the rest). Raises BadArguments when it does not
    load or build."""

    try:
        factory = dbmod.db_factory(spec, check_api=False, flag="")  # the plug-in is the argument
    except ConfigError as e:
        raise BadArguments(str(e)) from None
    declared = plugins.declared_api(factory)
    try:
        plugins.check_api(factory, f"--db {spec}")
    except ConfigError as e:
        found.violation("API", str(e).split(": ", 1)[-1], f"run it with a chaos whose API it declares, "
                        f"or port it to API {plugins.API_VERSION} and declare API = '>={plugins.API_VERSION[:3]},<"
                        f"{int(plugins.API_VERSION.split('.')[0]) + 1}'")  # fmt: skip
    else:
        if declared is None:
            found.note(
                f"it declares no API range; add API = '>=1.0,<2' to {getattr(factory, '__name__', spec)} "
                "or its module (chaos.api.VERSION is " + plugins.API_VERSION + ")"
            )
        else:
            found.ok(f"API {declared[0]} includes this chaos's {plugins.API_VERSION}")
    for opt in getattr(factory, "db_options", None) or ():
        if not isinstance(opt, dbmod.DBOption):
            found.violation(
                "db_options", f"{opt!r} is not a DBOption", "declare chaos.api.DBOption(name, ...)"
            )
    try:
        return dbmod.build_db(spec, list(db_opts), check_api=False)
    except ConfigError as e:
        raise BadArguments(str(e)) from None


def _accepts(fn: Any, args: tuple[str, ...], kwargs: dict[str, object] | None = None) -> str | None:
    """None when ``fn`` can be called with ``len(args)`` positional arguments (and ``kwargs``),
    else its signature as text."""
    try:
        sig = inspect.signature(fn)
    except (TypeError, ValueError):
        return None  # a builtin or C function: not inspectable, assume it fits
    try:
        sig.bind(*args, **(kwargs or {}))
    except TypeError:
        return f"{getattr(fn, '__name__', 'it')}{sig}"
    return None


def check_members(db: object, found: Findings) -> None:
    """The required members, the capabilities offered in part, the signatures of what is offered."""

    name = getattr(db, "name", None)
    if not isinstance(name, str) or not name.strip():
        found.violation(
            "name", f"is {name!r}", 'set name = "<your system>" (a non-empty str) on the DB class'
        )
    for m in ("setup", "teardown", "describe"):
        if not callable(getattr(db, m, None)):
            found.violation(m, "missing", f"define {CALLS[m][1]} (chaos.api.DB)")
            found.unusable.add(m)
    offered = capabilities(db)
    for cap, (proto, members) in CAPABILITIES.items():
        have = [m for m in members if getattr(db, m, None) is not None]
        if have and cap not in offered and set(have) - SHARED_MEMBERS:
            lacking = [m for m in members if m not in have]
            found.violation(
                f"the {cap} capability",
                f"has {', '.join(have)} but not {', '.join(lacking)}, so it is off",
                f"define {', '.join(lacking)} (chaos.api.{proto.__name__}), or remove the others",
            )
    named = daemons(db) != (None,)
    for m, (args, call) in CALLS.items():
        fn = getattr(db, m, None)
        if fn is None or not callable(fn):
            continue
        sig = _accepts(fn, args)
        if sig is not None:
            found.violation(m, f"is {sig}, but the tool calls {call}", f"define it as {call}")
            found.unusable.add(m)
        elif named and m in DAEMON_METHODS and _accepts(fn, args, {"daemon": "x"}) is not None:
            found.unusable.add(m)
            found.violation(
                m,
                f"takes no daemon= keyword, but the DB declares daemons {list(daemons(db))}",
                f"define {m}(self, remote, daemon=...) (called once per daemon)",
            )
    found.ok(f"capabilities: {', '.join(sorted(offered)) or 'none'}")


def _names(value: Any) -> bool:
    return not isinstance(value, str | bytes) and all(isinstance(x, str) for x in value)


def check_declarations(db: object, found: Findings) -> None:
    """The types of what the DB declares (see the module docstring)."""

    for attr in ("os_packages", "daemons", "data_files", "pattern_files"):
        value = getattr(db, attr, None)
        if value is None:
            continue
        try:
            ok = _names(value)
        except TypeError:
            ok = False
        if not ok:
            found.violation(attr, f"is {value!r}", f"declare a tuple of names, e.g. {attr} = ({value!r},)"
                            if isinstance(value, str) else "declare a tuple of str")  # fmt: skip
    for p in getattr(db, "log_patterns", None) or ():
        if not isinstance(p, LogPattern):
            found.violation(
                "log_patterns",
                f"{p!r} is not a LogPattern",
                "use chaos.api.LogPattern(kind, regex, severity)",
            )
    for attr in ("recovery_timeout", "client_timeout"):
        v = getattr(db, attr, None)
        if v is not None and (isinstance(v, bool) or not isinstance(v, int | float) or v < 0):
            found.violation(attr, f"is {v!r}", "declare a number of seconds >= 0")
    errs = getattr(db, "client_errors", None)
    if errs is not None:
        items = (errs,) if isinstance(errs, type) else errs
        try:
            bad = [e for e in items if not (isinstance(e, type) and issubclass(e, BaseException))]
        except TypeError:
            bad = [errs]
        if bad:
            found.violation(
                "client_errors", f"{bad[0]!r} is not an exception class", "list exception classes"
            )
    protocols = getattr(db, "client_protocols", None)
    if protocols is not None:
        listed = [protocols] if isinstance(protocols, str) else list(protocols)
        if isinstance(protocols, str) or not listed:
            found.violation("client_protocols", f"is {protocols!r}", 'declare a tuple such as ("register",)')
        for p in listed:
            if p not in KNOWN_PROTOCOLS:
                found.note(f"client protocol {p!r} is none of the tool's ({', '.join(KNOWN_PROTOCOLS)}); "
                           "only a plug-in workload can drive it")  # fmt: skip
    try:
        describe = getattr(db, "describe", None)  # not yet known to be a DB: checked here
        if not callable(describe):
            raise TypeError("no describe()")
        text = str(describe())
        found.ok(f"describe(): {text}")
    except Exception as e:
        found.violation(
            "describe()", f"raised {_one_line(e)}{_where(e, db)}", "return one phrase; never raise"
        )


_INTERNAL = re.compile(r"^\s*(?:from\s+(chaos(?:\.\w+)+)\s+import|import\s+(chaos(?:\.\w+)+))", re.M)


def check_imports(db: object, found: Findings) -> None:
    """A note per internal module of the tool the plug-in's source imports (only chaos.api is the
    contract)."""
    module = sys.modules.get(type(db).__module__)
    try:
        source = Path(str(getattr(module, "__file__", ""))).read_text()
    except OSError:
        return
    internal = sorted({m.group(1) or m.group(2) for m in _INTERNAL.finditer(source)} - {"chaos.api"})
    for name in internal:
        found.note(
            f"imports {name}: only chaos.api is the contract (internals may move); import from chaos.api"
        )


def check_contract(spec: str, db_opts: Sequence[str], found: Findings) -> Any:
    """Part 1 (module docstring); returns the built DB."""
    db = load(spec, db_opts, found)
    check_members(db, found)
    check_declarations(db, found)
    check_imports(db, found)
    return db


# -- the smoke ----------------------------------------------------------------------------------------


def _op(f: str, value: object, key: object = None, node: str | None = None) -> object:

    return Op(INVOKE, 0, f, value, 0, 0, node, None, key, {})


def _protocol_ops(protocol: str, first: str) -> Iterator[tuple[str, Any, object]]:
    """(label, workload, op) of one op of each f of ``protocol``'s built-in workloads; ``check``
    of the result is by label (see :func:`_check_ok`)."""

    if protocol == "register":
        wl = get("register", {"node_count": 1})
        key = random.randrange(10**6, 10**7)  # a fresh key: the register starts at None
        yield "register read", wl, _op("read", None, key)
        yield "register write", wl, _op("write", 1, key)
        yield "register cas", wl, _op("cas", [1, 2], key)
        yield "register read after cas", wl, _op("read", None, key)
    elif protocol == "log":
        wl = get("log", {"node_names": [first]})
        yield "log append", wl, _op("append", random.randrange(10**6, 10**7))
        yield "log read-range", wl, _op("read-range", None)
        yield "log read", wl, _op("read", None, node=first)
    elif protocol == "txn":
        k = random.randrange(10**6, 10**7)
        yield "txn (list-append)", get("list-append", {}), _op("txn", [["append", k, 1], ["r", k, None]])
        yield "txn (rw-register)", get("rw-register", {}), _op("txn", [["w", k + 1, 1], ["r", k + 1, None]])
    elif protocol == "bank":
        wl = get("bank", {})
        yield "bank transfer", wl, _op("transfer", {"from": 0, "to": 1, "amount": 1})
        yield "bank read", wl, _op("read", None)
    elif protocol == "counter":
        wl = get("counter", {})
        yield "counter add", wl, _op("add", 1)
        yield "counter read", wl, _op("read", None)
    elif protocol == "set":
        wl = get("set", {})
        element = random.randrange(10**6, 10**7)
        yield "set add", wl, _op("add", element)
        yield "set read", wl, _op("read", None)


def _expected(label: str, comp: Any) -> str | None:
    """What is wrong with an ok answer of a healthy single client, or None."""
    v = comp.value
    if label == "register read after cas" and v != 2:
        return f"read {v!r} after write(1) and cas(1, 2); expected 2"
    if label == "txn (list-append)" and (not isinstance(v, list) or v[-1][2] != [1]):
        return f"answered {v!r}; the read after appending 1 must be [1]"
    if label == "txn (rw-register)" and (not isinstance(v, list) or v[-1][2] != 1):
        return f"answered {v!r}; the read after writing 1 must be 1"
    return None


def run_ops(test: Test, db: object, found: Findings) -> None:
    """One op of each f of every protocol the DB offers, through the workloads' client templates
    on the first node; a client error, an indeterminate answer or a refusal on a healthy cluster
    is a violation."""
    first = test.nodes[0].name
    for protocol in [p for p in (getattr(db, "client_protocols", None) or ()) if p in KNOWN_PROTOCOLS]:
        for label, wl, op in _protocol_ops(protocol, first):
            test.workload = wl
            client = wl.client.open(test, first)
            try:
                comp = client.invoke(test, op)
            except Exception as e:  # the workload template itself
                found.violation(
                    label, f"raised {_one_line(e)}{_where(e, db)}", "see the traceback in chaos.log"
                )
                continue
            finally:
                try:
                    client.close(test)
                except Exception as e:
                    found.violation(
                        f"{protocol} client close()", f"raised {_one_line(e)}", "close() never raises"
                    )
            ce = (comp.extra or {}).get("client_error")
            if ce:
                found.violation(label, f"the client crashed: {client_error_text(ce)}",
                                "fix the client, or list the exception in the DB's client_errors")  # fmt: skip
            elif comp.type == "ok":
                wrong = _expected(label, comp)
                if wrong:
                    found.violation(
                        label, wrong, "a client must return what the system answered (chaos.api docs)"
                    )
                else:
                    found.ok(f"{label}: ok {comp.value!r}"[:200])
            elif comp.type == "fail" and (comp.extra or {}).get("compare_failed"):
                found.violation(
                    label, "cas(1, 2) after write(1) did not apply", "cas must apply when the value matches"
                )
            else:
                found.violation(label, f"{comp.type} on a healthy cluster: {comp.error}",
                                "the client must answer ok when nothing is broken")  # fmt: skip


def _step(found: Findings, what: str, fix: str, db: object, fn: Callable[[], object]) -> object:
    t0 = time.monotonic()
    try:
        out = fn()
    except Exception as e:
        found.violation(what, f"raised {_one_line(e)}{_where(e, db)}", fix)
        return None
    found.ok(f"{what} ({time.monotonic() - t0:.1f} s)")
    return out if out is not None else True


def download_logs(test: Test, db: DB, found: Findings) -> None:
    """Every node's declared log files, which must exist (a missing one is a violation)."""

    if not has(db, LogFiles):
        found.note(
            "no log-files capability: node logs are not downloaded into runs (define log_files(remote))"
        )
        return
    with tempfile.TemporaryDirectory(prefix="chaos-plugin-check-") as tmp:

        def fetch(remote: Remote) -> list[str]:
            missing = []
            for path in db.log_files(remote):
                try:
                    remote.download(path, os.path.join(tmp, remote.node.name, os.path.basename(path)))
                except Exception as e:
                    missing.append(f"{remote.node.name}:{path} ({getattr(e, 'cause', None) or e})")
            return missing

        got = _step(found, "log_files on every node", "log_files(remote) returns paths", db,
                    lambda: test.control.on_nodes(fetch))  # fmt: skip
        for line in (
            sorted(x for lines in (got or {}).values() for x in lines) if isinstance(got, dict) else ()
        ):
            found.violation("log download", f"{line} is missing after setup", "start the daemon with that log "
                            "file, or return only files it writes from log_files")  # fmt: skip


def smoke(db: DB, opts: dict[str, object], found: Findings) -> None:
    """Part 2 (module docstring), on the nodes ``opts`` select. A step that would call a member the
    contract found unusable (``found.unusable``) is skipped with a note, so one violation is one
    line; without a callable ``setup`` and ``teardown`` no node is touched."""
    import logging

    def usable(*members: str, step: str) -> bool:
        bad = sorted(found.unusable.intersection(members))
        if bad:
            found.note(f"{step} skipped: {', '.join(bad)} cannot be called as the tool calls it (above)")
        return not bad

    if not usable("setup", "teardown", step="the smoke"):
        return
    nodes = provision(opts, found.say)
    lock = ClusterLock(Control(nodes), "plugin-check", "", log=found.say)
    lock.acquire(break_lock=bool(opts.get("break_lock")))
    control = Control(nodes)
    try:
        test = Test(name="plugin-check", nodes=nodes, control=control, db=db, rng=random.Random(0),
                    opts=dict(opts), log=logging.getLogger("chaos.plugin-check"), concurrency=1)  # fmt: skip
        with progress(found.say, "installing the OS packages"):
            os_ok = _step(found, "OS setup (os_packages)", "declare os_packages Debian can install (a "
                          "timeout: a slow mirror or machine; run the check again)", db,
                          lambda: DebianOS(db=db, log=found.say).setup(control))  # fmt: skip
        ready = None
        if os_ok:
            with progress(found.say, "in setup"):
                ready = _step(found, "setup(control)", "setup must install, start and return when clients "
                              "can be served", db, lambda: db.setup(control))  # fmt: skip
        if ready and has(db, Primary) and usable("await_leader", step="the leader wait"):
            _step(found, "await_leader(control, 60)", "a leader must be elected on a healthy cluster", db,
                  lambda: db.await_leader(control, 60.0))  # fmt: skip
        if ready and usable("open_client", step="the client ops"):
            run_ops(test, db, found)
        if ready and has(db, Recovery) and usable("await_recovery", step="the recovery wait"):
            rec = _step(found, "await_recovery(control, 60)", "return the liveness record, do not raise", db,
                        lambda: db.await_recovery(control, 60.0))  # fmt: skip
            if isinstance(rec, dict) and rec.get("recovered") is not True:
                found.violation("await_recovery", f"a healthy cluster did not recover: {rec.get('problems')}",
                                "return recovered: True when every node serves")  # fmt: skip
        if usable(*DAEMON_METHODS, step="the heal"):
            _step(found, "heal (chaos heal's heal of every node)", "resume() and the process methods must not "
                  "raise on a healthy node", db, lambda: heal_control(control, db))  # fmt: skip
        if ready:
            if usable("log_files", step="the log download"):
                download_logs(test, db, found)
        else:
            found.note("setup did not finish: the ops, the recovery wait and the log download were skipped")
        _step(
            found,
            "teardown(control)",
            "teardown stops and wipes; never raises",
            db,
            lambda: db.teardown(control),
        )
        _step(found, "teardown(control) again", "teardown must be idempotent (the tool calls it after crashes too)",
              db, lambda: db.teardown(control))  # fmt: skip
    finally:
        control.close()
        lock.release()
        lock.control.close()


@click.group()
def plugin() -> None:
    """Plug-ins: check one against the API contract."""


@plugin.command()
@click.argument("spec", metavar="MODULE:ATTR")
@click.option("--db-opt", multiple=True, metavar="KEY=VALUE", help="An option of the DB (repeatable).")
@click.option("--no-smoke", is_flag=True, help="Check the contract only; touch no node.")
@click.option(
    "--provider", default="docker", show_default=True, help="Where the nodes come from (as chaos run)."
)
@click.option(
    "--cluster-name", default="default", show_default=True, help="docker provider: the named cluster."
)
@click.option("--node-count", type=int, default=None, help="Nodes of the docker cluster.")
@click.option("--nodes", default=None, help="ssh provider: comma-separated nodes.")
@click.option("--nodes-file", default=None, help="ssh provider: a file with one node per line.")
@click.option("--username", default="root", show_default=True, help="ssh provider: SSH user.")
@click.option("--ssh-private-key", default=None, help="ssh provider: private key file.")
@click.option("--ssh-port", type=int, default=22, show_default=True, help="ssh provider: default SSH port.")
@click.option("--strict-host-key-checking/--no-strict-host-key-checking", default=None)
@click.option("--break-lock", is_flag=True, help="Clear a cluster lock a crashed run left.")
def check(spec: str, db_opt: tuple[str, ...], no_smoke: bool, **opts: object) -> int:
    """Check the DB plug-in MODULE:ATTR: its contract (members, signatures, capabilities,
    declarations, API range), then a short fault-free smoke on the cluster (setup, one op of each
    f, heal, log download, teardown). One line per violation with its fix; exit 0 when there is
    none, 1 otherwise, 254 when it does not load."""

    def say(line: str) -> None:
        click.echo(line)

    found = Findings(say)
    db = check_contract(spec, db_opt, found)
    if not no_smoke:
        try:
            smoke(db, {**opts, "db": spec}, found)
        except ValueError as e:  # a bad option of the provider, the lock held by another run
            raise BadArguments(str(e)) from None
        except RemoteError as e:  # the nodes cannot be reached (a step's own errors are violations)
            error_line(f"cannot reach the nodes: {e}")
            return EXIT_CRASH
    n = len(found.violations)
    click.echo(
        f"{spec}: {n} violation{'s' if n != 1 else ''}" + ("" if n else ", conforms to the plug-in API")
    )
    return EXIT_INVALID if n else EXIT_VALID


__all__ = ["check", "check_contract", "plugin", "smoke"]
