"""The SSH control layer: how the control node runs commands on DB nodes (Jepsen's ``jepsen.control``).

One :class:`Remote` per node holds one reused paramiko connection; every command opens a fresh
session channel on it. A dropped connection (sshd restarted or killed, network blip) is detected when
the next command opens its channel, and the command is retried on a new connection with exponential
backoff, as Jepsen's control layer retries SSH errors. A non-zero exit raises :class:`RemoteError`
carrying node, command, exit code, stdout and stderr. :class:`Control` holds the remotes of all nodes
of a test and runs a function on them in parallel (Jepsen's ``on-nodes``).
"""

from __future__ import annotations

import logging
import os
import posixpath
import select
import shlex
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import TypeVar

import paramiko

from chaos.control.node import Node, check_unique

T = TypeVar("T")

# paramiko logs handshake failures at ERROR; without a handler Python would print them to stderr,
# and our RemoteError already says it in one line
logging.getLogger("paramiko").addHandler(logging.NullHandler())

_TAIL_LINES = 5
_EOF_GRACE = 2.0  # seconds to wait for EOF after the exit status
_TAIL_CHARS = 400


@dataclass(frozen=True)
class CmdResult:
    """Outcome of one remote command: decoded ``stdout``/``stderr`` (UTF-8, errors replaced), ``exit_code``."""

    stdout: str
    stderr: str
    exit_code: int
    node: str = ""
    cmd: str = ""

    @property
    def ok(self) -> bool:
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

    def __reduce__(self):  # picklable across processes
        return (type(self), (self.node, self.cmd, self.exit_code, self.stdout, self.stderr, self.cause))


class NodeUnreachable(RemoteError):
    """The node's sshd could not be reached or refused us (address, port, key, host key)."""

    def __init__(self, node: str, cause: str, cmd: str = "") -> None:
        super().__init__(node, cmd, None, cause=cause)

    def __reduce__(self):
        return (type(self), (self.node, self.cause, self.cmd))


class CommandTimeout(RemoteError):
    """The command did not finish within its timeout; output so far is kept."""


class _Dropped(Exception):
    """Internal: the SSH session broke under a command; the command is retried, on a new connection
    when ``transport`` (the one it ran on) is dead."""

    def __init__(self, why: str, transport: paramiko.Transport | None = None) -> None:
        super().__init__(why)
        self.transport = transport


class Remote:
    """One node's reused SSH connection.

    ``connect_timeout`` (s) bounds the TCP connect and SSH handshake; ``retries`` is how many times a
    command is re-run after a dropped connection, with backoff ``backoff * 2**attempt`` seconds.
    Thread-safe: several threads may run commands at once on the same connection (one channel each).
    """

    def __init__(
        self,
        node: Node,
        *,
        connect_timeout: float = 10.0,
        retries: int = 3,
        backoff: float = 0.2,
        keepalive: int = 5,
        max_sessions: int = 8,
    ) -> None:
        self.node = node
        self.connect_timeout = connect_timeout
        self.retries = retries
        self.backoff = backoff
        self.keepalive = keepalive
        self._client: paramiko.SSHClient | None = None
        self._sftp: paramiko.SFTPClient | None = None
        self._lock = threading.RLock()
        self.reconnects = 0  # how many times a dropped connection was re-established
        # sshd's MaxSessions defaults to 10 channels per connection; stay below it
        self._sessions = threading.BoundedSemaphore(max_sessions)

    # -- connection --------------------------------------------------------------------------------

    def _where(self) -> str:
        n = self.node
        return f"{n.user}@{n.host}:{n.port}"

    def _connect(self) -> paramiko.SSHClient:
        n = self.node
        client = paramiko.SSHClient()
        if n.strict_host_key_checking:
            client.load_system_host_keys()
            client.set_missing_host_key_policy(paramiko.RejectPolicy())
        else:
            client.set_missing_host_key_policy(paramiko.AutoAddPolicy())
        kwargs: dict = dict(
            hostname=n.host,
            port=n.port,
            username=n.user,
            timeout=self.connect_timeout,
            banner_timeout=self.connect_timeout,
            auth_timeout=self.connect_timeout,
        )
        if n.key_path:
            if not os.path.isfile(n.key_path):
                raise NodeUnreachable(n.name, f"private key {n.key_path} does not exist")
            kwargs.update(key_filename=n.key_path, look_for_keys=False, allow_agent=False)
        try:
            client.connect(**kwargs)
        except paramiko.BadHostKeyException as e:
            raise NodeUnreachable(n.name, f"{self._where()}: host key mismatch ({e})") from None
        except paramiko.AuthenticationException as e:
            key = n.key_path or "default keys/agent"
            raise NodeUnreachable(
                n.name, f"{self._where()}: authentication failed with {key} (wrong key or user?): {e}"
            ) from None
        except paramiko.SSHException as e:
            if "banner" in str(e):
                raise NodeUnreachable(
                    n.name, f"{self._where()}: unreachable (connected, but no SSH server answered: {e})"
                ) from None
            if "known_hosts" in str(e) or "not found in known" in str(e):
                raise NodeUnreachable(
                    n.name,
                    f"{self._where()}: host key unknown and strict host key checking is on "
                    f"(add it to ~/.ssh/known_hosts or pass --no-strict-host-key-checking)",
                ) from None
            raise NodeUnreachable(n.name, f"{self._where()}: SSH handshake failed: {e}") from None
        except TimeoutError:
            raise NodeUnreachable(
                n.name, f"{self._where()}: unreachable (no answer within {self.connect_timeout:g}s)"
            ) from None
        except OSError as e:
            # paramiko's NoValidConnectionsError wraps one OSError per address tried
            inner = list(getattr(e, "errors", {}).values())
            first = inner[0] if inner and isinstance(inner[0], OSError) else e
            reason = first.strerror or str(first)
            raise NodeUnreachable(n.name, f"{self._where()}: unreachable ({reason})") from None
        except ValueError as e:  # paramiko raises this for an unreadable key file
            raise NodeUnreachable(n.name, f"cannot use private key {n.key_path}: {e}") from None
        transport = client.get_transport()
        if transport is not None and self.keepalive:
            transport.set_keepalive(self.keepalive)
        return client

    def connect(self) -> Remote:
        """Open the connection now (otherwise the first command does); raises NodeUnreachable."""
        self._transport()
        return self

    def _transport(self) -> paramiko.Transport:
        with self._lock:
            if self._client is not None:
                t = self._client.get_transport()
                if t is not None and t.is_active():
                    return t
                self._drop()
                self.reconnects += 1
            for attempt in range(self.retries + 1):
                try:
                    self._client = self._connect()
                    break
                except NodeUnreachable as e:
                    # a refused or reset connection is often sshd restarting or shedding load
                    # (MaxStartups); timeouts and authentication failures are not retried
                    transient = (
                        "refused" in e.cause or "reset" in e.cause or "no SSH server answered" in e.cause
                    )
                    if not transient or attempt == self.retries:
                        raise
                    time.sleep(self.backoff * (2**attempt))
            assert self._client is not None
            t = self._client.get_transport()
            assert t is not None
            return t

    def _drop(self) -> None:
        with self._lock:
            for obj in (self._sftp, self._client):
                if obj is not None:
                    try:
                        obj.close()
                    except Exception:  # noqa: BLE001 - closing a broken connection
                        pass
            self._sftp = None
            self._client = None

    def _drop_dead(self, transport: paramiko.Transport | None, even_if_active: bool) -> bool:
        """Drop the connection if it is still the one ``transport`` belongs to and that transport
        is dead (or ``even_if_active``); True when it was dropped."""
        with self._lock:
            current = self._client.get_transport() if self._client is not None else None
            if current is None or (transport is not None and current is not transport):
                return False  # already replaced by another thread
            if current.is_active() and not even_if_active:
                return False
            self._drop()
            return True

    def close(self) -> None:
        """Close the connection; a later command reconnects."""
        self._drop()

    @property
    def connected(self) -> bool:
        with self._lock:
            t = self._client.get_transport() if self._client else None
            return bool(t and t.is_active())

    # -- commands ----------------------------------------------------------------------------------

    def wrap(self, cmd: str, sudo: bool = False) -> str:
        """The command line actually sent: ``sudo -n -- sh -c CMD`` when sudo is asked and user != root."""
        if sudo and self.node.user != "root":
            return "sudo -n -- sh -c " + shlex.quote(cmd)
        return cmd

    def exec(
        self,
        *argv: str | int | float,
        sudo: bool = False,
        timeout: float = 60.0,
        check: bool = True,
        stdin: str | bytes | None = None,
    ) -> CmdResult:
        """Run ``argv`` with each argument shell-quoted (``shlex.join``).

        ``timeout`` (s) bounds the whole command (CommandTimeout); ``check`` raises RemoteError on a
        non-zero exit; ``stdin`` is written then closed. Raises NodeUnreachable when the node cannot
        be reached after the retries.
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
        timeout: float = 60.0,
        check: bool = True,
        stdin: str | bytes | None = None,
    ) -> CmdResult:
        """Run ``cmd`` as given to the remote shell (pipes, redirections, globs are interpreted)."""
        if not isinstance(cmd, str) or not cmd.strip():
            raise ValueError(f"exec_raw: command {cmd!r}: expected a non-empty string")
        if timeout is not None and timeout <= 0:
            raise ValueError(f"exec: timeout {timeout!r}: expected a positive number of seconds")
        full = self.wrap(cmd, sudo)
        data = stdin.encode() if isinstance(stdin, str) else stdin
        attempt = 0
        while True:
            try:
                with self._sessions:
                    res = self._run_once(full, timeout, data)
                break
            except _Dropped as e:
                # a channel that timed out or closed on a live connection (a loaded node) does not
                # tear down the connection other threads' commands are running on; a second
                # failure in a row does
                if self._drop_dead(e.transport, even_if_active=attempt > 0):
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

    def _run_once(self, full: str, timeout: float, data: bytes | None) -> CmdResult:
        transport = self._transport()  # NodeUnreachable propagates: retrying a refused key is useless
        chan = None
        for attempt in range(5):
            try:
                chan = transport.open_session(timeout=self.connect_timeout)
                break
            except paramiko.ChannelException as e:  # refused channel (MaxSessions): the connection is fine
                if attempt == 4:
                    raise RemoteError(
                        self.node.name, full, None, cause=f"sshd refused a session: {e}"
                    ) from None
                time.sleep(self.backoff * (2**attempt))
            except (paramiko.SSHException, EOFError, OSError) as e:
                raise _Dropped(f"open session: {e or type(e).__name__}", transport) from None
        assert chan is not None
        out: list[bytes] = []
        err: list[bytes] = []
        deadline = time.monotonic() + timeout
        exited_at: float | None = None
        try:
            chan.exec_command(full)
            if data:
                chan.sendall(data)
            chan.shutdown_write()
            while True:
                if chan.recv_ready():
                    out.append(chan.recv(65536))
                    continue
                if chan.recv_stderr_ready():
                    err.append(chan.recv_stderr(65536))
                    continue
                # sshd may send exit-status before the last data, so finish at EOF; a background
                # child holding stdout open gets a short grace instead of the whole timeout
                if chan.exit_status_ready():
                    if chan.eof_received or chan.closed:
                        if not (chan.recv_ready() or chan.recv_stderr_ready()):
                            break
                        continue
                    if exited_at is None:
                        exited_at = time.monotonic()
                    elif time.monotonic() - exited_at > _EOF_GRACE:
                        break
                if chan.closed or not transport.is_active():
                    raise _Dropped("connection closed before the exit status", transport)
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    so, se = _dec(out), _dec(err)
                    raise CommandTimeout(
                        self.node.name, full, None, so, se, cause=f"timed out after {timeout:g}s"
                    )
                select.select([chan], [], [], min(remaining, 1.0 if exited_at is None else 0.05))
            code = chan.recv_exit_status()
        except (paramiko.SSHException, EOFError, OSError) as e:
            raise _Dropped(f"{type(e).__name__}: {e}", transport) from None
        finally:
            chan.close()
        if code == -1:  # sshd went away without sending an exit status
            raise _Dropped("no exit status", transport)
        return CmdResult(_dec(out), _dec(err), code, self.node.name, full)

    # -- files -------------------------------------------------------------------------------------

    def _sftp_client(self) -> paramiko.SFTPClient:
        with self._lock:
            t = self._transport()
            ch = self._sftp.get_channel() if self._sftp is not None else None
            if self._sftp is None or ch is None or ch.closed:
                try:
                    self._sftp = paramiko.SFTPClient.from_transport(t)
                except (paramiko.SSHException, EOFError, OSError) as e:
                    raise _Dropped(f"sftp: {e}") from None
            assert self._sftp is not None
            return self._sftp

    def _with_sftp(self, what: str, fn: Callable[[paramiko.SFTPClient], None]) -> None:
        for attempt in range(self.retries + 1):
            try:
                fn(self._sftp_client())
                return
            except (_Dropped, paramiko.SSHException, EOFError):
                pass  # the connection broke under the transfer: reconnect and start over
            self._drop()
            time.sleep(self.backoff * (2**attempt))
        raise RemoteError(self.node.name, what, None, cause="SSH session lost during file transfer")

    def upload(self, local: str | os.PathLike[str], remote: str, sudo: bool = False) -> None:
        """Copy the local file to ``remote`` over SFTP (Jepsen's ``upload``).

        With ``sudo`` and a non-root user the file goes to /tmp first and is moved with sudo.
        Raises FileNotFoundError for a missing local file, RemoteError for remote failures.
        """
        local = os.fspath(local)
        if not os.path.isfile(local):
            raise FileNotFoundError(f"upload to {self.node.name}: local file {local} does not exist")
        target = remote
        if sudo and self.node.user != "root":
            target = f"/tmp/chaos-upload-{uuid.uuid4().hex}"

        def put(sftp: paramiko.SFTPClient) -> None:
            try:
                sftp.put(local, target)
            except OSError as e:
                if isinstance(e, (EOFError, paramiko.SSHException)):
                    raise
                raise RemoteError(self.node.name, f"sftp put {target}", None, cause=str(e)) from None

        self._with_sftp(f"sftp put {target}", put)
        if target != remote:
            self.exec("mv", "-f", target, remote, sudo=True)

    def download(self, remote: str, local: str | os.PathLike[str]) -> None:
        """Copy the remote file to ``local`` over SFTP; the local directory is created if needed."""
        local = os.fspath(local)
        os.makedirs(os.path.dirname(os.path.abspath(local)), exist_ok=True)

        def get(sftp: paramiko.SFTPClient) -> None:
            try:
                sftp.get(remote, local)
            except OSError as e:
                if isinstance(e, (EOFError, paramiko.SSHException)):
                    raise
                raise RemoteError(self.node.name, f"sftp get {remote}", None, cause=str(e)) from None

        self._with_sftp(f"sftp get {remote}", get)

    def write_file(self, remote: str, content: str | bytes, sudo: bool = False) -> None:
        """Write ``content`` to the remote file (via ``cat >``; creates parent directories)."""
        d = posixpath.dirname(remote) or "."
        self.exec_raw(
            f"mkdir -p {shlex.quote(d)} && cat > {shlex.quote(remote)}", sudo=sudo, stdin=content or b""
        )

    def __repr__(self) -> str:
        return f"Remote({self.node.name} {self._where()})"


def _dec(chunks: list[bytes]) -> str:
    return b"".join(chunks).decode("utf-8", errors="replace")


class Control:
    """The remotes of all nodes of a test (Jepsen's control session map).

    ``nodes``: the test's nodes (unique names). Remotes connect lazily; :meth:`connect_all` opens all
    connections in parallel and raises the first NodeUnreachable.
    """

    def __init__(
        self,
        nodes: Sequence[Node],
        *,
        connect_timeout: float = 10.0,
        retries: int = 3,
        backoff: float = 0.2,
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
            n.name: Remote(n, connect_timeout=connect_timeout, retries=retries, backoff=backoff)
            for n in nodes
        }

    @property
    def names(self) -> list[str]:
        return [n.name for n in self.nodes]

    def remote(self, name: str) -> Remote:
        """The Remote of node ``name``; ValueError naming the known nodes otherwise."""
        try:
            return self._remotes[name]
        except KeyError:
            raise ValueError(f"unknown node {name!r}; expected one of {', '.join(self.names)}") from None

    def node(self, name: str) -> Node:
        return self.remote(name).node

    def on_nodes(self, fn: Callable[[Remote], T], names: Iterable[str] | None = None) -> dict[str, T]:
        """Run ``fn(remote)`` on every node (or ``names``) in parallel threads; returns name -> result.

        If any call raises, all are still awaited, then the exception of the first failing node (in
        node order) is raised, with the other nodes' failures added as notes.
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

    def exec_all(self, *argv: str | int | float, **kw) -> dict[str, CmdResult]:
        """``exec`` on all nodes in parallel; name -> CmdResult."""
        return self.on_nodes(lambda r: r.exec(*argv, **kw))

    def connect_all(self) -> None:
        """Connect to every node in parallel; raises NodeUnreachable for the first failing node."""
        self.on_nodes(lambda r: r.connect())

    def close(self) -> None:
        for r in self._remotes.values():
            r.close()

    def __enter__(self) -> Control:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
