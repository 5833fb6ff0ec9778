"""The streaming EDN reader (issue 38 item 1, issue 36 item 7): Jepsen's ``history.edn`` and Elle's
published histories read as written, the fast path giving exactly what the generic reader gives,
a Jepsen store directory checked as is, and bad numbers refused with the file and line."""

from __future__ import annotations

import random
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from chaos.history import edn
from chaos.history.checkers.elle import check_file, check_ops
from chaos.history.checkers.elle.edn import collect_edn
from chaos.history.formats import edn_txn_workload, load_edn, load_history
from chaos.history.store import HistoryError

ELLE = Path(__file__).resolve().parent / "data" / "elle"


def chaos(*args: object) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "chaos.cli", *map(str, args)], capture_output=True, text=True, timeout=300
    )


def generic(path: Path) -> list[tuple[int, Any]]:
    """Every top-level form of ``path`` by the generic reader alone (no fast path)."""
    reader = edn.Reader(path)
    out: list[tuple[int, Any]] = []
    n = 0
    with open(path, encoding="utf-8") as f:
        for n, raw in enumerate(f, 1):
            out.extend(reader.feed(raw if raw.endswith("\n") else raw + "\n", n))
    reader.finish(n)
    return out


def fast(path: Path) -> list[tuple[int, Any]]:
    return [(line, form) for line, form, _ in edn.records(path)]


# --- Elle's histories, as its repository ships them -----------------------------------------------


@pytest.mark.parametrize(
    "name, model, exit_code, words",
    [
        ("si-without-g-single.edn", "repeatable-read", 1, ["G2-item", "not repeatable-read"]),
        ("si-without-g-single.edn", "snapshot-isolation", 0, ["no anomaly"]),
        ("huge-scc.edn", None, 1, ["not strong-snapshot-isolation"]),
        ("paper-example.edn", None, 1, ["G-single-item"]),
    ],
)
def test_elles_histories_checked_as_elles_tests_expect(
    name: str, model: str | None, exit_code: int, words: list[str]
) -> None:
    """Verdicts from Elle's own tests where they state one (tests/data/elle/README.md)."""
    args = ["check", ELLE / name] + (["--consistency-model", model] if model else [])
    res = chaos(*args)
    assert res.returncode == exit_code, res.stdout + res.stderr
    for w in words:
        assert w in res.stdout, res.stdout


@pytest.mark.parametrize("name", ["si-without-g-single.edn", "huge-scc.edn", "paper-example.edn"])
def test_streamed_check_equals_the_check_of_the_ops(name: str) -> None:
    """The Elle checker fed straight from the file (collect_edn) finds what it finds in the Op list
    of the same file (load_edn + check_ops): the same verdict, anomalies and counts."""
    path = ELLE / name
    ops, _ = load_edn(path) if name != "paper-example.edn" else (None, None)
    streamed = check_file(path, "list-append", "strict-serializable")
    if ops is not None:
        listed = check_ops(ops, "list-append", "strict-serializable")
        for k in ("valid", "anomaly_types", "not", "counts", "txns"):
            assert streamed[k] == listed[k], k
    assert streamed["valid"] is False


def test_fast_path_gives_what_the_generic_reader_gives_on_every_shipped_edn(shared_data: Path) -> None:
    files = [*ELLE.glob("*.edn"), *(shared_data / "knossos" / "data").rglob("*.edn")]
    files += sorted((shared_data / "porcupine" / "test_data" / "kv").glob("*.txt"))[:3]
    assert len(files) > 100
    for p in files:
        assert fast(p) == generic(p), p


_ODD_LINES = [
    "#jepsen.history.Op{:index 0, :time 1000, :type :invoke, :process 3, :f :txn, :value [[:r 5 nil] [:append 7 1]]}",
    "#jepsen.history.Op{:index 1, :time 1001, :type :ok, :process 3, :f :txn, :value [[:r 5 [1 2]] [:append 7 1]], :error nil}",
    '{:type :info, :f :start-partition, :value {"n2" #{"n5" "n1"}, "n4" #{"n1"}}, :time 2121465497, :process :nemesis}',
    '{:type :info, :f :kill, :value ("n5" "n4" "n3"), :time 2573073782, :process :nemesis, :source :generator}',
    "{:index 0 :type :invoke  :value [[:append 253 1] [:r 253 nil]]}",
    "{:type :ok, :f :read, :value #{1 2 3}, :process 0}",
    '{:type :fail, :f :cas, :value [1 2], :process 4, :error [:crash "Connection refused: x"]}',
    '{:type :info, :f :write, :value 3, :process 1, :exception {:via [{:type java.net.SocketTimeoutException, :message "Read timed out"}]}}',
    "{:process 0, :type :ok, :f :read, :value 123456789012345678901234567890}",
    "{:process 0, :type :ok, :f :read, :value -9223372036854775809, :t 18446744073709551616}",
    "{:process 0, :type :ok, :f :read, :value 1.5, :x 1e10, :y -0.0, :z 3N, :w 2.5M}",
    '{:process 0, :type :ok, :f :read, :value "a\\"b\\n", :node "n1"}',
    "{:process 0, :type :ok, :f :read, :value nil, :nil-ish :nil, :k :ns/name, :sym foo.bar/baz}",
    "{:process 0, :type :ok, :f :read, :value [true false nil], :key :x}",
    "{:process 0,:type :ok,:f :read,:value [ 1 2 ],:key :k1}",
    "\t{:process 0, :type :ok, :f :read, :value [1]}  ",
    '{:process 0, :type :ok, :f :read, :value #inst "2020-01-01T00:00:00Z"}',
    "{:process 0, :type :ok, :f :read, :value [1 #_ 2 3]} ; a comment",
    '{:process 0, :type :ok, :f :read, :value [[:r :x nil] [:append :y "s p a c e"]]}',
    "{:process 0, :type :ok, :f :read, :value \\c}",
    "{1 2, [1 2] :vec-key, :process 0, :type :ok, :f :read}",
]


def test_fast_path_gives_what_the_generic_reader_gives_line_by_line(tmp_path: Path) -> None:
    p = tmp_path / "odd.edn"
    p.write_text("\n".join(_ODD_LINES) + "\n")
    got = fast(p)
    assert got == generic(p)
    assert [line for line, _ in got] == list(range(1, len(_ODD_LINES) + 1))
    assert got[8][1]["value"] == 123456789012345678901234567890  # exact, never orjson's float
    assert got[9][1]["t"] == 18446744073709551616
    assert got[2][1]["value"] == {"n2": ["n5", "n1"], "n4": ["n1"]}
    # shuffled into blocks of every size: the same forms
    rng = random.Random(7)
    lines = [ln for ln in _ODD_LINES for _ in range(40)]
    rng.shuffle(lines)
    p.write_text("\n".join(lines) + "\n")
    old = edn.BLOCK
    try:
        for block in (64, 1000, 1 << 20):
            edn.BLOCK = block
            assert fast(p) == generic(p), block
    finally:
        edn.BLOCK = old


_ROW_KEYS = ("index", "time", "type", "process", "f", "value")


def rows_agree(path: Path) -> int:
    """Every line :func:`chaos.history.edn.row_lines` turns into a row ``[index, time, type,
    process, f, value]`` (the Elle collector's fast path) is that line's op map as the generic
    reader reads it, with no other field; returns how many lines became rows."""
    import orjson

    forms = dict(generic(path))
    n = 0
    for first, lines, rows in edn.row_blocks(path):
        if rows is None:
            continue
        for i, _raw in enumerate(lines):
            try:
                r = orjson.loads(rows[i])
            except orjson.JSONDecodeError:
                continue
            if type(r) is list and len(r) == 6 and r[2] in ("invoke", "ok", "fail", "info"):
                assert forms[first + i] == dict(zip(_ROW_KEYS, r, strict=True)), (path, first + i)
                n += 1
    return n


def test_rows_give_what_the_generic_reader_gives(tmp_path: Path, shared_data: Path) -> None:
    jepsen = [
        "#jepsen.history.Op{:index 0, :time 1000, :type :invoke, :process 3, :f :txn, :value [[:r 5 nil] [:append 7 1]]}",
        "#jepsen.history.Op{:index 1, :time 1001, :type :ok, :process 3, :f :txn, :value [[:r 5 [1 2]] [:append 7 1]]}",
        "#jepsen.history.Op{:index 2, :time 1002, :type :info, :process :nemesis, :f :start, :value nil}",
        '#jepsen.history.Op{:index 3, :time 1003, :type :info, :process :nemesis, :f :start, :value ["n1" "n2"]}',
        "#jepsen.history.Op{:index 4, :time 1004, :type :fail, :process 5, :f :txn, :value [[:w 1 2]], :error :x}",
        "#jepsen.history.Op{:index 5, :time 1005, :type :ok, :process 6, :f :read, :value [vanilla nil]}",
        "#jepsen.history.Op{:index 6, :time 1006, :process 6, :type :ok, :f :txn, :value nil}",
        "#jepsen.history.Op{:index 7, :time 1007, :type :ok, :process 6, :f :txn, :value (1 2)}",
        "#jepsen.history.Op{:index 8, :time 1008, :type :ok, :process nil, :f :txn, :value [[:r :x nil]]}",
    ]
    p = tmp_path / "rows.edn"
    p.write_text("\n".join(jepsen) + "\n")
    assert rows_agree(p) == 6  # not the ones out of Jepsen's layout, nor the invalid :value
    lines = [*jepsen, *_ODD_LINES]  # a block with a backslash or a set is read the general way
    rng = random.Random(3)
    mixed = [ln for ln in lines for _ in range(30)]
    rng.shuffle(mixed)
    p.write_text("\n".join(mixed) + "\n")
    old = edn.BLOCK
    try:
        for block in (64, 1000, 1 << 20):
            edn.BLOCK = block
            rows = rows_agree(p)
            assert rows > 0 or block == 1 << 20, block  # one block, with a backslash: no row
    finally:
        edn.BLOCK = old
    for f in [*ELLE.glob("*.edn"), *sorted((shared_data / "knossos" / "data").rglob("*.edn"))[:40]]:
        rows_agree(f)


def test_a_large_file_s_rows_come_from_a_forked_reader_the_same(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Past ``PIPELINE_BYTES`` the rows are rewritten by a forked child a few blocks ahead: the
    same blocks, the same rows, the same error at the same line for bytes that are not UTF-8,
    and the child ended when the reader stops early."""
    lines = [
        f"#jepsen.history.Op{{:index {i}, :time {i}, :type :invoke, :process {i % 5}, :f :txn, "
        f":value [[:append {i % 7} {i}] [:r {i % 3} nil]]}}"
        for i in range(3000)
    ]
    lines[1500] = '{:process 0, :type :ok, :f :read, :value "a\\"b"}'  # a block read the general way
    p = tmp_path / "big.edn"
    p.write_text("\n".join(lines) + "\n")
    monkeypatch.setattr(edn, "BLOCK", 4096)
    monkeypatch.setattr(edn, "PIPELINE_BYTES", 1 << 40)
    serial = list(edn.row_blocks(p))
    monkeypatch.setattr(edn, "PIPELINE_BYTES", 0)
    assert list(edn.row_blocks(p)) == serial
    assert len(serial) > 20 and any(rows is None for _, _, rows in serial)
    stopped = edn.row_blocks(p)
    assert next(stopped)[0] == 1
    stopped.close()  # the child is killed and reaped
    data = p.read_bytes()
    cut = data.index(b"\n", len(data) // 2) + 1
    (tmp_path / "bad.edn").write_bytes(data[:cut] + b":value \xff\n" + data[cut:])
    with pytest.raises(HistoryError) as piped:
        list(edn.row_blocks(tmp_path / "bad.edn"))
    monkeypatch.setattr(edn, "PIPELINE_BYTES", 1 << 40)
    with pytest.raises(HistoryError) as alone:
        list(edn.row_blocks(tmp_path / "bad.edn"))
    assert piped.value.line == alone.value.line == data[:cut].count(b"\n") + 1
    assert str(piped.value) == str(alone.value)


def test_multi_line_forms_and_a_top_level_vector(tmp_path: Path) -> None:
    p = tmp_path / "pretty.edn"
    p.write_text(
        "[{:process 0\n  :type :invoke\n  :f :write\n  :value 1}\n"
        ' {:process 0, :type :ok, :f :write, :value 1, :note "two\nlines"}\n'
        " {:process 1, :type :invoke, :f :read, :value nil}\n"
        " {:process 1, :type :ok, :f :read, :value 1}]\n"
    )
    got = fast(p)
    assert got == generic(p)
    assert [line for line, _ in got] == [1, 5, 7, 8]
    assert got[1][1]["note"] == "two\nlines"


# --- Jepsen's history.edn and store directory -------------------------------------------------------


def _jepsen_history(path: Path, n: int = 400, seed: int = 3) -> None:
    """A valid list-append history written as Jepsen 0.3 writes history.edn (one Op record per
    line), with nemesis ops whose values are maps and an info op with an error."""
    rng = random.Random(seed)
    state: dict[int, list[int]] = {}
    nxt: dict[int, int] = {}
    lines = []
    i = 0
    t = 0

    def op(typ: str, proc: Any, f: str, value: str, extra: str = "") -> None:
        nonlocal i, t
        t += rng.randrange(1, 10_000_000)
        lines.append(
            f"#jepsen.history.Op{{:index {i}, :time {t}, :type :{typ}, :process {proc}, :f {f}, :value {value}{extra}}}"
        )
        i += 1

    for k in range(n):
        if k % 50 == 10:
            op("info", ":nemesis", ":start-partition", ":majority")
            op("info", ":nemesis", ":start-partition", '[:isolated {"n1" #{"n2" "n3"}, "n2" #{"n1"}}]')
        if k % 50 == 30:
            op("info", ":nemesis", ":stop-partition", "nil")
            op("info", ":nemesis", ":stop-partition", ":network-healed")
        proc = k % 5
        key = rng.randrange(4)
        if rng.random() < 0.5:
            v = nxt.get(key, 0) + 1
            nxt[key] = v
            op("invoke", proc, ":txn", f"[[:append {key} {v}]]")
            if k % 37 == 5:
                op("info", proc, ":txn", f"[[:append {key} {v}]]", ', :error [:timeout "read timed out"]')
                state.setdefault(key, []).append(v)
            else:
                state.setdefault(key, []).append(v)
                op("ok", proc, ":txn", f"[[:append {key} {v}]]")
        else:
            op("invoke", proc, ":txn", f"[[:r {key} nil]]")
            read = state.get(key)
            op(
                "ok",
                proc,
                ":txn",
                f"[[:r {key} {'nil' if read is None else '[' + ' '.join(map(str, read)) + ']'}]]",
            )
    path.write_text("\n".join(lines) + "\n")


def test_a_jepsen_store_directory_is_checked_as_is(tmp_path: Path) -> None:
    store = tmp_path / "store" / "la" / "20260101T000000.000Z"
    store.mkdir(parents=True)
    _jepsen_history(store / "history.edn")
    (store / "results.edn").write_text("{:valid? true, :workload {:valid? true}}\n")
    (store / "test.fressian").write_bytes(b"\x00\xef fressian bytes")
    (store / "history.txt").write_text("0\t:invoke\t:txn\t[[:append 1 1]]\n")
    assert edn_txn_workload(store / "history.edn") == "list-append"
    res = chaos("check", store)
    assert res.returncode == 0, res.stdout + res.stderr
    assert "history.edn" in res.stdout and "valid" in res.stdout
    # the last read of a key changed to a value never appended: the same directory is invalid
    text = (store / "history.edn").read_text()
    lines = text.splitlines()
    for n in range(len(lines) - 1, 0, -1):
        if ":type :ok" in lines[n] and "[[:r " in lines[n] and "nil]]" not in lines[n]:
            head, _, tail = lines[n].partition("[[:r ")
            key = tail.split(" ", 1)[0]
            lines[n] = f"{head}[[:r {key} [99]]]}}"
            break
    (store / "history.edn").write_text("\n".join(lines) + "\n")
    res = chaos("check", store)
    assert res.returncode == 1, res.stdout + res.stderr


def test_collect_edn_holds_no_op_objects_and_fetches_values_back(tmp_path: Path) -> None:
    p = tmp_path / "history.edn"
    _jepsen_history(p, n=300)
    values: list[tuple[int, str, list[Any]]] = []
    table = collect_edn(p, lambda tid, typ, v: values.append((tid, typ, v)))
    ok = [(tid, v) for tid, typ, v in values if typ != "fail"]
    assert len(table) == len(ok)
    for tid, v in ok[:: max(1, len(ok) // 25)]:
        assert table.fetch(tid) == v


# --- bad input: one line naming the file and line, exit 254 -----------------------------------------


@pytest.mark.parametrize(
    "value, reason",
    [
        ("7" * 5000, "an integer of 5000 digits"),
        ("##NaN", "##NaN is not a history value"),
        ("##Inf", "##Inf is not a history value"),
        ("##-Inf", "##-Inf is not a history value"),
        ("1e400", "1e400 is beyond the range of a double"),
        ("-1.0e999", "-1.0e999 is beyond the range of a double"),
    ],
)
def test_bad_edn_numbers_name_the_file_and_line(tmp_path: Path, value: str, reason: str) -> None:
    p = tmp_path / "h.edn"
    p.write_text(
        "{:process 0, :type :invoke, :f :write, :value 1}\n"
        f"{{:process 0, :type :ok, :f :write, :value {value}}}\n"
    )
    with pytest.raises(HistoryError, match=rf"{p}: line 2: EDN: {reason}"):
        load_history(p)
    res = chaos("check", p)
    assert res.returncode == 254, res.stderr
    err = [ln for ln in res.stderr.splitlines() if ln.strip()]
    assert len(err) == 1 and f"{p}: line 2: EDN: {reason}" in err[0], res.stderr
    assert len(err[0]) < 300


@pytest.mark.parametrize(
    "value, shown", [("NaN", "NaN"), ("Infinity", "Infinity"), ("-Infinity", "-Infinity"), ("1e999", "1e999")]
)
def test_non_finite_json_values_name_the_file_and_line(tmp_path: Path, value: str, shown: str) -> None:
    p = tmp_path / "history.jsonl"
    p.write_text(
        '{"type":"invoke","process":0,"f":"write","value":1,"time":1,"index":0}\n'
        f'{{"type":"ok","process":0,"f":"write","value":{value},"time":2,"index":1}}\n'
    )
    with pytest.raises(HistoryError, match=rf"line 2: {shown} is not a history value"):
        list(load_history(p)[0])
    res = chaos("check", p)
    assert res.returncode == 254, res.stdout + res.stderr
    assert f"{p}: line 2: {shown} is not a history value" in res.stderr


@pytest.mark.parametrize("sign", ["", "-"])
def test_an_over_long_json_integer_is_named_as_one(tmp_path: Path, sign: str) -> None:
    """Issue 36 item 7: a JSON history's integer of 5,000 digits was 254 with the reason 'not valid
    JSON (an integer beyond 64 bits may be here: line 1 column 1 (char 0))'; it is named as the
    EDN reader names it. 4,300 digits (Python's limit) still read exactly."""
    p = tmp_path / "history.jsonl"
    head = '{"type":"invoke","process":0,"f":"write","value":1,"time":1,"index":0}\n'
    p.write_text(
        head + f'{{"type":"ok","process":0,"f":"write","value":{sign}{"7" * 5000},"time":2,"index":1}}\n'
    )
    reason = "an integer of 5000 digits (expected at most 4300)"
    with pytest.raises(HistoryError, match=rf"line 2: {re.escape(reason)}"):
        list(load_history(p)[0])
    res = chaos("check", p)
    assert res.returncode == 254, res.stdout + res.stderr
    (line,) = res.stderr.strip().splitlines()
    assert line == f"chaos: malformed history: {p}: line 2: {reason}", line
    p.write_text(
        head + f'{{"type":"ok","process":0,"f":"write","value":{sign}{"7" * 4300},"time":2,"index":1}}\n'
    )
    assert list(load_history(p)[0])[1].value == int(sign + "7" * 4300)


def test_edn_structure_errors_name_the_line(tmp_path: Path) -> None:
    p = tmp_path / "h.edn"
    cases = {
        "{:process 0, :type :invoke, :f :read}\n{:process 0, :type :ok, :type :fail, :f :read}\n": (
            2,
            "appears twice",
        ),
        "{:process 0, :type :invoke, :f :read, :value [1 2}\n": (1, "expected ']' to close '['"),
        "[{:process 0, :type :invoke, :f :read}\n": (1, "'[' opened here is never closed"),
        '{:process 0, :type :invoke, :f :read, :value "open\n\n': (1, "a string opened here is never closed"),
        "{:process 0, :type :invoke, :f :read, :value 1 :odd}\n": (1, "odd number of forms"),
    }
    for text, (line, reason) in cases.items():
        p.write_text(text)
        with pytest.raises(HistoryError, match=re.escape(reason)) as e:
            load_history(p)
        assert e.value.line == line, (text, e.value)


def test_analyze_refuses_an_out_that_is_a_file_and_replaces_an_earlier_analysis_s_files(
    tmp_path: Path,
) -> None:
    """Issue 36 item 7: ``--out`` over an earlier analysis must not crash with FileExistsError: its
    files are replaced whatever they are now (a file where a directory goes, a link); an ``--out``
    that is a plain file is refused in one line before Spark starts."""
    from chaos.history.spark.pipeline import _remove, analyze, write_summary_parquet
    from chaos.history.synth import register_history, write_run

    ops, _ = register_history(100, keys=2, processes=2, seed=1)
    run = write_run(tmp_path / "store", "reg", "20260101T000000.000", ops, {})
    out_file = tmp_path / "out-file"
    out_file.write_text("not an analysis")
    with pytest.raises(ValueError, match="exists and is not a directory"):
        analyze([run], out=out_file)
    res = chaos("analyze", "--out", out_file, run)
    assert res.returncode == 254 and res.stderr.count("\n") == 1, res.stderr
    assert "exists and is not a directory" in res.stderr
    # what an earlier analysis may have left where the summary's Parquet directory goes
    target = tmp_path / "summary.parquet"
    for make in (
        lambda: target.write_text("old"),
        lambda: target.mkdir(),
        lambda: target.symlink_to(tmp_path / "gone"),
    ):
        _remove(target)
        make()
        write_summary_parquet([{"run": "r", "valid": True, "ops": 1}], target)
        assert (target / "part-00000.parquet").is_file()
