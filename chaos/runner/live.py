"""The live view of a running test (rich): elapsed / limit, ops ok / fail / info, ops/s, current faults,
the leader. Refreshed a few times a second from a background thread; the leader is polled every 2 s
through ``db.primaries``. On a console that is not a terminal (``chaos run --no-live`` makes one with
``force_terminal=False``) it prints one plain status line every ``every_s`` s (default 10) instead.
"""

from __future__ import annotations

import threading
import time
from typing import Any

from rich.console import Console
from rich.live import Live
from rich.table import Table


class LiveView:
    """``start()`` / ``stop()`` around the generator phases; ``phase`` names the current one."""

    def __init__(
        self, console: Console, test: Any, interp: Any, time_limit: float, every_s: float = 10.0
    ) -> None:
        self.console = console
        self.every_s = every_s
        self.test = test
        self.interp = interp
        self.time_limit = time_limit
        self.phase = "setup"
        self.leader = "?"
        self.t0 = time.monotonic()
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []

    def render(self) -> Table:
        s = self.interp.stats
        el = time.monotonic() - self.t0
        t = Table.grid(padding=(0, 2))
        t.add_column(style="bold")
        t.add_column()
        t.add_row("test", f"{self.test.name}  [dim]({self.phase})[/dim]")
        t.add_row("elapsed", f"{el:5.1f} s / {self.time_limit:g} s")
        t.add_row(
            "ops",
            f"[green]ok {s.ok}[/green]  [red]fail {s.fail}[/red]  [yellow]info {s.info}[/yellow]  "
            f"({s.rate():.0f} ops/s)",
        )
        faults = ", ".join(f"{k}: {_short(v)}" for k, v in s.faults.items()) or "none"
        t.add_row("faults", faults)
        t.add_row("leader", self.leader)
        return t

    def line(self) -> str:
        s = self.interp.stats
        el = time.monotonic() - self.t0
        faults = ",".join(s.faults) or "none"
        return (
            f"{el:5.1f}/{self.time_limit:g}s {self.phase} ok={s.ok} fail={s.fail} info={s.info} "
            f"{s.rate():.0f} ops/s faults={faults} leader={self.leader}"
        )

    def _poll_leader(self) -> None:
        if not callable(getattr(self.test.db, "primaries", None)):
            self.leader = "n/a (the DB has no primary capability)"
            return
        while not self._stop.is_set():
            try:
                p = self.test.db.primaries(self.test.control)
                self.leader = ", ".join(p) if p else "none"
            except Exception as e:
                self.leader = f"? ({type(e).__name__})"
            self._stop.wait(2.0)

    def _refresh(self) -> None:
        if self.console.is_terminal:
            with Live(self.render(), console=self.console, refresh_per_second=4, transient=True) as live:
                while not self._stop.wait(0.25):
                    live.update(self.render())
        else:
            while not self._stop.wait(self.every_s):
                self.console.print(self.line(), highlight=False)

    def start(self) -> None:
        self.t0 = time.monotonic()
        for fn in (self._poll_leader, self._refresh):
            th = threading.Thread(target=fn, daemon=True, name=f"chaos-live-{fn.__name__}")
            th.start()
            self._threads.append(th)

    def stop(self) -> None:
        self._stop.set()
        for th in self._threads:
            th.join(timeout=3.0)


def _short(v: Any) -> str:
    s = str(v)
    return s if len(s) <= 60 else s[:57] + "..."
