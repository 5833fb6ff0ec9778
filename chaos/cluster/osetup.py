"""OS setup for a node (Jepsen's ``jepsen.os.debian``): make any Debian host fit to be a node.

Per node, idempotent: check that the packages the tool needs are installed (optionally installing
them with apt), reset the clock offset file to ``+0``, remove the tool's iptables chains
(``CHAOS-*``) and the jumps to them, delete tc qdiscs on every non-loopback interface, and SIGCONT a
paused DLedger server. Fault-specific heals belong to the nemeses; this is the minimal baseline.
"""

from __future__ import annotations

import shlex
from typing import TYPE_CHECKING

from chaos.control.ssh import RemoteError

if TYPE_CHECKING:
    from chaos.control.ssh import Control, Remote

# package -> why the tool needs it
REQUIRED_PACKAGES = {
    "python3": "runs the DLedger server",
    "python3-venv": "the server's venv",
    "python3-msgpack": "the server's only dependency",
    "iptables": "partition and packet nemeses",
    "iproute2": "tc and ip",
    "procps": "pkill, ps",
    "libfaketime": "clock nemesis",
}

CHAIN_PREFIX = "CHAOS-"
FAKETIME_FILE = "/var/run/dledger.faketime"
PIDFILE = "/var/run/dledger.pid"


class OSSetupError(RemoteError):
    """A node is not fit: missing packages that could not be installed."""


class DebianOS:
    """``setup(control)`` prepares every node in parallel; ``install``: apt-get install missing
    packages (needs network on the node) instead of failing; ``packages``: the required Debian
    packages (default :data:`REQUIRED_PACKAGES`). A node missing packages raises OSSetupError naming
    the node and the packages."""

    def __init__(self, *, install: bool = False, packages: list[str] | None = None) -> None:
        self.install = install
        self.packages = list(REQUIRED_PACKAGES) if packages is None else list(packages)

    def setup(self, control: Control) -> None:
        control.on_nodes(self.setup_node)

    def teardown(self, control: Control) -> None:
        control.on_nodes(self.heal_node)

    def missing_packages(self, remote: Remote) -> list[str]:
        pkgs = " ".join(shlex.quote(p) for p in self.packages)
        res = remote.exec_raw(
            f"for p in {pkgs}; do dpkg-query -W -f='${{Status}}\\n' $p 2>/dev/null | grep -q 'install ok installed' "
            f"|| echo $p; done",
            check=False,
        )
        return res.stdout.split()

    def setup_node(self, remote: Remote) -> None:
        missing = self.missing_packages(remote)
        if missing and self.install:
            remote.exec_raw(
                "DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=120 update -q && "
                "DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=120 install -y -q "
                "--no-install-recommends " + " ".join(missing),
                sudo=True,
                timeout=600,
            )
            missing = self.missing_packages(remote)
        if missing:
            raise OSSetupError(
                remote.node.name,
                "dpkg-query",
                None,
                cause=f"missing packages {' '.join(missing)} (apt-get install {' '.join(missing)})",
            )
        self.heal_node(remote)

    def heal_node(self, remote: Remote) -> None:
        """Clock offset +0, no CHAOS-* iptables chains, no tc qdiscs, server not stopped."""
        script = f"""
echo +0 > {FAKETIME_FILE}
if command -v iptables >/dev/null; then
  for t in filter mangle raw; do
    for c in $(iptables -w -t $t -S 2>/dev/null | awk '$1=="-N" && $2 ~ /^{CHAIN_PREFIX}/ {{print $2}}'); do
      for hook in INPUT OUTPUT FORWARD PREROUTING POSTROUTING; do
        while iptables -w -t $t -D $hook -j $c 2>/dev/null; do :; done
      done
      iptables -w -t $t -F $c 2>/dev/null; iptables -w -t $t -X $c 2>/dev/null
    done
  done
fi
if command -v tc >/dev/null; then
  for dev in $(ls /sys/class/net); do
    [ "$dev" = lo ] && continue
    tc qdisc del dev $dev root 2>/dev/null; tc qdisc del dev $dev ingress 2>/dev/null
  done
fi
p=$(cat {PIDFILE} 2>/dev/null) && kill -CONT $p 2>/dev/null
true
"""
        remote.exec_raw(script, sudo=True)
