"""Bench the run report on a large history: write time, page size, browser load time.

Usage: python bench/report_bench.py [N_OPS] [OUT_DIR]   (default 100000 ops, a temp dir)

Prints: history generation, write_report time, index.html size, and (with Debian's chromium and
chromedriver) the page's own load-complete marker over 3 loads, plus timeline redraw time.
"""

from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path

from chaos.history.checkers.registry import check_run
from chaos.history.report.html import write_report
from chaos.history.synth import register_history, write_run


def make_big_run(out: Path, n: int) -> Path:
    """A register run of ``n`` client ops on 20 keys by 10 processes (the tool's own synthetic
    history, no test code), checked by the stats, perf and faults checkers (linearizability is
    left out: this bench times the report, not the search)."""
    ops, _ = register_history(n, keys=20, processes=10, seed=1)
    d = write_run(out, "register-bench", "20260101T000000.000", ops, {"checkers": ["stats", "perf"]})
    check_run(d)
    return d


def main() -> None:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 100_000
    out = Path(sys.argv[2]) if len(sys.argv) > 2 else Path(tempfile.mkdtemp(prefix="report-bench-"))
    t = time.perf_counter()
    d = make_big_run(out, n)
    print(f"history: {n} client ops generated and checked in {time.perf_counter() - t:.2f} s")
    t = time.perf_counter()
    index = write_report(d)
    print(f"write_report: {time.perf_counter() - t:.2f} s, index.html {index.stat().st_size / 1e6:.1f} MB")
    if not Path("/usr/bin/chromium").exists() or not Path("/usr/bin/chromedriver").exists():
        print(
            "chromium or chromedriver not found (apt-get install chromium chromium-driver): browser figures skipped"
        )
        return
    try:
        import selenium  # noqa: F401
    except ImportError:
        print("selenium not installed (pip install selenium): browser figures skipped")
        return
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    opts = webdriver.ChromeOptions()
    opts.binary_location = "/usr/bin/chromium"
    for a in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--window-size=1400,1000"):
        opts.add_argument(a)
    opts.add_argument("--enable-unsafe-swiftshader")
    drv = webdriver.Chrome(service=Service("/usr/bin/chromedriver"), options=opts)
    try:
        for k in range(3):
            drv.get(index.as_uri())
            WebDriverWait(drv, 60, 0.05).until(
                lambda x: x.find_element(By.TAG_NAME, "body").get_attribute("data-report-ready")
            )
            ready = drv.find_element(By.TAG_NAME, "body").get_attribute("data-report-ready")
            print(f"load {k + 1}: ready {ready} ms after navigation")
        status = drv.find_element(By.ID, "timeline-status").text
        print(f"timeline: {status}")
        drv.set_window_size(1400, 2600)
        time.sleep(0.5)
        drv.save_screenshot(str(d / "report.png"))
        print(f"screenshot: {d / 'report.png'}")
    finally:
        drv.quit()


if __name__ == "__main__":
    main()
