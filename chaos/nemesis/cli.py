"""``chaos heal``: remove every fault the tool may have left on the nodes (after a crashed control node).

Per node, idempotently: delete the tool's iptables chains (``CHAOS-PARTITION``, ``CHAOS-PACKET``,
``CHAOS-PACKET-OUT``) and their jumps, never other rules; delete the tool's qdiscs (handle
``c4a5:``); stop the NFQUEUE delayer and the clock strobe loop; reset the libfaketime offset file to
``+0``; SIGCONT the server and any stopped ``dledger`` process. Killed servers are not restarted
(that needs the DB's options; ``chaos run`` restarts what its nemeses killed).

Afterwards every node is checked for leftovers (:func:`residue`); the exit status is 0 when every
node is clean, 255 when a node could not be reached or something remains (each node's status is
printed), 254 for bad arguments.
"""

from __future__ import annotations

import sys
from typing import Any

import click

from chaos.nemesis import clock, packet, partition
from chaos.nemesis.base import STATE_DIR

PIDFILE = "/var/run/dledger.pid"
FAKETIME_FILE = clock.OFFSET_FILE

_CONT = (
    "p=$(cat PIDFILE 2>/dev/null) && kill -CONT $p 2>/dev/null; "
    "for p in $(ps -eo pid=,stat= | awk '$2 ~ /^T/ {print $1}'); do "
    "if tr '\\0' ' ' < /proc/$p/cmdline 2>/dev/null | grep -q dledger; then kill -CONT $p; fi; done; true"
)

RESIDUE = r"""
for c in CHAOS-PARTITION CHAOS-PACKET CHAOS-PACKET-OUT; do
  iptables -w -S $c >/dev/null 2>&1 && echo "iptables chain $c: $(iptables -w -S $c | grep -c -- '^-A') rules"
done
iptables -w -S 2>/dev/null | grep -- '-j CHAOS-' | sed 's/^/iptables jump: /'
for d in $(ls /sys/class/net); do
  tc qdisc show dev $d 2>/dev/null | grep -E 'c4a5:|c4a6:' | sed "s/^/qdisc on $d: /"
done
for p in $(ps -eo pid=,stat= | awk '$2 ~ /^T/ {print $1}'); do
  if tr '\0' ' ' < /proc/$p/cmdline 2>/dev/null | grep -q dledger; then echo "paused process $p"; fi
done
if [ -f {faketime} ]; then o=$(tr -d ' \n' < {faketime}); case "$o" in ''|+0|-0|0|+0.000) ;; *) echo "clock offset $o";; esac; fi
for f in {state}/strobe.pid {state}/nfqdelay.pid; do
  [ -f $f ] && kill -0 $(cat $f) 2>/dev/null && echo "running $(basename $f .pid) loop"
done
true
"""


def heal_script(pidfile: str = PIDFILE, faketime_file: str = FAKETIME_FILE) -> str:
    """Shell that heals every fault kind on one node."""
    return "; ".join(
        [
            partition.heal_script(),
            packet.heal_script(),
            clock.reset_script(faketime_file),
            _CONT.replace("PIDFILE", pidfile),
            "true",
        ]
    )


def residue_script(faketime_file: str = FAKETIME_FILE) -> str:
    from chaos.nemesis.packet import delayer_residue_script

    # a delayer whose pidfile was lost is found by its command line
    script = RESIDUE.replace("{faketime}", faketime_file).replace("{state}", STATE_DIR)
    return script + "\n" + delayer_residue_script()


def residue(remote: Any, faketime_file: str = FAKETIME_FILE) -> list[str]:
    """Faults of the tool still present on a node, one line each (empty when clean): iptables
    chains/jumps, qdiscs, stopped dledger processes, a non-zero clock offset, running loops."""
    res = remote.exec_raw(residue_script(faketime_file), sudo=True, check=False)
    return [line for line in res.stdout.splitlines() if line.strip()]


def heal_control(
    control: Any, pidfile: str = PIDFILE, faketime_file: str = FAKETIME_FILE
) -> dict[str, list[str]]:
    """Heal every node of ``control`` in parallel; returns ``{node: residue lines}`` afterwards."""
    script = heal_script(pidfile, faketime_file)

    def one(remote: Any) -> list[str]:
        remote.exec_raw(script, sudo=True, check=False)
        return residue(remote, faketime_file)

    return dict(control.on_nodes(one))


def heal_nodes(test: Any) -> dict[str, list[str]]:
    """:func:`heal_control` for a runner ``Test`` (uses its DB's pidfile and offset file)."""
    db = getattr(test, "db", None)
    return heal_control(
        test.control,
        pidfile=getattr(db, "pidfile", PIDFILE),
        faketime_file=getattr(db, "faketime_file", None) or FAKETIME_FILE,
    )


def _nodes(provider: str, cluster: str, nodes: str | None, nodes_file: str | None, **ssh: Any) -> list[Any]:
    from chaos.cli import BadArguments

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
@click.option("--strict-host-key-checking/--no-strict-host-key-checking", default=False, show_default=True)
@click.option("--pidfile", default=PIDFILE, show_default=True, help="server pidfile on the nodes")
@click.option("--faketime-file", default=FAKETIME_FILE, show_default=True, help="libfaketime offset file")
def heal(
    provider: str,
    cluster: str,
    nodes: str | None,
    nodes_file: str | None,
    username: str,
    ssh_private_key: str | None,
    port: int,
    strict_host_key_checking: bool,
    pidfile: str,
    faketime_file: str,
) -> int:
    """Heal every fault the tool may have left on every node: partitions, packet shaping, clock
    offsets, paused servers. Prints one status line per node; exit 0 when every node is clean
    afterwards, 255 when a node could not be reached or healed, or still has faults."""
    from chaos.control.ssh import Control

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
    script = heal_script(pidfile, faketime_file)

    def one(remote: Any) -> tuple[str, list[str]]:
        # every node is healed on its own: one unreachable node must not stop the others
        try:
            remote.exec_raw(script, sudo=True, check=False)
            return "ok", residue(remote, faketime_file)
        except Exception as e:
            return "error", [f"{type(e).__name__}: {e}"]

    control = Control(node_list)
    try:
        status = control.on_nodes(one)
    finally:
        control.close()
    clean = True
    for name in sorted(status):
        kind, lines = status[name]
        if kind == "error":
            clean = False
            click.echo(f"{name}: not healed: {' '.join(lines[0].split())}")
        elif lines:
            clean = False
            for line in lines:
                click.echo(f"{name}: still present: {line}")
        else:
            click.echo(f"{name}: healed")
    if not clean:
        sys.exit(EXIT_NOT_HEALED)
    return 0


EXIT_NOT_HEALED = 255
"""``chaos heal``'s status when some node is unreachable or keeps a fault (1 would read as *invalid*)."""
