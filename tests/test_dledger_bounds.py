"""Hostile input against 3 real ``dledger server`` processes on loopback (issue 16, items 1 and 2): a
forged vote with a term no codec can hold, frames that announce 16 MiB and never finish, two
thousand idle and slowloris connections, a client that never reads its answers. Afterwards the group must still elect, append and read,
``currterm`` must hold a sane term, and no member's peak RSS may pass the bound in dledger/README.md.

Attackers connect only from and to 127.0.0.0/8 addresses (members on 127.0.0.1-3, attackers on
127.0.0.50 and up)."""

from __future__ import annotations

import resource
import signal
import socket
import threading
import time
from pathlib import Path

import pytest
from test_dledger_cluster import Cluster

from dledger.protocol import MAX_TERM, MAX_TERM_STEP, RequestCode
from dledger.transport import encode_frame

MIB = 1024 * 1024
MAX_BUFFERED = 64 * MIB  # the server's default --max-buffered
RSS_BOUND_KIB = (96 * MIB + 2 * MAX_BUFFERED) // 1024  # dledger/README.md "Resource bounds"


def attacker(src_ip: str, dst: tuple[str, int], timeout: float = 10.0) -> socket.socket:
    """A TCP connection from loopback address ``src_ip`` to a member."""
    assert src_ip.startswith("127.") and dst[0].startswith("127."), "loopback only"
    s = socket.socket()
    s.bind((src_ip, 0))
    s.settimeout(timeout)
    s.connect(dst)
    return s


def closed_by_server(s: socket.socket, wait: float) -> bool:
    """Whether the member closed ``s`` (EOF or reset) within ``wait`` seconds."""
    s.settimeout(wait)
    try:
        while True:
            if not s.recv(1 << 16):
                return True
    except TimeoutError:
        return False
    except OSError:
        return True


def peak_rss_kib(pid: int) -> int:
    """VmHWM (peak resident set, KiB) of a live process, from /proc/<pid>/status."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1])
    raise AssertionError(f"no VmHWM in /proc/{pid}/status")


def curr_term(c: Cluster, node: str) -> int:
    text = (c.root / "store" / f"dledger-{node}" / "currterm").read_text()
    return int(next(ln for ln in text.splitlines() if ln.startswith("currTerm=")).split("=", 1)[1])


def wait_for(cond, what: str, limit: float = 60.0) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + limit
    while not cond():
        assert time.monotonic() < deadline, f"gave up waiting for {what}"
        time.sleep(0.05)


def assert_group_works(c: Cluster, tag: str) -> None:
    """A leader is elected, appends commit on every member and read back; after the leader is
    stopped the other two elect a new one that appends and reads; the old leader rejoins."""
    ld = c.leader(timeout=30)
    with c.client(timeout=3.0) as cl:
        r = cl.append(f"{tag}-1".encode())
        assert r.ok, r
        assert cl.kv_put(f"{tag}-key", tag).ok
        got = cl.kv_get(f"{tag}-key")
        assert got.ok and got.value == tag, got
    index = r.index
    for n in c.procs:

        def has_it(n: str = n) -> bool:
            with c.client(prefer=n, timeout=1.0) as cl:
                g = cl.get(index)
            return g.ok and g.body == f"{tag}-1".encode()

        wait_for(has_it, f"entry {index} on {n}")
    c.kill(ld, signal.SIGTERM)
    new = c.leader(timeout=30, exclude=ld)
    assert new != ld
    with c.client(timeout=3.0) as cl:
        r2 = cl.append(f"{tag}-2".encode())
        assert r2.ok, r2
        g = cl.get(r2.index)
        assert g.ok and g.body == f"{tag}-2".encode(), g
    c.start(ld)
    c.wait_caught_up(timeout=60)


@pytest.fixture
def cluster_factory(tmp_path: Path):  # type: ignore[no-untyped-def]
    made: list[Cluster] = []

    def make(*extra: str) -> Cluster:
        c = Cluster(tmp_path, 3, *extra)
        c.start_all()
        made.append(c)
        return c

    yield make
    for c in made:
        for n in list(c.procs):
            c.kill(n)


def _forged_vote(c: Cluster, target: str, src: str, term: int, end_term: int, end_index: int) -> bytes:
    body = {
        "k": "vote",
        "group": "default",
        "src": src,
        "dst": target,
        "term": term,
        "ledger_end_index": end_index,
        "ledger_end_term": end_term,
        "round": 0,
    }
    return encode_frame(RequestCode.VOTE, 0, body)


@pytest.mark.slow
def test_forged_vote_with_a_term_past_int64_is_refused_and_the_group_survives_restarts(
    cluster_factory,  # type: ignore[no-untyped-def]
) -> None:
    c: Cluster = cluster_factory("--insecure")  # the forged votes must reach the term checks
    c.leader(timeout=30)
    with c.client(timeout=3.0) as cl:
        assert cl.append(b"before").ok
    # the attack of issue 16: three ~150-byte frames, one per member, each claiming another member
    for i, target in enumerate(c.ids):
        src = c.ids[(i + 1) % 3]
        frame = _forged_vote(c, target, src, 2**64 - 1, 2**64 - 1, 2**63 - 1)
        assert len(frame) < 200
        with attacker("127.0.0.50", (c.ips[target], c.port)) as s:
            s.sendall(frame)
            assert closed_by_server(s, 10.0), "a malformed peer message must close its connection"
    for n in c.ids:
        log = (c.root / f"{n}.log").read_text()
        assert "vote.term: 18446744073709551615 outside 0.." in log, n
    assert_group_works(c, "after-forged-vote")
    assert max(curr_term(c, n) for n in c.ids) < 1000
    # restart every member: they come back at a sane term and still serve
    for n in list(c.procs):
        c.kill(n, signal.SIGTERM)
    c.start_all()
    assert_group_works(c, "after-restart")
    assert max(curr_term(c, n) for n in c.ids) < 1000

    # inside int64 but far above the members' terms: dropped (MAX_TERM_STEP), never adopted; the
    # member moves one step towards it at most (as an in-range forged vote could make it do)
    for i, target in enumerate(c.ids):
        src = c.ids[(i + 1) % 3]
        with attacker("127.0.0.50", (c.ips[target], c.port)) as s:
            s.sendall(_forged_vote(c, target, src, MAX_TERM, MAX_TERM, 2**62))
    for n in c.ids:
        wait_for(lambda n=n: "more than 1048576 above ours" in (c.root / f"{n}.log").read_text(), n)  # type: ignore[misc]
    assert max(curr_term(c, n) for n in c.ids) < MAX_TERM_STEP + 1000
    # a jump of exactly MAX_TERM_STEP is a legal (if hostile) Raft term: adopted, and the group goes on
    base = max(curr_term(c, n) for n in c.ids)
    for i, target in enumerate(c.ids):
        src = c.ids[(i + 1) % 3]
        term = c.meta(target)["term"] + MAX_TERM_STEP
        with attacker("127.0.0.50", (c.ips[target], c.port)) as s:
            s.sendall(_forged_vote(c, target, src, term, term, 2**62))
    wait_for(lambda: all(curr_term(c, n) >= base + MAX_TERM_STEP for n in c.ids), "the stepped term")
    assert_group_works(c, "after-step")
    for n in list(c.procs):
        c.kill(n, signal.SIGTERM)
    c.start_all()
    assert_group_works(c, "after-step-restarted")
    assert all(MAX_TERM_STEP <= curr_term(c, n) < 2 * MAX_TERM_STEP + 2000 for n in c.ids)
    with c.client(timeout=3.0) as cl:
        g = cl.get(1)
        assert g.ok and g.body == b"before", g  # the log from before the attacks still reads


@pytest.mark.slow
def test_big_unfinished_frames_and_thousands_of_idle_connections_stay_bounded(
    cluster_factory,  # type: ignore[no-untyped-def]
) -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    need = 2300
    if soft < need:
        if hard != resource.RLIM_INFINITY and hard < need:
            pytest.skip(f"RLIMIT_NOFILE hard limit {hard} < {need} sockets this test holds")
        resource.setrlimit(resource.RLIMIT_NOFILE, (need, hard))
    c: Cluster = cluster_factory(
        "--frame-timeout-ms",
        "2000",
        "--idle-timeout-ms",
        "4000",
        "--max-connections",
        "400",
        "--max-connections-per-host",
        "200",
    )
    ld = c.leader(timeout=30)
    followers = [n for n in c.ids if n != ld]
    big_target, idle_target = followers
    with c.client(timeout=3.0) as cl:
        assert cl.append(b"before").ok

    # 60 connections each announcing a 16 MiB frame (the maximum) and sending 15 MiB of it
    cut = []
    held: list[socket.socket] = []
    lock = threading.Lock()

    def big(i: int) -> None:
        s = attacker(f"127.0.0.{60 + i % 4}", (c.ips[big_target], c.port), timeout=30.0)
        with lock:
            held.append(s)
        try:
            s.sendall((16 * MIB).to_bytes(4, "big"))
            chunk = bytes(MIB)
            for _ in range(15):
                s.sendall(chunk)
        except OSError:
            with lock:
                cut.append(i)

    threads = [threading.Thread(target=big, args=(i,)) for i in range(60)]
    for t in threads:
        t.start()

    # 2000 idle and slowloris connections from four addresses to the other follower
    idle: list[socket.socket] = []
    slow: list[socket.socket] = []
    for i in range(2000):
        s = attacker(f"127.0.0.{50 + i % 4}", (c.ips[idle_target], c.port))
        (slow if i % 2 else idle).append(s)
    trickling = threading.Event()
    trickling.set()

    def trickle() -> None:  # one byte of a 1000-byte frame per socket every 0.2 s
        live = list(slow)
        for s in live:
            try:
                s.sendall((1000).to_bytes(4, "big"))
            except OSError:
                pass
        while live and trickling.is_set():
            keep = []
            for s in live:
                try:
                    s.sendall(b"x")
                    keep.append(s)
                except OSError:
                    pass
            live = keep
            time.sleep(0.2)

    tr = threading.Thread(target=trickle)
    tr.start()
    try:
        meta = c.meta(idle_target)
        # admitted: at most 400 from non-member addresses, plus links and this client
        assert meta["connections"] <= 400 + 8, meta
        with c.client(timeout=3.0) as cl:
            assert cl.append(b"during").ok  # the group works under the flood
        for t in threads:
            t.join()
        meta = c.meta(big_target)
        assert meta["bufferedBytes"] <= MAX_BUFFERED, meta
        assert cut, "the member must cut connections once 64 MiB of unfinished frames are buffered"
        assert "bytes of unfinished frames over the limit" in (c.root / f"{big_target}.log").read_text()
        # every attacker connection ends: cut for memory, refused, or closed by the frame/idle timeout
        for s in held + idle + slow:
            assert closed_by_server(s, 60.0), "an attacker's connection stayed open"
    finally:
        trickling.clear()
        tr.join()
        for s in held + idle + slow:
            s.close()
    for n in (big_target, idle_target):
        wait_for(lambda n=n: c.meta(n)["connections"] <= 8, f"{n}'s connections to close")  # type: ignore[misc]
        assert c.meta(n)["bufferedBytes"] == 0
    peaks = {n: peak_rss_kib(p.pid) for n, p in c.procs.items()}
    assert all(v <= RSS_BOUND_KIB for v in peaks.values()), (peaks, RSS_BOUND_KIB)
    for n in c.ids:
        print(f"{n}: peak RSS {peaks[n] // 1024} MiB (bound {RSS_BOUND_KIB // 1024} MiB)")
    assert_group_works(c, "after-flood")


@pytest.mark.slow
def test_an_entry_larger_than_a_data_file_is_refused_and_the_member_stays_up(
    cluster_factory,  # type: ignore[no-untyped-def]
) -> None:
    c: Cluster = cluster_factory("--data-file-size", "4096")
    c.leader(timeout=30)
    with c.client(timeout=3.0) as cl:
        r = cl.append(b"x" * 5000)
        assert r.code == 411 and "does not fit a data file of 4096 bytes" in (r.error or ""), r
        assert cl.kv_put("k", "y" * 5000).code == 411
        ok = cl.append(b"small")
        assert ok.ok, ok
    assert all(p.poll() is None for p in c.procs.values())


@pytest.mark.slow
def test_a_client_that_never_reads_its_answers_is_throttled_not_buffered(
    cluster_factory,  # type: ignore[no-untyped-def]
) -> None:
    c: Cluster = cluster_factory()
    ld = c.leader(timeout=30)
    with c.client(timeout=3.0) as cl:
        r = cl.append(b"y" * 60_000)  # every GET of it answers with 60 kB
        assert r.ok, r
    request = encode_frame(RequestCode.GET, 1, {"index": r.index})
    s = attacker("127.0.0.50", (c.ips[ld], c.port))
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    s.settimeout(5.0)
    sent = 0
    try:
        while sent < 200_000:  # 200k requests would make 12 GB of answers
            s.sendall(request * 100)
            sent += 100
    except TimeoutError:
        pass  # the member stopped reading: backpressure instead of buffering answers
    assert sent < 200_000, "the member kept reading requests whose answers nobody takes"
    meta = c.meta(ld)
    assert meta["bufferedBytes"] <= MAX_BUFFERED
    with c.client(timeout=3.0) as cl:
        assert cl.append(b"still").ok
    assert peak_rss_kib(c.procs[ld].pid) <= RSS_BOUND_KIB
    s.close()
    assert_group_works(c, "after-no-reader")


def test_currterm_and_the_entry_codec_refuse_what_they_cannot_hold_before_writing(tmp_path: Path) -> None:
    from dledger.store import Entry, StoreError
    from dledger.store.codec import pack_head
    from dledger.store.hardstate import HardState, HardStateValueError

    hs = HardState(tmp_path)
    hs.save(7, "n1")
    before = (tmp_path / "currterm").read_bytes()
    for term, vote in ((2**63, "n1"), (2**64 - 1, None), (-1, None), (8, "n1\ncurrTerm=9"), (8, "x" * 300)):
        with pytest.raises(HardStateValueError) as err:
            hs.save(term, vote)
        assert isinstance(err.value, StoreError)  # the server stops rather than act on it
        assert (tmp_path / "currterm").read_bytes() == before
    hs.save(2**63 - 1, "n1")  # the largest Java long is fine
    assert HardState(tmp_path).load().curr_term == 2**63 - 1
    (tmp_path / "currterm").write_text("currTerm=18446744073709551615\nvoteLeader=n1\n")
    with pytest.raises(StoreError, match=r"currterm: currTerm=18446744073709551615, expected 0\.\."):
        HardState(tmp_path).load()
    for field, entry in (
        ("term", Entry(0, 2**63, b"x")),
        ("index", Entry(2**64 - 1, 1, b"x")),
        ("channel", Entry(0, 1, b"x", 1, -1, 2**31)),
    ):
        with pytest.raises(StoreError, match=f"entry {field}="):
            pack_head(entry, len(entry.body), 0)


@pytest.mark.slow
def test_with_a_secret_forged_in_range_votes_are_refused_and_members_still_elect(
    cluster_factory,  # type: ignore[no-untyped-def]
    tmp_path: Path,
) -> None:
    """Issue 26 item 9: 300 in-range forged votes from a process naming itself a member walked the
    term up by millions and blocked appends. With a secret, a peer message counts only on a
    connection whose member proved the secret (HMAC handshake); the forger is refused and closed."""
    from dledger.transport import peer_proof

    secret = tmp_path / "peer.secret"
    secret.write_text("s3cret-of-the-group\n")
    c: Cluster = cluster_factory("--secret-file", str(secret))
    c.leader(timeout=30)
    assert_group_works(c, "with-secret")
    base = max(curr_term(c, n) for n in c.ids)
    for k in range(100):  # 300 forged votes in range (below MAX_TERM_STEP), as in the issue
        for i, target in enumerate(c.ids):
            src = c.ids[(i + 1) % 3]
            with attacker("127.0.0.50", (c.ips[target], c.port)) as s:
                s.sendall(_forged_vote(c, target, src, base + 1000 * (k + 1), 10**9, 10**9))
    # a forger that claims a member and answers the challenge with a wrong key is refused too
    with attacker("127.0.0.50", (c.ips[c.ids[0]], c.port)) as s:
        s.sendall(encode_frame(RequestCode.PEER_HELLO, 0, {"id": c.ids[1]}))
        time.sleep(0.2)
        s.sendall(
            encode_frame(RequestCode.PEER_PROOF, 0, {"mac": peer_proof(b"wrong", b"x" * 16, "n1", "n0")})
        )
        assert closed_by_server(s, 10.0), "a wrong proof must close the connection"
    for n in c.ids:
        wait_for(lambda n=n: "refusing peer traffic" in (c.root / f"{n}.log").read_text(), n)  # type: ignore[misc]
    assert max(curr_term(c, n) for n in c.ids) < base + 50, "forged votes moved the term"
    assert_group_works(c, "after-forged-votes")
    # the members authenticate each other across restarts (fresh nonces, no clock involved)
    for n in list(c.procs):
        c.kill(n, signal.SIGTERM)
    c.start_all()
    assert_group_works(c, "with-secret-restarted")


def test_a_member_without_the_secret_cannot_join_the_quorum(tmp_path: Path) -> None:
    """Two members with the secret elect and commit; the third, started with another secret, is
    refused by both (it never becomes leader, and its votes never count)."""
    good, bad = tmp_path / "good.secret", tmp_path / "bad.secret"
    good.write_text("right")
    bad.write_text("wrong")
    c = Cluster(tmp_path, 3)
    try:
        c.start("n0", "--secret-file", str(good))
        c.start("n1", "--secret-file", str(good))
        c.start("n2", "--secret-file", str(bad))
        leader = c.leader(timeout=30)
        assert leader in ("n0", "n1")
        with c.client(prefer=leader, timeout=3.0) as cl:
            assert cl.append(b"x").ok
        wait_for(
            lambda: "wrong proof" in (c.root / "n0.log").read_text() + (c.root / "n1.log").read_text(),
            "n2 refused",
        )
        with c.client(prefer="n2", timeout=1.0) as cl:
            m = cl.metadata()
        assert not (m.raw and m.raw.get("role") == "LEADER")
    finally:
        for n in list(c.procs):
            c.kill(n)


@pytest.mark.slow
def test_forged_votes_that_drive_the_members_terms_apart_do_not_wedge_the_group(
    cluster_factory,  # type: ignore[no-untyped-def]
) -> None:
    """Issue 36 item 1: nine forged in-range votes (1, 3 and 5 per member) left every pair of
    members of a group without a secret more than MAX_TERM_STEP apart; the guard then dropped
    each other's messages for good: no leader, even after restarting all three. Now a member
    moves one step towards a term beyond the guard, so the terms converge and the group elects
    and serves every committed entry again."""
    c: Cluster = cluster_factory("--insecure")
    c.leader(timeout=30)
    with c.client(timeout=3.0) as cl:
        for i in range(20):
            assert cl.append(f"before-{i}".encode()).ok
    c.wait_caught_up(timeout=30)
    for k, target in zip((1, 3, 5), c.ids, strict=True):
        src = next(n for n in c.ids if n != target)
        for _ in range(k):
            term = c.meta(target)["term"] + MAX_TERM_STEP  # in range: adopted
            # sent again until adopted: on a loaded machine one forged connection can be cut before
            # the member reads it (CI saw a 60-s wait for a vote that never arrived)
            deadline = time.monotonic() + 60
            while c.meta(target)["term"] < term:
                assert time.monotonic() < deadline, f"gave up waiting for {target} at term {term}"
                with attacker("127.0.0.50", (c.ips[target], c.port)) as s:
                    s.sendall(_forged_vote(c, target, src, term, 10**12, 10**12))
                end = time.monotonic() + 5
                while c.meta(target)["term"] < term and time.monotonic() < end:
                    time.sleep(0.1)

    def serves_everything(tag: str) -> None:
        c.leader(timeout=30)
        with c.client(timeout=3.0) as cl:
            r = cl.append(tag.encode())
            assert r.ok, r
        c.wait_caught_up(timeout=30)
        for n in c.ids:
            got = [b for b in c.read_log(n) if b]
            assert got == [f"before-{i}".encode() for i in range(20)] + got[20:], (n, got[:25])
            assert tag.encode() in got, (n, tag)

    serves_everything("after-forged-votes")
    for n in list(c.procs):
        c.kill(n, signal.SIGTERM)
    c.start_all()
    serves_everything("after-restart")


def test_a_multi_member_group_refuses_to_start_without_a_secret_unless_insecure(tmp_path: Path) -> None:
    """Issue 36 item 1: without --secret-file any process that reaches the port votes as a member,
    so a group of more than one member does not start that way unless --insecure says so."""
    import subprocess
    import sys

    base = [sys.executable, "-m", "dledger.cli", "server", "--id", "n0", "--store-dir", str(tmp_path)]
    r = subprocess.run(
        [*base, "--peers", "n0-127.0.0.1:1;n1-127.0.0.2:1;n2-127.0.0.3:1"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert r.returncode == 254, (r.returncode, r.stderr)
    assert "--secret-file" in r.stderr and "--insecure" in r.stderr, r.stderr
    assert len(r.stderr.strip().splitlines()) == 1, r.stderr


@pytest.mark.slow
def test_a_term_learnt_without_the_secret_never_reaches_the_group(
    cluster_factory,  # type: ignore[no-untyped-def]
) -> None:
    """Issue 36 item 1: a member restarted without the secret accepted a forged term of 1,000,000
    and spread it to the group once it rejoined with the secret. Its store is marked by the
    insecure run; with the secret it refuses to start on it (the term never travels), and once
    its store is removed it catches up from the group at the group's term."""
    import shutil

    c: Cluster = cluster_factory()
    c.leader(timeout=30)
    with c.client(timeout=3.0) as cl:
        assert cl.append(b"before").ok
    c.wait_caught_up(timeout=30)
    victim = c.ids[2]
    c.kill(victim, signal.SIGTERM)
    c.start(victim, "--insecure")
    wait_for(lambda: c.try_meta(victim) is not None, f"{victim} up without the secret")
    with attacker("127.0.0.50", (c.ips[victim], c.port)) as s:
        s.sendall(_forged_vote(c, victim, c.ids[0], 1_000_000, 10**12, 10**12))
    wait_for(lambda: c.meta(victim)["term"] >= 1_000_000, "the forged term adopted by the insecure member")
    c.kill(victim, signal.SIGTERM)
    c.start(victim)  # with the secret again
    c.procs[victim].wait(60)
    assert c.procs.pop(victim).returncode == 1
    assert "was written by a run without a peer secret" in (c.root / f"{victim}.log").read_text()
    assert max(curr_term(c, n) for n in c.ids[:2]) < 1000
    shutil.rmtree(c.root / "store" / f"dledger-{victim}")
    c.start(victim)
    assert_group_works(c, "after-insecure-member")
    assert max(curr_term(c, n) for n in c.ids) < 1000
