"""Packet delay, reorder and duplicate for nodes without tc netem: a pure-Python NFQUEUE program.

Shipped to the node and run there as ``python3 nfqdelay.py --queue 7 --delay-ms 100 ...`` (standard
library only: Debian does not package the ``netfilterqueue`` module). It speaks the kernel's
nfnetlink_queue protocol (``include/uapi/linux/netfilter/nfnetlink_queue.h``) over a raw
``AF_NETLINK`` / ``NETLINK_NETFILTER`` socket:

1. ``NFQNL_MSG_CONFIG`` with ``NFQNL_CFG_CMD_BIND`` binds the queue (``EPERM`` if another process
   holds it or without ``CAP_NET_ADMIN``), then ``NFQA_CFG_PARAMS`` sets the copy mode:
   ``NFQNL_COPY_META`` (no payload) for delay and reorder, ``NFQNL_COPY_PACKET`` when duplicating.
2. Each ``NFQNL_MSG_PACKET`` (one packet queued by an iptables ``-j NFQUEUE --queue-bypass`` rule)
   is given a release time and pushed on a heap.
3. At its release time the packet gets ``NFQNL_MSG_VERDICT`` ``NF_ACCEPT`` by packet id. Verdicts
   may go out of id order, so jitter and reorder really reorder packets.

Behaviours (netem's, ``man tc-netem``): ``delay D jitter J`` holds each packet ``D + U(-J, J)`` ms;
``reorder P`` sends a fraction P of packets at once and holds the others (``D``, or 10 ms without a
delay, as netem needs a delay to reorder); ``duplicate P`` accepts the packet and also re-sends a
copy of it through an ``IPPROTO_RAW`` socket, marked with ``SO_MARK`` so the rule (``-m mark !
--mark M``) does not queue the copy again. ``--probe`` only binds and unbinds a queue and prints
``nfqueue=yes`` / ``nfqueue=no`` plus ``rawsend=yes|no`` (and ``*_why=`` reasons).

Waiting uses ``select`` timeouts only: under the nodes' libfaketime setup ``time.sleep`` fails with
EINVAL. SIGTERM/SIGINT release every held packet (accept), unbind, remove the pidfile, print
``nfqdelay: stopped: {"queued": n, "accepted": n, "duplicated": n, "max_held": n}`` and exit 0.
The pidfile (``--pidfile``) is written only once the queue is bound, so its presence means ready.
"""

from __future__ import annotations

import argparse
import errno
import heapq
import json
import os
import random
import select
import signal
import socket
import struct
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass

# netlink (linux/netlink.h)
NETLINK_NETFILTER = 12
NLM_F_REQUEST = 0x1
NLM_F_ACK = 0x4
NLMSG_NOOP = 1
NLMSG_ERROR = 2
NLMSG_DONE = 3
SOL_NETLINK = 270
NETLINK_NO_ENOBUFS = 5
NLA_TYPE_MASK = 0x3FFF  # strips NLA_F_NESTED / NLA_F_NET_BYTEORDER

# nfnetlink (linux/netfilter/nfnetlink.h) and nfnetlink_queue
NFNL_SUBSYS_QUEUE = 3
NFQNL_MSG_PACKET = 0
NFQNL_MSG_VERDICT = 1
NFQNL_MSG_CONFIG = 2
NFQNL_CFG_CMD_BIND = 1
NFQNL_CFG_CMD_UNBIND = 2
NFQNL_COPY_NONE = 0
NFQNL_COPY_META = 1
NFQNL_COPY_PACKET = 2
NFQA_PACKET_HDR = 1
NFQA_VERDICT_HDR = 2
NFQA_PAYLOAD = 10
NFQA_CAP_LEN = 13
NFQA_CFG_CMD = 1
NFQA_CFG_PARAMS = 2
NFQA_CFG_QUEUE_MAXLEN = 3
NFQA_CFG_MASK = 4
NFQA_CFG_FLAGS = 5
NFQA_CFG_F_GSO = 0x4
NF_DROP = 0
NF_ACCEPT = 1

SO_MARK = 36
SO_RCVBUFFORCE = 33  # not exported by the socket module
QUEUE_MAXLEN = 10000  # like netem's packet limit: beyond it the kernel drops
REORDER_DELAY_MS = 10.0

_NLMSGHDR = struct.Struct("=IHHII")  # len, type, flags, seq, portid (host order)
_NFGENMSG = struct.Struct("!BBH")  # family, version, res_id (queue number, big-endian)
_NLATTR = struct.Struct("=HH")  # len, type (host order)


class NetlinkError(OSError):
    """The kernel answered a netlink request with a negative errno (``errno`` holds it)."""


def _align(n: int) -> int:
    return (n + 3) & ~3


def nla(kind: int, data: bytes) -> bytes:
    """One netlink attribute (``struct nlattr`` + data, padded to 4 bytes)."""
    raw = _NLATTR.pack(_NLATTR.size + len(data), kind) + data
    return raw + b"\0" * (_align(len(raw)) - len(raw))


def nlmsg(msg_type: int, flags: int, seq: int, payload: bytes) -> bytes:
    """One netlink message: ``struct nlmsghdr`` (length covers the header) + payload."""
    return _NLMSGHDR.pack(_NLMSGHDR.size + len(payload), msg_type, flags, seq, 0) + payload


def nfq_msg(msg_type: int, queue: int, attrs: bytes, seq: int = 0, flags: int = NLM_F_REQUEST) -> bytes:
    """An nfnetlink_queue message for ``queue``: nlmsghdr (subsystem QUEUE), nfgenmsg, attributes."""
    if not 0 <= queue <= 0xFFFF:
        raise ValueError(f"queue {queue}: expected 0..65535")
    head = _NFGENMSG.pack(socket.AF_UNSPEC, 0, queue)
    return nlmsg((NFNL_SUBSYS_QUEUE << 8) | msg_type, flags, seq, head + attrs)


def config_cmd(queue: int, command: int, seq: int = 0) -> bytes:
    """``NFQNL_MSG_CONFIG`` with ``NFQA_CFG_CMD`` (``struct nfqnl_msg_config_cmd``), asking an ACK."""
    body = struct.pack("!BxH", command, socket.AF_INET)
    return nfq_msg(NFQNL_MSG_CONFIG, queue, nla(NFQA_CFG_CMD, body), seq, NLM_F_REQUEST | NLM_F_ACK)


def config_params(
    queue: int, copy_mode: int, copy_range: int, maxlen: int, flags: int, seq: int = 0
) -> bytes:
    """``NFQNL_MSG_CONFIG`` with copy mode/range (``struct nfqnl_msg_config_params``), queue length,
    and ``NFQA_CFG_FLAGS`` under a mask of the same bits; asks an ACK."""
    attrs = nla(NFQA_CFG_PARAMS, struct.pack("!IB", copy_range, copy_mode))
    attrs += nla(NFQA_CFG_QUEUE_MAXLEN, struct.pack("!I", maxlen))
    if flags:
        attrs += nla(NFQA_CFG_FLAGS, struct.pack("!I", flags)) + nla(NFQA_CFG_MASK, struct.pack("!I", flags))
    return nfq_msg(NFQNL_MSG_CONFIG, queue, attrs, seq, NLM_F_REQUEST | NLM_F_ACK)


def verdict_msg(queue: int, packet_id: int, verdict: int = NF_ACCEPT, seq: int = 0) -> bytes:
    """``NFQNL_MSG_VERDICT`` for one packet id (``struct nfqnl_msg_verdict_hdr``), no ACK."""
    return nfq_msg(
        NFQNL_MSG_VERDICT, queue, nla(NFQA_VERDICT_HDR, struct.pack("!II", verdict, packet_id)), seq
    )


def parse_messages(buf: bytes) -> Iterator[tuple[int, int, int, bytes]]:
    """Netlink messages in one datagram: ``(type, flags, seq, payload)``. Raises ValueError on a
    truncated or malformed header."""
    off = 0
    while off + _NLMSGHDR.size <= len(buf):
        length, kind, flags, seq, _ = _NLMSGHDR.unpack_from(buf, off)
        if length < _NLMSGHDR.size or off + length > len(buf):
            raise ValueError(
                f"netlink message at {off}: length {length} outside the {len(buf)}-byte datagram"
            )
        yield kind, flags, seq, bytes(buf[off + _NLMSGHDR.size : off + length])
        off += _align(length)


def parse_attrs(data: bytes) -> dict[int, bytes]:
    """Netlink attributes -> ``{type: data}`` (flag bits stripped; the last of a repeated type wins)."""
    out: dict[int, bytes] = {}
    off = 0
    while off + _NLATTR.size <= len(data):
        length, kind = _NLATTR.unpack_from(data, off)
        if length < _NLATTR.size or off + length > len(data):
            raise ValueError(f"netlink attribute at {off}: length {length} outside {len(data)} bytes")
        out[kind & NLA_TYPE_MASK] = data[off + _NLATTR.size : off + length]
        off += _align(length)
    return out


def parse_error(payload: bytes) -> int:
    """The errno of an ``NLMSG_ERROR`` payload (0 for an ACK)."""
    (err,) = struct.unpack_from("=i", payload)
    return -int(err)


@dataclass
class Packet:
    """One queued packet: queue number, packet id, ethertype, netfilter hook, payload (copy mode
    PACKET only) and whether the copy was truncated (``NFQA_CAP_LEN``)."""

    queue: int
    packet_id: int
    hw_protocol: int
    hook: int
    payload: bytes | None = None
    truncated: bool = False


def parse_packet(payload: bytes) -> Packet:
    """An ``NFQNL_MSG_PACKET`` payload (nfgenmsg + attributes) -> :class:`Packet`. Raises ValueError
    when ``NFQA_PACKET_HDR`` is missing."""
    _, _, queue = _NFGENMSG.unpack_from(payload)
    attrs = parse_attrs(payload[_NFGENMSG.size :])
    hdr = attrs.get(NFQA_PACKET_HDR)
    if hdr is None or len(hdr) < 7:
        raise ValueError("nfqueue packet message without NFQA_PACKET_HDR")
    packet_id, hw_protocol, hook = struct.unpack_from("!IHB", hdr)
    return Packet(queue, packet_id, hw_protocol, hook, attrs.get(NFQA_PAYLOAD), NFQA_CAP_LEN in attrs)


class NfQueue:
    """One bound nfnetlink queue (``libnetfilter_queue``'s ``nfq_create_queue`` + ``nfq_set_mode``).

    Raises :class:`NetlinkError` (``EPERM``: the queue is held by another process, or no
    ``CAP_NET_ADMIN``) or OSError when netlink is not available.
    """

    def __init__(
        self, queue: int, copy_mode: int = NFQNL_COPY_META, copy_range: int = 0, flags: int = 0
    ) -> None:
        self.queue = queue
        self.seq = 0
        self.sock = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, NETLINK_NETFILTER)
        try:
            self.sock.bind((0, 0))
            for opt, val in ((SO_RCVBUFFORCE, 8 << 20), (socket.SO_RCVBUF, 8 << 20)):
                try:
                    self.sock.setsockopt(socket.SOL_SOCKET, opt, val)
                    break
                except OSError:
                    continue
            try:  # drop-and-continue instead of ENOBUFS when the kernel outruns us
                self.sock.setsockopt(SOL_NETLINK, NETLINK_NO_ENOBUFS, 1)
            except OSError:
                pass
            self.request(config_cmd(queue, NFQNL_CFG_CMD_BIND, self.next_seq()), "bind queue")
            self.bound = True
            self.request(
                config_params(queue, copy_mode, copy_range, QUEUE_MAXLEN, flags, self.next_seq()),
                "set copy mode",
            )
        except BaseException:
            self.sock.close()
            raise

    def next_seq(self) -> int:
        self.seq += 1
        return self.seq

    def request(self, msg: bytes, what: str) -> None:
        """Send a request that asks an ACK and wait (up to 2 s) for its answer."""
        seq = _NLMSGHDR.unpack_from(msg)[3]
        self.sock.send(msg)
        deadline = time.monotonic() + 2.0
        while True:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([self.sock], [], [], left)[0]:
                raise NetlinkError(errno.ETIMEDOUT, f"nfqueue {what}: no answer from the kernel")
            for kind, _, mseq, payload in parse_messages(self.sock.recv(1 << 16)):
                if kind == NLMSG_ERROR and mseq == seq:
                    err = parse_error(payload)
                    if err:
                        hint = ""
                        if err == errno.EPERM:
                            hint = " (another process holds the queue, or CAP_NET_ADMIN is missing)"
                        raise NetlinkError(err, f"nfqueue {what} {self.queue}: {os.strerror(err)}{hint}")
                    return

    def recv(self) -> list[Packet]:
        """Queued packets available now (non-blocking; ``[]`` when none)."""
        try:
            data = self.sock.recv(1 << 18, socket.MSG_DONTWAIT)
        except (BlockingIOError, InterruptedError):
            return []
        except OSError as e:
            if e.errno == errno.ENOBUFS:
                return []
            raise
        out = []
        for kind, _, _, payload in parse_messages(data):
            if kind == (NFNL_SUBSYS_QUEUE << 8) | NFQNL_MSG_PACKET:
                out.append(parse_packet(payload))
            elif kind == NLMSG_ERROR and parse_error(payload):
                # a verdict for an id the kernel no longer holds (e.g. queue flushed)
                print(f"nfqdelay: kernel error {os.strerror(parse_error(payload))}", file=sys.stderr)
        return out

    def verdict(self, packet_id: int, verdict: int = NF_ACCEPT) -> None:
        self.sock.send(verdict_msg(self.queue, packet_id, verdict, self.next_seq()))

    def close(self) -> None:
        try:
            if getattr(self, "bound", False):
                self.request(config_cmd(self.queue, NFQNL_CFG_CMD_UNBIND, self.next_seq()), "unbind queue")
        except OSError:
            pass
        finally:
            self.sock.close()


@dataclass
class Plan:
    """What to do with each packet: netem's delay/jitter, reorder and duplicate probabilities."""

    delay_ms: float = 0.0
    jitter_ms: float = 0.0
    reorder: float = 0.0
    duplicate: float = 0.0

    def __post_init__(self) -> None:
        if self.delay_ms < 0 or self.jitter_ms < 0:
            raise ValueError(f"delay {self.delay_ms} ms jitter {self.jitter_ms} ms: expected >= 0")
        for name in ("reorder", "duplicate"):
            p = getattr(self, name)
            if not 0 <= p <= 1:
                raise ValueError(f"{name} {p}: expected a probability in [0, 1]")

    def hold_s(self, rng: random.Random) -> float:
        """Seconds to hold the next packet."""
        base = self.delay_ms
        if self.reorder:
            if rng.random() < self.reorder:
                return 0.0  # sent ahead of the held ones
            base = base or REORDER_DELAY_MS
        if not base:
            return 0.0
        return max(0.0, base + rng.uniform(-self.jitter_ms, self.jitter_ms)) / 1000.0

    def duplicates(self, rng: random.Random) -> bool:
        return bool(self.duplicate) and rng.random() < self.duplicate


def raw_sender(mark: int) -> socket.socket:
    """An ``IPPROTO_RAW`` socket (IP header included) whose packets carry ``SO_MARK`` ``mark``."""
    s = socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_RAW)
    try:
        s.setsockopt(socket.SOL_SOCKET, SO_MARK, mark)
    except BaseException:
        s.close()
        raise
    return s


def resend(raw: socket.socket, ip_packet: bytes) -> bool:
    """Send a copy of an IPv4 packet; False if it is not one or the send fails."""
    if len(ip_packet) < 20 or ip_packet[0] >> 4 != 4:
        return False
    try:
        raw.sendto(ip_packet, (socket.inet_ntoa(ip_packet[16:20]), 0))
    except OSError:
        return False
    return True


class Delayer:
    """The loop: receive queued packets, hold them on a heap of release times, accept when due."""

    def __init__(self, nfq: NfQueue, plan: Plan, rng: random.Random, raw: socket.socket | None) -> None:
        self.nfq, self.plan, self.rng, self.raw = nfq, plan, rng, raw
        self.heap: list[tuple[float, int, int, bytes | None]] = []
        self.n = 0
        self.stats = {"queued": 0, "accepted": 0, "duplicated": 0, "max_held": 0}

    def take(self, pkt: Packet, now: float) -> None:
        self.stats["queued"] += 1
        copy = pkt.payload if (pkt.payload and not pkt.truncated and self.plan.duplicates(self.rng)) else None
        hold = self.plan.hold_s(self.rng)
        if hold <= 0:
            self.release(pkt.packet_id, copy)
            return
        self.n += 1
        heapq.heappush(self.heap, (now + hold, self.n, pkt.packet_id, copy))
        self.stats["max_held"] = max(self.stats["max_held"], len(self.heap))

    def release(self, packet_id: int, copy: bytes | None) -> None:
        self.nfq.verdict(packet_id, NF_ACCEPT)
        self.stats["accepted"] += 1
        if copy is not None and self.raw is not None and resend(self.raw, copy):
            self.stats["duplicated"] += 1

    def release_due(self, now: float) -> None:
        while self.heap and self.heap[0][0] <= now:
            _, _, pid, copy = heapq.heappop(self.heap)
            self.release(pid, copy)

    def flush(self) -> None:
        while self.heap:
            _, _, pid, copy = heapq.heappop(self.heap)
            try:
                self.release(pid, copy)
            except OSError:
                pass

    def run(self, wake_fd: int) -> None:
        """Serve until a byte arrives on ``wake_fd`` (the signal wakeup pipe)."""
        while True:
            now = time.monotonic()
            self.release_due(now)
            timeout = max(0.0, self.heap[0][0] - now) if self.heap else None
            sock = self.nfq.sock.fileno()
            ready = select.select([sock, wake_fd], [], [], timeout)[0]
            if wake_fd in ready:
                return
            if sock in ready:
                for _ in range(256):  # drain what is queued, but keep releases on time
                    pkts = self.nfq.recv()
                    if not pkts:
                        break
                    now = time.monotonic()
                    for p in pkts:
                        self.take(p, now)


def probe(queue: int, mark: int) -> int:
    """Print ``nfqueue=yes|no`` (bind + copy mode on ``queue``) and ``rawsend=yes|no``."""
    try:
        NfQueue(queue, NFQNL_COPY_PACKET, 0xFFFF).close()
        print("nfqueue=yes")
    except OSError as e:
        print("nfqueue=no")
        why = e.strerror if isinstance(e, NetlinkError) else f"netlink socket: {e.strerror or e}"
        print(f"nfqueue_why={why}")
    try:
        raw_sender(mark).close()
        print("rawsend=yes")
    except OSError as e:
        print("rawsend=no")
        print(f"rawsend_why=raw IPPROTO_RAW socket with SO_MARK failed: {e.strerror or e}")
    return 0


def write_pidfile(path: str) -> None:
    tmp = f"{path}.{os.getpid()}"
    with open(tmp, "w") as f:
        f.write(f"{os.getpid()}\n")
    os.replace(tmp, path)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="nfqdelay", description="NFQUEUE delay/reorder/duplicate (no netem)")
    ap.add_argument("--queue", type=int, default=7)
    ap.add_argument("--delay-ms", type=float, default=0.0)
    ap.add_argument("--jitter-ms", type=float, default=0.0)
    ap.add_argument("--reorder", type=float, default=0.0, help="probability a packet is sent at once")
    ap.add_argument("--duplicate", type=float, default=0.0, help="probability a packet is also copied")
    ap.add_argument("--mark", type=lambda s: int(s, 0), default=0xC4A5, help="SO_MARK of duplicates")
    ap.add_argument("--pidfile")
    ap.add_argument("--seed", type=int)
    ap.add_argument("--probe", action="store_true", help="only check that the queue can be bound")
    a = ap.parse_args(argv)
    if a.probe:
        return probe(a.queue, a.mark)
    try:
        plan = Plan(a.delay_ms, a.jitter_ms, a.reorder, a.duplicate)
    except ValueError as e:
        ap.error(str(e))
    r, w = os.pipe()
    os.set_blocking(w, False)
    signal.set_wakeup_fd(w)
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, lambda *_: None)
    raw = raw_sender(a.mark) if plan.duplicate else None
    if plan.duplicate:
        nfq = NfQueue(a.queue, NFQNL_COPY_PACKET, 0xFFFF)
    else:
        # metadata only; GSO packets stay whole (we never read the payload)
        nfq = NfQueue(a.queue, NFQNL_COPY_META, 0, NFQA_CFG_F_GSO)
    delayer = Delayer(nfq, plan, random.Random(a.seed), raw)
    if a.pidfile:
        write_pidfile(a.pidfile)
    print(f"nfqdelay: bound queue {a.queue}: {plan}", file=sys.stderr, flush=True)
    try:
        delayer.run(r)
    finally:
        delayer.flush()
        nfq.close()
        if a.pidfile:
            try:
                with open(a.pidfile) as f:
                    mine = f.read().strip() == str(os.getpid())
                if mine:
                    os.unlink(a.pidfile)
            except OSError:
                pass
        print(f"nfqdelay: stopped: {json.dumps(delayer.stats)}", file=sys.stderr, flush=True)
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except OSError as e:
        print(f"nfqdelay: error: {e}", file=sys.stderr)
        sys.exit(3)
