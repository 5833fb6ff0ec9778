"""``chaos heal``: remove every fault the tool may have left on the nodes (after a crashed control node).

Per node, idempotently, through the DB's own capabilities (:mod:`chaos.cluster.db`; the DB is
``--db``/``--db-opt`` as for ``chaos run``): delete the tool's iptables chains (``CHAOS-PARTITION``,
``CHAOS-PACKET``, ``CHAOS-PACKET-OUT``) and their jumps, never other rules; delete the tool's qdiscs
(handle ``c4a5:``); stop the NFQUEUE delayer and the clock strobe loop; with the ``clock``
capability reset the DB's libfaketime offset file to ``+0``; with ``pause`` resume the server
(the DB's ``resume``) and SIGCONT stopped leftovers its ``kill_match`` names. Killed servers are
not restarted (``chaos run`` restarts what its nemeses killed).

Every node is checked for leftovers (:func:`residue`) before and after; each node's line says what
was healed (the leftovers found before) or that it was clean. Exit status 0 when every node is clean
afterwards, 255 when a node could not be reached or something remains, 254 for bad arguments.
"""

from __future__ import annotations

import shlex
import sys
from typing import Any

import click

from chaos.cluster.db import resume_all
from chaos.errors import EXIT_CRASH
from chaos.nemesis import clock, files, packet, partition
from chaos.nemesis.base import STATE_DIR

_STOPPED = (
    "for p in $(ps -eo pid=,stat= | awk '$2 ~ /^T/ {print $1}'); do "
    "if tr '\\0' ' ' < /proc/$p/cmdline 2>/dev/null | grep -Eq MATCH; then ACTION; fi; done; true"
)

RESIDUE = r"""
for c in CHAOS-PARTITION CHAOS-PACKET CHAOS-PACKET-OUT; do
  iptables -w -S $c >/dev/null 2>&1 && echo "iptables chain $c: $(iptables -w -S $c | grep -c -- '^-A') rules"
done
iptables -w -S 2>/dev/null | grep -- '-j CHAOS-' | sed 's/^/iptables jump: /'
for d in $(ls /sys/class/net); do
  tc qdisc show dev $d 2>/dev/null | grep -E 'c4a5:|c4a6:' | sed "s/^/qdisc on $d: /"
done
for f in {state}/strobe.pid {state}/nfqdelay.pid; do
  [ -f $f ] && kill -0 $(cat $f) 2>/dev/null && echo "running $(basename $f .pid) loop"
done
[ -d {lazyfs} ] && echo "FUSE layer of lose-unfsynced still in place ({lazyfs})"
true
"""


def default_db() -> Any:
    """The default DB of ``chaos run`` (:func:`chaos.plugins.default_db`), with its defaults."""
    from chaos.cluster.db import build_db

    return build_db(None)


def _caps(db: Any) -> set[str]:
    from chaos.cluster.db import capabilities

    return capabilities(db)


def _paused_scripts(db: Any) -> tuple[str, str]:
    """(resume, detect) shell for stopped server processes: by the DB's ``pidfile`` and its
    ``kill_match`` regex, when it has them."""
    resume, detect = [], []
    pidfile = getattr(db, "pidfile", None)
    if pidfile:
        q = shlex.quote(str(pidfile))
        resume.append(f"p=$(cat {q} 2>/dev/null) && kill -CONT $p 2>/dev/null; true")
        detect.append(
            f"p=$(cat {q} 2>/dev/null) && ps -o stat= -p $p 2>/dev/null | grep -q '^T' && "
            'echo "paused process $p"; true'
        )
    match = getattr(db, "kill_match", None)
    if match:
        m = shlex.quote(str(match))
        resume.append(_STOPPED.replace("MATCH", m).replace("ACTION", "kill -CONT $p"))
        found = 'case " $seen " in *" $p "*) ;; *) echo "paused process $p";; esac'
        detect.append("seen=$(cat " + shlex.quote(str(pidfile)) + " 2>/dev/null); " if pidfile else "seen=; ")
        detect.append(_STOPPED.replace("MATCH", m).replace("ACTION", found))
    return "; ".join(resume) or "true", " ".join(detect) or "true"


def heal_script(db: Any = None) -> str:
    """Shell that heals every fault kind on one node for ``db`` (default :func:`default_db`): the
    network, the strobe loop, the clock offset (``clock`` capability), stopped server processes
    (``pidfile``/``kill_match``; the DB's ``resume`` is called separately)."""
    db = default_db() if db is None else db
    steps = [partition.heal_script(), packet.heal_script(), clock.stop_strobe_script()]
    if "clock" in _caps(db):
        steps.append(clock.reset_script(str(db.faketime_file)))
    steps += [_paused_scripts(db)[0], "true"]
    return "; ".join(steps)


def residue_script(db: Any = None) -> str:
    from chaos.nemesis.packet import delayer_residue_script

    db = default_db() if db is None else db
    # a delayer whose pidfile was lost is found by its command line
    script = RESIDUE.replace("{state}", STATE_DIR).replace("{lazyfs}", files.LAZYFS_STATE)
    if "clock" in _caps(db):
        f = shlex.quote(str(db.faketime_file))
        script += (
            f"if [ -f {f} ]; then o=$(tr -d ' \\n' < {f}); case \"$o\" in ''|+0|-0|0|+0.000) ;; "
            '*) echo "clock offset $o";; esac; fi\n'
        )
    script += _paused_scripts(db)[1] + "\n"
    return script + delayer_residue_script()


def residue(remote: Any, db: Any = None) -> list[str]:
    """Faults of the tool still present on a node, one line each (empty when clean): iptables
    chains/jumps, qdiscs, running loops, and for ``db`` (default :func:`default_db`) a non-zero
    clock offset and stopped server processes."""
    res = remote.exec_raw(residue_script(db), sudo=True, check=False)
    return [line for line in res.stdout.splitlines() if line.strip()]


def heal_remote(remote: Any, db: Any = None) -> list[str]:
    """Heal one node for ``db`` (the script, then the DB's ``resume`` with the ``pause``
    capability, then a FUSE layer a dead run left behind); returns what :func:`residue` finds
    afterwards."""
    db = default_db() if db is None else db
    remote.exec_raw(heal_script(db), sudo=True, check=False)
    if "pause" in _caps(db):
        resume_all(db, remote)
    _remove_lazyfs_layer(remote, db)
    return residue(remote, db)


def _remove_lazyfs_layer(remote: Any, db: Any) -> None:
    """A run that died with lose-unfsynced enabled leaves the FUSE layer under the data directory:
    take it off as the nemesis's teardown does. Needs the DB's process and data-dir capabilities
    (without them residue reports the layer)."""
    if not {"process", "data-dir"} <= _caps(db):
        return
    if remote.exec_raw(f"test -d {shlex.quote(files.LAZYFS_STATE)}", sudo=True, check=False).ok:
        files.remove_layer(db, remote)


def heal_control(control: Any, db: Any = None) -> dict[str, list[str]]:
    """Heal every node of ``control`` in parallel for ``db`` (default :func:`default_db`); returns
    ``{node: residue lines}`` afterwards."""
    db = default_db() if db is None else db
    return dict(control.on_nodes(lambda r: heal_remote(r, db)))


def heal_nodes(test: Any) -> dict[str, list[str]]:
    """:func:`heal_control` for a runner ``Test`` (its DB)."""
    return heal_control(test.control, getattr(test, "db", None))


def _nodes(provider: str, cluster: str, nodes: str | None, nodes_file: str | None, **ssh: Any) -> list[Any]:
    """The nodes to heal, through the provider selector of every command (nothing provisioned)."""
    from chaos.cluster.docker import ClusterError
    from chaos.cluster.providers import existing_nodes
    from chaos.errors import BadArguments

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


@click.command("heal")
@click.option("--provider", type=click.Choice(["docker", "ssh"]), default="docker", show_default=True)
@click.option(
    "--cluster-name",
    "--cluster",
    "cluster",
    default="default",
    show_default=True,
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
) -> int:
    """Heal every fault the tool may have left on every node: partitions, packet shaping, clock
    offsets, paused servers (through the DB's capabilities). Prints one status line per node, naming
    what was healed; exit 0 when every node is clean afterwards, 255 when a node could not be
    reached or healed, or still has faults."""
    from chaos.cluster.db import build_db
    from chaos.control.ssh import Control
    from chaos.errors import BadArguments

    try:
        the_db = build_db(db, list(db_opt))
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
            before = residue(remote, the_db)
            return "ok", before, heal_remote(remote, the_db)
        except Exception as e:
            return "error", [], [f"{type(e).__name__}: {e}"]

    control = Control(node_list)
    try:
        status = control.on_nodes(one)
    finally:
        control.close()
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
    if not clean:
        sys.exit(EXIT_CRASH)
    return 0


"""``chaos heal``'s status when some node is unreachable or keeps a fault (1 would read as *invalid*)."""
