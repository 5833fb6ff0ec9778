"""The test object handed to clients, nemeses and generators (Jepsen's test map), and option parsing."""

from __future__ import annotations

import logging
import math
import os
import random
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from chaos.errors import ConfigError

DEFAULTS: dict[str, Any] = {
    "db": None,  # chaos.plugins.default_db()
    "db_opts": [],
    "workload": "register",
    "nemesis": "none",
    "nemesis_interval": 10.0,
    "time_limit": 60.0,
    "concurrency": "2n",
    "rate": 50.0,
    "provider": "docker",
    "cluster_name": None,  # the default docker cluster
    "node_count": None,  # the named docker cluster's, else 5
    "test_count": 1,
    "store": "store",
    "seed": None,
    "leave_db_running": False,
    "recovery_time": 5.0,
    "final_time_limit": 120.0,
    "check_time_limit": 120.0,
}


@dataclass
class Test:
    """One test run.

    Fields: ``name``; ``nodes`` (list of ``chaos.control.node.Node``); ``control``
    (``chaos.control.ssh.Control``); ``db`` (a :class:`chaos.cluster.db.DB`); ``rng`` (``random.Random`` seeded with
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


# option -> (type, least value, whether the least value itself is allowed, greatest value or None)
NUMBER_OPTIONS: dict[str, tuple[type, float, bool, float | None]] = {
    "time_limit": (float, 0.0, False, None),
    "nemesis_interval": (float, 0.0, False, None),
    "rate": (float, 0.0, True, None),
    "recovery_time": (float, 0.0, True, None),
    "final_time_limit": (float, 0.0, False, None),
    "check_time_limit": (float, 0.0, False, None),
    "stall_timeout": (float, 0.0, False, None),
    "per_key_limit": (int, 1, True, None),
    "ssh_port": (int, 1, True, 65535),
    "node_count": (int, 1, True, None),
    "test_count": (int, 1, True, None),
}


def option_flag(key: str) -> str:
    """``"time_limit"`` -> ``"--time-limit"``."""
    return "--" + key.replace("_", "-")


def check_number(key: str, value: Any) -> int | float:
    """``value`` of the numeric option ``key`` (see :data:`NUMBER_OPTIONS`), converted to its type.

    Floats must be finite (no ``nan``/``inf``); every number must lie in its range; an int option
    takes only whole numbers. Raises ConfigError naming the option and the range.
    """
    kind, least, least_ok, greatest = NUMBER_OPTIONS[key]
    flag = option_flag(key)
    rng = f"{'>=' if least_ok else '>'} {least:g}" + (f" and <= {greatest:g}" if greatest is not None else "")
    what = "a finite number" if kind is float else "a whole number"
    try:
        if isinstance(value, bool):
            raise TypeError
        x: int | float = float(value) if kind is float else int(str(value).strip())
    except (TypeError, ValueError):
        raise ConfigError(f"{flag} {value}: expected {what} {rng}") from None
    if (
        not math.isfinite(x)
        or x < least
        or (x == least and not least_ok)
        or (greatest is not None and x > greatest)
    ):
        raise ConfigError(f"{flag} {value}: expected {what} {rng}")
    return x


def validate_options(opts: dict[str, Any]) -> None:
    """Check every option a run needs before any node is touched; numbers are converted in place.

    Covers the numbers of :data:`NUMBER_OPTIONS` (None means "the default"), ``--store`` (must be,
    or be creatable as, a directory) and ``--nodes-file`` (readable UTF-8 text). Raises ConfigError
    (one line naming the option or file).
    """
    for key in NUMBER_OPTIONS:
        if opts.get(key) is not None:
            opts[key] = check_number(key, opts[key])
    store = opts.get("store")
    if store is not None:
        check_store(str(store))
    nodes_file = opts.get("nodes_file")
    if nodes_file:
        check_text_file(str(nodes_file), "--nodes-file")


def check_store(store: str) -> None:
    """``--store``: an existing directory, or a path whose nearest existing ancestor is a writable
    directory. Raises ConfigError."""
    p = Path(store)
    if p.exists():
        if not p.is_dir():
            raise ConfigError(f"--store {store}: not a directory")
        if not os.access(p, os.W_OK | os.X_OK):
            raise ConfigError(f"--store {store}: directory is not writable")
        return
    for parent in p.absolute().parents:
        if parent.exists():
            if not parent.is_dir():
                raise ConfigError(f"--store {store}: {parent} is not a directory")
            if not os.access(parent, os.W_OK | os.X_OK):
                raise ConfigError(f"--store {store}: cannot create it in {parent} (not writable)")
            return


def check_text_file(path: str, flag: str) -> None:
    """A file given by ``flag`` must exist and be UTF-8 text without NUL bytes. Raises ConfigError
    naming the file (and the line of the first bad byte)."""
    p = Path(path)
    try:
        data = p.read_bytes()
    except OSError as e:
        raise ConfigError(f"{flag} {path}: cannot read it ({e.strerror or e})") from None
    bad = data.find(b"\0")
    if bad < 0:
        try:
            data.decode("utf-8")
            return
        except UnicodeDecodeError as e:
            bad = e.start
    line = data.count(b"\n", 0, bad) + 1
    raise ConfigError(f"{flag} {path}: line {line}: not a text file (binary or not UTF-8)")


_CONC = re.compile(r"^\s*(\d+)\s*(n?)\s*$")


def parse_concurrency(value: Any, n_nodes: int) -> int:
    """``10`` -> 10; ``"3n"`` -> 3 x nodes (Jepsen's ``--concurrency``). Raises ConfigError otherwise."""
    if isinstance(value, int) and not isinstance(value, bool):
        c = value
    else:
        m = _CONC.match(str(value))
        if not m:
            raise ConfigError(
                f"--concurrency {value!r}: expected a positive integer or a multiple of nodes like 2n"
            )
        c = int(m.group(1)) * (n_nodes if m.group(2) else 1)
    if c < 1:
        raise ConfigError(f"--concurrency {value!r}: expected at least 1 client")
    return c


def run_name(opts: dict[str, Any]) -> str:
    """``<workload>-<nemeses>`` e.g. ``register-partition-ring``; ``none`` for no nemesis."""
    nem = str(opts.get("nemesis") or "none").replace(",", "+")
    return re.sub(r"[^A-Za-z0-9_.+-]", "_", f"{opts.get('workload')}-{nem}")
