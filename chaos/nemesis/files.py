"""File faults on the server's data directory (``jepsen.nemesis.file``, ``jepsen.lazyfs``).

``start-file`` SIGKILLs the server on the chosen nodes (the DB's ``kill``), then applies one fault
to its data files and leaves it down; ``stop-file`` starts it again and records whether it came up
(the server must recover or refuse to start with a clear error; the checker decides whether data
was lost). The data directory is the DB's ``data_dir`` (a path, or a function of the node). Faults:

- ``truncate``: drop the last ``bytes`` bytes of the newest data segment (a torn write). Segments
  that are preallocated (zero tail) keep their length and get the last written bytes zeroed.
- ``bitflip``: flip ``count`` random bits in the newest data segment, in its last ``tail_bytes``
  written bytes (``region`` ``tail``) or ``anywhere`` in its written data.
- ``lose-unfsynced``: everything written but not fsynced is lost, as when a machine loses power
  (LazyFS's ``clear-cache``). This is done from outside the server: when the enabled faults include
  it, :meth:`FileNemesis.setup` stops the server on every node, moves the data directory's contents
  to a backing directory, mounts :mod:`chaos.nemesis.lazyfs_node` (a FUSE passthrough layer that
  records, per file, the length at the last fsync and the pre-images of bytes overwritten since,
  and per directory the names changed since its last fsync) on the data directory and starts the
  server again; ``teardown`` unmounts it and moves the files back. The fault kills the server and
  tells the layer to drop; the layer's report (bytes and files per node) is the completion.

  Targets: the node specs of :data:`chaos.nemesis.base.TARGETS`, plus ``majority-followers``: a
  majority of the cluster chosen among the followers loses its unfsynced writes while the leader is
  killed with its disk intact, and on stop the leader is started only after the followers elected
  a leader among themselves (or ``leader_wait_s`` passed). An entry a follower acknowledged before
  fsyncing it is then gone from a quorum, and the old leader cannot hand it back: the composition
  that exposes a follower acknowledging before fsync (Raft section 5.4.1 relies on persisted logs).

Completion of ``start-file``: ``{"fault": ..., "nodes": [...], "changes": {node: [...]}, "applied":
bool}`` where each change names the file and the byte range cut, zeroed or flipped; for
lose-unfsynced each change is a file the layer restored (``{"file", "mode": "lose-unfsynced",
"cut_from": size, "to": fsynced size, "restored_bytes": n}``) or a name change it undid (``{"name":
{"op", "path", "to"}}``), plus ``dropped_bytes: {node: n}`` and, for ``majority-followers``,
``killed`` (every node stopped) and ``held_back`` (the old leader). ``applied`` is true when the
fault ran on at least one node without an error (``changes`` may be empty: lose-unfsynced with
everything fsynced loses nothing, as real power loss would); a node without the layer or without
an answer from it, or no target node, gives ``applied: false`` and ``why``. Completion of
``stop-file``: ``{"nodes": {node: {"running": bool, "log_tail": str}}, "applied": bool}`` (false when
a restarted server is not running), with ``elected_first`` (the leader the followers elected
before the held-back node was started, or null) after ``majority-followers``.
"""

from __future__ import annotations

import json
import random
import shlex
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from chaos.control.db import capabilities, kill_all, running_all, running_any, start_all
from chaos.control.db import data_files as db_data_files
from chaos.control.ssh import Remote
from chaos.control.test import Test
from chaos.history.op import Op
from chaos.nemesis.base import (
    TARGETS,
    NemesisError,
    NemesisKind,
    choose_nodes,
    complete,
    node_names,
    not_applied,
    on_nodes,
    outcome,
    sh,
)

FAULTS = ("truncate", "bitflip", "lose-unfsynced")
# chaos sim's name for lose-unfsynced on every member at once (issue 35 item 10: one vocabulary)
POWER_FAILURE = "power-failure"

# Runs on the node with python3 (the server's own interpreter): argv[1] is a JSON job.
REMOTE = r"""
import errno, glob, json, os, random, sys
job = json.loads(sys.argv[1])
root, fault = job["data_dir"], job["fault"]
rng = random.Random(job["seed"])
def data_files():
    # the DB's data_files globs under root (default every file)
    out = set()
    for pattern in job.get("data_files") or ["**/*"]:
        out.update(p for p in glob.glob(os.path.join(root, pattern), recursive=True) if os.path.isfile(p))
    return sorted(out)
def data_end(fd, size):
    # end of the last non-hole extent (preallocated segments are sparse); size if unsupported
    end, pos = 0, 0
    try:
        while pos < size:
            d = os.lseek(fd, pos, os.SEEK_DATA)
            pos = end = os.lseek(fd, d, os.SEEK_HOLE)
    except OSError as e:
        if e.errno != errno.ENXIO:  # no SEEK_DATA here: scan everything
            return size
    return min(end, size)
ZERO = bytes(1 << 20)
def written_end(p, floor=0):
    # logical end of a possibly preallocated file: one past the last non-zero byte (or floor,
    # when everything above floor is zero); all-zero chunks are skipped with a memcmp
    size = os.path.getsize(p)
    buf = bytearray(len(ZERO))
    with open(p, "rb", buffering=0) as f:
        pos = data_end(f.fileno(), size)
        while pos > floor:
            step = min(len(ZERO), pos - floor)
            f.seek(pos - step)
            view = memoryview(buf)[:step]
            n = f.readinto(view)
            if view[:n] != ZERO[:n]:
                return pos - step + len(bytes(view[:n]).rstrip(b"\0"))
            pos -= step
    return floor
def segments(files):
    # newest last: numeric names (segment offsets) by number, then modification time
    return sorted(files, key=lambda p: (int(os.path.basename(p)) if os.path.basename(p).isdigit() else -1, os.path.getmtime(p)))
def cut(p, keep):
    size, end = os.path.getsize(p), written_end(p, keep)
    if keep >= end:
        return None
    if end == size:
        os.truncate(p, keep)
        return {"file": p, "mode": "truncate", "from": keep, "to": size}
    with open(p, "r+b") as f:
        f.seek(keep)
        f.write(b"\0" * (end - keep))
    return {"file": p, "mode": "zero", "from": keep, "to": end}
changes, error = [], None
files = [p for p in data_files() if os.path.getsize(p) > 0]
if fault == "truncate":
    segs = [p for p in segments(files) if written_end(p) > 0]
    if segs:
        p = segs[-1]
        end = written_end(p)
        c = cut(p, max(0, end - int(job["bytes"])))
        if c:
            changes.append(c)
elif fault == "bitflip":
    cands = [(p, written_end(p)) for p in segments(files)]
    cands = [(p, e) for p, e in cands if e > 0]
    if cands:
        p, end = cands[-1]
        lo = 0 if job["region"] == "anywhere" else max(0, end - int(job["tail_bytes"]))
        flips = []
        with open(p, "r+b") as f:
            for _ in range(int(job["count"])):
                off, bit = rng.randrange(lo, end), rng.randrange(8)
                f.seek(off); b = f.read(1)[0]
                f.seek(off); f.write(bytes([b ^ (1 << bit)]))
                flips.append([off, bit])
        changes.append({"file": p, "mode": "bitflip", "region": [lo, end], "flips": flips})
for c in changes:  # make the damage itself durable (not os.sync: that flushes the whole host)
    fd = os.open(c["file"], os.O_RDWR)
    os.fsync(fd)
    os.close(fd)
print(json.dumps({"changes": changes, "error": error}))
"""


# The FUSE layer's place on a node: backing/ holds the real files, stash/ what the layer may bring
# back, pid and lazyfs.log the daemon's; the program itself is uploaded next to them.
LAZYFS_STATE = "/var/lib/chaos-lazyfs"
LAZYFS_PROGRAM = Path(__file__).resolve().parent / "lazyfs_node.py"
MAJORITY_FOLLOWERS = "majority-followers"
LU_TARGETS = (*TARGETS, MAJORITY_FOLLOWERS)


def mount_script(data: str, state: str = LAZYFS_STATE, wait_s: float = 10.0) -> str:
    """Shell (root): move ``data``'s contents to ``state/backing`` and mount the layer on ``data``;
    prints ``mounted``. Exit 1 with the daemon's log when the mount does not appear in
    ``wait_s`` seconds. The server must be stopped."""
    d, s = shlex.quote(data), shlex.quote(state)
    steps = int(wait_s * 10)
    return (
        f"set -e; mkdir -p {d} {s}/backing; "
        f"find {d} -mindepth 1 -maxdepth 1 -exec mv -t {s}/backing {{}} +; "
        f"setsid python3 {s}/lazyfs_node.py mount {s}/backing {d} {s} >> {s}/lazyfs.log 2>&1 < /dev/null & "
        f"i=0; while ! grep -qs ' {data} fuse' /proc/mounts; do "
        f"  i=$((i+1)); if [ $i -gt {steps} ]; then tail -n 20 {s}/lazyfs.log >&2; exit 1; fi; sleep 0.1; "
        "done; echo mounted"
    )


def unmount_script(data: str, state: str = LAZYFS_STATE) -> str:
    """Shell (root): unmount the layer from ``data`` (lazily if it is busy), stop its daemon, move
    the backing files back into ``data`` and remove ``state``. Idempotent; prints ``unmounted`` or
    ``absent``. The server must be stopped."""
    d, s = shlex.quote(data), shlex.quote(state)
    return (
        f"had=absent; if grep -qs ' {data} fuse' /proc/mounts; then had=unmounted; "
        f"fusermount3 -u {d} 2>/dev/null || fusermount3 -uz {d}; fi; "
        f'p=$(cat {s}/pid 2>/dev/null); if [ -n "$p" ]; then kill -TERM "$p" 2>/dev/null; '
        f'for i in $(seq 50); do kill -0 "$p" 2>/dev/null || break; sleep 0.1; done; kill -9 "$p" 2>/dev/null; fi; '
        f"if [ -d {s}/backing ]; then mkdir -p {d}; "
        f"find {s}/backing -mindepth 1 -maxdepth 1 -exec mv -t {d} {{}} +; fi; "
        f"rm -rf {s}; echo $had"
    )


class FileNemesis:
    """``start-file`` / ``stop-file``: kill, corrupt the data files, later restart.

    ``faults`` are the enabled fault names (one is drawn per start unless the invocation value
    names one: ``{"fault": "truncate", "targets": "all", "bytes": 100}``). ``lose_unfsynced_targets``
    may hold ``majority-followers`` too. ``leader_wait_s``: how long a ``majority-followers`` stop
    waits for the followers to elect a leader before starting the held-back one. Raises ValueError
    for unknown faults, targets or non-positive sizes.
    """

    kind = "file"

    def __init__(
        self,
        faults: Sequence[str] = FAULTS,
        targets: Sequence[str] = ("one", "minority"),
        lose_unfsynced_targets: Sequence[str] = ("all",),
        truncate_bytes: int = 64,
        bitflip_count: int = 1,
        bitflip_region: str = "tail",
        tail_bytes: int = 4096,
        start_wait_s: float = 3.0,
        leader_wait_s: float = 20.0,
    ) -> None:
        bad = [f for f in faults if f not in FAULTS]
        if bad or not faults:
            raise ValueError(f"file faults {list(faults)!r}: expected some of {', '.join(FAULTS)}")
        for t in targets:
            if t not in TARGETS:
                raise ValueError(f"file fault target {t!r}: expected one of {', '.join(TARGETS)}")
        for t in lose_unfsynced_targets:
            if t not in LU_TARGETS:
                raise ValueError(f"lose-unfsynced target {t!r}: expected one of {', '.join(LU_TARGETS)}")
        if bitflip_region not in ("tail", "anywhere"):
            raise ValueError(f"bitflip region {bitflip_region!r}: expected 'tail' or 'anywhere'")
        if truncate_bytes <= 0 or bitflip_count <= 0 or tail_bytes <= 0:
            raise ValueError(
                "file fault sizes (truncate bytes, bitflip count, tail bytes): expected positive ints"
            )
        self.faults = list(faults)
        self.targets = list(targets)
        self.lu_targets = list(lose_unfsynced_targets)
        self.defaults = {
            "bytes": truncate_bytes,
            "count": bitflip_count,
            "region": bitflip_region,
            "tail_bytes": tail_bytes,
        }
        self.start_wait_s = start_wait_s
        self.leader_wait_s = leader_wait_s
        self.down: set[str] = set()
        self.held_back: set[str] = set()  # started only once the others elected a leader
        self.mounted: set[str] = set()

    def fs(self) -> set[str]:
        return {"start-file", "stop-file"}

    # -- the FUSE layer -----------------------------------------------------------------------

    def setup(self, test: Test) -> None:
        """With lose-unfsynced enabled: put every node's data directory on the FUSE layer (stop the
        server, mount, start it again) and wait for a leader. Raises NemesisError naming the node
        when a mount fails (e.g. no ``/dev/fuse`` or no ``python3-pyfuse3`` on it)."""
        if "lose-unfsynced" not in self.faults:
            return

        def one(remote: Remote) -> None:
            name = remote.node.name
            db_kill(test, remote)
            sh(remote, unmount_script(data_dir(test, remote)), check=False)  # a run that died early
            sh(remote, f"mkdir -p {LAZYFS_STATE}")
            remote.upload(LAZYFS_PROGRAM, f"{LAZYFS_STATE}/lazyfs_node.py", sudo=True)
            res = sh(remote, mount_script(data_dir(test, remote)), check=False)
            if res.exit_code != 0:  # put the files back and the server up before saying so
                sh(remote, unmount_script(data_dir(test, remote)), check=False)
                db_start(test, remote)
                raise NemesisError(
                    f"lose-unfsynced: mounting the FUSE layer on {name} failed: {res.stderr.strip()[-800:]}"
                )
            self.mounted.add(name)
            db_start(test, remote)

        on_nodes(test, one)
        await_leader(test, self.leader_wait_s)

    def teardown(self, test: Test) -> None:
        """Restart what this nemesis left down, then unmount the layer and put the files back (a
        server still running, e.g. a run that leaves the DB up, is stopped and started again)."""
        self.heal(test)
        if not self.mounted:
            return

        def one(remote: Remote) -> None:
            res = remove_layer(test.db, remote)
            if res.exit_code != 0:
                test.log.warning("unmounting the FUSE layer on %s: %s", remote.node.name, res.stderr.strip())

        on_nodes(test, one, sorted(self.mounted))
        self.mounted.clear()

    def heal(self, test: Test) -> None:
        if self.down:
            self.restart(test)

    # -- faults -------------------------------------------------------------------------------

    def invoke(self, test: Test, op: Op) -> Op:
        if op.f == "stop-file":
            held = bool(self.held_back)
            res = self.restart(test)
            nodes = res.pop("nodes")
            down = sorted(n for n, r in nodes.items() if not r.get("running"))
            value: dict[str, object] = {"nodes": nodes}
            if held:
                value["elected_first"] = res.get("elected_first")
            return complete(op, outcome(value, not down, f"not running after the restart: {down}"))
        if op.f != "start-file":
            raise ValueError(f"file nemesis: unexpected f {op.f!r}")
        value = dict(op.value) if isinstance(op.value, dict) else {}
        fault = value.get("fault") or test.rng.choice(self.faults)
        if fault not in FAULTS:
            raise ValueError(f"file fault {fault!r}: expected one of {', '.join(FAULTS)}")
        spec = value.get("nodes") or value.get("targets")
        if spec is None:
            spec = test.rng.choice(self.lu_targets if fault == "lose-unfsynced" else self.targets)
        if fault == "lose-unfsynced":
            return self.lose_unfsynced(test, op, spec)
        note: dict[str, object] = {}
        nodes = choose_nodes(test, spec, note=note)
        if not nodes:
            return not_applied(op, f"no node matched target {spec!r}", fault=fault, targets=spec, nodes=[])
        params = {k: value.get(k, v) for k, v in self.defaults.items()}
        on_nodes(test, lambda r: db_kill(test, r), nodes)
        self.down |= set(nodes)
        seeds = {n: test.rng.randrange(1 << 30) for n in nodes}

        def one(remote: Remote) -> object:
            job = dict(params, fault=fault, data_dir=data_dir(test, remote), seed=seeds[remote.node.name])
            job["data_files"] = db_data_files(test.db)
            res = remote.exec("python3", "-c", REMOTE, json.dumps(job), sudo=True, check=False, timeout=120)
            if res.exit_code != 0:
                raise NemesisError(f"file fault {fault} on {remote.node.name}: {res.stderr.strip()[-500:]}")
            return json.loads(res.stdout.strip().splitlines()[-1])

        results = on_nodes(test, one, nodes)
        out: dict[str, object] = {"fault": fault, "targets": spec, "nodes": nodes, **params, **note}
        out["changes"] = {n: r["changes"] for n, r in results.items()}
        errors = {n: r["error"] for n, r in results.items() if r.get("error")}
        if errors:
            out["errors"] = errors
        why = "; ".join(f"{n}: {e}" for n, e in sorted(errors.items()))
        return complete(op, outcome(out, len(errors) < len(nodes), why))

    def lose_unfsynced(self, test: Test, op: Op, spec: object) -> Op:
        """Kill the chosen servers and have the layer drop what they did not fsync."""
        held: list[str] = []
        note: dict[str, object] = {}
        if spec == MAJORITY_FOLLOWERS:
            leader = choose_nodes(test, "leader", note=note)
            if not leader:
                return not_applied(op, "no leader", fault="lose-unfsynced", targets=spec, nodes=[])
            followers = [n for n in node_names(test) if n not in leader]
            test.rng.shuffle(followers)
            nodes = sorted(followers[: len(test.nodes) // 2 + 1])
            held = leader
        else:
            nodes = choose_nodes(test, spec, note=note)
        if not nodes:
            return not_applied(
                op, f"no node matched target {spec!r}", fault="lose-unfsynced", targets=spec, nodes=[]
            )
        killed = sorted(set(nodes) | set(held))
        on_nodes(test, lambda r: db_kill(test, r), killed)
        self.down |= set(killed)
        self.held_back |= set(held)

        def one(remote: Remote) -> dict[str, object]:
            if remote.node.name not in self.mounted:
                return {"error": "no FUSE layer on this node (the nemesis setup did not mount it)"}
            res = sh(remote, f"python3 {LAZYFS_STATE}/lazyfs_node.py drop {LAZYFS_STATE} 60", check=False)
            if res.exit_code != 0:
                return {"error": f"the FUSE layer did not answer: {res.stderr.strip()[-300:]}"}
            report: dict[str, object] = json.loads(res.stdout.strip().splitlines()[-1])
            return report

        results = on_nodes(test, one, nodes)
        out: dict[str, object] = {"fault": "lose-unfsynced", "targets": spec, "nodes": nodes, **note}
        if held:  # several leaders of unknown terms (leader_choice) are all held back
            out["killed"], out["held_back"] = killed, held[0] if len(held) == 1 else held
        out["changes"] = {
            n: [{"file": f, "mode": "lose-unfsynced", **c} for f, c in sorted(r.get("files", {}).items())]
            + [{"name": x} for x in r.get("names", [])]
            for n, r in results.items()
        }
        out["dropped_bytes"] = {n: r.get("dropped_bytes", 0) for n, r in results.items() if "error" not in r}
        errors = {n: r["error"] for n, r in results.items() if r.get("error")}
        errors |= {n: "; ".join(r["errors"]) for n, r in results.items() if r.get("errors")}
        if errors:
            out["errors"] = errors
        answered = [n for n, r in results.items() if "error" not in r]
        why = "; ".join(f"{n}: {e}" for n, e in sorted(errors.items()))
        return complete(op, outcome(out, bool(answered), why))

    def restart(self, test: Test) -> dict[str, Any]:
        """Start every node this nemesis left down (a held-back node after the others elected a
        leader, or after ``leader_wait_s``); after ``start_wait_s`` report, per node, whether the
        server runs and the tail of its log: ``{"nodes": {node: {...}}, "elected_first": node|None}``."""
        nodes = sorted(self.down)
        if not nodes:
            return {"nodes": {}}

        def start(remote: Remote) -> None:
            try:
                db_start(test, remote)
            except Exception as e:  # a server that refuses to start is an outcome, not a crash
                test.log.info("start after file fault on %s failed: %s", remote.node.name, e)

        held = sorted(self.held_back & self.down)
        first = [n for n in nodes if n not in held]
        elected = None
        on_nodes(test, start, first)
        if held:
            elected = await_leader(test, self.leader_wait_s, among=first)
            on_nodes(test, start, held)
        self.down.clear()
        self.held_back.clear()
        time.sleep(self.start_wait_s)

        def outcome(remote: Remote) -> dict[str, object]:
            tail = getattr(test.db, "log_tail", None)
            return {"running": db_running(test, remote), "log_tail": tail(remote, 5) if tail else ""}

        return {"nodes": on_nodes(test, outcome, nodes), "elected_first": elected}


# -- the DB as this nemesis uses it (the data-dir and process capabilities) ------------------------


def remove_layer(db: object, remote: Remote) -> Any:
    """Take the FUSE layer off ``db``'s data directory on ``remote``: the server stopped if it runs,
    the files put back (:func:`unmount_script`), the server started again if it ran. Returns the
    unmount's result. Used by the nemesis's teardown and by ``chaos heal`` after a dead run."""
    was = running_any(db, remote)
    if was:
        kill_all(db, remote)
    res = sh(remote, unmount_script(_db_data_dir(db, remote)), check=False)
    if was:
        start_all(db, remote)
    return res


def _db_data_dir(db: object, remote: Remote) -> str:
    d = getattr(db, "data_dir", None)  # the data-dir capability, checked before the run
    return str(d(remote) if callable(d) else d)


def data_dir(test: Test, remote: Remote) -> str:
    """The DB's data directory on ``remote`` (its ``data_dir``: a path or a function of the node)."""
    return _db_data_dir(test.db, remote)


def db_kill(test: Test, remote: Remote) -> None:
    kill_all(test.db, remote)


def db_start(test: Test, remote: Remote) -> None:
    start_all(test.db, remote)


def db_running(test: Test, remote: Remote) -> bool:
    return running_all(test.db, remote)


def await_leader(test: Test, timeout: float, among: Sequence[str] | None = None) -> str | None:
    """Wait up to ``timeout`` s until a node (of ``among``, default any) claims leadership; its
    name, or None (also for a DB that does not report primaries)."""
    primaries = getattr(test.db, "primaries", None)
    if primaries is None:
        return None
    deadline = time.monotonic() + timeout
    while True:
        try:
            found = [n for n in primaries(test.control) if among is None or n in among]
        except Exception:  # noqa: BLE001 - nodes still starting
            found = []
        if found:
            return str(found[0])
        if time.monotonic() > deadline:
            return None
        time.sleep(0.2)


# -- the descriptor (chaos.nemesis) ------------------------------------------------------------------


def _opt(opts: Mapping[str, object], key: str, default: object) -> Any:
    v = opts.get(key)
    return default if v is None else v


def _build(chosen: Sequence[str], opts: Mapping[str, object]) -> object:
    """One file nemesis for the chosen faults (``file_targets``, ``lose_unfsynced_targets``,
    ``truncate_bytes``, ``bitflip_count``, ``bitflip_region``)."""
    faults = [f for f in FAULTS if f in chosen]
    file_targets = list(_opt(opts, "file_targets", ["one", "minority"]))
    lu_targets = list(_opt(opts, "lose_unfsynced_targets", ["all"]))
    if POWER_FAILURE in chosen:  # lose-unfsynced on every node at once (chaos sim's power-failure)
        if "lose-unfsynced" not in faults:
            faults.append("lose-unfsynced")
            lu_targets = ["all"]
        elif "all" not in lu_targets:
            lu_targets.append("all")
    files = FileNemesis(
        faults,
        targets=file_targets,
        lose_unfsynced_targets=lu_targets,
        truncate_bytes=int(_opt(opts, "truncate_bytes", 64)),
        bitflip_count=int(_opt(opts, "bitflip_count", 1)),
        bitflip_region=str(_opt(opts, "bitflip_region", "tail")),
    )

    def start(rng: random.Random) -> dict[str, object]:
        f = rng.choice(faults)
        return {"fault": f, "targets": rng.choice(lu_targets if f == "lose-unfsynced" else file_targets)}

    return files, start, None


def _heal(remote: Remote, db: object) -> list[str]:
    """A run that died with lose-unfsynced enabled leaves the FUSE layer under the data directory:
    take it off as the nemesis's teardown does. Needs the DB's process and data-dir capabilities
    (without them the residue names the layer)."""

    if not {"process", "data-dir"} <= capabilities(db):
        return []
    if sh(remote, f"test -d {shlex.quote(LAZYFS_STATE)}", check=False).ok:
        remove_layer(db, remote)
        return [f"FUSE layer of lose-unfsynced taken off ({LAZYFS_STATE})"]
    return []


def _residue(remote: Remote, db: object) -> list[str]:
    script = (
        f'[ -d {LAZYFS_STATE} ] && echo "FUSE layer of lose-unfsynced still in place ({LAZYFS_STATE})"; true'
    )
    return str(sh(remote, script, check=False).stdout).splitlines()


_FILE_NEEDS = frozenset({"data-dir", "process"})  # kill, change the files under the data dir, start

NEMESIS = NemesisKind(
    names={
        "truncate": "kill, drop the tail of the newest data segment (torn write), restart on stop",
        "bitflip": "kill, flip bits in the data files' tail (or anywhere), restart on stop",
        "lose-unfsynced": "kill every server, cut data files back to the last fsync, restart on stop",
        POWER_FAILURE: "lose-unfsynced on every node at once (chaos sim's name for it)",
    },
    build=_build,
    requires={n: _FILE_NEEDS for n in (*FAULTS, POWER_FAILURE)},
    options={
        "file_targets": "list",
        "lose_unfsynced_targets": "list",
        "truncate_bytes": "int",
        "bitflip_count": "int",
        "bitflip_region": "str",
    },
    target_options={"file_targets": FAULTS, "lose_unfsynced_targets": ("lose-unfsynced",)},
    heal=_heal,
    residue=_residue,
    colours={"file": "#843c39"},
    # {name}: the fault as typed (truncate, bitflip or lose-unfsynced; chaos.history.checkers.perf)
    verbs={"file": {"start": "{name} on {nodes}", "stop": "{name} over on {nodes}"}},
)
"""The file fault module (``chaos.nemeses`` entry point ``files``)."""
