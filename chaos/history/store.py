"""The run store: run directories, the JSON Lines history writer, and a streaming, validating reader.

Layout (docs/design.md, "Run directory"; after Jepsen's ``jepsen.store``)::

    store/<test-name>/<YYYYmmddTHHMMSS.fff>/
        history.jsonl   one op per line, written and flushed as each op completes
        test.json       every option, nodes, versions, seed, start time
        results.json    the checkers' verdicts (chaos.history.checkers)
        chaos.log       the control node's log
        nodes/<node>/   logs and listings fetched from each node
    store/latest, store/<test-name>/latest   symlinks to the newest run

A history is validated as it is read (Jepsen's ``jepsen.history`` pairing rules): every completion
follows an open invocation of the same process, a process has at most one open invocation, ``type``
is one of invoke/ok/fail/info, and ``time`` never decreases. A violation raises :class:`HistoryError`
naming the file, the 1-based line number and the reason. A torn last line (the writer was killed
mid-write) is skipped, not an error.
"""

from __future__ import annotations

import errno
import json
import os
import threading
import time as _time
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from chaos.history.op import INVOKE, NEMESIS, TYPES, Op

HISTORY_FILE = "history.jsonl"
TEST_FILE = "test.json"
RESULTS_FILE = "results.json"
LOG_FILE = "chaos.log"
NODES_DIR = "nodes"
LATEST = "latest"


class HistoryError(ValueError):
    """A malformed history. ``line`` is the 1-based line (or op position) at fault, if known.

    The message is one line: ``<file>: line <n>: <reason>``.
    """

    def __init__(self, reason: str, *, line: int | None = None, path: str | os.PathLike[str] | None = None):
        self.reason = reason
        self.line = line
        self.path = str(path) if path is not None else None
        where = []
        if self.path:
            where.append(self.path)
        if line is not None:
            where.append(f"line {line}")
        super().__init__(": ".join([*where, reason]))


# --------------------------------------------------------------------------------------------------
# Writer


_ENC = json.JSONEncoder(separators=(",", ":"), default=str)  # same settings as Op.to_json
_encode = _ENC.encode
_STR_CACHE: dict[str, str] = {}  # f, type, node, process names: a small set, encoded once each
_FRAGS: dict[tuple[str, str], tuple[str, str]] = {}  # (type, f) -> the text around "process"
_NODE_FRAGS = {f"n{i}": f',"node":"n{i}"' for i in range(1, 33)}


def _jstr(s: str) -> str:
    r = _STR_CACHE.get(s)
    if r is None:
        r = _encode(s)
        if len(_STR_CACHE) < 4096:
            _STR_CACHE[s] = r
    return r


def _jval(v: Any) -> str:
    # The common op values (None, int, short lists of ints) by hand; anything else by the encoder.
    t = type(v)
    if t is int:
        return str(v)
    if v is None:
        return "null"
    if t is list or t is tuple:
        for x in v:
            if type(x) is not int:
                return _encode(v)
        return "[" + ",".join(map(str, v)) + "]"
    return _encode(v)


def encode_line(op: Op) -> bytes:
    """``op`` as one JSON Lines record (with the newline), byte for byte what ``op.to_json()`` gives.

    Hand-formats the known fields (the hot path of the history writer: about half the cost of a
    dict plus ``json.JSONEncoder``); extra fields and unusual values go through the encoder.
    """
    p, f, typ, v, t = op.process, op.f, op.type, op.value, op.time
    if type(p) is not int or type(f) is not str or type(typ) is not str or type(t) is not int:
        return (op.to_json() + "\n").encode()
    frag = _FRAGS.get((typ, f))
    if frag is None:
        frag = (f',"type":{_jstr(typ)},"process":', f',"f":{_jstr(f)},"value":')
        if len(_FRAGS) < 4096:
            _FRAGS[(typ, f)] = frag
    vt = type(v)
    s = (
        f'{{"index":{op.index}{frag[0]}{p}{frag[1]}'
        f'{v if vt is int else "null" if v is None else _jval(v)},"time":{t}'
    )
    node, error, key, extra = op.node, op.error, op.key, op.extra
    if node is not None:
        s += _NODE_FRAGS.get(node) or ',"node":' + (_jstr(node) if type(node) is str else _encode(node))
    if error is not None:
        s += ',"error":' + _encode(error)
    if key is not None:
        s += ',"key":' + _jval(key)
    if extra:
        if extra.keys() & _KNOWN_FIELDS:  # an extra field shadowing a known one: as to_json has it
            return (op.to_json() + "\n").encode()
        for k, x in extra.items():
            s += f",{_jstr(k) if type(k) is str else _encode(str(k))}:{_jval(x)}"
    return (s + "}\n").encode()


_KNOWN_FIELDS = frozenset(["index", "type", "process", "f", "value", "time", "node", "error", "key"])


def _gil_write() -> Any:
    """``os.write`` that keeps the GIL: libc ``write`` through ``ctypes.PyDLL``.

    ``os.write`` releases the GIL for the system call; in the interpreter's scheduler that hands the
    GIL to a woken worker on every history line (two thread switches per line). Appending a line to
    the page cache takes a microsecond or two, so holding the GIL over it is cheaper. Falls back to
    ``os.write`` where libc cannot be loaded.
    """
    if os.environ.get("CHAOS_HISTORY_OS_WRITE"):
        return os.write
    try:
        import ctypes

        libc = ctypes.PyDLL(None, use_errno=True)
        cw = libc.write
        cw.argtypes = (ctypes.c_int, ctypes.c_char_p, ctypes.c_size_t)
        cw.restype = ctypes.c_ssize_t
    except (OSError, AttributeError):
        return os.write
    get_errno = ctypes.get_errno

    def write(fd: int, data: bytes) -> int:
        n: int = cw(fd, data, len(data))
        if n < 0:
            e = get_errno()
            if e == errno.EINTR:
                return 0
            raise OSError(e, os.strerror(e))
        return n

    return write


_write = _gil_write()
_GIL_WRITE_MAX = 64 * 1024


class HistoryWriter:
    """Appends ops to a JSON Lines history as they complete; thread-safe.

    Each op gets ``op.index`` (0-based position in the file) and is written at once with a single
    ``write(2)`` of one whole line (no buffering in the process; up to 64 KiB with the GIL held, see
    ``_gil_write``), so a control node killed with SIGKILL leaves every earlier line intact and at
    most a torn last line (which :func:`read_history` skips). Opening an existing
    history appends to it: a torn tail is cut off and indexes continue from the line count.

    Args:
        path: the history file (created with its parent directory if missing).
    Raises:
        OSError: the file cannot be opened or written.
    """

    def __init__(self, path: str | os.PathLike[str]):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()
        self._fd: int | None = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o644)
        self._next = self._recover()

    def _recover(self) -> int:
        assert self._fd is not None
        size = os.fstat(self._fd).st_size
        if size == 0:
            return 0
        with open(self.path, "rb") as f:
            data = f.read()
        end = data.rfind(b"\n") + 1
        if end != len(data):
            os.ftruncate(self._fd, end)  # drop a torn last line so the next line starts clean
        return data.count(b"\n", 0, end)

    @property
    def count(self) -> int:
        """Ops written so far (including those found in an existing file)."""
        return self._next

    def write(self, op: Op) -> Op:
        """Assign ``op.index``, append the op as one line, and return it. Raises ValueError if closed."""
        with self._lock:
            if self._fd is None:
                raise ValueError(f"history writer for {self.path} is closed")
            op.index = self._next
            data = encode_line(op)
            # a big line (a final read of a whole log) is written without the GIL: copying it may
            # take long enough that other threads should run meanwhile
            n = _write(self._fd, data) if len(data) <= _GIL_WRITE_MAX else os.write(self._fd, data)
            while n < len(data):  # a short write (signal, full disk): finish the line
                n += os.write(self._fd, data[n:])
            self._next += 1
        return op

    def fsync(self) -> None:
        """Force the written lines to disk (the page cache already survives a killed process)."""
        with self._lock:
            if self._fd is not None:
                os.fsync(self._fd)

    def close(self) -> None:
        """Close the file; idempotent."""
        with self._lock:
            if self._fd is not None:
                os.close(self._fd)
                self._fd = None

    def __enter__(self) -> HistoryWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def write_history(path: str | os.PathLike[str], ops: Iterable[Op]) -> int:
    """Write ``ops`` to a new history file (replacing any), assigning indexes; returns the count."""
    p = Path(path)
    if p.exists():
        p.unlink()
    with HistoryWriter(p) as w:
        for op in ops:
            w.write(op)
        return w.count


# --------------------------------------------------------------------------------------------------
# Reader and validation


def _parse_line(raw: bytes, lineno: int, path: Path) -> Op:
    try:
        d = json.loads(raw)
    except ValueError as e:
        raise HistoryError(f"not valid JSON ({e})", line=lineno, path=path) from None
    if type(d) is not dict:
        raise HistoryError(f"expected a JSON object, got {type(d).__name__}", line=lineno, path=path)
    t = d.get("time", 0)
    if type(t) is not int:
        raise HistoryError(f"field 'time' must be integer nanoseconds, got {t!r}", line=lineno, path=path)
    try:
        return Op.from_dict(d)
    except KeyError as e:
        raise HistoryError(f"missing field {e.args[0]!r}", line=lineno, path=path) from None
    except (TypeError, ValueError) as e:
        raise HistoryError(f"bad op ({e})", line=lineno, path=path) from None


def _numbered(path: Path) -> Iterator[tuple[int, Op]]:
    """(line number, op) for each non-blank line; a torn (unterminated, unparsable) last line is skipped."""
    with open(path, "rb") as f:
        lineno = 0
        for raw in f:
            lineno += 1
            if not raw.endswith(b"\n"):
                # Last line without a newline: complete if it parses, else torn by a killed writer.
                try:
                    op = _parse_line(raw, lineno, path)
                except HistoryError:
                    return
                yield lineno, op
                return
            if raw.isspace():
                continue
            yield lineno, _parse_line(raw, lineno, path)


class Validator:
    """Incremental form of :func:`validate`: feed ops with :meth:`step`; keeps only the open invocations."""

    __slots__ = ("open", "last_time", "path")

    def __init__(self, path: str | os.PathLike[str] | None = None):
        self.open: dict[Any, Op] = {}
        self.last_time = -(2**63)
        self.path = path

    def step(self, op: Op, line: int | None) -> None:
        """Check ``op`` against the ops before it. Raises HistoryError naming ``line``."""
        t = op.type
        if t not in TYPES:
            raise HistoryError(
                f"unknown type {t!r} (expected one of {', '.join(TYPES)})", line=line, path=self.path
            )
        if op.time < self.last_time:
            raise HistoryError(
                f"time goes backwards: {op.time} ns after {self.last_time} ns", line=line, path=self.path
            )
        self.last_time = op.time
        p = op.process
        if p == NEMESIS:
            # Nemesis ops are info on both invocation and completion (Jepsen): alternate per f.
            k = (NEMESIS, op.f)
            if t == INVOKE or k not in self.open:
                self.open[k] = op
            else:
                del self.open[k]
            return
        if isinstance(p, bool) or not isinstance(p, int | str):
            raise HistoryError(f"process must be an integer or a name, got {p!r}", line=line, path=self.path)
        if t == INVOKE:
            prev = self.open.get(p)
            if prev is not None:
                raise HistoryError(
                    f"two open invocations on process {p}: {op.f!r} invoked while {prev.f!r} "
                    f"(op {prev.index}) has not completed",
                    line=line,
                    path=self.path,
                )
            self.open[p] = op
            return
        inv = self.open.pop(p, None)
        if inv is None:
            raise HistoryError(
                f"{t} completion of {op.f!r} on process {p} without an open invocation",
                line=line,
                path=self.path,
            )
        if inv.f != op.f:
            raise HistoryError(
                f"{t} completion of {op.f!r} on process {p} does not match its invocation {inv.f!r} "
                f"(op {inv.index})",
                line=line,
                path=self.path,
            )


def validate(ops: Iterable[Op], *, path: str | os.PathLike[str] | None = None) -> Iterator[Op]:
    """Yield ``ops`` unchanged, raising HistoryError at the first one breaking a pairing rule.

    Rules (Jepsen's ``jepsen.history``): a completion needs an open invocation of the same process
    and f; a process has at most one open invocation; ``type`` is invoke/ok/fail/info; ``time``
    never decreases. The error's ``line`` is the op's 1-based position in ``ops``.
    """
    v = Validator(path)
    for n, op in enumerate(ops, 1):
        v.step(op, n)
        yield op


def read_history(path: str | os.PathLike[str], *, validate: bool = True) -> Iterator[Op]:
    """Stream the ops of a JSON Lines history, one at a time (never the whole file in memory).

    Args:
        path: a ``history.jsonl`` file.
        validate: check the pairing rules as ops are read (see :func:`validate`).
    Yields:
        Op, in file order. A torn last line (a killed writer) is skipped; blank lines are ignored.
    Raises:
        HistoryError: a line is not a JSON op object or breaks a rule; names the file and line.
        FileNotFoundError: no such file.
    """
    p = Path(path)
    if not validate:
        for _, op in _numbered(p):
            yield op
        return
    v = Validator(p)
    for lineno, op in _numbered(p):
        v.step(op, lineno)
        yield op


def pair(ops: Iterable[Op]) -> Iterator[tuple[Op, Op | None]]:
    """Pair invocations with their completions, streaming.

    Yields ``(invocation, completion)`` in completion order, then ``(invocation, None)`` for every
    invocation that never completed (in invocation order). Nemesis ops pair per f (info, info).
    The ops are assumed valid (see :func:`validate`); a completion without an invocation, which
    validation forbids, is yielded as ``(completion, None)``.
    """
    open_: dict[Any, Op] = {}
    for op in ops:
        if op.process == NEMESIS:
            k: Any = (NEMESIS, op.f)
            if op.type == INVOKE or k not in open_:
                open_[k] = op
            else:
                yield open_.pop(k), op
            continue
        if op.type == INVOKE:
            open_[op.process] = op
            continue
        inv = open_.pop(op.process, None)
        if inv is None:
            yield op, None
        else:
            yield inv, op
    yield from ((inv, None) for inv in sorted(open_.values(), key=lambda o: o.index))


# --------------------------------------------------------------------------------------------------
# Run directories


def _write_json_atomic(path: Path, data: Any) -> None:
    tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
    with open(tmp, "w") as f:
        json.dump(data, f, indent=2, sort_keys=False, default=str)
        f.write("\n")
    os.replace(tmp, path)


def _symlink_atomic(target: str, link: Path) -> None:
    tmp = link.with_name(f".{link.name}.tmp{os.getpid()}.{threading.get_ident()}")
    if tmp.is_symlink() or tmp.exists():
        tmp.unlink()
    os.symlink(target, tmp)
    os.replace(tmp, link)


class RunDir:
    """One run directory. Construct with an existing path, or :meth:`create` a new one."""

    def __init__(self, path: str | os.PathLike[str]):
        self.path = Path(path)

    def __repr__(self) -> str:
        return f"RunDir({str(self.path)!r})"

    @classmethod
    def create(cls, store_root: str | os.PathLike[str], test_name: str) -> RunDir:
        """Make ``<store_root>/<test_name>/<YYYYmmddTHHMMSS.fff>/`` and point both ``latest`` links at it.

        Raises ValueError for a test name that is empty or contains a path separator.
        """
        if not test_name or "/" in test_name or test_name in (".", "..", LATEST):
            raise ValueError(f"test name must be a non-empty name without '/', got {test_name!r}")
        root = Path(store_root)
        test_dir = root / test_name
        test_dir.mkdir(parents=True, exist_ok=True)
        while True:
            now = _time.time()
            stamp = _time.strftime("%Y%m%dT%H%M%S", _time.localtime(now)) + f".{int(now * 1000) % 1000:03d}"
            path = test_dir / stamp
            try:
                path.mkdir()
                break
            except FileExistsError:
                _time.sleep(0.001)
        (path / NODES_DIR).mkdir()
        _symlink_atomic(stamp, test_dir / LATEST)
        _symlink_atomic(f"{test_name}/{stamp}", root / LATEST)
        return cls(path)

    @property
    def name(self) -> str:
        """The timestamp directory name."""
        return self.path.name

    @property
    def test_name(self) -> str:
        return self.path.parent.name

    @property
    def history_path(self) -> Path:
        return self.path / HISTORY_FILE

    @property
    def test_path(self) -> Path:
        return self.path / TEST_FILE

    @property
    def results_path(self) -> Path:
        return self.path / RESULTS_FILE

    @property
    def log_path(self) -> Path:
        return self.path / LOG_FILE

    def nodes_dir(self, node: str) -> Path:
        """``nodes/<node>/``, created if missing."""
        if not node or "/" in node:
            raise ValueError(f"node name must be non-empty without '/', got {node!r}")
        d = self.path / NODES_DIR / node
        d.mkdir(parents=True, exist_ok=True)
        return d

    def writer(self) -> HistoryWriter:
        """A writer appending to this run's history."""
        return HistoryWriter(self.history_path)

    def history(self, *, validate: bool = True) -> Iterator[Op]:
        return read_history(self.history_path, validate=validate)

    def write_test(self, test: dict[str, Any]) -> None:
        """Write ``test.json`` atomically (values that are not JSON are written as strings)."""
        _write_json_atomic(self.test_path, test)

    def write_results(self, results: dict[str, Any]) -> None:
        """Write ``results.json`` atomically."""
        _write_json_atomic(self.results_path, results)

    def _load(self, path: Path) -> dict[str, Any]:
        try:
            with open(path) as f:
                d = json.load(f)
        except FileNotFoundError:
            raise FileNotFoundError(f"{path}: no such file in run directory {self.path}") from None
        except ValueError as e:
            raise ValueError(f"{path}: not valid JSON ({e})") from None
        if not isinstance(d, dict):
            raise ValueError(f"{path}: expected a JSON object")
        return d

    def load_test(self) -> dict[str, Any]:
        """``test.json`` as a dict. Raises FileNotFoundError / ValueError naming the file."""
        return self._load(self.test_path)

    def load_results(self) -> dict[str, Any]:
        """``results.json`` as a dict. Raises FileNotFoundError / ValueError naming the file."""
        return self._load(self.results_path)


def is_run_dir(path: str | os.PathLike[str]) -> bool:
    p = Path(path)
    return p.is_dir() and ((p / HISTORY_FILE).is_file() or (p / TEST_FILE).is_file())


def find_run(path: str | os.PathLike[str]) -> RunDir:
    """Resolve ``path`` to a run: a run directory, a ``latest`` link, a test directory, or a store root.

    For a test directory or store root, its ``latest`` link is followed if present, else the newest
    run (by directory name, i.e. start time) below it is taken.
    Raises FileNotFoundError naming the path when no run is found.
    """
    p = Path(path)
    if not p.exists():
        raise FileNotFoundError(f"{p}: no such file or directory")
    if is_run_dir(p):
        return RunDir(p.resolve())
    if not p.is_dir():
        raise FileNotFoundError(f"{p}: not a run directory or store")
    latest = p / LATEST
    if latest.exists() and is_run_dir(latest):
        return RunDir(latest.resolve())
    candidates: list[Path] = []
    for child in p.iterdir():
        if child.name == LATEST or not child.is_dir() or child.is_symlink():
            continue
        if is_run_dir(child):
            candidates.append(child)
        else:
            candidates.extend(c for c in child.iterdir() if c.name != LATEST and is_run_dir(c))
    if not candidates:
        raise FileNotFoundError(f"{p}: no run directory (with {HISTORY_FILE} or {TEST_FILE}) found")
    return RunDir(max(candidates, key=lambda c: (c.name, c.parent.name)).resolve())
