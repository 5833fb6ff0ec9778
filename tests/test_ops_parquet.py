"""The per-op Parquet an executor writes for `chaos analyze` (chaos.history.spark.tasks.write_ops_parquet):
each op's process and key as text, exactly as JSON spells them."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow.parquet as pq

from chaos.history.op import Op
from chaos.history.spark.tasks import write_ops_parquet


def _op(i: int, process: int | str, key: Any) -> Op:
    return Op("invoke" if i % 2 == 0 else "ok", process, "read", None, i, i, None, None, key, {})


def test_keys_equal_across_types_keep_their_own_text(tmp_path: Path) -> None:
    # 1, 1.0 and true hash alike in Python; each must still be written as its own JSON text
    keys = [1, 1, 1.0, 1.0, True, True, "1", "1", [1], [1], None, None]
    ops = [_op(i, i // 2, k) for i, k in enumerate(keys)]
    out = tmp_path / "part-0.parquet"
    write_ops_parquet(ops, out)
    table = pq.read_table(out)
    assert table.column("key").to_pylist() == [
        "1", "1", "1.0", "1.0", "true", "true", "1", "1", "[1]", "[1]", None, None
    ]  # fmt: skip
    assert table.column("process").to_pylist() == [str(i // 2) for i in range(len(keys))]


def test_processes_and_keys_repeat_with_one_text_each(tmp_path: Path) -> None:
    ops = [_op(i, i % 3 if i % 5 else "nemesis", f"k{i % 4}") for i in range(40)]
    out = tmp_path / "part-0.parquet"
    write_ops_parquet(ops, out)
    table = pq.read_table(out)
    assert table.column("process").to_pylist() == [str(op.process) for op in ops]
    assert table.column("key").to_pylist() == [op.key for op in ops]
