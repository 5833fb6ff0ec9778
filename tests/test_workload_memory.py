"""The register workload's generator, run by the real interpreter against the in-memory store."""

from __future__ import annotations

from pathlib import Path

import pytest

from chaos.history.checkers.linear import check_history
from chaos.history.op import INFO
from chaos.history.store import read_history
from chaos.workloads.memory import MemoryRegisterClient, register_workload_history


def test_generated_register_history_overlaps_is_linearizable_and_one_bad_read_breaks_it(
    tmp_path: Path,
) -> None:
    path = tmp_path / "history.jsonl"
    ops = register_workload_history(3000, path, keys=10, crash=0.05, seed=3)
    assert len(list(read_history(path))) == len(ops)  # written as ops completed
    invokes = [o for o in ops if o.type == "invoke"]
    assert len(invokes) == 3000 and len({o.key for o in invokes}) >= 10
    assert any(o.type == INFO for o in ops)
    # overlap: most invocations find another op on their key still open
    open_by_key: dict[object, set[int]] = {}
    overlapped = 0
    for o in ops:
        s = open_by_key.setdefault(o.key, set())
        if o.type == "invoke":
            overlapped += bool(s)
            s.add(o.process)
        else:
            s.discard(o.process)
    assert overlapped > len(invokes) // 2
    assert check_history(ops, "cas-register")["valid"] is True

    read = next(o for o in ops if o.type == "ok" and o.f == "read" and o.key == 5)
    read.value = 99  # a value no op ever wrote
    r = check_history(ops, "cas-register")
    assert r["valid"] is False and r["failures"] == ["5"]  # the key, named


def test_memory_client_rejects_a_bad_crash_rate() -> None:
    with pytest.raises(ValueError, match="crash=1.5"):
        MemoryRegisterClient(crash=1.5)
