"""``chaos serve`` over a real ThreadingHTTPServer on 127.0.0.1 and a random port."""

from __future__ import annotations

import http.client
import io
import re
import shutil
import threading
import urllib.error
import urllib.request
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from test_report_fixtures import XSS, make_invalid_log_run, make_invalid_register_run, make_valid_register_run

from chaos.errors import BadArguments
from chaos.history.report import serve as srv_mod


def _rename(run: Path, stamp: str) -> Path:
    new = run.parent / stamp
    run.rename(new)
    return new


@pytest.fixture()
def store(tmp_path: Path) -> Path:
    s = tmp_path / "store"
    s.mkdir()
    _rename(make_valid_register_run(s), "20260101T100000.000")
    _rename(make_invalid_register_run(s), "20260101T110000.000")
    log = _rename(make_invalid_log_run(s), "20260101T120000.000")
    (s / "latest").symlink_to(log)  # the runner's symlinks must not list twice
    (s / "log-invalid" / "latest").symlink_to(log)
    # an incomplete run (crashed before checking): history only
    inc = s / "register-valid" / "20260101T130000.000"
    inc.mkdir()
    (inc / "history.jsonl").write_text(
        '{"index":0,"type":"invoke","process":0,"f":"read","value":null,"time":5}\n'
    )
    # a run whose name holds HTML
    x = s / XSS.replace("/", "_") / "20250101T000000.000"
    x.mkdir(parents=True)
    (x / "test.json").write_text('{"workload": "<b>bold</b>"}')
    return s


@pytest.fixture()
def server(store: Path) -> Iterator[str]:
    srv = srv_mod.make_server(store, "127.0.0.1", 0)
    t = threading.Thread(target=srv.serve_forever, daemon=True)
    t.start()
    port = srv.server_address[1]
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        srv.shutdown()
        srv.server_close()
        t.join(5)


def get(url: str) -> tuple[int, str, bytes]:
    try:
        with urllib.request.urlopen(url, timeout=60) as r:
            return r.status, r.headers.get("Content-Type", ""), r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.headers.get("Content-Type", ""), e.read()


def test_lists_runs_newest_first_with_verdicts(server: str) -> None:
    status, ctype, body = get(server + "/")
    assert status == 200 and ctype.startswith("text/html")
    page = body.decode()
    rows = re.findall(r'<tr class="run .*?</tr>', page)
    runs = [r.split('data-run="')[1].split('"')[0] for r in rows]
    assert runs == [
        "20260101T130000.000",
        "20260101T120000.000",
        "20260101T110000.000",
        "20260101T100000.000",
        "20250101T000000.000",
    ]
    verdicts = [r.split("verdict-")[1].split('"')[0] for r in rows]
    assert verdicts == ["incomplete", "invalid", "invalid", "valid", "incomplete"]
    assert "v verdict-invalid" in rows[1] and "v verdict-valid" in rows[3]
    assert ">log<" in rows[1] and ">pause<" in rows[1]  # workload and nemesis
    assert ">63<" in rows[1] and ">62<" in rows[1]  # client ops, ok
    assert "<img" not in page and "&lt;img" in page and "<b>bold" not in page


def test_opens_report_files_and_zip(server: str, store: Path) -> None:
    base = server + "/runs/register-invalid/20260101T110000.000/"
    assert not (store / "register-invalid" / "20260101T110000.000" / "index.html").exists()
    status, ctype, body = get(base)
    assert status == 200 and ctype.startswith("text/html")
    assert b'id="verdict"' in body and b"INVALID" in body
    assert (store / "register-invalid" / "20260101T110000.000" / "index.html").exists()  # written on demand
    status, ctype, body = get(base + "nodes/n1/dledger.log")
    assert status == 200 and ctype.startswith("text/plain") and body.startswith(b"n1 started")
    status, ctype, _ = get(base + "history.jsonl")
    assert status == 200 and ctype.startswith("text/plain")
    status, _, body = get(base + "files/")
    assert status == 200 and b"nodes/n2/dledger.log" in body
    status, ctype, body = get(server + "/zip/register-invalid/20260101T110000.000.zip")
    assert status == 200 and ctype == "application/zip"
    names = zipfile.ZipFile(io.BytesIO(body)).namelist()
    prefix = "register-invalid/20260101T110000.000/"
    assert {
        prefix + n for n in ("history.jsonl", "results.json", "test.json", "nodes/n3/dledger.log")
    } <= set(names)
    data = zipfile.ZipFile(io.BytesIO(body)).read(prefix + "results.json")
    assert data == (store / "register-invalid" / "20260101T110000.000" / "results.json").read_bytes()


def test_rejects_paths_outside_the_store(server: str, store: Path) -> None:
    (store.parent / "secret.txt").write_text("secret")
    for path in (
        "/runs/register-invalid/20260101T110000.000/../../../secret.txt",
        "/runs/register-invalid/20260101T110000.000/%2e%2e/%2e%2e/%2e%2e/secret.txt",
        "/runs/../secret.txt/x",
        "/runs/register-invalid/nope/",
        "/zip/register-invalid/..%2f..%2fsecret.txt.zip",
        "/nothing",
    ):
        status, _, body = get(server + path)
        # an encoded separator (%2f) is a bad path (400); the rest are not in the store (404)
        assert status == (400 if "%2f" in path else 404), path
        assert b"secret" != body


def test_report_served_over_http_has_no_js_errors(server: str) -> None:
    if not (Path("/usr/bin/chromium").exists() and shutil.which("chromedriver")):
        pytest.skip("needs chromium and chromedriver")
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    opts = webdriver.ChromeOptions()
    opts.binary_location = "/usr/bin/chromium"
    for a in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--enable-unsafe-swiftshader"):
        opts.add_argument(a)
    opts.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    d = webdriver.Chrome(service=Service("/usr/bin/chromedriver"), options=opts)
    try:
        d.get(server + "/")
        d.find_element(By.CSS_SELECTOR, 'tr[data-run="20260101T120000.000"] a').click()
        WebDriverWait(d, 60).until(
            lambda d: d.find_element(By.TAG_NAME, "body").get_attribute("data-report-ready")
        )
        assert d.find_element(By.ID, "verdict").text == "INVALID"
        assert [e for e in d.get_log("browser") if e["level"] == "SEVERE"] == []
    finally:
        d.quit()


def raw(
    server: str, path: str, host: str | None = "", method: str = "GET"
) -> tuple[int, dict[str, str], bytes]:
    """One request through http.client with the path sent as is; ``host=None`` sends no Host header,
    ``""`` the default one."""
    port = int(server.rsplit(":", 1)[1])
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    try:
        c.putrequest(method, path, skip_host=host != "")
        if host:
            c.putheader("Host", host)
        c.endheaders()
        r = c.getresponse()
        return r.status, {k.lower(): v for k, v in r.getheaders()}, r.read()
    finally:
        c.close()


INVALID_RUN = "/runs/register-invalid/20260101T110000.000/"


def test_run_files_are_never_served_as_active_content(server: str, store: Path) -> None:
    """Only the report is HTML; .svg/.xhtml/.html/.js from a run are downloads, text is text/plain."""
    rd = store / "register-invalid" / "20260101T110000.000"
    script = b"<script>window.__pwned=1</script>"
    (rd / "evil.svg").write_bytes(b'<svg xmlns="http://www.w3.org/2000/svg">' + script + b"</svg>")
    (rd / "evil.xhtml").write_bytes(b'<html xmlns="http://www.w3.org/1999/xhtml">' + script + b"</html>")
    (rd / "nodes" / "n1" / "page.html").write_bytes(script)
    (rd / "evil.js").write_bytes(b"window.__pwned=1")
    (rd / "evil.xml").write_bytes(b"<?xml version='1.0'?><x/>")
    (rd / "p\u00e9.svg").write_bytes(script)
    for name in ("evil.svg", "evil.xhtml", "nodes/n1/page.html", "evil.js", "evil.xml", "p%C3%A9.svg"):
        status, headers, body = raw(server, INVALID_RUN + name)
        assert status == 200, name
        assert headers["content-type"] == "application/octet-stream", name
        assert headers["content-disposition"].startswith("attachment;"), name
        assert headers["x-content-type-options"] == "nosniff"
        assert "sandbox" in headers["content-security-policy"]
    assert (
        "filename*=UTF-8''p%C3%A9.svg" in raw(server, INVALID_RUN + "p%C3%A9.svg")[1]["content-disposition"]
    )
    for name in ("history.jsonl", "results.json", "nodes/n1/dledger.log"):
        status, headers, _ = raw(server, INVALID_RUN + name)
        assert status == 200 and headers["content-type"] == "text/plain; charset=utf-8", name
        assert "content-disposition" not in headers
    # the report itself is HTML
    status, headers, body = raw(server, INVALID_RUN)
    assert status == 200 and headers["content-type"] == "text/html; charset=utf-8" and b'id="verdict"' in body
    status, headers, _ = raw(server, INVALID_RUN + "index.html")
    assert status == 200 and headers["content-type"] == "text/html; charset=utf-8"


def test_every_response_carries_a_restrictive_csp(server: str) -> None:
    for path in (
        "/",
        INVALID_RUN,
        INVALID_RUN + "files/",
        INVALID_RUN + "history.jsonl",
        INVALID_RUN.rstrip("/"),  # redirect
        "/zip/register-invalid/20260101T110000.000.zip",
        "/nothing",
        "/runs/a%00b/c/",
        "/favicon.ico",
    ):
        status, headers, _ = raw(server, path)
        csp = headers.get("content-security-policy", "")
        assert csp.startswith("default-src 'none'"), (path, status, csp)
        assert "'unsafe-eval'" not in csp and "frame-ancestors 'none'" in csp, path
        assert "script-src" not in csp or "'unsafe-inline'" not in csp.split("script-src")[1].split(";")[0]
    _, headers, _ = raw(server, "/")
    assert "script-src" not in headers["content-security-policy"]  # the run list runs no script
    assert "unsafe-inline" not in headers["content-security-policy"]
    _, headers, body = raw(server, INVALID_RUN)
    script_src = headers["content-security-policy"].split("script-src ")[1].split(";")[0].split()
    assert script_src and all(s.startswith("'sha256-") for s in script_src)
    # Plotly and report.js; the JSON data block is not a script to allow
    assert len(script_src) == 2 and b'<script id="report-data" type="application/json">' in body


def test_bad_paths_and_histories_are_answered_with_a_status(server: str, store: Path) -> None:
    for path in (
        "/runs/register-invalid/20260101T110000.000/history.jsonl%00.txt",
        "/runs/register%00invalid/20260101T110000.000/",
        "/zip/register-invalid/%00.zip",
        "/%00",
        "/runs/register-invalid/20260101T110000.000/%ff%fe",
        "/runs/register-invalid/20260101T110000.000/a%2fb",
    ):
        status, headers, body = raw(server, path)
        assert status == 400, path
        assert headers["content-type"].startswith("text/plain") and body.startswith(b"bad path"), path
    # a history with non-UTF-8 bytes: the list still renders, the report is a 500 naming the problem
    bad = store / "register-valid" / "20260101T140000.000"
    bad.mkdir()
    (bad / "history.jsonl").write_bytes(
        b'{"index":0,"type":"invoke","process":0,"f":"read","value":"\xff\xfe","time":5}\n'
    )
    status, _, body = raw(server, "/")
    assert status == 200 and b"20260101T140000.000" in body
    status, headers, body = raw(server, "/runs/register-valid/20260101T140000.000/")
    assert status == 500 and headers["content-type"].startswith("text/plain")
    assert b"cannot write the report" in body and b"UTF-8" in body
    status, headers, body = raw(server, "/runs/register-valid/20260101T140000.000/history.jsonl")
    assert status == 200 and b"\xff\xfe" in body


def test_a_fault_in_the_handler_is_a_500(server: str, monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(store: Path) -> str:
        raise RuntimeError("listing failed")

    monkeypatch.setattr(srv_mod, "render_index", broken)
    status, headers, body = raw(server, "/")
    assert status == 500 and b"RuntimeError: listing failed" in body
    assert headers["content-security-policy"].startswith("default-src 'none'")
    # the server still answers afterwards
    assert raw(server, INVALID_RUN + "results.json")[0] == 200


def test_host_header_must_name_this_server(server: str, store: Path) -> None:
    port = server.rsplit(":", 1)[1]
    for host in (
        f"localhost:{port}",
        "localhost",
        f"127.0.0.1:{port}",
        "127.0.0.2",
        f"[::1]:{port}",
        "LOCALHOST.",
    ):
        assert raw(server, "/", host)[0] == 200, host
    for host in ("evil.example", f"evil.example:{port}", "127.0.0.1.evil.example", "10.0.0.1", "[::2]:80"):
        status, _, body = raw(server, "/", host)
        assert status == 421 and b"--allow-host" in body, host
    assert raw(server, INVALID_RUN + "history.jsonl", "rebind.example")[0] == 421
    status, _, body = raw(server, "/", None)
    assert status == 400 and b"missing Host" in body
    # --allow-host adds names
    srv = srv_mod.make_server(store, "127.0.0.1", 0, allow_hosts=("chaos.lan", "Box.Example:9"))
    t = threading.Thread(target=srv.serve_forever, daemon=True)
    t.start()
    try:
        other = f"http://127.0.0.1:{srv.server_address[1]}"
        assert raw(other, "/", "chaos.lan:8080")[0] == 200
        assert raw(other, "/", "box.example")[0] == 200
        assert raw(other, "/", "evil.example")[0] == 421
    finally:
        srv.shutdown()
        srv.server_close()
        t.join(5)


def test_idle_and_slow_connections_are_closed_and_ipv6_binds(store: Path) -> None:
    import socket

    srv = srv_mod.make_server(store, "127.0.0.1", 0, idle_timeout=0.5)
    t = threading.Thread(target=srv.serve_forever, daemon=True)
    t.start()
    try:
        for sent in (b"", b"GET / HTTP/1.1\r\n"):  # nothing, then half a request
            with socket.create_connection(srv.server_address[:2], timeout=20) as c:
                c.sendall(sent)
                assert c.recv(4096) == b""  # closed by the server, long before our 20 s
    finally:
        srv.shutdown()
        srv.server_close()
        t.join(5)
    six = srv_mod.make_server(store, "::1", 0)
    t = threading.Thread(target=six.serve_forever, daemon=True)
    t.start()
    try:
        status, _, body = get(f"http://[::1]:{six.server_address[1]}/")
        assert status == 200 and b"<html" in body.lower()
    finally:
        six.shutdown()
        six.server_close()
        t.join(5)


def test_is_allowed_host() -> None:
    none: frozenset[str] = frozenset()
    assert srv_mod.is_allowed_host("127.8.9.10:1", "127.0.0.1", none)
    assert srv_mod.is_allowed_host("[::1]", "127.0.0.1", none)
    assert srv_mod.is_allowed_host("192.168.1.5:8080", "192.168.1.5", none)  # the bound address
    assert not srv_mod.is_allowed_host("192.168.1.6:8080", "192.168.1.5", none)
    assert not srv_mod.is_allowed_host("", "127.0.0.1", none)
    assert not srv_mod.is_allowed_host("localhost.evil.example", "127.0.0.1", none)
    assert srv_mod.is_allowed_host("nas:80", "0.0.0.0", frozenset({"nas"}))


def test_bad_store_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(BadArguments, match="expected an existing directory"):
        srv_mod.serve.main(["--store", str(tmp_path / "missing"), "--port", "0"], standalone_mode=False)


def test_chaos_serve_command_as_a_process(store: Path) -> None:
    """``chaos serve`` through the real entry point, on a random port, stopped by SIGINT."""
    import signal
    import subprocess
    import sys

    proc = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "from chaos.cli import main; main()",
            "serve",
            "--store",
            str(store),
            "--port",
            "0",
            "--allow-host",
            "chaos.test",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        line = proc.stdout.readline() if proc.stdout else ""
        m = re.search(r"http://127\.0\.0\.1:(\d+)/", line)
        assert m, line
        status, _, body = get(f"http://127.0.0.1:{m.group(1)}/")
        assert status == 200 and b"20260101T120000.000" in body
        assert raw(f"http://127.0.0.1:{m.group(1)}", "/", "chaos.test")[0] == 200
        assert raw(f"http://127.0.0.1:{m.group(1)}", "/", "other.test")[0] == 421
    finally:
        proc.send_signal(signal.SIGINT)
        proc.wait(30)
    assert proc.returncode in (0, 130)
