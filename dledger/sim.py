"""A deterministic simulation of a DLedger group: the sans-IO cores on a simulated network and clock.

Every member is a :class:`dledger.core.Core` over a :class:`~dledger.store.MemoryLogStore`; messages
are delivered after a seeded random latency unless the pair is partitioned, the receiver is down, or
``drop`` says so. Time is simulated milliseconds. While running, the simulation checks Raft's safety
properties (paper section 5.2 election safety, 5.4.3 state machine safety) and raises
:class:`SafetyViolation` at the first breach.
"""

from __future__ import annotations

import heapq
import random
from collections.abc import Callable
from typing import Any

from dledger.core import Core, CoreConfig, Role
from dledger.protocol import Message
from dledger.store import Entry, MemoryLogStore


class SimLogStore(MemoryLogStore):
    """MemoryLogStore plus the two calls snapshots need: ``compact_prefix`` and ``reset``."""

    def __init__(self) -> None:
        super().__init__()
        self._base_term = -1

    @property
    def end_term(self) -> int:
        return self._entries[-1].term if self._entries else self._base_term

    def compact_prefix(self, index: int) -> int:
        """Drop entries before ``index``; return the new begin index."""
        if index <= self._begin:
            return self._begin
        self._base_term = self.get(index - 1).term
        del self._entries[: index - self._begin]
        self._begin = index
        return index

    def reset(self, begin_index: int, next_pos: int, last_term: int, chain_crc: int = -1) -> None:
        """Forget every entry; the log continues at ``begin_index`` with ``pos`` ``next_pos``."""
        self._entries = []
        self._begin = begin_index
        self._next_pos = next_pos
        self._base_term = last_term
        self.synced_index = begin_index - 1


class SafetyViolation(AssertionError):
    """Two leaders in one term (or one member leading twice in a term), two votes by one member in
    one term, or two different entries committed at one index."""


class Sim:
    """``n`` members named s1..sn; ``seed`` fixes every random choice; ``cfg`` overrides CoreConfig."""

    def __init__(self, n: int = 3, seed: int = 0, latency: tuple[int, int] = (1, 3), **cfg: Any) -> None:
        self.ids = [f"s{i + 1}" for i in range(n)]
        self.rng = random.Random(seed)
        self.latency = latency
        self.cfg = cfg
        self.now = 0
        self._clock: dict[str, tuple[int, int, float]] = {}  # node -> (since, local then, rate)
        self.reads: dict[str, list[tuple[int, int]]] = {i: [] for i in self.ids}  # confirmed reads
        self.stores: dict[str, SimLogStore] = {i: SimLogStore() for i in self.ids}
        self.installed: dict[str, list[tuple[int, int, bytes]]] = {i: [] for i in self.ids}
        self.hard: dict[str, tuple[int, str | None]] = {i: (0, None) for i in self.ids}
        self.nodes: dict[str, Core] = {}
        self.blocked: set[tuple[str, str]] = set()
        self.drop: Callable[[Message], bool] | None = None
        self._queue: list[tuple[int, int, Message]] = []
        self._seq = 0
        self.leaders: dict[int, str] = {}  # term -> leader (election safety)
        self._leading: dict[str, bool] = {}  # node -> leader at its last check
        self._stints: set[tuple[str, int]] = set()  # (node, term) of every leadership stint
        self.votes: dict[tuple[str, int], str] = {}  # (voter, term) -> the member it voted for
        self.committed: dict[int, tuple[int, bytes]] = {}  # index -> (term, body) (state machine safety)
        self.max_term_seen = 0
        self._checked: dict[str, int] = {}
        for i in self.ids:
            self.start(i)

    # ------------------------------------------------------------ membership

    def start(self, node: str) -> Core:
        """(Re)start ``node`` from its store and persisted term/vote."""
        term, vote = self.hard[node]
        core = Core(
            CoreConfig(self_id=node, peers=self.ids, **self.cfg),
            self.stores[node],
            term=term,
            vote_for=vote,
            rng=random.Random(self.rng.random()),
            now=self.local(node),
        )
        self.nodes[node] = core
        self._checked[node] = -1
        self._leading[node] = False
        return core

    def crash(self, node: str) -> None:
        """Stop ``node``; its synced log and term/vote survive (every write is synced here)."""
        self.nodes.pop(node, None)

    def partition(self, *groups: list[str]) -> None:
        """Only members of the same group can talk; members in no group are isolated."""
        self.blocked = {
            (a, b)
            for a in self.ids
            for b in self.ids
            if a != b and not any(a in g and b in g for g in groups)
        }

    def isolate(self, node: str) -> None:
        self.blocked |= {(node, o) for o in self.ids if o != node} | {
            (o, node) for o in self.ids if o != node
        }

    def heal(self) -> None:
        self.blocked = set()

    # ------------------------------------------------------------ running

    def leader(self) -> str | None:
        """The live leader with the highest term, if any."""
        best = None
        for i, c in self.nodes.items():
            if c.role == Role.LEADER and (best is None or c.term > self.nodes[best].term):
                best = i
        return best

    def run(self, ms: int, until: Callable[[], bool] | None = None) -> bool:
        """Advance ``ms`` simulated milliseconds (1 ms steps, ticks every 10 ms); stop early when
        ``until()`` holds and return True then."""
        end = self.now + ms
        while self.now < end:
            self.now += 1
            while self._queue and self._queue[0][0] <= self.now:
                _, _, msg = heapq.heappop(self._queue)
                core = self.nodes.get(msg.dst)
                if core is not None:
                    core.step(msg, self.local(msg.dst))
                    self._process(msg.dst)
            if self.now % 10 == 0:
                for i in list(self.nodes):
                    self.nodes[i].tick(self.local(i))
                    self._process(i)
            if until is not None and until():
                return True
        return until is not None and until()

    def local(self, node: str) -> int:
        """``node``'s clock in ms: simulated time, or slower/faster after :meth:`set_clock_rate`."""
        since, base, rate = self._clock.get(node, (0, 0, 1.0))
        return base + int((self.now - since) * rate)

    def set_clock_rate(self, node: str, rate: float) -> None:
        """From now on ``node``'s clock advances ``rate`` ms per simulated ms (continuously)."""
        self._clock[node] = (self.now, self.local(node), rate)

    def read_index(self, node: str, read_id: int, lease: bool = False) -> int:
        """Ask ``node`` for a linearizable read; confirmed ones land in ``reads[node]``."""
        code = self.nodes[node].read_index(read_id, self.local(node), lease=lease)
        self._process(node)
        return code

    def transfer(self, to: str) -> int:
        """Ask the current leader to hand leadership to ``to``; the leader's answer code (SUCCESS when
        the transfer started). Raises AssertionError when there is no leader."""
        ld = self.leader()
        assert ld is not None, "no leader to transfer from"
        code = self.nodes[ld].transfer(to, 1, self.local(ld))
        self._process(ld)
        return code

    def propose(self, body: bytes) -> Entry | None:
        """Propose ``body`` at the current leader; None when there is none."""
        ld = self.leader()
        if ld is None:
            return None
        _, e = self.nodes[ld].propose(body, self.local(ld))
        self._process(ld)
        return e

    def _process(self, node: str) -> None:
        core = self.nodes[node]
        for _ in range(4):
            rd = core.ready(self.local(node))
            self.reads[node].extend(rd.reads)
            if rd.hard_state is not None:
                self.hard[node] = rd.hard_state
                term, vote = rd.hard_state
                if vote is not None and self.votes.setdefault((node, term), vote) != vote:
                    raise SafetyViolation(
                        f"{node} voted twice in term {term}: {self.votes[(node, term)]} and {vote}"
                    )
            if rd.snapshot_install is not None:
                self.installed[node].append(rd.snapshot_install)
            if rd.need_sync:
                self.stores[node].sync()
            core.on_synced(self.stores[node].end_index, self.local(node))
            for m in rd.messages:
                self._send(m)
            self._check(node)
            if not core.has_ready():
                break

    def _send(self, m: Message) -> None:
        if (m.src, m.dst) in self.blocked or (self.drop is not None and self.drop(m)):
            return
        self._seq += 1
        heapq.heappush(self._queue, (self.now + self.rng.randint(*self.latency), self._seq, m))

    def _check(self, node: str) -> None:
        core = self.nodes[node]
        self.max_term_seen = max(self.max_term_seen, core.term)
        leading = core.role == Role.LEADER
        if leading:
            other = self.leaders.setdefault(core.term, node)
            if other != node:
                raise SafetyViolation(f"two leaders in term {core.term}: {other} and {node}")
            if not self._leading.get(node):
                if (node, core.term) in self._stints:
                    raise SafetyViolation(f"{node} became leader twice in term {core.term}")
                self._stints.add((node, core.term))
        self._leading[node] = leading
        st = self.stores[node]
        start = max(st.begin_index, self._checked[node] + 1)
        self._checked[node] = max(self._checked[node], core.commit_index)
        for i in range(start, core.commit_index + 1):
            e = st.get(i)
            seen = self.committed.setdefault(i, (e.term, e.body))
            if seen != (e.term, e.body):
                raise SafetyViolation(
                    f"{node} committed ({e.term}, {e.body!r}) at {i}, but ({seen[0]}, {seen[1]!r}) was committed there"
                )

    def check_all(self) -> None:
        """Re-check every member's whole committed prefix (entries must not change once committed)."""
        for i in self.nodes:
            self._checked[i] = -1
            self._check(i)

    def logs(self) -> dict[str, list[tuple[int, bytes]]]:
        """Each member's log as (term, body) pairs."""
        return {
            i: [(s.get(k).term, s.get(k).body) for k in range(s.begin_index, s.end_index + 1)]
            for i, s in self.stores.items()
        }
