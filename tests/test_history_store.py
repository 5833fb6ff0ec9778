"""History store: writer, streaming reader, validation rules, torn last lines, run directories."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from test_history_util import Builder

from chaos.history.op import Op
from chaos.history.store import (
    HistoryError,
    HistoryWriter,
    ParsedHistory,
    RunDir,
    find_run,
    pair,
    read_history,
    read_history_lines,
    too_deep,
    validate,
    write_history,
)


def _lines(path: Path) -> list[dict]:
    return [json.loads(x) for x in path.read_text().splitlines()]


def test_writer_assigns_indexes_and_writes_extra_fields_flat(tmp_path: Path) -> None:
    p = tmp_path / "h.jsonl"
    with HistoryWriter(p) as w:
        a = w.write(Op("invoke", 0, "append", 7, time=5))
        b = w.write(Op("ok", 0, "append", 7, time=9, node="n2", extra={"log_index": 3}))
    assert (a.index, b.index) == (0, 1)
    rows = _lines(p)
    assert rows[1] == {
        "index": 1,
        "type": "ok",
        "process": 0,
        "f": "append",
        "value": 7,
        "time": 9,
        "node": "n2",
        "log_index": 3,
    }
    back = list(read_history(p))
    assert back[1].extra == {"log_index": 3} and back[1].node == "n2" and back[0].time == 5


def test_writer_is_thread_safe(tmp_path: Path) -> None:
    p = tmp_path / "h.jsonl"
    w = HistoryWriter(p)

    def worker(proc: int) -> None:
        for i in range(500):
            w.write(Op("invoke", proc, "append", proc * 1000 + i))
            w.write(Op("ok", proc, "append", proc * 1000 + i))

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    w.close()
    ops = list(read_history(p))  # validates pairing per process
    assert [o.index for o in ops] == list(range(8000))
    with pytest.raises(ValueError, match="closed"):
        w.write(Op("invoke", 0, "read"))


def test_writer_reopen_cuts_torn_tail_and_continues_indexes(tmp_path: Path) -> None:
    p = tmp_path / "h.jsonl"
    with HistoryWriter(p) as w:
        w.write(Op("invoke", 0, "read"))
    with open(p, "ab") as f:
        f.write(b'{"index":1,"type":"ok","proc')
    with HistoryWriter(p) as w:
        assert w.count == 1
        assert w.write(Op("ok", 0, "read", 3)).index == 1
    assert [o.type for o in read_history(p)] == ["invoke", "ok"]


def test_torn_last_line_is_tolerated(tmp_path: Path) -> None:
    p = Builder()
    p.append(0, 1, log_index=0)
    path = p.write(tmp_path / "h.jsonl")
    with open(path, "ab") as f:
        f.write(b'{"index":2,"type":"invoke","process":1,"f":"app')
    assert len(list(read_history(path))) == 2


def test_torn_line_in_the_middle_is_an_error(tmp_path: Path) -> None:
    path = tmp_path / "h.jsonl"
    path.write_text(
        '{"index":0,"type":"invoke","process":0,"f":"read","time":1}\n{"index":1,"ty\n{"index":2}\n'
    )
    with pytest.raises(HistoryError) as e:
        list(read_history(path))
    assert e.value.line == 2
    assert f"{path}: line 2: not valid JSON" in str(e.value)


def test_a_lone_unterminated_garbage_line_is_not_a_torn_history(tmp_path: Path) -> None:
    """A torn line can only follow a good one: a file that is one unterminated garbage line is bad input."""
    path = tmp_path / "h.jsonl"
    path.write_bytes(b"xyzzy{")
    with pytest.raises(HistoryError) as e:
        list(read_history(path))
    assert e.value.line == 1 and str(e.value).startswith(f"{path}: line 1: not valid JSON")
    path.write_bytes(b"\n\n  \n" + b'{"index":0,"type":"inv')  # blank lines are not good lines
    with pytest.raises(HistoryError, match="line 4"):
        list(read_history(path))


@pytest.mark.parametrize("depth", [101, 2_000, 100_000])
def test_deep_values_are_refused_naming_the_line(tmp_path: Path, depth: int) -> None:
    path = tmp_path / "h.jsonl"
    ok = '{"index":0,"type":"invoke","process":0,"f":"write","value":1,"time":1}\n'
    deep = (
        '{"index":1,"type":"ok","process":0,"f":"write","time":2,"value":' + "[" * depth + "]" * depth + "}\n"
    )
    path.write_text(ok + deep)
    with pytest.raises(HistoryError) as e:
        list(read_history(path))
    assert e.value.line == 2 and "nested deeper than 100 levels" in str(e.value)


def test_values_up_to_the_depth_bound_are_read(tmp_path: Path) -> None:
    path = tmp_path / "h.jsonl"
    value = "[" * 99 + "]" * 99  # with the op object around it, 100 levels
    path.write_text('{"index":0,"type":"invoke","process":0,"f":"write","time":1,"value":' + value + "}\n")
    (op,) = read_history(path)
    assert isinstance(op.value, list)
    assert too_deep([[[]]], limit=2) and not too_deep([[]], limit=2)
    assert too_deep({"a": [1, {"b": 2}]}, 2) and not too_deep({"a": [1, 2]}, 2)


def test_bytes_that_are_not_utf8_name_the_line(tmp_path: Path) -> None:
    path = tmp_path / "h.jsonl"
    path.write_bytes(
        b'{"index":0,"type":"invoke","process":0,"f":"write","value":1,"time":1}\n'
        b'{"index":1,"type":"ok","process":0,"f":"write","value":"\xff","time":2}\n'
    )
    with pytest.raises(HistoryError) as e:
        list(read_history(path))
    assert e.value.line == 2 and "not UTF-8 (byte 0xff" in str(e.value)


def test_writer_lines_are_orjson_and_read_back_exactly(tmp_path: Path) -> None:
    """The writer's lines are compact UTF-8 JSON; every value the reader gets back is the one
    written, including text outside ASCII, integers beyond 64 bits and values JSON lacks (as str)."""
    import orjson

    path = tmp_path / "h.jsonl"
    ops = [
        Op("invoke", 0, "write", 'é\u2028"x\n', 1, node="n1", key=3),
        Op("ok", 0, "write", [1, [2, {"a": None}]], 2, error="e", extra={"log_index": 2**70}),
        Op("invoke", "nemesis", "start-partition", {"n1": ["n2"]}, 3),
        Op("info", "nemesis", "start-partition", {1, 2}, 4),
    ]
    write_history(path, ops)
    raw = path.read_bytes().splitlines()
    assert raw[0] == orjson.dumps(ops[0].to_dict()) and "é".encode() in raw[0]
    assert [json.loads(x) for x in raw] == [
        o.to_dict() | {"value": str(o.value)} if o.index == 3 else o.to_dict() for o in ops
    ]
    back = list(read_history(path))
    assert [(o.value, o.key, o.node, o.error, o.extra) for o in back[:3]] == [
        (o.value, o.key, o.node, o.error, o.extra) for o in ops[:3]
    ]
    assert back[3].value == "{1, 2}"


_WRITER = r"""
import sys
from chaos.history.op import Op
from chaos.history.store import HistoryWriter
w = HistoryWriter(sys.argv[1])
i = 0
payload = "x" * 3000
while True:
    w.write(Op("invoke", i % 4, "append", i, time=i))
    w.write(Op("ok", i % 4, "append", i, time=i, extra={"log_index": i, "pad": payload}))
    i += 1
    if i == 200:
        print("ready", flush=True)
"""


def test_sigkilled_writer_leaves_a_readable_history(tmp_path: Path) -> None:
    path = tmp_path / "h.jsonl"
    proc = subprocess.Popen([sys.executable, "-c", _WRITER, str(path)], stdout=subprocess.PIPE)
    try:
        assert proc.stdout is not None and proc.stdout.readline() == b"ready\n"
        time.sleep(0.05)
        proc.send_signal(signal.SIGKILL)
    finally:
        proc.wait(timeout=10)
    assert proc.returncode == -signal.SIGKILL
    ops = list(read_history(path))
    assert len(ops) >= 400
    assert [o.index for o in ops] == list(range(len(ops)))
    # Whatever the kill left, cutting the file anywhere inside the last line is still readable.
    data = path.read_bytes()
    cut = data[: len(data) - 17]
    path.write_bytes(cut)
    assert len(list(read_history(path))) in (len(ops) - 1, len(ops))


def _hist(tmp_path: Path, rows: list[dict]) -> Path:
    path = tmp_path / "bad.jsonl"
    path.write_text("".join(json.dumps({"index": i, **r}) + "\n" for i, r in enumerate(rows)))
    return path


INV = {"type": "invoke", "process": 0, "f": "write", "value": 1}
OKW = {"type": "ok", "process": 0, "f": "write", "value": 1}


@pytest.mark.parametrize(
    ("rows", "line", "reason"),
    [
        (
            [{**INV, "time": 1}, {**OKW, "time": 2}, {**OKW, "time": 3}],
            3,
            "ok completion of 'write' on process 0 without an open invocation",
        ),
        ([{**INV, "time": 1}, {**INV, "f": "read", "time": 2}], 2, "two open invocations on process 0"),
        ([{**INV, "time": 1}, {**OKW, "type": "done", "time": 2}], 2, "unknown type 'done'"),
        ([{**INV, "time": 5}, {**OKW, "time": 4}], 2, "time goes backwards: 4 ns after 5 ns"),
        ([{**INV, "time": 1}, {**OKW, "f": "read", "time": 2}], 2, "does not match its invocation 'write'"),
        ([{**INV, "time": 1}, {"type": "ok", "f": "write", "time": 2}], 2, "missing field 'process'"),
        ([{**INV, "time": "soon"}], 1, "field 'time' must be integer nanoseconds"),
    ],
    ids=[
        "completion-without-invoke",
        "two-open-invokes",
        "unknown-type",
        "time-backwards",
        "f-mismatch",
        "missing-field",
        "bad-time",
    ],
)
def test_malformed_histories_name_line_and_reason(
    tmp_path: Path, rows: list[dict], line: int, reason: str
) -> None:
    path = _hist(tmp_path, rows)
    with pytest.raises(HistoryError) as e:
        list(read_history(path))
    msg = str(e.value)
    assert e.value.line == line
    assert msg.startswith(f"{path}: line {line}: ")
    assert reason in msg
    assert "\n" not in msg
    with pytest.raises(HistoryError) as whole:  # the whole-file reader: the same error
        ParsedHistory.read(path)
    assert str(whole.value) == msg and whole.value.line == line
    # Without validation only the structural errors remain.
    if "missing field" not in reason and "time' must" not in reason:
        assert len(list(read_history(path, validate=False))) == len(rows)


def test_the_whole_file_reader_reads_every_shape_of_line_as_the_streaming_one(tmp_path: Path) -> None:
    """ParsedHistory.read takes common lines in a fast loop and any other through the exact
    reader: ops, line numbers and the torn tail are read_history_lines' for every kind of line."""
    rows = [
        '{"index":0,"type":"invoke","process":0,"f":"write","value":1,"time":1,"key":3}',
        "",
        "   ",
        '{"index":1,"type":"info","process":"nemesis","f":"start","value":{"a":[1,2]},"time":2}',
        '{"index": 2, "type": "invoke", "process": "c1", "f": "read", "value": null, "time": 3}',
        '{"index":3,"type":"ok","process":0,"f":"write","value":1,"time":3,"node":"n1","log_index":7}',
        '{"index":4,"type":"ok","process":"c1","f":"read","value":"a:b","time":4,"error":null}',
        '{"index":5,"type":"invoke","process":1,"f":"cas","value":[1,[2,{"x":1}]],"time":4.0}',
        '{"index":6,"type":"invoke","process":1,"f":"cas","value":[1,2],"time":5}',
        '{"index":7,"type":"info","process":1,"f":"cas","value":[1,2],"time":6,"error":"timeout"}',
        '{"index":8,"type":"info","process":"nemesis","f":"start","value":null,"time":7}',
        '{"index":9,"type":"invoke","process":2,"f":"write","value":"\u00e9","time":8}',
        '{"index":10,"type":"fail","process":2,"f":"write","value":"\u00e9","time":9}',
    ]
    good = [r for r in rows if '"time":4.0' not in r]
    for tail in (
        "",
        '{"index":11,"type":"inv',
        '{"index":11,"type":"invoke","process":3,"f":"read","time":9}',
    ):
        path = tmp_path / "h.jsonl"
        path.write_text("\n".join(good) + "\n" + tail)
        h = ParsedHistory.read(path)
        expected = list(read_history_lines(path))
        assert list(h.numbered()) == expected
        assert [o.extra for o in h.ops] == [o.extra for _, o in expected]
    path.write_text("\n".join(rows) + "\n")  # a float time: the exact error, from both readers
    with pytest.raises(HistoryError) as e:
        list(read_history_lines(path))
    with pytest.raises(HistoryError) as whole:
        ParsedHistory.read(path)
    assert str(whole.value) == str(e.value)


def test_validate_on_op_iterables_and_nemesis_pairs() -> None:
    b = Builder()
    b.op("invoke", 0, "read")
    b.nemesis("start-kill", {"nodes": ["n1"]})
    b.op("ok", 0, "read", 1)
    b.op("info", "nemesis", "stop-kill")
    assert len(list(validate(b.ops))) == 5
    with pytest.raises(HistoryError, match="line 2: two open invocations on process 0"):
        list(validate([Op("invoke", 0, "read", time=1), Op("invoke", 0, "read", time=2)]))


def test_pair_yields_completions_then_open_invocations() -> None:
    b = Builder()
    i0 = b.op("invoke", 0, "write", 1)
    i1 = b.op("invoke", 1, "read")
    n0, n1 = b.nemesis("start-pause", {"nodes": ["n2"]})
    c1 = b.op("ok", 1, "read", 0)
    i2 = b.op("invoke", 1, "read")
    c0 = b.op("info", 0, "write", 1)
    got = [(a.index, c.index if c else None) for a, c in pair(b.ops)]
    assert got == [(n0.index, n1.index), (i1.index, c1.index), (i0.index, c0.index), (i2.index, None)]


def test_run_dir_layout_symlinks_and_find_run(tmp_path: Path) -> None:
    store = tmp_path / "store"
    r1 = RunDir.create(store, "log-kill")
    r1.write_test({"workload": "log", "nodes": ["n1"]})
    r2 = RunDir.create(store, "register")
    r2.write_test({"workload": "register"})
    with r2.writer() as w:
        w.write(Op("invoke", 0, "read"))
    assert r1.path.parent == store / "log-kill" and len(r1.name) == len("20260101T000000.000")
    assert (store / "latest").resolve() == r2.path.resolve()
    assert (store / "log-kill" / "latest").resolve() == r1.path.resolve()
    assert os.readlink(store / "latest") == f"register/{r2.name}"  # relative: the store can move
    assert r1.nodes_dir("n1").is_dir()
    assert find_run(store).path == r2.path.resolve()
    assert find_run(store / "latest").path == r2.path.resolve()
    assert find_run(store / "log-kill").path == r1.path.resolve()
    assert find_run(r1.path).load_test() == {"workload": "log", "nodes": ["n1"]}
    r1.write_results({"valid": True})
    assert r1.load_results() == {"valid": True}
    (store / "latest").unlink()
    assert find_run(store).path.name in (r1.name, r2.name)
    with pytest.raises(FileNotFoundError, match="no such file"):
        find_run(tmp_path / "nope")
    (tmp_path / "empty").mkdir()
    with pytest.raises(FileNotFoundError, match="no run directory"):
        find_run(tmp_path / "empty")
    with pytest.raises(ValueError, match="test name"):
        RunDir.create(store, "a/b")


def test_an_f_that_is_not_a_string_names_the_line(tmp_path: Path) -> None:
    path = tmp_path / "h.jsonl"
    path.write_text(
        '{"index":0,"type":"invoke","process":0,"f":"read","time":1}\n{"index":1,"type":"invoke","process":1,"f":5,"time":2}\n'
    )
    with pytest.raises(HistoryError, match=rf"{path}: line 2: field 'f' must be a string, got 5"):
        list(read_history(path))


def test_a_deep_or_broken_test_json_is_a_value_error_naming_the_file(tmp_path: Path) -> None:
    run = RunDir.create(tmp_path / "store", "t")
    run.test_path.write_text('{"a":' + "[" * 100_000 + "]" * 100_000 + "}")
    with pytest.raises(ValueError, match=rf"{run.test_path}: not valid JSON \(nested too deep\)"):
        run.load_test()
    run.test_path.write_bytes(b'{"a": "\xff"}')
    with pytest.raises(ValueError, match=rf"{run.test_path}: not valid JSON"):
        run.load_test()


def test_integers_beyond_64_bits_read_exact_on_every_path(tmp_path: Path) -> None:
    """orjson reads 18446744073709551617 as the float 1.8446744073709552e19, equal to ...616: a
    read of a value nobody wrote then passed the linear checker. Every reader keeps them exact."""
    from chaos.history.checkers.elle.history import FastPathRefused, _line_blocks
    from chaos.history.store import ParsedHistory, may_hold_big_int, read_history

    big, other, neg = 2**64 + 1, 2**64, -(2**63) - 5
    lines = [
        {"type": "invoke", "process": 0, "f": "write", "value": big, "time": 1, "index": 0},
        {"type": "ok", "process": 0, "f": "write", "value": big, "time": 2, "index": 1},
        {"type": "invoke", "process": 1, "f": "read", "value": None, "time": 3, "index": 2},
        {"type": "ok", "process": 1, "f": "read", "value": other, "time": 4, "index": 3},
        {"type": "invoke", "process": 1, "f": "write", "value": neg, "time": 5, "index": 4},
        {"type": "ok", "process": 1, "f": "write", "value": neg, "time": 6, "index": 5},
    ]
    path = tmp_path / "history.jsonl"
    path.write_text("".join(json.dumps(d) + "\n" for d in lines))
    want = [big, big, None, other, neg, neg]
    assert [op.value for op in read_history(path)] == want
    assert [op.value for op in ParsedHistory.read(path).ops] == want
    assert all(type(v) is int for v in want if v is not None)
    with pytest.raises(FastPathRefused):
        list(_line_blocks(path))
    assert not may_hold_big_int(b'{"time":1764000000000000000,"value":9223372036854775807}')
    assert may_hold_big_int(b'{"value":-9223372036854775809}') and may_hold_big_int(
        b'{"v":18446744073709551616}'
    )


def test_big_int_scan_of_a_buffer_over_16_mib_sees_runs_across_piece_boundaries() -> None:
    """A whole-file scan goes in 16-MiB pieces (a 100k-op history is larger): a digit run that
    straddles a boundary is still seen, and a buffer without one says so (this recursed once)."""
    from chaos.history.store import _SCAN, may_hold_big_int

    filler = b'{"f":"read","value":12345}\n'
    body = filler * (_SCAN // len(filler) + 2)
    assert len(body) > _SCAN and not may_hold_big_int(body)
    cut = _SCAN - 7  # 20 digits from 7 bytes before the first boundary to 13 after it
    straddling = body[:cut] + b"18446744073709551617" + body[cut:]
    assert may_hold_big_int(straddling)
    assert may_hold_big_int(body + b'{"value":-9223372036854775809}\n')
