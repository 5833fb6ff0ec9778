"""The leadership observer: who leads, at which term, while the faults run.

A thread independent of the nemesis polls every node's own view of leadership through the DB
(DLedger's METADATA request, answered by each node for itself: ``leader_id`` and ``term``, see
``DLedgerServer.handleMetadata``) every ``interval_s`` seconds (default 0.3) and appends one JSON
line per poll to ``leadership.jsonl`` in the run directory, written and flushed as observed. It is
not part of ``history.jsonl``: the history holds client and nemesis ops only, which every checker,
the store's validator and the invoke/complete pairing rely on.

A line (a *sample*)::

    {"time": ns since the test start (the history's clock),
     "nodes": {"n1": {"leader": "n3", "term": 4}, "n2": {"error": "timeout"}, ...},
     "primaries": ["n3"],      # nodes that claim leadership for themselves
     "leader": "n3" | null,    # the primary with the highest term (null: no node claims it)
     "term": 4 | null}         # the highest term any node answered with

:func:`chaos.history.faults.leadership_windows` reads it per fault window. Polling a node costs one
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

log = logging.getLogger("chaos.observer")

LEADERSHIP_FILE = "leadership.jsonl"


def summarize(nodes: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """From each node's answer (``{"leader", "term"}`` or ``{"error"}``) the sample's ``primaries``,
    ``leader`` (the claiming node with the highest term) and ``term`` (highest answered)."""
    primaries = sorted(n for n, a in nodes.items() if a.get("leader") == n)
    terms = [a["term"] for a in nodes.values() if isinstance(a.get("term"), int)]
    leader = max(primaries, key=lambda n: (nodes[n].get("term") or 0, n)) if primaries else None
    return {"primaries": primaries, "leader": leader, "term": max(terms) if terms else None}


class LeadershipObserver:
    """Polls leadership on a background thread and writes ``leadership.jsonl``.

    Args:
        db: the DB; DLedger (anything with ``port``, ``group`` and ``client_peers``) is asked per node
            with a client bound to that node; another DB must offer ``primaries(control)``, which
            gives ``primaries``/``leader`` only.
        nodes: the test's nodes (``chaos.cluster.node.Node``); control: their ``Control``.
        path: the file to write (``<run dir>/leadership.jsonl``).
        clock: ns since the test start (the interpreter's ``Clock``), so samples line up with ops.
        interval_s: seconds between polls; timeout_s: per-node answer bound (s).
    Use :meth:`start` and :meth:`stop` (idempotent); ``samples`` counts lines written.
    """

    def __init__(
        self,
        db: Any,
        nodes: Sequence[Any],
        control: Any,
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
        self._clients: dict[str, Any] = {}
        self._pool: ThreadPoolExecutor | None = None

    # -- polling -----------------------------------------------------------------------------------

    def _client(self, node: Any) -> Any:
        c = self._clients.get(node.name)
        if c is None:
            from dledger.client import DLedgerClient

            c = DLedgerClient(
                peers=f"{node.name}-{node.host}:{self.db.port}",
                timeout=self.timeout_s,
                group=self.db.group,
                prefer=node.name,
                sticky=True,
            )
            self._clients[node.name] = c
        return c

    def _ask(self, node: Any) -> dict[str, Any]:
        try:
            r = self._client(node).metadata()
        except Exception as e:  # a poll never stops the observer
            self._drop(node.name)
            return {"error": f"{type(e).__name__}: {e}"}
        if r.outcome != "ok":
            self._drop(node.name)
            return {"error": r.error or f"code {r.code}"}
        return {"leader": r.leader_id, "term": r.term}

    def _drop(self, name: str) -> None:
        c = self._clients.pop(name, None)
        if c is not None:
            try:
                c.close()
            except Exception:
                pass

    def poll(self) -> dict[str, Any]:
        """One sample (see the module docstring), not written."""
        t = self.clock()
        if hasattr(self.db, "client_peers") and hasattr(self.db, "port"):
            if self._pool is None:
                self._pool = ThreadPoolExecutor(max_workers=max(1, len(self.nodes)))
            futs = {n.name: self._pool.submit(self._ask, n) for n in self.nodes}
            nodes = {name: f.result() for name, f in futs.items()}
            return {"time": t, "nodes": nodes, **summarize(nodes)}
        primaries = sorted(self.db.primaries(self.control))
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
        for name in list(self._clients):
            self._drop(name)


def read_leadership(path: Path | str) -> list[dict[str, Any]]:
    """The samples of a ``leadership.jsonl`` (``[]`` when the file is missing). A torn last line (a
    killed run) is dropped; a bad line in the middle raises ValueError naming the file and line."""
    p = Path(path)
    if not p.is_file():
        return []
    lines = p.read_bytes().split(b"\n")
    out: list[dict[str, Any]] = []
    last = max((i for i, ln in enumerate(lines) if ln.strip()), default=-1)
    for i, ln in enumerate(lines):
        if not ln.strip():
            continue
        try:
            sample = orjson.loads(ln)
            if not isinstance(sample, dict) or not isinstance(sample.get("time"), int):
                raise ValueError("expected an object with an integer time")
        except (orjson.JSONDecodeError, ValueError) as e:
            if i == last:
                break
            raise ValueError(f"{p}:{i + 1}: bad leadership sample: {e}") from None
        out.append(sample)
    return out
