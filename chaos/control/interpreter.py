"""The generator interpreter: runs a generator against real clients and a nemesis with worker threads
(Jepsen's jepsen.generator.interpreter).

One worker thread per client thread (``concurrency`` of them) plus one for the nemesis. Client thread
``i`` talks to ``nodes[i % len(nodes)]``. The scheduler (the calling thread) asks the generator for
the next op, waits until its time, records the invocation, hands it to the thread's worker, and records
completions as they arrive; every op goes through a :class:`chaos.history.store.HistoryWriter` when it
happens, so a killed control node leaves a readable history. All times are ns since the test start
(``clock()``), and the history's times never go backwards.

Every step of the scheduler (recording an op, updating or asking the generator) runs under one lock,
so the generator sees a single serial order of events as in Jepsen. A worker that completes an op
while the scheduler is idle takes that lock itself and does the scheduler's step on the spot:
it records its completion and dispatches the ops now due, usually its own next op, which it then
runs without any thread switch. The scheduler thread wakes only for what a worker cannot do: waiting
for a future op's time, a pending generator, the end of the run.

Process model (Jepsen): an ``info`` completion (indeterminate) retires the process; the thread goes
on as process ``p + concurrency`` with a freshly opened client. An exception from a client becomes an
``info`` completion (:func:`chaos.control.client.crashed`): ``error="indeterminate: <exception>"``
for an error the DB declares, else a client error (``client_error`` names the exception and the
plug-in's file:line). For idempotent fs (``read`` by default) ``info`` becomes ``fail``: a read
that timed out changed nothing; a client error stays ``info`` (nothing was learnt of the DB).
Opening a client that fails with a declared error makes the op ``fail`` with
``error="no-client: ..."``, with any other exception a client error. ``sleep`` ops hold a thread and ``log`` ops are logged;
neither is recorded.

Waiting: completions reach the scheduler through a :class:`_Mailbox` (a deque under a
``threading.Condition``), never ``queue.SimpleQueue.get(timeout=...)``: in CPython 3.11 that call can
recompute a negative remaining timeout after taking its internal lock and then block forever, which
hung a run whose workers were all idle. Every wait of the scheduler is bounded (at most
:data:`_TICK_S`), so it can always look at the watchdog and at :meth:`Interpreter.stop`.

Watchdog: an op in flight longer than its bound (client ops ``stall_timeout`` s, nemesis ops
``nemesis_stall_timeout`` s, sleeps their length plus ``stall_timeout``) means the workers stopped
making progress; :meth:`Interpreter.run` then raises :class:`Stalled` (the runner turns that into a
crash, exit 255, after healing the nodes and closing the history). The stuck op stays open in the
history, as any op abandoned by a crashed run.
"""

from __future__ import annotations

import enum
import logging
import math
import queue
import random
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Final, Generic, Literal, Protocol, TypeVar, cast

from chaos.control.client import crashed, is_declared
from chaos.control.generator import (
    NEMESIS_THREAD,
    PENDING,
    Context,
    Generator,
    GenLike,
    OpAnswer,
    OpDict,
    Process,
    Thread,
    to_gen,
)
from chaos.history.analysis import NO_MATCH, UNAVAILABLE, fail_class
from chaos.history.op import FAIL, INFO, INVOKE, NEMESIS, OK, Op

if TYPE_CHECKING:
    from chaos.control.test import Test

log = logging.getLogger("chaos.interpreter")

_POLL_S = 0.005  # how often a pending generator is asked again (time may have moved on)
_TICK_S = 0.25  # the longest the scheduler sleeps without looking at the watchdog and stop()
_SPIN_S = 20e-6  # shorter waits are not slept: the scheduler looks again at once
_WATCH_NS = 1_000_000_000  # how often the scheduler scans the in-flight ops for the watchdog

STALL_MIN_S = 300.0
"""Least bound (s) on a client op in flight before the run counts as stalled. Large because one op
may legitimately make many calls (the log workload's final read fetches every entry)."""
STALL_CLIENT_TIMEOUTS = 100
"""The client-op bound is at least this many client timeouts (``test.db.client_timeout``)."""
NEMESIS_STALL_MIN_S = 900.0
"""Least bound (s) on a nemesis op: faults run remote commands with their own timeouts of up to 300 s."""


class Stalled(RuntimeError):
    """The run stopped making progress: an op stayed in flight past its watchdog bound."""


def stall_bounds(test: object) -> tuple[float, float]:
    """(client, nemesis) watchdog bounds in seconds for ``test``: ``test.opts["stall_timeout"]`` if
    set, else the larger of :data:`STALL_MIN_S` and :data:`STALL_CLIENT_TIMEOUTS` x the DB client's
    timeout; the nemesis bound is at least :data:`NEMESIS_STALL_MIN_S` and 3 x the client bound."""
    opts = getattr(test, "opts", None)
    given = opts.get("stall_timeout") if isinstance(opts, dict) else None
    if given is not None:
        client = float(given)
    else:
        per_call = getattr(getattr(test, "db", None), "client_timeout", None)
        client = STALL_MIN_S
        if isinstance(per_call, (int, float)) and per_call > 0:
            client = max(client, STALL_CLIENT_TIMEOUTS * float(per_call))
    return client, max(NEMESIS_STALL_MIN_S, 3 * client)


class _Signal(enum.Enum):
    """The scheduler's sentinels: a worker's nudge in the mailbox, and :meth:`Interpreter._pump`'s
    answers other than a wait in seconds."""

    NUDGE = "a worker changed the state but dispatched nothing: the scheduler looks again"
    EXIT = "the run is over"
    BUSY = "every thread is busy: wait for a completion"


_NUDGE: Final = _Signal.NUDGE
_EXIT: Final = _Signal.EXIT
_BUSY: Final = _Signal.BUSY

# a worker's completion for the scheduler: (worker, completion or None after a sleep, time in ns)
_Done = tuple["_Worker", Op | None, int]
_Mail = _Done | Literal[_Signal.NUDGE]
# what the scheduler does next: wait at most this many s (None: until a completion), or a signal
_Wait = float | Literal[_Signal.EXIT, _Signal.BUSY] | None


_T = TypeVar("_T")


class _Mailbox(Generic[_T]):
    """Completions for the scheduler: many producers, one consumer; ``get`` waits on a Condition,
    whose timed wait is correct (see the module docstring)."""

    __slots__ = ("_items", "_cv")

    def __init__(self) -> None:
        self._items: deque[_T] = deque()
        self._cv = threading.Condition(threading.Lock())

    def put(self, item: _T) -> None:
        with self._cv:
            self._items.append(item)
            self._cv.notify()

    def empty(self) -> bool:
        return not self._items

    def pop(self) -> _T:
        """The oldest item; only the consumer calls this, and only after ``empty()`` said False."""
        return self._items.popleft()

    def get(self, timeout: float) -> _T | None:
        """The oldest item, waiting at most ``timeout`` s; None when there is none. A timeout under
        :data:`_SPIN_S` does not wait at all: the caller looks again, sooner than a timed sleep
        (which lasts at least the kernel's timer slack, ~50 us) would return."""
        with self._cv:
            if not self._items and timeout >= _SPIN_S:
                self._cv.wait(timeout)
            return self._items.popleft() if self._items else None


class Client(Protocol):
    """A workload client (Jepsen's jepsen.client): ``open`` returns a client bound to one node."""

    def open(self, test: Test | None, node: str) -> Client: ...

    def invoke(self, test: Test | None, op: Op) -> Op: ...

    def close(self, test: Test | None) -> None: ...


class NemesisLike(Protocol):
    """What the nemesis thread calls: :class:`chaos.control.test.Nemesis`'s ``invoke``."""

    def invoke(self, test: Test, op: Op) -> Op: ...


class HistorySink(Protocol):
    """Where recorded ops go (``chaos.history.store.HistoryWriter``)."""

    def write(self, op: Op) -> Op: ...


class Clock:
    """ns since ``start`` (a ``time.monotonic_ns()`` value), monotonic."""

    __slots__ = ("start",)

    def __init__(self, start: int | None = None) -> None:
        self.start = time.monotonic_ns() if start is None else start

    def __call__(self) -> int:
        return time.monotonic_ns() - self.start


_BUCKET_NS = 100_000_000  # rate buckets of 0.1 s
_WINDOW_BUCKETS = 50  # ~5 s


@dataclass
class Stats:
    """Live counters for the live view; written by the scheduler thread only, read by any."""

    ok: int = 0
    fail: int = 0
    fail_no_match: int = 0  # of ``fail``: answered, compare did not match (chaos.history.analysis)
    fail_other: dict[str, int] = field(default_factory=dict)  # aborted / unsupported fails, by class
    info: int = 0
    invoked: int = 0
    faults: dict[str, object] = field(default_factory=dict)  # kind -> value of the open start-<kind>
    # kind -> time.monotonic() when its start-<kind> completed: the live view's fault ages
    fault_since: dict[str, float] = field(default_factory=dict)
    last_nemesis: str | None = None
    # client completions per 0.1 s bucket over the last ~5 s, as [bucket, count]; O(1) per op
    buckets: deque[list[int]] = field(default_factory=deque)
    last_time: int = 0

    def completed(self, op: Op) -> None:
        if op.process == NEMESIS:
            self.last_nemesis = f"{op.f} {op.value!r}"[:120]
            if op.f.startswith("start-"):
                self.faults[op.f[6:]] = op.value
                self.fault_since[op.f[6:]] = time.monotonic()
            elif op.f.startswith("stop-"):
                self.faults.pop(op.f[5:], None)
                self.fault_since.pop(op.f[5:], None)
            return
        typ = op.type
        if typ == OK:
            self.ok += 1
        elif typ == FAIL:
            self.fail += 1
            cls = fail_class(op)
            if cls == NO_MATCH:
                self.fail_no_match += 1
            elif cls is not None and cls != UNAVAILABLE:  # aborted, or unsupported by the client
                self.fail_other[cls] = self.fail_other.get(cls, 0) + 1
        else:
            self.info += 1
        self.last_time = t = op.time
        b = t // _BUCKET_NS
        bs = self.buckets
        if bs and bs[-1][0] == b:
            bs[-1][1] += 1
            return
        bs.append([b, 1])
        while bs[0][0] <= b - _WINDOW_BUCKETS:
            bs.popleft()

    def rate(self) -> float:
        """Client completions per second over the last ~5 s (0.0 before there are two buckets)."""
        bs = list(self.buckets)  # a copy: another thread may be appending
        if len(bs) < 2:
            return 0.0
        span = self.last_time - bs[0][0] * _BUCKET_NS
        if span <= 0:
            return 0.0
        return sum(c for _, c in bs) * 1e9 / span


class _Worker:
    __slots__ = ("thread", "node", "inbox", "client", "t", "run", "since", "bound", "what")

    def __init__(self, thread: Thread, node: str | None, run: int = 0) -> None:
        self.thread = thread
        self.node = node
        self.run = run  # the Interpreter.run() call this worker belongs to
        # only an untimed get() is ever used on the inbox: that one is correct in every CPython
        self.inbox: queue.SimpleQueue[Op | OpDict | None] = queue.SimpleQueue()  # an op, a sleep, or stop
        self.since = 0  # time.monotonic_ns() when the op in flight was handed over
        self.bound = 0  # ns that op may take before the watchdog calls the run stalled
        self.what = ""
        self.client: Client | None = None  # opened on the first op, closed after an info
        self.t: threading.Thread | None = None


def _valid_completion(inv: Op, comp: object) -> str | None:
    if not isinstance(comp, Op):
        return f"client returned {type(comp).__name__}, not an Op"
    if comp.type not in (OK, FAIL, INFO):
        return f"completion type {comp.type!r} is not ok/fail/info"
    if comp.process != inv.process or comp.f != inv.f:
        return f"completion {comp.process}/{comp.f} does not match invocation {inv.process}/{inv.f}"
    return None


class Interpreter:
    """Runs ``generator`` until it is exhausted (or :meth:`stop` is called).

    Args:
        test: the runner's Test object, passed to clients, nemesis and generators.
        client: a :class:`Client` template; ``client.open(test, node)`` per worker (None: no clients).
        nemesis: the nemesis (``invoke(test, op) -> op``), or None.
        nodes: node names; client thread ``i`` talks to ``nodes[i % len(nodes)]``.
        concurrency: number of client threads (>= 1).
        history: a HistoryWriter (``write(op) -> op``) receiving every recorded op.
        clock: ns since test start; default a new :class:`Clock`.
        rng: seeded random.Random for the generator context.
        idempotent: fs whose ``info`` completions are recorded as ``fail``.
        on_op: called with each recorded op, one call at a time, in history order (from the scheduler
            or from the worker thread doing the scheduler's step).
        stall_timeout: s a client op may stay in flight before :meth:`run` raises :class:`Stalled`
            (None: :func:`stall_bounds` of ``test``).
        nemesis_stall_timeout: the same for nemesis ops (None: :func:`stall_bounds` of ``test``).
    Raises:
        ValueError: concurrency < 1, a client without nodes, or a stall timeout that is not a
            positive finite number.
    """

    def __init__(
        self,
        test: Test | None,
        *,
        client: Client | None,
        nemesis: NemesisLike | None,
        nodes: list[str],
        concurrency: int,
        history: HistorySink,
        clock: Callable[[], int] | None = None,
        rng: random.Random | None = None,
        idempotent: Iterable[str] = ("read",),
        on_op: Callable[[Op], None] | None = None,
        stall_timeout: float | None = None,
        nemesis_stall_timeout: float | None = None,
    ) -> None:
        if concurrency < 1:
            raise ValueError(f"concurrency must be >= 1, got {concurrency}")
        if client is not None and not nodes:
            raise ValueError("clients need at least one node")
        client_bound, nemesis_bound = stall_bounds(test)
        if stall_timeout is not None:
            client_bound = stall_timeout
        if nemesis_stall_timeout is not None:
            nemesis_bound = nemesis_stall_timeout
        for what, b in (("stall_timeout", client_bound), ("nemesis_stall_timeout", nemesis_bound)):
            if isinstance(b, bool) or not isinstance(b, (int, float)) or not math.isfinite(b) or b <= 0:
                raise ValueError(f"{what} {b!r}: expected a positive finite number of seconds")
        self._client_bound_ns = int(client_bound * 1e9)
        self._nemesis_bound_ns = int(nemesis_bound * 1e9)
        self.test = test
        self.client = client
        self.nemesis = nemesis
        self.nodes = list(nodes)
        self.concurrency = concurrency
        self.history = history
        self.clock = clock or Clock()
        self.rng = rng or random.Random(0)
        self.idempotent = frozenset(idempotent)
        self.on_op = on_op
        self.stats = Stats()
        self._stop = threading.Event()
        self._done: _Mailbox[_Mail] = _Mailbox()
        self.last_time = 0
        self._procs: dict[Thread, Process] = {}  # thread -> its current process
        # scheduler state, guarded by _lock (see the module docstring)
        self._lock = threading.Lock()
        self._running = False
        self._gen: Generator | None = None
        self._workers: dict[Thread, _Worker] = {}
        self._free: set[Thread] = set()
        self._free_fs: frozenset[Thread] | None = None  # frozenset(_free), built once per change
        self._all_threads: frozenset[Thread] = frozenset()
        self._outstanding = 0
        self._version = 0  # bumped by every recorded op and dispatch: a held op is stale when it moved
        self._held: tuple[OpDict, Generator | None, int] | None = None  # future op, its next gen
        self._error: BaseException | None = None  # raised by a generator inside a worker's step
        self._run_id = 0

    def stop(self) -> None:
        """Ask the scheduler to stop dispatching; in-flight ops stay open in the history."""
        self._stop.set()

    # ---- workers

    def _client_loop(self, w: _Worker) -> None:
        get, clock, complete = w.inbox.get, self.clock, self._complete
        while True:
            item = get()
            if item is None:
                break
            if isinstance(item, dict):  # sleep
                time.sleep(max(0.0, float(item["value"])))
                complete(w, None, clock())
                continue
            comp = self._invoke_client(w, item)
            complete(w, comp, clock())
        self._close_client(w)

    def _close_client(self, w: _Worker) -> None:
        if w.client is not None:
            try:
                w.client.close(self.test)
            except Exception as e:  # a failing close must not stop the run
                log.warning("closing client of thread %s: %s", w.thread, e)
        w.client = None

    def _invoke_client(self, w: _Worker, op: Op) -> Op:
        client = w.client
        db = getattr(self.test, "db", None)
        if client is None:
            assert self.client is not None and w.node is not None
            try:
                client = w.client = self.client.open(self.test, w.node)
            except Exception as e:
                if not is_declared(e, db):  # the workload's or plug-in's own code crashed
                    comp = crashed(op, e, db, self.client)
                    comp.node = w.node
                    return comp
                return op.completion(FAIL, error=f"no-client: {type(e).__name__}: {e}", node=w.node)
        try:
            comp = client.invoke(self.test, op)
            err = _valid_completion(op, comp)
            if err is not None:
                comp = op.completion(INFO, error=f"indeterminate: {err}", node=w.node)
        except Exception as e:
            comp = crashed(op, e, db, client)
            comp.node = w.node
        if comp.node is None:
            comp.node = w.node
        if comp.type == INFO:
            if op.f in self.idempotent and not (comp.extra and "client_error" in comp.extra):
                comp.type = FAIL
            else:
                self._close_client(w)  # the process is retired; its successor gets a fresh client
        return comp

    def _nemesis_loop(self, w: _Worker) -> None:
        test, clock, complete = self.test, self.clock, self._complete
        while True:
            item = w.inbox.get()
            if item is None:
                break
            if isinstance(item, dict):
                time.sleep(max(0.0, float(item["value"])))
                complete(w, None, clock())
                continue
            try:
                assert self.nemesis is not None
                # a run's nemesis always has its test; the interpreter's own tests drive fakes
                # without one
                comp = self.nemesis.invoke(cast("Test", test), item)
                if not isinstance(comp, Op):
                    raise TypeError(f"nemesis returned {type(comp).__name__}, not an Op")
                comp.type = INFO
                comp.process = NEMESIS
                comp.f = item.f
            except Exception as e:
                log.warning("nemesis %s failed: %s", item.f, e)
                comp = item.completion(INFO, value=item.value, error=f"{type(e).__name__}: {e}")
            complete(w, comp, clock())

    def _complete(self, w: _Worker, comp: Op | None, t: int) -> None:
        """A worker finished an op (``comp`` None: a sleep ended) at ``t`` ns.

        If the scheduler is idle, do its step here: record ``comp`` and dispatch the ops due now (this
        thread's next op lands in its own inbox, so no thread switch); then wake the scheduler unless
        every thread is busy (it must wait for a future op's time, poll a pending generator or end
        the run). If the scheduler is busy, queue the completion for it.
        """
        lock = self._lock
        if lock.acquire(False):
            try:
                if w.run != self._run_id:
                    return  # an op abandoned by an earlier run(): it stays open in the history
                if self._running and self._error is None and not self._stop.is_set():
                    self._handle(w, comp, t)
                    if self._pump() is not _BUSY:
                        self._done.put(_NUDGE)
                    return
            except BaseException as e:  # a generator raised: the scheduler re-raises it
                self._error = e
                self._done.put(_NUDGE)
                return
            finally:
                lock.release()
        self._done.put((w, comp, t))

    # ---- scheduler (every method below runs with _lock held)

    def _record(self, op: Op, t: int) -> Op:
        if t < self.last_time:
            t = self.last_time
        self.last_time = t
        op.time = t
        self.history.write(op)
        return op

    def _ctx(self, t: int) -> Context:
        fs = self._free_fs
        if fs is None:
            fs = self._free_fs = frozenset(self._free)
        return Context(t, fs, self._all_threads, self._procs, self.rng, self.concurrency)

    def _handle(self, w: _Worker, comp: Op | None, t: int) -> None:
        if w.run != self._run_id:
            return  # an op abandoned by an earlier run(): it stays open in the history
        thread = w.thread
        self._outstanding -= 1
        self._free.add(thread)
        self._free_fs = None
        self._version += 1
        if comp is None:
            return
        self._record(comp, t)
        if comp.type == INFO and thread != NEMESIS_THREAD:
            self._retire(thread)
        self.stats.completed(comp)
        if self.on_op is not None:
            self.on_op(comp)
        gen = self._gen
        if gen is not None and not gen.passive:
            self._gen = gen.update(self.test, self._ctx(self.last_time), comp)

    def _retire(self, thread: Thread) -> None:
        """The process on client ``thread`` is retired (its last op is open or info): the thread
        continues as process ``p + concurrency``, so the retired process never invokes again."""
        p = self._procs[thread]
        assert isinstance(p, int)
        self._procs[thread] = p + self.concurrency

    def _pump(self) -> _Wait:
        """Dispatch every op due now, then say what the scheduler does next: _EXIT (the run is over),
        _BUSY (every thread is busy: wait for a completion), or the longest wait (s; None: until a
        completion) before asking the generator again (a pending generator, a future op)."""
        test, clock = self.test, self.clock
        while True:
            gen = self._gen
            if gen is None:
                wait: _Wait = _EXIT if self._outstanding == 0 else None
                break
            if not self._free:
                # every op needs a free thread: only a completion can change the answer
                wait = _BUSY
                break
            now = clock()
            held = self._held
            op: OpAnswer
            if held is not None and held[2] == self._version:
                # nothing happened since the generator gave this future op: wait for it, then take it
                # (asking again would draw from the rng again)
                op, g2, _ = held
                if op["time"] > now:
                    wait = min((op["time"] - now) / 1e9, 0.25)
                    break
            else:
                op, g2 = gen.op(test, self._ctx(now))
            self._held = None
            if op is None:
                wait = _EXIT if self._outstanding == 0 else _POLL_S * 20
                break
            if op is PENDING:
                if g2 is not None:
                    self._gen = g2
                wait = _POLL_S
                break
            assert isinstance(op, dict)
            t = op["time"]
            if t > now:
                self._held = (op, g2, self._version)
                wait = min((t - now) / 1e9, 0.25)
                break
            self._gen = g2
            if op.get("type") == "log":
                log.info("%s", op.get("value"))
                continue
            inv = self._dispatch(op)
            if inv is not None and g2 is not None and not g2.passive:
                self._gen = g2.update(test, self._ctx(self.last_time), inv)
        return wait

    def run(self, generator: GenLike) -> None:
        """Run ``generator`` to exhaustion. Raises what the generator raises; workers are always
        stopped before returning (in-flight client calls are abandoned, their ops left open)."""
        conc = self.concurrency
        with self._lock:
            self._run_id += 1
            run_id = self._run_id
        workers: dict[Thread, _Worker] = {}
        for i in range(conc):
            if self.client is not None:
                workers[i] = _Worker(i, self.nodes[i % len(self.nodes)], run_id)
        if self.nemesis is not None:
            workers[NEMESIS_THREAD] = _Worker(NEMESIS_THREAD, None, run_id)
        threads: list[Thread] = list(range(conc)) + ([NEMESIS_THREAD] if self.nemesis is not None else [])
        # thread -> current process, kept across run() calls so a retired process never comes back
        for t in threads:
            self._procs.setdefault(t, t)
        lock, done = self._lock, self._done
        with lock:
            self._gen = to_gen(generator)
            self._workers = workers
            self._all_threads = frozenset(threads)
            # threads without a worker (no client) are never free: generators for them stay pending
            self._free = set(workers)
            self._free_fs = None
            self._outstanding = 0
            self._held = None
            self._error = None
            self._running = True
        for w in workers.values():
            target = self._nemesis_loop if w.thread == NEMESIS_THREAD else self._client_loop
            w.t = threading.Thread(target=target, args=(w,), name=f"chaos-worker-{w.thread}", daemon=True)
            w.t.start()
        done_empty, done_pop, done_get = done.empty, done.pop, done.get
        stopped = self._stop.is_set
        item: _Mail | None = None
        next_watch = time.monotonic_ns() + _WATCH_NS
        try:
            while True:
                with lock:
                    while True:
                        if item is not None and item is not _NUDGE:
                            self._handle(*item)
                        if done_empty():
                            break
                        item = done_pop()
                    item = None
                    if self._error is not None:
                        raise self._error
                    if stopped():
                        break
                    wait = self._pump()
                    if wait is _EXIT:
                        break
                    now_ns = time.monotonic_ns()
                    if now_ns >= next_watch:
                        next_watch = now_ns + _WATCH_NS
                        self._watch(now_ns)
                # unlocked: workers may do scheduler steps meanwhile, and nudge us when they cannot;
                # every wait is bounded so that stop() and the watchdog are looked at
                if wait is _BUSY or wait is None or wait > _TICK_S:
                    wait = _TICK_S
                item = done_get(wait)
        finally:
            with lock:
                self._running = False
                # a process whose op is abandoned open may not invoke again (as after an info)
                for t in workers:
                    if t not in self._free and t != NEMESIS_THREAD:
                        self._retire(t)
            for w in workers.values():
                w.inbox.put(None)
            deadline = time.monotonic() + 2.0
            for w in workers.values():
                if w.t is not None:
                    w.t.join(timeout=max(0.0, deadline - time.monotonic()))

    def _watch(self, now_ns: int) -> None:
        """Raise :class:`Stalled` if an op has been in flight past its bound (lock held)."""
        free = self._free
        for t, w in self._workers.items():
            if t not in free and w.since and now_ns - w.since > w.bound:
                raise Stalled(
                    f"thread {t} ({w.node or 'nemesis'}): op {w.what} in flight for "
                    f"{(now_ns - w.since) / 1e9:.0f} s, over the watchdog bound of {w.bound / 1e9:.0f} s"
                )

    def _dispatch(self, op: OpDict) -> Op | None:
        p = op["process"]
        thread: Thread = NEMESIS_THREAD if p == NEMESIS_THREAD else int(p) % self.concurrency
        typ = op.get("type", INVOKE)
        w = self._workers[thread]
        self._free.discard(thread)
        self._free_fs = None
        self._outstanding += 1
        self._version += 1
        w.since = time.monotonic_ns()
        if typ == "sleep":
            w.bound = self._client_bound_ns + int(max(0.0, float(op["value"])) * 1e9)
            w.what = f"sleep {op['value']!r}"
            w.inbox.put(op)
            return None
        w.bound = self._nemesis_bound_ns if thread == NEMESIS_THREAD else self._client_bound_ns
        w.what = op["f"]
        if typ != INVOKE:
            raise ValueError(f"generator produced an op of type {typ!r}; expected invoke, sleep or log")
        # op has type, process, f, time and maybe value/key: anything beyond is a workload field
        extra = {k: v for k, v in op.items() if k not in _OP_FIELDS} if len(op) > 6 else {}
        is_nem = thread == NEMESIS_THREAD
        g = op.get
        inv = Op(
            INFO if is_nem else INVOKE,
            NEMESIS if is_nem else p,
            op["f"],
            g("value"),
            0,
            -1,
            None if is_nem else (g("node") or w.node),
            None,
            g("key"),
            extra,
        )
        self._record(inv, self.clock())
        self.stats.invoked += 1
        if self.on_op is not None:
            self.on_op(inv)
        w.inbox.put(inv)  # already written: a client changing it cannot alter the history
        return inv


_OP_FIELDS = frozenset(["type", "process", "f", "value", "time", "key", "node", "index", "error"])
