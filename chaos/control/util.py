"""Daemon helpers over SSH: Jepsen's ``jepsen.control.util`` (``start-daemon!``, ``stop-daemon!``,
``daemon-running?``, ``signal!``, ``await-tcp-port``) for any system under test.

A daemon is identified by its **pidfile** on the node. :func:`start_daemon` runs a program detached
from the SSH session (``setsid``, stdin from ``/dev/null``, stdout and stderr appended to a **log
file**) and writes its pid; the other helpers act on that pid. Every helper takes a
:class:`~chaos.control.ssh.Remote` and runs its commands with ``sudo``. The node needs a POSIX ``sh``,
``setsid``, ``kill``, ``tail`` (util-linux, procps, coreutils: in every Debian) and, for
:func:`await_tcp_port`, ``bash`` (its ``/dev/tcp``) and coreutils ``timeout``.

Errors: a failed step raises :class:`DaemonError` (a :class:`~chaos.cluster.db.DBError`, so a DB may
let it through) naming the node and carrying the log tail; SSH failures raise
:class:`~chaos.control.ssh.RemoteError` unchanged.
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from chaos.cluster.db import DBError

if TYPE_CHECKING:
    from chaos.control.ssh import Remote

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
    res = remote.exec_raw(f"kill -{signal} $(cat {p} 2>/dev/null) 2>&1", sudo=True, check=False)
    if res.ok:
        return True
    if missing_ok:
        return False
    why = res.stdout.strip() or res.stderr.strip() or "no process"
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
