"""lose-unfsynced from outside the server, on real node containers (a 3-node docker cluster of its
own, ``CHAOS_LAZYFS_CLUSTER``, default ``lazyfs``).

- The FUSE layer (``chaos/nemesis/lazyfs_node.py``) mounted by the nemesis's own scripts: a node-side
  writer fsyncs part of its writes and leaves the rest (overwrites, appends into a sparse pre-sized
  file, a created file, an unlinked file, a rename over a file) unfsynced; after the drop every
  file reads byte-for-byte as at its last fsync and every name as at its directory's last fsync;
  the unmount puts the files back in the plain directory.
- ``chaos run --workload log --nemesis lose-unfsynced`` against the real DLedger server with
  ``--flush sync`` and the ``majority-followers`` target: VALID, every fault answered by the layer
  with the old leader held back, and the layer gone from the nodes afterwards.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from chaos.nemesis.files import LAZYFS_PROGRAM, LAZYFS_STATE, mount_script, unmount_script

pytestmark = [pytest.mark.docker, pytest.mark.slow]

CLUSTER = os.environ.get("CHAOS_LAZYFS_CLUSTER", "lazyfs")
DIR = "/var/lib/chaos-lazyfs-test"

# Node side: phase "write" leaves the state at the last fsync in EXPECT (a plain directory), then
# changes the mount without fsync; phase "digest" prints {relative path: sha256} of a tree.
WRITER = r"""
import hashlib, json, os, random, shutil, sys
phase, root = sys.argv[1], sys.argv[2]
def fsync_dir(p):
    fd = os.open(p, os.O_RDONLY | os.O_DIRECTORY); os.fsync(fd); os.close(fd)
def put(p, data, off=0, sync=True, flags=os.O_RDWR | os.O_CREAT):
    fd = os.open(p, flags, 0o644); os.pwrite(fd, data, off)
    if sync: os.fsync(fd)
    os.close(fd)
if phase == "digest":
    out = {}
    for d, _, names in os.walk(root):
        for n in names:
            p = os.path.join(d, n)
            out[os.path.relpath(p, root)] = hashlib.sha256(open(p, "rb").read()).hexdigest()
    print(json.dumps(out)); sys.exit(0)
expect, rng = sys.argv[3], random.Random(7)
os.makedirs(root + "/data", exist_ok=True); fsync_dir(root)
put(root + "/data/log", rng.randbytes(64 * 1024))                       # fsynced whole
seg = os.open(root + "/data/seg", os.O_RDWR | os.O_CREAT, 0o644)
os.ftruncate(seg, 1 << 20); os.pwrite(seg, rng.randbytes(20000), 0); os.fsync(seg)
put(root + "/term", b"term=1\n"); put(root + "/gone", b"removed later\n")
fsync_dir(root + "/data"); fsync_dir(root)
shutil.rmtree(expect, ignore_errors=True); shutil.copytree(root, expect)  # the durable state
put(root + "/data/log", rng.randbytes(4000), off=1000, sync=False)      # overwrite
put(root + "/data/log", rng.randbytes(10000), off=64 * 1024, sync=False)  # append
os.pwrite(seg, rng.randbytes(10000), 20000); os.close(seg)               # into the sparse tail
put(root + "/term.tmp", b"term=2\n"); os.replace(root + "/term.tmp", root + "/term")  # no dir fsync
put(root + "/data/new", b"created, fsynced, its name never was\n")
os.unlink(root + "/gone")
print(json.dumps({"term": open(root + "/term").read(), "log": os.path.getsize(root + "/data/log")}))
"""


@pytest.fixture(scope="module")
def cluster() -> Iterator[tuple[list[Any], Any]]:
    from chaos.cluster.docker import DockerProvider
    from chaos.control.ssh import Control

    provider = DockerProvider(3, name=CLUSTER)
    nodes = provider.up()
    control = Control(nodes)
    try:
        yield nodes, control
    finally:
        control.close()
        if not os.environ.get("CHAOS_KEEP_CLUSTER"):
            provider.down()


def run_py(remote: Any, *args: str) -> Any:
    res = remote.exec("python3", "-c", WRITER, *args, sudo=True, check=False, timeout=120)
    assert res.exit_code == 0, res.stderr
    return json.loads(res.stdout.strip().splitlines()[-1])


def test_drop_restores_the_last_fsync_byte_for_byte(cluster: Any) -> None:
    nodes, control = cluster
    r = control.remote(nodes[0].name)
    r.exec_raw(unmount_script(DIR), sudo=True, check=False)
    r.exec_raw(f"rm -rf {DIR} /tmp/expect; mkdir -p {DIR} {LAZYFS_STATE}; echo before > {DIR}/old", sudo=True)
    r.upload(LAZYFS_PROGRAM, f"{LAZYFS_STATE}/lazyfs_node.py", sudo=True)
    try:
        res = r.exec_raw(mount_script(DIR), sudo=True, check=False)
        assert res.exit_code == 0 and "mounted" in res.stdout, res.stderr
        assert " fuse" in r.exec_raw(f"grep ' {DIR} ' /proc/mounts", sudo=True).stdout
        assert r.exec_raw(f"cat {DIR}/old", sudo=True).stdout == "before\n"  # moved under the layer
        seen = run_py(r, "write", DIR, "/tmp/expect")
        assert seen == {"term": "term=2\n", "log": 64 * 1024 + 10000}  # unfsynced writes are visible before
        before = run_py(r, "digest", DIR)
        assert before != run_py(r, "digest", "/tmp/expect")
        res = r.exec("python3", f"{LAZYFS_STATE}/lazyfs_node.py", "drop", LAZYFS_STATE, "30", sudo=True)
        report = json.loads(res.stdout)
        assert report["errors"] == []
        assert set(report["files"]) == {"data/log", "data/seg"}
        assert report["files"]["data/log"] == {
            "cut_from": 64 * 1024 + 10000,
            "to": 64 * 1024,
            "restored_bytes": 4000,
        }
        assert report["files"]["data/seg"]["restored_bytes"] == 10000
        assert report["dropped_bytes"] == 10000 + 4000 + 10000
        undone = {(n["op"], n["path"], n.get("to")) for n in report["names"]}
        assert undone == {
            ("create", "term.tmp", None),
            ("rename", "term.tmp", "term"),
            ("create", "data/new", None),
            ("remove", "gone", None),
        }
        after = run_py(r, "digest", DIR)
        assert after == run_py(r, "digest", "/tmp/expect")  # every file and name as at its last fsync
        assert after["term"] == hashlib.sha256(b"term=1\n").hexdigest()
        # nothing is pending now: a second drop loses nothing
        again = json.loads(
            r.exec("python3", f"{LAZYFS_STATE}/lazyfs_node.py", "drop", LAZYFS_STATE, "30", sudo=True).stdout
        )
        assert again == {"files": {}, "names": [], "errors": [], "dropped_bytes": 0}
    finally:
        out = r.exec_raw(unmount_script(DIR), sudo=True, check=False)
    assert out.stdout.strip() == "unmounted", out.stderr
    assert r.exec_raw(f"grep -c ' {DIR} ' /proc/mounts", sudo=True, check=False).stdout.strip() == "0"
    plain = run_py(r, "digest", DIR)  # the files are back in the plain directory
    assert plain == {**after, "old": hashlib.sha256(b"before\n").hexdigest()}
    r.exec_raw(f"rm -rf {DIR} /tmp/expect", sudo=True)


def test_heal_removes_a_layer_a_dead_run_left(cluster: Any) -> None:
    """A run killed with lose-unfsynced enabled leaves the layer under the data directory: residue
    names it, and ``chaos heal``'s node step puts the files back in the plain directory."""
    from chaos.nemesis.cli import heal_remote, residue
    from chaos_dledger.db import DLedgerDB

    nodes, control = cluster
    r = control.remote(nodes[1].name)
    db = DLedgerDB()
    data = db.data_dir
    r.exec_raw(f"rm -rf {data}; mkdir -p {data} {LAZYFS_STATE}; echo kept > {data}/file", sudo=True)
    r.upload(LAZYFS_PROGRAM, f"{LAZYFS_STATE}/lazyfs_node.py", sudo=True)
    assert "mounted" in r.exec_raw(mount_script(data), sudo=True).stdout
    assert any("FUSE layer" in line for line in residue(r, db))
    assert heal_remote(r, db) == []
    assert r.exec_raw(f"grep -c ' {data} ' /proc/mounts", sudo=True, check=False).stdout.strip() == "0"
    assert r.exec_raw(f"cat {data}/file", sudo=True).stdout == "kept\n"
    r.exec_raw(f"rm -rf {data}", sudo=True)


def test_run_with_majority_followers_is_valid_on_the_correct_server(cluster: Any, tmp_path: Path) -> None:
    nodes, control = cluster
    spec = ",".join(f"{n.name}={n.host}" for n in nodes)
    argv = ["chaos", "run", "--workload", "log", "--provider", "ssh", "--nodes", spec]
    argv += ["--ssh-private-key", str(nodes[0].key_path), "--no-strict-host-key-checking"]
    argv += ["--store", str(tmp_path), "--no-live", "--flush", "sync", "--seed", "3"]
    argv += ["--nemesis", "lose-unfsynced", "--nemesis-opt", "lose_unfsynced_targets=majority-followers"]
    argv += ["--nemesis-interval", "6", "--time-limit", "30"]
    res = subprocess.run(argv, capture_output=True, text=True, timeout=1200)
    run_dir = (tmp_path / "latest").resolve()
    results = json.loads((run_dir / "results.json").read_text())
    assert res.returncode == 0 and results["valid"] is True, res.stdout[-3000:]
    ops = [json.loads(x) for x in (run_dir / "history.jsonl").read_text().splitlines() if x.strip()]
    starts = [o["value"] for o in ops if o["f"] == "start-file" and isinstance(o["value"], dict)]
    starts = [v for v in starts if "applied" in v]  # completions
    assert starts and all(v["applied"] for v in starts), starts
    for v in starts:  # a majority of followers lost its unfsynced writes, the leader was held back
        assert len(v["nodes"]) == 2 and v["held_back"] not in v["nodes"]
        assert set(v["dropped_bytes"]) == set(v["nodes"])
    stops = [o["value"] for o in ops if o["f"] == "stop-file" and isinstance(o["value"], dict)]
    assert any(v.get("elected_first") for v in stops), stops
    left = control.on_nodes(
        lambda r: r.exec_raw(f"grep -c chaos-lazyfs /proc/mounts; ls {LAZYFS_STATE}", check=False).stdout
    )
    assert all(v.split()[0] == "0" for v in left.values()), left
