"""The run store: run directories, the JSON Lines history writer, and a streaming, validating reader.

Layout (docs/design.md, "Run directory"; after Jepsen's ``jepsen.store``)::

    store/<test-name>/<YYYYmmddTHHMMSS.fff>/
        history.jsonl   one op per line, written and flushed as each op completes
        test.json       every option, nodes, versions, seed, start time
        results.json    the checkers' verdicts (chaos.history.checkers.registry)
        chaos.log       the control node's log
        nodes/<node>/   logs and listings fetched from each node
    store/latest, store/<test-name>/latest   symlinks to the newest run

A history is validated as it is read (Jepsen's ``jepsen.history`` pairing rules): every completion
follows an open invocation of the same process, a process has at most one open invocation, ``type``
is one of invoke/ok/fail/info, and ``time`` never decreases. A violation raises :class:`HistoryError`
naming the file, the 1-based line number and the reason. A torn last line (the writer was killed
mid-write) after a good line is skipped, not an error. Lines are read with orjson; a line that is not
UTF-8, a string holding a lone surrogate escape (``"\\ud800"``: not Unicode text, which every writer
of the tool must be able to write back), an object naming a key twice (``{"type":"fail",
"type":"ok"}``: malformed, as Jepsen's readers refuse it, not resolved last-wins), or a value nested
deeper than :data:`MAX_DEPTH`, is a HistoryError too.
"""

from __future__ import annotations

import gc
import json
import os
import threading
import time as _time
from array import array
from collections.abc import Hashable, Iterable, Iterator
from pathlib import Path
from typing import Any

import orjson

from chaos.history.op import _KNOWN_SET, INVOKE, NEMESIS, TYPES, Op, dumps, text_only

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


def encode_line(op: Op) -> bytes:
    """``op`` as one JSON Lines record (with the newline), byte for byte ``op.to_json()`` + newline.

    Encoded with orjson (``chaos.history.op.dumps``): compact, UTF-8, non-JSON values as ``str()``.
    """
    return dumps(op.to_dict()) + b"\n"


class HistoryWriter:
    """Appends ops to a JSON Lines history as they complete; thread-safe.

    Each op gets ``op.index`` (0-based position in the file) and is written at once with a single
    ``write(2)`` of one whole line (no buffering in the process), so a control node killed with
    SIGKILL leaves every earlier line intact and at most a torn last line (which
    :func:`read_history` skips). Opening an existing
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
            n = os.write(self._fd, data)
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


# Lines nested deeper than this (the op object is the first level) are refused: the checkers' models recurse over values, and no
# workload nests more than a few levels (a cas pair inside an independent tuple is 3).
MAX_DEPTH = 100


def too_deep(value: object, limit: int = MAX_DEPTH) -> bool:
    """True if ``value`` has lists/dicts nested more than ``limit`` levels (checked without recursion)."""
    stack = [(value, 0)]
    while stack:
        v, d = stack.pop()
        if type(v) is dict:
            v = v.values()
        elif type(v) is not list:
            continue
        if d >= limit:
            return True
        stack.extend((x, d + 1) for x in v if type(x) is list or type(x) is dict)
    return False


class _DuplicateKey(ValueError):
    """A JSON object names one key twice (raised inside ``json.loads``' object hook)."""


def _pairs_unique(pairs: list[tuple[str, object]]) -> dict[str, object]:
    d = dict(pairs)
    if len(d) != len(pairs):
        seen: set[str] = set()
        for key, _ in pairs:
            if key in seen:
                raise _DuplicateKey(key)
            seen.add(key)
    return d


def _refuse_duplicates(raw: bytes, lineno: int, path: Path) -> None:
    """HistoryError naming the key when an object of ``raw`` (at any depth) names a key twice:
    malformed input, as Jepsen's EDN reader refuses a map literal with a duplicate key, where
    orjson and ``json`` would silently keep the last value."""
    try:
        json.loads(raw, object_pairs_hook=_pairs_unique)
    except _DuplicateKey as e:
        raise HistoryError(
            f"the key {e.args[0]!r} appears twice in one object; expected each key once",
            line=lineno,
            path=path,
        ) from None
    except (ValueError, RecursionError):  # orjson read it; depth is checked by the caller
        pass


def _refuse_surrogates(d: object, lineno: int, path: Path) -> None:
    """HistoryError when a string of ``d`` holds a lone surrogate (a ``\\ud800`` escape without its
    pair): not Unicode text, so no checker, report or page could write it back as UTF-8."""
    try:
        json.dumps(d, ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError as e:
        raise HistoryError(
            f"a lone surrogate \\u{ord(e.object[e.start]):04x} in a string is not Unicode text; "
            "expected escapes \\uD800-\\uDFFF only in high-low pairs",
            line=lineno,
            path=path,
        ) from None


class _NotFinite(ValueError):
    """NaN or an infinity in a JSON line (raised inside ``json.loads``)."""


def _not_finite(name: str) -> object:
    raise _NotFinite(name)


MAX_INT_DIGITS = 4300  # Python's own limit for int(str) (sys.get_int_max_str_digits)


class _TooLong(ValueError):
    """An integer of more digits than :data:`MAX_INT_DIGITS` (raised inside ``json.loads``)."""


def _bounded_int(text: str) -> int:
    digits = len(text.lstrip("-"))
    if digits > MAX_INT_DIGITS:
        raise _TooLong(digits)
    return int(text)


def _finite_float(text: str) -> float:
    f = float(text)
    if f != f or f in (float("inf"), float("-inf")):
        raise _NotFinite(text[:40])
    return f


# orjson reads an integer beyond 64 bits as a float, so 18446744073709551617 and ...616 would read
# as one value: text that may hold one (20 digits in a row, or a minus and 19) is read by the
# standard library, which keeps every integer exact
_DIGITS = bytes(48 if 48 <= i <= 57 else 45 if i == 45 else 32 for i in range(256))
_BIG_INT = b"0" * 20
_BIG_NEG = b"-" + b"0" * 19
_SCAN = 1 << 24  # bytes translated at a time by the whole-file scan


def may_hold_big_int(buf: bytes) -> bool:
    """Whether ``buf`` (JSON text) may hold an integer orjson cannot read exactly (beyond 64 bits):
    a run of 20 digits, or a minus and 19. False positives (a long digit run inside a string or a
    float) only cost the exact reader; a miss cannot happen. A buffer over 16 MiB is scanned in
    pieces that overlap by a number's length (a line or a block is translated whole, not copied)."""
    if len(buf) <= _SCAN:
        return _holds_long_digit_run(buf)
    # each piece reaches 20 bytes into the next, so a run across a boundary is seen whole
    return any(_holds_long_digit_run(buf[s : s + _SCAN + 20]) for s in range(0, len(buf), _SCAN))


def _holds_long_digit_run(buf: bytes) -> bool:
    t = buf.translate(_DIGITS)
    return _BIG_INT in t or _BIG_NEG in t


def _loads(raw: bytes, lineno: int, path: Path) -> object:
    """One line's JSON value, every integer exact. Raises HistoryError for invalid JSON, invalid
    UTF-8, a lone surrogate, a key repeated in one object, or deep nesting."""
    try:
        if may_hold_big_int(raw):
            raise orjson.JSONDecodeError("an integer beyond 64 bits may be here", "", 0)
        d = orjson.loads(raw)
        fallback = False
    except orjson.JSONDecodeError as e:
        try:  # what orjson refuses or misreads but the standard library reads (lone surrogate
            # escapes, integers beyond 64 bits)
            raw.decode("utf-8")
            d = json.loads(raw, parse_constant=_not_finite, parse_float=_finite_float, parse_int=_bounded_int)
            fallback = True
        except _TooLong as t:
            raise HistoryError(
                f"an integer of {t.args[0]} digits (expected at most {MAX_INT_DIGITS})",
                line=lineno,
                path=path,
            ) from None
        except _NotFinite as nf:
            _refuse_duplicates(raw, lineno, path)  # a key named twice is the first thing to say
            raise HistoryError(
                f"{nf.args[0]} is not a history value (expected a finite number)", line=lineno, path=path
            ) from None
        except UnicodeDecodeError as u:
            raise HistoryError(
                f"not UTF-8 (byte {raw[u.start]:#04x} at column {u.start + 1}); expected a JSON object",
                line=lineno,
                path=path,
            ) from None
        except RecursionError:
            raise HistoryError(
                f"a value nested deeper than {MAX_DEPTH} levels", line=lineno, path=path
            ) from None
        except ValueError:
            raise HistoryError(f"not valid JSON ({e})", line=lineno, path=path) from None
    if len(raw) > 2 * MAX_DEPTH and raw.count(b"[") + raw.count(b"{") > MAX_DEPTH and too_deep(d):
        raise HistoryError(f"a value nested deeper than {MAX_DEPTH} levels", line=lineno, path=path)
    if fallback:
        _refuse_surrogates(d, lineno, path)
    # every key of every object brings one ':' and strings may hold more: as many ':' as top-level
    # keys leaves no room for a repeated key (nor a nested one), so only other lines are parsed again
    if fallback or (type(d) is dict and raw.count(b":") != len(d)):
        _refuse_duplicates(raw, lineno, path)
    return d


def _parse_line(raw: bytes, lineno: int, path: Path) -> Op:
    d = _loads(raw, lineno, path)
    if type(d) is not dict:
        raise HistoryError(f"expected a JSON object, got {type(d).__name__}", line=lineno, path=path)
    t = d.get("time", 0)
    if type(t) is not int:
        raise HistoryError(f"field 'time' must be integer nanoseconds, got {t!r:.40}", line=lineno, path=path)
    try:
        return Op.from_dict(d)
    except KeyError as e:
        raise HistoryError(f"missing field {e.args[0]!r}", line=lineno, path=path) from None
    except (TypeError, ValueError) as e:
        raise HistoryError(f"bad op ({e})", line=lineno, path=path) from None


def _numbered(path: Path) -> Iterator[tuple[int, Op]]:
    """(line number, op) for each non-blank line.

    A last line without a newline is an op if it parses; if not, it is a line torn by a killed
    writer and skipped, but only after a good line: a file whose only content is such a line is
    garbage, not a torn history, and raises HistoryError.
    """
    with open(path, "rb") as f:
        lineno = 0
        good = False
        for raw in f:
            lineno += 1
            if not raw.endswith(b"\n"):
                try:
                    op = _parse_line(raw, lineno, path)
                except HistoryError:
                    if good:
                        return
                    raise
                yield lineno, op
                return
            if raw.isspace():
                continue
            yield lineno, _parse_line(raw, lineno, path)
            good = True


class Validator:
    """Incremental form of :func:`validate`: feed ops with :meth:`step`; keeps only the open invocations."""

    __slots__ = ("open", "last_time", "path")

    def __init__(self, path: str | os.PathLike[str] | None = None):
        self.open: dict[Hashable, Op] = {}
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
        if type(op.f) is not str:
            raise HistoryError(f"field 'f' must be a string, got {op.f!r:.40}", line=line, path=self.path)
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


def read_history_lines(path: str | os.PathLike[str]) -> Iterator[tuple[int, Op]]:
    """As :func:`read_history` (validating), but yields ``(1-based line number, op)``, so a later
    check can name the line of an op it refuses."""
    p = Path(path)
    v = Validator(p)
    for lineno, op in _numbered(p):
        v.step(op, lineno)
        yield lineno, op


def _read_all(pieces: list[bytes], path: Path, exact_ints: bool = False) -> tuple[list[Op], array[int]]:
    """Every op of a whole history file (its bytes split at each newline), validated, with its line numbers: what
    :func:`read_history_lines` yields, in one tight loop. A line in the common shape (a flat
    object orjson reads, one ``:`` per key, only known fields, an int ``time``, a known ``type``,
    an integer process pairing as it should) is taken here; any other line goes through
    :func:`_parse_line` and :meth:`Validator.step`, which raise the exact errors. ``exact_ints``:
    the file may hold an integer beyond 64 bits (:func:`may_hold_big_int`), so the lines that may
    hold one go through :func:`_parse_line` too."""
    ops: list[Op] = []
    lines = array("q")
    add_op, add_line = ops.append, lines.append
    v = Validator(path)
    open_ = v.open
    step = v.step
    loads, known, invoke = orjson.loads, _KNOWN_SET, INVOKE
    completions = frozenset(TYPES) - {INVOKE}
    last = -(2**63)
    shallow = 2 * MAX_DEPTH
    torn = pieces.pop()  # b"" when the file ends with a newline; else its last line, unterminated
    lineno = 0
    for raw in pieces:
        lineno += 1
        try:
            d = None if exact_ints and may_hold_big_int(raw) else loads(raw)
        except orjson.JSONDecodeError:
            d = None
        op = None
        if (
            type(d) is dict
            and raw.count(b":") == len(d)
            and d.keys() <= known
            and (len(raw) <= shallow or raw.count(b"[") + raw.count(b"{") <= MAX_DEPTH)
            and type(t := d.get("time", 0)) is int
            and t >= last
            and type(i := d.get("index", -1)) is int
            and type(proc := d.get("process")) is int
            and type(fn := d.get("f")) is str
        ):
            typ = d.get("type")
            if typ == invoke:
                if proc not in open_:
                    op = open_[proc] = Op(
                        typ, proc, fn, d.get("value"), t, i, d.get("node"), d.get("error"), d.get("key"), {}
                    )
            elif typ in completions:
                inv = open_.get(proc)
                if inv is not None and inv.f == fn:
                    del open_[proc]
                    op = Op(
                        typ, proc, fn, d.get("value"), t, i, d.get("node"), d.get("error"), d.get("key"), {}
                    )
            if op is not None:
                last = v.last_time = t
        elif not raw or raw.isspace():
            continue
        if op is None:  # any other line: the exact reader, which raises the exact error
            op = _parse_line(raw, lineno, path)
            step(op, lineno)
            last = v.last_time
        add_op(op)
        add_line(lineno)
    if torn:
        lineno += 1
        try:
            op = _parse_line(torn, lineno, path)
        except HistoryError:
            if not ops:  # a file of one torn line is garbage, not a torn history
                raise
        else:
            step(op, lineno)
            add_op(op)
            add_line(lineno)
    return ops, lines


class ParsedHistory:
    """A history read and validated once, held for every checker of one run.

    ``chaos check`` used to read a history up to three times (workload inference, the stream
    checkers, the linear checker's ops); a composition now reads it once into this and hands the
    same ops to each. ``ops[i]`` is the i-th op of the file and ``lines[i]`` its 1-based line, so
    a checker refusing an op can still name its line. Holds every op in memory (the linear search
    needs that anyway); compositions of stream checkers only keep streaming from the path.

    Raises (from :meth:`read`) HistoryError / FileNotFoundError as :func:`read_history`.
    """

    __slots__ = ("path", "ops", "lines")

    def __init__(self, path: Path, ops: list[Op], lines: array[int]):
        self.path = path
        self.ops = ops
        self.lines = lines

    @classmethod
    def read(cls, path: str | os.PathLike[str]) -> ParsedHistory:
        p = Path(path)
        with open(p, "rb") as f:
            data = f.read()
        exact = may_hold_big_int(data)
        pieces = data.split(b"\n")
        del data  # the whole file is not kept beside its lines
        # every op is kept: the cyclic collector would rescan the growing list again and again
        # (about a third of the read) and can find no cycle among freshly parsed JSON values
        was = gc.isenabled()
        gc.disable()
        try:
            ops, lines = _read_all(pieces, p, exact)
        finally:
            if was:
                gc.enable()
        return cls(p, ops, lines)

    def __len__(self) -> int:
        return len(self.ops)

    def __iter__(self) -> Iterator[Op]:
        return iter(self.ops)

    def numbered(self) -> Iterator[tuple[int, Op]]:
        """``(1-based line, op)`` pairs, as :func:`read_history_lines` yields them."""
        return zip(self.lines, self.ops, strict=True)

    def line_of_index(self, index: int) -> int | None:
        """The line of the op whose ``index`` field is ``index`` (None if no op has it)."""
        return next((n for n, o in zip(self.lines, self.ops, strict=True) if o.index == index), None)


def parsed(history: str | os.PathLike[str] | ParsedHistory) -> ParsedHistory:
    """``history`` itself if already parsed, else the file read once (:meth:`ParsedHistory.read`)."""
    return history if isinstance(history, ParsedHistory) else ParsedHistory.read(history)


def pair(ops: Iterable[Op]) -> Iterator[tuple[Op, Op | None]]:
    """Pair invocations with their completions, streaming.

    Yields ``(invocation, completion)`` in completion order, then ``(invocation, None)`` for every
    invocation that never completed (in invocation order). Nemesis ops pair per f (info, info).
    The ops are assumed valid (see :func:`validate`); a completion without an invocation, which
    validation forbids, is yielded as ``(completion, None)``.
    """
    open_: dict[Hashable, Op] = {}
    for op in ops:
        if op.process == NEMESIS:
            k: object = (NEMESIS, op.f)
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


def _write_json_atomic(path: Path, data: object) -> None:
    tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
    text = text_only(json.dumps(data, indent=2, sort_keys=False, default=str, ensure_ascii=False))
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(text + "\n")
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

    def write_test(self, test: dict[str, object]) -> None:
        """Write ``test.json`` atomically (values that are not JSON are written as strings)."""
        _write_json_atomic(self.test_path, test)

    def write_results(self, results: dict[str, object]) -> None:
        """Write ``results.json`` atomically."""
        _write_json_atomic(self.results_path, results)

    def _load(self, path: Path) -> dict[str, object]:
        try:
            with open(path, encoding="utf-8") as f:
                d = json.load(f)
        except FileNotFoundError:
            raise FileNotFoundError(f"{path}: no such file in run directory {self.path}") from None
        except ValueError as e:
            raise ValueError(f"{path}: not valid JSON ({e})") from None
        except RecursionError:
            raise ValueError(f"{path}: not valid JSON (nested too deep)") from None
        if not isinstance(d, dict):
            raise ValueError(f"{path}: expected a JSON object")
        return d

    def load_test(self) -> dict[str, object]:
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
