"""Choosing the nodes of a test: the provider selector every command uses (``chaos run``,
``chaos heal``, ``chaos cluster``), registered like any plug-in (:mod:`chaos.plugins`, kind
``provider``: ``docker``, the local containers of :mod:`chaos.cluster.docker`, and ``ssh``, existing
hosts, :mod:`chaos.cluster.sshhosts`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any


def docker_node_count(opts: dict[str, Any]) -> int:
    """The docker cluster's node count: ``node_count``, else that of the named cluster
    (``cluster_name``) when it exists, else 5."""
    if opts.get("node_count"):
        return int(opts["node_count"])
    from chaos.cluster.docker import DEFAULT_CLUSTER, ClusterError, load_nodes

    try:
        return len(load_nodes(str(opts.get("cluster_name") or DEFAULT_CLUSTER)))
    except ClusterError:
        return 5


def provision(opts: dict[str, Any], log: Callable[[str], None]) -> list[Any]:
    """The nodes: the local Docker cluster ``cluster_name`` (provisioned or reused) or existing SSH
    hosts."""
    provider = opts.get("provider", "docker")
    if provider == "docker":
        from chaos.cluster.docker import DEFAULT_CLUSTER, DockerProvider

        # ClusterLocked (taken by another run) goes up to the CLI: one line, exit 254
        return DockerProvider(
            nodes=docker_node_count(opts),
            name=str(opts.get("cluster_name") or DEFAULT_CLUSTER),
            log=log,
            break_lock=bool(opts.get("break_lock")),
        ).up()
    if provider == "ssh":
        from chaos.cluster.sshhosts import SSHHosts

        return SSHHosts.from_options(
            nodes=opts.get("nodes"),
            nodes_file=opts.get("nodes_file"),
            username=opts.get("username") or "root",
            key_path=opts.get("ssh_private_key"),
            port=int(opts.get("ssh_port") or 22),
            strict_host_key_checking=bool(opts.get("strict_host_key_checking", True)),
        ).up()
    raise ValueError(f"--provider {provider!r}: expected docker or ssh")
