"""Open real reports in headless Chromium (Debian's chromium + chromedriver, through selenium).

For a valid register run, an invalid register run and an invalid log run: the banner's verdict, the
counterexample section for the invalid key, no JavaScript errors in the browser log, a screenshot
``report.png`` in the run directory. A 100,000-op history's report must load and render (its load
time is a figure printed by ``bench/report_bench.py``, not a bound here); HTML in history values
must render as text.
"""

from __future__ import annotations

import shutil
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from test_report_fixtures import (
    XSS,
    XSS2,
    make_big_run,
    make_invalid_log_run,
    make_invalid_register_run,
    make_long_invalid_register_run,
    make_valid_register_run,
    make_xss_run,
)

from chaos.history.report.html import write_report

CHROMIUM = "/usr/bin/chromium"
CHROMEDRIVER = "/usr/bin/chromedriver"

pytestmark = pytest.mark.skipif(
    not (Path(CHROMIUM).exists() and Path(CHROMEDRIVER).exists() and shutil.which("chromedriver")),
    reason="needs Debian's chromium and chromedriver",
)


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    opts = webdriver.ChromeOptions()
    opts.binary_location = CHROMIUM
    for a in (
        "--headless=new",
        "--no-sandbox",
        "--disable-dev-shm-usage",
        "--window-size=1400,1000",
        "--enable-unsafe-swiftshader",
        "--allow-file-access-from-files",
    ):
        opts.add_argument(a)
    opts.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=opts)
    driver.set_page_load_timeout(300)  # liveness only: a loaded machine is slow
    try:
        yield driver
    finally:
        driver.quit()


def open_report(
    driver: Any, run_dir: Path, screenshot: bool = True, ready_timeout_s: float = 30
) -> dict[str, Any]:
    """Write and open the run's report; wait for its ready marker (up to ``ready_timeout_s``, a liveness
    limit, not a speed bound); return timings and the console log."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    index = write_report(run_dir)
    driver.get_log("browser")  # drop earlier pages' messages
    start = time.monotonic()
    driver.get(index.as_uri())
    WebDriverWait(driver, ready_timeout_s, poll_frequency=0.05).until(
        lambda d: d.find_element(By.TAG_NAME, "body").get_attribute("data-report-ready")
    )
    wall = time.monotonic() - start
    ready_ms = float(driver.find_element(By.TAG_NAME, "body").get_attribute("data-report-ready"))
    if screenshot:
        _full_page_screenshot(driver, run_dir / "report.png")
    log = driver.get_log("browser")
    return {"wall_s": wall, "ready_ms": ready_ms, "log": log}


def _full_page_screenshot(driver: Any, path: Path) -> None:
    height = driver.execute_script("return Math.min(document.documentElement.scrollHeight, 6000)")
    driver.set_window_size(1400, max(int(height) + 40, 1000))
    time.sleep(0.4)  # let plotly's responsive resize settle
    driver.save_screenshot(str(path))
    driver.set_window_size(1400, 1000)


def js_errors(log: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [e for e in log if e.get("level") == "SEVERE"]


def banner(driver: Any) -> tuple[str, list[str]]:
    from selenium.webdriver.common.by import By

    verdict = driver.find_element(By.ID, "verdict").text.strip()
    chips = [li.text for li in driver.find_elements(By.CSS_SELECTOR, "#checkers li")]
    return verdict, chips


def test_valid_register_report(browser: Any, tmp_path: Path) -> None:
    from selenium.webdriver.common.by import By

    d = make_valid_register_run(tmp_path)
    # a generous liveness limit: how fast it loads is bench/report_bench.py's figure
    r = open_report(browser, d, ready_timeout_s=600)
    assert js_errors(r["log"]) == []
    verdict, chips = banner(browser)
    assert verdict == "VALID"
    assert browser.find_element(By.TAG_NAME, "body").get_attribute("data-verdict") == "valid"
    assert chips and all("valid" in c for c in chips)
    assert browser.find_elements(By.CSS_SELECTOR, "#counterexample-list .ce") == []
    # plots drawn with the partition window shaded
    assert browser.execute_script("return document.getElementById('latency-plot').data.length") > 0
    shapes = browser.execute_script(
        "return document.getElementById('rate-plot').layout.shapes.filter(s => s.type === 'rect').length"
    )
    assert shapes == 1
    assert (d / "report.png").stat().st_size > 10_000
    # hovering an op on the canvas timeline shows it
    from selenium.webdriver.common.action_chains import ActionChains

    browser.execute_script("document.getElementById('timeline').scrollIntoView()")
    m = browser.execute_script("return window.__report.timeline.byIndex(0)")
    pt = browser.execute_script(f"return window.__report.timeline.pointOf({m})")
    canvas = browser.find_element(By.ID, "timeline-canvas")
    rect = browser.execute_script("return arguments[0].getBoundingClientRect().toJSON()", canvas)
    off_x = pt["x"] - (rect["left"] + rect["width"] / 2)
    off_y = pt["y"] - (rect["top"] + rect["height"] / 2)
    ActionChains(browser).move_to_element_with_offset(canvas, int(off_x), int(off_y)).perform()
    tip = browser.find_element(By.ID, "tooltip").text
    assert "invoke #0 at" in tip and "process" in tip


def test_invalid_register_report_has_counterexample(browser: Any, tmp_path: Path) -> None:
    from selenium.webdriver.common.action_chains import ActionChains
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    d = make_invalid_register_run(tmp_path)
    # a generous liveness limit: how fast it loads is bench/report_bench.py's figure
    r = open_report(browser, d, ready_timeout_s=600)
    assert js_errors(r["log"]) == []
    verdict, chips = banner(browser)
    assert verdict == "INVALID"
    assert chips[0].startswith("linear") and "invalid" in chips[0]  # failing checker first
    ce = browser.find_element(By.ID, "counterexample-key-1")
    assert "Key 1 is not linearizable" in ce.text
    boxes = ce.find_elements(By.CSS_SELECTOR, "g.ce-op")
    assert len(boxes) == 4
    failing = ce.find_element(By.CSS_SELECTOR, 'g.ce-op[data-op="3"] rect')
    assert failing.get_attribute("stroke") == "#d7191c"
    prefix_op = ce.find_element(By.CSS_SELECTOR, 'g.ce-op[data-op="1"] rect')
    assert prefix_op.get_attribute("fill") == "#c7e9c0"
    # hover shows the model state before and after
    browser.execute_script("arguments[0].scrollIntoView({block:'center'})", prefix_op)
    ActionChains(browser).move_to_element(prefix_op).perform()
    tip = browser.find_element(By.ID, "tooltip")
    assert "state before: 1" in tip.text and "state after:  2" in tip.text
    ActionChains(browser).move_to_element(failing).perform()
    assert "cannot be placed" in tip.text and "state before: 2" in tip.text
    # an availability row zooms the plots and the timeline to its window
    row = browser.find_element(By.CSS_SELECTOR, "#availability-table tbody tr.clickable")
    assert "kill n1" in row.text
    browser.execute_script("arguments[0].scrollIntoView({block:'center'})", row)
    row.click()
    WebDriverWait(browser, 10).until(
        lambda d: d.execute_script("return document.getElementById('rate-plot').layout.xaxis.range[1]") < 4.5
    )
    assert "Showing 1.7" in browser.find_element(By.ID, "timeline-status").text
    assert (d / "report.png").stat().st_size > 10_000


def test_invalid_register_report_opens_its_diagram_on_the_failing_op(browser: Any, tmp_path: Path) -> None:
    """A long key's diagram opens scrolled to the smallest failing window, not the key's first op;
    the process labels stay in view, the failing op's label is whole, the sentence of why is shown
    and the failing op's tooltip names the fault window it fell in (issue 35 item 9)."""
    from selenium.webdriver.common.action_chains import ActionChains
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    d = make_long_invalid_register_run(tmp_path)
    r = open_report(browser, d, screenshot=False, ready_timeout_s=600)
    assert js_errors(r["log"]) == []
    ce = browser.find_element(By.ID, "counterexample-key-1")
    why = ce.find_element(By.CSS_SELECTOR, "p.ce-why").text
    assert why.startswith("read 117 (process 4)") and "write(119) by process 2 completed" in why, why
    wrap = ce.find_element(By.CSS_SELECTOR, ".ce-svg-wrap")
    WebDriverWait(browser, 30).until(lambda _: wrap.get_attribute("data-opened") == "1")
    failing = ce.find_element(By.CSS_SELECTOR, "g.ce-op.failing-op rect")
    view = browser.execute_script(
        "const w = arguments[0], f = arguments[1].getBoundingClientRect(), b = w.getBoundingClientRect();"
        "const lanes = w.querySelector('.ce-lanes').getBoundingClientRect();"
        "return {scroll: w.scrollLeft, width: w.scrollWidth, fl: f.left, fr: f.right, bl: b.left, br: b.right,"
        " lanesLeft: lanes.left};",
        wrap,
        failing,
    )
    assert view["width"] > view["br"] - view["bl"] + 200, view  # the lanes do not fit: it must scroll
    assert view["scroll"] > 0, view
    assert view["bl"] <= view["fl"] and view["fr"] <= view["br"] + 1, view  # the failing op in view
    assert abs(view["lanesLeft"] - view["bl"]) <= 2, view  # process labels stuck to the left edge
    label = ce.find_element(By.CSS_SELECTOR, "g.ce-op.failing-op text").text
    assert label == "read() -> 117", label
    browser.execute_script("arguments[0].scrollIntoView({block:'center', inline:'nearest'})", failing)
    ActionChains(browser).move_to_element(failing).perform()
    tip = browser.find_element(By.ID, "tooltip").text
    assert "during fault partition" in tip, tip


def test_invalid_log_report_lists_anomalies(browser: Any, tmp_path: Path) -> None:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    d = make_invalid_log_run(tmp_path)
    # a generous liveness limit: how fast it loads is bench/report_bench.py's figure
    r = open_report(browser, d, ready_timeout_s=600)
    assert js_errors(r["log"]) == []
    verdict, chips = banner(browser)
    assert verdict == "INVALID"
    assert chips[0].startswith("log")
    rows = browser.find_elements(By.CSS_SELECTOR, "#log-table tbody tr")
    kinds = [row.find_element(By.TAG_NAME, "td").text for row in rows]
    assert kinds == ["lost", "duplicated", "unexpected"]
    lost = rows[0].text
    assert "7" in lost and "@index 8" in lost
    # clicking the writer op selects it on the timeline
    jump = rows[0].find_element(By.CSS_SELECTOR, ".jump")
    browser.execute_script("arguments[0].scrollIntoView({block:'center'})", jump)
    jump.click()
    # the timeline redraws (and rewrites its status) on the next animation frame
    WebDriverWait(browser, 5).until(
        lambda b: "Showing 0.000" not in b.find_element(By.ID, "timeline-status").text
    )
    status = browser.find_element(By.ID, "timeline-status").text
    assert "Showing" in status and "Showing 0.000" not in status
    # node logs and raw history are linked
    links = [a.get_attribute("href") for a in browser.find_elements(By.CSS_SELECTOR, "#file-list a")]
    assert any(h.endswith("history.jsonl") for h in links)
    assert any(h.endswith("nodes/n1/dledger.log") for h in links)
    assert (d / "report.png").stat().st_size > 10_000


@pytest.mark.slow
def test_100k_op_report_loads_and_renders(browser: Any, tmp_path: Path) -> None:
    from selenium.webdriver.common.by import By

    d = make_big_run(tmp_path, 100_000)
    # a generous liveness limit: how fast it loads is bench/report_bench.py's figure
    r = open_report(browser, d, ready_timeout_s=600)
    assert js_errors(r["log"]) == []
    assert (
        browser.execute_script("return document.getElementById('report-data').textContent.length") > 1_000_000
    )
    n = browser.execute_script(
        "return JSON.parse(document.getElementById('report-data').textContent).ops.p.length"
    )
    assert n == 100_000
    # one canvas for the timeline, not one DOM node per op
    assert len(browser.find_elements(By.CSS_SELECTOR, "#timeline canvas")) == 1
    assert browser.execute_script("return document.getElementsByTagName('*').length") < 20_000
    # the page set its own load-complete marker: the timeline and plots were drawn
    assert r["ready_ms"] > 0


def test_html_in_values_renders_as_text(browser: Any, tmp_path: Path) -> None:
    from selenium.webdriver.common.action_chains import ActionChains
    from selenium.webdriver.common.by import By

    d = make_xss_run(tmp_path)
    r = open_report(browser, d, screenshot=False)
    assert browser.execute_script("return window.__pwned") is None
    assert js_errors(r["log"]) == []
    assert browser.find_elements(By.CSS_SELECTOR, "img") == []
    body = browser.find_element(By.TAG_NAME, "body").text
    assert XSS in body  # shown as text: the test name, checker names, log table
    assert XSS2 in browser.find_element(By.ID, "log-table").text
    ce = browser.find_element(By.CSS_SELECTOR, "#counterexample-list .ce")
    assert XSS2 in ce.text
    box = ce.find_element(By.CSS_SELECTOR, 'g.ce-op[data-op="0"] rect')
    browser.execute_script("arguments[0].scrollIntoView({block:'center'})", box)
    ActionChains(browser).move_to_element(box).perform()
    assert XSS in browser.find_element(By.ID, "tooltip").text
    # plotly reads a subset of HTML in labels: the f name and fault kind show literally there too
    legend = browser.execute_script("return document.querySelector('#latency-plot .legend').textContent")
    assert XSS + " fail" in legend
    notes = browser.execute_script("return document.querySelector('#rate-plot .annotation').textContent")
    assert XSS in notes
    assert browser.execute_script("return window.__pwned") is None


def test_quantile_and_stacked_throughput_plots_render_and_pngs_exist(browser: Any, tmp_path: Path) -> None:
    """Issue 25 item 13: the latency-quantile plot (p50 / p95 / p99 / max per bucket) and the
    throughput stacked by outcome (per-f lines hidden until picked) render with the fault window
    shaded; the same plots are PNG files in the run directory (Jepsen's names)."""
    from PIL import Image

    d = make_valid_register_run(tmp_path)
    r = open_report(browser, d, screenshot=False, ready_timeout_s=600)
    assert js_errors(r["log"]) == []
    names = browser.execute_script("return document.getElementById('quantile-plot').data.map(t => t.name)")
    assert names == ["p50", "p95", "p99", "max"]
    drawn = browser.execute_script(
        "return document.querySelectorAll('#quantile-plot .scatterlayer .trace path.js-line').length"
    )
    assert drawn >= 4
    rate = browser.execute_script(
        "return document.getElementById('rate-plot').data.map(t => [t.name, t.stackgroup || null, t.visible])"
    )
    stacked = [n for n, group, _v in rate if group == "outcome"]
    assert stacked[0] == "ok" and all(
        n in ("ok", "fail: no match", "fail: aborted", "fail: unavailable", "info") for n in stacked
    )
    assert [v for _n, group, v in rate if group is None] and all(
        v == "legendonly" for _n, group, v in rate if group is None
    )
    bucket = browser.execute_script("return document.getElementById('rate-plot').data[0].x[1]")
    assert bucket in (1, 2)
    shapes = browser.execute_script(
        "return document.getElementById('quantile-plot').layout.shapes.filter(s => s.type === 'rect').length"
    )
    assert shapes == 1
    for name in ("latency-raw.png", "latency-quantiles.png", "rate.png"):
        with Image.open(d / name) as im:
            assert im.format == "PNG" and im.size[0] >= 800 and im.size[1] >= 300
            assert len(im.convert("RGB").getcolors(maxcolors=1 << 20) or []) > 10  # something was drawn
