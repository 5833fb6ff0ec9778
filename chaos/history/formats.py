"""History importers: our JSON Lines, Jepsen/knossos EDN, porcupine's etcd Jepsen logs and kv logs.

``load_history(path)`` gives the ops and the model spec the format implies (``chaos.history.checkers.models``).

- ``jsonl``: ``chaos.history.store.read_history`` (our format, docs/design.md); model ``cas-register``.
- ``edn``: a Jepsen ``history.edn`` or a knossos test history: one vector/list of op maps, or op maps
  one after another (an op map without :f whose :value is a list of [f k v] micro-ops is a
  ``txn``, as in Elle's README). Keywords become strings (``:read`` -> ``"read"``), vectors and lists become
  lists, ``:process :nemesis`` stays ``"nemesis"``. Op times are the op's position (knossos orders by
  history position, not ``:time``; the original ``:time`` is kept as ``edn_time``). The implied model
  follows knossos's tests: ``multi-register`` for ``:txn`` ops, ``mutex`` for acquire/release, else
  ``cas-register``; all with knossos's rule that a read of nil matches any value. A
  ``jepsen.independent`` history (``:value [k v]`` tuples) is split per key (``op.key = k``).
  Read streaming by :mod:`chaos.history.edn` (Jepsen's one-op-per-line layout rewritten to JSON a
  block at a time; anything else by a generic reader); its errors name the line. A transaction
  history goes to the Elle checker without Op objects (:func:`chaos.history.checkers.elle.edn.collect_edn`).
- ``porcupine-etcd``: porcupine's ``test_data/jepsen/etcd_NNN.log``, read as porcupine's
  ``parseJepsenLog``: the line number is the time; ``:info`` lines leave the op open (crashed);
  ``:fail :read :timed-out`` is a failed read (no information); ``:fail :cas`` is a completed cas whose
  compare failed (``compare_failed: true``, porcupine's ``etcdModel``); other lines are ignored.
  Model ``cas-register`` (initial value nil).
- ``porcupine-kv``: porcupine's ``test_data/kv/cNN-*.txt``, one EDN map per line with ``:key``;
  model ``kv`` with initial value ``""`` (porcupine's ``kvModel``).

Errors are ``chaos.history.store.HistoryError`` with the file and 1-based line number.
"""

from __future__ import annotations

import os
import re
from collections.abc import Hashable, Iterator
from pathlib import Path

from chaos.history.edn import records
from chaos.history.op import NEMESIS, TYPES, Op
from chaos.history.store import HistoryError, Validator, read_history

FORMATS = ("jsonl", "edn", "porcupine-etcd", "porcupine-kv")


def load_history(path: str | os.PathLike[str], format: str = "auto") -> tuple[list[Op], str]:
    """Read a history file (or a run directory holding ``history.jsonl``, or a Jepsen store
    directory holding ``history.edn``).

    Args:
        path: the file, or a run directory.
        format: one of FORMATS, or ``auto`` (by file name, then by content).
    Returns:
        (ops in history order, the model spec the format implies).
    Raises:
        HistoryError: malformed content, naming the file and line.
        ValueError: unknown ``format``. FileNotFoundError: no such file.
    """
    p = Path(path)
    if p.is_dir():  # a run directory, or a Jepsen store directory (history.edn)
        p = (
            p / "history.jsonl"
            if (p / "history.jsonl").exists() or not (p / "history.edn").exists()
            else p / "history.edn"
        )
    format = detect_format(p) if format == "auto" else check_format(p, format)
    if format == "jsonl":
        ops = list(read_history(p))
        return ops, _jsonl_model(ops)
    if format == "edn":
        return load_edn(p)
    if format == "porcupine-etcd":
        return load_porcupine_etcd(p), "cas-register"
    if format == "porcupine-kv":
        return load_porcupine_kv(p), 'kv:init=""'
    raise ValueError(f"format {format!r}: expected auto or one of {', '.join(FORMATS)}")


# the formats a file's name promises (a name without one of these suffixes promises none)
_NAMED_FORMATS = {".jsonl": ("jsonl",), ".json": ("jsonl",), ".edn": ("edn", "porcupine-kv")}


def check_format(path: Path, format: str) -> str:
    """``format`` (as ``--format`` gave it) when ``path``'s name does not say otherwise; ValueError
    naming both when it does (``--format edn`` on a ``.jsonl`` file), since reading a file as
    another format gives ops it never held or a confusing parse error."""
    if format not in FORMATS:
        raise ValueError(f"--format {format}: expected auto or one of {', '.join(FORMATS)}")
    named = _NAMED_FORMATS.get(path.suffix.lower())
    if named is not None and format not in named:
        raise ValueError(
            f"--format {format}: {path} is named as a {named[0]} history ({path.suffix}); "
            f"expected --format {' or '.join(named)} or auto"
        )
    return format


def detect_format(path: Path) -> str:
    """The format of ``path`` from its name, else from its first non-blank line."""
    name = path.name
    if name.endswith((".jsonl", ".json")):
        return "jsonl"
    if name.endswith(".edn"):
        return "edn"
    with open(path, encoding="utf-8", errors="replace") as f:
        first = ""
        for line in f:
            if line.strip():
                first = line.strip()
                break
    if not first:
        # an empty file: porcupine's etcd_095.log is one; any format reads it as no ops
        return "porcupine-etcd" if name.endswith(".log") else "jsonl"
    if first.startswith("{") and first.endswith("}") and '"' in first.split(":", 1)[0]:
        return "jsonl"
    if "jepsen.util" in first:
        return "porcupine-etcd"
    if first.startswith("{:") and ":key" in first:
        return "porcupine-kv"
    if first.startswith(("[", "(", "{:", ";")):
        return "edn"
    raise HistoryError(
        f"cannot tell the history format from the first line {first[:60]!r} "
        f"(expected one of {', '.join(FORMATS)}; pass --format)",
        line=1,
        path=path,
    )


def _jsonl_model(ops: list[Op]) -> str:
    fs = {op.f for op in ops if op.process != NEMESIS}
    if "append" in fs:
        return "append-log"
    if "add" in fs:
        return "set"
    if fs & {"acquire", "release"}:
        return "mutex"
    return "cas-register"


def _read_text(path: Path) -> str:
    """The file as UTF-8 text. Raises HistoryError naming the line of the first byte that is not."""
    data = path.read_bytes()
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        line = data.count(b"\n", 0, e.start) + 1
        raise HistoryError(f"not UTF-8 (byte {data[e.start]:#04x})", line=line, path=path) from None


def _edn_ops(path: Path) -> Iterator[tuple[int, Op]]:
    """(line, op) for each op map of an EDN history (:func:`chaos.history.edn.records`), streaming."""
    pos = 0
    for line, form, _fast in records(path):
        yield line, edn_op(form, line, pos, path)
        pos += 1


_OP_FIELDS = frozenset(("process", "type", "f", "value", "time", "index", "error", "key", "node"))


def edn_op(form: object, line: int, pos: int, path: Path | str) -> Op:
    """The Op of one EDN op map at history position ``pos`` (its time and index; the map's own
    ``:time`` is kept as ``edn_time``). Raises HistoryError naming ``line`` for anything that is
    not an op map."""
    if not isinstance(form, dict):
        raise HistoryError(
            f"EDN: expected an op map {{:process .. :type ..}}, got {form!r:.60}", line=line, path=path
        )
    if "f" not in form and _txn_shaped(form.get("value")):
        form["f"] = "txn"  # Elle's README histories leave :f out of transactions
    for k in ("process", "type", "f"):
        if k not in form:
            raise HistoryError(f"EDN: op map without :{k}", line=line, path=path)
    t = form["type"]
    if t not in TYPES:
        raise HistoryError(
            f"EDN: unknown :type {t!r} (expected one of :{', :'.join(TYPES)})", line=line, path=path
        )
    proc = form["process"]
    if not isinstance(proc, int | str) or isinstance(proc, bool):
        raise HistoryError(
            f"EDN: :process must be an integer or :nemesis, got {proc!r}", line=line, path=path
        )
    extra: dict[str, object] = {"line": line}
    if "time" in form:
        extra["edn_time"] = form["time"]
    for k, v in form.items():
        if k not in _OP_FIELDS:
            extra[str(k)] = v
    err = form.get("error")
    return Op(
        type=t,
        process=proc,
        f=str(form["f"]),
        value=form.get("value"),
        time=pos,
        index=pos,
        node=form.get("node"),
        error=None if err is None else str(err),
        key=form.get("key"),
        extra=extra,
    )


def _txn_shaped(value: object) -> bool:
    """True for a list of micro-ops ``[f k v]`` (an Elle transaction value)."""
    return isinstance(value, list) and bool(value) and all(isinstance(m, list) and len(m) == 3 for m in value)


def load_edn(path: str | os.PathLike[str]) -> tuple[list[Op], str]:
    """Ops of a Jepsen/knossos EDN history and the implied model spec (see the module docstring).

    A ``jepsen.independent`` history (every client op's ``:value`` a tuple ``[k v]``, see
    :func:`_is_independent`) is split per key: ``op.key = k``, ``op.value = v``, and checked with
    Jepsen's register model (``cas-register``, initial value nil, a read of nil matches any value).
    """
    p = Path(path)
    v = Validator(p)
    ops: list[Op] = []
    for line, op in _edn_ops(p):
        v.step(op, line)
        ops.append(op)
    fs = {op.f for op in ops if op.process != NEMESIS}
    if "txn" in fs:
        model = "multi-register:init=0"
    elif fs & {"acquire", "release"}:
        model = "mutex"
    elif _is_independent(ops):
        _split_independent(ops)
        model = "cas-register:nil-read=any"
    else:
        model = "cas-register:init=0,nil-read=any"
    return ops, model


def _pair2(v: object) -> bool:
    return isinstance(v, list) and len(v) == 2


def _is_independent(ops: list[Op]) -> bool:
    """True if the client ops carry ``jepsen.independent`` tuples: every invocation's and ok
    completion's value is ``[k v]`` (a fail/info completion may carry nil), a completion's k is
    its invocation's, and a cas's v is itself ``[old new]`` (which tells ``[k v]`` from a plain
    cas-register's ``[old new]``)."""
    open_: dict[Hashable, object] = {}
    client = False
    for op in ops:
        if op.process == NEMESIS:
            continue
        client = True
        v = op.value
        if v is None and op.type in ("fail", "info"):
            open_.pop(op.process, None)
            continue
        if not _pair2(v) or (op.f == "cas" and not _pair2(v[1])):
            return False
        if op.type == "invoke":
            open_[op.process] = v[0]
        elif open_.pop(op.process, v[0]) != v[0]:
            return False
    return client


def _split_independent(ops: list[Op]) -> None:
    open_: dict[Hashable, object] = {}
    for op in ops:
        if op.process == NEMESIS:
            continue
        if op.value is None:  # a fail/info completion without a value: its invocation's key
            op.key = open_.pop(op.process, None)
            continue
        k, op.value = op.value
        op.key = k
        if op.type == "invoke":
            open_[op.process] = k
        else:
            open_.pop(op.process, None)


# ------------------------------------------------------------------------------------------------
# porcupine

_ETCD = re.compile(r"^INFO\s+jepsen\.util\s+-\s+(\d+)\s+:(\w+)\s+:(\w+)\s+(.*?)\s*$")
_NUM = re.compile(r"^\d+$")
_PAIR = re.compile(r"^\[(\d+)\s+(\d+)\]$")


def load_porcupine_etcd(path: str | os.PathLike[str]) -> list[Op]:
    """Ops of porcupine's ``etcd_NNN.log`` (Jepsen 0.0.x log lines), as ``parseJepsenLog`` reads them."""
    p = Path(path)
    ops: list[Op] = []
    v = Validator(p)
    with open(p, "rb") as f:
        for lineno, data in enumerate(f, 1):
            try:
                raw = data.decode("utf-8")
            except UnicodeDecodeError as e:
                raise HistoryError(f"not UTF-8 (byte {data[e.start]:#04x})", line=lineno, path=p) from None
            if not raw.strip():
                continue
            m = _ETCD.match(raw)
            if m is None:
                raise HistoryError(
                    "expected 'INFO  jepsen.util - <process>\\t:<type>\\t:<f>\\t<value>'", line=lineno, path=p
                )
            proc, typ, fn, val = int(m.group(1)), m.group(2), m.group(3), m.group(4)
            if typ not in TYPES:
                raise HistoryError(
                    f"unknown type :{typ} (expected :{', :'.join(TYPES)})", line=lineno, path=p
                )
            value: object
            extra: dict[str, object] = {"line": lineno}
            error = None
            if val == "nil":
                value = None
            elif _NUM.match(val):
                value = int(val)
            elif (pm := _PAIR.match(val)) is not None:
                value = [int(pm.group(1)), int(pm.group(2))]
            elif val.startswith(":"):
                value = None
                error = val[1:]
            else:
                raise HistoryError(
                    f"value {val!r}: expected nil, an integer, [a b] or :keyword", line=lineno, path=p
                )
            if typ == "fail" and fn == "cas" and error is None:
                extra["compare_failed"] = True
            op = Op(typ, proc, fn, value, time=lineno, index=len(ops), error=error, extra=extra)
            v.step(op, lineno)
            ops.append(op)
    return ops


# one line of porcupine's kv logs in the shape they are written in (strings without escapes)
_KV_LINE = re.compile(
    r'\{:process (\d+), :type :(invoke|ok|fail|info), :f :([a-z]+), :key "([^"\\]*)", '
    r':value (?:nil|"([^"\\]*)")\}'
)


def _kv_fast(path: Path) -> list[tuple[int, Op]] | None:
    """(line, op) of each line when every non-blank line has :data:`_KV_LINE`'s shape (the ops
    the EDN reader would give for it, read without it); None for any other file."""
    out: list[tuple[int, Op]] = []
    match = _KV_LINE.fullmatch
    for n, text in enumerate(_read_text(path).split("\n"), 1):
        m = match(text)
        if m is None:
            if text.strip():
                return None
            continue
        proc, typ, f, key, value = m.groups()
        pos = len(out)
        out.append((n, Op(typ, int(proc), f, value, pos, pos, None, None, key, {"line": n})))
    return out


def load_porcupine_kv(path: str | os.PathLike[str]) -> list[Op]:
    """Ops of porcupine's ``kv/cNN-*.txt`` (one EDN map per line with ``:key``)."""
    p = Path(path)
    v = Validator(p)
    ops: list[Op] = []
    fast = _kv_fast(p)
    for line, op in fast if fast is not None else _edn_ops(p):
        if op.key is None and op.process != NEMESIS:
            raise HistoryError("porcupine kv: op map without :key", line=line, path=p)
        v.step(op, line)
        ops.append(op)
    return ops


def edn_txn_workload(path: str | os.PathLike[str], limit: int = 10_000) -> str | None:
    """``list-append`` or ``rw-register`` when the first client ops of an EDN history (up to
    ``limit``) are all transactions (a list of ``[f k v]`` micro-ops), by the first ``append`` or
    ``w`` micro-op seen (rw-register when neither shows); None when a client op is not one. Reads
    only as far as it needs to."""
    seen = 0
    for _line, form, _fast in records(Path(path)):
        if type(form) is not dict or form.get("process") == NEMESIS:
            continue
        v = form.get("value")
        if form.get("f", "txn") != "txn" or (v is not None and not _txn_shaped(v)):
            return None
        for m in v or ():
            if m[0] == "append":
                return "list-append"
            if m[0] == "w":
                return "rw-register"
        seen += 1
        if seen >= limit:
            break
    return "rw-register" if seen else None
