"""A DB node as the control node sees it (Jepsen's ``:nodes`` plus ``:ssh`` options).

Every provider (``docker``, ``ssh``) yields a list of :class:`Node`; everything downstream (the SSH
layer, the DB automation, the nemeses) depends only on this shape.
"""

from __future__ import annotations

import json
import re
from dataclasses import asdict, dataclass, fields
from typing import Any

_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,62}$")


@dataclass(frozen=True)
class Node:
    """One DB node.

    - ``name``: short name, e.g. ``"n1"``; DBs may use it as the member id.
    - ``host``: address the control node uses for SSH and for DB clients.
    - ``port``: SSH port.
    - ``user``: SSH user; commands with ``sudo=True`` run through ``sudo`` unless this is ``root``.
    - ``key_path``: private key file, or None to use paramiko's defaults (agent, ~/.ssh keys).
    - ``strict_host_key_checking``: reject hosts missing from ``~/.ssh/known_hosts`` (Jepsen's
      ``--strict-host-key-checking``).
    - ``db_host``: address the other nodes use to reach this one (defaults to ``host``).

    Raises ValueError for an empty/ill-formed name, an empty host or a port outside 1..65535.
    """

    name: str
    host: str
    port: int = 22
    user: str = "root"
    key_path: str | None = None
    strict_host_key_checking: bool = False
    db_host: str | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not _NAME_RE.match(self.name):
            raise ValueError(f"node name {self.name!r}: expected letters, digits, '.', '_' or '-' (max 63)")
        if not isinstance(self.host, str) or not self.host.strip():
            raise ValueError(f"node {self.name}: host {self.host!r}: expected a hostname or IP address")
        if not isinstance(self.port, int) or not 1 <= self.port <= 65535:
            raise ValueError(f"node {self.name}: SSH port {self.port!r}: expected an integer in 1..65535")
        if not isinstance(self.user, str) or not self.user:
            raise ValueError(f"node {self.name}: user {self.user!r}: expected a non-empty user name")

    @property
    def peer_host(self) -> str:
        """The address other nodes use for this node (``db_host`` or ``host``)."""
        return self.db_host or self.host

    def to_dict(self) -> dict[str, object]:
        """JSON-ready dict (for ``test.json`` and the cluster state file)."""
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Node:
        """Inverse of :meth:`to_dict`; unknown keys raise ValueError naming them."""
        known = {f.name for f in fields(cls)}
        extra = set(d) - known
        if extra:
            raise ValueError(
                f"node entry {d!r}: unknown fields {sorted(extra)}; expected some of {sorted(known)}"
            )
        return cls(**d)


def nodes_to_json(nodes: list[Node]) -> str:
    """Serialise a node list (``[{"name": ..., ...}, ...]``)."""
    return json.dumps([n.to_dict() for n in nodes], indent=2)


def nodes_from_json(text: str) -> list[Node]:
    """Parse what :func:`nodes_to_json` wrote; raises ValueError on a malformed list."""
    data = json.loads(text)
    if not isinstance(data, list):
        raise ValueError("node list: expected a JSON array of node objects")
    return [Node.from_dict(d) for d in data]


def check_unique(nodes: list[Node]) -> None:
    """Raise ValueError if two nodes share a name (DBs use names as member ids) or one host:port
    (two names for one machine: a fault on one would hit the other, and a quorum counted twice)."""
    seen: set[str] = set()
    where: dict[tuple[str, int], str] = {}
    for n in nodes:
        if n.name in seen:
            raise ValueError(f"node name {n.name!r} appears twice; node names must be unique")
        seen.add(n.name)
        addr = (n.host.lower(), n.port)
        if addr in where:
            raise ValueError(
                f"nodes {where[addr]!r} and {n.name!r} are both {n.host}:{n.port}; each node must be its own host"
            )
        where[addr] = n.name
