"""`chaos serve` (issue 26 item 5, issue 25 item 15): files are streamed, not read whole; the run list
pages, filters by test and verdict, and shows when each run started."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from chaos.history.report import serve as srv_mod

ROOT = Path(__file__).resolve().parent.parent


def _run(
    store: Path, test: str, stamp: str, valid: bool | None, test_json: dict[str, object] | None = None
) -> Path:
    run = store / test / stamp
    run.mkdir(parents=True)
    (run / "history.jsonl").write_text(
        '{"index":0,"type":"invoke","process":0,"f":"read","value":null,"time":5}\n'
        '{"index":1,"type":"ok","process":0,"f":"read","value":null,"time":9}\n'
    )
    if valid is not None:
        (run / "results.json").write_text(json.dumps({"valid": valid}))
    if test_json is not None:
        (run / "test.json").write_text(json.dumps(test_json))
    return run


def _stamp(i: int) -> str:
    return f"202601{1 + i // 100:02d}T{i % 100 // 60:02d}{i % 100 % 60:02d}00.000"


@pytest.fixture()
def server(tmp_path: Path) -> Iterator[tuple[str, Path]]:
    store = tmp_path / "store"
    # 250 runs of "reg" (every third invalid) and 5 of "log" (all valid), distinct start stamps
    for i in range(250):
        _run(store, "reg", _stamp(i), i % 3 != 0)
    for i in range(5):
        _run(store, "log", _stamp(300 + i), True, {"start_time": 1767225600 + i, "workload": "log"})
    srv = srv_mod.make_server(store, "127.0.0.1", 0)
    t = threading.Thread(target=srv.serve_forever, daemon=True)
    t.start()
    try:
        yield f"http://127.0.0.1:{srv.server_address[1]}", store
    finally:
        srv.shutdown()
        srv.server_close()
        t.join(5)


def get(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=60) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


def rows(page: str) -> list[tuple[str, str, str]]:
    """(test, run, verdict) of each listed run."""
    return re.findall(r'<tr class="run verdict-(\w+)" data-test="([^"]*)" data-run="([^"]*)"', page)


def test_the_run_list_pages(server: tuple[str, Path]) -> None:
    base, _ = server
    status, first = get(base + "/")
    assert status == 200
    listed = rows(first)
    assert len(listed) == srv_mod.PAGE_SIZE == 100
    assert "page 1 of 3" in first and "runs 1–100 of 255" in first
    assert 'href="/?page=2"' in first and 'rel="prev"' not in first
    _, third = get(base + "/?page=3")
    assert len(rows(third)) == 55 and 'rel="next"' not in third and 'href="/?page=2"' in third
    everything = [r[2] for p in (1, 2, 3) for r in rows(get(f"{base}/?page={p}")[1])]
    assert len(everything) == len(set(everything)) == 255
    assert everything == sorted(everything, reverse=True)  # newest first across pages
    _, past = get(base + "/?page=9")
    assert rows(past) == [] and "No run matches." in past


def test_the_run_list_filters_by_test_and_verdict(server: tuple[str, Path]) -> None:
    base, _ = server
    _, logs = get(base + "/?test=log")
    assert {r[1] for r in rows(logs)} == {"log"} and len(rows(logs)) == 5
    _, invalid = get(base + "/?verdict=invalid")
    assert len(rows(invalid)) == 84 and {r[0] for r in rows(invalid)} == {"invalid"}
    assert "of 84 matching" in invalid
    _, both = get(base + "/?test=log&verdict=invalid")
    assert rows(both) == [] and "no run matches" in both
    _, valid2 = get(base + "/?verdict=valid&test=reg&page=2")
    assert len(rows(valid2)) == 66 and {r[:2] for r in rows(valid2)} == {("valid", "reg")}
    # filter links keep the other filter and start again at page 1
    assert 'href="/?test=reg&amp;verdict=invalid"' in valid2


@pytest.mark.parametrize(
    "query",
    [
        "page=0",
        "page=-1",
        "page=x",
        "page=",
        "verdict=bogus",
        "verdict=",
        "test=",
        "sort=name",
        "page=1&page=2",
    ],
)
def test_a_bad_query_is_a_400(server: tuple[str, Path], query: str) -> None:
    base, _ = server
    status, body = get(f"{base}/?{query}")
    assert status == 400 and body.startswith("bad query"), (query, body)


def test_the_run_list_shows_when_each_run_started(server: tuple[str, Path]) -> None:
    base, _ = server
    _, page = get(base + "/?test=log")
    starts = re.findall(r'<td class="mono start">([^<]*)</td>', page)
    expected = [time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(1767225600 + i)) for i in (4, 3, 2, 1, 0)]
    assert starts == expected  # test.json's start_time
    _, reg = get(base + "/?test=reg")
    first = re.findall(r'<td class="mono start">([^<]*)</td>', reg)[0]
    assert first == "2026-01-03 00:49:00"  # from the run directory's name (_stamp(249))
    assert "<th>started</th>" in reg


def _vm_hwm_kb(pid: int) -> int:
    """The peak RSS of the command ``pid`` runs: that of the supervisor's child (chaos.supervisor)."""
    children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
    if len(children) == 1:
        pid = int(children[0])
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1])
    raise AssertionError("no VmHWM")


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="reads the server's peak RSS from /proc")
def test_a_large_node_log_is_streamed_not_read_whole(tmp_path: Path) -> None:
    store = tmp_path / "store"
    run = _run(store, "big", "20260101T000000.000", True)
    log = run / "nodes" / "n1" / "server.log"
    log.parent.mkdir(parents=True)
    size = 1 << 30  # 1 GiB, sparse: no disk used
    with open(log, "wb") as f:
        f.truncate(size)
        f.seek(size - 4)
        f.write(b"end\n")
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    code = "import sys; from chaos.cli import main; sys.exit(main())"
    proc = subprocess.Popen(
        [sys.executable, "-c", code, "serve", "--store", str(store), "--port", "0"],
        stdout=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:
        assert proc.stdout is not None
        url = re.search(r"http://[^ ]+/", proc.stdout.readline())
        assert url, "no address printed"
        before = _vm_hwm_kb(proc.pid)
        got = 0
        tail = b""
        with urllib.request.urlopen(
            url.group() + "runs/big/20260101T000000.000/nodes/n1/server.log", timeout=120
        ) as r:
            assert r.headers["Content-Length"] == str(size)
            while chunk := r.read(1 << 20):
                got += len(chunk)
                tail = chunk[-4:]
        assert got == size and tail == b"end\n"
        grown_mb = (_vm_hwm_kb(proc.pid) - before) / 1024
        assert grown_mb < 64, f"the server's peak memory grew by {grown_mb:.0f} MiB sending a 1 GiB file"
    finally:
        proc.terminate()
        proc.wait(10)
