"""``chaos serve`` over a real ThreadingHTTPServer on 127.0.0.1 and a random port."""

from __future__ import annotations

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

from chaos.cli import BadArguments
from chaos.history import serve as srv_mod


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
    assert "#d7191c" in rows[1] and "#1a9850" in rows[3]
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
        assert status == 404, path
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
    finally:
        proc.send_signal(signal.SIGINT)
        proc.wait(30)
    assert proc.returncode in (0, 130)
