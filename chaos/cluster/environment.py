"""Is it the environment? Causes of a failed recovery that are not the system under test's doing.

A node whose disk filled, whose processes the kernel's OOM killer ended, or that no longer
answers over SSH (a container gone) stops the system through no fault of its code; the run then
tells nothing about the system's liveness. After a failed recovery the runner asks each node
(:func:`probe`) and records what it found in ``test.json``'s ``recovery.environment``; the
``liveness`` checker (:mod:`chaos.history.checkers.liveness`) then says ``unknown`` with those causes
quoted, unless the run's own nemesis injected that condition on purpose (a kind named after it:
:data:`KINDS`), when the liveness rule applies as usual.
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping

from chaos.control.ssh import Control, Remote, RemoteError

KINDS: Mapping[str, str] = {
    "disk-full": "a full disk (ENOSPC)",
    "oom": "the kernel's OOM killer",
    "node-down": "a node that does not answer",
}
"""cause kind -> what it is; a nemesis whose name contains the kind injects it on purpose."""

_DISK_FREE_KIB = 1024  # less free space than this on the data dir's file system is a full disk

_PROBE = r"""
df -Pk {path} 2>/dev/null | awk 'NR==2 {{print "df", $4, $5, $6}}'
if [ -r /sys/fs/cgroup/memory.events ]; then
  awk '$1=="oom_kill" {{print "oom_kill", $2}}' /sys/fs/cgroup/memory.events
fi
dmesg 2>/dev/null | grep -ciE 'out of memory: kill|oom-kill' | sed 's/^/dmesg_oom /'
for f in {logs}; do
  [ -r "$f" ] && grep -c 'No space left on device\|ENOSPC' "$f" | sed "s|^|enospc $f |"
done
true
"""


def probe_node(remote: Remote, data_dir: str | None, logs: list[str]) -> list[tuple[str, str]]:
    """``[(kind, evidence)]`` found on one node: a full file system under ``data_dir`` (or /),
    OOM kills (cgroup ``memory.events`` or dmesg), ``No space left on device`` in the ``logs``.
    A node that cannot be asked is ``node-down``."""
    script = _PROBE.format(path=shlex.quote(data_dir or "/"), logs=" ".join(shlex.quote(p) for p in logs))
    try:
        out = remote.exec_raw(script, sudo=True, check=False, timeout=15.0).stdout
    except RemoteError as e:
        return [("node-down", f"does not answer over SSH: {e.cause}")]
    found: list[tuple[str, str]] = []
    for line in out.splitlines():
        word, _, rest = line.partition(" ")
        if word == "df":
            free, used, mount = (rest.split() + ["?", "?", "?"])[:3]
            if free.isdigit() and int(free) < _DISK_FREE_KIB:
                found.append(("disk-full", f"{mount} is full ({used} used, {free} KiB free)"))
        elif word in ("oom_kill", "dmesg_oom") and rest.strip().isdigit() and int(rest) > 0:
            found.append(
                (
                    "oom",
                    f"{int(rest)} OOM kill(s) ({'cgroup memory.events' if word == 'oom_kill' else 'dmesg'})",
                )
            )
        elif word == "enospc":
            path, _, count = rest.rpartition(" ")
            if count.isdigit() and int(count) > 0:
                found.append(("disk-full", f"{path}: {count} line(s) say No space left on device"))
    return found


def probe(control: Control, db: object) -> dict[str, list[dict[str, str]]]:
    """``{node: [{"kind", "evidence"}]}`` for the nodes where something was found (empty: the
    environment looks sound). Uses the DB's ``data_dir`` and ``log_files`` when it has them."""
    data_dir = getattr(db, "data_dir", None)
    log_files = getattr(db, "log_files", None)

    def one(remote: Remote) -> list[tuple[str, str]]:
        try:
            logs = [str(p) for p in log_files(remote)] if callable(log_files) else []
        except Exception:  # noqa: BLE001 - an unreachable node is found by the probe itself
            logs = []
        return probe_node(remote, data_dir, logs)

    found: dict[str, list[dict[str, str]]] = {}
    for node, items in control.on_nodes(one).items():
        if items:
            found[node] = [{"kind": k, "evidence": e} for k, e in items]
    return found
