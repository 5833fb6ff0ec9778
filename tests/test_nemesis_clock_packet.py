"""Clock skew and packet faults on real node containers.

Clock: a python3 process started the way the DB automation starts the server (libfaketime preload,
the runtime-writable offset file, real monotonic clock) prints its wall clock; bumps and strobes
must show in it and vanish after stop. (The loop waits with select: under libfaketime 0.9.10 with
FAKETIME_DONT_FAKE_MONOTONIC=1, ``time.sleep`` fails with EINVAL.) Packets: loss and rate limits measured by sending UDP
datagrams and a TCP bulk stream between nodes; delay without netem or an NFQUEUE module is refused
before the run starts.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator
from typing import Any

import pytest
from test_nemesis_support import make_test, node_cluster

from chaos.nemesis.base import nemesis_op
from chaos.nemesis.cli import heal_control, residue
from chaos.nemesis.clock import OFFSET_FILE, ClockNemesis
from chaos.nemesis.packet import PacketNemesis, Unsupported

pytestmark = [pytest.mark.docker, pytest.mark.slow]

CLUSTER = os.environ.get("CHAOS_NEMESIS_CLUSTER", "nemtest")

# The same environment chaos.cluster.dledger_db.DLedgerDB.start gives the server.
CLOCK_PROC = (
    "lib=$(ls /usr/lib/*/faketime/libfaketime.so.1 | head -n1); "
    f"[ -f {OFFSET_FILE} ] || echo +0 > {OFFSET_FILE}; "
    f'LD_PRELOAD="$lib" FAKETIME_TIMESTAMP_FILE={OFFSET_FILE} FAKETIME_NO_CACHE=1 '
    "FAKETIME_DONT_FAKE_MONOTONIC=1 setsid nohup python3 -u -c "
    "'import select, time\nwhile True:\n    print(time.time(), time.monotonic(), flush=True)\n"
    "    select.select([], [], [], 0.05)' "
    "> /tmp/chaos-clock.out 2>&1 </dev/null & echo $! > /tmp/chaos-clock.pid"
)


@pytest.fixture(scope="module")
def env() -> Iterator[Any]:
    with node_cluster(CLUSTER, heal_before=True, heal_after=True) as (nodes, control):
        yield make_test(nodes, control)


def skew(remote: Any) -> tuple[float, float]:
    """(faked wall clock - real wall clock, faked monotonic - real monotonic drift) in seconds,
    from the process's latest line and the node's real clock read at the same moment."""
    res = remote.exec_raw(
        "sleep 0.15; a=$(tail -n1 /tmp/chaos-clock.out); r=$(date +%s.%N); m=$(cat /proc/uptime | cut -d' ' -f1); "
        'echo "$a $r $m"'
    )
    fake, mono, real, _ = (float(x) for x in res.stdout.split())
    return fake - real, mono


@pytest.fixture
def clock_procs(env: Any) -> Iterator[None]:
    env.control.on_nodes(lambda r: r.exec_raw(CLOCK_PROC, sudo=True))
    time.sleep(0.5)
    try:
        yield
    finally:
        env.control.on_nodes(
            lambda r: r.exec_raw("kill $(cat /tmp/chaos-clock.pid) 2>/dev/null; true", sudo=True)
        )


def test_clock_bump_visible_and_reset(env: Any, clock_procs: None) -> None:
    nem = ClockNemesis()
    nem.setup(env)
    r1, r2 = env.control.remote("n1"), env.control.remote("n2")
    assert abs(skew(r1)[0]) < 0.5
    mono_before = skew(r1)[1]
    value = {"mode": "bump", "offsets_ms": {"n1": 120_000, "n2": -45_500}}
    done = nem.invoke(env, nemesis_op("start-clock", value))
    assert done.value == value
    s1, mono_after = skew(r1)
    assert 119.5 < s1 < 120.5
    assert -46.0 < skew(r2)[0] < -45.0
    assert abs(skew(env.control.remote("n3"))[0]) < 0.5
    # the monotonic clock is left alone: it keeps counting real seconds
    assert 0 < mono_after - mono_before < 5
    assert any("clock offset" in x for x in residue(r1))
    stop = nem.invoke(env, nemesis_op("stop-clock"))
    assert stop.value["offsets_ms"]["n1"] == 0
    assert abs(skew(r1)[0]) < 0.5 and abs(skew(r2)[0]) < 0.5
    assert residue(r1) == [] and residue(r2) == []


def test_clock_strobe_flips_and_heal_stops_it(env: Any, clock_procs: None) -> None:
    nem = ClockNemesis()
    r = env.control.remote("n4")
    value = {"mode": "strobe", "nodes": ["n4"], "delta_ms": 30_000, "period_ms": 400}
    nem.invoke(env, nemesis_op("start-clock", value))
    seen = set()
    for _ in range(12):
        s = skew(r)[0]
        seen.add(round(s / 30))
    assert seen == {0, 1}, seen  # both +0 and +30 s observed
    assert any("strobe loop" in x for x in residue(r))
    left = heal_control(env.control)
    assert left == {n.name: [] for n in env.nodes}
    assert all(abs(skew(r)[0]) < 0.5 for _ in range(4))


UDP_RECV = r"""
import socket, sys, time
u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); u.bind(("0.0.0.0", 20997)); u.settimeout(1.5)
n = 0
try:
    while True:
        u.recvfrom(2048); n += 1
except socket.timeout:
    pass
print(n)
"""
UDP_SEND = r"""
import socket, sys, time
u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
for i in range(int(sys.argv[2])):
    u.sendto(b"x" * 100, (sys.argv[1], 20997)); time.sleep(0.002)
"""
TCP_RECV = r"""
import socket, time
t = socket.socket(); t.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
t.bind(("0.0.0.0", 20998)); t.listen(1); t.settimeout(10)
c, _ = t.accept(); c.settimeout(0.5); n = 0; start = time.time()
while time.time() - start < 3.0:
    try:
        b = c.recv(65536)
    except socket.timeout:
        continue
    if not b:
        break
    n += len(b)
print(n)
"""
TCP_SEND = r"""
import socket, sys, time
s = socket.create_connection((sys.argv[1], 20998), timeout=5); s.settimeout(0.5)
end = time.time() + 3.0; buf = b"x" * 16384
while time.time() < end:
    try:
        s.send(buf)
    except (socket.timeout, BlockingIOError):
        pass
    except OSError:
        break
s.close()
"""


def pair_run(env: Any, src: str, dst: str, recv: str, send: str, *args: str) -> int:
    """Start ``recv`` on dst, then ``send`` on src toward dst; returns what the receiver printed."""
    dst_host = next(n.peer_host for n in env.nodes if n.name == dst)
    rd, rs = env.control.remote(dst), env.control.remote(src)
    rd.exec_raw(
        f"cat > /tmp/chaos-recv.py <<'EOF'\n{recv}\nEOF\n"
        "setsid nohup python3 /tmp/chaos-recv.py > /tmp/chaos-recv.out 2>&1 </dev/null & "
        "echo $! > /tmp/chaos-recv.pid; sleep 0.3",
        sudo=True,
    )
    rs.exec("python3", "-c", send, dst_host, *args, timeout=60)
    out = rd.exec_raw(
        "p=$(cat /tmp/chaos-recv.pid); while kill -0 $p 2>/dev/null; do sleep 0.1; done; cat /tmp/chaos-recv.out",
        sudo=True,
        timeout=60,
    )
    return int(out.stdout.strip().splitlines()[-1])


def test_probe_and_unsupported_delay_refused_before_run(env: Any) -> None:
    nem = PacketNemesis({"delay": {"ms": 50, "jitter_ms": 0}})
    caps = nem.probe(env)
    assert set(caps) == {n.name for n in env.nodes}
    c = caps["n1"]
    assert c["htb"] and c["statistic"]
    if not c["netem"] and not c["nfqueue"]:
        with pytest.raises(
            Unsupported, match="packet-delay on n1: tc netem is missing.*NFQUEUE delayer cannot run"
        ):
            nem.setup(env)
    else:
        nem.setup(env)


def test_packet_loss_changes_delivery(env: Any) -> None:
    nem = PacketNemesis({"loss": 0.5})
    nem.setup(env)
    try:
        base = pair_run(env, "n1", "n2", UDP_RECV, UDP_SEND, "400")
        assert base >= 390
        done = nem.invoke(env, nemesis_op("start-packet", {"behaviour": {"loss": 0.5}, "nodes": ["n2"]}))
        mech = done.value["mechanism"]["n2"]
        assert mech in ("netem", "iptables-statistic")
        got = pair_run(env, "n1", "n2", UDP_RECV, UDP_SEND, "400")
        # netem drops on n2's egress, the iptables fallback on its ingress; measure the one applied
        if mech == "netem":
            got = pair_run(env, "n2", "n1", UDP_RECV, UDP_SEND, "400")
        assert 120 <= got <= 280, got
        # the control node's SSH is not shaped
        assert all(env.control.remote("n2").exec("true").exit_code == 0 for _ in range(20))
        nem.invoke(env, nemesis_op("stop-packet"))
        assert pair_run(env, "n1", "n2", UDP_RECV, UDP_SEND, "400") >= 390
    finally:
        nem.heal(env)
    assert residue(env.control.remote("n2")) == []


def test_packet_rate_limits_throughput(env: Any) -> None:
    nem = PacketNemesis({"rate": {"kbit": 400}})
    nem.setup(env)
    try:
        base = pair_run(env, "n3", "n4", TCP_RECV, TCP_SEND)
        done = nem.invoke(
            env, nemesis_op("start-packet", {"behaviour": {"rate": {"kbit": 400}}, "nodes": ["n3"]})
        )
        assert done.value["mechanism"] == {"n3": "htb"}
        limited = pair_run(env, "n3", "n4", TCP_RECV, TCP_SEND)
        # 400 kbit/s for 3 s is 150 kB; allow the htb burst and slack
        assert limited < 400_000, limited
        assert base > 10 * limited, (base, limited)
        # SSH to the shaped node is not limited: 2 MB of output well within the limit's time
        t0 = time.monotonic()
        out = env.control.remote("n3").exec_raw("head -c 2000000 /dev/zero | base64 -w0 | wc -c")
        assert int(out.stdout) > 2_000_000 and time.monotonic() - t0 < 10
        nem.invoke(env, nemesis_op("stop-packet"))
        assert pair_run(env, "n3", "n4", TCP_RECV, TCP_SEND) > 5 * limited
    finally:
        nem.heal(env)
    left = env.control.on_nodes(residue)
    assert left == {n.name: [] for n in env.nodes}, json.dumps(left)
