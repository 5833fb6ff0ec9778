"""Workloads: what the clients do and how the history is checked.

A workload is one module ``chaos/workloads/<name>.py`` with a function ``workload(opts) -> Workload``
(registered in :data:`WORKLOADS` below with a one-line description). The :class:`Workload` gives:

- ``client``: a client template (``open(test, node) -> client``, ``invoke(test, op) -> op``,
  ``close(test)``; Jepsen's jepsen.client), one opened per worker thread;
- ``generator``: the client ops of the main phase (unbounded; the runner applies ``--rate`` and
  ``--time-limit``), see :mod:`chaos.control.generator`;
- ``final_generator``: client ops after the faults are healed (e.g. final reads), or None;
- ``checkers``: checker names for ``chaos.history.checkers.checkers_for`` (``linear``, ``log``,
  ``log-reads``, ``set``, ``stats``, ``perf``), and ``model`` for ``linear``;
- ``idempotent``: fs whose indeterminate completions are recorded as ``fail``.
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

# name -> one-line description (for `chaos run --help`)
WORKLOADS: dict[str, str] = {
    "register": "independent keys, read/write/cas registers, some processes stuck to their node; linearizable per key",
    "log": "unique appends, reads of every node during the run and at the end; set-full and log checks",
}


@dataclass
class Workload:
    """What :func:`workload` returns; see the module docstring."""

    name: str
    client: Any
    generator: Any
    final_generator: Any = None
    checkers: list[str] = field(default_factory=lambda: ["stats", "perf"])
    model: str | None = None
    idempotent: frozenset[str] = frozenset({"read"})


def get(name: str, opts: Mapping[str, Any] | None = None) -> Workload:
    """Build the workload ``name`` with ``opts``. Raises ValueError naming the known workloads."""
    if name not in WORKLOADS:
        raise ValueError(f"unknown workload {name!r}; expected one of {', '.join(WORKLOADS)}")
    module = importlib.import_module(f"chaos.workloads.{name}")
    w = module.workload(dict(opts or {}))
    if not isinstance(w, Workload):
        raise TypeError(f"chaos.workloads.{name}.workload() returned {type(w).__name__}, not a Workload")
    return w
