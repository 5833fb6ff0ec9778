"""The file store under real `dledger server` processes (3 nodes on 127.0.0.x): replicas' data
files are byte-identical, a torn tail on a killed follower is cut on restart and the follower catches
up, a bit flip in its committed prefix keeps it from starting."""

from __future__ import annotations

import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from store_records import encode_entry

from dledger.client import DLedgerClient
from dledger.store import Entry
from dledger.tools.inspect import inspect_store

pytestmark = pytest.mark.slow

KB64 = 64 * 1024
HOSTS = {"n1": "127.0.0.21", "n2": "127.0.0.22", "n3": "127.0.0.23"}


def free_port(host: str) -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


class Cluster:
    def __init__(self, base: Path) -> None:
        self.base = base
        self.ports = {n: free_port(h) for n, h in HOSTS.items()}
        self.peers = ";".join(f"{n}-{h}:{self.ports[n]}" for n, h in HOSTS.items())
        self.procs: dict[str, subprocess.Popen[bytes]] = {}

    def store(self, node: str) -> Path:
        return self.base / f"dledger-{node}"

    def log(self, node: str) -> Path:
        return self.base / f"{node}.log"

    def start(self, node: str) -> subprocess.Popen[bytes]:
        argv = [sys.executable, "-m", "dledger.cli", "server", "--group", "g", "--id", node]
        argv += ["--peers", self.peers, "--store-dir", str(self.base), "--flush", "sync"]
        argv += ["--heartbeat-ms", "100", "--data-file-size", str(KB64)]
        secret = self.base / "peer.secret"
        if not secret.exists():
            secret.write_text("store-cluster-secret\n")
        argv += ["--secret-file", str(secret)]
        with open(self.log(node), "ab") as out:
            p = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT)
        self.procs[node] = p
        return p

    def kill(self, node: str, sig: int = signal.SIGKILL) -> None:
        p = self.procs.pop(node)
        p.send_signal(sig)
        p.wait(timeout=20)

    def stop_all(self) -> None:
        for n in list(self.procs):
            self.kill(n, signal.SIGTERM)

    def data_files(self, node: str) -> dict[str, bytes]:
        d = self.store(node) / "data"
        return {p.name: p.read_bytes() for p in sorted(d.iterdir())}

    def wait_same_end(self, nodes: list[str], want: int, timeout: float = 30.0) -> None:
        deadline = time.monotonic() + timeout
        ends: dict[str, int] = {}
        while time.monotonic() < deadline:
            ends = {n: inspect_store(self.store(n), KB64).end_index for n in nodes}
            if all(e >= want for e in ends.values()) and len(set(ends.values())) == 1:
                return
            time.sleep(0.2)
        raise AssertionError(f"nodes did not converge to index >= {want}: {ends}")


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Cluster]:
    c = Cluster(tmp_path)
    try:
        yield c
    finally:
        for p in c.procs.values():
            p.kill()
            p.wait(timeout=20)


def append_all(c: Cluster, values: range) -> int:
    client = DLedgerClient(peers=c.peers, timeout=5.0, group="g")
    last = -1
    try:
        for v in values:
            for _ in range(50):
                r = client.append(f"{v:06d}".encode() * 100)
                if r.ok:
                    last = r.index
                    break
                time.sleep(0.1)
            else:
                raise AssertionError(f"append {v} never acknowledged: {r}")
    finally:
        client.close()
    return last


def test_torn_tail_cut_and_caught_up_and_committed_flip_refused(cluster: Cluster) -> None:
    c = cluster
    for n in HOSTS:
        c.start(n)
    last = append_all(c, range(200))  # ~600 B entries: several 64 KiB files
    c.wait_same_end(list(HOSTS), last)
    files = c.data_files("n1")
    assert len(files) >= 2
    assert c.data_files("n2") == files and c.data_files("n3") == files

    # Pick a follower, kill it, and leave a torn record after its last entry.
    leader = DLedgerClient(peers=c.peers, timeout=5.0, group="g").metadata().leader_id
    victim = next(n for n in HOSTS if n != leader)
    c.kill(victim)
    ins = inspect_store(c.store(victim), KB64)
    start = ins.next_pos - ins.next_pos % KB64
    torn_file = c.store(victim) / "data" / f"{start:020d}"
    fake, _ = encode_entry(Entry(ins.end_index + 1, 99, b"x" * 500), ins.next_pos, 0)
    with open(torn_file, "r+b") as f:
        f.seek(ins.next_pos - start)
        f.write(fake[:300])  # header and part of the body: the rest never reached the disk

    last = append_all(c, range(200, 260))  # the other two carry on
    c.start(victim)
    c.wait_same_end(list(HOSTS), last)
    text = c.log(victim).read_text()
    assert "cutting the log" in text and str(torn_file) in text and "bodyCrc" in text
    c.stop_all()
    files = c.data_files("n1")
    assert c.data_files("n2") == files and c.data_files("n3") == files

    # A bit flip inside the committed prefix: the node never serves the damaged entry (a GET answers
    # an entry as written, or an error); with its peers up it cuts its log there and fetches the rest
    # again (issue 23, test_dledger_cluster's repair test).
    ins = inspect_store(c.store(victim), KB64)
    ck = (c.store(victim) / "checkpoint").read_text()
    assert "committedIndex=" in ck
    p0 = c.store(victim) / "data" / ("0" * 20)
    with open(p0, "r+b") as f:
        f.seek(48 * 3 + 700)  # inside the body of an early entry
        b = f.read(1)
        f.seek(48 * 3 + 700)
        f.write(bytes([b[0] ^ 0x20]))
    c.start(victim)
    client = DLedgerClient(peers=c.peers, timeout=2.0, group="g", prefer=victim, sticky=True)
    answers = []
    try:
        for index in range(6):  # the flip is in one of the first entries
            for _ in range(50):  # until the node serves
                r = client.get(index)
                if r.ok or r.code == 414:
                    break
                time.sleep(0.1)
            answers.append(r)
    finally:
        client.close()
    written = {f"{v:06d}".encode() * 100 for v in range(260)} | {b""}  # b"": a leader's no-op entry
    assert all(r.body in written for r in answers if r.ok), answers  # never the damaged bytes
