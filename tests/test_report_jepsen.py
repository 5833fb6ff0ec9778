"""The report's sections for Jepsen's bank, counter, set-full and long-fork results, rendered from
the checkers' own results on hand-made histories: bad reads marked, lost elements' timelines."""

from __future__ import annotations

from pathlib import Path

from test_history_util import Builder

from chaos.history.checkers.bank import BankChecker
from chaos.history.checkers.counter import CounterChecker
from chaos.history.checkers.longfork import LongForkChecker
from chaos.history.checkers.setfull import SetFullChecker
from chaos.history.report.jepsen import BAD, GOOD, sections_html


def test_each_section_shows_what_its_checker_found(tmp_path: Path) -> None:
    b = Builder()
    for v in ({"0": 16, "1": 84}, {"0": 10, "1": 84}):
        b.op("invoke", 1, "read", None)
        b.op("ok", 1, "read", v)
    bank = BankChecker().check(
        {"bank": {"accounts": [0, 1], "total": 100}}, b.write(tmp_path / "b.jsonl"), {}
    )
    s = Builder()
    for f, p, v, out in (("add", 0, 1, 1), ("read", 1, None, [1]), ("read", 1, None, [])):
        s.op("invoke", p, f, v)
        s.op("ok", p, f, out, node="n<2>")
    sf = SetFullChecker(True).check({}, s.write(tmp_path / "s.jsonl"), {})
    c = Builder()
    for f, v, out in (("add", 2, 2), ("read", None, 5)):
        c.op("invoke", 0, f, v)
        c.op("ok", 0, f, out)
    counter = CounterChecker().check({}, c.write(tmp_path / "c.jsonl"), {})
    lf = LongForkChecker().check({}, Builder().write(tmp_path / "l.jsonl"), {})
    results = {"checkers": {"bank": bank, "set-full-linearizable": sf, "counter": counter, "long-fork": lf}}
    html = sections_html(results)
    assert "<h2>bank: invalid (1 wrong-total)</h2>" in html
    assert html.count(f'fill="{BAD}"') >= 2 and f'fill="{GOOD}"' in html  # a bad bank and counter read
    assert "<h2>set-full-linearizable: invalid (1 lost)</h2>" in html
    assert "n&lt;2&gt;" in html and "n<2>" not in html  # escaped
    assert "<h2>counter: invalid" in html and "<h2>long-fork: unknown" in html
    assert sections_html({"checkers": {"linear": {"valid": True}}}) == ""
