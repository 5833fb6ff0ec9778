"""The test runner: Jepsen's lifecycle (jepsen.core/run!) for one test, for any DB.

The DB, workload and nemeses come from :mod:`chaos.plugins` (``--db``, ``--db-opt``, ``--workload``,
``--nemesis``); the runner knows only the DB contract (:mod:`chaos.control.db`) and asks for a
capability before using it: it waits for a leader only when the DB has ``primary``, observes
leadership through ``leadership`` (else ``primaries``), waits for recovery through ``recovery``.
Before any node is touched it refuses (ConfigError, exit 254) a nemesis needing a capability the DB
lacks and a workload whose client protocol the DB does not offer.

connect -> cluster lock (``chaos.cluster.lock``: one run per cluster; a second run exits 254 naming
the holder) -> OS setup (and healing of faults a previous run left behind) -> DB setup -> client and
nemesis setup -> generator phase (workload + nemesis, ``time_limit`` s) -> heal (every fault kind's
stop op, then the nemesis's ``heal``) and recovery wait (the DB's ``await_recovery``: a leader, every
node answering, followers caught up, within the DB's ``recovery_timeout`` or ``recovery_time`` s,
whichever is longer; recorded in test.json for the ``liveness`` checker) -> final phase (the
workload's final generator, e.g. reads) -> history closed -> node logs downloaded -> DB teardown
(unless ``leave_db_running``) -> lock released -> check (``chaos.history.checkers.registry.check_run``, with
the ``server-logs`` checker scanning the downloaded logs for the DB's ``log_patterns`` and the
``liveness`` checker) -> report (``chaos.history.report.html.write_report``) -> exit status.

On every exit path (normal, an exception, Ctrl-C / SIGTERM) every fault is healed and node logs are
downloaded before returning. The history is written as ops happen, so even a SIGKILLed run leaves a
readable, checkable ``history.jsonl``.

Exit status (jepsen.cli): 0 valid, 1 invalid, 2 unknown, 254 bad arguments, 255 crash.
"""

from __future__ import annotations

import contextlib
import logging
import os
import platform
import random
import signal
import sys
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from rich.markup import escape

import chaos
from chaos import plugins, workloads
from chaos.cluster.docker import docker_node_count
from chaos.cluster.environment import probe
from chaos.cluster.lock import ClusterLock
from chaos.cluster.osetup import DebianOS
from chaos.cluster.providers import provision
from chaos.control import db as dbmod
from chaos.control import generator as gen
from chaos.control.db import (
    DB,
    Leadership,
    LogFiles,
    Primary,
    Recovery,
    capabilities,
    db_name,
    declared_names,
    has,
)
from chaos.control.interpreter import Clock, Interpreter
from chaos.control.node import Node
from chaos.control.ssh import Control, Remote
from chaos.control.test import (
    RunOptions,
    Test,
    Workload,
    parse_concurrency,
    run_name,
)
from chaos.errors import (
    EXIT_BAD_ARGS,
    EXIT_CRASH,
    EXIT_INVALID,
    EXIT_UNKNOWN,
    EXIT_VALID,
    ConfigError,
    Refused,
    exit_code,
    from_signal,
    raised_in,
)
from chaos.history.checkers.liveness import recovered_line
from chaos.history.checkers.nodelogs import patterns_doc
from chaos.history.leadership import LEADERSHIP_FILE
from chaos.history.store import RunDir
from chaos.nemesis import NemesisSpec, build, check_capabilities
from chaos.nemesis import styles as nemesis_styles
from chaos.nemesis.base import Compose
from chaos.nemesis.cli import heal_control, residue
from chaos.plugins import DEPRECATIONS, default_db
from chaos.runner.check import check_and_report
from chaos.runner.live import LiveView
from chaos.runner.observer import LeadershipObserver
from chaos.runner.output import _LoggedHistory, _Logs, progress


class RunAborted(BaseException):
    """The run was interrupted (Ctrl-C or SIGTERM). A BaseException, as KeyboardInterrupt: an
    ``except Exception`` on the way (a client call, logging's ``emit``) must not swallow it."""


class AbortedBeforeStart(RunAborted):
    """Ctrl-C or SIGTERM came before any node was touched: nothing ran, nothing to heal."""


def worst(codes: list[int]) -> int:
    """The worst of several exit statuses: crash, bad args, invalid, unknown, valid."""
    order = [EXIT_CRASH, EXIT_BAD_ARGS, EXIT_INVALID, EXIT_UNKNOWN, EXIT_VALID]
    for c in order:
        if c in codes:
            return c
    return max(codes) if codes else EXIT_VALID


def _versions() -> dict[str, str]:
    """The tool's distribution and version (as installed; ``chaos.__version__`` in a bare checkout),
    Python's and the platform's."""
    from importlib.metadata import PackageNotFoundError, packages_distributions, version

    dist = (packages_distributions().get("chaos") or ["chaos"])[0]
    try:
        v = version(dist)
    except PackageNotFoundError:
        v = chaos.__version__
    return {dist: v, "python": platform.python_version(), "platform": platform.platform()}


def _server_logs_doc(db: object) -> dict[str, object]:
    """test.json's ``server_logs``: the files the DB's log patterns apply to (``pattern_files``, as
    downloaded under nodes/<node>/) and its declared anomaly patterns, so ``chaos check`` scans the
    same files the same way (none without the ``log-files`` capability)."""

    names = [os.path.basename(p) for p in declared_names(db, "pattern_files")]
    return patterns_doc(names, list(getattr(db, "log_patterns", ()) or ()))


def _db_checkers(db: object) -> list[str]:
    """The checkers the DB's capabilities make possible: ``server-logs`` for a DB with log files,
    ``liveness`` for one that can say when it recovered. A DB offering neither is not judged on
    them (nothing was asked of it), rather than left unknown forever."""

    return [name for name, cap in (("server-logs", LogFiles), ("liveness", Recovery)) if has(db, cap)]


def _jsonable(value: object) -> object:
    """``value`` as JSON can hold it (other objects as their text)."""
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple | set | frozenset):
        return [_jsonable(v) for v in value]
    if value is None or isinstance(value, bool | int | float | str):
        return value
    return str(value)


def _describe(db: DB) -> str:
    """The DB's own description of its options (its ``describe()``; never raises)."""
    try:
        return str(db.describe())
    except Exception as e:
        return f"describe() failed: {type(e).__name__}: {e}"


_TERMINATED: list[int] = []  # SIGTERMs received while a run's signal phase was on


def _sigterm(signum: int, frame: object) -> None:
    _TERMINATED.append(signum)
    raise RunAborted(f"signal {signum}")


def _raise_if_terminated() -> None:
    """Raise RunAborted when a SIGTERM came but its raise was swallowed on the way (a C extension
    or third-party code catching BaseException): the run must not go on to a verdict."""
    if _TERMINATED:
        raise RunAborted(f"signal {_TERMINATED[0]}")


@dataclass
class _RunState:
    """What the phases of one run share: set as the phases are entered, read by their teardowns
    (each phase after the one that sets a field reads it through the properties, which say so if
    it is missing). ``doc``: test.json, empty until it is first written."""

    name: str
    nodes: list[Node]
    concurrency: int
    workload: Workload
    nemesis: Compose
    nem_gen: Any = None  # the nemesis thread's generator (chaos.control.generator), None for none
    run_dir: RunDir | None = None
    test_: Test | None = None
    doc: dict[str, object] = field(default_factory=dict)
    clock: Clock | None = None
    interp_: Interpreter | None = None
    live_view: LiveView | None = None
    crashed: BaseException | None = None

    @property
    def run(self) -> RunDir:
        assert self.run_dir is not None, "the run directory phase sets it"
        return self.run_dir

    @property
    def test(self) -> Test:
        assert self.test_ is not None, "the control phase sets it"
        return self.test_

    @property
    def interp(self) -> Interpreter:
        assert self.interp_ is not None, "the interpreter phase sets it"
        return self.interp_


class Runner:
    """Runs one test with ``options`` (a :class:`RunOptions`, the one source of a run's options;
    a dict with ``chaos.control.test.DEFAULTS``' keys is parsed into one here).

    ``console``: a rich Console for the live view and summary (None: quiet). ``live``: show the live
    view. ``spec``: the run's ``--nemesis`` already parsed (else parsed once here). Use :meth:`run`
    -> exit status; the run directory is :attr:`run_dir` afterwards. Raises ConfigError for bad
    options.
    """

    def __init__(
        self,
        options: Mapping[str, object] | RunOptions,
        *,
        console: Any = None,
        live: bool = True,
        spec: NemesisSpec | None = None,
    ) -> None:
        if not isinstance(options, RunOptions):
            options = RunOptions.parse(options)
        if options.seed is None:
            options = options.with_(seed=random.SystemRandom().randrange(2**31))
        self.options = options
        self.console = console
        self.live = live
        self.spec = spec
        self.run_dir: RunDir | None = None
        self.results: dict[str, object] | None = None
        self.recovery: dict[str, object] | None = None  # DB.await_recovery's record, into test.json
        self.node_logs_missing: list[str] = []  # declared logs a node did not have, into test.json
        self._db: DB | None = None  # built by prepare()
        self.db_kwargs: dict[str, object] = {}
        self.nemesis: Compose | None = None  # built by prepare()
        self.nem_gen: object = None
        self.log = logging.getLogger("chaos.run")

    @property
    def db(self) -> DB:
        """The system under test, built by :meth:`prepare` (:func:`chaos.control.db.build_db`)."""
        assert self._db is not None, "prepare() builds the DB"
        return self._db

    @property
    def opts(self) -> dict[str, object]:
        """The options as the flat dict plug-ins read (``test.opts``; :meth:`RunOptions.as_dict`)."""
        return self.options.as_dict()

    def say(self, text: str, *, lead: str = "") -> None:
        """A status line: ``text`` as written (node names, paths, plug-in text: never read as rich
        markup), after ``lead``, a styled label in rich markup such as ``[red]crashed:[/red]``."""
        msg = f"{lead} {escape(text)}" if lead else escape(text)
        self.log.info("%s", msg)
        if self.console is not None:
            self.console.print(f"[dim]{time.strftime('%H:%M:%S')}[/dim] {msg}", highlight=False)

    def prepare(self) -> None:
        """Once, before any node is touched: build the DB (:func:`chaos.control.db.build_db`, kept
        in :attr:`db`), parse the nemesis spec (:class:`chaos.nemesis.NemesisSpec`) and build the
        nemesis, load the extra checkers, and check the DB can serve the workload's client
        protocol and every nemesis's capabilities. Raises ConfigError (a ValueError) naming the
        option for bad input."""
        o = self.options
        self._db = dbmod.build_db(o.db, list(o.db_opts))
        self.db_kwargs = dbmod.parse_db_kwargs(o.db, list(o.db_opts))
        workload = self._workload()  # the nodes are not known yet: built again with them
        for name in o.checkers:
            plugins.checker(name)  # loads and builds it, or one ConfigError line naming it
        if o.consistency_model and "elle" not in [*workload.checkers, *o.checkers]:
            raise ConfigError(
                f"--consistency-model {o.consistency_model}: the {o.workload} workload is not "
                "checked by elle, which alone reads it (list-append, rw-register); drop the option"
            )
        self.spec = spec = NemesisSpec.parse(self.spec if self.spec is not None else o.nemesis)
        check_capabilities(spec, self.opts, self.db)
        protocol = workload.protocol
        offered = getattr(self.db, "client_protocols", None) or ()
        if protocol is not None and protocol not in offered:
            raise ConfigError(
                f"--workload {o.workload}: the DB {db_name(self.db)} offers no {protocol!r} client "
                f"(the clients capability: client_protocols, open_client; it offers "
                f"{', '.join(sorted(offered)) or 'none'})"
            )
        self.nemesis, self.nem_gen = build(spec, self.opts)

    def _workload(self) -> Workload:
        """The run's workload, built with the options as they stand (the node names once known)."""
        try:
            return workloads.get(self.options.workload, self.opts)
        except ConfigError:
            raise
        except ValueError as e:
            raise ConfigError(f"--workload {self.options.workload}: {e}") from None

    def run(self) -> int:
        """The whole lifecycle; returns the exit status. Before a run directory exists: raises
        ConfigError for bad options and ``chaos.control.ssh.NodeUnreachable`` when a node cannot be
        reached (nothing is written then); later failures are crashes (255); raises RunAborted.

        Phases nest as Jepsen's ``run!`` (lock > run directory > control > test.json > signals > OS
        > DB > nemesis > history > interpreter > observer); each owns its teardown, which runs on
        every exit path, innermost first, and never stops the others (:meth:`_safe`)."""

        try:
            self.prepare()  # fail fast on bad arguments before touching any node
        except KeyboardInterrupt as e:
            if not from_signal(e):
                raise  # plug-in code raised it while loading: chaos.cli names it and exits 255
            raise AbortedBeforeStart("interrupted before the run started") from None
        if self.options.provider == "docker":
            parse_concurrency(self.options.concurrency, docker_node_count(self.opts))
        nodes = provision(self.opts, self.say)
        self.options = self.options.with_(node_count=len(nodes), node_names=tuple(n.name for n in nodes))
        concurrency = parse_concurrency(self.options.concurrency, len(nodes))
        workload = self._workload()  # now knowing the nodes (final reads per node)
        assert self.nemesis is not None, "prepare() builds it"
        probe = Control(nodes)
        self.say(f"connecting to {len(nodes)} nodes over SSH: {', '.join(n.name for n in nodes)}")
        try:
            probe.connect_all()  # a run that cannot reach its nodes leaves no run directory behind
        finally:
            probe.close()
        state = _RunState(
            run_name(self.opts), nodes, concurrency, workload, self.nemesis, nem_gen=self.nem_gen
        )
        with contextlib.ExitStack() as outer:
            # the lock comes before the run directory: a refused run leaves none
            outer.enter_context(self._lock_phase(state))
            logs = self._run_dir_phase(state)
            try:
                with contextlib.ExitStack() as stack:
                    self._enter_phases(stack, state)
                    self._generator_phase(state)
            except (KeyboardInterrupt, RunAborted) as e:
                if from_signal(e):
                    state.crashed = e if isinstance(e, RunAborted) else RunAborted("interrupted")
                    self.log.warning("run interrupted: %s", e)
                else:  # plug-in code raised KeyboardInterrupt itself: a crash, not an interruption
                    state.crashed = e
                    self.log.error("run crashed: KeyboardInterrupt raised in %s", raised_in(e))
            except BaseException as e:
                state.crashed = e
                self.log.exception("run crashed")
            if state.doc:  # the outcome known, every phase torn down
                self._safe("write test.json", lambda: self._finish_test_doc(state))
            if state.crashed is not None:
                logs.close()
        if state.crashed is not None:
            if isinstance(state.crashed, ConfigError | Refused | RunAborted):
                raise state.crashed
            what = f"{type(state.crashed).__name__}: {state.crashed}"
            if not isinstance(state.crashed, Exception):  # SystemExit & co. come from plug-in code
                what += f" raised in {raised_in(state.crashed)}"
            self.say(what, lead="[red]crashed:[/red]")
            return EXIT_CRASH
        try:
            return self._check_and_report(state.run)
        finally:
            logs.close()

    # -- phases, outermost first; each enters its teardown into the stack -------------------------

    @contextlib.contextmanager
    def _lock_phase(self, state: _RunState) -> Iterator[None]:
        lock = self._lock_cluster(state.nodes, state.name)
        try:
            yield
        finally:
            self._safe("release the cluster lock", lock.release)
            lock.control.close()

    def _run_dir_phase(self, state: _RunState) -> _Logs:

        state.run_dir = RunDir.create(self.options.store, state.name)
        self.run_dir = state.run
        return _Logs(state.run.log_path, getattr(self.db, "loggers", ()))

    def _enter_phases(self, stack: contextlib.ExitStack, state: _RunState) -> None:
        """Control, test.json, signals, OS, DB, nemesis, history and interpreter, in that order."""

        o = self.options
        control = Control(state.nodes)
        stack.callback(control.close)
        state.test_ = Test(
            name=state.name,
            nodes=state.nodes,
            control=control,
            db=self.db,
            rng=random.Random(o.seed),
            opts=self.opts,
            log=logging.getLogger("chaos.test"),
            concurrency=state.concurrency,
            workload=state.workload,
            nemesis=state.nemesis,
            run_dir=state.run,
            options=o,
        )
        state.doc = self._test_doc(state)
        state.run.write_test(state.doc)  # completed by run() once the phases are torn down
        self._signals_phase(stack)
        self.say(f"run directory {state.run.path}")
        self.say(f"nodes {', '.join(f'{n.name}={n.host}' for n in state.nodes)}; seed {o.seed}")
        self._os_phase(state.test)
        self._db_phase(stack, state.test)
        self._nemesis_phase(stack, state.test)
        self._interpreter_phase(stack, state)

    def _signals_phase(self, stack: contextlib.ExitStack) -> None:
        if not _in_main_thread():
            return
        old_term = signal.getsignal(signal.SIGTERM)
        _TERMINATED.clear()
        signal.signal(signal.SIGTERM, _sigterm)
        stack.callback(signal.signal, signal.SIGTERM, old_term)

    def _os_phase(self, test: Test) -> None:

        with progress(self.say, "setting up the nodes' OS (packages)"):
            # the tool's packages and the DB's os_packages
            DebianOS(db=test.db, log=self.say).setup(test.control)
        self._heal_leftovers(test)

    def _db_phase(self, stack: contextlib.ExitStack, test: Test) -> None:
        """DB setup (and the first leader when the DB has ``primary``); teardown: node logs
        downloaded, then the DB torn down unless ``leave_db_running``."""

        db = test.db
        self.say(f"{db_name(db)} setup on {len(test.nodes)} nodes ({_describe(db)})")
        if not self.options.leave_db_running:
            stack.callback(self._safe, "DB teardown", lambda: db.teardown(test.control))
        stack.callback(self._safe, "download node logs", lambda: self._download_logs(test))
        with progress(self.say, f"setting up {db_name(db)}"):
            db.setup(test.control)
        if has(db, Primary):
            with progress(self.say, f"waiting for a {db_name(db)} leader"):
                leader = db.await_leader(test.control, max(30.0, self.options.recovery_time))
            self.say(f"{db_name(db)} leader: {leader}")

    def _nemesis_phase(self, stack: contextlib.ExitStack, test: Test) -> None:
        """Nemesis setup; teardown: every fault healed (on every exit path), then the nemesis's own."""
        nemesis = test.nemesis
        assert nemesis is not None, "the runner's test has its nemesis"
        stack.callback(self._safe, "nemesis teardown", lambda: nemesis.teardown(test))
        stack.callback(self._safe, "heal", lambda: self._final_heal(test))
        nemesis.setup(test)

    def _interpreter_phase(self, stack: contextlib.ExitStack, state: _RunState) -> None:
        """The history writer, the interpreter and the live view (stopped on every exit path)."""

        test = state.test
        writer = _LoggedHistory(state.run.writer())
        stack.callback(writer.close)
        state.clock = Clock()
        state.doc["start_monotonic_ns"] = state.clock.start
        state.interp_ = interp = Interpreter(
            test,
            client=state.workload.client,
            nemesis=state.nemesis,
            nodes=[n.name for n in state.nodes],
            concurrency=state.concurrency,
            history=writer,
            clock=state.clock,
            rng=test.rng,
            idempotent=state.workload.idempotent,
        )
        stack.callback(interp.stop)
        if self.live and self.console is not None:
            state.live_view = LiveView(self.console, test, interp, self.options.time_limit)
            state.live_view.start()
            stack.callback(state.live_view.stop)

    def _observer(self, state: _RunState) -> contextlib.AbstractContextManager[object]:
        """The leadership observer while faults run (a DB with ``leadership`` or ``primary``), or
        nothing: a DB offering neither is not observed."""

        db, test, clock = self.db, state.test, state.clock
        if not (has(db, Leadership) or has(db, Primary)) or clock is None:
            return contextlib.nullcontext()
        observer = LeadershipObserver(db, state.nodes, test.control, state.run.path / LEADERSHIP_FILE, clock)
        observer.start()

        @contextlib.contextmanager
        def running() -> Iterator[object]:
            try:
                yield observer
            finally:
                self._safe("stop the leadership observer", observer.stop)

        return running()

    def _generator_phase(self, state: _RunState) -> None:
        """The main phase (workload + nemesis for ``time_limit`` s, observed), the heal and the
        recovery wait, then the workload's final phase."""
        o, workload, test = self.options, state.workload, state.test
        client_gen: Any = workload.generator
        if o.rate > 0:
            client_gen = gen.stagger(1.0 / o.rate, client_gen)
        main = (
            gen.clients(client_gen, state.nem_gen) if state.nem_gen is not None else gen.clients(client_gen)
        )
        self.say(
            f"generator phase: {workload.name}, nemesis {o.nemesis}, {o.time_limit:g} s, "
            f"{state.concurrency} clients, {o.rate:g} ops/s"
        )
        self._phase(state, "main")
        with self._observer(state):
            state.interp.run(gen.time_limit(o.time_limit, main))
            _raise_if_terminated()
            self._phase(state, "heal")
            self._heal(test, state.interp)  # the observer sees the heal's stop ops too
        self._recover(test)
        _raise_if_terminated()
        if workload.final_generator is not None:
            self._phase(state, "final")
            self.say("final phase")
            state.interp.run(gen.time_limit(o.final_time_limit, gen.clients(workload.final_generator)))
            _raise_if_terminated()

    @staticmethod
    def _phase(state: _RunState, name: str) -> None:
        if state.live_view is not None:
            state.live_view.phase = name

    def _test_doc(self, state: _RunState) -> dict[str, object]:
        """``test.json`` as written at the start (completed by :meth:`_finish_test_doc`)."""

        o, db, workload, nodes = self.options, self.db, state.workload, state.nodes
        start_wall = time.time()
        return {
            "name": state.name,
            "workload": workload.name,
            "checkers": [*workload.checkers, *o.checkers, *_db_checkers(db)],
            "server_logs": _server_logs_doc(db),
            "model": workload.model,
            "consistency_model": o.consistency_model,
            "db": str(o.db or default_db()),
            "db_name": db_name(db),
            "db_description": _describe(db),
            "db_capabilities": sorted(capabilities(db)),
            "db_opts": _jsonable(self.db_kwargs),
            "nemesis": o.nemesis,
            "nemesis_opts": _jsonable(dict(o.nemesis_opts)),
            "nemesis_styles": nemesis_styles(
                self.spec if self.spec is not None else o.nemesis, state.nemesis.names
            ),
            "opts": _jsonable(o.as_dict()),
            "nodes": [{"name": n.name, "host": n.host, "port": n.port, "user": n.user} for n in nodes],
            "concurrency": state.concurrency,
            "seed": o.seed,
            "start_time": start_wall,
            "start": time.strftime("%Y-%m-%dT%H:%M:%S%z", time.localtime(start_wall)),
            "versions": _versions(),
        }

    def _finish_test_doc(self, state: _RunState) -> None:
        doc = state.doc
        doc["end_time"] = time.time()
        if state.interp_ is not None:
            s = state.interp_.stats
            doc["stats"] = {"invoked": s.invoked, "ok": s.ok, "fail": s.fail, "info": s.info}
        if state.crashed is not None:
            doc["crashed"] = f"{type(state.crashed).__name__}: {state.crashed}"
        if self.recovery is not None:
            doc["recovery"] = self.recovery
        if self.node_logs_missing:
            doc["node_logs"] = {"missing": self.node_logs_missing}

        if DEPRECATIONS:
            doc["deprecations"] = list(DEPRECATIONS)
        state.run.write_test(doc)

    # -- helpers ----------------------------------------------------------------------------------

    def _safe(self, what: str, fn: Callable[[], object]) -> None:
        try:
            fn()
        except BaseException as e:  # cleanup must go on (even after a second Ctrl-C)
            self.log.warning("%s failed: %s", what, e)
            if self.console is not None:
                self.console.print(
                    f"[yellow]warning:[/yellow] {what} failed: {escape(str(e))}", highlight=False
                )

    def _heal_leftovers(self, test: Test) -> None:
        """Clear faults a killed earlier run may have left (iptables chains, qdiscs, clocks, SIGSTOP,
        a FUSE layer, a plug-in's leftovers) and say per node what was found and removed."""
        try:
            before = test.control.on_nodes(lambda r: residue(r, test.db))
            after = heal_control(test.control, test.db)
        except Exception as e:
            self.log.warning("healing leftover faults failed: %s", e)
            return
        for node in sorted(before):
            for line in before[node]:
                state = "still present" if line in after.get(node, []) else "removed"
                self.say(f"leftover of an earlier run on {node}: {line} ({state})")

    def _heal(self, test: Test, interp: Interpreter) -> None:
        nem = test.nemesis
        if nem is None:
            return
        stops = list(getattr(nem, "final_ops", []) or [])
        if stops:
            self.say(f"healing: {', '.join(str(s['f']) for s in stops)}")
            interp.run(gen.nemesis(stops))
        try:
            nem.heal(test)
        except Exception as e:  # e.g. a killed node that cannot start: the recovery wait judges it
            self.log.exception("heal failed")
            self.say(f"{type(e).__name__}: {e}", lead="[yellow]heal failed:[/yellow]")

    def _final_heal(self, test: Test) -> None:
        if test.nemesis is not None:
            test.nemesis.heal(test)

    def _lock_cluster(self, nodes: list[Any], name: str) -> Any:
        """Take the cluster lock for this run (ClusterLocked naming the holder when it is taken)."""

        lock = ClusterLock(Control(nodes), name, self.options.store, log=self.say)
        self.say(f"taking the cluster lock on {len(nodes)} nodes (one run per cluster)")
        try:
            lock.acquire(break_lock=self.options.break_lock, wait_s=self.options.lock_wait)
        except BaseException:
            lock.control.close()
            raise
        return lock

    def _recover(self, test: Test) -> None:
        """Wait until the cluster serves again (the DB's condition, within its bound); record it.
        A DB without the ``recovery`` capability records nothing (liveness is then unknown)."""

        db = test.db
        if not has(db, Recovery):
            self.say("the DB has no recovery capability: no recovery wait (liveness unknown)")
            return
        bound = max(float(getattr(db, "recovery_timeout", 0.0) or 0.0), self.options.recovery_time)
        self.say(f"waiting up to {bound:g} s for the cluster to recover (a leader, every node caught up)")
        try:
            with progress(self.say, "waiting for the cluster to recover"):
                rec = db.await_recovery(test.control, bound)
        except Exception as e:  # the wait itself broke (e.g. SSH): nothing was decided
            self.log.exception("recovery wait failed")
            self.say(f"{type(e).__name__}: {e}", lead="[yellow]recovery wait failed:[/yellow]")
            return
        self.recovery = rec
        if rec.get("recovered"):
            self.say(recovered_line(rec))
        else:
            self.say(
                f"not recovered within {bound:g} s: " + "; ".join(rec.get("problems") or ["?"]),
                lead="[red]liveness failure:[/red]",
            )
            self._probe_environment(test, rec)

    def _probe_environment(self, test: Test, rec: dict[str, object]) -> None:
        """After a failed recovery, ask the nodes whether the environment stopped the system (a
        full disk, the OOM killer, a node gone: :mod:`chaos.cluster.environment`); the liveness
        checker judges with what is recorded in ``recovery.environment``."""

        try:
            found = probe(test.control, test.db)
        except Exception as e:  # noqa: BLE001 - a probe that fails decides nothing
            self.log.warning("probing the nodes' environment failed: %s", e)
            return
        if found:
            rec["environment"] = found
            for node, items in sorted(found.items()):
                for item in items:
                    self.say(item["evidence"], lead=f"[yellow]environment on {escape(node)}:[/yellow]")

    def _download_logs(self, test: Test) -> None:
        """Every node's ``log_files`` into ``nodes/<node>/``; a file missing on a node is said and
        recorded (test.json ``node_logs.missing``), never left as an empty file."""

        db, run_dir = test.db, test.run_dir
        if not has(db, LogFiles) or run_dir is None:
            return
        missing: list[str] = []

        def fetch(remote: Remote) -> None:
            d = run_dir.nodes_dir(remote.node.name)
            for path in db.log_files(remote):
                try:
                    remote.download(path, d / os.path.basename(path))
                except Exception as e:
                    self.log.warning("download %s from %s: %s", path, remote.node.name, e)
                    why = getattr(e, "cause", None) or e
                    missing.append(f"{remote.node.name}:{path} ({' '.join(str(why).split())[:120]})")

        try:
            test.control.on_nodes(fetch)
        finally:
            for line in sorted(missing):
                where, _, why = line.partition(" (")
                self.say(f"log {where} not downloaded ({why}", lead="[yellow]missing:[/yellow]")
            self.node_logs_missing = sorted(missing)

    def _check_and_report(self, run: RunDir) -> int:
        results = check_and_report(
            run, time_limit=self.options.check_time_limit, say=self.say, console=self.console
        )
        self.results = results
        return exit_code(results.get("valid"))


def _in_main_thread() -> bool:
    import threading

    return threading.current_thread() is threading.main_thread()


def run_tests(
    options: Mapping[str, object] | RunOptions,
    *,
    console: Any = None,
    live: bool = True,
    spec: NemesisSpec | None = None,
) -> int:
    """``test_count`` runs one after another (each with a seed of its own unless one is given);
    the worst exit status. ``spec``: the ``--nemesis`` already parsed."""
    if not isinstance(options, RunOptions):
        options = RunOptions.parse(options)
    n = options.test_count
    codes = []
    for i in range(n):
        if n > 1 and console is not None:
            if console.is_terminal:
                console.rule(f"test {i + 1} of {n}")
            else:
                console.print(f"--- test {i + 1} of {n}", highlight=False)
        r = Runner(options, console=console, live=live, spec=spec)
        codes.append(r.run())  # the summary ends with the verdict and the run directory
    return worst(codes)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(run_tests({}))
