"""The bank checker (Jepsen's ``jepsen.tests.bank/checker``).

A fixed set of accounts holds a fixed total; ``transfer`` ops move money between two accounts in
one transaction, ``read`` ops read every balance in one transaction. Only ``ok`` reads are judged;
an ok read's value is ``{account: balance}`` (JSON keys, so accounts compare as their text). A read
is a **bad read** of the first kind that fits, in Jepsen's order:

- ``unexpected-key``: it names an account outside the account set (``unexpected``);
- ``nil-balance``: some account's balance is null, or an account is missing (``nils``: the
  accounts; Jepsen's client reads every account, so a missing one is a balance it did not get);
- ``wrong-total``: the balances do not sum to the total (``total``, and ``diff`` = total - expected);
- ``negative-value``: a balance is negative, unless the test allows it (``negative``).

Result: ``valid`` (no bad read), ``read_count``, ``error_count``, ``first_error`` (the bad read
with the lowest index), ``errors`` per kind ``{count, first, worst, last}`` (``worst`` by Jepsen's
``err-badness``; ``lowest`` / ``highest`` total for wrong-total), and ``totals``: ``[time_s,
total, kind or null]`` per ok read (the first :data:`MAX_POINTS`), Jepsen's bank plot. ``unknown``
when no read completed ok. The accounts and total come from ``test["bank"]`` (``accounts``,
``total``, ``negative_balances``), else the workload's defaults :data:`ACCOUNTS` and :data:`TOTAL`
(Jepsen's: 8 accounts, 100).
"""

from __future__ import annotations

from typing import Any

from chaos.history.op import NEMESIS, OK, Op
from chaos.history.verdict import UNKNOWN, Accumulator, StreamChecker

ACCOUNTS = tuple(range(8))
TOTAL = 100
MAX_TRANSFER = 5
MAX_POINTS = 20_000
KINDS = ("unexpected-key", "nil-balance", "wrong-total", "negative-value")


def bank_params(test: dict[str, Any]) -> tuple[list[object], int, bool]:
    """``(accounts, total, negative_balances)`` of a run's test (see the module docstring)."""
    b: dict[str, Any] = test["bank"] if isinstance(test.get("bank"), dict) else {}
    accounts = list(b.get("accounts", ACCOUNTS))
    return accounts, int(b.get("total", TOTAL)), bool(b.get("negative_balances", False))


def check_read(
    value: object, accounts: set[str], total: int, negative_ok: bool = False
) -> dict[str, Any] | None:
    """The error of one ok read's value (``{account: balance}``), or None when it is good; see the
    module docstring for the kinds, tried in order. A value that is not a map is a nil-balance
    read of every account."""
    if not isinstance(value, dict):
        return {"type": "nil-balance", "nils": sorted(accounts)}
    keys = {str(k): v for k, v in value.items()}
    unexpected = sorted(k for k in keys if k not in accounts)
    if unexpected:
        return {"type": "unexpected-key", "unexpected": unexpected}
    nils = sorted(a for a in accounts if keys.get(a) is None)
    bad = [a for a in accounts if a not in nils and not isinstance(keys[a], int | float)]
    if nils or bad:
        return {"type": "nil-balance", "nils": sorted(nils + bad)}
    got = sum(keys.values())
    if got != total:
        return {"type": "wrong-total", "total": got, "diff": got - total}
    negative = [v for v in keys.values() if v < 0]
    if negative and not negative_ok:
        return {"type": "negative-value", "negative": negative}
    return None


def _badness(err: dict[str, Any], total: int) -> float:
    """Jepsen's ``err-badness``: bigger is worse."""
    kind = err["type"]
    if kind == "unexpected-key":
        return len(err["unexpected"])
    if kind == "nil-balance":
        return len(err["nils"])
    if kind == "wrong-total":
        diff = float(abs(err["diff"]))
        return diff / total if total else diff
    return -float(sum(err["negative"]))


class _BankAcc:
    def __init__(self, test: dict[str, object]) -> None:
        accounts, self.total, self.negative_ok = bank_params(test)
        self.accounts = {str(a) for a in accounts}
        self.reads = 0
        self.errors: dict[str, dict[str, Any]] = {}
        self.first: dict[str, object] | None = None
        self.totals: list[list[object]] = []

    def step(self, op: Op) -> None:
        if op.type != OK or op.f != "read" or op.process == NEMESIS:
            return
        self.reads += 1
        err = check_read(op.value, self.accounts, self.total, self.negative_ok)
        if len(self.totals) < MAX_POINTS:
            t = None
            if isinstance(op.value, dict):
                t = sum(v for v in op.value.values() if isinstance(v, int | float))
            self.totals.append([round(op.time / 1e9, 3), t, err["type"] if err else None])
        if err is None:
            return
        err = {**err, "op": {"index": op.index, "process": op.process, "node": op.node, "value": op.value}}
        if self.first is None:
            self.first = err
        k = self.errors.get(err["type"])
        if k is None:
            k = self.errors[err["type"]] = {"count": 0, "first": err, "worst": err}
            if err["type"] == "wrong-total":
                k["lowest"] = k["highest"] = err
        k["count"] += 1
        k["last"] = err
        if _badness(err, self.total) > _badness(k["worst"], self.total):
            k["worst"] = err
        if err["type"] == "wrong-total":
            if err["total"] < k["lowest"]["total"]:
                k["lowest"] = err
            if err["total"] > k["highest"]["total"]:
                k["highest"] = err

    def finish(self) -> dict[str, object]:
        n_err = sum(k["count"] for k in self.errors.values())
        out: dict[str, Any] = {
            "valid": not n_err,
            "read_count": self.reads,
            "error_count": n_err,
            "first_error": self.first,
            "errors": {kind: self.errors[kind] for kind in KINDS if kind in self.errors},
            "accounts": sorted(self.accounts),
            "total": self.total,
            "totals": self.totals,
        }
        if n_err:
            out["error"] = ", ".join(f"{k['count']} {kind}" for kind, k in out["errors"].items())
        elif not self.reads:
            out.update(valid=UNKNOWN, error="no read completed ok, so no balance was checked")
        return out


class BankChecker(StreamChecker):
    """Jepsen's bank checker; see the module docstring."""

    name = "bank"

    def begin(self, test: dict[str, object], opts: dict[str, object]) -> Accumulator:
        return _BankAcc(test)
