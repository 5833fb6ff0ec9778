"""Checkers, their composition, the stats checker, and ``results.json`` (after ``jepsen.checker``).

A checker takes the test (the ``test.json`` dict), the history file and options, and returns a dict
with at least ``valid``: ``True``, ``False`` or ``"unknown"``. :func:`compose` runs several and merges
their verdicts worst-first (``False`` over ``"unknown"`` over ``True``, Jepsen's ``merge-valid``).

Checkers that only need one pass over the history subclass :class:`StreamChecker`: they are fed op
by op, so a composition reads the file once for all of them and a history of millions of ops is
never held in memory as Op objects. A checker that raises is reported ``unknown`` with the error
(Jepsen's ``check-safe``); a malformed history (HistoryError) is not a checker fault and propagates.
"""

from __future__ import annotations

import inspect
import os
import signal
import time
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from chaos import plugins
from chaos.errors import ConfigError
from chaos.history.checkers import elle, linear
from chaos.history.checkers.models import ModelError, get_model
from chaos.history.op import FAIL, INFO, INVOKE, NEMESIS, OK, Op
from chaos.history.store import HistoryError, ParsedHistory, RunDir, find_run, parsed, read_history
from chaos.history.verdict import UNKNOWN, Accumulator, Checker, CheckOptions, StreamChecker, merge_valid


def _crashed(name: str, e: BaseException) -> dict[str, object]:
    import traceback  # stdlib, only for a crash: start-up does not pay for it

    tb = traceback.format_exception_only(type(e), e)[-1].strip()
    return {"valid": UNKNOWN, "error": f"checker {name} crashed: {tb}"}


class Compose:
    """Several checkers run as one; the result is ``{"valid": merged, "checkers": {name: result}}``.

    The history is read once: stream checkers share one pass over it; a checker with
    ``reads_parsed = True`` (:class:`LinearChecker`) gets the :class:`ParsedHistory` of that same
    pass; any other gets the path. When some checker reads the parsed form (or the caller passes
    one) the ops are held in memory; otherwise they are streamed.
    """

    name = "compose"

    def __init__(self, checkers: Mapping[str, Checker] | Iterable[Checker]):
        if isinstance(checkers, Mapping):
            self.checkers = dict(checkers)
        else:
            self.checkers = {}
            for c in checkers:
                if c.name in self.checkers:
                    raise ValueError(f"two checkers named {c.name!r} in one composition")
                self.checkers[c.name] = c

    def check(
        self, test: dict[str, Any], history: Path | ParsedHistory, opts: dict[str, object]
    ) -> dict[str, Any]:
        """Run every checker on the history (a path, or one already parsed). Raises HistoryError
        for a malformed history and for one with no client op (nothing was tested: not valid, and
        not a checker's fault)."""
        held: ParsedHistory | None = history if isinstance(history, ParsedHistory) else None
        if held is None and any(getattr(c, "reads_parsed", False) for c in self.checkers.values()):
            held = ParsedHistory.read(history)  # type: ignore[arg-type]
        history_path = held.path if held is not None else Path(history)  # type: ignore[arg-type]
        require_client_op(held if held is not None else history_path)
        results: dict[str, dict[str, object]] = {}
        streams: dict[str, Accumulator] = {}
        started: dict[str, float] = {}
        for name, c in self.checkers.items():
            if isinstance(c, StreamChecker):
                started[name] = time.perf_counter()
                try:
                    streams[name] = c.begin(test, opts)
                except Exception as e:
                    results[name] = _crashed(name, e)
        others = [n for n, c in self.checkers.items() if not isinstance(c, StreamChecker)]
        child = _fork_streams(streams, held) if streams and others else None
        if child is None and streams:
            _stream_pass(streams, held.ops if held is not None else read_history(history_path), results)
        try:
            for name in others:
                c = self.checkers[name]
                t1 = time.perf_counter()
                target = held if held is not None and getattr(c, "reads_parsed", False) else history_path
                try:
                    results[name] = c.check(test, target, opts)
                except HistoryError:
                    raise
                except Exception as e:
                    results[name] = _crashed(name, e)
                results[name].setdefault("elapsed_s", round(time.perf_counter() - t1, 3))
        except BaseException:
            if child is not None:
                os.kill(child[0], signal.SIGKILL)
                os.waitpid(child[0], 0)
                os.close(child[1])
            raise
        if child is not None and not _join_streams(child, results):
            assert held is not None
            _stream_pass(streams, held.ops, results)  # the child failed: the same pass here
        del streams
        ordered = {name: results[name] for name in self.checkers if name in results}
        return {"valid": merge_valid(r.get("valid", UNKNOWN) for r in ordered.values()), "checkers": ordered}


def _stream_pass(streams: dict[str, Accumulator], ops: Iterable[Op], results: dict[str, Any]) -> None:
    """Feed ``ops`` to every stream checker's accumulator in one pass; put each result (or its
    crash) in ``results`` with ``elapsed_s``."""
    t0 = time.perf_counter()
    live = dict(streams)
    accs = list(live.items())
    for op in ops:
        dead = False
        for name, acc in accs:
            try:
                acc.step(op)
            except Exception as e:
                results[name] = _crashed(name, e)
                del live[name]
                dead = True
        if dead:
            accs = list(live.items())
    read_s = time.perf_counter() - t0
    del accs
    for name in list(live):
        acc = live.pop(name)  # dropped after finishing, so the next finish has its memory
        t1 = time.perf_counter()
        try:
            results[name] = acc.finish()
        except Exception as e:
            results[name] = _crashed(name, e)
        del acc
        results[name].setdefault("elapsed_s", round(read_s + time.perf_counter() - t1, 3))


# a history this long has its stream checkers run in a forked child, beside the linear search
FORK_STREAMS_AFTER = 20_000


def _fork_streams(streams: dict[str, Accumulator], held: ParsedHistory | None) -> tuple[int, int] | None:
    """Start the stream pass over a long held history in a forked child (the ops are shared
    copy-on-write, nothing is sent), so it runs on another CPU while this process runs the other
    checkers; returns ``(pid, read end of the pipe)`` for :func:`_join_streams`, or None
    where forking is not safe or not worth it (no fork, other threads, a short history)."""
    if held is None or len(held.ops) < FORK_STREAMS_AFTER or not hasattr(os, "fork"):
        return None
    import pickle  # stdlib: only a long history pays for it (and threading), not the start-up
    import threading

    if threading.active_count() != 1 or (os.cpu_count() or 1) < 2:
        return None
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: never returns
        code = 1
        try:
            os.close(r)
            out: dict[str, object] = {}
            _stream_pass(streams, held.ops, out)
            data = pickle.dumps(out, protocol=pickle.HIGHEST_PROTOCOL)
            view = memoryview(data)
            while view:
                view = view[os.write(w, view) :]
            code = 0
        finally:
            os._exit(code)
    os.close(w)
    return pid, r


def _join_streams(child: tuple[int, int], results: dict[str, Any]) -> bool:
    """Put the stream results of the child :func:`_fork_streams` started in ``results``; False
    when it failed (a result it could not send, say), so the caller runs the pass itself."""
    import pickle

    pid, r = child
    chunks = []
    with os.fdopen(r, "rb") as f:
        while chunk := f.read(1 << 20):
            chunks.append(chunk)
    _, status = os.waitpid(pid, 0)
    if status != 0 or not chunks:
        return False
    results.update(pickle.loads(b"".join(chunks)))
    return True


def compose(checkers: Mapping[str, Checker] | Iterable[Checker]) -> Compose:
    """Compose checkers (a mapping name -> checker, or checkers named by their ``name``)."""
    return Compose(checkers)


# --------------------------------------------------------------------------------------------------
# stats


class _StatsAcc:
    def __init__(self) -> None:
        self.by_f: dict[str, dict[str, int]] = {}
        self.crashed: dict[str, int] = {}  # f -> completions with a client error
        self.unsupported: dict[str, int] = {}  # f -> fails because the client has no such method

    def step(self, op: Op) -> None:
        if op.process == NEMESIS:
            return
        if op.type == INVOKE:  # an f invoked and never completed (a cut history) is counted too
            if op.f not in self.by_f:
                self.by_f[op.f] = {OK: 0, FAIL: 0, INFO: 0}
            return
        c = self.by_f.get(op.f)
        if c is None:
            c = self.by_f[op.f] = {OK: 0, FAIL: 0, INFO: 0}
        c[op.type] = c.get(op.type, 0) + 1
        if op.extra and "client_error" in op.extra:
            self.crashed[op.f] = self.crashed.get(op.f, 0) + 1
        if op.extra and op.extra.get("unsupported") is True and op.type == FAIL:
            self.unsupported[op.f] = self.unsupported.get(op.f, 0) + 1

    def finish(self) -> dict[str, object]:
        by_f: dict[str, dict[str, object]] = {}
        for f in sorted(self.by_f):
            c = self.by_f[f]
            n = c[OK] + c[FAIL] + c[INFO]
            # no ok because the client crashed says nothing of the DB (chaos.history.checkers.clienterrors),
            # nor does an f whose invocations never completed (nothing was observed of it)
            valid: object = True if c[OK] > 0 else UNKNOWN if self.crashed.get(f) or n == 0 else False
            if c[OK] == 0 and n and self.unsupported.get(f) == n:
                valid = (
                    True  # the client offers no such method (an optional one): nothing was asked of the DB
                )
            by_f[f] = {**c, "count": n, "valid": valid}
            if self.unsupported.get(f):
                by_f[f]["unsupported"] = self.unsupported[f]
            if self.crashed.get(f):
                by_f[f]["client_errors"] = self.crashed[f]
        total = {t: sum(c[t] for c in self.by_f.values()) for t in (OK, FAIL, INFO)}
        never_ok = [f for f, c in by_f.items() if c["valid"] is not True]
        out: dict[str, Any] = {
            "valid": merge_valid(c["valid"] for c in by_f.values()),
            "by_f": by_f,
            **total,
            "count": sum(total.values()),
        }
        if never_ok:
            out["error"] = "no ok " + ", ".join(never_ok)
            crashed = [f for f in never_ok if self.crashed.get(f)]
            if crashed:
                out["error"] += f" (client errors in {', '.join(crashed)})"
            pending = [f for f in never_ok if by_f[f]["count"] == 0]
            if pending:
                out["error"] += f" ({', '.join(pending)}: invoked, never completed)"
        return out


class StatsChecker(StreamChecker):
    """Ok/fail/info counts of client completions per f (``jepsen.checker/stats``).

    Result: ``{"valid", "by_f": {f: {"ok", "fail", "info", "count", "valid", "client_errors"?}},
    "ok", "fail", "info", "count"}``; valid is False when some f never completed ok (a workload
    that never succeeds at something tells nothing about it), ``"unknown"`` instead when some of
    that f's ops crashed in the client (``client_error``: chaos.history.checkers.clienterrors) or
    none of its invocations completed (a history cut short: nothing was observed of that f).
    """

    name = "stats"

    def begin(self, test: dict[str, object], opts: dict[str, object]) -> Accumulator:
        return _StatsAcc()


# --------------------------------------------------------------------------------------------------
# linearizability (the search itself is chaos.history.checkers.linear, imported lazily)


def model_ops(history: Path | ParsedHistory, model: Any) -> list[Op]:
    """Every op of the history (a path, read and validated here, or one already parsed), in order.
    Raises HistoryError naming the line for a client op whose ``f`` the model (a
    :mod:`chaos.history.checkers.models` model, or None for any) does not check."""
    h = parsed(history)
    fs = getattr(model, "fs", None)
    # the set of client fs first (one comprehension); the op is looked for only when one is foreign
    if fs is not None and not {op.f for op in h.ops if op.process != NEMESIS} <= fs:
        for i, op in enumerate(h.ops):
            if op.f not in fs and op.process != NEMESIS:
                line = h.lines[i]
                raise HistoryError(
                    f"client op f {op.f!r} is not one the {model.name} model checks "
                    f"(it checks {', '.join(sorted(fs))}; --model picks another model)",
                    line=line,
                    path=h.path,
                )
    return h.ops


class LinearChecker:
    """Linearizability of the whole history under a model, per key (``chaos.history.checkers.linear``).

    Needs the full history in memory (the search is not streaming). Options: ``model`` (name),
    ``time_limit`` (seconds, None for no deadline), ``workers`` (processes; default the CPU count).
    A client op whose ``f`` the model does not check raises HistoryError naming its line.
    """

    name = "linear"
    reads_parsed = True  # Compose hands it the ParsedHistory its stream pass read

    def __init__(self, model: str = "cas-register"):
        self.model = model

    def check(
        self, test: dict[str, object], history: Path | ParsedHistory, opts: dict[str, Any]
    ) -> dict[str, object]:
        model = opts.get("model") or self.model
        h = parsed(history)
        ops = model_ops(h, get_model(model))
        try:
            result = linear.check_history(
                ops,
                model=model,
                time_limit=opts.get("time_limit"),
                workers=opts.get("workers"),
                cancel_on_failure=bool(opts.get("fail_fast")),
            )
        except ModelError as e:  # an op the model cannot check: bad input, named by its line
            raise HistoryError(f"{e}; pass --model", line=h.line_of_index(e.index), path=h.path) from None
        if not isinstance(result, dict):
            to_dict = getattr(result, "to_dict", None)
            result = to_dict() if callable(to_dict) else {"valid": getattr(result, "valid", UNKNOWN)}
        result.setdefault("model", model)
        return result


# --------------------------------------------------------------------------------------------------
# what a history is a test of


def require_client_op(history_path: Path | ParsedHistory) -> None:
    """Raise HistoryError (naming the file) unless the history holds at least one client op.

    Reads only up to the first client op. An empty history, or one with nemesis ops only, tested
    nothing: it is bad input, never valid.
    """
    ops = history_path.ops if isinstance(history_path, ParsedHistory) else read_history(history_path)
    for op in ops:
        if op.process != NEMESIS:
            return
    raise HistoryError(
        "no client op: nothing was tested (an empty history is not a valid test)",
        path=history_path.path if isinstance(history_path, ParsedHistory) else history_path,
    )


# the fs each workload's clients use, and the fs that tell it apart
_WORKLOAD_FS: tuple[tuple[str, frozenset[str], frozenset[str]], ...] = (
    ("log", frozenset({"append", "read", "read-range"}), frozenset({"append", "read-range"})),
    ("set", frozenset({"add", "read"}), frozenset({"add"})),
    ("bank", frozenset({"transfer", "read"}), frozenset({"transfer"})),
    ("mutex", frozenset({"acquire", "release"}), frozenset({"acquire", "release"})),
    ("register", frozenset({"read", "write", "cas", "delete"}), frozenset({"write", "cas", "delete"})),
)


def infer_test(history_path: Path | ParsedHistory, *, model: str | None = None) -> dict[str, object]:
    """The test of a history with no ``test.json``: its workload, from the fs of ALL its client ops.

    A history whose client fs all belong to one workload (register: read/write/cas/delete; log:
    append/read/read-range; set: add/read; mutex: acquire/release) is that workload. A history of reads only
    is a register's when no ok read returned a list (a log's or a set's reads return lists).
    Returns a ``test.json``-like dict (``workload``, and ``model``/``checkers`` for mutex).

    Raises:
        HistoryError (naming the file): malformed, no client op, or the workload cannot be told
        from the fs (several workloads' fs, or fs no workload uses) and ``model`` is None. With a
        ``model``, such a history is checked with it (linear, stats, perf) instead.
    """
    fs: set[str] = set()
    list_reads = appends = False
    if isinstance(history_path, ParsedHistory):  # read once by the caller, shared with the checkers
        ops: Iterable[Op] = history_path.ops
        history_path = history_path.path
    else:
        ops = read_history(history_path)
    for op in ops:
        if op.process == NEMESIS:
            continue
        fs.add(op.f)
        if op.f == "txn" and not appends and isinstance(op.value, list):
            appends = any(isinstance(m, list) and m[:1] == ["append"] for m in op.value)
        if not list_reads and op.type == OK and op.f == "read" and isinstance(op.value, list):
            list_reads = True
    if not fs:
        raise HistoryError(
            "no client op: nothing was tested (an empty history is not a valid test)", path=history_path
        )
    if fs == {"txn"}:  # Elle's transactions: appends make it list-append, else read/write registers
        return {"workload": "list-append" if appends else "rw-register"}
    fits = [w for w, allowed, marks in _WORKLOAD_FS if fs <= allowed and fs & marks]
    if not fits and fs == {"read"} and not list_reads:
        fits = ["register"]
    if len(fits) == 1:
        if fits[0] == "mutex":
            return {"workload": "mutex", "model": model or "mutex", "checkers": ["linear", "stats", "perf"]}
        return {"workload": fits[0]}
    if model is not None:
        return {"workload": None, "model": model}
    why = (
        "reads only, returning lists (a log or a set)"
        if fs == {"read"}
        else "no single workload uses all of them"
    )
    raise HistoryError(
        f"cannot tell the model from the client ops' fs ({', '.join(sorted(fs))}: {why}); "
        "pass --model (register, cas-register, append-log, set, mutex, ...)",
        path=history_path,
    )


def load_run_test(
    run: RunDir, *, model: str | None = None, history: ParsedHistory | None = None
) -> dict[str, object]:
    """A run's test: ``test.json``, or, when it is missing or names neither ``workload`` nor
    ``checkers``, what :func:`infer_test` finds in the whole history (never guessed from a prefix):
    in ``history`` when the caller has already read it, else in the file.

    Raises FileNotFoundError / ValueError for an unreadable test.json, HistoryError as infer_test.
    """
    test = run.load_test() if run.test_path.is_file() else {}
    if needs_inference(test):
        test = {**test, **infer_test(history if history is not None else run.history_path, model=model)}
    return test


def needs_inference(test: dict[str, object]) -> bool:
    """True when ``test`` (a ``test.json`` dict) names neither ``workload`` nor ``checkers``."""
    return test.get("workload") is None and test.get("checkers") is None


# --------------------------------------------------------------------------------------------------
# choosing checkers for a run


def linear_checker(test: Mapping[str, Any] | None = None, model: str | None = None) -> LinearChecker:
    """The ``linear`` checker of a run: ``model`` (``chaos check --model``), else the run's
    ``model`` (``test.json``), else cas-register."""
    return LinearChecker(model or (test or {}).get("model") or "cas-register")


def elle_checker(test: Mapping[str, object] | None = None) -> Checker:
    """The ``elle`` checker of a run: its workload (list-append or rw-register) and its
    ``consistency_model`` (default strict-serializable), from ``test.json``."""
    test = test or {}
    made: Checker = elle.ElleChecker(  # the package loads its checker (rustworkx, numpy) on first use
        str(test.get("workload") or "list-append"),
        str(test.get("consistency_model") or "strict-serializable"),
    )
    return made


# the checkers of a stored run whose test.json names none, by its workload
WORKLOAD_CHECKERS: dict[str, list[str]] = {
    "register": ["linear", "stats", "perf"],
    "log": ["log", "log-reads", "stats", "perf"],
    "set": ["set", "stats", "perf"],
    "list-append": ["elle", "stats", "perf"],
    "rw-register": ["elle", "stats", "perf"],
    "bank": ["bank", "stats", "perf"],
    "counter": ["counter", "stats", "perf"],
    "long-fork": ["long-fork", "stats", "perf"],
}


def make_checker(name: str, test: Mapping[str, object] | None = None, model: str | None = None) -> Checker:
    """The checker registered as ``name`` (:mod:`chaos.plugins`: the tool's own, a
    ``chaos.checkers`` entry point or ``module:attr``), built by its factory with the keywords
    ``test`` and ``model`` it names in its signature. ConfigError (a ValueError, one line) for an
    unknown name, a factory that raises or one that returns no checker."""
    factory = plugins.checker_factory(name)
    try:
        params = inspect.signature(factory).parameters
    except (TypeError, ValueError):  # a builtin or C callable: called as () -> Checker
        params = {}  # type: ignore[assignment]
    given = {"test": dict(test or {}), "model": model}
    made = plugins.call("--checker", name, factory, **{k: v for k, v in given.items() if k in params})
    if not callable(getattr(made, "check", None)):
        raise ConfigError(
            f"--checker {name}: the factory returned {type(made).__name__}, not a checker "
            "(an object with check(test, history_path, opts); see chaos.history.verdict.Checker)"
        )
    return made  # type: ignore[no-any-return]


def checkers_for(test: dict[str, Any], *, model: str | None = None) -> dict[str, Checker]:
    """The checkers for a run, from ``test.json``: an explicit ``"checkers"`` list, else by
    ``"workload"`` (:data:`WORKLOAD_CHECKERS`; any other workload -> stats, perf), plus linear
    when ``model`` is given. ``faults`` (:mod:`chaos.history.checkers.faults`) and
    ``client-errors`` (:mod:`chaos.history.checkers.clienterrors`) are always added. Each is built
    through the one registry (:func:`make_checker`).
    Raises ValueError for an unknown checker name in ``"checkers"``.
    """
    names = test.get("checkers")
    if names is None:
        workload = test.get("workload")
        if isinstance(workload, dict):
            workload = workload.get("name")
        names = WORKLOAD_CHECKERS.get(str(workload), ["stats", "perf"])
        if model and "linear" not in names:
            names = ["linear", *names]
    if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
        raise ValueError(f"test.json 'checkers' must be a list of names, got {names!r}")
    if "faults" not in names:  # every run, stored ones too: did the requested faults take effect?
        names = [*names, "faults"]
    if "client-errors" not in names:  # every run: did the client code crash (not a DB verdict)?
        names = [*names, "client-errors"]
    out: dict[str, Checker] = {}
    for n in names:
        # the tool's own names need no scan of the installed distributions' entry points
        known = plugins.BUILTINS["checker"] if n in plugins.BUILTINS["checker"] else plugins.names("checker")
        if n not in known and not plugins.is_reference(n):
            raise ValueError(f"test.json names unknown checker {n!r} (known: {', '.join(known)})")
        out[n] = make_checker(n, test, model)
    return out


def refuse_consistency_model(consistency_model: str, test: dict[str, Any]) -> None:
    """Raise ValueError: ``--consistency-model`` was given for a history no elle checker reads."""
    raise ValueError(
        f"--consistency-model {consistency_model}: the {test.get('workload') or 'given'} workload is "
        "not checked by elle, which alone reads it (list-append, rw-register); drop the option"
    )


def check_run(
    run_dir: RunDir | str | os.PathLike[str],
    *,
    model: str | None = None,
    time_limit: float | None = None,
    workers: int | None = None,
    consistency_model: str | None = None,
    fail_fast: bool = False,
    write: bool = True,
    history: ParsedHistory | None = None,
) -> dict[str, Any]:
    """Re-check a stored run: pick checkers from ``test.json`` (:func:`load_run_test`), write
    ``results.json`` (unless ``write`` is false), return it. ``history``: the run's history
    already read (:class:`ParsedHistory`), shared with every checker instead of reading the file.

    Args:
        run_dir: a RunDir, or any path :func:`chaos.history.store.find_run` accepts.
        model: a linearizability model name; overrides the workload's.
        time_limit: seconds for the linearizability search; past it that checker says ``unknown``.
        workers: processes for the linearizability search (default: the CPU count).
        consistency_model: for transactional workloads (``elle``), the model to check; overrides
            the run's ``consistency_model``.
        fail_fast: stop the linearizability search at the first invalid key (``not_checked``
            lists the others); by default every key is checked.
    Raises:
        FileNotFoundError: no run or no history.
        HistoryError: the history is malformed, has no client op, or (without test.json) does not
            tell its workload.
    """
    run = run_dir if isinstance(run_dir, RunDir) else find_run(run_dir)
    if not run.history_path.is_file():
        raise FileNotFoundError(f"{run.history_path}: no history in run directory {run.path}")
    test = run.load_test() if run.test_path.is_file() else {}
    source: Path | ParsedHistory = history if history is not None else run.history_path
    if needs_inference(test) and history is None:  # read whole for it: once, shared with the checkers
        source = ParsedHistory.read(run.history_path)
    test = load_run_test(run, model=model, history=source if isinstance(source, ParsedHistory) else None)
    if consistency_model:
        test = {**test, "consistency_model": consistency_model}
    checkers = checkers_for(test, model=model)
    if consistency_model and "elle" not in checkers:
        refuse_consistency_model(consistency_model, test)
    opts = CheckOptions(
        time_limit=time_limit,
        workers=workers,
        model=model or None,
        run_dir=str(run.path),
        fail_fast=fail_fast,
    ).as_dict()
    results = compose(checkers).check(test, source, opts)
    if write:
        run.write_results(results)
    return results
