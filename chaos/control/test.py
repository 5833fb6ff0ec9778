"""The test object handed to clients, nemeses and generators (Jepsen's test map), and option parsing."""

from __future__ import annotations

import logging
import random
import re
from dataclasses import dataclass, field
from typing import Any

DEFAULTS: dict[str, Any] = {
    "workload": "register",
    "nemesis": "none",
    "nemesis_interval": 10.0,
    "time_limit": 60.0,
    "concurrency": "2n",
    "rate": 50.0,
    "provider": "docker",
    "node_count": 5,
    "test_count": 1,
    "store": "store",
    "seed": None,
    "leave_db_running": False,
    "flush": "sync",
    "read_mode": "raft-log",
    "server_args": [],
    "recovery_time": 5.0,
    "final_time_limit": 120.0,
    "check_time_limit": 120.0,
}


@dataclass
class Test:
    """One test run.

    Fields: ``name``; ``nodes`` (list of ``chaos.cluster.node.Node``); ``control``
    (``chaos.control.ssh.Control``); ``db`` (``DLedgerDB``); ``rng`` (``random.Random`` seeded with
    ``opts["seed"]``: generator and nemesis choices are reproducible); ``opts`` (every option, a dict);
    ``log`` (the run's logger, also written to ``chaos.log``); ``concurrency`` (client threads).
    """

    name: str
    nodes: list[Any]
    control: Any
    db: Any
    rng: random.Random
    opts: dict[str, Any]
    log: logging.Logger
    concurrency: int
    workload: Any = None
    nemesis: Any = None
    run_dir: Any = None
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def node_names(self) -> list[str]:
        return [n.name for n in self.nodes]


_CONC = re.compile(r"^\s*(\d+)\s*(n?)\s*$")


def parse_concurrency(value: Any, n_nodes: int) -> int:
    """``10`` -> 10; ``"3n"`` -> 3 x nodes (Jepsen's ``--concurrency``). Raises ValueError otherwise."""
    if isinstance(value, int) and not isinstance(value, bool):
        c = value
    else:
        m = _CONC.match(str(value))
        if not m:
            raise ValueError(
                f"--concurrency {value!r}: expected a positive integer or a multiple of nodes like 2n"
            )
        c = int(m.group(1)) * (n_nodes if m.group(2) else 1)
    if c < 1:
        raise ValueError(f"--concurrency {value!r}: expected at least 1 client")
    return c


def run_name(opts: dict[str, Any]) -> str:
    """``<workload>-<nemeses>`` e.g. ``register-partition-ring``; ``none`` for no nemesis."""
    nem = str(opts.get("nemesis") or "none").replace(",", "+")
    return re.sub(r"[^A-Za-z0-9_.+-]", "_", f"{opts.get('workload')}-{nem}")
