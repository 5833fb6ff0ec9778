"""The rw-register workload (Elle's ``elle.rw-register``): transactions of reads and blind writes of
unique values to registers under integer keys, through the DB's ``txn`` client, checked by Elle
(``chaos.history.checkers.elle``) for the run's ``consistency_model`` (default strict-serializable).

A read returns one value, so Elle learns less than from list-append: the version order of a key
comes from the initial state and, when asked, from writes-follow-reads (``wfr_keys``). Op shape,
generator and options: see :mod:`chaos.workloads.txn`.
"""

from __future__ import annotations

from typing import Any

from chaos.workloads import Workload
from chaos.workloads.txn import txn_workload

NAME = "rw-register"


def workload(opts: dict[str, Any]) -> Workload:
    """Options: ``key_count`` (10), ``min_txn_length`` (1), ``max_txn_length`` (4),
    ``max_writes_per_key`` (32). ValueError for a count below 1."""
    return txn_workload(NAME, "w", opts)
