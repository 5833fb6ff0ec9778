"""A streaming EDN reader for Jepsen histories: op maps straight from the file, in bounded memory.

Jepsen writes ``history.edn`` one op per line (``jepsen.store/write-history!`` prints each op with
``prn``): ``#jepsen.history.Op{:index 0, :time 1000, :type :invoke, :process 3, :f :txn, :value
[[:r 5 nil] [:append 7 1]]}`` (Jepsen 0.3; older versions print plain maps). Knossos and Elle test
data wrap the ops in one top-level vector or list, or pretty-print a map over several lines.

:func:`records` yields ``(line, map)`` for each op map of a file, reading it in blocks of about
:data:`BLOCK` bytes (never the whole file, never a tree of the whole file):

- **fast path**: a block of such lines is rewritten into JSON text with a few passes of C string
  operations (keywords become strings, ``nil`` null, vectors, lists and sets arrays, the op map a
  flat array of keys and values), and each line is decoded by orjson. A line the rewrite does not
  give a single flat op map for (a nested map, a tag other than ``#jepsen.history.Op``, a symbol,
  a comment, an escape in a string, a number orjson would round) goes to the generic reader.
- **generic reader** (:class:`Reader`): a tokenizer and a stack machine fed one line at a time, so a
  form may span lines (a top-level vector, a pretty-printed map, a string with a newline).

The two give the same values: keywords as strings without the colon (``:read`` -> ``"read"``),
vectors, lists and sets as lists, ``nil`` None, tags dropped (``#inst "..."`` is its string),
``#_`` discards the next form. Errors are ``chaos.history.store.HistoryError`` naming the file and
the 1-based line: bytes that are not UTF-8, an unclosed or mismatched bracket, nesting deeper than
``MAX_DEPTH``, a map with an odd number of forms or a key given twice (``clojure.edn`` refuses
those), a lone surrogate escape, ``##NaN`` / ``##Inf`` or a float literal beyond the double range
(not a value any history holds), an integer of more than :data:`MAX_DIGITS` digits.

The fast path's speed is measured by ``bench/elle.py --format edn`` beside JSON Lines.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Hashable, Iterator
from pathlib import Path
from typing import Any

import orjson

from chaos.history.store import MAX_DEPTH, HistoryError, may_hold_big_int
from chaos.history.store import MAX_INT_DIGITS as MAX_DIGITS

BLOCK = 1 << 20  # bytes read and rewritten at a time

_TOKEN = re.compile(
    r"""(?P<ws>[\s,]+)
    |(?P<comment>;[^\n]*)
    |(?P<str>"(?:[^"\\]|\\.)*")
    |(?P<ustr>"(?:[^"\\]|\\.)*\\?\Z)
    |(?P<open>\#\{|[\[{(])
    |(?P<close>[\]})])
    |(?P<disc>\#_)
    |(?P<tag>\#[A-Za-z][^\s,;"\[\]{}()]*)
    |(?P<atom>[^\s,;"\[\]{}()]+)
    |(?P<bad>.)""",
    re.X | re.S,
)
_INT = re.compile(r"[+-]?\d+N?")
_FLOAT = re.compile(r"[+-]?\d+(\.\d*)?([eE][+-]?\d+)?M?")
_CLOSERS = {"[": "]", "(": ")", "{": "}", "#{": "}"}


def _atom(s: str, line: int, path: Path | str) -> object:
    """The value of a bare token: nil, true, false, a keyword (its name), a number, a character
    (its text), else a symbol (its text)."""
    if s == "nil":
        return None
    if s == "true":
        return True
    if s == "false":
        return False
    if s[0] == ":":
        return s[1:]
    if s[0] == "#" and s[1:2] == "#":
        raise HistoryError(
            f"EDN: {s} is not a history value (expected a finite number)", line=line, path=path
        )
    if _INT.fullmatch(s):
        digits = len(s.strip("+-N"))
        if digits > MAX_DIGITS:
            raise HistoryError(
                f"EDN: an integer of {digits} digits (expected at most {MAX_DIGITS})", line=line, path=path
            )
        return int(s.rstrip("N"))
    if _FLOAT.fullmatch(s):
        f = float(s.rstrip("M"))
        if not math.isfinite(f):
            raise HistoryError(
                f"EDN: {s[:40]} is beyond the range of a double (expected a finite number)",
                line=line,
                path=path,
            )
        return f
    if s[0] == "\\":
        return s[1:]
    return s


def _string(text: str, line: int, path: Path | str) -> str:
    """A string literal's text. HistoryError for a lone surrogate escape (``"\\ud800"``): not
    Unicode text, refused as the JSON Lines reader refuses it."""
    try:
        s = json.loads(text.replace("\n", "\\n").replace("\t", "\\t").replace("\r", "\\r"))
    except ValueError:
        return text[1:-1]
    try:
        s.encode("utf-8")
    except UnicodeEncodeError as e:
        raise HistoryError(
            f"EDN: a lone surrogate \\u{ord(s[e.start]):04x} in a string is not Unicode text",
            line=line,
            path=path,
        ) from None
    return str(s)


def _hashable(v: object) -> object:
    if isinstance(v, list):
        return tuple(_hashable(x) for x in v)
    if isinstance(v, dict):
        return tuple(sorted((str(k), _hashable(x)) for k, x in v.items()))
    return v


class _Frame:
    __slots__ = ("opener", "items", "line", "discard")

    def __init__(self, opener: str, line: int):
        self.opener = opener
        self.items: list[object] = []
        self.line = line
        self.discard = 0


class Reader:
    """The generic EDN reader: feed it lines with :meth:`feed`, it returns the top-level forms they
    complete as ``(line of the form's first token, form)``; the elements of a top-level vector or
    list count as top-level forms (knossos wraps its histories in one). Non-recursive: nesting is
    bounded by ``MAX_DEPTH`` with a HistoryError, never a RecursionError."""

    def __init__(self, path: Path | str):
        self.path = path
        self.stack: list[_Frame] = []
        self.top: tuple[str, int] | None = None  # the open top-level vector/list: (opener, line)
        self.discard = 0  # pending #_ at the top level
        self.carry = ""  # an unterminated string, continued on the next line
        self.carry_line = 0

    @property
    def idle(self) -> bool:
        """True between top-level forms: a line may then be read without this reader."""
        return not self.stack and not self.carry and not self.discard

    def feed(self, text: str, line: int) -> list[tuple[int, object]]:
        """The forms completed by ``text`` (one line, with or without its newline)."""
        out: list[tuple[int, object]] = []
        if self.carry:
            text = self.carry + text
            first = self.carry_line
            self.carry = ""
        else:
            first = line
        for m in _TOKEN.finditer(text):
            kind = m.lastgroup
            tline = first if m.start() == 0 else line
            if kind == "ws" or kind == "comment":
                continue
            s = m.group()
            if kind == "atom":
                self._done(_atom(s, tline, self.path), tline, out)
            elif kind == "str":
                self._done(_string(s, tline, self.path), tline, out)
            elif kind == "ustr":
                self.carry, self.carry_line = s, tline
            elif kind == "open":
                self._open(s, tline)
            elif kind == "close":
                self._close(s, tline, out)
            elif kind == "disc":
                if self.stack:
                    self.stack[-1].discard += 1
                else:
                    self.discard += 1
            elif kind == "bad":
                raise HistoryError(f"EDN: unexpected character {s!r}", line=tline, path=self.path)
            # a tag: dropped, the next form stands for itself
        return out

    def _open(self, s: str, line: int) -> None:
        if not self.stack and self.top is None and not self.discard and s in ("[", "("):
            self.top = (s, line)
            return
        if len(self.stack) >= MAX_DEPTH:
            raise HistoryError(
                f"EDN: a value nested deeper than {MAX_DEPTH} levels", line=line, path=self.path
            )
        self.stack.append(_Frame(s, line))

    def _close(self, s: str, line: int, out: list[tuple[int, object]]) -> None:
        if not self.stack:
            if self.top is not None and not self.discard and s == _CLOSERS[self.top[0]]:
                self.top = None
                return
            raise HistoryError(f"EDN: unexpected {s!r}", line=line, path=self.path)
        fr = self.stack.pop()
        if s != _CLOSERS[fr.opener]:
            raise HistoryError(
                f"EDN: expected {_CLOSERS[fr.opener]!r} to close {fr.opener!r} from line {fr.line}, got {s!r}",
                line=line,
                path=self.path,
            )
        if fr.discard:
            raise HistoryError("EDN: #_ with nothing after it to discard", line=line, path=self.path)
        value: object = self._map(fr.items, fr.line) if fr.opener == "{" else fr.items
        self._done(value, fr.line, out)

    def _done(self, value: object, line: int, out: list[tuple[int, object]]) -> None:
        if self.stack:
            fr = self.stack[-1]
            if fr.discard:
                fr.discard -= 1
            else:
                fr.items.append(value)
        elif self.discard:
            self.discard -= 1
        else:
            out.append((line, value))

    def _map(self, items: list[object], line: int) -> dict[Hashable, object]:
        """A map literal's forms as a dict. HistoryError for an odd number of forms or a key given
        twice (``clojure.edn`` refuses that map as "Duplicate key"; never last-wins)."""
        if len(items) % 2:
            raise HistoryError("EDN: a map with an odd number of forms", line=line, path=self.path)
        out: dict[Hashable, object] = {}
        for j in range(0, len(items), 2):
            key = _hashable(items[j])
            if key in out:
                raise HistoryError(
                    f"EDN: the key {items[j]!r} appears twice in one map; expected each key once",
                    line=line,
                    path=self.path,
                )
            out[key] = items[j + 1]
        return out

    def finish(self, last_line: int) -> None:
        """HistoryError if the file ended inside a form."""
        if self.carry:
            raise HistoryError(
                "EDN: a string opened here is never closed", line=self.carry_line, path=self.path
            )
        if self.stack:
            fr = self.stack[0]
            raise HistoryError(
                f"EDN: {fr.opener!r} opened here is never closed", line=fr.line, path=self.path
            )
        if self.top is not None:
            raise HistoryError(
                f"EDN: {self.top[0]!r} opened here is never closed", line=self.top[1], path=self.path
            )
        if self.discard:
            raise HistoryError("EDN: #_ with nothing after it to discard", line=last_line, path=self.path)


# ------------------------------------------------------------------------------------------------
# the fast path: a block of one-op-map lines rewritten into JSON, a line at a time decoded by orjson

_MARK = "\x02"  # an op map's opening brace at the start of a line
_SENTINEL = '["\\u0000",'  # ... becomes an array whose first element no EDN line gives here
_KEYWORD = re.compile(r":([^,\[\]{}\n\x01\x02\"]+)")
_SPACES = re.compile(r"[ \t\r,]+")
# orjson reads an integer beyond 64 bits as a float: a block that may hold one
# (chaos.history.store.may_hold_big_int) is read a line at a time, and such a line by the generic
# reader, which keeps the integer exact
# Jepsen 0.3's op line (``prn`` of a jepsen.history.Op: index, time, type, process, f, value, then
# any other field), a field at a time: each pair is one pass of str.replace over the block, done
# before spaces become commas
_STATES = ("invoke", "ok", "fail", "info")
_MOPS = (("[:append ", '["append",'), ("[:r ", '["r",'), ("[:w ", '["w",'))
_JEPSEN = (
    ("\n#jepsen.history.Op{:index ", "\n" + _SENTINEL + '"index",'),
    (", :time ", ',"time",'),
    *((f", :type :{t}, ", f',"type","{t}", ') for t in _STATES),
    (", :process ", ',"process",'),
    (", :f :txn, ", ',"f","txn", '),
    (", :value ", ',"value",'),
    *_MOPS,
)
# ... and straight into a JSON object, which orjson makes the op's dict: a block without sets
# (whose closing brace is a map's), keys known; a line with any other key is not valid JSON then,
# and is read again as an array
_JEPSEN_OBJECT = (
    ("\n#jepsen.history.Op{:index ", '\n{"index"\x03'),
    (", :time ", ',"time"\x03'),
    *((f", :type :{t}, ", f',"type"\x03"{t}", ') for t in _STATES),
    (", :process ", ',"process"\x03'),
    (", :f :txn, ", ',"f"\x03"txn", '),
    (", :value ", ',"value"\x03'),
    *_MOPS,
)
# Jepsen 0.2 printed plain maps, :type first and :index last (Elle's huge-scc.edn)
_JEPSEN_02 = (
    *((f"\n{{:type :{t}, ", f'\n{{"type"\x03"{t}", ') for t in _STATES),
    (", :index ", ',"index"\x03'),
)
# what is left of the keywords of Jepsen and Elle histories, after spaces became commas
_VOCAB = ("index", "time", "type", "process", "f", "value", "invoke", "ok", "fail", "info", "txn", "r", "w")
_VOCAB_REPLACE = tuple((f":{k}{d}", f'"{k}"{d}') for k in (*_VOCAB, "append", "nemesis") for d in (",", "]"))


def _keywords(text: str) -> str:
    """Every keyword of ``text`` (spaces already commas) as a JSON string."""
    for a, b in _VOCAB_REPLACE:
        if a in text:
            text = text.replace(a, b)
    if ":" in text:
        parts = _KEYWORD.split(text)
        parts[1::2] = map('"{}"'.format, parts[1::2])
        text = "".join(parts)
    return text


def _restore_strings(text: str, inner: list[str]) -> str:
    """``text`` with each ``\x01`` (a string set apart before the rewrite) replaced by the next of
    ``inner``, quoted again."""
    pieces = text.split("\x01")
    joined: list[str] = [""] * (len(pieces) + len(inner))
    joined[0::2] = pieces
    joined[1::2] = inner
    return '"'.join(joined)


def translate(block: str, loose: bool = False, obj: bool = False) -> list[str] | None:
    """JSON text for each line of ``block`` (lines ending in a newline): a line holding one op map
    becomes ``["\\u0000", k1, v1, k2, v2, ...]``; other lines become text orjson refuses or
    decodes to something else (the caller then reads them with :class:`Reader`). None when the
    block as a whole has something the rewrite cannot keep apart (escapes in strings, a string
    spanning lines, an integer orjson would read as a float): read it a line at a time.
    ``loose``: first make every run of spaces, tabs and commas one space (lines laid out by hand).
    ``obj``: an op map in Jepsen's layout becomes a JSON object instead (``{"index":0,...}``): the
    caller checks each line decodes to a dict with as many keys as ``":`` in its text."""
    if "\\" in block or "\x01" in block or "\x02" in block or "\x03" in block:
        return None
    inner: list[str] = []
    text = block
    if '"' in block:
        parts = block.split('"')
        if len(parts) % 2 == 0:
            return None
        inner = parts[1::2]
        text = "\x01".join(parts[0::2])
        if text.count("\n") != block.count("\n"):
            return None
    if may_hold_big_int(text.encode("utf-8", "surrogatepass")):
        return None
    text = "\n" + text
    if loose:
        text = _SPACES.sub(" ", text).replace("\n ", "\n").replace(" \n", "\n")
    if obj and "\n{:type :" in text:
        for a, b in _JEPSEN_02:
            text = text.replace(a, b)
    for a, b in _JEPSEN_OBJECT if obj else _JEPSEN:
        text = text.replace(a, b)
    if obj:
        text = text.replace(", ", ",").replace(" ", ",").replace("(", "[").replace(")", "]")
    else:
        if "#" in text:
            text = text.replace("#jepsen.history.Op{", "{").replace("#{", "[")
        text = text.replace(", ", ",").replace(" ", ",").replace("\n{", "\n" + _MARK)
        text = text.replace("}", "]").replace("(", "[").replace(")", "]")
    if ":" in text:
        text = _keywords(text)
    text = text.replace(",nil", ",null").replace("[nil", "[null")
    if _MARK in text:
        text = text.replace(_MARK, _SENTINEL)
    if obj:
        text = text.replace("\x03", ":")
    if inner:
        text = _restore_strings(text, inner)
    return text[1:].split("\n")


# Jepsen 0.3's op line as a JSON row ``[index, time, type, process, f, value]`` (no keys, so fewer
# passes than the object form and no dict per op): the header fields in the order ``prn`` of a
# ``jepsen.history.Op`` gives them. A line with another layout or more fields gives a row of
# another length or text orjson refuses, and is read the general way.
_ROW_HEADER = (
    ("\n#jepsen.history.Op{:index ", "\n["),
    (", :time ", ","),
    (", :type :", ',"'),
    (", :process ", '",'),
    (", :f :txn, :value ", ',"txn",'),  # every op of a transactional history: one pass, not two
)
_ROW_F = ((", :f :", ',"'), (", :value ", '",'))
_ROW_TABLE = str.maketrans(" })(", ",]][")


def row_lines(block: str) -> list[str] | None:
    """:func:`row_text` a line at a time (its lines, the last one empty), or None."""
    t = row_text(block)
    return None if t is None else t.split("\n")


def row_text(block: str) -> str | None:
    """JSON text for each line of ``block`` (whole lines, each ending in a newline): a Jepsen 0.3
    op line becomes the row ``[index, time, type, process, f, value]``; any other line becomes
    text that orjson refuses or that decodes to something other than such a row (the caller reads
    it with :func:`records_of_text` or :class:`Reader`). None when the block has what the rewrite
    cannot keep apart (backslashes, a string spanning lines, sets, an integer orjson would read as
    a float): then read it as :func:`records` does. About a dozen passes of C string operations
    over the block, whatever its number of lines."""
    if "\\" in block or "\x01" in block or "#{" in block:
        return None
    text = "\n" + block
    inner: list[str] = []
    if '"' in block:
        parts = text.split('"')
        if len(parts) % 2 == 0:
            return None
        inner = parts[1::2]
        text = "\x01".join(parts[0::2])
        if text.count("\n") != block.count("\n") + 1:
            return None
    if may_hold_big_int(text.encode("utf-8", "surrogatepass")):
        return None
    for a, b in _ROW_HEADER:
        text = text.replace(a, b)
    for a, b in _ROW_F:
        if a in text:
            text = text.replace(a, b)
    if ":nemesis," in text:
        text = text.replace('",:nemesis,', '","nemesis",')
    for a, b in _MOPS:
        if a in text:
            text = text.replace(a, b)
    text = text.translate(_ROW_TABLE)
    if ",," in text:
        text = text.replace(",,", ",")
    if ":" in text:
        text = _keywords(text)
        if "nil" in text:
            text = text.replace(",nil", ",null").replace("[nil", "[null")
    elif "nil" in text:
        # no keyword became a string and the strings are set apart: any other nil is in a symbol,
        # which orjson refuses either way
        text = text.replace("nil", "null")
    if inner:
        text = _restore_strings(text, inner)
    return text[1:]


# A file at least this large is rewritten into rows by a forked process while this one reads them
PIPELINE_BYTES = 8 << 20
AHEAD = 16  # blocks the child may run ahead of the caller (memory: a few MiB each)


def row_blocks(path: str | Path) -> Iterator[tuple[int, list[str], list[str] | None]]:
    """``(first line, lines, rows)`` for blocks of whole lines of an EDN file: ``lines`` the
    block's lines (without newlines), ``rows`` their :func:`row_lines` (None for a block it
    cannot rewrite). Raises HistoryError for bytes that are not UTF-8.

    A file of :data:`PIPELINE_BYTES` or more is read and rewritten by a forked child process, a
    few blocks ahead of the caller, which gets each block's text and rows through a pipe (two
    strings a block: the rewrite is string operations in C, its text cheap to send, so the caller
    spends its time on the ops while the second core rewrites). Without ``fork``, or for a
    smaller file, in this process."""
    p = Path(path)
    texts = (
        _pipelined(p)
        if _can_pipeline(p)
        else ((first, block, row_text(block)) for first, _o, block in _blocks(p))
    )
    for first, block, rows in texts:
        lines = block.split("\n")
        lines.pop()
        yield first, lines, rows.split("\n") if rows is not None else None


def _can_pipeline(path: Path) -> bool:
    """A large file, ``fork``, and no other thread (a forked child must not need a lock another
    thread held)."""
    import os
    import threading

    try:
        big = path.stat().st_size >= PIPELINE_BYTES
    except OSError:
        return False
    return big and hasattr(os, "fork") and threading.active_count() == 1


def _rewrite_into(conn: Any, path: Path) -> None:
    """The child of :func:`_pipelined`: ``(first line, block, rows text)`` for each block into
    ``conn``, then None; ``("bad",)`` at a block that is not UTF-8 (the caller reads from that
    block on itself, to raise the exact error)."""
    try:
        for first, _offset, block in _blocks(path):
            conn.send((first, block, row_text(block)))
        conn.send(None)
    except HistoryError:
        conn.send(("bad",))


def _pipelined(path: Path) -> Iterator[tuple[int, str, str | None]]:
    """``(first line, block, rows text)`` of :func:`_blocks` and :func:`row_lines`, computed by a
    forked child (:func:`_rewrite_into`) that runs ahead by what the pipe holds; the child is
    ended if the caller stops early."""
    import os
    import queue
    import signal
    import threading
    from multiprocessing.connection import Connection

    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: never returns
        code = 1
        try:
            os.close(r)
            _rewrite_into(Connection(w, readable=False), path)
            code = 0
        except BaseException:
            pass
        finally:
            os._exit(code)
    os.close(w)
    recv = Connection(r, writable=False)
    # a thread empties the pipe into a queue, so the child runs ahead of the caller by up to
    # ``AHEAD`` blocks rather than by what the pipe holds (64 KiB: lock step)
    q: queue.Queue[Any] = queue.Queue(maxsize=AHEAD)

    def pump() -> None:
        try:
            while True:
                item = recv.recv()
                q.put(item)
                if item is None or item[0] == "bad":
                    return
        except (EOFError, OSError):
            q.put(EOFError)

    thread = threading.Thread(target=pump, name="edn-rows", daemon=True)
    thread.start()
    done = 0  # the first line of the last block handed out
    try:
        while True:
            item = q.get()
            if item is EOFError:
                raise HistoryError("EDN: the process reading the file ended early", path=path)
            if item is None:
                return
            if item[0] == "bad":  # the blocks from the bad one on, read here: the exact error
                for first, _o, block in _blocks(path):
                    if first > done:
                        yield first, block, row_text(block)
                return
            done = item[0]
            yield item
    finally:
        try:  # kill the child only while it is ours to reap (never a reused pid)
            if os.waitpid(pid, os.WNOHANG)[0] == 0:
                os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
        except ChildProcessError:
            pass
        while thread.is_alive():  # the pump ends at the pipe's end; never leave it blocked on put
            try:
                q.get(timeout=0.05)
            except queue.Empty:
                pass
        thread.join()
        recv.close()


def _lines_of(data: bytes, first: int, path: Path | str) -> str:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        line = first + data.count(b"\n", 0, e.start)
        raise HistoryError(f"not UTF-8 (byte {data[e.start]:#04x})", line=line, path=path) from None


def _blocks(path: Path) -> Iterator[tuple[int, int, str]]:
    """(first line number, byte offset, text) of blocks of whole lines, each ending in a newline."""
    line = 1
    offset = 0
    rest = b""
    with open(path, "rb") as f:
        while True:
            data = f.read(BLOCK)
            if not data:
                break
            data = rest + data
            cut = data.rfind(b"\n") + 1
            if cut == 0:
                rest = data
                continue
            rest = data[cut:]
            yield line, offset, _lines_of(data[:cut], line, path)
            line += data.count(b"\n", 0, cut)
            offset += cut
    if rest:
        yield line, offset, _lines_of(rest, line, path) + "\n"


def records(path: str | Path) -> Iterator[tuple[int, Any, bool]]:
    """``(line, form, fast)`` for each top-level form of an EDN file (the elements of a top-level
    vector or list count as top-level forms), in file order. An op map is a dict with its keywords
    as strings. ``fast`` is True when the form is the whole of its line (so re-reading that line
    alone gives it again: :func:`read_line`). Raises HistoryError naming the file and line."""
    p = Path(path)
    reader = Reader(p)
    line = 0
    loads, JSONDecodeError, dict_ = orjson.loads, orjson.JSONDecodeError, dict
    for first, _offset, block in _blocks(p):
        translated = None
        if reader.idle:
            translated = translate(block, obj="#{" not in block)
        for i, raw in enumerate(block.split("\n")[:-1]):
            line = first + i
            if not (reader.stack or reader.carry or reader.discard):  # reader.idle, inlined
                if translated is not None:
                    t = translated[i]
                    if t[:2] == '{"':
                        try:
                            d = loads(t)
                        except JSONDecodeError:
                            d = None
                        if type(d) is dict_ and len(d) == t.count('":'):
                            yield line, d, True
                            continue
                    d = _fast(_translate_line(raw) if t[:1] == "{" else t)
                else:
                    d = _fast(_translate_line(raw))
                if d is None and ("  " in raw or "\t" in raw or raw[:1] == " "):
                    d = _fast(_translate_line(raw, loose=True))
                if d is not None:
                    yield line, d, True
                    continue
            for fl, form in reader.feed(raw + "\n", line):
                yield fl, form, False
    reader.finish(line)


class LineForms:
    """The forms of an EDN file a line at a time, for a caller that reads most lines itself
    (:func:`row_blocks`) and hands the others here in file order: a line read alone when it holds
    one op map (as :func:`records` reads it), else fed to a :class:`Reader` (a form over several
    lines). :attr:`idle` says whether the next line may be read without this."""

    def __init__(self, path: Path | str):
        self.reader = Reader(path)
        self.last = 0

    @property
    def idle(self) -> bool:
        r = self.reader
        return not (r.stack or r.carry or r.discard)

    def forms(self, line: int, raw: str) -> list[tuple[int, object, bool]]:
        """``(line, form, fast)`` for what ``raw`` (line ``line``, without its newline) completes."""
        self.last = line
        if self.idle:
            d = _fast(_translate_line(raw))
            if d is None and ("  " in raw or "\t" in raw or raw[:1] == " "):
                d = _fast(_translate_line(raw, loose=True))
            if d is not None:
                return [(line, d, True)]
        return [(fl, form, False) for fl, form in self.reader.feed(raw + "\n", line)]

    def finish(self) -> None:
        """HistoryError if the file ended inside a form."""
        self.reader.finish(self.last)


def _fast(
    t: str | None, shallow: int = 2 * MAX_DEPTH, loads: Any = orjson.loads
) -> dict[Hashable, object] | None:
    """The op map of one translated line, or None when it is not one (then the generic reader
    reads the line, and raises the exact error if there is one)."""
    if t is None or t[:2] != '["' or (len(t) > shallow and t.count("[") > MAX_DEPTH):
        return None
    try:
        r = loads(t)
    except orjson.JSONDecodeError:
        return None
    if type(r) is not list or not r or r[0] != "\x00":
        return None
    it = iter(r)
    next(it)
    try:
        d = dict(zip(it, it, strict=False))
    except TypeError:  # a key that is a vector or map: the generic reader makes it hashable
        return None
    return d if 2 * len(d) + 1 == len(r) else None


def _translate_line(raw: str, loose: bool = False) -> str | None:
    t = translate(raw + "\n", loose)
    return t[0] if t is not None else None


def read_line(path: str | Path, offset: int, line: int, first: int) -> object:
    """The form on ``line`` of ``path``, read alone: the block holding it starts at byte ``offset``
    with line ``first`` (as :func:`records` read it). For a form :func:`records` gave as ``fast``."""
    with open(path, "rb") as f:
        f.seek(offset)
        for _ in range(line - first):
            f.readline()
        raw = f.readline().decode("utf-8")
    for _line, form, _fast in records_of_text(raw, line, path):
        return form
    return None


def records_of_text(text: str, line: int, path: str | Path) -> Iterator[tuple[int, object, bool]]:
    """As :func:`records` for one line of text (its number ``line``)."""
    raw = text.rstrip("\n")
    d = _fast(_translate_line(raw)) or _fast(_translate_line(raw, loose=True))
    if d is not None:
        yield line, d, True
        return
    reader = Reader(path)
    for fl, form in reader.feed(raw + "\n", line):
        yield fl, form, False
