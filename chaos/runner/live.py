"""The live view of a running test (rich): elapsed / limit, ops ok / fail / info, ops/s, current faults,
the leader. Refreshed a few times a second from a background thread; the leader is polled every 2 s
through ``db.primaries``. On a console that is not a terminal (``chaos run --no-live`` makes one with
``force_terminal=False``) it prints one plain status line every ``every_s`` s (default 10) instead.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Mapping, Sequence
from typing import Any

from rich.console import Console
from rich.live import Live
from rich.markup import escape
from rich.table import Table

from chaos.control.test import Test
from chaos.history.analysis import fault_name, fault_nodes


class LiveView:
    """``start()`` / ``stop()`` around the generator phases; ``phase`` names the current one."""

    def __init__(
        self, console: Console, test: Test, interp: Any, time_limit: float, every_s: float = 10.0
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
        t.add_row("test", f"{escape(str(self.test.name))}  [dim]({self.phase})[/dim]")
        t.add_row("elapsed", f"{el:5.1f} s / {self.time_limit:g} s")
        t.add_row("ops", f"{ops_text(s, markup=True)}  ({s.rate():.0f} ops/s)")
        # the fault phrases and the leader come from plug-ins: text, never markup
        t.add_row("faults", escape(self.faults_text()))
        t.add_row("leader", escape(self.leader))
        return t

    def line(self) -> str:
        s = self.interp.stats
        el = time.monotonic() - self.t0
        faults = self.faults_text()
        return (
            f"{el:5.1f}/{self.time_limit:g}s {self.phase} {ops_text(s)} "
            f"{s.rate():.0f} ops/s faults: {faults} leader={self.leader}"
        )

    def faults_text(self, now: float | None = None) -> str:
        """One short phrase per fault in force with its age, e.g. ``kill n5 12 s · partition
        majorities-ring 4 s`` (``none`` without faults); the age counts from the completion of the
        fault's start op (:attr:`chaos.control.interpreter.Stats.fault_since`)."""
        now = time.monotonic() if now is None else now
        stats = self.interp.stats
        faults = dict(stats.faults)  # copies: the scheduler thread writes them
        started = dict(stats.fault_since)
        names = getattr(getattr(self.test, "nemesis", None), "names", None) or {}  # the faults as typed
        return (
            " · ".join(
                f"{fault_phrase(k, v, names)} {now - started.get(k, now):.0f} s" for k, v in faults.items()
            )
            or "none"
        )

    def _poll_leader(self) -> None:
        ask = getattr(self.test.db, "primaries", None)
        if not callable(ask):
            self.leader = "n/a (the DB has no primary capability)"
            return
        while not self._stop.is_set():
            try:
                p = ask(self.test.control)
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
                self.console.print(self.line(), highlight=False, markup=False)

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


def ops_text(stats: Any, markup: bool = False) -> str:
    """``ok 10  fail 5 (no match 3, unavailable 2)  info 1`` from the interpreter's counters: a
    fail is either an answered no (a cas whose compare did not match) or the DB not serving, and
    only the second is an outage (:func:`chaos.history.analysis.fail_class`)."""
    nm = int(getattr(stats, "fail_no_match", 0) or 0)
    other = dict(getattr(stats, "fail_other", None) or {})
    fail = f"fail {stats.fail}"
    if stats.fail:
        rest = "".join(f", {k} {n}" for k, n in sorted(other.items()) if n)
        fail += f" (no match {nm}{rest}, unavailable {stats.fail - nm - sum(other.values())})"
    parts = [("green", f"ok {stats.ok}"), ("red", fail), ("yellow", f"info {stats.info}")]
    return "  ".join(f"[{c}]{t}[/{c}]" if markup else t for c, t in parts)


def fault_phrase(kind: str, value: object, names: Mapping[str, Sequence[str]] | None = None) -> str:
    """``kill n5``, ``partition-ring majorities-ring``, ``lose-unfsynced n2,n3``: the fault as the
    user typed it (``names``: the nemesis's ``names``, :func:`chaos.history.analysis.fault_name`;
    else the op kind) and what it acts on, from its start op's completion value (its shape or
    spec, else its nodes, as :func:`chaos.history.analysis.fault_nodes` reads them), at most 40
    characters."""

    what = ""
    if isinstance(value, dict):
        shape = value.get("shape") or value.get("spec")
        nodes = fault_nodes(value)
        if isinstance(shape, str) and kind == "partition":
            what = shape
        elif nodes:
            what = ",".join(nodes)
        elif isinstance(shape, str):
            what = shape
        elif isinstance(value.get("targets"), str):
            what = value["targets"]
    elif isinstance(value, str):
        what = value
    elif isinstance(value, list) and all(isinstance(x, str) for x in value):
        what = ",".join(value)
    text = f"{fault_name(kind, names or {}, value)} {what}".strip()
    return text if len(text) <= 40 else text[:39] + "…"
