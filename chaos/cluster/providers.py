"""Choosing the nodes of a test: the provider selector every command uses (``chaos run``,
``chaos heal``, ``chaos cluster``), registered like any plug-in (:mod:`chaos.plugins`, kind
``provider``: ``docker``, the local containers of :mod:`chaos.cluster.docker`, and ``ssh``, existing
hosts, :mod:`chaos.cluster.sshhosts`; a distribution adds its own in the ``chaos.providers`` group).

The options are one dict with the CLI's keys (Jepsen's node options): ``provider`` (a name; None:
``ssh`` when ``nodes_file`` is given or ``nodes`` is not a number, else ``docker``),
``cluster_name`` and ``node_count`` (docker), ``nodes``, ``nodes_file``, ``username``,
``ssh_private_key``, ``ssh_port`` (ssh), ``strict_host_key_checking`` (True, False or None) and
``break_lock``.

A provider is a class with ``for_options(opts, log)`` (the provider those options describe;
ValueError naming the option for a bad one), ``up()`` (provision, or reuse, and return the
:class:`~chaos.control.node.Node` s), ``existing()`` (the nodes without provisioning anything;
ClusterError when there are none) and ``host_keys_known`` (bool: whether its hosts' SSH keys can be
in ``~/.ssh/known_hosts``).

The one SSH-options default (:func:`strict_host_key_checking`): strict host key checking is on for
hosts whose keys can be known (ssh hosts; ``--no-strict-host-key-checking`` turns it off) and off for
the local containers the tool created (their host keys are made fresh at each container start, so
no known_hosts can hold them; the flag does not apply to them).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any

from chaos import plugins
from chaos.control.node import Node

DEFAULT_PROVIDER = "docker"


def provider_name(opts: dict[str, object]) -> str:
    """The provider ``opts`` select: ``provider``, else ``ssh`` for a host list or nodes file, else
    ``docker``."""
    if opts.get("provider"):
        return str(opts["provider"])
    nodes = opts.get("nodes")
    if opts.get("nodes_file") or (nodes is not None and not str(nodes).strip().isdigit()):
        return "ssh"
    return DEFAULT_PROVIDER


def provider_class(opts: dict[str, object]) -> object:
    """The provider plug-in ``opts`` select (ConfigError, a ValueError, for an unknown name)."""
    return plugins.resolve("provider", provider_name(opts))


def strict_host_key_checking(opts: dict[str, object]) -> bool:
    """Whether SSH to the selected nodes rejects unknown host keys: off for a provider whose host
    keys cannot be known (the docker containers), else ``strict_host_key_checking`` unless it is
    None, default on."""
    if not getattr(provider_class(opts), "host_keys_known", True):
        return False
    flag = opts.get("strict_host_key_checking")
    return True if flag is None else bool(flag)


def provider_for(opts: dict[str, object], log: Callable[[str], None] = lambda s: None) -> Any:
    """The provider object ``opts`` describe (ValueError naming the option for a bad one)."""
    cls = provider_class(opts)
    make = getattr(cls, "for_options", None)
    if make is None:
        raise ValueError(
            f"--provider {provider_name(opts)}: {getattr(cls, '__name__', cls)!r} is not a provider "
            "(no for_options; see chaos.cluster.providers)"
        )
    return make(opts, log)


def _with_ssh_options(nodes: list[Node], opts: dict[str, object]) -> list[Node]:
    strict = strict_host_key_checking(opts)
    return [replace(n, strict_host_key_checking=strict) for n in nodes]


def provision(opts: dict[str, object], log: Callable[[str], None]) -> list[Any]:
    """The nodes, provisioned or reused (``chaos run``, ``chaos cluster up``): the local Docker
    cluster ``cluster_name`` or existing SSH hosts, with the SSH options applied. ClusterLocked
    (taken by another run) and ClusterError go up to the command."""
    return _with_ssh_options(provider_for(opts, log).up(), opts)


def existing_nodes(opts: dict[str, object]) -> list[Node]:
    """The nodes without provisioning anything (``chaos heal``, ``chaos cluster exec``): the
    recorded nodes of a docker cluster (ClusterError when it is not up), the listed SSH hosts."""
    return _with_ssh_options(provider_for(opts).existing(), opts)
