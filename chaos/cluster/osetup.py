"""OS setup for a node (Jepsen's ``jepsen.os.debian``): make any Debian host fit to be a node.

Per node, idempotent: install the Debian packages the tool needs and those the DB declares
(``os_packages``, :func:`chaos.control.db.os_packages`) with apt-get when they are missing, remove
the tool's iptables chains (``CHAOS-*``) and the jumps to them, and delete tc qdiscs on every
non-loopback interface. Nothing of a DB is reset here (its files, processes, clock offset file):
the DB's own ``setup`` and ``teardown`` do that. Fault-specific heals belong to the nemeses; this
is the minimal baseline.
"""

from __future__ import annotations

import shlex
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from chaos.control.db import os_packages
from chaos.control.ssh import RemoteError

if TYPE_CHECKING:
    from chaos.control.ssh import Control, Remote

# package -> why the tool needs it
REQUIRED_PACKAGES = {
    "python3": "the node-side scripts of the file faults and the FUSE layer",
    "iptables": "partition and packet nemeses",
    "iproute2": "tc and ip",
    "procps": "pkill, ps",
    "libfaketime": "clock nemesis",
}

CHAIN_PREFIX = "CHAOS-"


class OSSetupError(RemoteError):
    """A node is not fit: missing packages that could not be installed."""


class DebianOS:
    """``setup(control)`` prepares every node in parallel. ``packages``: the tool's Debian packages
    (default :data:`REQUIRED_PACKAGES`); ``db``: the DB under test, whose ``os_packages`` are added;
    ``install``: apt-get install what is missing (needs a reachable Debian mirror on the node)
    before checking; without it a missing package is only reported. A node still missing packages
    raises OSSetupError naming the node, the packages and apt's last error line. ``log``: called
    with a line when a node starts and ends installing packages (the run's status lines)."""

    def __init__(
        self,
        *,
        install: bool = True,
        packages: Sequence[str] | None = None,
        db: object = None,
        log: Callable[[str], None] | None = None,
    ) -> None:

        self.install = install
        self.log = log
        base = list(REQUIRED_PACKAGES) if packages is None else list(packages)
        self.packages = list(dict.fromkeys([*base, *os_packages(db)]))

    def setup(self, control: Control) -> None:
        control.on_nodes(self.setup_node)

    def teardown(self, control: Control) -> None:
        control.on_nodes(self.heal_node)

    def missing_packages(self, remote: Remote) -> list[str]:
        return missing_packages(remote, self.packages)

    def setup_node(self, remote: Remote) -> None:
        install_packages(remote, self.packages, install=self.install, log=self.log)
        self.heal_node(remote)

    def heal_node(self, remote: Remote) -> None:
        """No CHAOS-* iptables chains, no tc qdiscs."""
        script = f"""
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
true
"""
        remote.exec_raw(script, sudo=True)


def missing_packages(remote: Remote, packages: Sequence[str]) -> list[str]:
    """The packages of ``packages`` dpkg does not list as installed on ``remote``."""
    if not packages:
        return []
    pkgs = " ".join(shlex.quote(p) for p in packages)
    res = remote.exec_raw(
        f"for p in {pkgs}; do dpkg-query -W -f='${{Status}}\\n' $p 2>/dev/null | grep -q 'install ok installed' "
        f"|| echo $p; done",
        check=False,
    )
    return res.stdout.split()


def install_packages(
    remote: Remote,
    packages: Sequence[str],
    *,
    install: bool = True,
    log: Callable[[str], None] | None = None,
) -> None:
    """Make sure ``packages`` are installed on ``remote``: apt-get install the missing ones (when
    ``install``; a no-op when none is missing); OSSetupError naming the node, the packages still
    missing and apt's last error line otherwise. ``log`` (optional) gets a line when the install
    starts and when it ends, with its length: an install takes a minute or more. A DB may call it
    from its own ``setup``."""
    missing = missing_packages(remote, packages)
    why = ""
    if missing and install:
        t0 = time.monotonic()
        if log is not None:
            log(f"{remote.node.name}: installing {' '.join(missing)} with apt-get")
        res = remote.exec_raw(
            "DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=120 update -q && "
            "DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=120 install -y -q "
            "--no-install-recommends " + " ".join(shlex.quote(p) for p in missing),
            sudo=True,
            timeout=600,
            check=False,
        )
        if not res.ok:
            lines = (res.stderr or res.stdout).strip().splitlines()
            why = f"; apt-get: {lines[-1]}" if lines else f"; apt-get exited {res.exit_code}"
        missing_after = missing_packages(remote, missing)
        if log is not None:
            done = [p for p in missing if p not in missing_after]
            log(
                f"{remote.node.name}: installed {' '.join(done) or 'nothing'} in "
                f"{time.monotonic() - t0:.0f} s"
                + (f"; still missing {' '.join(missing_after)}" if missing_after else "")
            )
        missing = missing_after
    if missing:
        raise OSSetupError(
            remote.node.name,
            "dpkg-query",
            None,
            cause=f"missing packages {' '.join(missing)} (apt-get install {' '.join(missing)}){why}",
        )
