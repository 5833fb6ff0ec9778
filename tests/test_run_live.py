"""The live view's plain form (``chaos run --no-live``): one status line per interval on a console
that is not a terminal; real threads, a real rich Console writing to a buffer."""

from __future__ import annotations

import io
import threading
import time
from typing import Any

import pytest
from rich.console import Console

from chaos.control.interpreter import Stats
from chaos.runner.live import LiveView


class _DB:
    def __init__(self) -> None:
        self.asked = threading.Event()

    def primaries(self, control: Any) -> list[str]:
        self.asked.set()
        return ["n2"]


class _Test:
    name = "register-none"
    control = None

    def __init__(self) -> None:
        self.db = _DB()


class _Interp:
    def __init__(self) -> None:
        self.stats = Stats(ok=7, fail=1, info=2)


@pytest.mark.timeout(120)
def test_no_live_console_gets_plain_status_lines() -> None:
    out = io.StringIO()
    console = Console(file=out, force_terminal=False, width=200)
    test = _Test()
    view = LiveView(console, test, _Interp(), 60.0, every_s=0.05)
    view.phase = "main"
    view.start()
    try:
        test.db.asked.wait()
        while out.getvalue().count("\n") < 3:
            threading.Event().wait(0.02)
    finally:
        view.stop()
    lines = out.getvalue().splitlines()
    assert all("/60s main ok 7  fail 1 (no match 0, unavailable 1)  info 2" in line for line in lines), lines
    assert any("leader=n2" in line for line in lines), lines
    assert "\x1b[" not in out.getvalue()  # plain text, no terminal control sequences


def test_fails_are_shown_apart_and_faults_as_short_phrases_with_their_age() -> None:
    """Issue 25 items 8 and 10: a cas that did not match is not an outage, and a fault in force is
    one short phrase with its age, not a cut Python dict."""
    from chaos.history.op import Op
    from chaos.runner.live import ops_text

    stats = Stats()
    for typ, extra in (("ok", {}), ("fail", {"compare_failed": True}), ("fail", {}), ("fail", {})):
        stats.completed(Op(type=typ, process=0, f="cas", value=[1, 2], time=1, extra=extra))
    assert ops_text(stats) == "ok 1  fail 3 (no match 1, unavailable 2)  info 0"
    # a delete the plug-in's client has no method for was never sent: not an outage
    stats.completed(Op(type="fail", process=0, f="delete", value=None, time=1, extra={"unsupported": True}))
    assert ops_text(stats) == "ok 1  fail 4 (no match 1, unsupported 1, unavailable 2)  info 0"
    kill = {"targets": "leader", "nodes": ["n5"], "killed": ["n5"], "applied": True}
    part = {"shape": "majorities-ring", "grudge": {"n1": ["n3"], "n3": ["n1"]}, "applied": True}
    for f, value in (("start-kill", kill), ("start-partition", part)):
        stats.completed(Op(type="info", process="nemesis", f=f, value=value, time=1))
    interp = _Interp()
    interp.stats = stats
    view = LiveView(Console(file=io.StringIO()), _Test(), interp, 60.0)
    # the age counts from the start op's completion, not from when a status line first saw it
    assert set(stats.fault_since) == {"kill", "partition"}
    assert abs(stats.fault_since["kill"] - time.monotonic()) < 60
    stats.fault_since.update(kill=88.0, partition=100.0)
    assert view.faults_text(now=100.0) == "kill n5 12 s · partition majorities-ring 0 s"
    stats.completed(Op(type="info", process="nemesis", f="stop-kill", value={}, time=2))
    assert view.faults_text(now=101.0) == "partition majorities-ring 1 s"
    assert "{" not in view.line()


@pytest.mark.timeout(120)
def test_plugin_text_is_shown_as_written_never_as_markup() -> None:
    """A leader name (from the DB plug-in) that looks like rich markup is printed verbatim, in the
    plain status lines of --no-live and in the live table."""

    class OddDB(_DB):
        def primaries(self, control: Any) -> list[str]:
            self.asked.set()
            return ["[/n2] [bold]"]

    out = io.StringIO()
    console = Console(file=out, force_terminal=False, width=200)
    test = _Test()
    test.db = OddDB()
    view = LiveView(console, test, _Interp(), 60.0, every_s=0.05)
    view.start()
    try:
        test.db.asked.wait()
        for _ in range(500):  # up to 10 s: a status line names the leader soon after the poll
            if "leader=[/n2]" in out.getvalue():
                break
            threading.Event().wait(0.02)
    finally:
        view.stop()
    assert "leader=[/n2] [bold]" in out.getvalue(), out.getvalue()
    table = io.StringIO()
    Console(file=table, force_terminal=False, width=200).print(view.render())
    assert "[/n2] [bold]" in table.getvalue(), table.getvalue()
