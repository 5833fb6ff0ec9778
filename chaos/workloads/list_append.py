"""The list-append workload (Elle's ``elle.list-append``, as Jepsen's ``jepsen.tests.cycle.append``):
transactions of reads and appends of unique values to lists under integer keys, through the DB's
``txn`` client, checked by Elle (``chaos.history.checkers.elle``) for the run's ``consistency_model``
(default strict-serializable).

List-append gives Elle the most to infer: a read returns the whole list, so every read reveals
the order of the appends before it, hence ww, wr and rw dependencies. Op shape, generator and
options (``key_count``, ``min_txn_length``, ``max_txn_length``, ``max_writes_per_key``): see
:mod:`chaos.workloads.txn`.
"""

from __future__ import annotations

from typing import Any

from chaos.workloads import Workload
from chaos.workloads.txn import txn_workload

NAME = "list-append"


def workload(opts: dict[str, Any]) -> Workload:
    """Options: ``key_count`` (10), ``min_txn_length`` (1), ``max_txn_length`` (4),
    ``max_writes_per_key`` (32). ValueError for a count below 1."""
    return txn_workload(NAME, "append", opts)
