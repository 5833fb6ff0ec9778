"""Packet delay, reorder and duplicate without netem: the pure-Python NFQUEUE delayer.

Pure logic: nfnetlink_queue message packing and parsing (layouts from
``linux/netfilter/nfnetlink_queue.h``), the per-packet plan, the shell the nemesis runs.
Real containers (``DockerProvider(5, name="delaytest")``): round trips on the DB port rise by the
delay while the control node's SSH stays fast; a burst of numbered UDP datagrams arrives out of
order under reorder and partly twice under duplicate; a killed delayer does not blackhole traffic
(``--queue-bypass``); after stop and after ``chaos heal`` no delayer process and no rule remain.
"""

from __future__ import annotations

import json
import random
import shutil
import socket
import statistics
import struct
import subprocess
import time
from collections.abc import Iterator
from typing import Any

import pytest

from chaos.nemesis import nfqdelay as nq
from chaos.nemesis import packet

CLUSTER = "delaytest"
PORT = 20911  # the DB port
CHAOS = shutil.which("chaos") or "chaos"

# ---------------------------------------------------------------------------------------------
# Pure logic: netlink packing / parsing


def test_nla_pads_to_four_bytes() -> None:
    a = nq.nla(7, b"\x01\x02\x03\x04\x05")
    assert len(a) == 12
    assert struct.unpack("=HH", a[:4]) == (9, 7)  # length excludes the padding
    assert a[4:9] == b"\x01\x02\x03\x04\x05" and a[9:] == b"\0\0\0"


def test_config_bind_layout() -> None:
    msg = nq.config_cmd(7, nq.NFQNL_CFG_CMD_BIND, seq=5)
    length, kind, flags, seq, portid = struct.unpack_from("=IHHII", msg)
    assert length == len(msg) == 16 + 4 + 8
    assert kind == (3 << 8) | 2  # NFNL_SUBSYS_QUEUE, NFQNL_MSG_CONFIG
    assert flags == nq.NLM_F_REQUEST | nq.NLM_F_ACK and seq == 5 and portid == 0
    family, version, res_id = struct.unpack_from("!BBH", msg, 16)
    assert (family, version, res_id) == (socket.AF_UNSPEC, 0, 7)  # queue number big-endian
    attrs = nq.parse_attrs(msg[20:])
    assert attrs == {nq.NFQA_CFG_CMD: struct.pack("!BxH", 1, socket.AF_INET)}


def test_config_params_layout() -> None:
    msg = nq.config_params(300, nq.NFQNL_COPY_PACKET, 0xFFFF, 5000, nq.NFQA_CFG_F_GSO)
    assert struct.unpack_from("!H", msg, 18)[0] == 300
    attrs = nq.parse_attrs(msg[20:])
    assert attrs[nq.NFQA_CFG_PARAMS] == struct.pack("!IB", 0xFFFF, 2)
    assert attrs[nq.NFQA_CFG_QUEUE_MAXLEN] == struct.pack("!I", 5000)
    assert attrs[nq.NFQA_CFG_FLAGS] == attrs[nq.NFQA_CFG_MASK] == struct.pack("!I", 4)
    no_flags = nq.parse_attrs(nq.config_params(1, nq.NFQNL_COPY_META, 0, 10, 0)[20:])
    assert nq.NFQA_CFG_FLAGS not in no_flags and nq.NFQA_CFG_MASK not in no_flags


def test_verdict_layout() -> None:
    msg = nq.verdict_msg(7, 0xDEADBEEF, nq.NF_ACCEPT, seq=9)
    ((kind, flags, seq, payload),) = list(nq.parse_messages(msg))
    assert kind == (3 << 8) | 1 and flags == nq.NLM_F_REQUEST and seq == 9
    assert struct.unpack("!BBH", payload[:4])[2] == 7
    assert nq.parse_attrs(payload[4:]) == {nq.NFQA_VERDICT_HDR: struct.pack("!II", 1, 0xDEADBEEF)}


def _packet_msg(queue: int, pid: int, payload: bytes | None, cap_len: int | None = None) -> bytes:
    attrs = nq.nla(nq.NFQA_PACKET_HDR, struct.pack("!IHB", pid, 0x0800, 3))
    attrs += nq.nla(5 | 0x4000, b"\0\0\0\2")  # an attribute with NLA_F_NET_BYTEORDER set
    if payload is not None:
        attrs += nq.nla(nq.NFQA_PAYLOAD, payload)
    if cap_len is not None:
        attrs += nq.nla(nq.NFQA_CAP_LEN, struct.pack("!I", cap_len))
    return nq.nfq_msg(nq.NFQNL_MSG_PACKET, queue, attrs)


def test_parse_packets_in_one_datagram() -> None:
    buf = _packet_msg(7, 41, None) + _packet_msg(7, 42, b"E" + b"\0" * 27, cap_len=1500)
    msgs = list(nq.parse_messages(buf))
    assert [m[0] for m in msgs] == [(3 << 8) | 0] * 2
    p1, p2 = (nq.parse_packet(m[3]) for m in msgs)
    assert (p1.queue, p1.packet_id, p1.hw_protocol, p1.hook, p1.payload) == (7, 41, 0x0800, 3, None)
    assert p2.packet_id == 42 and p2.payload == b"E" + b"\0" * 27 and p2.truncated
    assert not p1.truncated


def test_parse_error_and_ack() -> None:
    orig = nq.config_cmd(7, 1, seq=3)
    err = nq.nlmsg(nq.NLMSG_ERROR, 0, 3, struct.pack("=i", -16) + orig[:16])
    ack = nq.nlmsg(nq.NLMSG_ERROR, 0, 4, struct.pack("=i", 0) + orig[:16])
    (e,), (a,) = nq.parse_messages(err), nq.parse_messages(ack)
    assert nq.parse_error(e[3]) == 16  # EBUSY
    assert nq.parse_error(a[3]) == 0


def test_malformed_input_is_refused() -> None:
    good = _packet_msg(7, 1, None)
    with pytest.raises(ValueError, match="length"):
        list(nq.parse_messages(good[:-4]))  # header says more than the datagram holds
    with pytest.raises(ValueError, match="length"):
        nq.parse_attrs(struct.pack("=HH", 40, 1) + b"\0" * 4)
    with pytest.raises(ValueError, match="NFQA_PACKET_HDR"):
        nq.parse_packet(struct.pack("!BBH", 0, 0, 7))
    with pytest.raises(ValueError, match="queue 70000"):
        nq.nfq_msg(nq.NFQNL_MSG_VERDICT, 70000, b"")


def test_plan_delay_jitter_reorder() -> None:
    rng = random.Random(1)
    holds = [nq.Plan(100, 20).hold_s(rng) for _ in range(2000)]
    assert 0.080 <= min(holds) and max(holds) <= 0.120
    assert 0.095 < statistics.mean(holds) < 0.105
    reorder = [nq.Plan(reorder=0.3).hold_s(rng) for _ in range(2000)]
    at_once = sum(1 for h in reorder if h == 0) / len(reorder)
    assert 0.25 < at_once < 0.35
    assert {round(h, 3) for h in reorder if h} == {nq.REORDER_DELAY_MS / 1000}
    assert nq.Plan(duplicate=0.5).hold_s(rng) == 0.0
    dups = sum(nq.Plan(duplicate=0.25).duplicates(rng) for _ in range(2000)) / 2000
    assert 0.2 < dups < 0.3
    assert not any(nq.Plan(delay_ms=5).duplicates(rng) for _ in range(100))


@pytest.mark.parametrize(
    "kw, msg",
    [
        ({"delay_ms": -1}, "expected >= 0"),
        ({"reorder": 1.5}, "reorder 1.5"),
        ({"duplicate": -0.1}, "duplicate"),
    ],
)
def test_plan_bad_input(kw: dict[str, float], msg: str) -> None:
    with pytest.raises(ValueError, match=msg):
        nq.Plan(**kw)


class _RecordingQueue:
    """Stands in for the netlink socket in the pure heap logic: records verdict order."""

    def __init__(self) -> None:
        self.verdicts: list[int] = []

    def verdict(self, packet_id: int, verdict: int = nq.NF_ACCEPT) -> None:
        self.verdicts.append(packet_id)


def test_delayer_releases_by_due_time_not_arrival() -> None:
    q = _RecordingQueue()
    d = nq.Delayer(q, nq.Plan(delay_ms=50, jitter_ms=40), random.Random(3), None)  # type: ignore[arg-type]
    for i in range(50):
        d.take(nq.Packet(7, i, 0x0800, 3), now=i * 0.001)
    d.release_due(0.005)
    assert all(pid < 50 for pid in q.verdicts) and len(q.verdicts) < 50
    d.release_due(1.0)
    assert sorted(q.verdicts) == list(range(50))
    assert q.verdicts != list(range(50))  # jitter reorders
    assert d.stats["accepted"] == 50 and d.stats["max_held"] >= 40


def test_mechanisms_and_reasons() -> None:
    caps = packet.parse_probe("netem=no\nhtb=yes\nstatistic=yes\nmark=yes\nnfqueue=yes\nrawsend=no\n")
    assert packet.mechanism("delay", caps) == "nfqueue"
    assert packet.mechanism("reorder", caps) == "nfqueue"
    assert packet.mechanism("duplicate", caps) is None
    assert "re-send copies" in packet.why_not("duplicate", caps, {"rawsend": "EPERM"})
    out = "nfqueue=no\nnfqueue_why=nfqueue bind queue 8: Operation not permitted\n"
    caps2, why = packet.parse_probe(out), packet.parse_reasons(out)
    assert "nfqueue_why" not in caps2 and packet.mechanism("delay", caps2) is None
    assert packet.why_not("delay", caps2, why).endswith("queue 8: Operation not permitted")
    assert packet.mechanism("delay", {"netem": True}) == "netem"


def test_shape_script_rule_and_delayer_args() -> None:
    beh = {"delay": {"ms": 100, "jitter_ms": 5}, "duplicate": 0.3}
    script = packet.shape_script(
        ["10.0.0.2", "10.0.0.3"], beh, {"delay": "nfqueue", "duplicate": "nfqueue"}, "SRC"
    )
    assert "-d 10.0.0.2,10.0.0.3 -m mark '!' --mark 0xc4a5 -j NFQUEUE --queue-num 7 --queue-bypass" in script
    assert (
        "--delay-ms 100 --jitter-ms 5 --duplicate 0.3 --pidfile /var/run/chaos-nemesis/nfqdelay.pid" in script
    )
    assert script.index("--pidfile") < script.index("-j NFQUEUE")  # rule only once the queue is bound
    only_delay = packet.shape_script(["10.0.0.2"], {"delay": {"ms": 10}}, {"delay": "nfqueue"}, "SRC")
    assert "--mark" not in only_delay.split("NFQUEUE")[0].split("iptables -w -A CHAOS-PACKET-OUT")[-1]
    with pytest.raises(ValueError, match="delayer source"):
        packet.shape_script(["10.0.0.2"], {"reorder": 0.5}, {"reorder": "nfqueue"})


def test_parse_stop_output() -> None:
    out = 'nfqdelay-stats {"queued": 5, "accepted": 5, "duplicated": 0, "max_held": 2}\nnfqdelay-exited Killed\n'
    stats, exited = packet.parse_stop(out)
    assert stats == {"queued": 5, "accepted": 5, "duplicated": 0, "max_held": 2} and exited == "Killed"
    assert packet.parse_stop("") == (None, None)
    assert packet.parse_stop("nfqdelay-stats {broken")[0] is None


# ---------------------------------------------------------------------------------------------
# Real containers

# Node-side helper (python3 on the node; waits with select, never time.sleep).
HELPER = r"""
import json, select, socket, sys, time
mode, port = sys.argv[1], int(sys.argv[2])
def pause(s):
    select.select([], [], [], s)
if mode == "echo":          # UDP + TCP echo on the DB port until killed
    u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); u.bind(("0.0.0.0", port))
    t = socket.socket(); t.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    t.bind(("0.0.0.0", port)); t.listen(16)
    conns = []
    while True:
        r = select.select([u, t] + conns, [], [])[0]
        for s in r:
            if s is u:
                d, a = u.recvfrom(4096); u.sendto(d, a)
            elif s is t:
                c, _ = t.accept(); conns.append(c)
            else:
                d = s.recv(4096)
                if d:
                    s.sendall(d)
                else:
                    conns.remove(s); s.close()
elif mode == "rtt":         # median round trips (ms): udp and tcp
    host, n = sys.argv[3], int(sys.argv[4])
    u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); u.settimeout(3)
    udp = []
    for i in range(n):
        t0 = time.monotonic(); u.sendto(b"%d" % i, (host, port))
        while u.recv(100) != b"%d" % i:
            pass
        udp.append((time.monotonic() - t0) * 1000)
    s = socket.create_connection((host, port), timeout=3); s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    tcp = []
    for i in range(n):
        t0 = time.monotonic(); s.sendall(b"p"); s.recv(10)
        tcp.append((time.monotonic() - t0) * 1000)
    s.close()
    print(json.dumps({"udp": sorted(udp)[n // 2], "tcp": sorted(tcp)[n // 2]}))
elif mode == "recv":        # record numbered datagrams for a while
    u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); u.bind(("0.0.0.0", port))
    end, got = time.monotonic() + float(sys.argv[3]), []
    while time.monotonic() < end:
        if select.select([u], [], [], 0.1)[0]:
            got.append(int(u.recv(100)))
    print(json.dumps(got))
elif mode == "burst":       # numbered datagrams, one every 0.5 ms
    host, n = sys.argv[3], int(sys.argv[4])
    u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    for i in range(n):
        u.sendto(b"%d" % i, (host, port)); pause(0.0005)
"""
HELPER_PATH = "/tmp/chaos-delay-helper.py"


@pytest.fixture(scope="module")
def env() -> Iterator[Any]:
    from test_nemesis_support import make_test, node_cluster

    with node_cluster(CLUSTER, heal_before=True, heal_after=True) as (nodes, control):
        control.on_nodes(
            lambda r: r.exec_raw(
                f"cat > {HELPER_PATH} <<'EOF'\n{HELPER}\nEOF\n"
                # the DB may hold the port if a run used this cluster
                "kill $(cat /var/run/dledger.pid 2>/dev/null) 2>/dev/null; true",
                sudo=True,
            )
        )
        yield make_test(nodes, control)


def host_of(env: Any, name: str) -> str:
    return str(next(n.peer_host for n in env.nodes if n.name == name))


def background(env: Any, node: str, *args: str) -> None:
    env.control.remote(node).exec_raw(
        f"setsid nohup python3 {HELPER_PATH} {' '.join(args)} >/tmp/chaos-delay-bg.out 2>&1 </dev/null & "
        "echo $! > /tmp/chaos-delay-bg.pid; sleep 0.3",
        sudo=True,
    )


def stop_background(env: Any, node: str) -> str:
    res = env.control.remote(node).exec_raw(
        'p=$(cat /tmp/chaos-delay-bg.pid 2>/dev/null); [ -n "$p" ] && kill $p 2>/dev/null; '
        'while [ -n "$p" ] && kill -0 $p 2>/dev/null; do sleep 0.05; done; '
        "rm -f /tmp/chaos-delay-bg.pid; cat /tmp/chaos-delay-bg.out",
        sudo=True,
    )
    return str(res.stdout)


def wait_background(env: Any, node: str) -> Any:
    res = env.control.remote(node).exec_raw(
        "p=$(cat /tmp/chaos-delay-bg.pid); while kill -0 $p 2>/dev/null; do sleep 0.05; done; "
        "cat /tmp/chaos-delay-bg.out",
        sudo=True,
        timeout=60,
    )
    return json.loads(res.stdout.strip().splitlines()[-1])


def rtt(env: Any, src: str, dst: str, n: int = 15) -> dict[str, float]:
    res = env.control.remote(src).exec("python3", HELPER_PATH, "rtt", str(PORT), host_of(env, dst), str(n))
    return dict(json.loads(res.stdout.strip().splitlines()[-1]))


def ssh_ms(env: Any, node: str, n: int = 10) -> float:
    r = env.control.remote(node)
    times = []
    for _ in range(n):
        t0 = time.monotonic()
        r.exec("true")
        times.append((time.monotonic() - t0) * 1000)
    return statistics.median(times)


def leftovers(env: Any, node: str) -> list[str]:
    """Delayer processes, the tool's OUTPUT chain or jumps and the pidfile on a node."""
    script = (
        packet.delayer_residue_script()
        + f"; iptables -w -S {packet.CHAIN_OUT} >/dev/null 2>&1 && echo chain {packet.CHAIN_OUT}"
        + "; iptables -w -S OUTPUT | grep -- '-j CHAOS-' | sed 's/^/jump /'"
        + f"; iptables -w -S | grep NFQUEUE | sed 's/^/rule /'; [ -f {packet.DELAYER_PID} ] && echo pidfile; true"
    )
    res = env.control.remote(node).exec_raw(script, sudo=True)
    return [x for x in res.stdout.splitlines() if x.strip()]


def nfqueue_rule_packets(env: Any, node: str) -> int:
    """Packets the node's NFQUEUE rules (one per peer address) have matched so far."""
    res = env.control.remote(node).exec_raw(f"iptables -w -L {packet.CHAIN_OUT} -v -x -n", sudo=True)
    rows = [line.split() for line in res.stdout.splitlines() if "NFQUEUE" in line]
    assert len(rows) == len(env.nodes) - 1, res.stdout
    return sum(int(r[0]) for r in rows)


def inversions(seq: list[int]) -> int:
    """Adjacent pairs received in the wrong order."""
    return sum(1 for a, b in zip(seq, seq[1:], strict=False) if b < a)


@pytest.mark.docker
@pytest.mark.slow
def test_probe_binds_the_queue(env: Any) -> None:
    nem = packet.PacketNemesis({"delay": {"ms": 50}, "reorder": 0.2, "duplicate": 0.2})
    caps = nem.probe(env)
    for name in ("n1", "n5"):
        assert caps[name]["nfqueue"] and caps[name]["rawsend"] and caps[name]["mark"], (caps, nem.reasons)
    nem.setup(env)  # nothing Unsupported


@pytest.mark.docker
@pytest.mark.slow
def test_probe_failure_is_unsupported_naming_node(env: Any) -> None:
    """The queue the probe binds is held by another process on n3: setup refuses, naming n3 and why."""
    r = env.control.remote("n3")
    with open(nq.__file__) as f:
        src = f.read()
    r.exec_raw(
        f"cat > /tmp/chaos-nfq-holder.py <<'CHAOS_EOF'\n{src}\nCHAOS_EOF\n"
        f"setsid nohup python3 /tmp/chaos-nfq-holder.py --queue {packet.PROBE_QUEUE} --delay-ms 1 "
        "--pidfile /tmp/chaos-nfq-holder.pid >/tmp/chaos-nfq-holder.log 2>&1 </dev/null & "
        "for i in $(seq 100); do [ -s /tmp/chaos-nfq-holder.pid ] && break; sleep 0.05; done",
        sudo=True,
    )
    try:
        nem = packet.PacketNemesis({"delay": {"ms": 50}})
        with pytest.raises(
            packet.Unsupported,
            match=r"packet-delay on n3: .*nfqueue bind queue 8: Operation not permitted \(another process holds",
        ):
            nem.setup(env)
        assert nem.caps["n1"]["nfqueue"] and not nem.caps["n3"]["nfqueue"]
    finally:
        r.exec_raw("kill $(cat /tmp/chaos-nfq-holder.pid) 2>/dev/null; true", sudo=True)


@pytest.mark.docker
@pytest.mark.slow
def test_delay_raises_db_port_rtt_not_ssh(env: Any) -> None:
    from chaos.nemesis.base import nemesis_op
    from chaos.nemesis.cli import residue

    nem = packet.PacketNemesis({"delay": {"ms": 100, "jitter_ms": 0}})
    nem.setup(env)
    background(env, "n2", "echo", str(PORT))
    try:
        base = rtt(env, "n1", "n2")
        ssh_base = ssh_ms(env, "n1")
        done = nem.invoke(
            env,
            nemesis_op(
                "start-packet", {"behaviour": {"delay": {"ms": 100, "jitter_ms": 0}}, "nodes": ["n1"]}
            ),
        )
        assert done.value["mechanism"] == {"n1": "nfqueue"}
        assert done.value["nodes"] == ["n1"]
        delayed = rtt(env, "n1", "n2")
        for proto in ("udp", "tcp"):
            assert 90 <= delayed[proto] - base[proto] <= 130, (proto, base, delayed)
        # SSH from the control node is never queued: the rule's packet counter does not move while
        # only SSH talks to n1, and SSH exec times stay far below one delay
        time.sleep(0.5)  # let the echo connection's closing segments (themselves delayed) pass
        queued_before = nfqueue_rule_packets(env, "n1")
        ssh_delayed = ssh_ms(env, "n1")
        assert nfqueue_rule_packets(env, "n1") == queued_before
        assert ssh_delayed < ssh_base + 50, (ssh_base, ssh_delayed)
        # a node not delayed toward a node that is not delayed: unchanged
        assert rtt(env, "n3", "n2", 5)["udp"] < 30
        assert any("nfqdelay" in x for x in residue(env.control.remote("n1")))
        stop = nem.invoke(env, nemesis_op("stop-packet"))
        assert "n1" in stop.value["healed"]
        stats = stop.value["nfqueue"]["n1"]  # the delayer's own count, recorded in the history
        assert stats["queued"] >= 30 and stats["accepted"] == stats["queued"], stats
        assert set(stop.value["nfqueue"]) == {"n1"} and "delayer_exited" not in stop.value
        assert leftovers(env, "n1") == []
        after = rtt(env, "n1", "n2")
        assert after["udp"] < 30 and after["tcp"] < 30, after
    finally:
        stop_background(env, "n2")
        nem.heal(env)


@pytest.mark.docker
@pytest.mark.slow
def test_reorder_burst_arrives_out_of_order(env: Any) -> None:
    from chaos.nemesis.base import nemesis_op

    nem = packet.PacketNemesis({"reorder": 0.5})
    nem.setup(env)
    try:
        background(env, "n4", "recv", str(PORT), "3")
        env.control.remote("n3").exec("python3", HELPER_PATH, "burst", str(PORT), host_of(env, "n4"), "300")
        before = wait_background(env, "n4")
        assert len(before) >= 295 and inversions(before) <= 2, before
        done = nem.invoke(env, nemesis_op("start-packet", {"behaviour": {"reorder": 0.5}, "nodes": ["n3"]}))
        assert done.value["mechanism"] == {"n3": "nfqueue"}
        background(env, "n4", "recv", str(PORT), "3")
        env.control.remote("n3").exec("python3", HELPER_PATH, "burst", str(PORT), host_of(env, "n4"), "300")
        got = wait_background(env, "n4")
        assert sorted(got) == list(range(300)), "reorder must neither lose nor duplicate"
        assert inversions(got) >= 20, got
        nem.invoke(env, nemesis_op("stop-packet"))
    finally:
        nem.heal(env)
    assert leftovers(env, "n3") == []


@pytest.mark.docker
@pytest.mark.slow
def test_duplicate_delivers_some_twice(env: Any) -> None:
    from chaos.nemesis.base import nemesis_op

    nem = packet.PacketNemesis({"duplicate": 0.4})
    nem.setup(env)
    try:
        done = nem.invoke(env, nemesis_op("start-packet", {"behaviour": {"duplicate": 0.4}, "nodes": ["n5"]}))
        assert done.value["mechanism"] == {"n5": "nfqueue"}
        background(env, "n1", "recv", str(PORT), "3")
        env.control.remote("n5").exec("python3", HELPER_PATH, "burst", str(PORT), host_of(env, "n1"), "300")
        got = wait_background(env, "n1")
        assert set(got) == set(range(300))
        dups = len(got) - 300
        assert 60 <= dups <= 180, dups  # 40 % of 300 = 120
        # the copies are not queued again (mark): no datagram arrives three times
        assert max(got.count(i) for i in set(got)) == 2
        stop = nem.invoke(env, nemesis_op("stop-packet"))
        assert 60 <= stop.value["nfqueue"]["n5"]["duplicated"] <= 180
        background(env, "n1", "recv", str(PORT), "3")
        env.control.remote("n5").exec("python3", HELPER_PATH, "burst", str(PORT), host_of(env, "n1"), "100")
        assert sorted(wait_background(env, "n1")) == list(range(100))
    finally:
        nem.heal(env)
    assert leftovers(env, "n5") == []


@pytest.mark.docker
@pytest.mark.slow
def test_dead_delayer_does_not_blackhole_and_chaos_heal_cleans(env: Any) -> None:
    from chaos.nemesis.base import nemesis_op

    nem = packet.PacketNemesis({"delay": {"ms": 100}})
    background(env, "n2", "echo", str(PORT))
    try:
        nem.invoke(env, nemesis_op("start-packet", {"behaviour": {"delay": {"ms": 100}}, "targets": "all"}))
        assert all(any("nfqdelay process" in x for x in leftovers(env, n.name)) for n in env.nodes)
        # SIGKILL the delayer on n1: its rule stays, but --queue-bypass lets packets through at once
        env.control.remote("n1").exec_raw(f"kill -9 $(cat {packet.DELAYER_PID})", sudo=True)
        time.sleep(0.3)
        assert rtt(env, "n1", "n2", 5)["udp"] < 130  # n2's replies are still delayed, n1's sends not
        assert any("chain" in x for x in leftovers(env, "n1"))
        # `chaos heal` as a real process on the named cluster
        res = subprocess.run(
            [CHAOS, "heal", "--cluster-name", CLUSTER],
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert res.returncode == 0, res.stdout + res.stderr
        lines = res.stdout.splitlines()
        for n in env.nodes:  # every node had the delayer's leftovers, so each says what it healed
            assert any(ln.startswith(f"{n.name}: healed") for ln in lines), res.stdout
        assert "still present" not in res.stdout and "not healed" not in res.stdout, res.stdout
        for n in env.nodes:
            assert leftovers(env, n.name) == [], n.name
        assert rtt(env, "n1", "n2", 5)["udp"] < 30
        # a delayer that died before the stop is recorded in the stop op, not passed over
        nem.invoke(env, nemesis_op("start-packet", {"behaviour": {"delay": {"ms": 100}}, "nodes": ["n4"]}))
        env.control.remote("n4").exec_raw(f"kill -9 $(cat {packet.DELAYER_PID})", sudo=True)
        stop = nem.invoke(env, nemesis_op("stop-packet"))
        assert set(stop.value["delayer_exited"]) == {"n4"}, stop.value
        assert leftovers(env, "n4") == []
    finally:
        stop_background(env, "n2")
        nem.heal(env)
