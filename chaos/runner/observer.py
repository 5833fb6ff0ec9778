"""The leadership observer: who leads, at which term, while the faults run.

A thread independent of the nemesis polls every node's own view of leadership through the DB's
``leadership`` capability (:class:`chaos.control.db.Leadership`: each node answers for itself with
its leader and term) every ``interval_s`` seconds (default 0.3) and appends one JSON
line per poll to ``leadership.jsonl`` in the run directory, written and flushed as observed. It is
not part of ``history.jsonl``: the history holds client and nemesis ops only, which every checker,
the store's validator and the invoke/complete pairing rely on.

A line (a *sample*)::

    {"time": ns since the test start (the history's clock),
     "nodes": {"n1": {"leader": "n3", "term": 4}, "n2": {"error": "timeout"}, ...},
     "primaries": ["n3"],      # nodes that claim leadership for themselves
     "leader": "n3" | null,    # the primary with the highest term (null: no node claims it)
     "term": 4 | null}         # the highest term any node answered with

:func:`chaos.history.checkers.faults.leadership_windows` reads it per fault window. Polling a node costs one
TCP request from the control node; a paused or unreachable node answers ``{"error": ...}`` after
``timeout_s``. The observer never changes a verdict.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import orjson

from chaos.control.node import Node
from chaos.control.ssh import Control
from chaos.history.leadership import summarize

log = logging.getLogger("chaos.observer")


class LeadershipObserver:
    """Polls leadership on a background thread and writes ``leadership.jsonl``.

    Args:
        db: the DB; with the ``leadership`` capability each node is asked for its own view
            (``db.leadership(node, timeout_s)``); otherwise the DB must offer ``primaries(control)``
            (the ``primary`` capability), which gives ``primaries``/``leader`` only.
        nodes: the test's nodes (``chaos.control.node.Node``); control: their ``Control``.
        path: the file to write (``<run dir>/leadership.jsonl``).
        clock: ns since the test start (the interpreter's ``Clock``), so samples line up with ops.
        interval_s: seconds between polls; timeout_s: per-node answer bound (s).
    Use :meth:`start` and :meth:`stop` (idempotent); ``samples`` counts lines written.
    """

    def __init__(
        self,
        db: object,
        nodes: Sequence[Any],
        control: Control,
        path: Path | str,
        clock: Callable[[], int],
        *,
        interval_s: float = 0.3,
        timeout_s: float = 0.25,
    ) -> None:
        self.db = db
        self.nodes = list(nodes)
        self.control = control
        self.path = Path(path)
        self.clock = clock
        self.interval_s = interval_s
        self.timeout_s = timeout_s
        self.samples = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._pool: ThreadPoolExecutor | None = None

    # -- polling -----------------------------------------------------------------------------------

    def _ask(self, node: Node) -> dict[str, object]:
        try:
            ask = getattr(self.db, "leadership", None)  # offered: poll checks it
            if not callable(ask):
                return {"error": "the DB has no leadership capability"}
            answer = ask(node, self.timeout_s)
        except Exception as e:  # the contract says it does not raise; a poll never stops the observer
            return {"error": f"{type(e).__name__}: {e}"}
        return dict(answer) if isinstance(answer, dict) else {"error": f"bad answer {answer!r}"}

    def poll(self) -> dict[str, object]:
        """One sample (see the module docstring), not written."""
        t = self.clock()
        if callable(getattr(self.db, "leadership", None)):
            if self._pool is None:
                self._pool = ThreadPoolExecutor(max_workers=max(1, len(self.nodes)))
            futs = {n.name: self._pool.submit(self._ask, n) for n in self.nodes}
            nodes = {name: f.result() for name, f in futs.items()}
            return {"time": t, "nodes": nodes, **summarize(nodes)}
        ask = getattr(self.db, "primaries", None)  # the runner observes a DB with one
        primaries = sorted(ask(self.control)) if callable(ask) else []
        return {
            "time": t,
            "nodes": {},
            "primaries": primaries,
            "leader": (primaries or [None])[0],
            "term": None,
        }

    def _run(self) -> None:
        with open(self.path, "ab") as f:
            while not self._stop.is_set():
                try:
                    sample = self.poll()
                except Exception as e:
                    log.warning("leadership poll failed: %s", e)
                else:
                    f.write(orjson.dumps(sample) + b"\n")
                    f.flush()
                    self.samples += 1
                self._stop.wait(self.interval_s)

    def start(self) -> None:
        if self._thread is not None:
            return
        self._thread = threading.Thread(target=self._run, name="leadership-observer", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        if self._pool is not None:
            self._pool.shutdown(wait=False)
            self._pool = None
        close = getattr(self.db, "close_leadership", None)
        if callable(close):
            try:
                close()
            except Exception as e:
                log.warning("closing the leadership connections failed: %s", e)
