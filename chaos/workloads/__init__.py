"""Workloads: what the clients do and how the history is checked, independent of the DB.

As Jepsen's ``jepsen.tests.linearizable-register``: a workload is a function ``workload(opts) ->
Workload`` (the built-ins ``chaos/workloads/<name>.py``, listed in :data:`WORKLOADS`; others named
``--workload module:attr`` or by a ``chaos.workloads`` entry point, see :mod:`chaos.plugins`).
The DB supplies the client: the workload names a client ``protocol`` (:mod:`chaos.control.client`:
``register``, ``log`` or ``txn``) and its client template asks the DB (``db.open_client(protocol, ...)``)
for a client of that protocol. The :class:`Workload` gives:

- ``protocol``: the client protocol the DB must offer (``client_protocols``), or None when the
  workload's client talks to the system itself;
- ``client``: a client template (``open(test, node) -> client``, ``invoke(test, op) -> op``,
  ``close(test)``; Jepsen's jepsen.client), one opened per worker thread;
- ``generator``: the client ops of the main phase (unbounded; the runner applies ``--rate`` and
  ``--time-limit``), see :mod:`chaos.control.generator`;
- ``final_generator``: client ops after the faults are healed (e.g. final reads), or None;
- ``checkers``: checker names for ``chaos.history.checkers.registry.checkers_for`` (``linear``, ``log``,
  ``log-reads``, ``set``, ``elle``, ``stats``, ``perf``), and ``model`` for ``linear``;
- ``idempotent``: fs whose indeterminate completions are recorded as ``fail``;
- ``value_kind``: for the ``txn`` protocol, what a key holds: ``"list"`` (list-append) or
  ``"register"`` (rw-register); a DB's client reads it as ``chaos.api.value_kind(test)``.

:class:`Workload` itself lives in the kit beside the :class:`chaos.control.test.Test` that holds it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from chaos import plugins
from chaos.control.test import Workload
from chaos.errors import ConfigError

# name -> one-line description (for `chaos run --help`)
WORKLOADS: dict[str, str] = {
    "register": "independent keys, read/write/cas registers, some processes stuck to their node; linearizable per key",
    "log": "unique appends, reads of every node during the run and at the end; set-full and log checks",
    "list-append": "transactions of reads and appends to lists (Elle); checked for --consistency-model",
    "rw-register": "transactions of reads and writes of registers (Elle); checked for --consistency-model",
    "bank": "transfers between accounts and reads of all balances (Jepsen's bank); totals and signs checked",
    "set": "unique adds and reads of the whole set from every node; Jepsen's set-full (linearizable)",
    "counter": "increments and reads of one counter; reads within Jepsen's counter bounds",
    "long-fork": "inserts of fresh keys and reads of key groups (Jepsen's long-fork); forked reads checked",
}


def get(name: str, opts: Mapping[str, Any] | None = None) -> Workload:
    """Build the workload ``name`` (a built-in name, an entry point's name or ``module:attr``) with
    ``opts``. Raises ValueError (a :class:`chaos.control.test.ConfigError` from the loader) naming
    the workload: unknown, not loadable, or its function does not return a Workload."""
    fn = plugins.workload_function(name)
    w = plugins.call("--workload", name, fn, dict(opts or {}))
    if not isinstance(w, Workload):
        raise ConfigError(
            f"--workload {name}: the workload function returned {type(w).__name__}, not a Workload"
        )
    return w


__all__ = ["WORKLOADS", "Workload", "get"]
