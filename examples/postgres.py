"""PostgreSQL (Debian's ``postgresql`` package) under test with transactions:
``chaos run --db examples.postgres:PostgresDB --workload list-append --node-count 1``.

One primary on the first node, as Jepsen's single-node PostgreSQL tests run it: the test is of the
isolation levels under kill and pause of that server, not of replication. ``os_packages`` has the
tool's OS setup install ``postgresql``; ``setup`` makes a fresh cluster in its own data directory
with ``initdb`` and runs ``postgres`` as the ``postgres`` user on port 5433 (Debian's own cluster
may hold 5432), trusting connections from the control node. Capabilities: process (SIGKILL of the
postmaster and every backend, restarted by a supervisor loop 3 s later), pause (SIGSTOP of every
``postgres`` process: a paused postmaster alone would leave the backends serving), log-files, and a
``txn`` client (``psycopg`` 3 from PyPI on the control node: ``pip install 'psycopg[binary]'``).

The client runs Elle's list-append micro-ops in one transaction at ``--db-opt isolation=...``
(``serializable``, ``repeatable-read`` or ``read-committed``) over one row per key,
``lists(id int primary key, val int[])``: a read is ``SELECT val``, an append an ``UPDATE ... SET
val = val || ARRAY[v]``, or an ``INSERT`` of a new row when no row was updated. Under
``--workload rw-register`` (``chaos.api.value_kind(test) == "register"``) the keys are rows of
``registers(id int primary key, val int)`` and a write is an upsert. Nothing is retried: a
transaction PostgreSQL aborts (a serialization failure, a deadlock, a unique violation of two first
appends) is ``fail`` as ``chaos.api.Aborted`` (counted apart from the server being unavailable); a
connection lost before ``COMMIT`` was sent is ``fail`` too (PostgreSQL rolls back an open
transaction whose connection is gone); lost during ``COMMIT``, or no answer within the client
timeout, it is ``info``.

What the three levels show (Berenson et al. 1995; Ports & Grittner 2012 for PostgreSQL's SSI):
SERIALIZABLE is serializable; REPEATABLE READ is snapshot isolation, so two transactions that read
the same keys and each append to a different one both commit (write skew, G2-item): invalid when
the test asks for ``--consistency-model serializable``, valid for ``snapshot-isolation``;
READ COMMITTED reads each statement from a new snapshot (G-single, read skew, and worse).

The same client serves Jepsen's bank (``--workload bank``, the ``bank`` protocol,
:class:`PostgresBank`) and long-fork (``--workload long-fork``: inserts are first appends, reads
of key groups are ``SELECT`` statements, through ``txn``).
"""

from __future__ import annotations

import socket
import threading
import time
from typing import Any

from chaos.api import (
    INVALID,
    Aborted,
    DaemonError,
    DaemonProcess,
    DBOption,
    Failed,
    Indeterminate,
    LogPattern,
    Node,
    NotSent,
    await_tcp_port,
    stop_daemon,
    value_kind,
)

API = ">=1.0,<2"  # the chaos plug-in API this module is written for (chaos.api.VERSION)

PORT = 5433
DATA = "/var/lib/postgresql/chaos"
LEVELS = {
    "serializable": "SERIALIZABLE",
    "repeatable-read": "REPEATABLE READ",
    "read-committed": "READ COMMITTED",
}
# the newest installed server's binaries (Debian installs them per major version)
BIN = "$(ls -d /usr/lib/postgresql/*/bin | sort -V | tail -n 1)"
POSTMASTER = "/usr/local/bin/postgres-chaos"  # a link to the server binary, named so pgrep finds it
INITDB = (
    f"b={BIN}; install -d -o postgres -g postgres {DATA} && "
    f"runuser -u postgres -- $b/initdb -D {DATA} -A trust -U postgres >/dev/null && "
    f"echo 'host all all 0.0.0.0/0 trust' >> {DATA}/pg_hba.conf && "
    f"ln -sf $b/postgres {POSTMASTER}"
)
SERVER = f"setpriv --reuid=postgres --regid=postgres --init-groups {POSTMASTER}"
# the supervisor's delay before a restart (systemd's RestartSec): longer than the kill nemesis
# takes to see the server gone
RESTART_S = 3
# crash recovery syncs the data directory with one syncfs instead of an fsync per file (seconds on
# a container's overlay file system)
TUNING = "-c recovery_init_sync_method=syncfs"
SCHEMA = (
    "CREATE TABLE IF NOT EXISTS lists (id int PRIMARY KEY, val int[] NOT NULL); "
    "CREATE TABLE IF NOT EXISTS registers (id int PRIMARY KEY, val int NOT NULL); "
    "CREATE TABLE IF NOT EXISTS accounts (id int PRIMARY KEY, balance bigint NOT NULL)"
)
# SQLSTATE classes of a transaction the server rolled back on its own: 40 (serialization failure,
# deadlock) and a unique violation (two first appends to one key)
ABORTS = ("40", "23505")


class PostgresTxn:
    """The ``txn`` client protocol (chaos.api.TxnClient) over one connection to ``host``,
    at isolation ``level`` (SQL text); ``timeout`` seconds per transaction."""

    def __init__(self, host: str, level: str, timeout: float = 2.0, kind: str = "list") -> None:
        self.host, self.level, self.timeout = host, level, timeout
        self.table = "registers" if kind == "register" else "lists"  # chaos.api.value_kind
        self.conn: Any = None

    def _connect(self) -> Any:
        import psycopg

        if self.conn is None or self.conn.closed:
            try:
                self.conn = psycopg.connect(
                    host=self.host, port=PORT, user="postgres", dbname="postgres",
                    connect_timeout=max(1, int(self.timeout)), autocommit=True,
                )  # fmt: skip
            except psycopg.OperationalError as e:
                raise NotSent(f"cannot connect: {str(e).strip()}") from None
        return self.conn

    def txn(self, mops: list[list[Any]]) -> list[list[Any]]:
        return self._transaction(lambda cur: [self._mop(cur, self.table, m) for m in mops])

    def _transaction(self, body: Any) -> Any:
        """``body(cursor)`` inside one transaction at the client's level, then COMMIT; the errors
        mapped as the module docstring says. ``body`` may end the transaction itself (ROLLBACK) and
        raise :class:`Failed`."""
        import psycopg

        conn = self._connect()
        # no answer in time (a paused server): shut the socket, so the blocked call returns
        sock = socket.socket(fileno=conn.pgconn.socket)
        timer = threading.Timer(self.timeout, lambda: _shutdown(sock))
        timer.start()
        committing = False
        try:
            cur = conn.cursor()
            cur.execute(f"BEGIN ISOLATION LEVEL {self.level}")
            out = body(cur)
            committing = True
            cur.execute("COMMIT")
            return out
        except psycopg.Error as e:
            text = f"{type(e).__name__}: {str(e).strip().splitlines()[0] if str(e).strip() else ''}"
            lost = e.sqlstate is None or e.sqlstate.startswith(("08", "57"))
            self.close()
            if committing and lost:
                raise Indeterminate(f"during COMMIT: {text}") from None
            if e.sqlstate and e.sqlstate.startswith(ABORTS):
                raise Aborted(text) from None  # the server rolled it back: a definite abort
            raise Failed(text) from None  # refused, or never committed
        finally:
            timer.cancel()
            sock.detach()  # the connection owns the descriptor

    @staticmethod
    def _mop(cur: Any, table: str, mop: list[Any]) -> list[Any]:
        f, k, v = mop
        if f == "r":
            row = cur.execute(f"SELECT val FROM {table} WHERE id = %s", (k,)).fetchone()
            if table == "lists":
                return [f, k, list(row[0]) if row else None]
            return [f, k, row[0] if row else None]
        if f == "append" and table == "lists":
            cur.execute("UPDATE lists SET val = val || ARRAY[%s] WHERE id = %s", (v, k))
            if cur.rowcount == 0:
                cur.execute("INSERT INTO lists (id, val) VALUES (%s, ARRAY[%s])", (k, v))
            return [f, k, v]
        if f == "w" and table == "registers":
            cur.execute(
                "INSERT INTO registers (id, val) VALUES (%s, %s) ON CONFLICT (id) DO UPDATE SET val = %s",
                (k, v, v),
            )
            return [f, k, v]
        raise Failed(f"micro-op {f!r} on {table}: expected r and append (lists) or w (registers)")

    def close(self) -> None:
        if self.conn is not None:
            conn, self.conn = self.conn, None
            try:
                conn.close()
            except Exception:
                pass


class PostgresBank(PostgresTxn):
    """The ``bank`` protocol (the bank client protocol) over
    ``accounts(id int primary key, balance bigint)``, as Jepsen's SQL bank clients do it: a transfer
    reads both balances, refuses (ROLLBACK, ``fail``) when ``from`` cannot afford it, and writes
    both new balances as values computed by the client (``UPDATE ... SET balance = %s``); a read
    is one ``SELECT`` of every account."""

    def init(self, balances: dict[int, int]) -> None:
        rows = ", ".join(["(%s, %s)"] * len(balances))
        args = [x for kv in balances.items() for x in kv]
        sql = f"INSERT INTO accounts (id, balance) VALUES {rows} ON CONFLICT (id) DO NOTHING"
        self._transaction(lambda cur: cur.execute(sql, args))

    def transfer(self, frm: int, to: int, amount: int) -> None:
        def body(cur: Any) -> None:
            b = {}
            for a in (frm, to):
                row = cur.execute("SELECT balance FROM accounts WHERE id = %s", (a,)).fetchone()
                b[a] = None if row is None else row[0]
            if b[frm] is None or b[to] is None or b[frm] < amount:
                cur.execute("ROLLBACK")
                # served, the balance does not cover it: a no match (compare_failed), not an outage
                raise Failed(
                    f"transfer of {amount} from {frm} ({b[frm]}) to {to} ({b[to]}) refused",
                    compare_failed=True,
                )
            cur.execute("UPDATE accounts SET balance = %s WHERE id = %s", (b[frm] - amount, frm))
            cur.execute("UPDATE accounts SET balance = %s WHERE id = %s", (b[to] + amount, to))

        self._transaction(body)

    def read(self, accounts: list[int]) -> dict[int, int]:
        rows = self._transaction(lambda cur: cur.execute("SELECT id, balance FROM accounts").fetchall())
        return {int(i): int(b) for i, b in rows}


def _shutdown(sock: socket.socket) -> None:
    try:
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass


class PostgresDB(DaemonProcess):
    """PostgreSQL on the first node; ``isolation``: the transactions' isolation level.

    The server runs under a supervisor loop, as systemd's ``Restart=always`` runs it in production:
    a kill is a crash (SIGKILL of the postmaster and every backend) followed, :data:`RESTART_S`
    later, by a restart and crash recovery, so a pause is not asked of a server that is down for a
    whole kill window (there is one node, and the kill and pause schedules are independent)."""

    name, pidfile, logfile, start_script = "postgres", "/run/postgres-chaos.pid", "/var/log/postgres-chaos.log", "/opt/postgres-chaos.sh"  # fmt: skip
    os_packages = ("postgresql",)
    client_protocols = ("txn", "bank")
    pattern_files = ("postgres-chaos.log",)
    log_patterns = (LogPattern("panic", r"PANIC:", INVALID, "PostgreSQL panicked"),)
    db_options = (DBOption("isolation", choices=tuple(LEVELS), help="transaction isolation level"),)

    def __init__(self, isolation: str = "serializable") -> None:
        if isolation not in LEVELS:
            raise ValueError(f"isolation {isolation!r}: expected one of {', '.join(LEVELS)}")
        self.isolation = isolation
        self.primary: Node | None = None

    def describe(self) -> str:
        return f"postgresql from Debian, one primary, {LEVELS[self.isolation]}"

    def setup(self, control: Any) -> None:
        self.primary = control.nodes[0]
        r = control.remote(self.primary.name)
        self.wipe(r, DATA)
        r.exec_raw(INITDB, sudo=True, timeout=120)
        server = f"{SERVER} -D {DATA} -p {PORT} -c listen_addresses='*' -c max_connections=200 {TUNING}"
        self.write_start_script(r, ["sh", "-c", f"while true; do {server}; sleep {RESTART_S}; done"])
        self.start(r)
        await_tcp_port(r, PORT, pidfile=self.pidfile, logfile=self.logfile, timeout=60)
        deadline = time.monotonic() + 60
        while True:  # the port opens before the server accepts sessions ("starting up")
            c = PostgresTxn(self.primary.host, "SERIALIZABLE", timeout=10)
            try:
                c._connect().execute(SCHEMA)
                return
            except NotSent:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.5)
            finally:
                c.close()

    def teardown(self, control: Any) -> None:
        control.on_nodes(lambda r: self.wipe(r, DATA))

    def wipe(self, remote: Any, *paths: str) -> None:
        stop_daemon(remote, self.pidfile)  # the supervisor first, so nothing restarts the server
        self.kill(remote)
        remote.exec_raw("rm -rf " + " ".join([*paths, self.logfile]), sudo=True)

    def running(self, remote: Any) -> bool:
        return remote.exec_raw(f"pgrep -f '^{POSTMASTER} '", check=False).exit_code == 0

    def kill(self, remote: Any) -> None:
        """SIGKILL the postmaster and every backend (resumed first, should they be paused) and wait
        until they are gone; the supervisor starts the server again."""
        remote.exec_raw(
            'pids=$(pgrep -u postgres); [ -n "$pids" ] || exit 0; kill -KILL $pids; kill -CONT $pids; '
            "for i in $(seq 100); do alive=; for p in $pids; do kill -0 $p 2>/dev/null && alive=1; done; "
            '[ -z "$alive" ] && break; sleep 0.05; done; true',
            sudo=True,
        )

    def pause(self, remote: Any) -> None:
        """SIGSTOP every ``postgres`` process; a server the supervisor is restarting after a kill is
        waited for (up to 6 s), else DaemonError."""
        res = remote.exec_raw(
            f"for i in $(seq 60); do pgrep -f '^{POSTMASTER} ' >/dev/null && "
            "{ pkill -STOP -u postgres; exit 0; }; sleep 0.1; done; exit 1",
            sudo=True,
            check=False,
        )
        if res.exit_code != 0:
            raise DaemonError(remote.node.name, "pause: postgres is not running")

    def resume(self, remote: Any) -> None:
        remote.exec_raw("pkill -CONT -u postgres; true", sudo=True)

    def open_client(self, protocol: str, test: Any, node: Node, process: Any) -> PostgresTxn:
        primary = self.primary or next(iter(test.nodes))
        if protocol == "bank":
            return PostgresBank(primary.host, LEVELS[self.isolation])
        return PostgresTxn(primary.host, LEVELS[self.isolation], kind=value_kind(test) or "list")


__all__ = ["PostgresBank", "PostgresDB", "PostgresTxn"]
