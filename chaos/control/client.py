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

Any other exception is also recorded ``info``: whether it was sent is unknown. A method may return
an :class:`Answer` instead of a bare value to record which node answered and extra fields.
:func:`complete` applies those rules; every workload's client template uses it, so no DB client
has to get the ``fail``/``info`` distinction right on its own (Jepsen: "a crashed op is info").
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from chaos.control.node import Node
from chaos.history.op import FAIL, INFO, OK, Op


class ClientError(Exception):
    """Base of the errors a protocol method raises. ``node``: which node answered, if known;
    ``fields``: extra fields for the completion."""

    def __init__(self, message: str = "", *, node: str | None = None, **fields: Any) -> None:
        super().__init__(message)
        self.node = node
        self.fields = fields


class Failed(ClientError):
    """The operation certainly did not take effect (refused by the system): ``fail``."""


class NotSent(Failed):
    """The operation was never sent (no connection, no leader known): ``fail``."""


class Indeterminate(ClientError):
    """The operation was sent and its outcome is unknown (timeout, lost connection): ``info``."""


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

    def read(self, key: Any) -> Any: ...

    def write(self, key: Any, value: Any) -> Any: ...

    def cas(self, key: Any, expected: Any, new: Any) -> Any: ...

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

    def append(self, value: int) -> Any: ...

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

    def txn(self, mops: list[list[Any]]) -> Any: ...

    def close(self) -> None: ...


def complete(op: Op, call: Callable[[], Any], value: Callable[[Any], Any] | None = None) -> Op:
    """The completion of ``op`` after ``call()`` (a protocol method): ok with ``value(result)``
    (default: the result itself; an :class:`Answer` gives its value, node and fields); ``fail`` for
    :class:`Failed`/:class:`NotSent`; ``info`` for :class:`Indeterminate` and any other exception
    (the error text recorded as ``error``)."""
    try:
        result = call()
    except Failed as e:
        return _errored(op, FAIL, e)
    except Indeterminate as e:
        return _errored(op, INFO, e, "indeterminate: ")
    except Exception as e:  # unknown whether it was sent: info (Jepsen's crashed op)
        return op.completion(INFO, op.value, error=f"indeterminate: {type(e).__name__}: {e}")
    node = None
    fields: dict[str, Any] = {}
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


def node_of(test: Any, node: Node | str) -> Node:
    """The :class:`~chaos.control.node.Node` named ``node`` among ``test.nodes`` (a Node is
    returned as it is); a name the test does not list is a node known by its hostname only
    (``Node(name, host=name)``, as Jepsen's nodes are hostnames)."""
    if isinstance(node, Node):
        return node
    for n in getattr(test, "nodes", None) or ():
        if isinstance(n, Node) and n.name == node:
            return n
    return Node(name=str(node), host=str(node))


def open_db_client(test: Any, protocol: str, node: Node | str, process: Any) -> Any:
    """``test.db.open_client(protocol, test, node, process)`` with ``node`` as a
    :class:`~chaos.control.node.Node` (a name is looked up with :func:`node_of`);
    :class:`NotSent` naming the DB when the DB offers no client of ``protocol`` (the runner checks
    that at start)."""
    db = test.db
    offered = getattr(db, "client_protocols", None) or ()
    if protocol not in offered or not callable(getattr(db, "open_client", None)):
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

    def client(self, test: Any, op: Op) -> Any:
        if self.c is None or op.process != self.process:
            self.close(test)
            self.c = open_db_client(test, self.protocol, str(self.node), op.process)
            self.process = op.process
        return self.c

    def close(self, test: Any) -> None:
        if self.c is not None:
            c, self.c = self.c, None
            c.close()
