"""The SSH control layer: how the control node runs commands on DB nodes (Jepsen's ``jepsen.control``).

Built on fabric (paramiko underneath). One :class:`Remote` per node holds one reused
``fabric.Connection``; every command is a ``Connection.run`` on a fresh session channel of it, and
files move with ``Connection.put``/``get`` over the connection's SFTP session. :class:`Control` holds
the remotes of all nodes of a test and runs a function on them in parallel (Jepsen's ``on-nodes``).

The rules fabric does not have, kept from Jepsen's control layer and this project's experience:

- a command whose session breaks under it (sshd restarted or killed, network blip) is re-run, on a
  new connection when the old one is dead, with exponential backoff (``retries``, ``backoff``);
- a channel that times out or closes on a live connection is retried on that connection, because
  other threads' commands are running on it; the connection is dropped only when its transport is
  dead or the same command fails twice in a row;
- at most ``max_sessions`` commands run at once on one connection (sshd's ``MaxSessions``, 10 by
  default, also counts the SFTP session);
- a non-zero exit raises :class:`RemoteError` carrying node, command, exit code, stdout and stderr.

Every command has a timeout: the per-call ``timeout=`` argument, else the remote's default
(``Remote(timeout=...)``, ``Control(nodes, timeout=...)``, :data:`DEFAULT_TIMEOUT` = 60 s). Give
slow steps (a first ``apt-get install``, a large download) their own, e.g. ``timeout=600``.
"""

from __future__ import annotations

import codecs
import contextlib
import io
import logging
import os
import posixpath
import shlex
import threading
import time
import uuid
from collections.abc import Callable, Generator, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import IO, TypeVar

import fabric
import fabric.runners
import paramiko
from invoke.exceptions import CommandTimedOut, ThreadException

from chaos.control.node import Node, check_unique

T = TypeVar("T")

# paramiko logs handshake failures at ERROR; without a handler Python would print them to stderr,
# and our RemoteError already says it in one line
logging.getLogger("paramiko").addHandler(logging.NullHandler())

DEFAULT_TIMEOUT = 60.0
"""Seconds a command or an SFTP wait may take when neither the call nor the Remote says otherwise."""
DEFAULT_CONNECT_TIMEOUT = 10.0
"""Seconds for the TCP connect, the SSH banner, authentication, and opening one session channel."""
DEFAULT_MAX_SESSIONS = 8
"""Commands running at once on one connection; below sshd's MaxSessions (10), one left for SFTP."""

_TAIL_LINES = 5
_EOF_GRACE = 2.0  # seconds to wait for EOF after the exit status
_TAIL_CHARS = 400
_CHANNEL_OPEN_TRIES = 5  # sshd refusing a session (MaxSessions reached by another client)


@dataclass(frozen=True)
class CmdResult:
    """Outcome of one remote command: decoded ``stdout``/``stderr`` (UTF-8, errors replaced),
    ``exit_code``, the ``node`` name and the command line ``cmd`` as sent (after sudo wrapping)."""

    stdout: str
    stderr: str
    exit_code: int
    node: str = ""
    cmd: str = ""

    @property
    def ok(self) -> bool:
        """True when the exit code is 0."""
        return self.exit_code == 0


def _tail(text: str) -> str:
    lines = [ln for ln in text.strip().splitlines() if ln.strip()]
    tail = " | ".join(lines[-_TAIL_LINES:])
    return tail if len(tail) <= _TAIL_CHARS else "..." + tail[-_TAIL_CHARS:]


class RemoteError(Exception):
    """A remote command failed, or the node could not be reached.

    Fields: ``node`` (name), ``cmd`` (the command line as sent, '' for connection failures),
    ``exit_code`` (int, or None when there is no exit status: unreachable, timeout, lost session),
    ``stdout``, ``stderr``, ``cause`` (short reason). ``str()`` is one line: node, command, cause and
    the stderr tail.
    """

    def __init__(
        self,
        node: str,
        cmd: str,
        exit_code: int | None,
        stdout: str = "",
        stderr: str = "",
        cause: str | None = None,
    ) -> None:
        self.node = node
        self.cmd = cmd
        self.exit_code = exit_code
        self.stdout = stdout
        self.stderr = stderr
        self.cause = cause or (f"exit status {exit_code}" if exit_code is not None else "failed")
        super().__init__(self._line())

    def _line(self) -> str:
        shown = self.cmd if len(self.cmd) <= 160 else self.cmd[:157] + "..."
        parts = [f"{self.node}:"]
        if shown:
            parts.append(f"`{shown}`")
        parts.append(self.cause)
        msg = " ".join(parts)
        tail = _tail(self.stderr) or (_tail(self.stdout) if self.exit_code else "")
        return f"{msg}: {tail}" if tail else msg

    def __reduce__(self) -> tuple[object, ...]:  # picklable across processes
        return (type(self), (self.node, self.cmd, self.exit_code, self.stdout, self.stderr, self.cause))


class NodeUnreachable(RemoteError):
    """The node's sshd could not be reached or refused us (address, port, key, host key)."""

    def __init__(self, node: str, cause: str, cmd: str = "") -> None:
        super().__init__(node, cmd, None, cause=cause)

    def __reduce__(self) -> tuple[object, ...]:
        return (type(self), (self.node, self.cause, self.cmd))


class CommandTimeout(RemoteError):
    """The command (or an SFTP wait) did not finish within its timeout; output so far is kept.
    ``exit_code`` is None."""


class _Dropped(Exception):
    """Internal: the SSH session broke under a command; the command is retried, on a new connection
    when ``conn`` (the connection it ran on) is dead."""

    def __init__(self, why: str, conn: _Connection | None = None) -> None:
        super().__init__(why)
        self.conn = conn


class _Runner(fabric.runners.Remote):  # type: ignore[misc]  # fabric ships no type information
    """fabric's remote runner with three changes a control layer needs.

    - stdin is sent whole as bytes, then EOF (invoke reads a non-terminal stream one character per
      10 ms and re-encodes it as text);
    - output is decoded incrementally as UTF-8, so a character split between two reads is not
      replaced, and no responder scan runs over the growing buffer after every read (invoke's
      ``respond``, quadratic in the output size; this layer uses no watchers);
    - after the exit status, EOF is awaited for :data:`_EOF_GRACE` seconds only: a background child
      still holding stdout open (``daemon &``) does not stall the command until its timeout.
    """

    read_chunk_size = 65536

    def handle_stdin(self, input_: IO[bytes], output: IO[str], echo: bool = False) -> None:
        data = input_.read()
        try:
            if data:
                self._write_proc_stdin(data)
            self.close_proc_stdin()
        except (OSError, EOFError, paramiko.SSHException):
            pass  # the channel closed under us (timeout or lost connection): the exit status says which

    def read_proc_output(self, reader: Callable[[int], bytes]) -> Generator[str, None, None]:
        decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        while True:
            data = reader(self.read_chunk_size)
            text = decoder.decode(data or b"", final=not data)
            if text:
                yield text
            if not data:
                return

    def respond(self, buffer_: list[str]) -> None:
        if self.watchers:
            super().respond(buffer_)

    def wait(self) -> None:
        super().wait()
        chan = self.channel
        deadline = time.monotonic() + _EOF_GRACE
        while not (chan.eof_received or chan.closed) and time.monotonic() < deadline:
            if self.has_dead_threads:
                break
            time.sleep(self.input_sleep)
        if not (chan.eof_received or chan.closed):
            chan.close()  # ends the readers; the exit status already received is kept


class _Connection(fabric.Connection):  # type: ignore[misc]  # fabric ships no type information
    """A ``fabric.Connection`` that never reconnects by itself: every ``run``/``sftp`` opens the
    connection if needed, which would silently replace a dead one outside :class:`Remote`'s lock and
    retry rules. Once opened, a dead connection raises :class:`_Dropped` instead."""

    def open(self) -> object:
        if self.transport is not None and not self.is_connected:
            raise _Dropped("connection closed", self)
        return super().open()


def _fabric_config() -> fabric.Config:
    # lazy: no ~/.ssh/config, /etc/fabric.yml or the like; a node is exactly what its Node says
    return fabric.Config(lazy=True, overrides={"load_ssh_configs": False, "runners": {"remote": _Runner}})


def _positive(what: str, seconds: float) -> float:
    if isinstance(seconds, bool) or not isinstance(seconds, (int, float)) or not seconds > 0:
        raise ValueError(f"{what} {seconds!r}: expected a positive number of seconds")
    return float(seconds)


class Remote:
    """One node's reused SSH connection (a ``fabric.Connection``).

    - ``node``: where and as whom to connect (host, port, user, key, strict host key checking).
    - ``timeout`` (s, default 60): the default bound of each command and each SFTP wait; every
      method also takes its own ``timeout=``. The attribute may be changed later.
    - ``connect_timeout`` (s, default 10): bounds the TCP connect, the SSH banner, authentication and
      opening each session channel.
    - ``retries`` (default 3): how many times a command is re-run after its session broke, and a
      refused or reset connection attempt is repeated; backoff ``backoff * 2**attempt`` seconds
      (``backoff`` default 0.2).
    - ``keepalive`` (s, default 5; 0 = off): SSH keepalive interval, so idle connections survive NAT.
    - ``max_sessions`` (default 8): commands running at once on the connection; more wait.

    Thread-safe: several threads may run commands at once on the same connection (one channel each).
    Raises ValueError for a non-positive timeout.
    """

    def __init__(
        self,
        node: Node,
        *,
        timeout: float = DEFAULT_TIMEOUT,
        connect_timeout: float = DEFAULT_CONNECT_TIMEOUT,
        retries: int = 3,
        backoff: float = 0.2,
        keepalive: int = 5,
        max_sessions: int = DEFAULT_MAX_SESSIONS,
    ) -> None:
        self.node = node
        self.timeout = _positive("timeout", timeout)
        self.connect_timeout = _positive("connect_timeout", connect_timeout)
        self.retries = retries
        self.backoff = backoff
        self.keepalive = keepalive
        self._conn: _Connection | None = None
        self._lock = threading.RLock()
        self.reconnects = 0  # how many times a dropped connection was re-established
        self._sessions = threading.BoundedSemaphore(max_sessions)

    # -- connection --------------------------------------------------------------------------------

    def _where(self) -> str:
        n = self.node
        return f"{n.user}@{n.host}:{n.port}"

    def _open(self) -> _Connection:
        """A new, opened connection; NodeUnreachable with the reason in one line otherwise."""
        n = self.node
        timeout = self.connect_timeout
        connect_kwargs: dict[str, object] = dict(
            timeout=timeout, banner_timeout=timeout, auth_timeout=timeout, channel_timeout=timeout
        )
        if n.key_path:
            if not os.path.isfile(n.key_path):
                raise NodeUnreachable(n.name, f"private key {n.key_path} does not exist")
            connect_kwargs.update(key_filename=n.key_path, look_for_keys=False, allow_agent=False)
        conn = _Connection(
            n.host, user=n.user, port=n.port, config=_fabric_config(), connect_kwargs=connect_kwargs
        )
        if n.strict_host_key_checking:
            conn.client.load_system_host_keys()
            conn.client.set_missing_host_key_policy(paramiko.RejectPolicy())
        try:
            conn.open()
        except BaseException as e:
            conn.client.close()  # the half-open transport's thread and socket
            raise self._unreachable(e) from None
        if self.keepalive:
            conn.transport.set_keepalive(self.keepalive)
        return conn

    def _unreachable(self, e: BaseException) -> BaseException:
        """The NodeUnreachable saying why connecting failed (``e`` itself if it is not a connect error)."""
        n, where = self.node, self._where()
        if isinstance(e, paramiko.BadHostKeyException):
            return NodeUnreachable(n.name, f"{where}: host key mismatch ({e})")
        if isinstance(e, paramiko.AuthenticationException):
            key = n.key_path or "default keys/agent"
            return NodeUnreachable(
                n.name, f"{where}: authentication failed with {key} (wrong key or user?): {e}"
            )
        if isinstance(e, paramiko.SSHException):
            if "banner" in str(e):
                return NodeUnreachable(
                    n.name, f"{where}: unreachable (connected, but no SSH server answered: {e})"
                )
            if "known_hosts" in str(e) or "not found in known" in str(e):
                return NodeUnreachable(
                    n.name,
                    f"{where}: host key unknown and strict host key checking is on "
                    f"(add it to ~/.ssh/known_hosts or pass --no-strict-host-key-checking)",
                )
            return NodeUnreachable(n.name, f"{where}: SSH handshake failed: {e}")
        if isinstance(e, TimeoutError):
            return NodeUnreachable(
                n.name, f"{where}: unreachable (no answer within {self.connect_timeout:g}s)"
            )
        if isinstance(e, OSError):
            # paramiko's NoValidConnectionsError wraps one OSError per address tried
            inner = list(getattr(e, "errors", {}).values())
            first = inner[0] if inner and isinstance(inner[0], OSError) else e
            return NodeUnreachable(n.name, f"{where}: unreachable ({first.strerror or first})")
        if isinstance(e, ValueError):  # paramiko raises this for an unreadable key file
            return NodeUnreachable(n.name, f"cannot use private key {n.key_path}: {e}")
        return e

    def connect(self) -> Remote:
        """Open the connection now (otherwise the first command does) and return self.

        Bounded by ``connect_timeout`` per attempt; a refused or reset attempt (sshd restarting or
        shedding load) is repeated ``retries`` times. Raises NodeUnreachable.
        """
        self._connection()
        return self

    def _connection(self) -> _Connection:
        with self._lock:
            if self._conn is not None:
                if self._conn.is_connected:
                    return self._conn
                self._drop()
                self.reconnects += 1
            for attempt in range(self.retries + 1):
                try:
                    self._conn = self._open()
                    return self._conn
                except NodeUnreachable as e:
                    # timeouts and authentication failures are not retried
                    transient = (
                        "refused" in e.cause or "reset" in e.cause or "no SSH server answered" in e.cause
                    )
                    if not transient or attempt == self.retries:
                        raise
                    time.sleep(self.backoff * (2**attempt))
            raise AssertionError("unreachable: the last attempt returns or raises")

    def _drop(self) -> None:
        with self._lock:
            if self._conn is not None:
                try:
                    self._conn.close()  # its SFTP session too
                except Exception:  # noqa: BLE001 - closing a broken connection
                    pass
            self._conn = None

    def _drop_dead(self, conn: _Connection | None, even_if_active: bool) -> bool:
        """Drop the connection if it is still ``conn`` and that connection is dead (or
        ``even_if_active``); True when it was dropped."""
        with self._lock:
            current = self._conn
            if current is None or (conn is not None and current is not conn):
                return False  # already replaced by another thread
            if current.is_connected and not even_if_active:
                return False
            self._drop()
            return True

    def close(self) -> None:
        """Close the connection; a later command reconnects."""
        self._drop()

    @property
    def connected(self) -> bool:
        """True while the connection is open and its transport alive."""
        with self._lock:
            return bool(self._conn is not None and self._conn.is_connected)

    # -- commands ----------------------------------------------------------------------------------

    def wrap(self, cmd: str, sudo: bool = False) -> str:
        """The command line actually sent: ``sudo -n -- sh -c CMD`` when sudo is asked and user != root.

        Not fabric's ``Connection.sudo``: that one runs ``sudo -S`` (a password read from the
        command's stdin, which carries our ``stdin=`` data) without a shell (so ``a | b`` would run
        only ``a`` as root); ``-n`` fails at once where a password would be asked.
        """
        if sudo and self.node.user != "root":
            return "sudo -n -- sh -c " + shlex.quote(cmd)
        return cmd

    def exec(
        self,
        *argv: str | int | float,
        sudo: bool = False,
        timeout: float | None = None,
        check: bool = True,
        stdin: str | bytes | None = None,
    ) -> CmdResult:
        """Run ``argv`` with each argument shell-quoted (``shlex.join``); Jepsen's ``exec``.

        - ``sudo``: run as root (``sudo -n``) unless the node's user is root.
        - ``timeout`` (s): bound of the whole command; None means the remote's default
          (``self.timeout``, 60 s unless set). Past it the channel is closed and CommandTimeout is
          raised with the output so far (the remote process may go on running).
        - ``check``: raise RemoteError on a non-zero exit; with False the CmdResult says it.
        - ``stdin``: bytes (or text, sent as UTF-8) written to the command's stdin, then EOF;
          without it stdin is empty.

        Returns a CmdResult. Raises ValueError for no argument or a non-positive timeout,
        NodeUnreachable when the node cannot be reached after the retries, RemoteError for a
        non-zero exit (with ``check``) or a session lost more than ``retries`` times.
        """
        if not argv:
            raise ValueError("exec: expected at least one argument (the program)")
        return self.exec_raw(
            shlex.join(str(a) for a in argv), sudo=sudo, timeout=timeout, check=check, stdin=stdin
        )

    def exec_raw(
        self,
        cmd: str,
        sudo: bool = False,
        timeout: float | None = None,
        check: bool = True,
        stdin: str | bytes | None = None,
    ) -> CmdResult:
        """Run ``cmd`` as given to the remote shell (pipes, redirections, globs are interpreted).

        Arguments, result and errors as :meth:`exec`. A command whose session broke under it is
        re-run (so it should be safe to repeat), up to ``retries`` times.
        """
        if not isinstance(cmd, str) or not cmd.strip():
            raise ValueError(f"exec_raw: command {cmd!r}: expected a non-empty string")
        limit = self.timeout if timeout is None else _positive("exec: timeout", timeout)
        full = self.wrap(cmd, sudo)
        data = stdin.encode() if isinstance(stdin, str) else stdin or b""
        attempt = 0
        while True:
            try:
                with self._sessions:
                    res = self._run_once(full, limit, data)
                break
            except _Dropped as e:
                # a channel that timed out or closed on a live connection (a loaded node) does not
                # tear down the connection other threads' commands are running on; a second
                # failure in a row does
                if self._drop_dead(e.conn, even_if_active=attempt > 0):
                    self.reconnects += 1
                if attempt >= self.retries:
                    raise RemoteError(
                        self.node.name, full, None, cause=f"SSH session lost {attempt + 1} times: {e}"
                    ) from None
                time.sleep(self.backoff * (2**attempt))
                attempt += 1
        if check and res.exit_code != 0:
            raise RemoteError(self.node.name, full, res.exit_code, res.stdout, res.stderr)
        return res

    def _run_once(self, full: str, timeout: float, data: bytes) -> CmdResult:
        conn = self._connection()  # NodeUnreachable propagates: retrying a refused key is useless
        for attempt in range(_CHANNEL_OPEN_TRIES):
            try:
                result = conn.run(
                    full,
                    hide=True,
                    warn=True,
                    pty=False,
                    echo=False,
                    timeout=timeout,
                    in_stream=io.BytesIO(data),
                    encoding="utf-8",
                )
                break
            except paramiko.ChannelException as e:  # refused channel (MaxSessions): the connection is fine
                if attempt == _CHANNEL_OPEN_TRIES - 1:
                    raise RemoteError(
                        self.node.name, full, None, cause=f"sshd refused a session: {e}"
                    ) from None
                time.sleep(self.backoff * (2**attempt))
            except CommandTimedOut as e:
                out = e.result
                raise CommandTimeout(
                    self.node.name, full, None, out.stdout, out.stderr, cause=f"timed out after {timeout:g}s"
                ) from None
            except _Dropped:
                raise
            except ThreadException as e:
                inner = "; ".join(f"{w.type.__name__}: {w.value}" for w in e.exceptions)
                raise _Dropped(inner, conn) from None
            except (paramiko.SSHException, EOFError, OSError) as e:
                raise _Dropped(f"{type(e).__name__}: {e}", conn) from None
        if result.exited == -1:  # the channel closed without an exit status: sshd or the link went away
            raise _Dropped("connection closed before the exit status", conn)
        return CmdResult(result.stdout, result.stderr, result.exited, self.node.name, full)

    # -- files -------------------------------------------------------------------------------------

    def _transfer(self, what: str, timeout: float | None, fn: Callable[[_Connection], object]) -> None:
        """Run ``fn(connection)`` (an SFTP transfer) with the retry rules of commands."""
        limit = self.timeout if timeout is None else _positive(f"{what}: timeout", timeout)
        for attempt in range(self.retries + 1):
            conn = self._connection()
            try:
                with self._lock:  # fabric memoizes one SFTP session; two threads must not open two
                    sftp = conn.sftp()
                sftp.get_channel().settimeout(limit)
                fn(conn)
                return
            except TimeoutError:
                self._forget_sftp(conn)  # a reply may still arrive: that SFTP session is out of step
                raise CommandTimeout(
                    self.node.name, what, None, cause=f"no SFTP answer within {limit:g}s"
                ) from None
            except (_Dropped, paramiko.SSHException, EOFError):
                pass  # the session broke under the transfer: start over
            except OSError as e:  # the remote file: missing, no permission, a directory
                raise RemoteError(self.node.name, what, None, cause=str(e)) from None
            if self._drop_dead(conn, even_if_active=attempt > 0):
                self.reconnects += 1
            else:
                self._forget_sftp(conn)
            time.sleep(self.backoff * (2**attempt))
        raise RemoteError(self.node.name, what, None, cause="SSH session lost during file transfer")

    def _forget_sftp(self, conn: _Connection) -> None:
        """Close the connection's memoized SFTP session so the next ``sftp()`` opens a new one (what
        ``fabric.Connection.close`` does to it, without closing the connection)."""
        with self._lock:
            sftp = conn._sftp
            conn._sftp = None
        if sftp is not None:
            try:
                sftp.close()
            except Exception:  # noqa: BLE001 - closing a broken session
                pass

    def upload(
        self,
        local: str | os.PathLike[str],
        remote: str,
        sudo: bool = False,
        timeout: float | None = None,
    ) -> None:
        """Copy the local file to the remote path over SFTP (``Connection.put``; Jepsen's ``upload``).

        ``remote`` is a file path (an existing directory receives the file under its local name);
        the file is replaced if present. With ``sudo`` and a non-root user the file goes to /tmp
        first and is moved into place with ``sudo mv``. ``timeout`` (s; None = the remote's
        default) bounds each wait for an SFTP answer and the ``mv``, not the whole transfer.

        Raises FileNotFoundError for a missing local file, CommandTimeout, RemoteError for remote
        failures (no such directory, no permission, session lost more than ``retries`` times),
        NodeUnreachable.
        """
        local = os.fspath(local)
        if not os.path.isfile(local):
            raise FileNotFoundError(f"upload to {self.node.name}: local file {local} does not exist")
        target = remote
        if sudo and self.node.user != "root":
            target = f"/tmp/chaos-upload-{uuid.uuid4().hex}"
        self._transfer(
            f"sftp put {target}", timeout, lambda conn: conn.put(local, target, preserve_mode=False)
        )
        if target != remote:
            self.exec("mv", "-f", target, remote, sudo=True, timeout=timeout)

    def download(self, remote: str, local: str | os.PathLike[str], timeout: float | None = None) -> None:
        """Copy the remote file to ``local`` over SFTP (``Connection.get``; Jepsen's ``download``).

        Missing local directories are created; a failed copy leaves no local file behind (none
        existed before). ``timeout`` (s; None = the remote's default) bounds
        each wait for an SFTP answer, not the whole transfer. Raises RemoteError for a missing or
        unreadable remote file or a session lost more than ``retries`` times, CommandTimeout,
        NodeUnreachable.
        """
        # fabric formats {host}, {basename} ... into a local path: keep braces literal
        path = os.fspath(local).replace("{", "{{").replace("}", "}}")
        existed = os.path.exists(local)
        try:
            self._transfer(
                f"sftp get {remote}", timeout, lambda conn: conn.get(remote, path, preserve_mode=False)
            )
        except BaseException:
            # SFTP opens the local file before it learns the remote one is missing: a failed copy
            # must not leave an empty file that reads as an empty log
            if not existed:
                with contextlib.suppress(OSError):
                    os.remove(local)
            raise

    def write_file(
        self, remote: str, content: str | bytes, sudo: bool = False, timeout: float | None = None
    ) -> None:
        """Write ``content`` (text as UTF-8, or bytes) to the remote file, creating its parent
        directories (``mkdir -p`` and ``cat >``, through sudo with ``sudo``).

        ``timeout`` (s; None = the remote's default) bounds the command. Errors as :meth:`exec`.
        """
        d = posixpath.dirname(remote) or "."
        self.exec_raw(
            f"mkdir -p {shlex.quote(d)} && cat > {shlex.quote(remote)}",
            sudo=sudo,
            stdin=content or b"",
            timeout=timeout,
        )

    def __repr__(self) -> str:
        return f"Remote({self.node.name} {self._where()})"


class Control:
    """The remotes of all nodes of a test (Jepsen's control session map).

    - ``nodes``: the test's nodes (unique names).
    - ``timeout`` (s, default 60): every remote's default command/SFTP timeout; a call's own
      ``timeout=`` wins.
    - ``connect_timeout``, ``retries``, ``backoff``, ``max_sessions``: as :class:`Remote`.

    Remotes connect lazily; :meth:`connect_all` opens all connections in parallel. Raises
    ValueError for no nodes, duplicate names or a non-positive timeout, TypeError for a non-Node.
    """

    def __init__(
        self,
        nodes: Sequence[Node],
        *,
        timeout: float = DEFAULT_TIMEOUT,
        connect_timeout: float = DEFAULT_CONNECT_TIMEOUT,
        retries: int = 3,
        backoff: float = 0.2,
        max_sessions: int = DEFAULT_MAX_SESSIONS,
    ) -> None:
        nodes = list(nodes)
        if not nodes:
            raise ValueError("Control: expected at least one node")
        for n in nodes:
            if not isinstance(n, Node):
                raise TypeError(f"Control: {n!r} is not a chaos.control.node.Node")
        check_unique(nodes)
        self.nodes: list[Node] = nodes
        self._remotes = {
            n.name: Remote(
                n,
                timeout=timeout,
                connect_timeout=connect_timeout,
                retries=retries,
                backoff=backoff,
                max_sessions=max_sessions,
            )
            for n in nodes
        }

    @property
    def names(self) -> list[str]:
        """The node names, in the order given."""
        return [n.name for n in self.nodes]

    def remote(self, name: str | Node) -> Remote:
        """The Remote of node ``name`` (a name, or a :class:`Node` of this control: its name is
        looked up); ValueError naming the known nodes otherwise."""
        key = name.name if isinstance(name, Node) else name
        try:
            return self._remotes[key]
        except (KeyError, TypeError):
            raise ValueError(f"unknown node {key!r}; expected one of {', '.join(self.names)}") from None

    def node(self, name: str | Node) -> Node:
        """The Node called ``name`` (a name or a Node, as :meth:`remote`); ValueError as :meth:`remote`."""
        return self.remote(name).node

    def on_nodes(self, fn: Callable[[Remote], T], names: Iterable[str] | None = None) -> dict[str, T]:
        """Run ``fn(remote)`` on every node (or ``names``) in parallel threads; returns name -> result
        (Jepsen's ``on-nodes``).

        If any call raises, all are still awaited, then the exception of the first failing node (in
        node order) is raised, with the other nodes' failures added as notes (``__notes__``). A
        thread pool, not ``fabric.ThreadingGroup``: a group runs one command on its own connections,
        where ``fn`` is any Python function of this layer's remotes. Raises ValueError for an
        unknown name.
        """
        chosen = self.names if names is None else list(names)
        remotes = [self.remote(n) for n in chosen]
        if not remotes:
            return {}
        if len(remotes) == 1:
            return {chosen[0]: fn(remotes[0])}
        with ThreadPoolExecutor(max_workers=len(remotes), thread_name_prefix="on-nodes") as pool:
            futs = {r.node.name: pool.submit(fn, r) for r in remotes}
        results: dict[str, T] = {}
        errors: dict[str, BaseException] = {}
        for name, f in futs.items():
            e = f.exception()
            if e is not None:
                errors[name] = e
            else:
                results[name] = f.result()
        if errors:
            first_name, first = next(iter(errors.items()))
            for name, e in errors.items():
                if name != first_name:
                    first.add_note(f"also failed on {name}: {e}")
            raise first
        return results

    def exec_all(
        self,
        *argv: str | int | float,
        sudo: bool = False,
        timeout: float | None = None,
        check: bool = True,
        stdin: str | bytes | None = None,
    ) -> dict[str, CmdResult]:
        """:meth:`Remote.exec` on all nodes in parallel (arguments as there); name -> CmdResult.
        Errors as :meth:`on_nodes`."""
        return self.on_nodes(lambda r: r.exec(*argv, sudo=sudo, timeout=timeout, check=check, stdin=stdin))

    def connect_all(self) -> None:
        """Connect to every node in parallel; raises the first failing node's NodeUnreachable
        (others as notes)."""
        self.on_nodes(lambda r: r.connect())

    def close(self) -> None:
        """Close every connection; later commands reconnect."""
        for r in self._remotes.values():
            r.close()

    def __enter__(self) -> Control:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
