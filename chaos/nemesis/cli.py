"""``chaos heal``: remove every fault the tool may have left on the nodes (after a crashed control node).

Per node, idempotently, through every registered fault module (:func:`chaos.nemesis.registered`:
the built-ins and the ``chaos.nemeses`` plug-ins; ``--nemesis module:attr`` adds one that is not
registered), each module's ``heal`` and ``residue`` (:class:`chaos.nemesis.base.NemesisKind`), with
the DB's own capabilities (:mod:`chaos.control.db`; the DB is ``--db``/``--db-opt`` as for
``chaos run``). The built-ins delete the tool's iptables chains (``CHAOS-PARTITION``,
``CHAOS-PACKET``, ``CHAOS-PACKET-OUT``) and their jumps, never other rules; delete the tool's qdiscs
(handle ``c4a5:``); stop the NFQUEUE delayer and the clock strobe loop; with the ``clock``
capability reset the DB's libfaketime offset file to ``+0``; with ``pause`` resume the server (the
DB's ``resume``) and SIGCONT stopped leftovers its ``kill_match`` names; take a lose-unfsynced FUSE
layer off. Killed servers are not restarted (``chaos run`` restarts what its nemeses killed).
Then, as Jepsen's ``net/heal!`` does, whatever else filters or shapes the node's traffic:
iptables/ip6tables DROP and REJECT rules and shaping qdiscs chaos did not create (a partition added
by hand), by :mod:`chaos.nemesis.netstate`; ``--keep-foreign-rules`` leaves them and lists them.

The heal takes the cluster lock as ``chaos run`` does (:mod:`chaos.cluster.lock`): while a run
holds it the heal is refused (254, naming the run), since it would undo that run's faults;
``--force`` heals anyway and says whose lock it ignored.

Every node is checked for leftovers (:func:`residue`) before and after, and after the heal also for
any process stopped by a signal (:data:`STOPPED_SCRIPT`), whoever stopped it: a plug-in DB's second
daemon that its ``kill_match`` does not name is found too. What a node's lines say comes from that
check after the heal, never from the commands sent: ``healed: X`` for a leftover found before and
gone after, ``still present: X`` for one found after, each once, then one status line naming what
was checked (and, when a module cannot tell its leftovers, what was not):
``clean: nothing found after the heal (checked: ...)`` or ``not clean: N left after the heal
(checked: ...)``: "clean" is said only of what was looked at. Exit status 0 when every node is clean afterwards, 255 when a node could
not be reached, something remains or a registered fault module did not load, 254 for bad
arguments.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any

import click

from chaos.cluster.docker import ClusterError, DockerProvider
from chaos.cluster.lock import ClusterLock, ClusterLocked, describe, holders, is_stale
from chaos.cluster.providers import existing_nodes
from chaos.control.db import build_db
from chaos.control.ssh import Control
from chaos.control.test import Test
from chaos.errors import EXIT_CRASH, BadArguments
from chaos.nemesis import load, netstate, registered
from chaos.nemesis.base import NemesisKind, sh

if TYPE_CHECKING:
    from chaos.control.ssh import Remote

Modules = Sequence[tuple[str, NemesisKind]]
"""``[(name, descriptor)]``: the fault modules to heal."""

# every process in state T (stopped by SIGSTOP / SIGTSTP; not "t", stopped by a tracer)
STOPPED_SCRIPT = "ps -eo pid=,stat=,comm= 2>/dev/null | awk '$2 ~ /^T/ {print $1, $3}'; true"
STOPPED_CHECK = "stopped processes"


def stopped_processes(ps_output: str) -> list[str]:
    """``["stopped process PID (COMMAND)", ...]`` from :data:`STOPPED_SCRIPT`'s output."""
    out = []
    for line in ps_output.splitlines():
        parts = line.split(None, 1)
        if parts and parts[0].isdigit():
            out.append(f"stopped process {parts[0]} ({parts[1].strip() if len(parts) > 1 else '?'})")
    return out


def after_heal(remote: Remote, db: object, modules: Modules) -> list[str]:
    """What a check after the heal finds on one node: every module's :func:`residue` and every
    stopped process (one line per process: a pid the residue already names is not listed again)."""

    found = residue(remote, db, modules)
    named = {w for line in found for w in line.split() if w.isdigit()}
    stopped = stopped_processes(str(sh(remote, STOPPED_SCRIPT, check=False).stdout))
    found += [line for line in stopped if line.split()[2] not in named]
    return list(dict.fromkeys(found))


def checked_names(modules: Modules) -> list[str]:
    """What the check after the heal looks at: each module that can tell its leftovers, and
    stopped processes."""
    return [name for name, kind in modules if kind.residue is not None] + [STOPPED_CHECK]


def default_db() -> object:
    """The default DB of ``chaos run`` (:func:`chaos.plugins.default_db`), with its defaults."""

    return build_db(None)


def fault_modules(extra: Iterable[str] = ()) -> tuple[list[tuple[str, NemesisKind]], list[str]]:
    """Every registered fault module, then those ``extra`` names (``module:attr``) that are not
    among them: ``([(name, descriptor)], [problems: registered plug-ins that did not load])``.
    ConfigError for an ``extra`` name that does not load."""

    modules, problems = registered()
    for spec in extra:
        kind = load(spec)
        if all(kind is not k for _, k in modules):
            modules.append((spec, kind))
    return modules, problems


def _modules(modules: Modules | None) -> Modules:
    return fault_modules()[0] if modules is None else modules


def residue(remote: Remote, db: object = None, modules: Modules | None = None) -> list[str]:
    """Faults still present on a node, one line each (empty when clean), as every fault module's
    ``residue`` finds them (default: every registered module) for ``db`` (default
    :func:`default_db`): iptables chains/jumps, qdiscs, running loops, a non-zero clock offset,
    stopped server processes, a FUSE layer, a plug-in's leftovers."""
    db = default_db() if db is None else db
    return [line for _, kind in _modules(modules) for line in kind.residue_node(remote, db)]


def heal_remote(remote: Remote, db: object = None, modules: Modules | None = None) -> list[str]:
    """Heal one node for ``db`` through every fault module's ``heal`` (default: every registered
    one; a module whose heal raises does not stop the others, its error becomes a line); returns
    what :func:`residue` finds afterwards, plus those error lines."""
    db = default_db() if db is None else db
    modules = _modules(modules)
    return _heal_each(remote, db, modules)[1] + residue(remote, db, modules)


def _heal_each(remote: Remote, db: object, modules: Modules) -> tuple[list[str], list[str]]:
    """``(what the heals said they did, errors)`` of every module's heal on one node."""
    did: list[str] = []
    errors: list[str] = []
    for name, kind in modules:
        try:
            did += kind.heal_node(remote, db)
        except Exception as e:  # keep healing with the other modules
            errors.append(f"heal of {name} failed: {type(e).__name__}: {' '.join(str(e).split())}")
    return did, errors


def heal_control(control: Control, db: object = None, modules: Modules | None = None) -> dict[str, list[str]]:
    """Heal every node of ``control`` in parallel for ``db`` (default :func:`default_db`); returns
    ``{node: residue lines}`` afterwards."""
    db = default_db() if db is None else db
    modules = _modules(modules)
    return dict(control.on_nodes(lambda r: heal_remote(r, db, modules)))


def heal_nodes(test: Test) -> dict[str, list[str]]:
    """:func:`heal_control` for a runner ``Test`` (its DB)."""
    return heal_control(test.control, getattr(test, "db", None))


def _nodes(provider: str, cluster: str, nodes: str | None, nodes_file: str | None, **ssh: Any) -> list[Any]:
    """The nodes to heal, through the provider selector of every command (nothing provisioned)."""

    opts = {
        "provider": provider,
        "cluster_name": cluster,
        "nodes": nodes,
        "nodes_file": nodes_file,
        "username": ssh.get("username"),
        "ssh_private_key": ssh.get("key_path"),
        "ssh_port": ssh.get("port"),
        "strict_host_key_checking": ssh.get("strict_host_key_checking"),
    }
    try:
        return existing_nodes(opts)
    except (ValueError, ClusterError) as e:
        raise BadArguments(str(e)) from e


def _cluster_name(ctx: click.Context, param: click.Parameter, value: str) -> str:
    """``--cluster-name`` as ``chaos cluster up`` accepts it (the docker provider's rule: lowercase
    letters, digits, ``-``/``_``, at most 31 characters), refused before any file is looked up."""

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
@click.option(
    "--strict-host-key-checking/--no-strict-host-key-checking",
    default=None,
    help="ssh provider: require known host keys (default on; off for the local containers).",
)
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
@click.option(
    "--keep-foreign-rules",
    is_flag=True,
    help="Leave DROP/REJECT iptables rules and qdiscs that chaos did not create (by default they "
    "are deleted, as Jepsen's net/heal! does); they are still listed, and the node is not clean.",
)
@click.option(
    "--force", is_flag=True, help="Heal even while a run holds the cluster lock (undoing its faults)."
)
def heal(
    provider: str,
    cluster: str,
    nodes: str | None,
    nodes_file: str | None,
    username: str,
    ssh_private_key: str | None,
    port: int,
    strict_host_key_checking: bool | None,
    db: str | None,
    db_opt: tuple[str, ...],
    extra: tuple[str, ...],
    keep_foreign_rules: bool,
    force: bool,
) -> int:
    """Heal every fault the tool may have left on every node: partitions, packet shaping, clock
    offsets, paused servers (through the DB's capabilities), a plug-in fault module's leftovers.
    Also DROP/REJECT rules and qdiscs chaos did not create, as Jepsen's net/heal! does (unless
    --keep-foreign-rules). Refuses (254) while a run holds the cluster lock, unless --force.
    Prints one status line per node, naming what was healed and what was checked; exit 0 when every node is clean afterwards, 255 when a node could not be
    reached or healed, still has faults, or a registered fault module did not load."""

    try:
        the_db = build_db(db, list(db_opt))
        modules, problems = fault_modules(extra)
    except ValueError as e:
        raise BadArguments(str(e)) from None
    modules.append((netstate.NAME, netstate.OBSERVE_ONLY if keep_foreign_rules else netstate.NETWORK))

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

    status = _heal_all(node_list, the_db, modules, force)
    for line in problems:
        click.echo(f"chaos heal: fault module not loaded, its faults not healed: {line}", err=True)
    if not _report(status, checked_names(modules), unchecked_names(modules)) or problems:
        return EXIT_CRASH  # 1 would read as *invalid*
    return 0


def _heal_all(node_list: list[Any], db: object, modules: Modules, force: bool) -> dict[str, Any]:
    """Heal every node under the cluster lock (:func:`_take_lock`): ``{node: ("ok"|"error",
    residue before, what the check after the heal found, or the error)}``."""

    def one(remote: Remote) -> tuple[str, list[str], list[str]]:
        # every node is healed on its own: one unreachable node must not stop the others
        try:
            before = residue(remote, db, modules)
            errors = _heal_each(remote, db, modules)[1]
            return "ok", before, errors + after_heal(remote, db, modules)
        except Exception as e:
            return "error", [], [f"{type(e).__name__}: {e}"]

    control = Control(node_list)
    try:
        lock = _take_lock(control, force)
        try:
            return dict(control.on_nodes(one))
        finally:
            if lock is not None:
                lock.release()
    finally:
        control.close()


HEAL_HINT = "chaos heal would undo that run's faults: wait for it to end, or pass --force to heal anyway"


def _take_lock(control: Control, force: bool) -> ClusterLock | None:
    """The cluster lock for the heal, as ``chaos run`` takes it (:mod:`chaos.cluster.lock`; a
    stale lock of a dead run on this host is replaced): a live run's lock refuses the heal
    (ClusterLocked, exit 254) unless ``force``, which heals without the lock and says whose it
    is. A node that cannot be reached does not stop the heal (its line says so): the other nodes'
    locks are then read, not taken. Returns the lock to release, or None."""

    def holder(remote: Remote) -> dict[str, object] | None:

        try:
            return holders([remote]).get(remote.node.name)
        except Exception:  # unreachable: its own line reports it
            return None

    if force:
        held: dict[str, list[str]] = {}
        for node, h in sorted(control.on_nodes(holder).items()):
            if h is not None and not is_stale(h):
                held.setdefault(describe(h), []).append(node)
        for who, where in held.items():
            click.echo(
                f"chaos heal: --force: healing {', '.join(where)} while run {who} holds the lock", err=True
            )
        return None
    lock = ClusterLock(control, "chaos heal", log=lambda s: click.echo(f"chaos heal: {s}", err=True))
    try:
        lock.acquire()
        return lock
    except ClusterLocked as e:
        raise ClusterLocked(e.node, e.holder, HEAL_HINT) from None
    except Exception:  # a node unreachable: read the others' locks instead
        lock.release()
    for node, h in sorted(control.on_nodes(holder).items()):
        if h is not None and not is_stale(h):
            raise ClusterLocked(node, h, HEAL_HINT)
    return None


def unchecked_names(modules: Modules) -> list[str]:
    """The fault modules that cannot tell their leftovers (no ``residue``): healed, never checked."""
    return [name for name, kind in modules if kind.residue is None and kind.heal is not None]


def _report(
    status: dict[str, tuple[str, list[str], list[str]]],
    checked: Sequence[str] = (),
    unchecked: Sequence[str] = (),
) -> bool:
    """Print each node's lines from ``{node: ("ok"|"error", residue before, what the check after
    the heal found, or the error)}``, ``checked`` (what that check looked at) and ``unchecked``
    (modules healed but unable to tell their leftovers): each leftover once, then the node's
    status from the check after the heal, naming both. True when every node is clean."""
    clean = True
    what = f"checked: {', '.join(checked)}" if checked else ""
    if unchecked:
        what += (
            "; " if what else ""
        ) + f"not checked: {', '.join(unchecked)} (they cannot tell their leftovers)"
    what = f" ({what})" if what else ""
    for name in sorted(status):
        kind, before, after = status[name]
        if kind == "error":
            clean = False
            click.echo(f"{name}: not healed: {' '.join(after[0].split())}")
            continue
        after = list(dict.fromkeys(after))
        for line in dict.fromkeys(before):
            if line not in after:
                click.echo(f"{name}: healed: {line}")
        for line in after:
            click.echo(f"{name}: still present: {line}")
        if after:
            clean = False
            click.echo(f"{name}: not clean: {len(after)} left after the heal{what}")
        else:
            click.echo(f"{name}: clean: nothing found after the heal{what}")
    return clean
