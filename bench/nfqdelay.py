"""The pure-Python NFQUEUE delayer on a real docker cluster: accuracy, throughput, inject/heal time.

Usage: ``python bench/nfqdelay.py [--cluster-name delaytest] [--delay-ms 100] [--packets 20000]``.
Brings the named cluster up (reused when running; left up) and prints:

- the round trip n1 -> n2 on the DB port (UDP) without and with ``packet-delay`` on n1: the added
  median, p99 and max, against the configured delay;
- datagrams per second n1 -> n2 delivered through the delayer (``--delay-ms 1``, a flood of
  ``--packets`` 100-byte datagrams) against no delayer, and the fraction lost;
- TCP bulk throughput n1 -> n2 through the delayer (1 ms) against none;
- wall time of ``start-packet`` (delay, all nodes) and ``stop-packet``.
No DB needed; the DB port must be free on n1 and n2.
"""

from __future__ import annotations

import argparse
import json
import logging
import random
import statistics
import time
from types import SimpleNamespace
from typing import Any

from chaos.nemesis.base import nemesis_op
from chaos.nemesis.cli import heal_control
from chaos.nemesis.packet import PacketNemesis

PORT = 20911
HELPER_PATH = "/tmp/chaos-nfqbench.py"
HELPER = r"""
import json, select, socket, sys, time
mode, port = sys.argv[1], int(sys.argv[2])
if mode == "echo":
    u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); u.bind(("0.0.0.0", port))
    while True:
        d, a = u.recvfrom(4096); u.sendto(d, a)
elif mode == "rtt":
    host, n = sys.argv[3], int(sys.argv[4])
    u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); u.settimeout(3); out = []
    for i in range(n):
        t0 = time.monotonic(); u.sendto(b"%d" % i, (host, port))
        while u.recv(100) != b"%d" % i:
            pass
        out.append((time.monotonic() - t0) * 1000)
    print(json.dumps(out))
elif mode == "count":   # count datagrams until 1 s of silence; print count and span
    u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); u.bind(("0.0.0.0", port))
    u.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 8 << 20)
    n, first, last = 0, None, None
    while select.select([u], [], [], 1.0 if n else 15.0)[0]:
        u.recv(200); n += 1; last = time.monotonic(); first = first or last
    print(json.dumps({"n": n, "s": (last - first) if n > 1 else 0}))
elif mode == "flood":
    host, n = sys.argv[3], int(sys.argv[4])
    u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); buf = b"x" * 100
    for i in range(n):
        u.sendto(buf, (host, port))
        if i % 200 == 199:
            select.select([], [], [], 0.001)
elif mode == "sink":
    t = socket.socket(); t.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    t.bind(("0.0.0.0", port)); t.listen(1); c, _ = t.accept(); n = 0; t0 = time.monotonic()
    while True:
        b = c.recv(1 << 16)
        if not b:
            break
        n += len(b)
    print(json.dumps({"bytes": n, "s": time.monotonic() - t0}))
elif mode == "bulk":
    host, secs = sys.argv[3], float(sys.argv[4])
    s = socket.create_connection((host, port)); buf = b"x" * 65536; end = time.monotonic() + secs
    while time.monotonic() < end:
        s.sendall(buf)
    s.close()
"""


def pct(xs: list[float], p: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(p * len(xs)))]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cluster-name", default="delaytest")
    ap.add_argument("--delay-ms", type=float, default=100.0)
    ap.add_argument("--packets", type=int, default=20000)
    args = ap.parse_args()
    from chaos.cluster.docker import DockerProvider
    from chaos.control.ssh import Control

    nodes = DockerProvider(5, name=args.cluster_name).up()
    control = Control(nodes)
    test = SimpleNamespace(
        nodes=nodes, control=control, db=None, rng=random.Random(1), opts={}, log=logging.getLogger("bench")
    )
    n2 = next(n.peer_host for n in nodes if n.name == "n2")
    r1, r2 = control.remote("n1"), control.remote("n2")

    def bg(r: Any, *a: str) -> None:
        r.exec_raw(
            f"setsid nohup python3 {HELPER_PATH} {' '.join(a)} >/tmp/nfqbench.out 2>&1 </dev/null & "
            "echo $! >/tmp/nfqbench.pid; sleep 0.3",
            sudo=True,
        )

    def bg_result(r: Any, kill: bool = False) -> Any:
        res = r.exec_raw(
            "p=$(cat /tmp/nfqbench.pid); "
            + ("kill $p; " if kill else "")
            + "while kill -0 $p 2>/dev/null; do sleep 0.05; done; cat /tmp/nfqbench.out",
            sudo=True,
            timeout=120,
        )
        out = res.stdout.strip().splitlines()
        return json.loads(out[-1]) if out else None

    def start(ms: float) -> float:
        t0 = time.perf_counter()
        nem.invoke(test, nemesis_op("start-packet", {"behaviour": {"delay": {"ms": ms}}, "nodes": ["n1"]}))
        return time.perf_counter() - t0

    def stop() -> float:
        t0 = time.perf_counter()
        nem.invoke(test, nemesis_op("stop-packet"))
        return time.perf_counter() - t0

    def rtts() -> list[float]:
        res = r1.exec("python3", HELPER_PATH, "rtt", str(PORT), n2, "200")
        return list(json.loads(res.stdout.strip().splitlines()[-1]))

    def flood() -> dict[str, float]:
        bg(r2, "count", str(PORT))
        r1.exec("python3", HELPER_PATH, "flood", str(PORT), n2, str(args.packets), timeout=120)
        got = bg_result(r2)
        return {"delivered": got["n"], "pps": got["n"] / max(got["s"], 1e-9)}

    def bulk() -> float:
        bg(r2, "sink", str(PORT))
        r1.exec("python3", HELPER_PATH, "bulk", str(PORT), n2, "3", timeout=60)
        got = bg_result(r2)
        return float(got["bytes"] / got["s"] / 1e6)

    heal_control(control)
    control.on_nodes(lambda r: r.exec_raw(f"cat > {HELPER_PATH} <<'EOF'\n{HELPER}\nEOF", sudo=True))
    nem = PacketNemesis({"delay": {"ms": args.delay_ms}})
    nem.setup(test)
    try:
        bg(r2, "echo", str(PORT))
        base = rtts()
        t_start = start(args.delay_ms)
        delayed = rtts()
        t_stop = stop()
        bg_result(r2, kill=True)
        added = [d - statistics.median(base) for d in delayed]
        print(
            f"rtt n1->n2 udp: base median {statistics.median(base):.3f} ms; with delay {args.delay_ms:g} ms: "
            f"added median {statistics.median(added):.2f} ms, p99 {pct(added, 0.99):.2f} ms, "
            f"max {max(added):.2f} ms"
        )
        print(f"start-packet (delay, 1 node): {t_start:.2f} s; stop-packet: {t_stop:.2f} s")
        plain = flood()
        start(1)
        through = flood()
        stop()
        print(
            f"udp flood {args.packets} x 100 B: no delayer {plain['pps']:.0f} pkt/s "
            f"({plain['delivered']} delivered); through the delayer (1 ms) {through['pps']:.0f} pkt/s "
            f"({through['delivered']} delivered, {1 - through['delivered'] / args.packets:.1%} lost)"
        )
        plain_mb = bulk()
        start(1)
        through_mb = bulk()
        stop()
        print(f"tcp bulk: no delayer {plain_mb:.0f} MB/s; through the delayer (1 ms) {through_mb:.1f} MB/s")
        t0 = time.perf_counter()
        nem.invoke(test, nemesis_op("start-packet", {"behaviour": {"delay": {"ms": 50}}, "targets": "all"}))
        t_all = time.perf_counter() - t0
        print(f"start-packet (delay, all 5 nodes): {t_all:.2f} s; stop-packet: {stop():.2f} s")
    finally:
        nem.heal(test)
        control.close()


if __name__ == "__main__":
    main()
