"""The live view's plain form (``chaos run --no-live``): one status line per interval on a console
that is not a terminal; real threads, a real rich Console writing to a buffer."""

from __future__ import annotations

import io
import threading
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
    assert all("/60s main ok=7 fail=1 info=2" in line for line in lines), lines
    assert any("leader=n2" in line for line in lines), lines
    assert "\x1b[" not in out.getvalue()  # plain text, no terminal control sequences
