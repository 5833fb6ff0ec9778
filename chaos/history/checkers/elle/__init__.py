"""An Elle-style transactional consistency checker (Kingsbury & Alvaro, "Elle: Inferring Isolation
Anomalies from Experimental Observations", VLDB 2020; jepsen-io/elle).

Workloads: ``list-append`` (``chaos.history.checkers.elle.listappend``) and ``rw-register``
(``chaos.history.checkers.elle.rwregister``). The pipeline is Elle's: pair the transactions, run the checks
that need no graph, infer ww / wr / rw edges (plus realtime or process order when the consistency
model proscribes such anomalies), split the graph into strongly connected components and search
each for short cycles of every anomaly type (``chaos.history.checkers.elle.graph``), then decide the verdict
from the model lattice (``chaos.history.checkers.elle.anomalies``).

Result (``check_ops``, ``ElleChecker.check``)::

    {"valid": True | False | "unknown", "consistency_model": str, "workload": str,
     "anomaly_types": [sorted names], "counts": {type: n},
     "anomalies": {type: [case, ...]},   # at most ``max_examples`` per type
     "not": [weakest models ruled out], "also_not": [stronger ones], "txns": n,
     "summary": str, "cause": str (when unknown), "phases": {name: seconds}}

A cycle case is ``{"type", "cycle": [txn summaries named T1..], "edges": [{"from", "to", "type",
"why"}], "explanation"}``; a non-cycle case names its transactions and carries an ``explanation``.
``valid`` is False when an anomaly the model proscribes was found; ``"unknown"`` when none was but
the check could not decide (no edge could be inferred, the cycle search ran out of its budget, or
the history breaks a precondition such as unique appends: ``cause`` says which); else True.
"""

from __future__ import annotations

from typing import Any

# the checker pulls in rustworkx and numpy: imported on first use, so `chaos check` of other
# workloads starts fast
_LAZY = ("ElleChecker", "check_ops", "check_file", "WORKLOADS", "DEFAULT_MODEL")


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        # deferred: the checker's import loads rustworkx and numpy (see _LAZY)
        from chaos.history.checkers.elle import checker

        return getattr(checker, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = list(_LAZY)
