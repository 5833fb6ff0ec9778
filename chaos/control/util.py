"""Daemon helpers over SSH: Jepsen's ``jepsen.control.util`` (``start-daemon!``, ``stop-daemon!``,
``daemon-running?``, ``signal!``, ``await-tcp-port``) for any system under test.

A daemon is identified by its **pidfile** on the node. :func:`start_daemon` runs a program detached
from the SSH session (``setsid``, stdin from ``/dev/null``, stdout and stderr appended to a **log
file**) and writes its pid; the other helpers act on that pid. Every helper takes a
:class:`~chaos.control.ssh.Remote` and runs its commands with ``sudo``. The node needs a POSIX ``sh``,
``setsid``, ``kill``, ``tail`` (util-linux, procps, coreutils: in every Debian) and, for
:func:`await_tcp_port`, ``bash`` (its ``/dev/tcp``) and coreutils ``timeout``.

Errors: a failed step raises :class:`DaemonError` (a :class:`~chaos.control.db.DBError`, so a DB may
let it through) naming the node and carrying the log tail; SSH failures raise
:class:`~chaos.control.ssh.RemoteError` unchanged.
"""

from __future__ import annotations

import json
import shlex
import time
import urllib.error
import urllib.request
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from chaos.control.client import Indeterminate, NotSent
from chaos.errors import DBError

if TYPE_CHECKING:
    from chaos.control.ssh import Control, Remote

LOG_TAIL_LINES = 20


class DaemonError(DBError):
    """A daemon step failed on a node: ``node``, the message, ``log_tail`` (the end of its log)."""


def daemon_script(
    argv: Sequence[str],
    *,
    pidfile: str,
    logfile: str,
    chdir: str | None = None,
    env: Mapping[str, str] | None = None,
    prelude: str = "",
) -> str:
    """The ``sh`` script :func:`start_daemon` runs: start ``argv`` unless the pidfile's process lives.

    ``env`` is exported (values quoted); ``prelude`` is shell text run first (e.g. locating a
    library for ``LD_PRELOAD``; a non-zero ``exit`` there aborts the start). Each start appends a
    ``=== start <UTC time> ===`` line to ``logfile``. A DB may write this script to the node so
    another process (``chaos heal``) can start the daemon again with the same command line.
    Raises ValueError for an empty ``argv`` or a relative pidfile/logfile.
    """
    if not argv:
        raise ValueError("daemon argv: expected at least the program")
    for what, path in (("pidfile", pidfile), ("logfile", logfile)):
        if not path.startswith("/"):
            raise ValueError(f"daemon {what} {path!r}: expected an absolute path")
    pid, log = shlex.quote(pidfile), shlex.quote(logfile)
    exports = "".join(f"export {k}={shlex.quote(str(v))}\n" for k, v in (env or {}).items())
    return (
        "#!/bin/sh\n"
        f"if [ -f {pid} ] && kill -0 $(cat {pid}) 2>/dev/null; then exit 0; fi\n"
        f'mkdir -p "$(dirname {pid})" "$(dirname {log})"\n'
        + (f"cd {shlex.quote(chdir)} || exit 3\n" if chdir else "")
        + (prelude.rstrip("\n") + "\n" if prelude else "")
        + exports
        + f"echo \"=== start $(date -u '+%Y-%m-%dT%H:%M:%S') ===\" >> {log}\n"
        # $! is the program itself: setsid execs it (a background job is not a group leader)
        f"setsid {shlex.join(argv)} >> {log} 2>&1 < /dev/null &\n"
        f"echo $! > {pid}\n"
    )


def start_daemon(
    remote: Remote,
    argv: Sequence[str],
    *,
    pidfile: str,
    logfile: str,
    chdir: str | None = None,
    env: Mapping[str, str] | None = None,
    prelude: str = "",
) -> None:
    """Start ``argv`` as a daemon on the node unless it already runs (idempotent).

    See :func:`daemon_script` for the arguments. Returns once the process is forked; it does not
    wait for it to serve (:func:`await_tcp_port`). Raises DaemonError when the script fails.
    """
    script = daemon_script(argv, pidfile=pidfile, logfile=logfile, chdir=chdir, env=env, prelude=prelude)
    res = remote.exec_raw(script, sudo=True, check=False)
    if not res.ok:
        why = res.stderr.strip() or f"exit status {res.exit_code}"
        raise DaemonError(remote.node.name, f"starting {argv[0]} failed: {why}", tail_log(remote, logfile))


def daemon_pid(remote: Remote, pidfile: str) -> int | None:
    """The pidfile's pid if that process is alive (a stopped process counts as alive), else None."""
    p = shlex.quote(pidfile)
    out = remote.exec_raw(
        f"p=$(cat {p} 2>/dev/null) && kill -0 $p 2>/dev/null && echo $p || true", sudo=True
    ).stdout.strip()
    return int(out) if out.isdigit() else None


def daemon_running(remote: Remote, pidfile: str) -> bool:
    """Whether the pidfile names a live process (Jepsen's ``daemon-running?``)."""
    return daemon_pid(remote, pidfile) is not None


def stop_daemon(remote: Remote, pidfile: str, *, match: str | None = None, wait_s: float = 5.0) -> None:
    """SIGKILL the daemon, wait until it is gone, remove the pidfile (idempotent, never raises for a
    daemon that is not running).

    ``match``: an extended regex for ``pkill -f`` that also kills leftovers the pidfile does not
    name (a daemon started by hand or whose pidfile was lost); anchor it with ``^`` so it cannot
    match the shell that runs ``pkill``. ``wait_s`` bounds the wait for the
    process to disappear (SIGKILL of a stopped process is immediate; a process in uninterruptible
    I/O may take longer, and is then left to the kernel).
    """
    p = shlex.quote(pidfile)
    leftovers = f"pkill -9 -f {shlex.quote(match)} 2>/dev/null; " if match else ""
    rounds = max(1, int(wait_s / 0.1))
    remote.exec_raw(
        f'p=$(cat {p} 2>/dev/null); if [ -n "$p" ]; then kill -9 $p 2>/dev/null; fi; {leftovers}'
        f'for i in $(seq {rounds}); do [ -n "$p" ] && kill -0 $p 2>/dev/null || break; sleep 0.1; done; '
        f"rm -f {p}; true",
        sudo=True,
        timeout=wait_s + 30,
    )


def signal_daemon(remote: Remote, pidfile: str, signal: str, *, missing_ok: bool = False) -> bool:
    """Send ``signal`` (a name such as ``STOP``, ``CONT``, ``TERM``) to the daemon (Jepsen's ``signal!``).

    Returns True if it was sent. A daemon that is not running raises DaemonError, or returns False
    with ``missing_ok`` (``SIGCONT`` after a kill is a no-op, not an error). Raises ValueError for a
    signal name that is not letters and digits.
    """
    if not signal.isalnum():
        raise ValueError(f"signal {signal!r}: expected a signal name such as STOP, CONT or TERM")
    p = shlex.quote(pidfile)
    # no pid to signal (never started, or killed and its pid file removed): say so, not kill's usage
    res = remote.exec_raw(
        f'pid=$(cat {p} 2>/dev/null); [ -n "$pid" ] || {{ echo "not running (no pid in "{p}")"; exit 3; }}; '
        f'kill -{signal} $pid 2>&1 || {{ echo "not running (process $pid is gone)"; exit 3; }}',
        sudo=True,
        check=False,
    )
    if res.ok:
        return True
    if missing_ok:
        return False
    lines = res.stdout.strip().splitlines()
    why = (lines[-1] if lines else "") or res.stderr.strip() or "no process"
    raise DaemonError(remote.node.name, f"SIG{signal} to the daemon of {pidfile} failed: {why}")


def await_tcp_port(
    remote: Remote,
    port: int,
    *,
    host: str = "127.0.0.1",
    timeout: float = 30.0,
    pidfile: str | None = None,
    logfile: str | None = None,
) -> None:
    """Wait until ``host:port`` accepts a TCP connection, probed on the node (Jepsen's
    ``await-tcp-port``).

    The loop runs node-side in one SSH command, so a wait costs one round trip. With ``pidfile``,
    a daemon that exits meanwhile ends the wait at once. Raises DaemonError (with the tail of
    ``logfile`` if given) when the daemon exited or nothing listens within ``timeout`` seconds;
    ValueError for a port outside 1..65535.
    """
    if not isinstance(port, int) or not 1 <= port <= 65535:
        raise ValueError(f"port {port!r}: expected an integer in 1..65535")
    alive = f"kill -0 $(cat {shlex.quote(pidfile)} 2>/dev/null) 2>/dev/null || exit 3; " if pidfile else ""
    probe = shlex.quote(f"exec 3<>/dev/tcp/{host}/{port}")
    script = (
        f"end=$(( $(date +%s) + {max(1, int(timeout + 0.999))} )); "
        f"while :; do {alive}"
        f"timeout 2 bash -c {probe} 2>/dev/null && exit 0; "
        '[ "$(date +%s)" -ge "$end" ] && exit 4; sleep 0.2; done'
    )
    res = remote.exec_raw(script, sudo=True, check=False, timeout=timeout + 30)
    if res.ok:
        return
    tail = tail_log(remote, logfile) if logfile else ""
    if res.exit_code == 3:
        raise DaemonError(
            remote.node.name, f"the daemon of {pidfile} exited before listening on {port}", tail
        )
    raise DaemonError(remote.node.name, f"nothing listening on {host}:{port} after {timeout:g}s", tail)


def tail_log(remote: Remote, logfile: str, lines: int = LOG_TAIL_LINES) -> str:
    """The last ``lines`` lines of ``logfile`` on the node ('' if it does not exist); never raises
    for a missing file."""
    res = remote.exec_raw(
        f"tail -n {int(lines)} {shlex.quote(logfile)} 2>/dev/null || true", sudo=True, check=False
    )
    return res.stdout


class DaemonProcess:
    """The Process and Pause capabilities (:mod:`chaos.control.db`) of a DB whose server is one
    daemon per node, from three node paths a subclass sets: ``pidfile``, ``logfile`` and
    ``start_script`` (a :func:`daemon_script` its setup writes with :meth:`write_start_script`, so
    any process, ``chaos heal`` too, can start the server again with the same command line).
    ``kill_match``: optional ``pkill -f`` regex for leftovers (see :func:`stop_daemon`).

    ``start`` is idempotent and raises DaemonError with the log tail; ``kill`` and ``resume`` are
    idempotent and do not raise for a server that is not running; ``pause`` raises DaemonError
    then; ``wipe`` kills the server and removes its state (a DB's teardown). Each acts on one
    node's :class:`~chaos.control.ssh.Remote`, safe to run for different nodes at once.
    ``log_files`` returns ``[logfile]``.
    """

    pidfile: str
    logfile: str
    start_script: str
    kill_match: str | None = None

    def write_start_script(
        self,
        remote: Remote,
        argv: Sequence[str],
        *,
        chdir: str | None = None,
        env: Mapping[str, str] | None = None,
        prelude: str = "",
    ) -> None:
        """Write the start script for ``argv`` on the node (arguments as :func:`daemon_script`)."""
        script = daemon_script(
            argv, pidfile=self.pidfile, logfile=self.logfile, chdir=chdir, env=env, prelude=prelude
        )
        remote.write_file(self.start_script, script, sudo=True)

    def start(self, remote: Remote) -> None:
        res = remote.exec_raw(f"sh {shlex.quote(self.start_script)}", sudo=True, check=False)
        if not res.ok:
            why = res.stderr.strip() or f"no {self.start_script} on the node (run setup first)"
            raise DaemonError(remote.node.name, f"starting the server failed: {why}", self.log_tail(remote))

    def kill(self, remote: Remote) -> None:
        stop_daemon(remote, self.pidfile, match=self.kill_match)

    def running(self, remote: Remote) -> bool:
        return daemon_running(remote, self.pidfile)

    def pause(self, remote: Remote) -> None:
        signal_daemon(remote, self.pidfile, "STOP")

    def resume(self, remote: Remote) -> None:
        signal_daemon(remote, self.pidfile, "CONT", missing_ok=True)

    def wipe(self, remote: Remote, *paths: str) -> None:
        """Kill the server and remove ``paths`` (its state) and its log file (idempotent)."""
        self.kill(remote)
        remote.exec_raw("rm -rf " + shlex.join([*paths, self.logfile]), sudo=True)

    def log_tail(self, remote: Remote, lines: int = LOG_TAIL_LINES) -> str:
        return tail_log(remote, self.logfile, lines)

    def log_files(self, remote: Remote) -> list[str]:
        return [self.logfile]


# -- talking to the nodes' HTTP APIs, and leadership from each node's own account --------------------


def http_json(url: str, body: object = None, timeout: float = 2.0) -> Any:
    """``POST`` ``body`` as JSON to ``url`` (``GET`` when ``body`` is None) and return the decoded
    JSON answer, from the control node: the usual client of a system's HTTP API.

    Raises, so that a workload records the op right (:mod:`chaos.control.client`):
    :class:`~chaos.control.client.NotSent` (``fail``) when the request did not get out (connection
    refused, no route, connect timeout: urllib's ``URLError`` covers only connecting and sending);
    :class:`~chaos.control.client.Indeterminate` (``info``) once it did: no answer in ``timeout``
    seconds, a lost connection, or an error status (the system answered, but whether an error
    means "not done" is the system's to say; its ``status`` and the start of the body are in the
    completion's fields, and a client that knows better catches it).
    """
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(url, data, {"Content-Type": "application/json"} if data else {})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            return json.loads(resp.read())
    except urllib.error.HTTPError as e:
        text = e.read()[:300].decode(errors="replace").strip()
        raise Indeterminate(f"{url}: HTTP {e.code}: {text}", status=e.code) from None
    except urllib.error.URLError as e:
        raise NotSent(f"{url}: {e.reason}") from None
    except (OSError, ValueError) as e:  # sent: a timeout or reset while waiting, or a garbled answer
        raise Indeterminate(f"{url}: {type(e).__name__}: {e}") from None


class LeaderViews:
    """The Primary and Recovery capabilities (:mod:`chaos.control.db`) from each node's own account
    of leadership, for a Raft-like system whose nodes tell their own id and their leader's id.

    A subclass implements ``leader_view(remote) -> (own id, leader id or None)`` for one node (over
    its API from the control node, or over SSH); it may raise when the node does not answer. From
    it: ``primaries(control)``: the nodes whose leader is themselves (never raises);
    ``await_leader(control, timeout)``: the first such node, DBError after ``timeout`` s;
    ``await_recovery(control, timeout)``: waits until every node answers and names the same leader,
    which is one of the nodes, and returns the ``liveness`` record (``recovered``, ``bound_s``,
    ``waited_s``, ``leader``, ``problems`` one line each, ``nodes``: each node's view or error).
    ``recovery_timeout`` (s, default 60) is the DB's bound for that wait.
    """

    recovery_timeout = 60.0
    poll_interval_s = 0.5

    def leader_view(self, remote: Remote) -> tuple[object, object]:
        raise NotImplementedError(f"{type(self).__name__}.leader_view(remote) -> (own id, leader id)")

    def leader_views(self, control: Control) -> dict[str, tuple[Any, Any] | str]:
        """Node name -> its ``(own id, leader id)``, or the error text when it did not answer."""

        def ask(remote: Remote) -> tuple[object, object] | str:
            try:
                own, leader = self.leader_view(remote)
                return own, leader
            except Exception as e:  # noqa: BLE001 - a node that does not answer is the answer
                return f"{type(e).__name__}: {e}"

        return control.on_nodes(ask)

    def primaries(self, control: Control) -> list[str]:
        views = self.leader_views(control)
        return [n for n, v in views.items() if isinstance(v, tuple) and v[0] == v[1]]

    def await_leader(self, control: Control, timeout: float) -> str:
        deadline = time.monotonic() + timeout
        while not (leaders := self.primaries(control)):
            if time.monotonic() > deadline:
                raise DBError("cluster", f"no node claims leadership after {timeout:g}s")
            time.sleep(self.poll_interval_s)
        return leaders[0]

    def await_recovery(self, control: Control, timeout: float) -> dict[str, object]:
        t0 = time.monotonic()
        while True:
            views = self.leader_views(control)
            own = {v[0]: n for n, v in views.items() if isinstance(v, tuple)}
            named = {v[1] for v in views.values() if isinstance(v, tuple)}
            problems = [f"{n} does not answer: {v}" for n, v in views.items() if isinstance(v, str)]
            leader = own.get(next(iter(named))) if len(named) == 1 else None
            if leader is None and own:
                problems.append(
                    f"no leader all nodes agree on: {', '.join(f'{n} names {v[1]}' for n, v in views.items() if isinstance(v, tuple))}"
                )
            waited = round(time.monotonic() - t0, 3)
            if not problems or waited >= timeout:
                nodes = {
                    n: {"id": v[0], "leader": v[1]} if isinstance(v, tuple) else {"error": v}
                    for n, v in views.items()
                }
                return {
                    "recovered": not problems,
                    "bound_s": timeout,
                    "waited_s": waited,
                    "leader": leader,
                    "problems": problems,
                    "nodes": nodes,
                }
            time.sleep(self.poll_interval_s)
