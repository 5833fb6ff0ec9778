"""Clock skew and packet faults on real node containers.

Clock: a python3 process started with the environment the DB automation gives the server
(libfaketime preload, the runtime-writable spec file, the monotonic clock faked) stands in for the
server (its pid in the pidfile the nemesis reads) and prints ``time.monotonic()`` beside the node's
real ``/proc/uptime`` (a file read libfaketime does not touch). Bumps must step its monotonic clock
forward, rates must change how fast it runs, every change must keep it continuous and never make
it go back, and the run's stop must leave rate 1. Packets: loss and rate limits measured by sending
UDP datagrams and a TCP bulk stream between nodes; delay without netem or an NFQUEUE module is
refused before the run starts.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any

import pytest
from test_nemesis_support import make_test, node_cluster

from chaos.control.node import Node
from chaos.nemesis.base import nemesis_op
from chaos.nemesis.cli import heal_control, residue
from chaos.nemesis.clock import AGE_MARGIN_S, ClockNemesis
from chaos.nemesis.packet import PacketNemesis, Unsupported
from chaos_dledger.db import DLedgerDB

pytestmark = [pytest.mark.docker, pytest.mark.slow]

CLUSTER = os.environ.get("CHAOS_NEMESIS_CLUSTER", "nemtest")
PIDFILE = "/tmp/chaos-clock.pid"
OFFSET_FILE = str(DLedgerDB.faketime_file)  # the default DB's, which chaos heal resets
OUT = "/tmp/chaos-clock.out"

# The environment chaos_dledger.db.DLedgerDB.start gives the server (pinned below).
ENV = f'LD_PRELOAD="$lib" FAKETIME_TIMESTAMP_FILE={OFFSET_FILE} FAKETIME_NO_CACHE=1'
CLOCK_PROC = (
    "lib=$(ls /usr/lib/*/faketime/libfaketime.so.1 | head -n1); "
    f"echo +0 > {OFFSET_FILE}; "
    f"{ENV} setsid nohup python3 -u -c "
    "'import select, time\nwhile True:\n"
    '    print(time.monotonic(), open("/proc/uptime").read().split()[0], flush=True)\n'
    "    select.select([], [], [], 0.05)' "
    f"> {OUT} 2>&1 </dev/null & echo $! > {PIDFILE}"
)


def test_server_environment_fakes_the_monotonic_clock() -> None:
    n = Node("n1", "10.0.0.1")
    script = DLedgerDB().start_script_text(n, [n])
    assert f"FAKETIME_TIMESTAMP_FILE={OFFSET_FILE} FAKETIME_NO_CACHE=1" in script
    assert "DONT_FAKE_MONOTONIC" not in script


@pytest.fixture(scope="module")
def env() -> Iterator[Any]:
    with node_cluster(CLUSTER, heal_before=True, heal_after=True) as (nodes, control):
        test = make_test(nodes, control)
        test.db = SimpleNamespace(faketime_file=OFFSET_FILE, pidfile=PIDFILE)
        yield test


def samples(remote: Any) -> list[tuple[float, float]]:
    """Every ``(monotonic, real uptime)`` line the stand-in printed so far."""
    out = remote.exec_raw(f"cat {OUT}").stdout.split("\n")
    return [(float(a), float(b)) for a, b in (line.split() for line in out if len(line.split()) == 2)]


def wait_samples(remote: Any, real_s: float) -> list[tuple[float, float]]:
    """Wait until the stand-in has printed lines spanning ``real_s`` more real seconds."""
    first = samples(remote)[-1][1]
    while True:
        s = samples(remote)
        if s[-1][1] - first >= real_s:
            return s
        remote.exec_raw("sleep 0.2")


def rate_between(s: list[tuple[float, float]], t0: float, t1: float) -> float | None:
    """How fast the monotonic clock ran over the real interval [t0, t1] (uptime seconds); None when
    the sampler (starved on a loaded machine) left fewer than two samples 50 ms apart in it."""
    pts = [p for p in s if t0 <= p[1] <= t1]
    if len(pts) < 2 or pts[-1][1] - pts[0][1] < 0.05:
        return None
    return (pts[-1][0] - pts[0][0]) / (pts[-1][1] - pts[0][1])


def offset(s: list[tuple[float, float]]) -> float:
    """monotonic - real at the last sample: the net step so far (both start near each other)."""
    return s[-1][0] - s[-1][1]


def assert_monotonic_and_continuous(s: list[tuple[float, float]], max_step_s: float) -> None:
    for (m0, u0), (m1, u1) in zip(s, s[1:], strict=False):
        assert m1 >= m0, f"monotonic went back: {m0} -> {m1}"
        assert m1 - m0 <= max_step_s + 3 * (u1 - u0), f"monotonic jumped {m1 - m0:.3f} s in {u1 - u0:.3f} s"


@pytest.fixture
def clock_procs(env: Any) -> Iterator[None]:
    env.control.on_nodes(lambda r: r.exec_raw(CLOCK_PROC, sudo=True))
    for r in (env.control.remote(n.name) for n in env.nodes):
        while len(samples(r)) < 3:
            r.exec_raw("sleep 0.1")
    try:
        yield
    finally:
        env.control.on_nodes(lambda r: r.exec_raw(f"kill $(cat {PIDFILE}) 2>/dev/null; true", sudo=True))


def test_clock_bump_steps_monotonic_forward_and_stop_keeps_it(env: Any, clock_procs: None) -> None:
    nem = ClockNemesis()
    r1, r3 = env.control.remote("n1"), env.control.remote("n3")
    base1 = offset(samples(r1))
    done = nem.invoke(env, nemesis_op("start-clock", {"mode": "bump", "offsets_ms": {"n1": 120_000}}))
    assert done.value["mode"] == "bump" and done.value["clock"] == "monotonic+realtime"
    assert done.value["specs"]["n1"].startswith("+120.")
    s1 = wait_samples(r1, 0.5)
    assert 119.5 < offset(s1) - base1 < 120.5
    s3 = wait_samples(r3, 0.1)
    assert abs(offset(s3) - offset(s3[:3])) < 0.5  # n3 untouched
    assert any("clock offset" in x for x in residue(r1))
    stop = nem.invoke(env, nemesis_op("stop-clock"))
    assert stop.value["rates"]["n1"] == 1 and stop.value["specs"]["n1"].endswith("x1")
    s1 = wait_samples(r1, 0.5)
    assert 119.5 < offset(s1) - base1 < 120.5  # the run's stop never steps the clock back
    assert_monotonic_and_continuous(s1, max_step_s=121)
    assert heal_control(env.control)["n1"] == []  # chaos heal (between runs) writes +0


def test_clock_rate_changes_how_fast_monotonic_runs(env: Any, clock_procs: None) -> None:
    nem = ClockNemesis()
    r2 = env.control.remote("n2")
    wait_samples(r2, 1.0)  # an older process: a rate change without compensation would jump ~1 s
    nem.invoke(env, nemesis_op("start-clock", {"mode": "rate", "rates": {"n2": 2.0}}))
    t_fast = samples(r2)[-1][1]
    s = wait_samples(r2, 2.0)
    nem.invoke(env, nemesis_op("start-clock", {"mode": "rate", "rates": {"n2": 0.5}}))
    t_slow = samples(r2)[-1][1]
    s = wait_samples(r2, 2.0)
    nem.invoke(env, nemesis_op("stop-clock"))
    t_one = samples(r2)[-1][1]
    s = wait_samples(r2, 1.5)
    assert 1.8 < rate_between(s, t_fast + 0.2, t_slow - 0.1) < 2.2
    assert 0.4 < rate_between(s, t_slow + 0.2, t_one - 0.1) < 0.6
    assert 0.9 < rate_between(s, t_one + 0.2, s[-1][1]) < 1.1
    # each change kept the clock continuous: no step beyond a few samples' worth
    assert_monotonic_and_continuous(s, max_step_s=0.1)


def test_clock_strobe_flips_rate_and_heal_stops_it(env: Any, clock_procs: None) -> None:
    nem = ClockNemesis()
    r = env.control.remote("n4")
    value = {"mode": "strobe", "nodes": ["n4"], "rate": 3.0, "period_ms": 1000}
    try:
        nem.invoke(env, nemesis_op("start-clock", value))
        t0 = samples(r)[-1][1]
        s = wait_samples(r, 4.0)
        windows = [rate_between(s, t, t + 0.3) for t in [t0 + 0.1 * i for i in range(36)]]
        rates = [x for x in windows if x is not None]
        assert max(rates) > 2.5 and min(rates) < 0.45, windows  # both 3x and 1/3x observed
        # each flip steps forward by design up to |3 - 1/3| x (AGE_MARGIN_S + the flip script's
        # lateness between reading the process age and writing the offset: about 0.1 s seen on a
        # loaded 2-core machine, 0.3 s allowed); a flip without the continuity correction would jump by
        # |3 - 1/3| x the process's whole age (tens of seconds) or go back
        assert_monotonic_and_continuous(s, max_step_s=abs(3.0 - 1 / 3.0) * (AGE_MARGIN_S + 0.3))
        assert any("strobe loop" in x for x in residue(r))
    finally:
        left = heal_control(env.control)  # also when an assertion failed: no strobe loop outlives the test
    assert left == {n.name: [] for n in env.nodes}


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
