"""File faults on the server's data directory while the server is down (``jepsen.nemesis.file``,
``jepsen.lazyfs``).

``start-file`` SIGKILLs the server on the chosen nodes (``DLedgerDB.kill``), then applies one fault
to its data files and leaves it down; ``stop-file`` starts it again and records whether it came up
(the server must recover or refuse to start with a clear error; the checker decides whether data
was lost). Faults:

- ``truncate``: drop the last ``bytes`` bytes of the newest data segment (a torn write). Segments
  that are preallocated (zero tail) keep their length and get the last written bytes zeroed.
- ``bitflip``: flip ``count`` random bits, in the tail region (bytes past the last fsync if the
  store reports it, else the last ``tail_bytes`` written) or ``anywhere`` in the written data.
- ``lose-unfsynced``: cut every data file back to its length at the last fsync, as lost page
  cache would (LazyFS's ``clear-cache``). The store reports those lengths in a marker file named
  ``fsynced`` (``dledger.store.file``: ``dataPos=``/``indexPos=`` global positions over segments
  named by their start offset; a ``<file name> <length>`` list or a JSON object ``{name: length}``
  is accepted too). Preallocated segments keep their size: the lost bytes are zeroed. Without a
  marker the completion says so (``"error": "no fsynced marker ..."``) and nothing is changed.

Completion of ``start-file``: ``{"fault": ..., "nodes": [...], "changes": {node: [...]}, "applied":
bool}`` where each change names the file and the byte range cut, zeroed or flipped. ``applied`` is
true when the fault ran on at least one node without an error (``changes`` may be empty: e.g.
lose-unfsynced with everything fsynced loses nothing, as real page-cache loss would); a node
without the fsynced marker, or no target node, gives ``applied: false`` and ``why``. Completion of
``stop-file``: ``{"nodes": {node: {"running": bool, "log_tail": str}}, "applied": bool}`` (false when
a restarted server is not running).
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from typing import Any

from chaos.history.op import Op
from chaos.nemesis.base import TARGETS, NemesisError, choose_nodes, complete, not_applied, on_nodes, outcome

FAULTS = ("truncate", "bitflip", "lose-unfsynced")

# Runs on the node with python3 (the server's own interpreter): argv[1] is a JSON job.
REMOTE = r"""
import errno, json, os, random, sys
job = json.loads(sys.argv[1])
root, fault = job["data_dir"], job["fault"]
rng = random.Random(job["seed"])
SKIP = ("currterm", "fsynced", "checkpoint", "hardstate")
def data_files():
    out = []
    for d, _, names in os.walk(root):
        for n in names:
            p = os.path.join(d, n)
            if n.startswith(SKIP) or n.endswith((".tmp", ".bak", ".lock", ".log")) or not os.path.isfile(p):
                continue
            out.append(p)
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
def markers():
    # {file path: fsynced length}. Our store's "fsynced" holds global positions (dataPos=,
    # indexPos=, dataFileSize=, indexFileSize=) over segments named by their 20-digit start offset;
    # a plain "<name> <length>" list or a JSON object is accepted too.
    m = {}
    for d, _, names in os.walk(root):
        if "fsynced" not in names:
            continue
        text = open(os.path.join(d, "fsynced")).read().strip()
        kv = dict(l.split("=", 1) for l in text.splitlines() if "=" in l)
        if "dataPos" in kv:
            for sub, pos, size in (("data", "dataPos", "dataFileSize"), ("index", "indexPos", "indexFileSize")):
                sd = os.path.join(d, sub)
                if not os.path.isdir(sd) or pos not in kv:
                    continue
                for n in os.listdir(sd):
                    if n.isdigit():
                        fsize = int(kv.get(size, 0)) or os.path.getsize(os.path.join(sd, n))
                        m[os.path.join(sd, n)] = max(0, min(int(kv[pos]) - int(n), fsize))
            continue
        try:
            items = json.loads(text).items() if text.startswith("{") else [l.rsplit(None, 1) for l in text.splitlines() if l.strip()]
        except ValueError:
            items = []
        for name, length in items:
            m[os.path.join(d, name)] = int(length)
    return m
def segments(files):
    # data segments if the store has a "data" directory, newest (highest offset / mtime) last
    data = [p for p in files if os.path.basename(os.path.dirname(p)) == "data"] or files
    return sorted(data, key=lambda p: (int(os.path.basename(p)) if os.path.basename(p).isdigit() else -1, os.path.getmtime(p)))
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
    fs = markers()
    cands = [(p, written_end(p)) for p in segments(files)]
    cands = [(p, e) for p, e in cands if e > 0]
    if cands:
        p, end = cands[-1]
        if job["region"] == "anywhere":
            lo = 0
        else:
            lo = fs.get(p, max(0, end - int(job["tail_bytes"])))
            if lo >= end:
                lo = max(0, end - int(job["tail_bytes"]))
        flips = []
        with open(p, "r+b") as f:
            for _ in range(int(job["count"])):
                off, bit = rng.randrange(lo, end), rng.randrange(8)
                f.seek(off); b = f.read(1)[0]
                f.seek(off); f.write(bytes([b ^ (1 << bit)]))
                flips.append([off, bit])
        changes.append({"file": p, "mode": "bitflip", "region": [lo, end], "flips": flips})
elif fault == "lose-unfsynced":
    fs = markers()
    if not fs:
        error = "no fsynced marker under " + root + "; the store does not report fsynced lengths"
    else:
        for p in files:
            if p in fs:
                c = cut(p, fs[p])
                if c:
                    changes.append(c)
for c in changes:  # make the damage itself durable (not os.sync: that flushes the whole host)
    fd = os.open(c["file"], os.O_RDWR)
    os.fsync(fd)
    os.close(fd)
print(json.dumps({"changes": changes, "error": error}))
"""


class FileNemesis:
    """``start-file`` / ``stop-file``: kill, corrupt the data files, later restart.

    ``faults`` are the enabled fault names (one is drawn per start unless the invocation value
    names one: ``{"fault": "truncate", "targets": "all", "bytes": 100}``).
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
    ) -> None:
        bad = [f for f in faults if f not in FAULTS]
        if bad or not faults:
            raise ValueError(f"file faults {list(faults)!r}: expected some of {', '.join(FAULTS)}")
        for t in list(targets) + list(lose_unfsynced_targets):
            if t not in TARGETS:
                raise ValueError(f"file fault target {t!r}: expected one of {', '.join(TARGETS)}")
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
        self.down: set[str] = set()

    def fs(self) -> set[str]:
        return {"start-file", "stop-file"}

    def setup(self, test: Any) -> None:
        pass

    def teardown(self, test: Any) -> None:
        self.heal(test)

    def heal(self, test: Any) -> None:
        if self.down:
            self.restart(test)

    def invoke(self, test: Any, op: Op) -> Op:
        if op.f == "stop-file":
            res = self.restart(test)
            down = sorted(n for n, r in res.items() if not r.get("running"))
            return complete(op, outcome({"nodes": res}, not down, f"not running after the restart: {down}"))
        if op.f != "start-file":
            raise ValueError(f"file nemesis: unexpected f {op.f!r}")
        value = dict(op.value) if isinstance(op.value, dict) else {}
        fault = value.get("fault") or test.rng.choice(self.faults)
        if fault not in FAULTS:
            raise ValueError(f"file fault {fault!r}: expected one of {', '.join(FAULTS)}")
        spec = value.get("nodes") or value.get("targets")
        if spec is None:
            spec = test.rng.choice(self.lu_targets if fault == "lose-unfsynced" else self.targets)
        nodes = choose_nodes(test, spec)
        if not nodes:
            return not_applied(op, f"no node matched target {spec!r}", fault=fault, targets=spec, nodes=[])
        params = {k: value.get(k, v) for k, v in self.defaults.items()}
        on_nodes(test, test.db.kill, nodes)
        self.down |= set(nodes)
        seeds = {n: test.rng.randrange(1 << 30) for n in nodes}

        def one(remote: Any) -> Any:
            job = dict(params, fault=fault, data_dir=data_dir(test, remote), seed=seeds[remote.node.name])
            res = remote.exec("python3", "-c", REMOTE, json.dumps(job), sudo=True, check=False, timeout=120)
            if res.exit_code != 0:
                raise NemesisError(f"file fault {fault} on {remote.node.name}: {res.stderr.strip()[-500:]}")
            return json.loads(res.stdout.strip().splitlines()[-1])

        results = on_nodes(test, one, nodes)
        out: dict[str, Any] = {"fault": fault, "targets": spec, "nodes": nodes, **params}
        out["changes"] = {n: r["changes"] for n, r in results.items()}
        errors = {n: r["error"] for n, r in results.items() if r.get("error")}
        if errors:
            out["errors"] = errors
        why = "; ".join(f"{n}: {e}" for n, e in sorted(errors.items()))
        return complete(op, outcome(out, len(errors) < len(nodes), why))

    def restart(self, test: Any) -> dict[str, Any]:
        """Start every node this nemesis left down; after ``start_wait_s`` report, per node,
        whether the server runs and the tail of its log."""
        nodes = sorted(self.down)
        if not nodes:
            return {}

        def one(remote: Any) -> None:
            try:
                test.db.start(remote)
            except Exception as e:  # a server that refuses to start is an outcome, not a crash
                test.log.info("start after file fault on %s failed: %s", remote.node.name, e)

        on_nodes(test, one, nodes)
        self.down.clear()
        time.sleep(self.start_wait_s)

        def outcome(remote: Any) -> dict[str, Any]:
            return {"running": bool(test.db.running(remote)), "log_tail": test.db.log_tail(remote, 5)}

        return on_nodes(test, outcome, nodes)


def data_dir(test: Any, remote: Any) -> str:
    d = test.db.data_dir
    return str(d(remote) if callable(d) else d)
