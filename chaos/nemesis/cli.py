"""``chaos heal``: remove every fault the tool may have left on the nodes (after a crashed control node).

Per node, idempotently, through every registered fault module (:func:`chaos.nemesis.registered`:
the built-ins and the ``chaos.nemeses`` plug-ins; ``--nemesis module:attr`` adds one that is not
registered), each module's ``heal`` and ``residue`` (:class:`chaos.nemesis.base.NemesisKind`), with
the DB's own capabilities (:mod:`chaos.cluster.db`; the DB is ``--db``/``--db-opt`` as for
``chaos run``). The built-ins delete the tool's iptables chains (``CHAOS-PARTITION``,
``CHAOS-PACKET``, ``CHAOS-PACKET-OUT``) and their jumps, never other rules; delete the tool's qdiscs
(handle ``c4a5:``); stop the NFQUEUE delayer and the clock strobe loop; with the ``clock``
capability reset the DB's libfaketime offset file to ``+0``; with ``pause`` resume the server (the
DB's ``resume``) and SIGCONT stopped leftovers its ``kill_match`` names; take a lose-unfsynced FUSE
layer off. Killed servers are not restarted (``chaos run`` restarts what its nemeses killed).

Every node is checked for leftovers (:func:`residue`) before and after; each node's line says what
was healed (the leftovers found before) or that it was clean. Exit status 0 when every node is clean
afterwards, 255 when a node could not be reached, something remains or a registered fault module
did not load, 254 for bad arguments.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import click

from chaos.errors import EXIT_CRASH
from chaos.nemesis.base import NemesisKind

Modules = Sequence[tuple[str, NemesisKind]]
"""``[(name, descriptor)]``: the fault modules to heal."""


def default_db() -> Any:
    """The default DB of ``chaos run`` (:func:`chaos.plugins.default_db`), with its defaults."""
    from chaos.cluster.db import build_db

    return build_db(None)


def fault_modules(extra: Iterable[str] = ()) -> tuple[list[tuple[str, NemesisKind]], list[str]]:
    """Every registered fault module, then those ``extra`` names (``module:attr``) that are not
    among them: ``([(name, descriptor)], [problems: registered plug-ins that did not load])``.
    ConfigError for an ``extra`` name that does not load."""
    from chaos.nemesis import load, registered

    modules, problems = registered()
    for spec in extra:
        kind = load(spec)
        if all(kind is not k for _, k in modules):
            modules.append((spec, kind))
    return modules, problems


def _modules(modules: Modules | None) -> Modules:
    return fault_modules()[0] if modules is None else modules


def residue(remote: Any, db: Any = None, modules: Modules | None = None) -> list[str]:
    """Faults still present on a node, one line each (empty when clean), as every fault module's
    ``residue`` finds them (default: every registered module) for ``db`` (default
    :func:`default_db`): iptables chains/jumps, qdiscs, running loops, a non-zero clock offset,
    stopped server processes, a FUSE layer, a plug-in's leftovers."""
    db = default_db() if db is None else db
    return [line for _, kind in _modules(modules) for line in kind.residue_node(remote, db)]


def heal_remote(remote: Any, db: Any = None, modules: Modules | None = None) -> list[str]:
    """Heal one node for ``db`` through every fault module's ``heal`` (default: every registered
    one; a module whose heal raises does not stop the others, its error becomes a line); returns
    what :func:`residue` finds afterwards, plus those error lines."""
    db = default_db() if db is None else db
    modules = _modules(modules)
    return _heal_each(remote, db, modules)[1] + residue(remote, db, modules)


def _heal_each(remote: Any, db: Any, modules: Modules) -> tuple[list[str], list[str]]:
    """``(what the heals said they did, errors)`` of every module's heal on one node."""
    did: list[str] = []
    errors: list[str] = []
    for name, kind in modules:
        try:
            did += kind.heal_node(remote, db)
        except Exception as e:  # keep healing with the other modules
            errors.append(f"heal of {name} failed: {type(e).__name__}: {' '.join(str(e).split())}")
    return did, errors


def heal_control(control: Any, db: Any = None, modules: Modules | None = None) -> dict[str, list[str]]:
    """Heal every node of ``control`` in parallel for ``db`` (default :func:`default_db`); returns
    ``{node: residue lines}`` afterwards."""
    db = default_db() if db is None else db
    modules = _modules(modules)
    return dict(control.on_nodes(lambda r: heal_remote(r, db, modules)))


def heal_nodes(test: Any) -> dict[str, list[str]]:
    """:func:`heal_control` for a runner ``Test`` (its DB)."""
    return heal_control(test.control, getattr(test, "db", None))


def _nodes(provider: str, cluster: str, nodes: str | None, nodes_file: str | None, **ssh: Any) -> list[Any]:
    from chaos.errors import BadArguments

    if provider == "docker":
        from chaos.cluster.docker import ClusterError, load_nodes

        try:
            return load_nodes(cluster)
        except ClusterError as e:
            raise BadArguments(str(e)) from e
    if provider == "ssh":
        from chaos.cluster.sshhosts import SSHHosts
        from chaos.control.test import check_number, check_text_file

        try:
            check_number("ssh_port", ssh.get("port"))
            if nodes_file:
                check_text_file(nodes_file, "--nodes-file")
            return SSHHosts.from_options(nodes=nodes, nodes_file=nodes_file, **ssh).up()
        except ValueError as e:
            raise BadArguments(str(e)) from e
    raise BadArguments(f"--provider {provider!r}: expected docker or ssh")


def _cluster_name(ctx: click.Context, param: click.Parameter, value: str) -> str:
    """``--cluster-name`` as ``chaos cluster up`` accepts it (the docker provider's rule: lowercase
    letters, digits, ``-``/``_``, at most 31 characters), refused before any file is looked up."""
    from chaos.cluster.docker import DockerProvider

    try:
        DockerProvider(1, name=value)  # checks the name; touches nothing
    except ValueError as e:
        raise click.BadParameter(f"{e} (at most 31 characters)", ctx, param) from None
    return value


@click.command("heal")
@click.option("--provider", type=click.Choice(["docker", "ssh"]), default="docker", show_default=True)
@click.option(
    "--cluster-name",
    "--cluster",
    "cluster",
    default="default",
    show_default=True,
    callback=_cluster_name,
    help="docker: cluster name",
)
@click.option("--nodes", help="ssh provider: comma-separated [name=][user@]host[:port] entries")
@click.option("--nodes-file", type=click.Path(), help="ssh provider: file with one node per line")
@click.option("--username", default="root", show_default=True, help="ssh provider: SSH user")
@click.option("--ssh-private-key", type=click.Path(), help="ssh provider: private key file")
@click.option(
    "--ssh-port",
    "--port",
    "port",
    type=int,
    default=22,
    show_default=True,
    help="ssh provider: default SSH port",
)
@click.option("--strict-host-key-checking/--no-strict-host-key-checking", default=False, show_default=True)
@click.option(
    "--db", default=None, help="The DB whose faults to heal, as chaos run's --db [default: chaos run's]."
)
@click.option("--db-opt", multiple=True, metavar="KEY=VALUE", help="An option of the DB, as chaos run's.")
@click.option(
    "--nemesis",
    "extra",
    multiple=True,
    metavar="MODULE:ATTR",
    help="A fault module not registered as a chaos.nemeses entry point whose faults to heal too "
    "(repeatable; registered ones are always healed).",
)
def heal(
    provider: str,
    cluster: str,
    nodes: str | None,
    nodes_file: str | None,
    username: str,
    ssh_private_key: str | None,
    port: int,
    strict_host_key_checking: bool,
    db: str | None,
    db_opt: tuple[str, ...],
    extra: tuple[str, ...],
) -> int:
    """Heal every fault the tool may have left on every node: partitions, packet shaping, clock
    offsets, paused servers (through the DB's capabilities), a plug-in fault module's leftovers.
    Prints one status line per node, naming what was healed; exit 0 when every node is clean
    afterwards, 255 when a node could not be reached or healed, still has faults, or a registered
    fault module did not load."""
    from chaos.cluster.db import build_db
    from chaos.control.ssh import Control
    from chaos.errors import BadArguments

    try:
        the_db = build_db(db, list(db_opt))
        modules, problems = fault_modules(extra)
    except ValueError as e:
        raise BadArguments(str(e)) from None

    node_list = _nodes(
        provider,
        cluster,
        nodes,
        nodes_file,
        username=username,
        key_path=ssh_private_key,
        port=port,
        strict_host_key_checking=strict_host_key_checking,
    )

    def one(remote: Any) -> tuple[str, list[str], list[str]]:
        # every node is healed on its own: one unreachable node must not stop the others
        try:
            before = residue(remote, the_db, modules)
            return "ok", before, heal_remote(remote, the_db, modules)
        except Exception as e:
            return "error", [], [f"{type(e).__name__}: {e}"]

    control = Control(node_list)
    try:
        status = control.on_nodes(one)
    finally:
        control.close()
    for line in problems:
        click.echo(f"chaos heal: fault module not loaded, its faults not healed: {line}", err=True)
    if not _report(status) or problems:
        return EXIT_CRASH  # 1 would read as *invalid*
    return 0


def _report(status: dict[str, tuple[str, list[str], list[str]]]) -> bool:
    """Print each node's status line(s) from ``{node: ("ok"|"error", residue before, residue after
    or the error)}``; True when every node is clean."""
    clean = True
    for name in sorted(status):
        kind, before, lines = status[name]
        if kind == "error":
            clean = False
            click.echo(f"{name}: not healed: {' '.join(lines[0].split())}")
            continue
        for line in before:
            if line not in lines:
                click.echo(f"{name}: healed: {line}")
        if lines:
            clean = False
            for line in lines:
                click.echo(f"{name}: still present: {line}")
        else:
            click.echo(f"{name}: healed" if before else f"{name}: clean (nothing to heal)")
    return clean
