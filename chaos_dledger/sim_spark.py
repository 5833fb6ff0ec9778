"""``chaos sim --master URL``: a simulation campaign's seeds as Spark tasks (issue 27).

The driver (the control machine) draws every seed's options exactly as the local campaign does and
hands consecutive chunks of seeds to Spark, one single-partition job per chunk, from one thread
per executor core (``defaultParallelism``), so as many chunks run at once as Spark has cores and a
core that finishes early takes the next chunk. In the Python worker a task runs its seeds one by
one through :func:`chaos_dledger.sim._run_one`, the code the local ``multiprocessing`` pool runs,
and returns one small row per seed: ``(seed, valid, why, coverage stats)``. Histories stay on the
executor (in a temporary directory, removed); a failing seed replays on the control machine with
``chaos sim --seed N``, since one seed decides the whole run. With ``--coverage`` a task runs its
seeds under coverage.py and ends with one more row, its coverage data serialized, which the driver
writes into the campaign directory and combines at the end (:mod:`chaos.history.codecov`).

Chunk sizes: seeds take 0.05-0.3 s each, while a Spark job costs tens of milliseconds of
scheduling and the first task of a Python worker pays for its imports (workers are reused, so
only once). Chunks therefore start small (1, 4, 16, ... seeds per core, so the first verdicts and
a failure among the first seeds come back within seconds) and grow to at most :data:`MAX_CHUNK`
seeds; towards the end they shrink again (guided self-scheduling, Polychronopoulos & Kuck 1987:
a share of what is left per core, at least :data:`MIN_TAIL`), so the cores finish together.

Results come back in seed order, as ``multiprocessing.Pool.imap`` gives them to the local
campaign, so the progress bar, the lines printed for failing seeds, ``--stop-on-failure`` (stop at
the first seed in seed order that is not valid; the jobs still running are cancelled) and the
summary are the local run's, seed by seed.

The executors import ``chaos``, ``chaos_dledger`` and ``dledger`` from the directories the driver
imports them from, when those exist there (always with a ``local`` master, or on a shared file
system; the worker's ``PYTHONPATH`` gets them first), else from their own installation: a mutant
copy of ``dledger`` first on the driver's ``PYTHONPATH`` is what the executors run too.
"""

from __future__ import annotations

import contextlib
import functools
import importlib.util
import os
import queue
import re
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import click

from chaos.api import codecov, spark_session

MAX_CHUNK = 100  # seeds per task at most: several seconds of work, against 0.05-0.3 s per job
JOIN_S = 30.0  # seconds to wait for a cancelled job's thread on leaving
MIN_TAIL = 4  # seeds per task at least, once past the first: a job costs as much as a seed or two
PACKAGES = ("chaos", "chaos_dledger", "dledger")

Row = tuple[int, Any, str, dict[str, int]]
# one seed's run, ``(SimOptions,) -> Row``: :func:`chaos_dledger.sim._run_one`, handed in by the
# simulator (this module never imports it back; Spark pickles it by reference, so a worker imports
# chaos_dledger.sim, which loads no server code until a seed runs)
RunOne = Callable[[tuple[Any]], Row]


# the first field of the row a measuring task ends with: its coverage data, not a seed's verdict
COVERAGE_ROW = "coverage"


def run_chunk(todo: Iterator[tuple[Any]], run: RunOne, measure: codecov.Spec | None = None) -> Iterator[Any]:
    """The executor's task: each ``(SimOptions,)`` of the partition through ``run``, the local
    campaign's :func:`chaos_dledger.sim._run_one`; one ``(seed, valid, why, stats)`` row per seed. With
    ``measure`` (a :class:`chaos.history.codecov.Spec`) the seeds run under coverage.py, and the
    task ends with the row ``(COVERAGE_ROW, data)``: the chunk's coverage data, serialized, for the
    driver to combine (:func:`chaos.history.codecov.chunk_data`; the executor may not share the
    driver's file system)."""
    if measure is None:
        for args in todo:
            yield run(args)
        return
    with codecov.measured(measure) as cov:  # the server's code is imported by the first seed run
        rows = [run(args) for args in todo]
    yield from rows
    yield COVERAGE_ROW, codecov.chunk_data(cov)


def chunk_sizes(total: int, lanes: int, max_chunk: int = MAX_CHUNK) -> list[int]:
    """The sizes of the consecutive chunks ``total`` seeds are cut into for ``lanes`` cores: each
    core's k-th chunk is ``4**k`` seeds (1, 4, 16, 64, ...), at most ``max_chunk`` and at most
    ``ceil(left / (2 * lanes))`` but at least :data:`MIN_TAIL` (or what is left); they sum to
    ``total``."""
    sizes: list[int] = []
    left, k = total, 0
    while left > 0:
        for _ in range(lanes):
            if left <= 0:
                break
            guided = max(-(-left // (2 * lanes)), min(MIN_TAIL, left))
            size = min(4**k, max_chunk, guided)
            sizes.append(size)
            left -= size
        k += 1
    return sizes


def code_roots() -> list[str]:
    """The directories the driver imports :data:`PACKAGES` from, in ``sys.path`` order (so each
    package resolves on a worker to the copy it resolves to here); absolute paths."""
    entries = [os.path.abspath(p or ".") for p in sys.path]
    roots: list[str] = []
    for name in PACKAGES:
        spec = importlib.util.find_spec(name)
        if spec is None or not spec.submodule_search_locations:
            continue
        root = str(Path(next(iter(spec.submodule_search_locations))).resolve().parent)
        if root not in roots:
            roots.append(root)

    def rank(root: str) -> int:
        for i, entry in enumerate(entries):
            if os.path.realpath(entry) == root:
                return i
        return len(entries)

    return sorted(roots, key=rank)


# a Python exception's last line, as a worker's traceback ends (Java's names are dotted)
_PY_ERROR = re.compile(r"^([A-Za-z_]\w*(?:Error|Exception|Exit|Interrupt): .*)$", re.M)


def failure(e: BaseException) -> str:
    """One line for a failed job: the Python worker's exception when the error carries its
    traceback (e.g. ``ModuleNotFoundError: No module named 'chaos_dledger'``), else the error's
    first line."""
    text = str(e).strip()
    found = _PY_ERROR.findall(text)
    if found:
        return str(found[-1])
    return text.splitlines()[0] if text else type(e).__name__


class SparkCampaign:
    """The chunks of one campaign on a SparkContext: :meth:`results` yields the rows in seed order
    while one thread per core keeps a job running; :meth:`close` cancels what still runs."""

    def __init__(
        self, sc: Any, todo: list[tuple[Any]], run: RunOne, measure: codecov.Spec | None = None
    ) -> None:
        self.sc = sc
        self.todo = todo
        self.run = run
        self.measure = measure
        self.lanes = max(1, int(sc.defaultParallelism))
        starts, at = [], 0
        for size in chunk_sizes(len(todo), self.lanes):
            starts.append((at, size))
            at += size
        self.chunks = starts
        self._next = 0
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._done: queue.Queue[tuple[int, list[Row] | BaseException]] = queue.Queue()
        self._threads = [
            threading.Thread(target=self._lane, name=f"chaos-sim-spark-{i}", daemon=True)
            for i in range(min(self.lanes, len(self.chunks)))
        ]
        for t in self._threads:
            t.start()

    def _take(self) -> tuple[int, int] | None:
        with self._lock:
            if self._stop.is_set() or self._next >= len(self.chunks):
                return None
            self._next += 1
            return self.chunks[self._next - 1]

    def _lane(self) -> None:
        while (chunk := self._take()) is not None:
            start, size = chunk
            try:
                part = self.todo[start : start + size]
                task = functools.partial(run_chunk, run=self.run, measure=self.measure)
                rows = self.sc.parallelize(part, 1).mapPartitions(task).collect()
                for row in rows:
                    if row[0] == COVERAGE_ROW and self.measure is not None:
                        codecov.add_data(self.measure, row[1], f"spark.{start}")
                self._done.put((start, [r for r in rows if r[0] != COVERAGE_ROW]))
            except BaseException as e:  # handed to the driver's loop, which raises it
                self._done.put((start, e))
                return

    def results(self) -> Iterator[Row]:
        """The rows of every seed of ``todo``, in its order, as their chunks complete. Raises
        click.ClickException naming the chunk's first seed and the worker's error when a Spark job
        fails (``chaos`` prints it as one line, exit 254: not a seed's verdict)."""
        waiting: dict[int, list[Row]] = {}
        at = 0
        while at < len(self.todo):
            start, got = self._done.get()
            if isinstance(got, BaseException):
                first = self.todo[start][0].seed
                raise click.ClickException(
                    f"a Spark task failed (seeds from {first}): {failure(got)}"
                ) from got
            waiting[start] = got
            while at in waiting:
                rows = waiting.pop(at)
                at += len(rows)
                yield from rows

    def close(self) -> None:
        """Hand out no more chunks, cancel the jobs still running and wait for the threads."""
        self._stop.set()
        if any(t.is_alive() for t in self._threads):
            with contextlib.suppress(Exception):
                self.sc.cancelAllJobs()
        for t in self._threads:
            t.join(timeout=JOIN_S)  # daemon threads: a job Spark never ends does not hold the exit


@contextlib.contextmanager
def spark_imap(
    todo: list[tuple[Any]], master: str, measure: codecov.Spec | None = None, *, run: RunOne
) -> Iterator[Iterator[Row]]:
    """``(seed, valid, why, stats)`` for each ``(SimOptions,)`` of ``todo``, in its order, run on
    Spark at ``master`` by ``run`` (:func:`chaos_dledger.sim._run_one`): the same rows as
    ``Pool.imap(run, todo)``. With ``measure`` (a
    :class:`chaos.history.codecov.Spec`) each task measures the server code's coverage and the
    driver writes each task's data into ``measure.data_dir`` as it arrives. Uses the active
    SparkSession if there is one, else starts one (:func:`chaos.history.spark.spark_session`) and
    stops it on leaving. Leaving early cancels the jobs still running.

    Raises click.ClickException naming the master when Spark cannot start, or the seeds of a failed
    task (one line and exit 254 through ``chaos.cli.main``, as ``chaos analyze``'s).
    """
    spark, own = _active_session(), False
    if spark is None:
        spark, own = _start(master), True
    sc = spark.sparkContext
    before = sc.environment.get("PYTHONPATH")
    sc.environment["PYTHONPATH"] = os.pathsep.join(code_roots() + ([before] if before else []))
    campaign = None
    try:
        campaign = SparkCampaign(sc, todo, run, measure)
        yield campaign.results()
    finally:
        if campaign is not None:
            campaign.close()
        if before is None:
            sc.environment.pop("PYTHONPATH", None)
        else:
            sc.environment["PYTHONPATH"] = before
        if own:
            spark.stop()


# The driver's JVM only schedules here (the seeds run in Python workers): C1 alone compiles what it
# runs, and a start costs about 7 s of JVM CPU against 12 s with C2 as well (a third of a 2-core
# machine's campaign start); the tests' conftest starts Spark the same way.
_SUBMIT_ARGS = "--driver-java-options -XX:TieredStopAtLevel=1 pyspark-shell"


def _start(master: str) -> Any:
    """A new SparkSession at ``master`` (:func:`chaos.history.spark.spark_session`), its driver JVM
    on the C1 compiler unless the caller set ``PYSPARK_SUBMIT_ARGS``."""
    given = os.environ.get("PYSPARK_SUBMIT_ARGS")
    os.environ.setdefault("PYSPARK_SUBMIT_ARGS", _SUBMIT_ARGS)
    try:
        return spark_session(master, app="chaos-sim")
    except RuntimeError as e:
        raise click.ClickException(str(e)) from e
    finally:
        if given is None:
            os.environ.pop("PYSPARK_SUBMIT_ARGS", None)


def _active_session() -> Any:
    try:
        from pyspark.sql import SparkSession
    except ImportError:  # pragma: no cover - depends on the install
        return None
    return SparkSession.getActiveSession()
