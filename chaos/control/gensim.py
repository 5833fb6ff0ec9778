"""Running a generator in simulated time with instant virtual clients (Jepsen's
``jepsen.generator.test``), for tests: :func:`simulate`."""

from __future__ import annotations

import random
from collections.abc import Callable

from chaos.control.genbase import NEMESIS_THREAD, NS, PENDING, Context, GenLike, OpDict, Thread, to_gen
from chaos.history.op import Op


def simulate(
    gen: GenLike,
    *,
    concurrency: int = 2,
    seed: int = 0,
    latency: float = 0.0,
    complete: Callable[[OpDict], tuple[str, object]] | None = None,
    max_ops: int = 100_000,
    nemesis: bool = True,
) -> list[Op]:
    """Runs ``gen`` with instant virtual clients; returns the history (invocations and completions).

    Each op completes ``latency`` seconds after its invocation; ``complete(op) -> (type, value)``
    picks the completion (default ``("ok", op value)``; nemesis ops are ``info``). Sleep ops hold
    their thread for their duration. Deterministic for a given ``seed``. Stops after ``max_ops``
    invocations (raises RuntimeError if the generator stays pending forever with nothing in flight).
    """
    sim = _Simulation(gen, concurrency, seed, latency, complete, nemesis)
    while sim.gen is not None and sim.invoked < max_ops:
        op, g2 = sim.gen.op(None, sim.context())
        if op is PENDING:
            if g2 is not None:
                sim.gen = g2
            if not sim.inflight:
                raise RuntimeError("generator is pending with nothing in flight: it would wait forever")
        elif op is not None:
            assert isinstance(op, dict)
            if not sim.inflight or op["time"] <= min(sim.inflight)[0]:
                sim.gen = g2
                sim.start(op)
                continue
        if not sim.inflight:
            break
        sim.complete_next()  # nothing to invoke before the earliest op in flight completes
    return sim.history


class _Simulation:
    """The state of :func:`simulate`: virtual time (ns), free threads, ops in flight as (time they
    end, sequence number, thread, op or None for a sleep) kept sorted, and the history so far."""

    def __init__(
        self,
        gen: GenLike,
        concurrency: int,
        seed: int,
        latency: float,
        complete: Callable[[OpDict], tuple[str, object]] | None,
        nemesis: bool,
    ) -> None:
        self.rng = random.Random(seed)
        self.base = Context.initial(concurrency, self.rng, nemesis=nemesis)
        self.gen = to_gen(gen)
        self.concurrency = concurrency
        self.latency = int(latency * NS)
        self.complete = complete
        self.now = 0
        self.free = set(self.base.free)
        self.workers = dict(self.base.workers)
        self.inflight: list[tuple[int, int, Thread, OpDict | None]] = []
        self.seq = 0
        self.history: list[Op] = []
        self.invoked = 0

    def context(self) -> Context:
        return Context(
            self.now, frozenset(self.free), self.base.threads, self.workers, self.rng, self.concurrency
        )

    def start(self, op: OpDict) -> None:
        """Takes up ``op``'s thread at its time: a sleep holds it for its duration, a log frees it
        at once, an invocation is recorded (and shown to the generator) and completes after the
        latency."""
        self.now = max(self.now, op["time"])
        thread = self.base.thread_of(op["process"])
        self.free.discard(thread)
        if op["type"] == "sleep":
            self.inflight.append((self.now + int(op["value"] * NS), self.seq, thread, None))
        elif op["type"] == "log":
            self.free.add(thread)
        else:
            inv = self._record("invoke", op, op.get("value"))
            self.invoked += 1
            if self.gen is not None:
                self.gen = self.gen.update(None, self.context(), inv)
            self.inflight.append((self.now + self.latency, self.seq, thread, op))
        self.seq += 1
        self.inflight.sort(key=lambda x: (x[0], x[1]))

    def complete_next(self) -> None:
        """Completes the earliest op in flight (``info`` for the nemesis, else by ``complete``); a
        client whose op ends ``info`` continues as a new process."""
        t, _, thread, iop = self.inflight.pop(0)
        self.now = max(self.now, t)
        self.free.add(thread)
        if iop is None:
            return
        if iop["process"] == NEMESIS_THREAD:
            typ, val = "info", iop.get("value")
        elif self.complete is not None:
            typ, val = self.complete(iop)
        else:
            typ, val = "ok", iop.get("value")
        comp = self._record(typ, iop, val)
        if typ == "info" and iop["process"] != NEMESIS_THREAD:
            self.workers[thread] = iop["process"] + self.concurrency
        if self.gen is not None:
            self.gen = self.gen.update(None, self.context(), comp)

    def _record(self, typ: str, op: OpDict, value: object) -> Op:
        rec = Op(
            type=typ,
            process=op["process"],
            f=op["f"],
            value=value,
            time=self.now,
            key=op.get("key"),
            index=len(self.history),
        )
        self.history.append(rec)
        return rec
