"""An in-memory, linearizable stand-in for a replicated KV store, to run a workload's real generator
through the real interpreter without a cluster (checker benches and tests).

Each op takes effect atomically at one point inside its interval (under one lock, between two short
random sleeps, so concurrent ops overlap in real time). A fraction ``crash`` of writes and cas end
``info``, having taken effect or not at random, as a client timeout would leave them.
"""

from __future__ import annotations

import random
import threading
import time
from pathlib import Path
from typing import Any

from chaos.control import generator as gen
from chaos.control.interpreter import Interpreter
from chaos.control.test import Test
from chaos.history.op import FAIL, INFO, OK, Op
from chaos.history.store import HistoryWriter, read_history
from chaos.workloads import register


class MemoryKV:
    """The shared register store: key -> value, one lock."""

    def __init__(self) -> None:
        self.values: dict[Any, Any] = {}
        self.lock = threading.Lock()


class MemoryRegisterClient:
    """A register-workload client (read / write / cas on ``op.key``) over a :class:`MemoryKV`.

    Args:
        kv: the shared store (None: a new one).
        crash: probability in [0, 1] that a write or cas ends ``info``.
        max_delay_s: upper bound of each of the two random sleeps around the effect, seconds.
        seed: seeds the per-client random streams (effect timing and crashes).
    """

    def __init__(
        self, kv: MemoryKV | None = None, crash: float = 0.0, max_delay_s: float = 0.0002, seed: int = 0
    ) -> None:
        if not 0.0 <= crash <= 1.0:
            raise ValueError(f"crash={crash}: expected a probability in [0, 1]")
        self.kv = kv or MemoryKV()
        self.crash = crash
        self.max_delay_s = max_delay_s
        self.seed = seed
        self.rng = random.Random(seed)
        self._opened = 0

    def open(self, test: Test | None, node: str) -> MemoryRegisterClient:
        self._opened += 1
        return MemoryRegisterClient(self.kv, self.crash, self.max_delay_s, self.seed * 7919 + self._opened)

    def invoke(self, test: Test | None, op: Op) -> Op:
        time.sleep(self.rng.uniform(0, self.max_delay_s))
        crashed = op.f != "read" and self.rng.random() < self.crash
        takes_effect = not crashed or self.rng.random() < 0.5
        with self.kv.lock:
            current = self.kv.values.get(op.key)
            if op.f == "read":
                result = op.completion(OK, current)
            elif op.f == "write":
                if takes_effect:
                    self.kv.values[op.key] = op.value
                result = op.completion(OK, op.value)
            elif op.f == "delete":
                if takes_effect:
                    self.kv.values.pop(op.key, None)
                result = op.completion(OK, None)
            elif op.f == "cas":
                expected, new = op.value
                if current != expected:
                    result = op.completion(FAIL, op.value, error="cas: expected value did not match")
                    crashed = False  # a compare failure changes nothing either way
                else:
                    if takes_effect:
                        self.kv.values[op.key] = new
                    result = op.completion(OK, op.value)
            else:
                raise ValueError(
                    f"memory register client: unknown f {op.f!r}; expected read, write, cas or delete"
                )
        time.sleep(self.rng.uniform(0, self.max_delay_s))
        if crashed:
            return op.completion(INFO, op.value, error="indeterminate: simulated client timeout")
        return result

    def close(self, test: Test | None) -> None:
        pass


def register_workload_history(
    n_ops: int,
    path: str | Path,
    *,
    keys: int = 100,
    threads_per_key: int = 5,
    groups: int = 4,
    crash: float = 0.01,
    seed: int = 0,
) -> list[Op]:
    """Run the register workload's generator for ``n_ops`` client ops over about ``keys`` keys.

    ``groups`` keys are worked on at once by ``threads_per_key`` threads each, as in a real run.
    The history is written to ``path`` (JSON lines) as ops complete and returned as a list.
    Raises ValueError for n_ops < keys or counts below 1.
    """

    if keys < 1 or threads_per_key < 1 or groups < 1 or n_ops < keys:
        raise ValueError(
            f"n_ops={n_ops}, keys={keys}, threads_per_key={threads_per_key}, groups={groups}: "
            "expected counts >= 1 and n_ops >= keys"
        )
    # the workload scales each key's limit by 0.9..1.0, so aim slightly high and cap the total
    per_key = max(1, round(n_ops / keys / 0.95))
    wl = register.workload({"per_key_limit": per_key, "threads_per_key": threads_per_key, "seed": seed})
    writer = HistoryWriter(Path(path))
    it = Interpreter(
        None,
        client=MemoryRegisterClient(crash=crash, seed=seed),
        nemesis=None,
        nodes=["n1", "n2", "n3", "n4", "n5"],
        concurrency=threads_per_key * groups,
        history=writer,
        rng=random.Random(seed),
        idempotent=wl.idempotent,
    )
    try:
        it.run(gen.clients(gen.limit(n_ops, wl.generator)))
    finally:
        writer.close()
    return list(read_history(Path(path)))
