"""One run per cluster: a lock file on every node, held for a run's lifetime.

Two runs on one cluster at once corrupt each other (different builds deployed, one run's teardown
wiping the other's data). A run therefore creates :data:`LOCK_PATH` on every node, over SSH, in node
order, each atomically (``set -C``: the shell's O_EXCL create), holding one JSON line that names it::

    {"run": "register-partition-ring", "store": "/abs/store", "host": "ctl", "pid": 4242,
     "pid_start": 123456, "started": "2026-11-23T20:01:02+0000", "token": "<uuid4>"}

It works the same for the docker and the ssh provider. A node whose file already exists refuses;
the run then releases what it took and fails with :class:`ClusterLocked`, naming the holder. A lock
left by a run that was SIGKILLed on this same control host (its pid is gone, or now belongs to a
process that started at another time) is stale and is replaced with a warning (removed under
``flock`` only if it still carries the stale token, then created anew with ``set -C``, so of two
runs replacing it at once exactly one gets it); a lock left by
another host is cleared only with ``break_lock`` (``chaos run --break-lock``). Releasing removes
only files carrying this run's token.
"""

from __future__ import annotations

import json
import os
import shlex
import socket
import time
import uuid
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from chaos.errors import Refused

if TYPE_CHECKING:
    from chaos.control.ssh import Control, Remote

LOCK_DIR = "/var/lib/chaos"
LOCK_PATH = f"{LOCK_DIR}/run.lock"
_ACTIVE: set[str] = set()  # tokens of the locks this process holds now


class ClusterLocked(Refused):
    """Another run holds the cluster. ``holder`` is its lock record (dict), ``node`` where it was seen."""

    def __init__(self, node: str, holder: dict[str, object], hint: str | None = None) -> None:
        self.node = node
        self.holder = holder
        super().__init__(
            f"the cluster is in use by run {describe(holder)} (lock {LOCK_PATH} on {node}); "
            + (hint or "wait for that run to end, or pass --break-lock if it is gone")
        )


LIVE_HINT = (
    "it is still running on this host, so --break-lock refuses to break its lock: wait for it or stop it"
)


def describe(holder: dict[str, object]) -> str:
    """One phrase naming a lock holder: run name, store, start time, control host and pid."""
    if not holder.get("run") and holder.get("raw") is not None:
        return f"(unreadable lock record {holder['raw']!r})"
    parts = [str(holder.get("run") or "?")]
    if holder.get("store"):
        parts.append(f"in store {holder['store']}")
    if holder.get("started"):
        parts.append(f"started {holder['started']}")
    parts.append(f"by pid {holder.get('pid', '?')} on host {holder.get('host', '?')}")
    return " ".join(parts)


def _proc_start(pid: int) -> int | None:
    """The process's start time in clock ticks since boot (``/proc/<pid>/stat`` field 22), or None."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            stat = f.read()
    except OSError:
        return None
    try:
        return int(stat.rsplit(")", 1)[1].split()[19])
    except (IndexError, ValueError):
        return None


def _alive(pid: int) -> bool:
    """Whether process ``pid`` runs: it exists and is not a zombie (a run the supervisor's death
    took with it, ``chaos.supervisor``, waits as a zombie until its new parent reaps it)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return True


def is_stale(holder: dict[str, object], host: str | None = None) -> bool:
    """True when ``holder`` was taken on this control host by a process that no longer exists (or
    by this very process, in a run that has ended: a node unreachable at release kept its file)."""
    if holder.get("host") != (host or socket.gethostname()):
        return False
    pid = holder.get("pid")
    if not isinstance(pid, int) or pid <= 0:
        return False
    if host is None and pid == os.getpid() and holder.get("pid_start") == _proc_start(pid):
        return holder.get("token") not in _ACTIVE
    if not _alive(pid):
        return True
    start = holder.get("pid_start")
    now = _proc_start(pid)
    return isinstance(start, int) and now is not None and now != start


def live_here(holder: dict[str, object], host: str | None = None) -> bool:
    """True when ``holder`` is provably alive: taken on this control host by a process that still
    runs (same pid, same start time). Such a lock is never broken, not even by ``--break-lock``; a
    holder on another host cannot be proved alive or gone from here, so breaking it is the user's
    word (``--break-lock``)."""
    if holder.get("host") != (host or socket.gethostname()):
        return False
    pid = holder.get("pid")
    if not isinstance(pid, int) or pid <= 0 or not _alive(pid):
        return False
    if pid == os.getpid() and holder.get("token") in _ACTIVE:
        return True
    start, now = holder.get("pid_start"), _proc_start(pid)
    return not (isinstance(start, int) and now is not None and now != start)


def parse(text: str) -> dict[str, object]:
    """A lock record from the file's text (an unreadable one becomes ``{"raw": text}``)."""
    try:
        d = json.loads(text)
    except ValueError:
        return {"raw": text.strip()[:200]}
    return d if isinstance(d, dict) else {"raw": text.strip()[:200]}


class ClusterLock:
    """The lock of one run over ``control``'s nodes (a :class:`chaos.control.ssh.Control`).

    ``run``: the run's name; ``store``: its store directory; ``log``: where warnings go (a stale
    lock replaced, a lock broken). Use :meth:`acquire` (raises ClusterLocked) and :meth:`release`.
    """

    def __init__(
        self, control: Control, run: str, store: str = "", log: Callable[[str], None] | None = None
    ) -> None:
        self.control = control
        self.log = log or (lambda s: None)
        pid = os.getpid()
        self.token = uuid.uuid4().hex
        self.record: dict[str, object] = {
            "run": run,
            "store": os.path.abspath(store) if store else "",
            "host": socket.gethostname(),
            "pid": pid,
            "pid_start": _proc_start(pid),
            "started": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
            "token": self.token,
        }
        self.held: list[Any] = []

    def _create(self, remote: Remote) -> dict[str, object] | None:
        """Create the lock on one node; None on success, else the holder's record."""
        line = json.dumps(self.record, separators=(",", ":")) + "\n"
        res = remote.exec_raw(
            f"mkdir -p {LOCK_DIR} && if (set -C; cat > {LOCK_PATH}) 2>/dev/null; then echo ACQUIRED; "
            f"else echo HELD; cat {LOCK_PATH}; fi",
            sudo=True,
            stdin=line,
        )
        first, _, rest = res.stdout.partition("\n")
        if first.strip() == "ACQUIRED":
            return None
        return parse(rest)

    def _remove_if(self, remote: Remote, token_or_raw: str) -> None:
        # grep then rm is two steps: under flock, two runs replacing the same stale lock cannot
        # remove the lock the faster one has just created (a host without flock runs it bare)
        check = f"grep -qF {shlex.quote(token_or_raw)} {LOCK_PATH} 2>/dev/null && rm -f {LOCK_PATH}; true"
        remote.exec_raw(
            f"mkdir -p {LOCK_DIR}; if command -v flock >/dev/null 2>&1; then "
            f"flock -w 30 {LOCK_DIR}/.guard sh -c {shlex.quote(check)}; else {check}; fi; true",
            sudo=True,
        )

    def acquire(self, break_lock: bool = False, wait_s: float = 0.0, poll_s: float = 2.0) -> None:
        """Take the lock on every node, in node order. ``break_lock`` clears any existing lock first.
        ``wait_s``: seconds to keep trying (every ``poll_s`` s, releasing what was taken in
        between) while a live run holds the cluster, for a cluster several people share.

        Raises ClusterLocked (after releasing what was taken) when a live run still holds some node.
        """
        deadline = time.monotonic() + max(0.0, wait_s)
        said = False
        while True:
            try:
                self._acquire_once(break_lock)
                return
            except ClusterLocked as e:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise
                if not said:
                    self.log(
                        f"waiting up to {left:.0f} s for run {describe(e.holder)} to release the cluster"
                    )
                    said = True
                break_lock = False  # broken once at most: a holder alive now is a live run
                time.sleep(min(poll_s, left))

    def _acquire_once(self, break_lock: bool) -> None:
        remotes = [self.control.remote(n.name) for n in self.control.nodes]
        if break_lock:
            self.break_all()
        try:
            for remote in remotes:
                holder = self._create(remote)
                if holder is not None and holder.get("token") and is_stale(holder):
                    self.log(f"replacing the stale lock of run {describe(holder)} on {remote.node.name}")
                    self._remove_if(remote, str(holder["token"]))
                    holder = self._create(remote)
                if holder is not None:
                    raise ClusterLocked(remote.node.name, holder)
                self.held.append(remote)
                _ACTIVE.add(self.token)
        except BaseException:
            self.release()
            raise

    def release(self) -> None:
        """Remove this run's lock files (only those carrying its token); never raises for one node."""
        held, self.held = self.held, []
        _ACTIVE.discard(self.token)
        for remote in held:
            try:
                self._remove_if(remote, self.token)
            except Exception as e:  # noqa: BLE001 - the other nodes' locks must still go
                self.log(f"releasing the cluster lock on {remote.node.name} failed: {e}")

    def break_all(self) -> list[str]:
        """Remove every node's lock file unless a holder is alive on this host (then ClusterLocked
        naming it, and nothing is removed); returns the holders removed."""

        def read(remote: Remote) -> str:
            return str(remote.exec_raw(f"cat {LOCK_PATH} 2>/dev/null; true", sudo=True).stdout).strip()

        found = {node: text for node, text in self.control.on_nodes(read).items() if text}
        for node, text in sorted(found.items()):
            if live_here(parse(text)):
                raise ClusterLocked(node, parse(text), LIVE_HINT)
        for node, text in found.items():  # only the record read is removed, not a newer one
            self._remove_if(self.control.remote(node), str(parse(text).get("token") or text))
        broken = [f"{node}: {describe(parse(text))}" for node, text in found.items()]
        for b in broken:
            self.log(f"broke the cluster lock on {b}")
        return broken


def holders(remotes: Sequence[Any]) -> dict[str, dict[str, object]]:
    """The lock record on each node that has one (node name -> record)."""
    out = {}
    for r in remotes:
        text = r.exec_raw(f"cat {LOCK_PATH} 2>/dev/null; true", sudo=True).stdout
        if text.strip():
            out[r.node.name] = parse(text)
    return out
