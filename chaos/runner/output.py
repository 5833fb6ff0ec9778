"""What a run says and writes as it goes: status lines that keep a long step from being silent
(:func:`progress`), the run's rich console (:func:`make_console`), ``chaos.log`` (:class:`_Logs`) and
the history writer that logs each op as a ``history.txt`` line (:class:`_LoggedHistory`, as Jepsen
logs ops in ``jepsen.log``)."""

from __future__ import annotations

import contextlib
import logging
import sys
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import IO

from rich.console import Console

from chaos.history.op import Op
from chaos.history.store import HistoryWriter
from chaos.history.text import op_line

PROGRESS_S = 15.0
"""How often a long step (package installs, the DB's setup, waits) says it is still running."""


@contextlib.contextmanager
def progress(say: Callable[[str], None], what: str, every: float = PROGRESS_S) -> Iterator[None]:
    """While the block runs, ``say("still <what> (<N> s)")`` every ``every`` s, so a step that
    takes minutes (an OS package install) is never silent; nothing for a shorter step."""
    done = threading.Event()
    t0 = time.monotonic()

    def beat() -> None:
        while not done.wait(every):
            try:
                say(f"still {what} ({time.monotonic() - t0:.0f} s)")
            except Exception:  # a status line must never break the step it reports on
                return

    t = threading.Thread(target=beat, name="chaos-progress", daemon=True)
    t.start()
    try:
        yield
    finally:
        done.set()
        t.join(timeout=1.0)


class _Logs:
    """Attaches chaos.log to the tool's loggers, and to those the DB names in its optional
    ``loggers`` attribute (e.g. its client library's), for the duration of a run."""

    def __init__(self, path: str | Path, db_loggers: Iterable[object] = ()) -> None:
        self.handler = logging.FileHandler(path)
        self.handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
        info = [logging.getLogger("chaos"), *(logging.getLogger(str(n)) for n in db_loggers or ())]
        self.loggers = [*info, logging.getLogger("paramiko")]
        for lg in info:
            lg.addHandler(self.handler)
            if lg.level == logging.NOTSET or lg.level > logging.INFO:
                lg.setLevel(logging.INFO)
        self.loggers[-1].addHandler(self.handler)

    def close(self) -> None:
        for lg in self.loggers:
            lg.removeHandler(self.handler)
        self.handler.close()


class _LoggedHistory:
    """The run's history writer, each op also logged to chaos.log through the ``chaos.ops`` logger
    as a ``history.txt`` line (:func:`chaos.history.text.op_line`), as Jepsen logs ops in
    jepsen.log."""

    def __init__(self, writer: HistoryWriter) -> None:
        self.writer = writer
        self.log = logging.getLogger("chaos.ops")

    def write(self, op: Op) -> Op:
        out = self.writer.write(op)
        if self.log.isEnabledFor(logging.INFO):
            self.log.info("%s", op_line(op))
        return out

    def close(self) -> None:
        self.writer.close()


def make_console(file: IO[str] | None = None, force_terminal: bool | None = None) -> Console:
    """The run's rich Console on ``file`` (default stdout; ``force_terminal`` as rich's). On a
    terminal: its width, wrapped. Not a terminal (a pipe, a file, CI): lines are never wrapped or
    cut with "…" (soft wrap, and tables laid out as wide as they need), so paths and quoted log
    lines survive for grep and copy-paste."""
    out = file if file is not None else sys.stdout
    isatty = getattr(out, "isatty", None)
    if callable(isatty) and isatty():
        return Console(file=file, force_terminal=force_terminal)
    return Console(file=file, force_terminal=force_terminal, width=PIPE_WIDTH, soft_wrap=True)


PIPE_WIDTH = 4096  # columns for a non-terminal: wide enough that no table folds a path
