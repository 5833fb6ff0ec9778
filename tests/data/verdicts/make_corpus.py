"""Writes the verdict corpus (this directory) and its manifest; run from the repository root:

    python3 tests/data/verdicts/make_corpus.py

The corpus is committed; this script documents how each case was made and rebuilds it. Every case
is a run directory (``history.jsonl`` and, where it applies, ``test.json``) or a bare history file,
and ``manifest.json`` gives its expected verdict and exit status (see README.md here).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
MS = 1_000_000


class H:
    """A hand-made history: JSON objects with increasing times (1 ms apart) and indexes."""

    def __init__(self) -> None:
        self.rows: list[dict[str, Any]] = []

    def op(self, type: str, process: int | str, f: str, value: Any = None, **fields: Any) -> H:
        row = {
            "index": len(self.rows),
            "type": type,
            "process": process,
            "f": f,
            "value": value,
            "time": (len(self.rows) + 1) * MS,
        }
        row.update(fields)
        self.rows.append(row)
        return self

    def call(
        self, process: int | str, f: str, value: Any, out: Any = None, type: str = "ok", **fields: Any
    ) -> H:
        self.op("invoke", process, f, value, **fields)
        return self.op(type, process, f, value if out is None else out, **fields)

    def text(self) -> str:
        return "".join(json.dumps(r, separators=(",", ":")) + "\n" for r in self.rows)


def register_test(name: str) -> dict[str, Any]:
    return {
        "name": name,
        "workload": "register",
        "checkers": ["linear", "stats", "perf"],
        "model": "cas-register",
        "nemesis": "none",
    }


def log_test(name: str) -> dict[str, Any]:
    return {
        "name": name,
        "workload": "log",
        "checkers": ["log", "stats", "perf"],
        "model": None,
        "nemesis": "none",
    }


def register_ok(h: H, key: Any, p: int = 0) -> H:
    """write 1, cas 1->2, read 2 on ``key``: linearizable, every f ok at least once."""
    h.call(p, "write", 1, key=key)
    h.call(p + 1, "cas", [1, 2], key=key)
    return h.call(p + 2, "read", None, 2, key=key)


def hard_keys(keys: int = 2, writes: int = 40) -> H:
    """Per key, an ok write, ``writes`` crashed writes, then a read of a value nobody wrote: invalid, but the
    search has 2**writes subsets of crashed writes to rule out, so it never decides in seconds."""
    h = H()
    for k in range(keys):
        h.call(100 * k + 98, "write", 500, key=k)  # one ok write, so stats has nothing to say
        for w in range(writes):
            h.call(100 * k + w, "write", w, type="info", key=k)
        h.call(100 * k + 99, "read", None, 999, key=k)
    return h


def log_history(final: list[int] | None) -> H:
    h = H()
    for v in range(4):
        h.call(v % 2, "append", v, log_index=v)
    if final is not None:
        h.call(5, "read", None, final, node="n1")
    return h


CASES: list[dict[str, Any]] = []


def case(name: str, verdict: str, exit: int, why: str, **more: Any) -> Path:
    CASES.append({"name": name, "verdict": verdict, "exit": exit, "why": why, **more})
    return HERE / name


def run_dir(name: str, test: dict[str, Any] | None, history: str | bytes) -> None:
    d = HERE / name
    d.mkdir()
    if test is not None:
        (d / "test.json").write_text(json.dumps(test, indent=2) + "\n")
    data = history.encode() if isinstance(history, str) else history
    (d / "history.jsonl").write_bytes(data)


def bare(name: str, content: str | bytes) -> None:
    data = content.encode() if isinstance(content, str) else content
    (HERE / name).write_bytes(data)


def build() -> None:
    for p in HERE.iterdir():
        if p.is_dir():
            shutil.rmtree(p)
        elif p.name not in ("make_corpus.py", "README.md"):
            p.unlink()

    # --- decided verdicts, run directories -------------------------------------------------------
    h = H()
    for k in range(3):
        register_ok(h, k, p=3 * k)
    case("register-valid", "valid", 0, "3 keys, each write 1, cas 1->2, read 2", kind="run")
    run_dir("register-valid", register_test("register-valid"), h.text())

    h = H()
    register_ok(h, 0)
    h.call(0, "write", 3, key=1)
    h.call(1, "cas", [3, 4], key=1)
    h.call(2, "read", None, 3, key=1)  # stale: the cas to 4 completed before this read began
    case(
        "register-linear-invalid",
        "invalid",
        1,
        "key 1 reads 3 after a completed cas 3->4",
        kind="run",
        checker="linear",
        failures=["1"],
    )
    run_dir("register-linear-invalid", register_test("register-linear-invalid"), h.text())

    h = H()
    h.call(0, "write", 1, key=0)
    h.call(1, "read", None, 1, key=0)
    h.call(2, "cas", [3, 4], type="fail", key=0, error="compare failed")
    case(
        "register-stats-invalid",
        "invalid",
        1,
        "linearizable, but the one cas failed and none was ok (stats: no ok cas)",
        kind="run",
        checker="stats",
    )
    run_dir("register-stats-invalid", register_test("register-stats-invalid"), h.text())

    case("log-valid", "valid", 0, "4 appends, the final read holds all", kind="run")
    run_dir("log-valid", log_test("log-valid"), log_history([0, 1, 2, 3]).text())
    case(
        "log-invalid",
        "invalid",
        1,
        "acknowledged append 2 missing from the final read",
        kind="run",
        checker="log",
    )
    run_dir("log-invalid", log_test("log-invalid"), log_history([0, 1, 3]).text())
    case("log-no-final-read", "unknown", 2, "no final read: lost entries cannot be decided", kind="run")
    run_dir("log-no-final-read", log_test("log-no-final-read"), log_history(None).text())

    case(
        "register-undecided",
        "unknown",
        2,
        "2 keys, each 40 crashed writes then a read of a value nobody wrote: undecided in the time limit",
        kind="run",
        time_limit=5,
        args=["--time-limit", "5"],
    )
    run_dir("register-undecided", register_test("register-undecided"), hard_keys().text())

    h = H().call(0, "read", None, 1)
    case(
        "read-only-no-test-json",
        "invalid",
        1,
        "run directory without test.json; its only op reads 1 from a never-written register",
        kind="run",
        checker="linear",
    )
    run_dir("read-only-no-test-json", None, h.text())

    h = H()
    h.call(0, "write", 5, key=1)
    h.call(1, "write", 6, key="1")
    h.call(2, "read", None, 5, key=1)
    h.call(3, "read", None, 6, key="1")
    h.call(4, "write", 7, key=1.5)
    h.call(5, "cas", [7, 8], key=1.5)
    h.call(6, "read", None, 8, key=1.5)
    h.call(7, "cas", [5, 9], key=1)
    h.call(8, "cas", [6, 10], key="1")
    case(
        "register-key-types",
        "valid",
        0,
        'keys 1, "1" and 1.5 are distinct registers (one register they would not be linearizable)',
        kind="run",
        keys=["1", '"1"', "1.5"],
    )
    run_dir("register-key-types", register_test("register-key-types"), h.text())

    # --- bare files --------------------------------------------------------------------------------
    case(
        "read-only.jsonl",
        "invalid",
        1,
        "a bare 2-line history reading 1 from a never-written register",
        kind="file",
        checker="linear",
    )
    bare("read-only.jsonl", H().call(0, "read", None, 1).text())

    h = H()
    for k in range(2):
        register_ok(h, k, p=3 * k)
    h.text()
    torn = h.text() + '{"index":12,"type":"invoke","proc'
    case("torn-last-line.jsonl", "valid", 0, "good ops, then a torn (unterminated) last line", kind="file")
    bare("torn-last-line.jsonl", torn)

    edn_ok = """[{:process 0, :type :invoke, :f :write, :value [1 5]}
 {:process 0, :type :ok, :f :write, :value [1 5]}
 {:process 1, :type :invoke, :f :write, :value [2 6]}
 {:process 1, :type :ok, :f :write, :value [2 6]}
 {:process 2, :type :invoke, :f :read, :value [1 nil]}
 {:process 2, :type :ok, :f :read, :value [1 5]}
 {:process 3, :type :invoke, :f :cas, :value [2 [6 7]]}
 {:process 3, :type :ok, :f :cas, :value [2 [6 7]]}
 {:process 2, :type :invoke, :f :read, :value [2 nil]}
 {:process 2, :type :ok, :f :read, :value [2 7]}
 {:process :nemesis, :type :info, :f :start, :value nil}
 {:process :nemesis, :type :info, :f :start, :value "partitioned"}]
"""
    case(
        "independent.edn",
        "valid",
        0,
        "jepsen.independent tuples [k v] over keys 1 and 2, each linearizable on its own",
        kind="file",
        keys=["1", "2"],
    )
    bare("independent.edn", edn_ok)
    edn_bad = edn_ok.replace(":ok, :f :read, :value [2 7]}", ":ok, :f :read, :value [2 6]}")
    case(
        "independent-invalid.edn",
        "invalid",
        1,
        "jepsen.independent tuples; key 2 reads 6 after the cas 6->7 completed",
        kind="file",
        checker="linear",
        failures=["2"],
    )
    bare("independent-invalid.edn", edn_bad)

    # --- malformed input: exit 254, one line naming the file (and line) ---------------------------
    h = H()
    for k in range(2):
        register_ok(h, k, p=3 * k)
    lines = h.text().splitlines(keepends=True)
    mid = "".join(lines[:2]) + "this is not JSON\n" + "".join(lines[2:])
    case("garbage-middle", "malformed", 254, "a garbage line 3 between good ops", kind="run", line=3)
    run_dir("garbage-middle", register_test("garbage-middle"), mid)
    case("all-garbage", "malformed", 254, "no line is JSON", kind="run", line=1)
    run_dir("all-garbage", register_test("all-garbage"), "garbage\nmore garbage\n{not json either\n")
    case(
        "one-torn-garbage-line",
        "malformed",
        254,
        "one unterminated garbage line: a torn line can only follow a good one",
        kind="run",
        line=1,
    )
    run_dir("one-torn-garbage-line", register_test("one-torn-garbage-line"), "xyzzy{")
    case("empty-history", "malformed", 254, "an empty history: no op, not a valid test", kind="run")
    run_dir("empty-history", register_test("empty-history"), "")
    deep = H().call(0, "write", 1).rows
    deep_text = "".join(json.dumps(r) + "\n" for r in deep)
    deep_text += '{"index":2,"type":"invoke","process":1,"f":"write","time":3000000,"value":'
    deep_text += "[" * 100_000 + "]" * 100_000 + "}\n"
    case("deep-json", "malformed", 254, "a value nested 100,000 deep on line 3", kind="run", line=3)
    run_dir("deep-json", register_test("deep-json"), deep_text)
    utf = H().call(0, "write", 1).text().encode()
    utf += b'{"index":2,"type":"invoke","process":1,"f":"write","value":"\xff\xfe","time":3000000}\n'
    case("invalid-utf8", "malformed", 254, "bytes that are not UTF-8 on line 3", kind="run", line=3)
    run_dir("invalid-utf8", register_test("invalid-utf8"), utf)
    h = H()
    register_ok(h, 0)
    h.call(9, "append", 1)
    case(
        "mixed-workloads.jsonl",
        "malformed",
        254,
        "register ops and log appends in one bare history: the model cannot be known (--model)",
        kind="file",
    )
    bare("mixed-workloads.jsonl", h.text())
    h = H().call("nemesis", "start-partition", None, type="info")
    case(
        "no-client-ops.jsonl",
        "malformed",
        254,
        "only nemesis ops: nothing to check, the model cannot be known",
        kind="file",
    )
    bare("no-client-ops.jsonl", h.text())
    case("deep.edn", "malformed", 254, "an EDN value nested 50,000 deep on line 2", kind="file", line=2)
    bare(
        "deep.edn",
        "[{:process 0, :type :invoke, :f :write, :value 1}\n {:process 0, :type :ok, :f :write, :value "
        + "[" * 50_000
        + "]" * 50_000
        + "}]\n",
    )
    case("invalid-utf8.edn", "malformed", 254, "bytes that are not UTF-8 on line 2", kind="file", line=2)
    bare(
        "invalid-utf8.edn",
        b'[{:process 0, :type :invoke, :f :write, :value 1}\n {:process 0, :type :ok, :f :write, :value "\xff"}]\n',
    )
    case(
        "unknown-f.edn",
        "malformed",
        254,
        "an op :f the cas-register model does not know, line 1",
        kind="file",
        line=1,
    )
    bare(
        "unknown-f.edn",
        "[{:process 0, :type :invoke, :f :frobnicate, :value 1}\n {:process 0, :type :ok, :f :frobnicate, :value 1}]\n",
    )
    case(
        "unknown-f-etcd.log",
        "malformed",
        254,
        "an etcd log line with an unknown f, line 2",
        kind="file",
        line=2,
    )
    bare(
        "unknown-f-etcd.log",
        "INFO  jepsen.util - 0\t:invoke\t:write\t1\nINFO  jepsen.util - 1\t:invoke\t:frob\t1\n"
        "INFO  jepsen.util - 0\t:ok\t:write\t1\nINFO  jepsen.util - 1\t:ok\t:frob\t1\n",
    )
    case("empty.jsonl", "malformed", 254, "an empty bare file: no op", kind="file")
    bare("empty.jsonl", "")

    for c in CASES:
        c.setdefault("args", [])
    manifest = {
        "about": "Expected verdicts of `chaos check` on each case (see README.md); rebuilt by make_corpus.py.",
        "cases": CASES,
    }
    (HERE / "manifest.json").write_text(json.dumps(manifest, indent=2) + "\n")


if __name__ == "__main__":
    build()
