"""The bank workload (Jepsen's ``jepsen.tests.bank``): transfers between accounts in transactions,
and reads of every balance in one transaction, through the DB's ``bank`` client (:class:`BankClient`).

Accounts ``0 .. 7`` hold a total of 100 (Jepsen's defaults, :mod:`chaos.history.checkers.bank`; the checker
knows them): account 0 starts with ``100 - 7 * 12`` and the others with 12 each, created by the
client's :meth:`BankClient.init` before each worker's first op (idempotent: accounts that exist keep their
balances). Ops, a 50/50 mix (Jepsen's ``generator``):

- ``transfer`` ``{"from": a, "to": b, "amount": 1..5}`` with ``a != b`` (Jepsen's
  ``diff-transfer``): ok when moved, ``fail`` when the DB refused (``from`` cannot afford it:
  a client raises ``Failed(..., compare_failed=True)``, counted as a *no match*, an answer, not
  the DB unavailable; a serialization failure: ``Aborted``);
- ``read``, ok value ``{account: balance}``.

Checked by ``bank`` (every ok read sums to the total, no nil or negative balance, no other
account); ``stats``, ``perf``.
"""

from __future__ import annotations

from typing import Any, Protocol, runtime_checkable

from chaos.control import generator as gen
from chaos.control.client import Answer, ClientError, NotSent, ProtocolWorker, complete
from chaos.control.test import Test
from chaos.history.checkers.bank import ACCOUNTS, MAX_TRANSFER, TOTAL
from chaos.history.op import Op
from chaos.workloads import Workload

PROTOCOL = "bank"


def initial_balances(accounts: tuple[int, ...] = ACCOUNTS, total: int = TOTAL) -> dict[int, int]:
    """Each account ``total // n``, the remainder on the first: ``{account: balance}``."""
    each = total // len(accounts)
    return {a: each + (total - each * len(accounts) if i == 0 else 0) for i, a in enumerate(accounts)}


@runtime_checkable
class BankClient(Protocol):
    """The ``bank`` protocol (raise :class:`chaos.control.client.Failed` / ``Indeterminate`` as
    every protocol does).

    ``init(balances)``: create the accounts ``{account: balance}`` atomically where none exists
    (idempotent; called once per client before its first op); ``transfer(frm, to, amount)``: one
    transaction moving ``amount`` when ``frm``'s balance covers it, otherwise
    ``Failed(..., compare_failed=True)`` (served, the balance did not cover it: counted as a *no
    match*, not as the DB unavailable); ``read(accounts)`` -> ``{account: balance}`` of every
    account in one transaction; ``close()``.
    """

    def init(self, balances: dict[int, int]) -> Any: ...

    def transfer(self, frm: int, to: int, amount: int) -> Any: ...

    def read(self, accounts: list[int]) -> Any: ...

    def close(self) -> None: ...


class BankWorker(ProtocolWorker):
    """The Jepsen client of one worker: the DB's ``bank`` client for its node; the worker creates
    the accounts before its first op, once (an op before they could be created is ``fail``: not
    sent; once created they exist for every later op, whichever process runs it)."""

    protocol = PROTOCOL

    def __init__(self, node: str | None = None) -> None:
        super().__init__(node)
        self.ready = False  # this worker saw the accounts created: they exist from then on

    def open(self, test: Test, node: str) -> BankWorker:
        return BankWorker(node)

    def _client(self, test: Test, op: Op) -> Any:
        c = self.client(test, op)
        if not self.ready:
            try:
                c.init(initial_balances())
            except ClientError as e:
                raise NotSent(f"accounts not created: {e}", node=e.node) from None
            self.ready = True
        return c

    def invoke(self, test: Test, op: Op) -> Op:
        if op.f == "transfer":
            v = op.value
            return complete(
                op, lambda: self._client(test, op).transfer(v["from"], v["to"], v["amount"]), lambda _: v
            )
        if op.f == "read":

            def read() -> Any:
                got = self._client(test, op).read(list(ACCOUNTS))
                value = got.value if isinstance(got, Answer) else got
                out = {str(k): b for k, b in dict(value).items()}
                return Answer(out, got.node, got.fields) if isinstance(got, Answer) else out

            return complete(op, read)
        raise ValueError(f"bank client: unknown f {op.f!r}; expected transfer or read")


def _transfer(test: Test, ctx: gen.Context) -> dict[str, Any]:
    frm, to = ctx.rng.sample(ACCOUNTS, 2)
    return {"f": "transfer", "value": {"from": frm, "to": to, "amount": ctx.rng.randint(1, MAX_TRANSFER)}}


def _read(test: Test, ctx: gen.Context) -> dict[str, Any]:
    return {"f": "read", "value": None}


def workload(opts: dict[str, Any]) -> Workload:
    """No options (the accounts and total are Jepsen's defaults, which the checker knows)."""
    return Workload(
        name="bank",
        client=BankWorker(),
        generator=gen.mix([_transfer, _read]),
        final_generator=None,
        checkers=["bank", "stats", "perf"],
        model=None,
        idempotent=frozenset({"read"}),
        protocol=PROTOCOL,
    )
