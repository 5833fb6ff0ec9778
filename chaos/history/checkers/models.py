"""Sequential specifications (models) for the linearizability checker.

A model is porcupine's ``Model`` (``model.go``: ``Init``, ``Step``, ``Hash``, ``Partition``,
``DescribeState``) in Python: ``init()`` gives the initial state, ``step(state, call)`` says whether
``call`` may take effect in ``state`` and gives the state after it, ``partition(calls)`` splits a
history into independently checkable parts (P-compositionality, Horn & Kroening), and
``describe(state)`` renders a state for reports.

States must be hashable and immutable (ints, strings, tuples, frozensets): the checker interns them
and keys its cache on (linearized set, state), so equal states must hash equally (Python's
``hash``/``==`` are the model's Hash/Equal). ``step`` must be pure.

A call whose outcome is unknown (an ``info`` completion, or an invocation that never completed) has
``output is UNKNOWN``. Such a call may or may not have taken effect; a model applies it when that is
legal and treats it as a no-op otherwise, and always accepts it (porcupine's etcd model; knossos
treats crashed ops the same way). Since its return is +infinity, "did not happen" is the same as
"happened at the very end", so this loses nothing.

Model specs: ``get_model("cas-register")`` or with options ``get_model("cas-register:init=0")``;
option values are JSON when they parse as JSON, else strings (``kv:init=""``). A name is read
through the one registry (:mod:`chaos.plugins`, kind ``model``): the tool's own models below or a
``chaos.models`` entry point naming a factory ``(**options) -> Model``.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Hashable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from chaos import plugins
from chaos.errors import ConfigError
from chaos.history.op import NEMESIS, Op
from chaos.history.store import HistoryError

State = Hashable


class _Unknown:
    """The output of a call whose completion is unknown (crashed, timed out, never returned)."""

    __slots__ = ()
    _instance: _Unknown | None = None

    def __new__(cls) -> _Unknown:
        if cls._instance is None:
            cls._instance = object.__new__(cls)
        return cls._instance

    def __repr__(self) -> str:
        return "unknown"

    def __reduce__(self) -> str:
        return "UNKNOWN"


UNKNOWN: object = _Unknown()


@dataclass(slots=True)
class Call:
    """One operation as the checker sees it: an invocation paired with its completion.

    Fields:
        id: dense 0-based number within the partition being checked.
        f: the function (``read``, ``write``, ``cas``, ...).
        value: the input (the invocation's value, filled from the completion when it was None).
        output: the completion's value, or ``UNKNOWN`` for info / never-completed ops.
        call: invocation time (ns, or position for formats without times).
        ret: completion time, or None for +infinity (info / never completed).
        process: the client process.
        index: the invocation's index in the history (-1 if unknown).
        key: the independent key (Jepsen ``independent``), or None.
        type: the completion's type, ``ok`` or ``info`` (``fail`` calls are dropped unless they carry
            information, see ``chaos.history.checkers.linear``).
    """

    id: int
    f: str
    value: Any
    output: object
    call: int
    ret: int | None
    process: object = None
    index: int = -1
    key: object = None
    type: str = "ok"

    def describe(self) -> str:
        out = "?" if self.output is UNKNOWN else _fmt(self.output)
        if self.f in ("read", "get"):
            return f"{self.f}() -> {out}"
        if self.f == "delete":
            return "delete()" + (" -> ?" if self.output is UNKNOWN else "")
        if self.f == "cas" and isinstance(self.value, list | tuple) and len(self.value) == 2:
            return f"cas({_fmt(self.value[0])}, {_fmt(self.value[1])}) -> {out}"
        return f"{self.f}({_fmt(self.value)})" + (
            "" if self.output is None or self.output is True else f" -> {out}"
        )


def _fmt(v: object) -> str:
    if v is None:
        return "nil"
    if v is UNKNOWN:
        return "?"
    if isinstance(v, str):
        return json.dumps(v)
    return str(v)


@runtime_checkable
class Model(Protocol):
    """porcupine's Model. See the module docstring for the contract."""

    name: str

    def init(self) -> State: ...

    def step(self, state: State, call: Call) -> tuple[bool, State]: ...

    def partition(self, calls: Sequence[Call]) -> list[list[Call]]: ...

    def describe(self, state: State) -> str: ...


class BaseModel:
    """Defaults: one partition, ``describe`` by repr, ``hash`` by Python's hash.

    ``fs`` names the functions the model understands (None: not declared); readers use it to refuse
    an op the model cannot check before the search starts, naming the op's line.
    """

    name = "model"
    fs: frozenset[str] | None = None

    def init(self) -> State:
        raise NotImplementedError

    def step(self, state: State, call: Call) -> tuple[bool, State]:
        raise NotImplementedError

    def partition(self, calls: Sequence[Call]) -> list[list[Call]]:
        return [list(calls)]

    def describe(self, state: State) -> str:
        return _fmt(state)

    def hash(self, state: State) -> int:
        return hash(state)

    def noop(self, call: Call) -> bool:
        """True if ``call`` never changes the state and is always legal (e.g. a read with unknown
        output); the checker drops such calls before the search."""
        return False

    def readonly(self, call: Call) -> bool:
        """True if ``call`` never changes the state: ``step(s, call)`` is ``(False, s)`` or
        ``(True, s)`` for every state s (a read, a cas whose compare failed). The checker then
        linearizes it as soon as it is legal and never tries an alternative (sound: a read-only op
        that is legal now can be moved to the front of any linearization)."""
        return False

    def observation(self, call: Call) -> tuple[State] | None:
        """``(S,)`` if ``call`` is legal in exactly the state S and leaves it unchanged (a read of a
        known value), else None. Lets the checker decide such calls without calling ``step``."""
        return None

    def monotone(self, call: Call) -> bool:
        """True if ``call`` only grows the state (an append, a set add): from any state s it leads
        to a state t with ``extends(s, t)``. Used with :meth:`extends`; default False."""
        return False

    def resets(self, call: Call) -> tuple[State] | None:
        """``(S,)`` if ``call``, wherever it is legal, leaves the state S whatever it was before (a
        put), else None. With :meth:`extends` it tells the checker which puts could still lead to
        what a read observed; default None."""
        return None

    def extends(self, state: State, target: State) -> bool:
        """False only if ``target`` cannot be reached from ``state`` by any sequence of
        ``monotone`` and ``readonly`` calls (default: always True, i.e. unknown).

        With it the checker cuts a configuration as soon as an observed read can no longer be
        satisfied before its return, instead of finding out at that return: a model-specific
        pruning of the WGL search, sound because only the ops that could still run before the read
        are considered."""
        return True

    def __repr__(self) -> str:
        return f"<model {self.name}>"


class ModelError(ValueError):
    """An op the model cannot check (wrong f, wrong value shape). ``index`` is the op's invocation
    index in the history, so a reader can name its line. Survives pickling (worker processes)."""

    def __init__(self, message: str, index: int = -1):
        super().__init__(message)
        self.index = index

    def __reduce__(self) -> Any:
        return (ModelError, (str(self), self.index))


def _bad(model: str, call: Call, expected: str) -> ModelError:
    return ModelError(
        f"model {model}: op {call.index} (process {call.process}) has f={call.f!r} value={call.value!r:.60}; "
        f"expected {expected}",
        call.index,
    )


class Register(BaseModel):
    """A read/write register (knossos ``register``). ``read`` output must equal the state;
    ``delete`` is a write of nil (the register is absent afterwards, and a read of it answers nil,
    as a key-value store's deleted key does; knossos and porcupine model a delete so).

    Args:
        init: the initial value (default None: absent).
        nil_read: ``"absent"`` (a read of None means the register holds None) or ``"any"`` (knossos:
            a read of nil carries no information and matches any state).
    """

    name = "register"
    _fs: tuple[str, ...] = ("read", "write", "delete")
    fs = frozenset({"read", "get", "write", "put", "delete"})

    def __init__(self, init: object = None, nil_read: str = "absent"):
        if nil_read not in ("absent", "any"):
            raise ValueError(f"model {self.name}: nil_read must be 'absent' or 'any', got {nil_read!r}")
        self._init: State = _freeze(init)
        self.nil_any = nil_read == "any"

    def init(self) -> State:
        return self._init

    def noop(self, call: Call) -> bool:
        if call.f == "read" or call.f == "get":
            return call.output is UNKNOWN or (self.nil_any and call.output is None)
        return False

    def readonly(self, call: Call) -> bool:
        return call.f == "read" or call.f == "get" or (call.f == "cas" and call.output is False)

    def observation(self, call: Call) -> tuple[State] | None:
        if (call.f == "read" or call.f == "get") and call.output is not UNKNOWN:
            if call.output is None and self.nil_any:
                return None
            return (_freeze(call.output),)
        return None

    def step(self, state: State, call: Call) -> tuple[bool, State]:
        f = call.f
        if f == "read" or f == "get":
            out = call.output
            if out is UNKNOWN or out == state or (out is None and self.nil_any):
                return True, state
            return False, state
        if f == "write" or f == "put":
            return True, _freeze(call.value)
        if f == "delete":
            return True, None
        raise _bad(self.name, call, "f in " + "/".join(self._fs))


class CasRegister(Register):
    """A compare-and-set register (knossos ``cas-register``, porcupine's etcd model).

    ``cas`` takes ``[expected, new]``; output True (applied: state must equal expected), False (the
    compare failed: state must differ) or UNKNOWN (applied if the compare matches, else a no-op).
    """

    name = "cas-register"
    _fs = ("read", "write", "cas", "delete")
    fs = frozenset({"read", "get", "write", "put", "cas", "delete"})

    def step(self, state: State, call: Call) -> tuple[bool, State]:
        if call.f == "cas":
            v = call.value
            if not isinstance(v, list | tuple) or len(v) != 2:
                raise _bad(self.name, call, "cas value [expected, new]")
            old = _freeze(v[0])
            out = call.output
            if out is UNKNOWN:
                return True, (_freeze(v[1]) if state == old else state)
            if out is False:
                return state != old, state
            if state == old:
                return True, _freeze(v[1])
            return False, state
        return Register.step(self, state, call)


class KV(BaseModel):
    """A key-value store checked one key at a time (porcupine's ``kvModel``): ``get``/``read``,
    ``put``/``write``, ``append``, ``cas`` and ``delete``. ``partition`` splits by ``call.key`` and the
    state is the value of the partition's one key (so ``check_calls`` must be given one key's calls;
    ``check_history`` and ``partition`` ensure that).

    Args:
        init: the value of a key never written (porcupine's kv tests use ``""``; default None).
    """

    name = "kv"
    fs = frozenset({"get", "read", "put", "write", "append", "cas", "delete"})

    def __init__(self, init: object = None):
        self._init: State = _freeze(init)

    def init(self) -> State:
        return self._init

    def partition(self, calls: Sequence[Call]) -> list[list[Call]]:
        return _by_key(calls)

    def noop(self, call: Call) -> bool:
        return (call.f == "get" or call.f == "read") and call.output is UNKNOWN

    def readonly(self, call: Call) -> bool:
        return call.f == "get" or call.f == "read" or (call.f == "cas" and call.output is False)

    def observation(self, call: Call) -> tuple[State] | None:
        if (call.f == "get" or call.f == "read") and call.output is not UNKNOWN:
            return (_freeze(call.output),)
        return None

    def monotone(self, call: Call) -> bool:
        return call.f == "append"

    def resets(self, call: Call) -> tuple[State] | None:
        f = call.f
        if f == "put" or f == "write":
            return (_freeze(call.value),)
        if f == "delete":
            return (self._init,)
        v = call.value
        if f == "cas" and call.output is True and isinstance(v, list | tuple) and len(v) == 2:
            return (_freeze(v[1]),)
        return None

    def extends(self, state: object, target: object) -> bool:
        # appends only concatenate: the value must stay a prefix of what a later read returns
        if state is None or state == target:
            return True
        if isinstance(state, str) and isinstance(target, str):
            return target.startswith(state)
        return False

    def step(self, state: object, call: Call) -> tuple[bool, State]:
        f = call.f
        if f == "get" or f == "read":
            out = call.output
            return (out is UNKNOWN or out == state), state
        if f == "put" or f == "write":
            return True, _freeze(call.value)
        if f == "append":
            v = call.value
            if state is None:
                return True, v
            if isinstance(state, str) and isinstance(v, str):
                return True, state + v
            raise _bad(self.name, call, "append of a string to a string value")
        if f == "cas":
            v = call.value
            if not isinstance(v, list | tuple) or len(v) != 2:
                raise _bad(self.name, call, "cas value [expected, new]")
            out = call.output
            hit = state == _freeze(v[0])
            if out is False:
                return not hit, state
            if hit:
                return True, _freeze(v[1])
            return out is UNKNOWN, state
        if f == "delete":
            return True, self._init
        raise _bad(self.name, call, "f in get/put/append/cas/delete")


class Mutex(BaseModel):
    """A lock (knossos ``mutex``): ``acquire`` when held and ``release`` when free are illegal."""

    name = "mutex"
    fs = frozenset({"acquire", "release"})

    def init(self) -> State:
        return False

    def step(self, state: State, call: Call) -> tuple[bool, State]:
        f = call.f
        if f == "acquire":
            if state:
                return call.output is UNKNOWN, state
            return True, True
        if f == "release":
            if not state:
                return call.output is UNKNOWN, state
            return True, False
        raise _bad(self.name, call, "f in acquire/release")

    def describe(self, state: State) -> str:
        return "held" if state else "free"


class _ReadAll(BaseModel):
    """Base of the models whose one non-mutating call is a ``read`` of the whole state (set, log):
    a read is readonly, and a noop when its output is unknown."""

    def noop(self, call: Call) -> bool:
        return call.f == "read" and call.output is UNKNOWN

    def readonly(self, call: Call) -> bool:
        return call.f == "read"


class SetModel(_ReadAll):
    """A grow-only set (Jepsen's ``set`` workload as a model): ``add`` v; ``read`` returns all
    elements (any order). State: a frozenset."""

    name = "set"
    fs = frozenset({"add", "read"})

    def init(self) -> State:
        return frozenset()

    def observation(self, call: Call) -> tuple[State] | None:
        out = call.output
        if call.f == "read" and isinstance(out, list | tuple | set | frozenset):
            return (frozenset(_freeze(x) for x in out),)
        return None

    def monotone(self, call: Call) -> bool:
        return call.f == "add"

    def extends(self, state: object, target: Any) -> bool:
        # adds only grow the set: a later read must see a superset
        return bool(state <= target)

    def step(self, state: Any, call: Call) -> tuple[bool, State]:
        f = call.f
        if f == "add":
            return True, state | {_freeze(call.value)}
        if f == "read":
            out = call.output
            if out is UNKNOWN:
                return True, state
            if not isinstance(out, list | tuple | set | frozenset):
                raise _bad(self.name, call, "a read output that is a list of elements")
            return frozenset(_freeze(x) for x in out) == state, state
        raise _bad(self.name, call, "f in add/read")

    def describe(self, state: Any) -> str:
        return "#{" + " ".join(_fmt(x) for x in sorted(state, key=repr)) + "}"


class AppendLog(_ReadAll):
    """An append-only log (the ``log`` workload as a model): ``append`` v adds v at the end;
    ``read`` returns the whole log (``None`` entries, the system's own entries such as a new leader's no-op, are ignored). State: a tuple.
    An ``append`` whose completion carries an integer ``output`` (the log index) is not
    checked against it: indices include entries that are not workload appends."""

    name = "append-log"
    fs = frozenset({"append", "read"})

    def init(self) -> State:
        return ()

    def observation(self, call: Call) -> tuple[State] | None:
        out = call.output
        if call.f == "read" and isinstance(out, list | tuple):
            return (tuple(_freeze(x) for x in out if x is not None),)
        return None

    def monotone(self, call: Call) -> bool:
        return call.f == "append"

    def extends(self, state: Any, target: Any) -> bool:
        # appends only grow the log: it must stay a prefix of what a later read returns
        return bool(target[: len(state)] == state)

    def step(self, state: Any, call: Call) -> tuple[bool, State]:
        f = call.f
        if f == "append":
            return True, state + (_freeze(call.value),)
        if f == "read":
            out = call.output
            if out is UNKNOWN:
                return True, state
            if not isinstance(out, list | tuple):
                raise _bad(self.name, call, "a read output that is a list")
            return tuple(_freeze(x) for x in out if x is not None) == state, state
        raise _bad(self.name, call, "f in append/read")

    def describe(self, state: Any) -> str:
        return "[" + " ".join(_fmt(x) for x in state) + "]"


class MultiRegister(BaseModel):
    """Registers over several keys with atomic transactions (knossos ``multi-register``).

    ``txn`` value: a list of micro-ops ``[f, k, v]``, f ``read`` or ``write``; a read of nil matches
    any value (knossos). ``read``/``write`` single ops with ``call.key`` are accepted too.

    Args:
        init: a dict of initial values, or one value for every key (knossos tests: ``{x: 0, y: 0}``).
    """

    name = "multi-register"
    fs = frozenset({"txn", "read", "write"})

    def __init__(self, init: object = None):
        self._default: object = None
        self._init: tuple[tuple[object, object], ...] = ()
        if isinstance(init, dict):
            self._init = tuple(sorted(((k, _freeze(v)) for k, v in init.items()), key=lambda kv: repr(kv[0])))
        else:
            self._default = _freeze(init)

    def init(self) -> State:
        return self._init

    def _get(self, state: tuple[tuple[object, object], ...], k: object) -> object:
        for kk, vv in state:
            if kk == k:
                return vv
        return self._default

    def step(self, state: Any, call: Call) -> tuple[bool, State]:
        f = call.f
        if f == "txn":
            mops = call.output if isinstance(call.output, list | tuple) else call.value
            if not isinstance(mops, list | tuple):
                raise _bad(self.name, call, "txn value: a list of [f k v] micro-ops")
            d: dict[Hashable, object] | None = None
            unknown = call.output is UNKNOWN
            for m in mops:
                if not isinstance(m, list | tuple) or len(m) != 3:
                    raise _bad(self.name, call, "txn micro-ops [f k v]")
                mf, k, v = m
                if mf == "read":
                    if v is None or unknown:
                        continue
                    cur = d[k] if d is not None and k in d else self._get(state, k)
                    if cur != _freeze(v):
                        return False, state
                elif mf == "write":
                    if d is None:
                        d = dict(state)
                    d[k] = _freeze(v)
                else:
                    raise _bad(self.name, call, "micro-op f read or write")
            if d is None:
                return True, state
            return True, tuple(sorted(d.items(), key=lambda kv: repr(kv[0])))
        if f in ("read", "write"):
            mop = [f, call.key, call.value if f == "write" else call.output]
            if f == "read" and call.output is UNKNOWN:
                return True, state
            return self.step(state, Call(call.id, "txn", [mop], [mop], call.call, call.ret))
        raise _bad(self.name, call, "f txn")

    def describe(self, state: Any) -> str:
        return "{" + ", ".join(f"{_fmt(k)} {_fmt(v)}" for k, v in state) + "}"


def _freeze(v: object) -> object:
    """A hashable form of a JSON-ish value: lists become tuples, dicts sorted item tuples."""
    if isinstance(v, list):
        return tuple(_freeze(x) for x in v)
    if isinstance(v, dict):
        return tuple(sorted(((k, _freeze(x)) for k, x in v.items()), key=lambda kv: repr(kv[0])))
    if isinstance(v, set):
        return frozenset(_freeze(x) for x in v)
    return v


def _by_key(calls: Iterable[Call]) -> list[list[Call]]:
    parts: dict[Hashable, list[Call]] = {}
    for c in calls:
        parts.setdefault(_freeze(c.key), []).append(c)
    return list(parts.values())


def model_names() -> list[str]:
    """Every registered model name (the tool's own and ``chaos.models`` entry points), sorted."""
    return plugins.names("model")


def model_factory(name: str) -> Callable[..., Model]:
    """The factory ``(**options) -> Model`` registered as ``name`` (a registered name only: the
    ``:`` of a spec starts its options); ValueError naming the known models for an unknown one."""
    try:
        factory = plugins.resolve("model", name)
    except ConfigError:
        raise ValueError(f"unknown model {name!r} (expected one of {', '.join(model_names())})") from None
    if not callable(factory):
        raise ValueError(f"model {name!r}: {type(factory).__name__} is not a model factory")
    return factory  # type: ignore[no-any-return]


def __getattr__(attr: str) -> object:
    """``MODELS``: {name: factory} of every registered model, read from the registry when asked
    (PEP 562; the table of models is :data:`chaos.plugins.BUILTINS`)."""
    if attr == "MODELS":
        return {name: model_factory(name) for name in model_names()}
    raise AttributeError(f"module {__name__!r} has no attribute {attr!r}")


def parse_spec(spec: str) -> tuple[str, dict[str, object]]:
    """``"name:opt=val,opt=val"`` -> (name, {opt: val}); values are JSON if they parse, else text.

    Raises ValueError naming the spec for an unknown model name or a malformed option.
    """
    if not isinstance(spec, str) or not spec:
        raise ValueError(f"model: expected a model name such as 'cas-register', got {spec!r}")
    name, _, rest = spec.partition(":")
    name = name.strip()
    if name not in plugins.BUILTINS["model"] and name not in model_names():  # no entry-point scan for ours
        raise ValueError(
            f"model {spec!r}: unknown model {name!r} (expected one of {', '.join(model_names())})"
        )
    opts: dict[str, object] = {}
    if rest:
        for part in _split_opts(rest):
            k, eq, v = part.partition("=")
            if not eq or not k.strip():
                raise ValueError(f"model {spec!r}: option {part!r} is not of the form name=value")
            try:
                val: object = json.loads(v)
            except ValueError:
                val = v
            opts[k.strip().replace("-", "_")] = val
    return name, opts


def _split_opts(s: str) -> list[str]:
    """Split on commas outside brackets/braces/quotes (values may be JSON objects)."""
    out: list[str] = []
    cur: list[str] = []
    depth, q = 0, False
    for ch in s:
        if ch == '"':
            q = not q
        elif not q and ch in "[{":
            depth += 1
        elif not q and ch in "]}":
            depth -= 1
        if ch == "," and depth == 0 and not q:
            out.append("".join(cur))
            cur = []
        else:
            cur.append(ch)
    if cur:
        out.append("".join(cur))
    return out


def get_model(model: Model | str) -> Model:
    """A model instance from an instance or a spec string (see :func:`parse_spec`)."""
    if not isinstance(model, str):
        if not all(hasattr(model, a) for a in ("init", "step", "partition", "describe")):
            raise ValueError(f"model: {model!r} lacks init/step/partition/describe")
        return model
    name, opts = parse_spec(model)
    try:
        m = model_factory(name)(**opts)
    except TypeError as e:
        raise ValueError(f"model {model!r}: bad options ({e})") from None
    return m


def require_checkable(ops: list[Op], model: str, path: str | os.PathLike[str]) -> None:
    """Raise HistoryError naming the file and line unless ``ops`` has a client op and every client
    op's ``f`` is one ``model`` checks (its ``fs``); the check command's test of a foreign history."""
    m = get_model(model)
    fs = getattr(m, "fs", None)
    client = False
    for op in ops:
        if op.process == NEMESIS:
            continue
        client = True
        if fs is not None and op.f not in fs:
            line = op.extra.get("line", op.index + 1)
            raise HistoryError(
                f"client op f {op.f!r} is not one the {m.name} model checks "
                f"(it checks {', '.join(sorted(fs))}; --model picks another model)",
                line=line if isinstance(line, int) else None,
                path=path,
            )
    if not client:
        raise HistoryError(
            "no client op: nothing was tested (an empty history is not a valid test)", path=path
        )
