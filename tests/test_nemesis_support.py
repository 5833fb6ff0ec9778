"""Helpers for the nemesis tests on real node containers: the cluster fixture's pieces and the
reachability probe (a tiny TCP + UDP listener on the DB port of every node, and connect/send
attempts between every pair)."""

from __future__ import annotations

import json
import logging
import os
import random
from collections.abc import Iterator
from contextlib import contextmanager
from types import SimpleNamespace
from typing import Any

PORT = 20911

LISTENER = r"""
import socket, sys, threading, time
port, out = int(sys.argv[1]), sys.argv[2]
t = socket.socket(); t.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
t.bind(("0.0.0.0", port)); t.listen(64)
u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); u.bind(("0.0.0.0", port)); u.settimeout(0.2)
def accept():
    while True:
        c, _ = t.accept(); c.close()
threading.Thread(target=accept, daemon=True).start()
end = time.time() + float(sys.argv[3])
with open(out, "w") as f:
    while time.time() < end:
        try:
            data, _ = u.recvfrom(2048)
        except socket.timeout:
            continue
        f.write(data.decode() + "\n"); f.flush()
"""

SENDER = r"""
import json, socket, sys
port, me, peers = int(sys.argv[1]), sys.argv[2], json.loads(sys.argv[3])
count = int(sys.argv[4])
res = {}
u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
for name, host in peers.items():
    for i in range(count):
        u.sendto(f"{me} {i}".encode(), (host, port))
    s = socket.socket(); s.settimeout(1.0)
    try:
        s.connect((host, port)); res[name] = True
    except OSError:
        res[name] = False
    finally:
        s.close()
print(json.dumps(res))
"""


@contextmanager
def node_cluster(
    name: str, *, heal_before: bool = False, heal_after: bool = False
) -> Iterator[tuple[list[Any], Any]]:
    """Five node containers of the docker cluster ``name`` (up, or reused when live) and a Control
    over them: yields ``(nodes, control)``. With ``heal_before``/``heal_after``, ``chaos heal``'s
    clean-up runs on entry/exit. On exit the control is closed and the cluster removed, or kept when
    ``CHAOS_KEEP_CLUSTER`` is set."""
    from chaos.cluster.docker import DockerProvider
    from chaos.control.ssh import Control
    from chaos.nemesis.cli import heal_control

    provider = DockerProvider(5, name=name)
    nodes = provider.up()
    control = Control(nodes)
    try:
        if heal_before:
            heal_control(control)
        yield nodes, control
    finally:
        if heal_after:
            heal_control(control)
        control.close()
        if not os.environ.get("CHAOS_KEEP_CLUSTER"):
            # fresh containers per module: a kept cluster carried one module's leftovers (clock
            # helpers, a member a bitflip kept down) into the next and failed it in CI
            provider.down()


def make_test(nodes: list[Any], control: Any, db: Any = None, seed: int = 1) -> SimpleNamespace:
    """The runner's Test shape (``nodes``, ``control``, ``db``, ``rng``, ``opts``, ``log``); ``db``
    defaults to the default DB (not set up), whose paths the clock and heal code read."""
    if db is None:
        from chaos.nemesis.cli import default_db

        db = default_db()
    return SimpleNamespace(
        nodes=nodes,
        control=control,
        db=db,
        rng=random.Random(seed),
        opts={},
        log=logging.getLogger("test.nemesis"),
    )


@contextmanager
def dledger_test(nodes: list[Any], control: Any) -> Iterator[SimpleNamespace]:
    """A Test over ``nodes`` with DLedger set up (flush sync) on healed nodes; healed and torn down
    again on exit."""
    from chaos.nemesis.cli import heal_control
    from chaos_dledger.db import DLedgerDB

    db = DLedgerDB(flush="sync")
    try:
        heal_control(control)
        db.setup(control)
        yield make_test(nodes, control, db)
    finally:
        heal_control(control)
        db.teardown(control)


def reachability(control: Any, nodes: list[Any], count: int = 3, port: int = PORT) -> dict[str, Any]:
    """Measure the network: ``{"udp": {src: {dst: received count}}, "tcp": {a: {b: connected}}}``.

    Every node listens on ``port`` (TCP and UDP); then every node sends ``count`` datagrams to,
    and attempts a TCP connect to, every other node.
    """
    addr = {n.name: n.peer_host for n in nodes}
    out = "/tmp/chaos-probe-udp.txt"
    pid = "/tmp/chaos-probe.pid"

    def listen(r: Any) -> None:
        r.exec_raw(
            f"[ -f {pid} ] && kill $(cat {pid}) 2>/dev/null; rm -f {out}; "
            f"cat > /tmp/chaos-probe-listener.py <<'EOF'\n{LISTENER}\nEOF\n"
            f"setsid nohup python3 /tmp/chaos-probe-listener.py {port} {out} 8 >/dev/null 2>&1 </dev/null & echo $! > {pid}; "
            f"for i in $(seq 50); do ss -lnt | grep -q ':{port} ' && break; sleep 0.05; done",
            sudo=True,
        )

    control.on_nodes(listen)

    def send(r: Any) -> dict[str, bool]:
        me = r.node.name
        peers = {k: v for k, v in addr.items() if k != me}
        res = r.exec("python3", "-c", SENDER, str(port), me, json.dumps(peers), str(count), sudo=True)
        return dict(json.loads(res.stdout.strip().splitlines()[-1]))

    tcp = control.on_nodes(send)

    def collect(r: Any) -> dict[str, int]:
        res = r.exec_raw(f"sleep 0.5; cat {out}; kill $(cat {pid}) 2>/dev/null; rm -f {pid}; true", sudo=True)
        got: dict[str, int] = {}
        for line in res.stdout.split():
            if line.startswith("n"):
                got[line] = got.get(line, 0) + 1
        return got

    received = control.on_nodes(collect)
    udp = {s: {d: received[d].get(s, 0) for d in addr if d != s} for s in addr}
    return {"udp": udp, "tcp": tcp}
