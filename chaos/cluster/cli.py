"""``chaos cluster``: provision, inspect and remove the node cluster.

``up``/``status``/``down`` work on the embedded ``docker`` provider (the default) or on existing
hosts (``--provider ssh`` or any ``--nodes`` that is a host list). ``image`` builds the node image,
``exec`` runs a command on every node. Bad input exits 254 (:class:`chaos.cli.BadArguments`); a node,
engine or image failure prints one line naming the node and the cause and exits 255.

:func:`node_options` adds the node-selection options to a command; its handler passes them on as
``**node`` to :func:`resolve_nodes`.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable
from typing import Any

import click

from chaos.cluster import providers
from chaos.cluster.docker import DEFAULT_CLUSTER, ClusterError, DockerProvider
from chaos.cluster.image import ImageError, ensure_image, image_tag, remove_image
from chaos.cluster.osetup import DebianOS
from chaos.control.node import Node
from chaos.control.ssh import Control, RemoteError
from chaos.errors import BadArguments, Refused


class ClusterFailure(click.ClickException):
    """The environment failed (engine missing, node unreachable, wrong key); exit 255."""

    exit_code = 255


def node_options(fn: Callable[..., object]) -> Callable[..., object]:
    """The node-selection options (Jepsen's ``--nodes``, ``--nodes-file``, ``--username``,
    ``--ssh-private-key``, ``--ssh-port``, ``--strict-host-key-checking``) plus ``--provider`` and
    ``--cluster-name``."""
    opts = [
        click.option(
            "--provider",
            type=click.Choice(["docker", "ssh"]),
            default=None,
            help="docker (local containers, default) or ssh (existing hosts; implied by a host list).",
        ),
        click.option(
            "--nodes", "nodes", default=None, help="docker: number of nodes (default 5); ssh: h1,h2,..."
        ),
        click.option(
            "--nodes-file", type=click.Path(dir_okay=False), default=None, help="ssh: one host per line."
        ),
        click.option(
            "--username", default="root", show_default=True, help="ssh: login user (sudo if not root)."
        ),
        click.option(
            "--ssh-private-key", type=click.Path(dir_okay=False), default=None, help="ssh: private key."
        ),
        click.option("--ssh-port", type=int, default=22, show_default=True, help="ssh: default port."),
        click.option(
            "--strict-host-key-checking/--no-strict-host-key-checking",
            default=None,
            help="ssh: require known host keys (default on; off for the local containers).",
        ),
        click.option(
            "--cluster-name", default=DEFAULT_CLUSTER, show_default=True, help="docker: cluster name."
        ),
    ]
    for o in reversed(opts):
        fn = o(fn)
    return fn


def node_opts(
    provider: str | None = None,
    nodes: str | None = None,
    nodes_file: str | None = None,
    username: str = "root",
    ssh_private_key: str | None = None,
    ssh_port: int = 22,
    strict_host_key_checking: bool | None = None,
    cluster_name: str = DEFAULT_CLUSTER,
) -> dict[str, object]:
    """:func:`node_options`' values as the options of :mod:`chaos.cluster.providers` (``--nodes``
    is the node count of the docker provider, the host list of the ssh provider); BadArguments for
    a docker ``--nodes`` that is not a number."""
    opts: dict[str, object] = {
        "provider": provider,
        "nodes": nodes,
        "nodes_file": nodes_file,
        "username": username,
        "ssh_private_key": ssh_private_key,
        "ssh_port": ssh_port,
        "strict_host_key_checking": strict_host_key_checking,
        "cluster_name": cluster_name,
    }
    opts["provider"] = providers.provider_name(opts)
    if opts["provider"] == "docker" and nodes is not None:
        if not nodes.strip().isdigit():
            raise BadArguments(
                f"--nodes {nodes!r}: the docker provider expects a number of nodes, e.g. --nodes 5"
            )
        opts["nodes"], opts["node_count"] = None, int(nodes)
    return opts


def _docker(cluster_name: str) -> DockerProvider:
    try:
        return DockerProvider.for_options({"cluster_name": cluster_name})
    except ValueError as e:
        raise BadArguments(str(e)) from None


def resolve_nodes(
    provider: str | None = None,
    nodes: str | None = None,
    nodes_file: str | None = None,
    username: str = "root",
    ssh_private_key: str | None = None,
    ssh_port: int = 22,
    strict_host_key_checking: bool | None = None,
    cluster_name: str = DEFAULT_CLUSTER,
    *,
    up: bool = True,
    resize: bool = False,
    log: Callable[[str], None] = lambda s: None,
) -> list[Node]:
    """The nodes the options name, through the one provider selector
    (:mod:`chaos.cluster.providers`, its SSH-options default included). docker: bring the cluster
    up (``up=True``, a no-op when live) or read its recorded nodes; ssh: the listed hosts.
    BadArguments for bad options, ClusterFailure for engine/image failures."""
    opts = node_opts(
        provider,
        nodes,
        nodes_file,
        username,
        ssh_private_key,
        ssh_port,
        strict_host_key_checking,
        cluster_name,
    )
    opts["resize"] = resize  # docker: `cluster up --nodes N` may remove nodes beyond N
    try:
        return providers.provision(opts, log) if up else providers.existing_nodes(opts)
    except ValueError as e:
        raise BadArguments(str(e)) from None
    except Refused:  # a locked cluster, no Docker engine: exit 254 with its line
        raise
    except ClusterError as e:
        raise ClusterFailure(str(e)) from None


def _errors_to_one_line(fn: Callable[..., object]) -> Callable[..., object]:
    @functools.wraps(fn)
    def wrapper(*a: object, **kw: object) -> object:
        try:
            return fn(*a, **kw)
        except Refused:  # a locked cluster, no Docker engine: exit 254 with its line
            raise
        except (ClusterError, ImageError, RemoteError) as e:
            raise ClusterFailure(str(e)) from None

    return wrapper


def _err(msg: str) -> None:
    click.echo(msg, err=True)


@click.group(name="cluster")
def cluster() -> None:
    """Provision, inspect and remove the node cluster."""


@cluster.command()
@node_options
@click.option(
    "--os-setup/--no-os-setup", default=True, show_default=True, help="Check packages, heal faults."
)
@_errors_to_one_line
def up(os_setup: bool, **node: Any) -> None:
    """Start the cluster (docker) or check the hosts (ssh); a no-op on a live cluster."""
    t0 = time.monotonic()
    # --nodes N is the user's word on the size: it may remove nodes beyond N (a run never does)
    ns = resolve_nodes(**node, resize=node.get("nodes") is not None, log=_err)
    with Control(ns) as ctl:
        hostnames = ctl.on_nodes(lambda r: r.exec("hostname").stdout.strip())
        if os_setup:
            DebianOS().setup(ctl)
    for n in ns:
        click.echo(f"{n.name}\t{n.user}@{n.host}:{n.port}\thostname={hostnames[n.name]}")
    _err(f"{len(ns)} nodes up in {time.monotonic() - t0:.1f}s")


@cluster.command()
@node_options
@_errors_to_one_line
def status(
    provider, nodes, nodes_file, username, ssh_private_key, ssh_port, strict_host_key_checking, cluster_name
):
    """Nodes, addresses and SSH reachability; exit 1 if a node is not reachable."""
    opts = node_opts(
        provider,
        nodes,
        nodes_file,
        username,
        ssh_private_key,
        ssh_port,
        strict_host_key_checking,
        cluster_name,
    )
    bad = 0
    if opts["provider"] == "docker":
        p = _docker(cluster_name)
        rows = p.status()
        if not rows:
            click.echo(f"no docker cluster {cluster_name!r} (chaos cluster up)")
            raise click.exceptions.Exit(1)
        for r in rows:
            ssh = "ssh ok" if r["ssh"] else f"ssh FAILED: {r['error']}"
            click.echo(f"{r['name']}\t{r['container']}\t{r['state']}\t{r['host'] or '-'}\t{ssh}")
            bad += not r["ssh"]
    else:
        hosts = resolve_nodes(
            "ssh", nodes, nodes_file, username, ssh_private_key, ssh_port, strict_host_key_checking, up=False
        )
        with Control(hosts, connect_timeout=5, retries=0) as ctl:
            for n in hosts:
                try:
                    h = ctl.remote(n.name).exec("hostname", timeout=10).stdout.strip()
                    click.echo(f"{n.name}\t{n.user}@{n.host}:{n.port}\tssh ok\thostname={h}")
                except RemoteError as e:
                    click.echo(f"{n.name}\t{n.user}@{n.host}:{n.port}\tssh FAILED: {e.cause}")
                    bad += 1
    raise click.exceptions.Exit(1 if bad else 0)


@cluster.command()
@click.option("--provider", type=click.Choice(["docker", "ssh"]), default="docker", show_default=True)
@click.option("--cluster-name", default=DEFAULT_CLUSTER, show_default=True)
@click.option(
    "--force",
    is_flag=True,
    help="Remove the cluster even when a live run holds it (that run then fails its heal).",
)
@_errors_to_one_line
def down(provider, cluster_name, force):
    """Remove the docker cluster: containers, network, key pair and state (nothing is left).
    Refused (254) while a live run holds the cluster's lock, as `cluster up` and `chaos run` are."""
    if provider == "ssh":
        click.echo("ssh provider: nothing to remove (use `chaos heal` to clear faults on the hosts)")
        return
    removed = _docker(cluster_name).down(force=force)
    for kind, names in removed.items():
        for name in names:
            click.echo(f"removed {kind[:-1]} {name}")
    if not any(removed.values()):
        click.echo(f"no docker cluster {cluster_name!r}")


@cluster.command()
@click.option("--force", is_flag=True, help="Rebuild even when the image exists.")
@click.option("--remove", is_flag=True, help="Remove the node images instead.")
@_errors_to_one_line
def image(force, remove):
    """Build (once, cached) the node image: Debian bookworm, sshd, iptables, tc, libfaketime."""
    if remove:
        for t in remove_image():
            click.echo(f"removed {t}")
        return
    t0 = time.monotonic()
    tag = ensure_image(force=force, log=_err)
    click.echo(tag)
    _err(f"image {tag} ready in {time.monotonic() - t0:.1f}s (recipe tag {image_tag()})")


@cluster.command(name="exec", context_settings={"ignore_unknown_options": True})
@node_options
@click.option("--sudo", is_flag=True, help="Run with sudo when the user is not root.")
@click.option("--timeout", type=float, default=60.0, show_default=True, help="Seconds per command.")
@click.argument("command", nargs=-1, required=True, type=click.UNPROCESSED)
@_errors_to_one_line
def exec_(sudo: bool, timeout: float, command: tuple[str, ...], **node: Any) -> None:
    """Run COMMAND (one shell command line) on every node in parallel; print per-node output."""
    if timeout <= 0:
        raise BadArguments(f"--timeout {timeout}: expected a positive number of seconds")
    # docker: --nodes is a count, which only ``up`` uses; exec reaches the recorded nodes
    ns = resolve_nodes(**node, up=False)
    line = " ".join(command)
    failed = 0
    with Control(ns) as ctl:

        def run(r: Any) -> Any:
            try:
                return r.exec_raw(line, sudo=sudo, timeout=timeout, check=False)
            except RemoteError as e:
                return e

        for name, res in ctl.on_nodes(run).items():
            if isinstance(res, RemoteError):
                click.echo(f"[{name}] ERROR {e_line(res)}")
                failed += 1
                continue
            for ln in res.stdout.splitlines():
                click.echo(f"[{name}] {ln}")
            for ln in res.stderr.splitlines():
                click.echo(f"[{name}] !{ln}")
            if res.exit_code:
                click.echo(f"[{name}] exit {res.exit_code}")
                failed += 1
    raise click.exceptions.Exit(1 if failed else 0)


def e_line(e: RemoteError) -> str:
    return str(e)
