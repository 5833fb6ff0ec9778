"""The op: one line of a history, as Jepsen records it (jepsen.history, knossos.op).

An op is an invocation (``type="invoke"``) or a completion (``"ok"`` definitely happened, ``"fail"``
definitely did not happen, ``"info"`` indeterminate). A client process runs one op at a time, so a
completion pairs with the last invocation of the same process. Nemesis ops have ``process="nemesis"``
and type ``"info"`` for both their invocation and completion, as in Jepsen.

On disk a history is JSON Lines, one op per line, written as ops complete (see ``chaos.history.store``).
Known fields are listed below; any other field a workload adds (for example ``log_index`` on an ok
``append``) is kept in ``extra`` and written flat beside the known fields.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

import orjson

INVOKE = "invoke"
OK = "ok"
FAIL = "fail"
INFO = "info"
TYPES = (INVOKE, OK, FAIL, INFO)
NEMESIS = "nemesis"

_KNOWN = ("index", "type", "process", "f", "value", "time", "node", "error", "key")
_KNOWN_SET = frozenset(_KNOWN)
_ORJSON_OPTS = orjson.OPT_NON_STR_KEYS
# for what orjson refuses (integers beyond 64 bits): the standard library, same compact layout
_FALLBACK = json.JSONEncoder(separators=(",", ":"), default=str, ensure_ascii=False)


_LONE_SURROGATE = re.compile("[\ud800-\udfff]")


def text_only(json_text: str) -> str:
    """``json_text`` (JSON written with ``ensure_ascii=False``) with each lone surrogate, which can
    stand only inside a string, replaced by its escape as text (``\\ud800``, six characters): a
    lone surrogate is not Unicode text, and the history reader refuses one
    (``chaos.history.store``), so no writer of the tool writes one."""
    if _LONE_SURROGATE.search(json_text) is None:
        return json_text
    return _LONE_SURROGATE.sub(lambda m: f"\\\\u{ord(m.group()):04x}", json_text)


def dumps(obj: Any) -> bytes:
    """``obj`` as compact JSON (UTF-8 bytes): orjson, with ``str()`` for values JSON has no form
    for; falls back to the standard library for integers beyond 64 bits and for strings holding a
    lone surrogate (written as its escape text, :func:`text_only`), so every line it writes is one
    the history reader reads."""
    try:
        return orjson.dumps(obj, default=str, option=_ORJSON_OPTS)
    except orjson.JSONEncodeError:
        return text_only(_FALLBACK.encode(obj)).encode("utf-8")


@dataclass(slots=True)
class Op:
    """One history event.

    Fields:
        type: ``invoke`` | ``ok`` | ``fail`` | ``info``.
        process: client process id (int), or ``"nemesis"``.
        f: the function, e.g. ``read``, ``write``, ``cas``, ``append``, ``start-partition``.
        value: the argument (invoke) or result (completion); JSON-serialisable.
        time: nanoseconds since the test started, from a monotonic clock.
        index: position in the history (0-based), assigned by the writer.
        node: the DB node the client talked to, if known.
        error: error text for fail/info completions.
        key: the independent key for keyed workloads (Jepsen's ``independent`` tuples), else None.
        extra: further workload-specific fields, written flat into the JSON object.
    """

    type: str
    process: int | str
    f: str
    value: Any = None
    time: int = 0
    index: int = -1
    node: str | None = None
    error: str | None = None
    key: Any = None
    extra: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {
            "index": self.index,
            "type": self.type,
            "process": self.process,
            "f": self.f,
            "value": self.value,
            "time": self.time,
        }
        if self.node is not None:
            d["node"] = self.node
        if self.error is not None:
            d["error"] = self.error
        if self.key is not None:
            d["key"] = self.key
        if self.extra:
            d.update(self.extra)
        return d

    def to_json(self) -> str:
        """The op as one compact JSON object (the history line, without the newline)."""
        return dumps(self.to_dict()).decode("utf-8")

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Op:
        """Build an op from a decoded JSON object. Raises KeyError/TypeError on missing fields."""
        g = d.get
        extra = {} if d.keys() <= _KNOWN_SET else {k: v for k, v in d.items() if k not in _KNOWN_SET}
        t = g("time", 0)
        i = g("index", -1)
        return cls(
            d["type"],
            d["process"],
            d["f"],
            g("value"),
            t if type(t) is int else int(t),
            i if type(i) is int else int(i),
            g("node"),
            g("error"),
            g("key"),
            extra,
        )

    @property
    def is_invoke(self) -> bool:
        return self.type == INVOKE

    @property
    def is_client(self) -> bool:
        return self.process != NEMESIS

    def completion(self, type: str, value: Any = None, **fields: Any) -> Op:
        """A completion of this invocation with the same process, f and key."""
        op = Op(type=type, process=self.process, f=self.f, value=value, node=self.node, key=self.key)
        for k, v in fields.items():
            if k in ("error", "node", "time"):
                setattr(op, k, v)
            else:
                op.extra[k] = v
        return op
