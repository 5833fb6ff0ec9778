"""Deploying the Python DLedger server onto nodes (Jepsen's DB protocol for DLedger).

Setup, per node and in parallel: upload a zipapp of the ``dledger`` package built on the control
node (once per source version, cached in ``~/.chaos/zipapps/``, see :mod:`chaos.cluster.deploy`)
to ``/opt/dledger/dledger.pyz``, which the node's own ``python3`` runs (Debian's python3-msgpack,
declared in ``os_packages`` and installed by the OS setup, is its one dependency; no venv, no
network), then start ``python3 dledger.pyz server`` as a daemon
(``setsid``, pidfile, log file) under libfaketime with a runtime-writable offset file (the clock
nemesis writes it), and wait for its port. When every node is up, setup waits for a leader. Setup is tried 3 times; a failure raises
:class:`~chaos.control.db.DBError` with the node's server-log tail. Teardown kills the server and
wipes its data dir. ``kill`` is SIGKILL, ``pause``/``resume`` SIGSTOP/SIGCONT, all by pidfile.
``primaries`` asks every node's METADATA from the control node; ``await_recovery`` waits after
healing for a leader, every node answering METADATA and every follower's commitIndex caught up.
``log_patterns`` are the anomalies the server's log may show (see :data:`LOG_PATTERNS`).
"""

from __future__ import annotations

import logging
import os
import secrets
import shlex
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING, Any

from chaos.api import (
    DBError,
    DBOption,
    GateRun,
    Node,
    await_tcp_port,
    daemon_pid,
    daemon_running,
    daemon_script,
    deploy,
    install_packages,
    signal_daemon,
    stop_daemon,
    tail_log,
)
from chaos_dledger import SOURCE_OMIT, SOURCE_PACKAGES

if TYPE_CHECKING:
    from chaos.api import Control, Remote

FLUSH_MODES = ("sync", "async")
READ_MODES = ("raft-log", "read-index", "lease", "unsafe")
DEFAULT_PORT = 20911

PROJECT_ROOT = Path(__file__).resolve().parents[1]
VERSION = "0.1.0"


def _log_patterns() -> list[Any]:
    from chaos.api import INVALID, WARNING, LogPattern

    return [
        # dledger/core/node.py, the follower's defence in depth (EntryHandler): a leader without
        # every committed entry was elected, or a committed entry changed
        LogPattern(
            "safety-guard",
            r"refusing to truncate below commitIndex|refusing to overwrite committed entry"
            r"|entry \d+ differs from the committed one|snapshot at \d+ is below commitIndex",
            INVALID,
            "a follower refused a truncate or overwrite below its commitIndex",
        ),
        LogPattern(
            "crash",
            r"^Traceback \(most recent call last\):|Fatal Python error",
            INVALID,
            "an unhandled exception in the server (a Python traceback)",
        ),
        LogPattern(
            "critical",
            r"^\S+ CRITICAL ",
            WARNING,
            "the server stopped itself or could not start (store, fsync or listen failure)",
        ),
        LogPattern(
            "decode",
            r"closing connection from .*: ",
            WARNING,
            "a frame or message that did not decode (the connection was closed)",
        ),
        # dledger/server.py and dledger/store/file.py, Protocol-Aware Recovery: a member whose
        # committed prefix failed its checks cut it and fetches it again (counted: the repairs)
        LogPattern(
            "repair",
            r"REPAIR: committed entries after \d+ are damaged",
            WARNING,
            "a member found its committed prefix damaged and repairs it from the leader (abstaining from votes)",
        ),
        LogPattern(
            "repair-done",
            r"repair done: the log holds entries up to \d+ again",
            WARNING,
            "a damaged committed prefix was fetched again from the leader",
        ),
        LogPattern(
            "recovery-cut", r"recovery cut the log", WARNING, "recovery cut a torn or corrupt log tail"
        ),
        LogPattern("error", r"^\S+ ERROR ", WARNING, "other ERROR lines"),
    ]


# -- the zipapp ----------------------------------------------------------------------------------------


def source_hash(root: Path = PROJECT_ROOT) -> str:
    """12 hex digits over every file of the ``dledger`` package under ``root`` (paths and contents)."""
    try:
        return deploy.source_hash(root / "dledger")
    except deploy.DeployError as e:
        raise DBError("control", str(e)) from None


def build_zipapp(root: Path = PROJECT_ROOT, cache_dir: Path | None = None) -> Path:
    """The ``dledger`` zipapp of the package under ``root`` (``python3 dledger.pyz server ...``),
    built once per source version (:func:`chaos.cluster.deploy.build_zipapp`); DBError if it cannot."""
    try:
        return deploy.build_zipapp(root / "dledger", "dledger.cli:main", cache_dir)
    except deploy.DeployError as e:
        raise DBError("control", str(e)) from None


# -- the DB --------------------------------------------------------------------------------------------


def _bool(text: str) -> bool:
    t = text.strip().lower()
    if t in ("1", "true", "yes", "on"):
        return True
    if t in ("0", "false", "no", "off"):
        return False
    raise ValueError(f"{text!r} is not a boolean (true/false)")


def _int(text: str) -> int:
    return int(text.strip())


def _seconds(text: str) -> float:
    v = float(text)
    if not v >= 0 or v == float("inf"):
        raise ValueError(f"{text!r} is not a finite number of seconds >= 0")
    return v


def _check_server_args(args: Sequence[str]) -> None:
    """ValueError (one line: the server's own parser's words) for ``--server-arg`` flags
    ``dledger server`` would refuse, before any node is touched: a misspelled flag is bad input
    (254), not a server that crashed at start (255)."""
    if not args:
        return
    import contextlib
    import io

    from dledger.cli import build_parser

    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err):
            build_parser().parse_args(["server", *args])
    except SystemExit:
        said = err.getvalue().strip().splitlines()
        why = said[-1].split("error: ", 1)[-1] if said else "refused"
        raise ValueError(f"server-arg {' '.join(args)!r}: dledger server says: {why}") from None


class DLedgerDB:
    """DLedger as the system under test: :class:`chaos.control.db.DB` with every capability
    (process, pause, primary, log-files, data-dir, clock, recovery, leadership, leader-transfer,
    clients for the ``register`` and ``log`` protocols, see :mod:`chaos_dledger.clients`).

    ``flush``: ``sync`` | ``async`` (the server's ``--flush``); ``read_mode``: ``raft-log`` |
    ``read-index`` | ``lease`` | ``unsafe``; ``port``: DLedger port on every node; ``server_args``:
    extra server flags, passed through; ``group``: DLedger group; ``faketime``: run under libfaketime
    with ``faketime_file`` as the offset source; ``tries``: setup attempts; ``start_timeout``: seconds
    to wait for a node's port; ``leader_timeout``: seconds setup waits for a leader (0 = do not wait);
    ``client_timeout``: DLedgerClient timeout (s) used by :meth:`client` and :meth:`primaries`;
    ``recovery_timeout``: the longest :meth:`await_recovery` may take after healing (s) before the
    run is a liveness failure; ``sticky_reads``: odd processes of the register workload read from
    their own node first, following a NOT_LEADER that names the leader once (see
    :mod:`chaos_dledger.clients`); ``peer_auth``: the members prove a
    fresh per-DB secret to each other (``--secret-file``, written to each node at setup), so only
    members' votes and pushes count (default on).
    """

    name = "DLedger"
    description = "the Python DLedger server (Raft), deployed to every node"
    db_options = (
        DBOption("flush", choices=FLUSH_MODES, help="the server's --flush (sync: fsync before acking)"),
        DBOption(
            "read-mode", choices=READ_MODES, help="the server's --read-mode (unsafe: stale reads possible)"
        ),
        DBOption("server-arg", multiple=True, dest="server_args", help="an extra server flag (repeatable)"),
        DBOption("port", parse=_int, help="DLedger port on every node"),
        DBOption("group", help="DLedger group"),
        DBOption("faketime", parse=_bool, help="run under libfaketime (clock faults need it)"),
        DBOption("client-timeout", parse=_seconds, help="client timeout (s)"),
        DBOption(
            "sticky-reads",
            parse=_bool,
            help="odd register processes read from their own node first and record its answer; a "
            "NOT_LEADER naming the leader is followed once (redirected_from), as DLedger's client does",
        ),
        DBOption(
            "recovery-timeout",
            parse=_seconds,
            help="how long the cluster may take to serve again after healing (s, default 60)",
        ),
        DBOption(
            "peer-auth",
            parse=_bool,
            help="members prove a per-run secret to each other (default true; false: any peer counts)",
        ),
    )
    client_protocols = frozenset({"register", "log", "txn", "bank", "counter", "set"})
    # the zipapp's interpreter and its one third-party module (chaos.cluster.osetup installs them)
    os_packages = ("python3", "python3-msgpack")
    # the log segments of dledger.store.file (<data_dir>/dledger-<id>/data/<start offset>): the
    # term/vote, checkpoint and high-water files stay intact under truncate and bitflip
    data_files = ("*/data/*",)
    loggers = ("dledger",)  # the client library's log, into the run's chaos.log
    # the server's code, whose coverage `chaos sim --coverage` measures (chaos.api.codecov)
    source_packages = SOURCE_PACKAGES
    source_omit = SOURCE_OMIT
    recovery_timeout = 60.0

    base_dir = "/opt/dledger"
    zipapp = "/opt/dledger/dledger.pyz"
    pidfile = "/var/run/dledger.pid"
    data_dir = "/var/lib/dledger"
    log_file = "/var/log/dledger.log"
    faketime_file: str | None = "/var/run/dledger.faketime"
    listing_file = "/var/log/dledger-data.txt"
    secret_file = "/opt/dledger/peer.secret"

    # what gate_campaign runs, as `chaos gate --list` shows it (chaos_dledger.sim.GATE_SEEDS)
    gate_campaign_command = (
        "chaos sim --seeds 300 --coverage (simulation: the default swarm, in this process)"
    )

    @staticmethod
    def gate_presets() -> dict[str, tuple[GateRun, ...]]:
        """The real-cluster runs of ``chaos gate``'s presets for DLedger (``power`` first, the
        default; :mod:`chaos_dledger.presets`)."""
        from chaos_dledger.presets import PRESETS

        return PRESETS

    @staticmethod
    def gate_campaign(store: str, master: str | None = None) -> list[dict[str, Any]]:
        """The simulation row of a default ``chaos gate`` (``chaos.runner.gate.db_campaign_rows``):
        the default swarm ``chaos sim`` over :data:`chaos_dledger.sim.GATE_SEEDS` seeds, as Spark
        tasks at ``master`` when the gate was given one."""
        from chaos_dledger.sim import gate_campaign

        return gate_campaign(store, master=master)

    def __init__(
        self,
        *,
        flush: str = "sync",
        read_mode: str = "raft-log",
        port: int = DEFAULT_PORT,
        server_args: Sequence[str] = (),
        group: str = "chaos",
        faketime: bool = True,
        tries: int = 3,
        start_timeout: float = 30.0,
        leader_timeout: float = 30.0,
        client_timeout: float = 1.0,
        sticky_reads: bool = True,
        recovery_timeout: float = 60.0,
        peer_auth: bool = True,
        source_root: Path = PROJECT_ROOT,
        log: Callable[[str], None] | None = None,
    ) -> None:
        if flush not in FLUSH_MODES:
            raise ValueError(f"flush {flush!r}: expected one of {', '.join(FLUSH_MODES)}")
        if read_mode not in READ_MODES:
            raise ValueError(f"read mode {read_mode!r}: expected one of {', '.join(READ_MODES)}")
        if not isinstance(port, int) or not 1 <= port <= 65535:
            raise ValueError(f"DLedger port {port!r}: expected an integer in 1..65535")
        if isinstance(server_args, str):
            server_args = shlex.split(server_args)
        if not isinstance(tries, int) or tries < 1:
            raise ValueError(f"setup tries {tries!r}: expected a positive integer")
        self.flush = flush
        self.read_mode = read_mode
        self.port = port
        self.server_args = [str(a) for a in server_args]
        _check_server_args(self.server_args)
        self.group = group
        self.faketime = faketime
        self.tries = tries
        self.start_timeout = start_timeout
        self.leader_timeout = leader_timeout
        self.client_timeout = client_timeout
        self.sticky_reads = sticky_reads
        if not isinstance(recovery_timeout, int | float) or recovery_timeout <= 0:
            raise ValueError(f"recovery timeout {recovery_timeout!r}: expected a positive number of seconds")
        self.recovery_timeout = float(recovery_timeout)
        # a fresh secret per DB object (per run): a process that is not a member cannot vote
        self.peer_auth = bool(peer_auth)
        self._secret = secrets.token_hex(32) if self.peer_auth else None
        # CHAOS_DLEDGER_SOURCE: deploy the dledger package under another directory instead (the bug
        # catalogue's patched copies, chaos_dledger.mutants); an explicit source_root wins
        env_root = os.environ.get("CHAOS_DLEDGER_SOURCE")
        self.source_root = Path(env_root) if env_root and source_root == PROJECT_ROOT else source_root
        self.log = log or (lambda s: logging.getLogger("chaos.db").info("%s", s))
        if not faketime:  # no clock capability (chaos.control.db.capabilities)
            self.faketime_file = None
        self._observer_clients: dict[str, Any] = {}
        self._zipapp: Path | None = None
        self._nodes: list[Node] = []
        self.log_patterns = _log_patterns()

    @property
    def pattern_files(self) -> tuple[str, ...]:
        """The downloaded files the log patterns apply to: the server log."""
        return (os.path.basename(self.log_file),)

    def describe(self) -> str:
        """The options in force, e.g. ``flush sync, read mode raft-log``."""
        extra = f", server args {' '.join(self.server_args)}" if self.server_args else ""
        auth = "" if self.peer_auth else ", no peer auth"
        return f"flush {self.flush}, read mode {self.read_mode}{auth}{extra}"

    # -- peers and clients --------------------------------------------------------------------------

    def peers(self, nodes: Sequence[Node]) -> str:
        """The server's ``--peers``: ``"n1-DBHOST:PORT;n2-..."`` with each node's ``peer_host``."""
        return ";".join(f"{_member_id(n)}-{n.peer_host}:{self.port}" for n in nodes)

    def client_peers(self, nodes: Sequence[Node]) -> str:
        """The peers string as the control node reaches the nodes (``host``, not ``db_host``)."""
        return ";".join(f"{_member_id(n)}-{n.host}:{self.port}" for n in nodes)

    def client(self, nodes: Sequence[Node], node_name: str | None = None) -> Any:
        """A ``dledger.client.DLedgerClient`` over all nodes, talking to ``node_name`` first."""
        from dledger.client import DLedgerClient

        if node_name is not None and node_name not in {n.name for n in nodes}:
            raise ValueError(f"client: unknown node {node_name!r}; expected one of {[n.name for n in nodes]}")
        return DLedgerClient(
            peers=self.client_peers(nodes), timeout=self.client_timeout, group=self.group, prefer=node_name
        )

    def open_client(self, protocol: str, test: Any, node: Node, process: Any) -> Any:
        """The ``register``, ``log`` or ``txn`` client (:mod:`chaos_dledger.clients`) for ``process``
        on ``node`` (it knows every node of ``test.nodes`` and talks to ``node`` first);
        ValueError for another protocol."""
        from chaos_dledger.clients import open_client

        nodes = list(test.nodes)
        return open_client(
            protocol, lambda n: self.client(nodes, n), node.name, process, sticky=self.sticky_reads
        )

    def transfer_leadership(self, control: Control, leader: str, to: str) -> dict[str, Any]:
        """DLedger's LEADERSHIP_TRANSFER (``DLedgerServer.handleLeadershipTransfer``) sent to
        ``leader``: ``{"outcome", "code", "error"}``."""
        client = self.client(control.nodes, leader)
        try:
            r = client.leadership_transfer(to)
        finally:
            client.close()
        return {"outcome": r.outcome, "code": r.code, "error": r.error}

    def log_positions(self, control: Control) -> dict[str, int]:
        """Each answering node's ledgerEndIndex from its own METADATA (the leader-transfer
        nemesis's ``behind`` target, :class:`chaos.control.db.LeaderTransfer`). Never raises."""
        try:
            answers = self.metadata(control.nodes)
        except Exception:  # a probe: no positions, the nemesis then says so
            return {}
        out = {}
        for name, r in answers.items():
            end = (
                (getattr(r, "raw", None) or {}).get("ledgerEndIndex")
                if getattr(r, "outcome", None) == "ok"
                else None
            )
            if type(end) is int:
                out[name] = end
        return out

    def leadership(self, node: Node, timeout_s: float) -> dict[str, Any]:
        """``node``'s own METADATA answer (``DLedgerServer.handleMetadata``): ``{"leader", "term"}``
        or ``{"error"}``; one cached sticky client per node (dropped after an error). Never raises."""
        from dledger.client import DLedgerClient

        try:
            c = self._observer_clients.get(node.name)
            if c is None:
                c = DLedgerClient(
                    peers=f"{_member_id(node)}-{node.host}:{self.port}",
                    timeout=timeout_s,
                    group=self.group,
                    prefer=node.name,
                    sticky=True,
                )
                self._observer_clients[node.name] = c
            r = c.metadata()
        except Exception as e:  # a poll never stops the observer
            self._drop_observer_client(node.name)
            return {"error": f"{type(e).__name__}: {e}"}
        if r.outcome != "ok":
            self._drop_observer_client(node.name)
            return {"error": r.error or f"code {r.code}"}
        return {"leader": r.leader_id, "term": r.term}

    def _drop_observer_client(self, name: str) -> None:
        c = self._observer_clients.pop(name, None)
        if c is not None:
            try:
                c.close()
            except Exception:
                pass

    def close_leadership(self) -> None:
        """Close the observer's per-node clients (idempotent)."""
        for name in list(self._observer_clients):
            self._drop_observer_client(name)

    # -- setup / teardown ---------------------------------------------------------------------------

    def zipapp_file(self) -> Path:
        """The zipapp to deploy (built once per DB object and source version)."""
        if self._zipapp is None:
            if self.source_root != PROJECT_ROOT:
                self.log(f"deploying the dledger package from {self.source_root}")
            self._zipapp = build_zipapp(self.source_root)
        return self._zipapp

    def setup(self, control: Control) -> None:
        """Install and start DLedger on every node, then wait for a leader; 3 tries, DBError on failure."""
        self._nodes = list(control.nodes)
        pyz = self.zipapp_file()
        last: Exception | None = None
        for attempt in range(1, self.tries + 1):
            try:
                control.on_nodes(lambda r: self._setup_node(r, pyz))
                if self.leader_timeout > 0:
                    self.await_leader(control, self.leader_timeout)
                return
            except Exception as e:  # noqa: BLE001 - every failure is retried, the last one raised
                last = e
                self.log(f"DLedger setup attempt {attempt}/{self.tries} failed: {e}")
                if attempt < self.tries:
                    try:
                        self.teardown(control)
                    except Exception as te:  # noqa: BLE001
                        self.log(f"teardown after failed setup also failed: {te}")
                    time.sleep(1.0)
        assert last is not None
        if isinstance(last, DBError):
            raise last
        node = getattr(last, "node", "cluster")
        raise DBError(str(node), f"DLedger setup failed after {self.tries} tries: {last}") from last

    def install(self, remote: Remote, pyz: Path) -> None:
        """Upload the zipapp to :attr:`zipapp` (skipped when that exact build is installed)."""
        deploy.install_file(remote, pyz, self.zipapp)

    def _setup_node(self, remote: Remote, pyz: Path) -> None:
        # already done by the runner's OS setup; checked again so that setup stands alone
        install_packages(remote, self.os_packages)
        self.install(remote, pyz)
        self._stop_and_wipe(remote)
        if self.faketime_file:
            remote.write_file(self.faketime_file, "+0\n", sudo=True)
        if self._secret:
            remote.write_file(self.secret_file, self._secret + "\n", sudo=True)
            remote.exec("chmod", "600", self.secret_file, sudo=True)
        self.start(remote)
        self.await_port(remote)

    def teardown(self, control: Control) -> None:
        """Kill the server and wipe its data dir, pidfile and log on every node (the zipapp stays)."""
        control.on_nodes(self._stop_and_wipe)

    def _stop_and_wipe(self, remote: Remote) -> None:
        self.kill(remote)
        remote.exec_raw(
            f"rm -rf {self.data_dir} {self.log_file} {self.listing_file} {self.pidfile}; mkdir -p {self.data_dir}",
            sudo=True,
        )

    # -- process control ----------------------------------------------------------------------------

    def server_command(self, node: Node, nodes: Sequence[Node]) -> list[str]:
        """The ``dledger server`` argv for ``node`` (without the faketime environment)."""
        return [
            "python3",
            self.zipapp,
            "server",
            "--group",
            self.group,
            "--id",
            _member_id(node),
            "--peers",
            self.peers(nodes),
            "--store-dir",
            self.data_dir,
            "--flush",
            self.flush,
            "--read-mode",
            self.read_mode,
            # without the secret the server refuses a multi-member group unless told --insecure
            *(["--secret-file", self.secret_file] if self._secret else ["--insecure"]),
            *self.server_args,
        ]

    start_script = "/opt/dledger/start-server.sh"

    def start_script_text(self, node: Node, nodes: Sequence[Node]) -> str:
        """The node-side script that starts the server as a daemon unless it already runs
        (:func:`chaos.control.util.daemon_script`), under libfaketime when ``faketime``."""
        prelude = f"mkdir -p {self.data_dir}\n"
        if self.faketime:
            prelude += (
                "lib=$(ls /usr/lib/*/faketime/libfaketime.so.1 2>/dev/null | head -n1)\n"
                '[ -n "$lib" ] || { echo "libfaketime.so.1 not found (apt-get install libfaketime)" >&2; exit 3; }\n'
                f"[ -f {self.faketime_file} ] || echo +0 > {self.faketime_file}\n"
                f'export LD_PRELOAD="$lib" FAKETIME_TIMESTAMP_FILE={self.faketime_file} '
                "FAKETIME_NO_CACHE=1\n"  # monotonic faked too: elections and leases run on it
            )
        return daemon_script(
            self.server_command(node, nodes),
            pidfile=self.pidfile,
            logfile=self.log_file,
            chdir=self.base_dir,
            env={"PYTHONUNBUFFERED": "1"},
            prelude=prelude,
        )

    def start(self, remote: Remote) -> None:
        """Start the server as a daemon unless it already runs (Jepsen's ``start-daemon!``).

        After :meth:`setup` (in this process) the peers are the set-up nodes; otherwise the start
        script setup left on the node is used, so another process (``chaos heal``) can restart a
        server. DBError if neither exists.
        """
        if self._nodes:
            remote.write_file(self.start_script, self.start_script_text(remote.node, self._nodes), sudo=True)
        res = remote.exec_raw(f"[ -f {self.start_script} ] && sh {self.start_script}", sudo=True, check=False)
        if not res.ok:
            why = res.stderr.strip() or f"no {self.start_script} on the node (run setup first)"
            raise DBError(remote.node.name, f"starting dledger server failed: {why}")

    def pid(self, remote: Remote) -> int | None:
        """The server's pid if it is alive (stopped counts as alive), else None."""
        return daemon_pid(remote, self.pidfile)

    def running(self, remote: Remote) -> bool:
        return daemon_running(remote, self.pidfile)

    @property
    def kill_match(self) -> str:
        """``pkill -f`` regex of a server process of this deployment (leftovers the pidfile does not
        name; ``chaos heal`` resumes stopped ones)."""
        return f"^python3 {self.zipapp} server"

    def kill(self, remote: Remote) -> None:
        """SIGKILL the server (by pidfile, then any leftover server of this zipapp) and wait until gone."""
        stop_daemon(remote, self.pidfile, match=self.kill_match)

    def pause(self, remote: Remote) -> None:
        """SIGSTOP the server (by pidfile); DBError if it is not running."""
        signal_daemon(remote, self.pidfile, "STOP")

    def resume(self, remote: Remote) -> None:
        """SIGCONT the server (by pidfile); a no-op when it is not running."""
        signal_daemon(remote, self.pidfile, "CONT", missing_ok=True)

    def await_port(self, remote: Remote, timeout: float | None = None) -> None:
        """Wait until the server listens on its port (probed on the node); DBError with the log tail
        if it dies or does not listen within ``timeout`` (default ``start_timeout``) seconds."""
        timeout = self.start_timeout if timeout is None else timeout
        await_tcp_port(
            remote,
            self.port,
            host=remote.node.peer_host,
            timeout=timeout,
            pidfile=self.pidfile,
            logfile=self.log_file,
        )

    def log_tail(self, remote: Remote, lines: int = 20) -> str:
        return tail_log(remote, self.log_file, lines)

    # -- cluster state ------------------------------------------------------------------------------

    def metadata(self, nodes: Sequence[Node]) -> dict[str, Any]:
        """Each node's own METADATA answer (``dledger.client.Result``), asked in parallel from the
        control node, talking to that node only."""
        from dledger.client import DLedgerClient

        def ask(n: Node) -> Any:
            c = DLedgerClient(
                peers=f"{_member_id(n)}-{n.host}:{self.port}", timeout=self.client_timeout, group=self.group
            )
            try:
                return c.metadata()
            finally:
                c.close()

        with ThreadPoolExecutor(max_workers=max(1, len(nodes))) as pool:
            futs = {n.name: pool.submit(ask, n) for n in nodes}
        return {name: f.result() for name, f in futs.items()}

    def primaries(self, control: Control) -> list[str]:
        """Names of the nodes that claim leadership now (METADATA says leader_id is themselves)."""
        out = []
        for name, r in self.metadata(control.nodes).items():
            if getattr(r, "outcome", None) == "ok" and getattr(r, "leader_id", None) == name:
                out.append(name)
        return out

    def await_leader(self, control: Control, timeout: float = 30.0) -> str:
        """Wait until some node claims leadership; returns its name, DBError after ``timeout`` s."""
        deadline = time.monotonic() + timeout
        while True:
            p = self.primaries(control)
            if p:
                return p[0]
            if time.monotonic() > deadline:
                raise DBError("cluster", f"no DLedger leader elected within {timeout:g}s")
            time.sleep(0.2)

    def await_recovery(self, control: Control, timeout: float | None = None) -> dict[str, Any]:
        """Wait up to ``timeout`` s (default :attr:`recovery_timeout`) until the cluster serves again.

        The condition, from every node's own METADATA answer: some node is leader and every node
        answers, names that leader and is in its term, with a commitIndex at least the leader's
        (sampled in the same round; after healing no client writes). Returns the record the
        ``liveness`` checker judges (:mod:`chaos.history.checkers.liveness`): ``recovered``, ``bound_s``,
        ``waited_s``, ``leader``, ``term``, ``commit_index``, ``problems`` (what was still missing
        in the last round, e.g. ``"n3 does not answer: ..."``) and ``nodes`` (each node's last answer).
        Never raises for an unhealthy cluster; that is the answer.
        """
        bound = self.recovery_timeout if timeout is None else float(timeout)
        t0 = time.monotonic()
        while True:
            rec = self._recovery_round(control.nodes)
            rec["bound_s"] = bound
            rec["waited_s"] = round(time.monotonic() - t0, 3)
            if rec["recovered"] or rec["waited_s"] >= bound:
                return rec
            time.sleep(0.25)

    def _recovery_round(self, nodes: Sequence[Node]) -> dict[str, Any]:
        answers = self.metadata(nodes)
        view: dict[str, dict[str, Any]] = {}
        for name, r in answers.items():
            raw = getattr(r, "raw", None) or {}
            if getattr(r, "outcome", None) == "ok":
                view[name] = {
                    "ok": True,
                    "role": raw.get("role"),
                    "term": getattr(r, "term", None),
                    "leader": getattr(r, "leader_id", None),
                    "commit_index": raw.get("commitIndex"),
                    "end_index": raw.get("ledgerEndIndex"),
                    "repair_to": raw.get("repairTo", -1),
                }
            else:
                view[name] = {
                    "ok": False,
                    "error": getattr(r, "error", None) or f"code {getattr(r, 'code', '?')}",
                }
        leaders = [n for n, v in view.items() if v["ok"] and v["leader"] == n]
        leaders.sort(key=lambda n: -(view[n]["term"] or -1))
        problems: list[str] = []
        leader = leaders[0] if leaders else None
        term = view[leader]["term"] if leader else None
        commit = view[leader]["commit_index"] if leader else None
        if leader is None:
            problems.append("no node claims to be leader")
        for name, v in view.items():
            if not v["ok"]:
                problems.append(f"{name} does not answer: {v['error']}")
            elif leader is not None and name != leader:
                if v["leader"] != leader or v["term"] != term:
                    problems.append(
                        f"{name} follows {v['leader']} in term {v['term']}, not {leader} in term {term}"
                    )
                elif (
                    not isinstance(v["commit_index"], int)
                    or not isinstance(commit, int)
                    or v["commit_index"] < commit
                ):
                    problems.append(f"{name} at commitIndex {v['commit_index']}, the leader at {commit}")
        rec: dict[str, Any] = {
            "recovered": not problems,
            "leader": leader,
            "term": term,
            "commit_index": commit,
            "problems": problems,
            "nodes": view,
        }
        # members repairing a damaged committed prefix abstain from votes: with a majority of them
        # (or of them and silent members) no leader can be elected, and the damage is beyond what
        # the replicas can repair (chaos.history.checkers.liveness reports it as unknown with this cause)
        repairing = sorted(n for n, v in view.items() if v["ok"] and (v.get("repair_to") or -1) >= 0)
        voters = sum(1 for v in view.values() if v["ok"]) - len(repairing)
        if problems and repairing and leader is None and voters <= len(view) // 2:
            rec["beyond_repair"] = (
                f"{', '.join(repairing)} repair damaged committed prefixes and may not vote; "
                f"{voters} of {len(view)} members can vote, a majority is needed"
            )
        return rec

    def log_files(self, remote: Remote) -> list[str]:
        """Remote files to collect: the server log and a listing of the data dir (written now)."""
        remote.exec_raw(
            f"(ls -laR {self.data_dir} 2>&1; echo; du -sh {self.data_dir} 2>&1) > {self.listing_file}; true",
            sudo=True,
            check=False,
        )
        return [self.log_file, self.listing_file]


def _member_id(n: Node) -> str:
    if "-" in n.name:
        raise ValueError(
            f"node name {n.name!r}: DLedger member ids cannot contain '-' (it separates id and address)"
        )
    return n.name
