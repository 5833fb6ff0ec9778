"""Group commit on 3 real ``dledger server`` processes with ``--flush sync`` (issue 38 item 4).

Many appends outstanding at once cost far fewer fsyncs than appends (one fsync covers every entry
written while the previous one ran, DLedger's batched flush; Raft thesis 10.2.1), and batching
never weakens fsync-before-ack: no APPEND is answered, and no follower acknowledges a push, for an
entry beyond what that member's own fsyncs covered. Both are read from the members' METADATA
``stats`` (the store's own sync counter and the server's self-checks), not from timing.
"""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from test_dledger_cluster import Cluster

from dledger.protocol import Code, RequestCode
from dledger.transport import FrameDecoder, decode_payload, encode_frame

N = 400  # appends outstanding at once


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Cluster]:
    c = Cluster(tmp_path, 3, "--flush", "sync")
    c.start_all()
    try:
        yield c
    finally:
        c.stop_all()


def _append_all(host: str, port: int, n: int) -> list[dict]:
    """Send ``n`` APPENDs in one write on one connection (all outstanding together, as DLedger's
    client pipelines over one channel) and return the ``n`` answers' bodies."""
    frames = b"".join(
        encode_frame(RequestCode.APPEND, i + 1, {"body": b"x%05d" % i + bytes(1000)}) for i in range(n)
    )
    answers: dict[int, dict] = {}
    with socket.create_connection((host, port), timeout=30) as s:
        s.sendall(frames)
        dec = FrameDecoder()
        while len(answers) < n:
            data = s.recv(1 << 16)
            assert data, f"connection closed after {len(answers)} answers"
            for payload in dec.feed(data):
                _, opaque, is_resp, body = decode_payload(payload)
                assert is_resp
                answers[opaque] = body
    return [answers[i + 1] for i in range(n)]


def test_concurrent_appends_share_fsyncs_and_none_is_acked_before_its_fsync(cluster: Cluster) -> None:
    leader = cluster.leader()
    before = {n: cluster.meta(n)["stats"] for n in cluster.ids}
    host, port = cluster.ips[leader], cluster.port
    answers = _append_all(host, port, N)
    assert all(a["code"] == Code.SUCCESS for a in answers), [a for a in answers if a["code"] != Code.SUCCESS][
        :3
    ]
    indexes = [a["index"] for a in answers]
    assert len(set(indexes)) == N
    cluster.wait_caught_up()
    # caught up is the same end and commit index everywhere; a follower may learn the commit index
    # before its own group fsync of the last batch completes (a loaded machine's fsync took long):
    # wait, bounded, for every member's fsync before reading the counters
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
        after = {n: cluster.meta(n)["stats"] for n in cluster.ids}
        if all(a["syncedIndex"] >= max(indexes) for a in after.values()):
            break
        time.sleep(0.1)
    for n in cluster.ids:
        syncs = after[n]["dataSyncs"] - before[n]["dataSyncs"]
        # every entry was fsynced on every member, by far fewer fsyncs than entries
        assert after[n]["syncedIndex"] >= max(indexes), (n, after[n])
        assert 1 <= syncs < N // 4, (n, syncs, before[n], after[n])
        # ... and batching never acknowledged an entry this member had not fsynced
        assert after[n]["acksBeyondDurable"] == 0, (n, after[n])
        assert after[n]["pushAcksBeyondDurable"] == 0, (n, after[n])


def test_async_flush_reports_acks_beyond_durable(tmp_path: Path) -> None:
    """The self-check is live: with ``--flush async`` (DLedger: acknowledge before the disk) the
    members do acknowledge entries their fsyncs have not covered yet, and say so."""
    c = Cluster(tmp_path, 3, "--flush", "async", "--flush-interval-ms", "2000")
    c.start_all()
    try:
        leader = c.leader()
        answers = _append_all(c.ips[leader], c.port, 50)
        assert all(a["code"] == Code.SUCCESS for a in answers)
        stats = [c.meta(n)["stats"] for n in c.ids]
        assert stats[c.ids.index(leader)]["acksBeyondDurable"] > 0, stats
        assert sum(s["pushAcksBeyondDurable"] for s in stats) > 0, stats
    finally:
        c.stop_all()
