"""A node's packet filter and traffic shaping, whoever set them up: what ``chaos heal`` looks at
besides the fault modules' own leftovers (Jepsen's ``jepsen.net/heal!``, which flushes every
iptables rule of a node, and ``net/fast!``, which deletes its root qdisc).

A partition a person added by hand (``iptables -A INPUT -s <peer> -j DROP``), or one left by
another tool, is invisible to the fault modules (they look only at their own chains ``CHAOS-*``
and qdisc handles ``c4a5:``/``c4a6:``). This module finds, on one node:

- every rule of the iptables and ip6tables ``filter`` tables whose target is ``DROP`` or
  ``REJECT``, outside the tool's own ``CHAOS-*`` chains (the fault modules report those), as the
  ``iptables -S`` line that adds it;
- every qdisc that shapes traffic, on every interface: a root qdisc that is not one the kernel
  installs by default (:data:`DEFAULT_QDISCS`), and any ``ingress``/``clsact`` qdisc, outside the
  tool's handles.

:data:`NETWORK` is a :class:`chaos.nemesis.base.NemesisKind` with no ``--nemesis`` names, whose
``residue`` lists those (one line each, ``iptables rule not created by chaos: -A INPUT -s
10.0.0.3/32 -j DROP``) and whose ``heal`` deletes them (each rule by its own spec, ``iptables -D``;
each qdisc with ``tc qdisc del``), leaving every other rule (ACCEPT, NAT, marks, chain policies) as
it is. :data:`OBSERVE_ONLY` has the residue and no heal: ``chaos heal --keep-foreign-rules``
reports what it leaves. It is not a registered fault module: ``chaos run`` does not remove what
it did not create.
"""

from __future__ import annotations

import shlex
from typing import TYPE_CHECKING

from chaos.nemesis.base import NemesisKind, sh

if TYPE_CHECKING:
    from chaos.control.ssh import Remote

NAME = "network (iptables/ip6tables DROP and REJECT rules, qdiscs)"
"""What the check after the heal names in its ``checked:`` list."""

OWN_HANDLES = ("c4a5:", "c4a6:")  # the packet module's qdiscs (chaos.nemesis.packet)
DEFAULT_QDISCS = ("noqueue", "pfifo_fast", "mq", "fq_codel", "fq", "pfifo", "noop")
"""Root qdiscs a kernel installs by itself (``net.core.default_qdisc`` and the device's)."""

RULE = "iptables rule not created by chaos"
QDISC = "qdisc not created by chaos"

_LIST = r"""
for t in iptables ip6tables; do
  command -v $t >/dev/null 2>&1 || continue
  $t -w -S 2>/dev/null | awk -v t=$t '$1 == "-A" && $2 !~ /^CHAOS-/ && / -j (DROP|REJECT)( |$)/ {print "rule", t, $0}'
done
for d in $(ls /sys/class/net 2>/dev/null); do
  tc qdisc show dev $d 2>/dev/null | sed "s/^/qdisc $d /"
done
true
"""


def _foreign(text: str) -> tuple[list[tuple[str, str]], list[tuple[str, str, str]]]:
    """From :data:`_LIST`'s output: ``([(tool, "-A ..." rule)], [(device, "root"|"ingress",
    qdisc line)])``, the DROP/REJECT rules and the shaping qdiscs not created by chaos."""
    rules: list[tuple[str, str]] = []
    qdiscs: list[tuple[str, str, str]] = []
    for line in text.splitlines():
        parts = line.split()
        if len(parts) > 3 and parts[0] == "rule":
            rules.append((parts[1], " ".join(parts[2:])))
        elif len(parts) > 5 and parts[0] == "qdisc":
            # "qdisc eth0 qdisc netem 8001: root refcnt 2 limit 1000 delay 100ms"
            dev, kind, handle, where = parts[1], parts[3], parts[4], parts[5]
            desc = " ".join(parts[3:])
            if handle in OWN_HANDLES:
                continue
            if kind in ("ingress", "clsact"):
                qdiscs.append((dev, kind, desc))
            elif where == "root" and kind not in DEFAULT_QDISCS:
                qdiscs.append((dev, "root", desc))
    return rules, qdiscs


def _lines(rules: list[tuple[str, str]], qdiscs: list[tuple[str, str, str]]) -> list[str]:
    out = [f"{RULE}: {rule}" + (" (IPv6)" if tool == "ip6tables" else "") for tool, rule in rules]
    out += [f"{QDISC} on {dev}: {desc}" for dev, _, desc in qdiscs]
    return out


def residue(remote: Remote, db: object = None) -> list[str]:
    """The DROP/REJECT rules and shaping qdiscs on one node that chaos did not create, one line
    each (module docstring); empty when there are none."""
    return _lines(*_foreign(str(sh(remote, _LIST, check=False).stdout)))


def heal(remote: Remote, db: object = None) -> list[str]:
    """Delete those rules (``iptables -D`` with each rule's own spec) and qdiscs (``tc qdisc del
    dev D root|ingress``) on one node; returns what it deleted, one line each."""
    rules, qdiscs = _foreign(str(sh(remote, _LIST, check=False).stdout))
    cmds = []
    for tool, rule in rules:
        spec = shlex.split(rule)[1:]  # "-A CHAIN ..." -> "CHAIN ..."
        cmds.append(shlex.join([tool, "-w", "-D", *spec]) + " 2>/dev/null")
    for dev, where, _ in qdiscs:
        cmds.append(shlex.join(["tc", "qdisc", "del", "dev", dev, where]) + " 2>/dev/null")
    if cmds:
        sh(remote, "; ".join(cmds) + "; true", check=False)
    return _lines(rules, qdiscs)


def _no_build(chosen: object, opts: object) -> None:
    return None


NETWORK = NemesisKind(names={}, build=_no_build, heal=heal, residue=residue)
"""Finds and removes the foreign DROP/REJECT rules and shaping qdiscs of a node."""

OBSERVE_ONLY = NemesisKind(names={}, build=_no_build, residue=residue)
"""Finds them and leaves them (``chaos heal --keep-foreign-rules``)."""
