"""``dledger bench``: start 3 local members and measure appends/s and latency percentiles.

Each of ``concurrency`` asyncio workers keeps one APPEND of ``size`` bytes outstanding on its own
connection to the leader (DLedger's BenchmarkCommand runs 10 client threads the same way).
Prints one JSON line: flush mode, concurrency, appends/s, p50/p99 latency in ms, errors.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from dledger.client import DLedgerClient
from dledger.protocol import Code, RequestCode
from dledger.transport import FrameDecoder, decode_payload, encode_frame


def start_cluster(
    root: Path,
    base_port: int,
    n: int = 3,
    flush: str = "sync",
    extra: tuple[str, ...] = (),
    pythonpath: str | None = None,
) -> tuple[str, dict[str, subprocess.Popen[bytes]]]:
    """Start ``n`` members on 127.0.0.1..n at ``base_port``, proving a fresh secret
    (``root/peer.secret``) to each other; return (peers, processes). ``pythonpath``: run the
    ``dledger`` package found there (e.g. an older tree, the anchor of an A/B run) instead of
    this one."""
    env = None
    if pythonpath is not None:
        env = {**os.environ, "PYTHONPATH": pythonpath}
    peers = ";".join(f"n{i}-127.0.0.{i + 1}:{base_port}" for i in range(n))
    secret = root / "peer.secret"
    if not secret.exists():
        secret.write_text(os.urandom(16).hex() + "\n")
    procs = {}
    for i in range(n):
        log = open(root / f"n{i}.log", "ab")  # noqa: SIM115
        procs[f"n{i}"] = subprocess.Popen(
            [sys.executable, "-m", "dledger.cli", "server", "--id", f"n{i}", "--peers", peers]
            + ["--store-dir", str(root / "store"), "--flush", flush, "--secret-file", str(secret), *extra],
            stdout=log,
            stderr=log,
            env=env,
        )
    return peers, procs


def wait_leader(peers: str, timeout: float = 20.0) -> str:
    deadline = time.monotonic() + timeout
    with DLedgerClient(peers, timeout=0.5) as c:
        while time.monotonic() < deadline:
            r = c.metadata()
            if r.ok and r.leader_id:
                with DLedgerClient(peers, timeout=0.5, prefer=r.leader_id) as c2:
                    r2 = c2.metadata()
                if r2.ok and r2.raw and r2.raw.get("role") == "LEADER":
                    return r.leader_id
            time.sleep(0.05)
    raise RuntimeError("no leader elected")


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of ``pid`` (Linux /proc; 0.0 elsewhere)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, IndexError, ValueError):
        return 0.0


def stop_cluster(procs: dict[str, subprocess.Popen[bytes]]) -> None:
    for p in procs.values():
        if p.poll() is None:
            p.send_signal(signal.SIGTERM)
    for p in procs.values():
        try:
            p.wait(10)
        except subprocess.TimeoutExpired:
            p.kill()


async def _worker(
    host: str, port: int, body_fn: Any, until: float, lat: list[float], errors: list[int], code: int
) -> None:
    reader, writer = await asyncio.open_connection(host, port)
    dec = FrameDecoder()
    opaque = 0
    while time.monotonic() < until:
        opaque += 1
        t = time.monotonic()
        writer.write(encode_frame(code, opaque, body_fn()))
        got = None
        while got is None:
            data = await reader.read(65536)
            if not data:
                errors.append(-1)
                return
            for p in dec.feed(data):
                _, op, _, b = decode_payload(p)
                if op == opaque:
                    got = b
        if got.get("code") == Code.SUCCESS:
            lat.append(time.monotonic() - t)
        else:
            errors.append(int(got.get("code", -1)))
    writer.close()


async def _pipelined(
    host: str,
    port: int,
    depth: int,
    body_fn: Any,
    until: float,
    lat: list[float],
    errors: list[int],
    code: int,
) -> None:
    """One connection with ``depth`` requests outstanding, matched by opaque (DLedger's client
    multiplexes requests over one Netty channel the same way)."""
    reader, writer = await asyncio.open_connection(host, port)
    dec = FrameDecoder()
    sent: dict[int, float] = {}
    opaque = 0

    def issue(n: int) -> None:
        nonlocal opaque
        frames = []
        now = time.monotonic()
        for _ in range(n):
            opaque += 1
            sent[opaque] = now
            frames.append(encode_frame(code, opaque, body_fn()))
        writer.write(b"".join(frames))

    issue(depth)
    while sent:
        data = await reader.read(1 << 20)
        if not data:
            errors.append(-1)
            return
        done = 0
        now = time.monotonic()
        for p in dec.feed(data):
            _, op, _, b = decode_payload(p)
            t = sent.pop(op, None)
            if t is None:
                continue
            done += 1
            if b.get("code") == Code.SUCCESS:
                lat.append(now - t)
            else:
                errors.append(int(b.get("code", -1)))
        if done and now < until:
            issue(done)
    writer.close()


async def _load(
    host: str, port: int, concurrency: int, until: float, body_fn: Any, code: int, connections: int = 0
) -> tuple[list[float], list[int]]:
    lat: list[float] = []
    errors: list[int] = []
    if connections and connections < concurrency:
        depths = [
            concurrency // connections + (1 if i < concurrency % connections else 0)
            for i in range(connections)
        ]
        await asyncio.gather(*(_pipelined(host, port, d, body_fn, until, lat, errors, code) for d in depths))
        return lat, errors
    await asyncio.gather(
        *(_worker(host, port, body_fn, until, lat, errors, code) for _ in range(concurrency))
    )
    return lat, errors


def _load_proc(args: tuple[str, int, int, float, Any, int, int], out: Any) -> None:
    out.put(asyncio.run(_load(*args)))


async def run_load(
    host: str,
    port: int,
    concurrency: int,
    seconds: float,
    body_fn: Any,
    code: int = RequestCode.APPEND,
    procs: int = 1,
    connections: int = 0,
) -> dict[str, Any]:
    """Closed-loop load: ``concurrency`` requests outstanding (spread over ``procs`` forked client
    processes, so the client is not the bottleneck) for ``seconds``; each on its own connection, or
    with ``connections`` > 0, pipelined over that many connections in all. Returns ops/s and
    latency percentiles."""
    t0 = time.monotonic()
    until = t0 + seconds
    if procs <= 1:
        lat, errors = await _load(host, port, concurrency, until, body_fn, code, connections)
    else:
        import multiprocessing as mp

        ctx = mp.get_context("fork")
        q: Any = ctx.Queue()
        share = [concurrency // procs + (1 if i < concurrency % procs else 0) for i in range(procs)]
        cshare = [connections // procs + (1 if i < connections % procs else 0) for i in range(procs)]
        ps = [
            ctx.Process(
                target=_load_proc,
                args=((host, port, n, until, body_fn, code, max(c, 1) if connections else 0), q),
            )
            for n, c in zip(share, cshare, strict=True)
        ]
        for p in ps:
            p.start()
        lat, errors = [], []
        loop = asyncio.get_running_loop()
        for _ in ps:
            lat_i, err_i = await loop.run_in_executor(None, q.get)
            lat += lat_i
            errors += err_i
        for p in ps:
            p.join()
    dt = time.monotonic() - t0
    lat.sort()

    def pct(q: float) -> float:
        return round(lat[min(len(lat) - 1, int(q * len(lat)))] * 1000, 2) if lat else float("nan")

    return {
        "ops_per_s": round(len(lat) / dt, 1),
        "p50_ms": pct(0.5),
        "p99_ms": pct(0.99),
        "ok": len(lat),
        "errors": len(errors),
    }


def bench_appends(
    flush: str,
    concurrency: int,
    seconds: float,
    size: int,
    base_port: int,
    client_procs: int = 1,
    connections: int = 0,
    pythonpath: str | None = None,
) -> dict[str, Any]:
    """Start 3 members (``flush`` "sync" or "async"; the ``dledger`` package under ``pythonpath``
    when given, see :func:`start_cluster`), run :func:`run_load` with ``size``-byte APPENDs
    against the leader for ``seconds``, stop them. Returns the JSON row: appends/s
    (``ops_per_s``), latency percentiles (ms), errors, and each member's CPU seconds (user +
    system) with the CPU microseconds per acknowledged append, over the 3 members and the
    leader's alone. Raises ValueError for ``connections`` < 0, RuntimeError when no leader is
    elected within 20 s."""
    if connections < 0:
        raise ValueError(f"connections={connections}: expected >= 0 (0: one per outstanding append)")
    root = Path(tempfile.mkdtemp(prefix="dledger-bench-"))
    peers, procs = start_cluster(root, base_port, flush=flush, pythonpath=pythonpath)
    try:
        leader = wait_leader(peers)
        host, port = DLedgerClient(peers).peers[leader]
        payload = os.urandom(size)
        cpu0 = {n: cpu_seconds(p.pid) for n, p in procs.items()}
        res = asyncio.run(
            run_load(
                host,
                port,
                concurrency,
                seconds,
                lambda: {"body": payload},
                procs=client_procs,
                connections=connections,
            )
        )
        cpu = {n: round(cpu_seconds(p.pid) - cpu0[n], 2) for n, p in procs.items()}
        res["server_cpu_s"] = cpu
        if res["ok"]:
            # CPU cost per acknowledged append over all 3 members: what bounds throughput on an idle machine
            res["cpu_us_per_append"] = round(sum(cpu.values()) / res["ok"] * 1e6, 1)
            res["leader_cpu_us_per_append"] = round(cpu[leader] / res["ok"] * 1e6, 1)
        return {
            "flush": flush,
            "concurrency": concurrency,
            "connections": connections or concurrency,
            "client_procs": client_procs,
            "size": size,
            **res,
        }
    finally:
        stop_cluster(procs)
        shutil.rmtree(root, ignore_errors=True)


def main(ns: argparse.Namespace) -> int:
    res = bench_appends(
        ns.flush, ns.concurrency, ns.seconds, ns.size, ns.base_port, ns.client_procs, ns.connections
    )
    print(json.dumps(res))
    return 0
