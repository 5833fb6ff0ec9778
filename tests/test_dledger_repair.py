"""Issue 36 item 2 on 3 real ``dledger server`` processes: committed entries damaged (a bit flipped
with ``python -m dledger.tools.inspect DIR --flip-bit POS`` while the members are down) on two or
all three members, at different entries, so each entry is intact on a majority (or somewhere).
The damaged members must repair without a leader from any peer holding a verified copy, keep
their intact entries after the damaged one, and the group must elect a leader and serve every
committed entry again. The same entry damaged on every member is reported with its index."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from test_dledger_cluster import Cluster

N = 200


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Cluster]:
    c = Cluster(tmp_path, 3)
    yield c
    for n in list(c.procs):
        c.kill(n)


def _fill(c: Cluster) -> dict[int, tuple[bytes, int]]:
    """Start the group, append N entries and stop it cleanly; ``index -> (body, pos)``."""
    c.start_all()
    c.leader(timeout=60)
    out: dict[int, tuple[bytes, int]] = {}
    with c.client(timeout=5.0) as cl:
        for i in range(N):
            body = f"v{i}".encode()
            for _ in range(20):
                r = cl.append(body)
                if r.ok:
                    break
                time.sleep(0.3)
            assert r.ok, r
            out[r.index] = (body, -1)
    c.wait_caught_up(timeout=60)
    with c.client(timeout=5.0) as cl:
        for index in out:
            g = cl.get(index)
            assert g.ok, g
            out[index] = (out[index][0], g.raw["pos"] if g.raw else -1)  # type: ignore[index]
    c.stop_all()
    return out


def _damage(c: Cluster, node: str, pos: int) -> None:
    """Flip a bit in the body of the record at ``pos`` of ``node``'s stopped store."""
    d = c.root / "store" / f"dledger-{node}"
    r = subprocess.run(
        [sys.executable, "-m", "dledger.tools.inspect", str(d), "--flip-bit", str(pos + 48 + 1)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert r.returncode == 0, r.stderr


def _serves_everything(c: Cluster, entries: dict[int, tuple[bytes, int]]) -> None:
    c.leader(timeout=90)
    with c.client(timeout=5.0) as cl:
        for _ in range(20):
            r = cl.append(b"after")
            if r.ok:
                break
            time.sleep(0.3)
        assert r.ok, r
    c.wait_caught_up(timeout=90)
    want = [body for _, (body, _) in sorted(entries.items())]
    for n in c.ids:
        got = [b for b in c.read_log(n) if b]
        assert got[:N] == want, (n, len(got))
        assert got[N:] == [b"after"], (n, got[N:])


@pytest.mark.slow
def test_damage_on_two_members_at_different_entries_is_repaired_without_a_leader(cluster: Cluster) -> None:
    """Different entries flipped on n1 and n2, n0 intact: both damaged members used to abstain
    from votes until a leader repaired them, so no leader was ever elected."""
    c = cluster
    entries = _fill(c)
    idx = sorted(entries)
    _damage(c, "n1", entries[idx[50]][1])
    _damage(c, "n2", entries[idx[120]][1])
    c.start_all()
    _serves_everything(c, entries)
    for n in ("n1", "n2"):  # each repaired its log (from a peer, or from its own intact data)
        log = (c.root / f"{n}.log").read_text()
        assert "repair done: the log holds entries up to" in log, n


@pytest.mark.slow
def test_damage_on_all_three_members_keeps_the_intact_entries_after_it(cluster: Cluster) -> None:
    """Different entries flipped on every member: cutting each log at its first damaged entry
    made the entries after the highest one unreadable everywhere. The intact entries after a
    damaged one are kept and re-appended; each damaged one is fetched from a peer."""
    c = cluster
    entries = _fill(c)
    idx = sorted(entries)
    _damage(c, "n0", entries[idx[180]][1])
    _damage(c, "n1", entries[idx[50]][1])
    _damage(c, "n2", entries[idx[120]][1])
    c.start_all()
    _serves_everything(c, entries)
    assert "intact committed entries" in (c.root / "n0.log").read_text()


@pytest.mark.slow
def test_an_entry_damaged_on_every_member_is_reported_with_its_index(cluster: Cluster) -> None:
    c = cluster
    entries = _fill(c)
    index = sorted(entries)[100]
    for n in c.ids:
        _damage(c, n, entries[index][1])
    c.start_all()
    deadline = time.monotonic() + 90
    want = f"committed entry {index} is damaged on every member"
    while not any(want in (c.root / f"{n}.log").read_text() for n in c.ids):
        assert time.monotonic() < deadline, "no member reported the entry damaged beyond every copy"
        time.sleep(0.5)
    assert c.meta("n0")["repairBlockedAt"] == index
