"""The ``ssh`` node provider: hosts that already exist (Jepsen's ``--nodes`` / ``--nodes-file``).

Entries are ``host``, ``host:port``, ``name=host`` or ``name=host:port``. Without ``name=`` the node
name is the host with ``-`` replaced by ``_`` (some systems' peer strings use ``-`` to separate a
member's id and address). Host key checking is strict by default here: the hosts must be in ``~/.ssh/known_hosts``.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

from chaos.control.node import Node, check_unique
from chaos.control.test import check_number, check_text_file

_ENTRY_RE = re.compile(
    r"^(?:(?P<name>[A-Za-z0-9_.]+)=)?(?P<host>\[[0-9A-Fa-f:.]+\]|[^\s:=\[\]]+)(?::(?P<port>\d+))?$"
)


def parse_entry(entry: str, *, default_port: int = 22) -> tuple[str, str, int]:
    """``"n1=10.0.0.5:2222"`` -> ``("n1", "10.0.0.5", 2222)``; ValueError naming the entry otherwise."""
    e = entry.strip()
    m = _ENTRY_RE.match(e)
    if not m:
        raise ValueError(f"node entry {entry!r}: expected host, host:port, name=host or name=host:port")
    host = m.group("host").strip("[]")
    name = m.group("name") or host.replace("-", "_")
    port = int(m.group("port")) if m.group("port") else default_port
    if not 1 <= port <= 65535:
        raise ValueError(f"node entry {entry!r}: port {port} outside 1..65535")
    return name, host, port


def read_nodes_file(path: str | os.PathLike[str]) -> list[str]:
    """Entries of a nodes file: one per line, ``#`` comments and blank lines ignored."""
    p = Path(path)
    if not p.is_file():
        raise ValueError(f"nodes file {p}: does not exist")
    out = []
    for line in p.read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            out.append(line)
    if not out:
        raise ValueError(f"nodes file {p}: no node entries")
    return out


class SSHHosts:
    """Nodes from a list of existing hosts.

    ``entries``: host entries (see module doc); ``username`` (default root); ``key_path`` (private key,
    None for agent/default keys); ``port`` (default SSH port for entries without one);
    ``strict_host_key_checking`` (default True).
    """

    def __init__(
        self,
        entries: list[str],
        *,
        username: str = "root",
        key_path: str | None = None,
        port: int = 22,
        strict_host_key_checking: bool = True,
    ) -> None:
        if not entries:
            raise ValueError("ssh provider: expected at least one node (--nodes or --nodes-file)")
        if key_path is not None and not os.path.isfile(os.path.expanduser(key_path)):
            raise ValueError(f"--ssh-private-key {key_path}: file does not exist")
        self.nodes: list[Node] = []
        for e in entries:
            name, host, p = parse_entry(e, default_port=port)
            self.nodes.append(
                Node(
                    name=name,
                    host=host,
                    port=p,
                    user=username,
                    key_path=os.path.expanduser(key_path) if key_path else None,
                    strict_host_key_checking=strict_host_key_checking,
                )
            )
        check_unique(self.nodes)

    host_keys_known = True  # existing hosts: their keys belong in ~/.ssh/known_hosts

    @classmethod
    def for_options(cls, opts: dict[str, Any], log: Callable[[str], None] = lambda s: None) -> SSHHosts:
        """The provider of :mod:`chaos.cluster.providers`' options (``nodes``, ``nodes_file``,
        ``username``, ``ssh_private_key``, ``ssh_port``, ``strict_host_key_checking``); ValueError
        naming the option for a bad one."""
        if not opts.get("nodes") and not opts.get("nodes_file"):
            raise ValueError("the ssh provider needs --nodes h1,h2,... or --nodes-file FILE")

        port = opts.get("ssh_port")
        if port is not None:
            check_number("ssh_port", port)
        nodes_file = opts.get("nodes_file")
        if nodes_file and os.path.isfile(str(nodes_file)):  # a missing one: read_nodes_file says so
            check_text_file(str(nodes_file), "--nodes-file")
        strict = opts.get("strict_host_key_checking")
        return cls.from_options(
            nodes=opts.get("nodes"),
            nodes_file=nodes_file,
            username=opts.get("username") or "root",
            key_path=opts.get("ssh_private_key"),
            port=int(port or 22),
            strict_host_key_checking=True if strict is None else bool(strict),
        )

    def existing(self) -> list[Node]:
        """The listed hosts (as :meth:`up`: nothing is provisioned)."""
        return list(self.nodes)

    @classmethod
    def from_options(
        cls,
        nodes: str | None = None,
        nodes_file: str | None = None,
        **kw,
    ) -> SSHHosts:
        """From the CLI's ``--nodes a,b,c`` and/or ``--nodes-file F``."""
        entries: list[str] = []
        if nodes:
            entries += [e.strip() for e in nodes.split(",") if e.strip()]
        if nodes_file:
            entries += read_nodes_file(nodes_file)
        return cls(entries, **kw)

    def up(self) -> list[Node]:
        """The nodes (nothing is provisioned; reachability is checked by the caller's Control)."""
        return list(self.nodes)
