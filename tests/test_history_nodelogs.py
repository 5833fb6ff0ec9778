"""The server-logs checker (Jepsen's log-file-pattern) on stored run directories: which files it scans."""

from __future__ import annotations

from pathlib import Path

from chaos.history.checkers.nodelogs import LogPattern, ServerLogChecker, patterns_doc
from chaos.history.checkers.registry import UNKNOWN

GUARD = LogPattern("safety-guard", r"refusing to", "invalid", "a safety guard fired")


def _run(tmp_path: Path, logs: dict[str, dict[str, str]]) -> Path:
    for node, files in logs.items():
        d = tmp_path / "nodes" / node
        d.mkdir(parents=True)
        for name, text in files.items():
            (d / name).write_text(text)
    history = tmp_path / "history.jsonl"
    history.write_text("")
    return history


def test_no_named_files_means_every_downloaded_file_is_scanned(tmp_path: Path) -> None:
    history = _run(
        tmp_path,
        {"n1": {"etcd.log": "ok\n", "other.txt": "x refusing to truncate\n"}, "n2": {"etcd.log": "ok\n"}},
    )
    test = {"nodes": [{"name": "n1"}, {"name": "n2"}], "server_logs": patterns_doc([], [GUARD])}
    r = ServerLogChecker().check(test, history, {})
    assert r["valid"] is False, r
    assert sorted(r["scanned"]) == ["nodes/n1/etcd.log", "nodes/n1/other.txt", "nodes/n2/etcd.log"]
    assert r["cause"].startswith("nodes/n1/other.txt:1:")


def test_named_files_only_and_a_node_without_logs_is_unknown(tmp_path: Path) -> None:
    history = _run(tmp_path, {"n1": {"server.log": "ok\n", "other.txt": "refusing to\n"}})
    named = {"nodes": [{"name": "n1"}], "server_logs": patterns_doc(["server.log"], [GUARD])}
    assert ServerLogChecker().check(named, history, {})["valid"] is True
    every = {"nodes": [{"name": "n1"}, {"name": "n2"}], "server_logs": patterns_doc([], [GUARD])}
    r = ServerLogChecker().check(every, history, {})
    assert r["valid"] is False  # an invalid match outweighs a missing log
    (tmp_path / "nodes" / "n1" / "other.txt").write_text("ok\n")
    r = ServerLogChecker().check(every, history, {})
    assert r["valid"] == UNKNOWN and r["missing"] == ["nodes/n2/ (no file downloaded)"], r
