"""Issue 26: what the history reader and the tool's writers agree is text, duplicate keys, and
control characters on the terminal (items 6, 7, 8)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from chaos import errors
from chaos.errors import EXIT_BAD_ARGS
from chaos.history.op import Op, dumps
from chaos.history.store import HistoryError, RunDir, read_history, write_history

ROOT = Path(__file__).resolve().parent.parent


def chaos(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    code = "import sys; from chaos.cli import main; sys.exit(main())"
    env = {"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"}
    return subprocess.run(
        [sys.executable, "-c", code, *args], capture_output=True, text=True, env=env, cwd=cwd, timeout=120
    )


def _write(path: Path, *lines: str) -> Path:
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return path


INVOKE = '{"index":0,"type":"invoke","process":0,"f":"write","value":1,"time":1}'
OK = '{"index":1,"type":"ok","process":0,"f":"write","value":1,"time":2}'


# -- item 8: a key named twice is malformed input ---------------------------------------------


@pytest.mark.parametrize(
    "line",
    [
        '{"index":1,"type":"fail","type":"ok","process":0,"f":"write","value":1,"time":2}',
        '{"index":1,"type" : "fail","process":0,"f":"write","value":1,"time":2, "type":"ok"}',
        '{"index":1,"type":"ok","process":0,"f":"write","value":{"a":1,"a":2},"time":2}',
        '{"index":1,"type":"ok","process":0,"f":"write","value":"a: b","time":2,"value":1}',
        '{"index":1,"type":"ok","process":0,"f":"write","value":NaN,"time":2,"value":1}',
    ],
)
def test_a_key_named_twice_is_refused_naming_the_line(tmp_path: Path, line: str) -> None:
    h = _write(tmp_path / "h.jsonl", INVOKE, line)
    with pytest.raises(HistoryError, match="appears twice") as e:
        list(read_history(h))
    assert e.value.line == 2 and str(h) in str(e.value)


def test_chaos_check_exits_254_on_a_duplicate_type(tmp_path: Path) -> None:
    h = _write(
        tmp_path / "h.jsonl",
        INVOKE,
        '{"index":1,"type":"fail","type":"ok","process":0,"f":"write","value":1,"time":2}',
    )
    r = chaos("check", str(h))
    assert r.returncode == EXIT_BAD_ARGS, r.stdout + r.stderr
    assert f"{h}: line 2:" in r.stderr and "'type' appears twice" in r.stderr


def test_colons_in_strings_and_nested_objects_without_duplicates_still_read(tmp_path: Path) -> None:
    h = _write(
        tmp_path / "h.jsonl",
        INVOKE,
        '{"index":1,"type":"ok","process":0,"f":"write","value":{"a":{"b":1},"c":"x:y"},'
        '"time":2,"error":"e: \\":\\"","note" : "k"}',
    )
    ops = list(read_history(h))
    assert ops[1].value == {"a": {"b": 1}, "c": "x:y"} and ops[1].extra == {"note": "k"}


# -- item 6: a lone surrogate is not text -----------------------------------------------------


def test_a_lone_surrogate_escape_is_refused_and_a_pair_is_read(tmp_path: Path) -> None:
    lone = _write(
        tmp_path / "lone.jsonl",
        INVOKE,
        '{"index":1,"type":"ok","process":0,"f":"write","value":"\\ud800","time":2}',
    )
    with pytest.raises(HistoryError, match=r"lone surrogate \\ud800") as e:
        list(read_history(lone))
    assert e.value.line == 2
    pair = _write(
        tmp_path / "pair.jsonl",
        INVOKE,
        '{"index":1,"type":"ok","process":0,"f":"write","value":"\\ud83d\\ude00","time":2}',
    )
    assert list(read_history(pair))[1].value == "\U0001f600"


def test_check_and_report_agree_on_a_lone_surrogate(tmp_path: Path) -> None:
    run = tmp_path / "store" / "t" / "20260101T000000.000"
    run.mkdir(parents=True)
    _write(
        run / "history.jsonl",
        '{"index":0,"type":"invoke","process":0,"f":"write","value":"\\ud800","time":1}',
        '{"index":1,"type":"ok","process":0,"f":"write","value":"\\ud800","time":2}',
    )
    check = chaos("check", str(run))
    report = chaos("report", str(run))
    assert check.returncode == report.returncode == EXIT_BAD_ARGS, check.stderr + report.stderr
    assert "lone surrogate" in check.stderr and "lone surrogate" in report.stderr


def test_the_writer_never_writes_what_the_reader_refuses(tmp_path: Path) -> None:
    ops = [
        Op("invoke", 0, "write", "a\ud800b", time=1, error="\udcff"),
        Op("ok", 0, "write", {"k\udc80": 2**70}, time=2),
    ]
    h = tmp_path / "h.jsonl"
    write_history(h, ops)
    back = list(read_history(h))
    assert back[0].value == "a\\ud800b" and back[0].error == "\\udcff"
    assert back[1].value == {"k\\udc80": 2**70}
    h.read_bytes().decode("utf-8")  # strict UTF-8 throughout
    assert dumps({"x": "\ud800"}).decode("utf-8") == '{"x":"\\\\ud800"}'


def test_results_and_test_files_are_utf8_text(tmp_path: Path) -> None:
    run = RunDir(tmp_path)
    run.write_results({"valid": False, "error": "bad \ud800 thing", "name": "é"})
    text = run.results_path.read_bytes().decode("utf-8")
    assert json.loads(text)["error"] == "bad \\ud800 thing"
    assert run.load_results()["name"] == "é"


# -- item 7: control characters are escaped on the terminal --------------------------------


def test_printable_escapes_controls_and_keeps_text() -> None:
    printable = errors.printable
    assert printable("\x1b]0;owned\x07title") == "\\x1b]0;owned\\x07title"
    assert printable("a\x9b31mb\x7f") == "a\\x9b31mb\\x7f"
    assert printable("rtl\u202eevil\u2066") == "rtl\\u202eevil\\u2066"
    assert printable("lone \ud800") == "lone \\ud800"
    assert printable("naïve — 日本 😀") == "naïve — 日本 😀"
    assert printable("two\nlines\r", keep="\n") == "two\nlines\\x0d"
    assert printable(42) == "42"


def test_an_escape_sequence_in_an_error_reaches_the_terminal_escaped(tmp_path: Path) -> None:
    missing = tmp_path / "h\x1b]0;x\x07\x9b2J.jsonl"
    r = chaos("check", str(missing))
    assert r.returncode == EXIT_BAD_ARGS
    assert not {"\x1b", "\x07", "\x9b"} & set(r.stderr)
    assert "h\\x1b]0;x\\x07\\x9b2J.jsonl" in r.stderr


def test_check_summary_escapes_keys_and_errors(tmp_path: Path) -> None:
    # a register history whose only key holds an OSC title sequence, read non-linearizably
    key = "k\x1b]0;pwned\x07"
    ops = [
        Op("invoke", 0, "write", 1, time=1, key=key),
        Op("ok", 0, "write", 1, time=2, key=key),
        Op("invoke", 1, "read", None, time=3, key=key),
        Op("ok", 1, "read", 2, time=4, key=key),
    ]
    h = tmp_path / "h.jsonl"
    write_history(h, ops)
    r = chaos("check", str(h), "--model", "cas-register")
    assert r.returncode == 1, r.stdout + r.stderr
    assert "\x1b" not in r.stdout and "\x07" not in r.stdout
    assert "\\x1b]0;pwned\\x07" in r.stdout


def test_edn_maps_with_a_key_twice_or_a_lone_surrogate_are_refused(tmp_path: Path) -> None:
    from chaos.history.formats import load_history

    dup = tmp_path / "dup.edn"
    dup.write_text(
        "[{:type :invoke :process 0 :f :read :value nil}\n {:type :fail :type :ok :process 0 :f :read}]\n"
    )
    with pytest.raises(HistoryError, match="the key 'type' appears twice") as e:
        load_history(dup)
    assert e.value.line == 2
    lone = tmp_path / "lone.edn"
    lone.write_text('[{:type :invoke :process 0 :f :write :value "\\ud800"}]\n')
    with pytest.raises(HistoryError, match=r"lone surrogate \\ud800"):
        load_history(lone)
