"""Client protocols: what a DB implements so a workload can drive it (Jepsen's ``jepsen.client``,
split per workload as ``jepsen.tests.linearizable-register`` expects a register client).

A DB offers a protocol by listing it in ``client_protocols`` and returning, from
``open_client(protocol, test, node, process)`` (``node``: the :class:`chaos.control.node.Node` the
worker is bound to, so ``node.host`` is the address to talk to; ``process``: the worker's process
number), an object with the protocol's methods
(:class:`RegisterClient`, :class:`LogClient`, :class:`TxnClient`). The methods return the result of the operation or
raise:

- :class:`NotSent` (or :class:`Failed`): the operation certainly did not take effect: it was never
  sent (no connection), or the system refused it (not the leader, a definite error). Recorded
  ``fail``.
- :class:`Indeterminate`: it was sent and no answer came (a timeout, a connection lost after the
  send): it may or may not have taken effect. Recorded ``info`` (``fail`` for the workload's
  idempotent fs such as reads, which change nothing).

- :class:`Aborted` (a :class:`Failed`): the system aborted it (a serialization failure, a
  deadlock victim, a conflict): ``fail`` with ``aborted: true``, counted apart from the system
  being unavailable.

Any other exception is recorded ``info`` too (Jepsen: "a crashed op is info"): whether it was sent
is unknown. Two kinds are told apart (:func:`is_declared`):

- the DB's **declared** errors: :class:`ClientError`, :class:`chaos.errors.DBError`,
  :class:`chaos.control.ssh.RemoteError` (a client running the system's CLI over SSH), the standard
  library's network errors (:data:`NETWORK_ERRORS`: ``OSError`` but the file system's, DNS,
  ``URLError``, ``HTTPException``, ``ssl.SSLError``) and the classes the DB lists in its
  ``client_errors`` attribute (e.g. ``(psycopg.Error,)``): ``info``, ``error: "indeterminate:
  ..."``, a statement about the database;
- anything else is a **client error**, a crash of the plug-in's (or the workload's) own code and
  no statement about the database: ``info`` with ``error: "client error: <type>: <message> at
  <file>:<line>"`` and the field ``client_error: {"type", "message", "where", "path", "line"}``
  (:func:`client_error`: ``where`` is the innermost frame of the traceback in the plug-in's own
  files). The ``client-errors`` checker (:mod:`chaos.history.checkers.clienterrors`) makes a run with any
  client error at best ``unknown``, never invalid or "unavailable" because of it.

A method may return an :class:`Answer` instead of a bare value to record which node answered and
extra fields. :func:`complete` applies those rules; every workload's client template uses it, so
no DB client has to get the ``fail``/``info`` distinction right on its own.
"""

from __future__ import annotations

import http.client
import os
import socket
import ssl
import sys
import sysconfig
import traceback
import urllib.error
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from chaos.control.db import Clients, has
from chaos.control.node import Node
from chaos.errors import DBError
from chaos.history.op import FAIL, INFO, OK, Op

if TYPE_CHECKING:
    from chaos.control.test import Test


class ClientError(Exception):
    """Base of the errors a protocol method raises. ``node``: which node answered, if known;
    ``fields``: extra fields for the completion."""

    def __init__(self, message: str = "", *, node: str | None = None, **fields: object) -> None:
        super().__init__(message)
        self.node = node
        self.fields = fields


class Failed(ClientError):
    """The operation certainly did not take effect (refused by the system): ``fail``."""


class NotSent(Failed):
    """The operation was never sent (no connection, no leader known): ``fail``."""


class Aborted(Failed):
    """The system aborted the operation (a serialization failure, a deadlock victim, a write
    conflict): a definite failure, ``fail`` with ``aborted: true``, shown apart from the system
    being unavailable (:func:`chaos.history.analysis.fail_class`)."""


class Indeterminate(ClientError):
    """The operation was sent and its outcome is unknown (timeout, lost connection): ``info``."""


NETWORK_ERRORS: tuple[type[BaseException], ...] = (
    OSError,
    socket.gaierror,
    socket.herror,
    urllib.error.URLError,
    http.client.HTTPException,
    ssl.SSLError,
)
"""Exceptions of talking over a network in the standard library (``OSError`` covers the socket
errors: a reset, a refusal, a timeout, no route to the host): a client that lets one through
reports the database (or the network to it), not a bug of its own; recorded ``info``. The
``OSError`` s of files (:data:`FILE_ERRORS`) are not among them."""

FILE_ERRORS: tuple[type[BaseException], ...] = (
    FileNotFoundError,
    FileExistsError,
    IsADirectoryError,
    NotADirectoryError,
)
"""``OSError`` s of the local file system: plug-in code that raises one has a bug of its own."""


def own_errors(db: object) -> tuple[type[BaseException], ...]:
    """The exception classes in the DB's ``client_errors`` attribute (a class or a sequence of
    classes; anything else in it is ignored)."""
    own = getattr(db, "client_errors", None) if db is not None else None
    if isinstance(own, type):
        own = (own,)
    try:
        items = tuple(own or ())
    except TypeError:
        return ()
    return tuple(c for c in items if isinstance(c, type) and issubclass(c, BaseException))


def declared_errors(db: object) -> tuple[type[BaseException], ...]:
    """The exception classes that are statements about the database for ``db``'s clients:
    :class:`ClientError`, :class:`chaos.errors.DBError`, :class:`chaos.control.ssh.RemoteError`
    (a client that runs the system's own CLI over SSH), :data:`NETWORK_ERRORS` (but
    :data:`FILE_ERRORS`) and the DB's own (:func:`own_errors`)."""
    from chaos.control.ssh import RemoteError  # fabric and paramiko: only when a client raised

    return (ClientError, DBError, RemoteError, *NETWORK_ERRORS, *own_errors(db))


def is_declared(exc: BaseException, db: object = None) -> bool:
    """Whether ``exc`` is a declared error of ``db``'s clients (:func:`declared_errors`) rather
    than a crash of plug-in code."""
    if isinstance(exc, FILE_ERRORS) and not isinstance(exc, (ClientError, DBError, *own_errors(db))):
        return False
    return isinstance(exc, declared_errors(db))


_TOOL_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # the chaos package
_LIB_DIRS = tuple(
    {
        os.path.abspath(p)
        for k in ("stdlib", "platstdlib", "purelib", "platlib")
        if (p := sysconfig.get_path(k))
    }
)


def plugin_roots(*objs: object) -> list[str]:
    """The files of the plug-in that defines ``objs`` (a DB, a client, a class): the directory of
    each object's top-level package, or the module's own file for a module outside a package."""
    roots: list[str] = []
    for obj in objs:
        if obj is None:
            continue
        cls = obj if isinstance(obj, type) else type(obj)
        name = str(getattr(cls, "__module__", "") or "")
        top = getattr(sys.modules.get(name.split(".")[0]), "__file__", None)
        own = getattr(sys.modules.get(name), "__file__", None)
        path = top or own  # a namespace package (no file of its own): the module's file
        if not path:
            continue
        path = os.path.abspath(path)
        root = os.path.dirname(path) if os.path.basename(path) == "__init__.py" else path
        if root != _TOOL_DIR and root not in roots:
            roots.append(root)
    return roots


def _under(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip(os.sep) + os.sep)


def raised_where(exc: BaseException, roots: Iterable[str] = ()) -> tuple[str, int] | None:
    """``(path, line)`` of the frame ``exc`` is blamed on: the innermost frame of its traceback in
    one of the plug-in's ``roots`` (:func:`plugin_roots`), else the innermost frame outside the
    tool, the standard library and site-packages (code of the plug-in author's), else the
    innermost frame outside the tool; None for an exception without a traceback."""
    frames = [(os.path.abspath(f.filename), f.lineno or 0) for f in traceback.extract_tb(exc.__traceback__)]
    roots = [os.path.abspath(r) for r in roots]
    outside = [f for f in frames if not _under(f[0], _TOOL_DIR)]
    for chosen in (
        [f for f in frames if any(_under(f[0], r) for r in roots)],
        [f for f in outside if not any(_under(f[0], d) for d in _LIB_DIRS)],
        outside,
        frames,
    ):
        if chosen:
            return chosen[-1]
    return None


def client_error(exc: BaseException, roots: Iterable[str] = ()) -> dict[str, object]:
    """The ``client_error`` field of an op whose client raised ``exc`` (a crash of plug-in code):
    ``{"type", "message" (one line, at most 300 characters), "where" ("file.py:42", or "" when
    unknown), "path", "line"}``; ``roots`` as :func:`raised_where`."""
    found = raised_where(exc, roots)
    message = " ".join(str(exc).split())[:300]
    out: dict[str, object] = {"type": type(exc).__name__, "message": message, "where": ""}
    if found is not None:
        path, line = found
        out.update(where=f"{os.path.basename(path)}:{line}", path=path, line=line)
    return out


def client_error_text(ce: dict[str, object]) -> str:
    """``ValueError: unknown node 'n2' at etcd_db.py:42``: a ``client_error`` field in one line."""
    text = f"{ce.get('type')}: {ce.get('message')}" if ce.get("message") else str(ce.get("type"))
    return f"{text} at {ce['where']}" if ce.get("where") else text


def crashed(op: Op, exc: BaseException, db: object = None, *objs: object) -> Op:
    """The ``info`` completion of ``op`` whose client code raised ``exc`` (not a :class:`ClientError`):
    ``indeterminate: <type>: <message>`` for a declared error of ``db`` (:func:`is_declared`), else
    a client error (:func:`client_error`, blamed on the files of ``db`` and ``objs``)."""
    if is_declared(exc, db):
        return op.completion(INFO, op.value, error=f"indeterminate: {type(exc).__name__}: {exc}")
    ce = client_error(exc, plugin_roots(db, *objs))
    return op.completion(INFO, op.value, error=f"client error: {client_error_text(ce)}", client_error=ce)


@dataclass
class Answer:
    """A successful result with the answering ``node`` and extra completion ``fields``."""

    value: Any
    node: str | None = None
    fields: dict[str, Any] = field(default_factory=dict)


@runtime_checkable
class RegisterClient(Protocol):
    """The ``register`` protocol: one register per integer ``key`` (initially None).

    ``read(key)`` -> the value (or None); ``write(key, value)`` -> anything (ignored);
    ``cas(key, expected, new)`` -> True when it was applied, False when the current value was not
    ``expected`` (a definite compare failure); ``close()`` (idempotent, never raises). Optional:
    ``delete(key)`` -> anything (ignored): the key is absent afterwards, a read answers None (the
    register workload draws deletes; without the method they fail, doing nothing).
    """

    def read(self, key: Any) -> object: ...

    def write(self, key: Any, value: Any) -> object: ...

    def cas(self, key: Any, expected: Any, new: Any) -> object: ...

    def close(self) -> None: ...


@runtime_checkable
class LogClient(Protocol):
    """The ``log`` protocol: an append-only log of integers.

    ``append(value)`` -> the log index it got (an int) or None; ``read()`` -> every committed entry
    of the client's own node from the first, in order (a value no client wrote, e.g. the system's
    own entries, as None); ``close()``. Indexes are 0-based and the two agree: the entry
    ``append`` reports at index ``i`` is ``read()[i]`` (a system whose log starts at 1, as Raft's
    does, subtracts 1; the log checker compares nodes and appends index by index). Optional: ``read_recent(window)`` -> an :class:`Answer`
    whose value is the entries from ``fields["from_index"]`` on, with ``to_end`` (bool: read up to
    the node's end) and ``commit_index``; without it a mid-run read reads the whole log.
    """

    def append(self, value: int) -> object: ...

    def read(self) -> list[Any]: ...

    def close(self) -> None: ...


@runtime_checkable
class TxnClient(Protocol):
    """The ``txn`` protocol: transactions over keys (small ints) holding lists or registers.

    ``txn(mops)`` runs one transaction of micro-ops (Elle's shapes, jepsen-io/elle
    ``elle.list-append`` and ``elle.rw-register``): ``["r", k, None]`` reads ``k``, ``["w", k, v]``
    writes ``v``, ``["append", k, v]`` appends ``v`` to the list at ``k``. It returns the completed
    list, the same micro-ops in the same order with each read's value filled in: ``None`` for a key
    never written, the whole list (oldest first) for an appended key, the value for a register.
    A read sees the transaction's own earlier writes. Values are unique per key (the workloads
    guarantee it), so the checker can tell which transaction wrote what it read.

    The transaction commits atomically or not at all: raise :class:`Failed` when it certainly
    did not commit (the system aborted it: a serialization failure, a conflict, a refused request;
    recorded ``fail``, and the checker treats its writes as never having happened), and
    :class:`Indeterminate` when it may have (a timeout, a connection lost around the commit;
    recorded ``info``). Do not retry an aborted transaction inside the client: an abort is an
    outcome the checker uses. ``close()`` (idempotent, never raises).
    """

    def txn(self, mops: list[list[Any]]) -> object: ...

    def close(self) -> None: ...


def complete(
    op: Op,
    call: Callable[[], object],
    value: Callable[[Any], object] | None = None,
    *,
    test: Test | None = None,
) -> Op:
    """The completion of ``op`` after ``call()`` (a protocol method): ok with ``value(result)``
    (default: the result itself; an :class:`Answer` gives its value, node and fields); ``fail`` for
    :class:`Failed`/:class:`NotSent` (with ``aborted: true`` for :class:`Aborted`); ``info`` for
    :class:`Indeterminate` and any other exception: a declared error of ``test.db``
    (:func:`is_declared`) as ``indeterminate: ...``, anything else as a client error
    (:func:`crashed`: ``client_error`` names the exception and the plug-in's file:line)."""
    try:
        result = call()
    except Failed as e:
        comp = _errored(op, FAIL, e)
        if isinstance(e, Aborted):
            comp.extra["aborted"] = True
        return comp
    except Indeterminate as e:
        return _errored(op, INFO, e, "indeterminate: ")
    except Exception as e:  # unknown whether it was sent: info (Jepsen's crashed op)
        return crashed(op, e, getattr(test, "db", None))
    node = None
    fields: dict[str, object] = {}
    if isinstance(result, Answer):
        node, fields, result = result.node, dict(result.fields), result.value
    comp = op.completion(OK, value(result) if value is not None else result, **fields)
    if node:
        comp.node = node
    return comp


def _errored(op: Op, type_: str, e: ClientError, prefix: str = "") -> Op:
    text = str(e) or type(e).__name__
    comp = op.completion(
        type_, op.value, error=prefix + text if not text.startswith(prefix) else text, **e.fields
    )
    if e.node:
        comp.node = e.node
    return comp


def value_kind(test: Test) -> str | None:
    """What the keys of a ``txn`` workload hold: ``"list"`` (list-append: ``append`` micro-ops, a
    read returns the whole list) or ``"register"`` (rw-register: ``w`` micro-ops, a read returns
    the value); None for a workload that does not say (``test.workload.value_kind``)."""
    kind = getattr(getattr(test, "workload", None), "value_kind", None)
    return str(kind) if kind else None


def node_of(test: Test, node: Node | str) -> Node:
    """The :class:`~chaos.control.node.Node` named ``node`` among ``test.nodes`` (a Node is
    returned as it is); a name the test does not list is a node known by its hostname only
    (``Node(name, host=name)``, as Jepsen's nodes are hostnames)."""
    if isinstance(node, Node):
        return node
    for n in getattr(test, "nodes", None) or ():
        if isinstance(n, Node) and n.name == node:
            return n
    return Node(name=str(node), host=str(node))


def open_db_client(test: Test, protocol: str, node: Node | str, process: Any) -> Any:
    """``test.db.open_client(protocol, test, node, process)`` with ``node`` as a
    :class:`~chaos.control.node.Node` (a name is looked up with :func:`node_of`);
    :class:`NotSent` naming the DB when the DB offers no client of ``protocol`` (the runner checks
    that at start)."""
    db = test.db
    offered = getattr(db, "client_protocols", None) or ()
    if protocol not in offered or not has(db, Clients):
        name = getattr(db, "name", type(db).__name__)
        raise NotSent(f"the DB {name} offers no {protocol!r} client (offers: {', '.join(offered) or 'none'})")
    return db.open_client(protocol, test, node_of(test, node), process)


class ProtocolWorker:
    """Base of a workload's client template (Jepsen's ``jepsen.client``): one per worker thread,
    bound to ``node`` (its name); :meth:`client` opens the DB's client of :attr:`protocol` for that
    :class:`~chaos.control.node.Node` at the first op of each process (a crashed process, retired
    after ``info``, gets a new one); :meth:`close` closes it (idempotent)."""

    protocol = ""

    def __init__(self, node: str | None = None) -> None:
        self.node = node
        self.c: Any = None
        self.process: Any = None

    def client(self, test: Test, op: Op) -> Any:
        if self.c is None or op.process != self.process:
            self.close(test)
            self.c = open_db_client(test, self.protocol, str(self.node), op.process)
            self.process = op.process
        return self.c

    def close(self, test: Test) -> None:
        if self.c is not None:
            c, self.c = self.c, None
            c.close()

    def read_list_on(self, test: Test, op: Op) -> Answer:
        """The client's ``read()`` on the op's node (a final read names each node), else on the
        worker's own, as an :class:`Answer` whose value is a list (the ``log`` and ``set``
        protocols' whole-state reads); a client of another node is opened for it and closed."""
        target = op.node or self.node
        if target == self.node:
            r = self.client(test, op).read()
        else:
            c = open_db_client(test, self.protocol, str(target), op.process)
            try:
                r = c.read()
            finally:
                c.close()
        if isinstance(r, Answer):
            return Answer(list(r.value), r.node or target, r.fields)
        return Answer(list(r), target)
