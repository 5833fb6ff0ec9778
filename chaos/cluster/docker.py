"""The ``docker`` node provider: n1..nN containers with sshd on a private Docker network.

Each container is a Debian node (see :mod:`chaos.cluster.image`) with its own hostname (``n1``...),
a fixed address on the cluster's network, the capabilities that iptables, tc and clock faults need
(and ``/dev/fuse`` with ``SYS_ADMIN`` for the FUSE layer of ``lose-unfsynced``),
and the cluster's generated ed25519 public key authorised for root. The control node reaches the
containers directly at their network addresses. The state (key pair, ``nodes.json``) lives in
``~/.chaos/cluster/`` (``~/.chaos/cluster-<name>/`` for a non-default cluster name), so ``chaos run``
and ``chaos cluster`` share it. The cluster's containers and network are found by their names
(``chaos-n1``..., ``chaos-net``; ``chaos-<name>-n1``... for a named cluster), so ``down`` removes
exactly those; they also carry the labels ``chaos.cluster`` and ``chaos.node``.
"""

from __future__ import annotations

import ipaddress
import os
import re
import shutil
import socket
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from chaos.cluster.image import LABEL, EngineUnreachable, ImageError, docker_client, ensure_image
from chaos.cluster.lock import LIVE_HINT, LOCK_PATH, ClusterLocked, is_stale, live_here, parse
from chaos.control.node import Node, nodes_from_json, nodes_to_json
from chaos.control.ssh import Control, NodeUnreachable, Remote, RemoteError
from chaos.errors import Refused

DEFAULT_CLUSTER = "default"
# SYS_ADMIN and /dev/fuse: the lose-unfsynced fault mounts a FUSE layer over the data dir
CAPS = ["NET_ADMIN", "NET_RAW", "SYS_TIME", "SYS_PTRACE", "SYS_ADMIN"]
DEVICES = ["/dev/fuse:/dev/fuse:rwm"]
SUBNET_POOL = "10.89.0.0/16"  # /24 per cluster, the first free one
_NAME_RE = re.compile(r"^[a-z0-9][a-z0-9_-]{0,30}$")


class ClusterError(RuntimeError):
    """A provider step failed; the message is one line naming the node or resource and the cause."""


class ClusterShrink(Refused):
    """A run asked for fewer nodes than an existing cluster has (``--node-count``): refused, exit
    254 with one line naming the ways out; the cluster is untouched."""


class DockerUnavailable(ClusterError, Refused):
    """No Docker engine answers (:class:`chaos.cluster.image.EngineUnreachable`): an environment
    error, exit 254 with the one line naming the fix."""


def chaos_home() -> Path:
    """``$CHAOS_HOME`` or ``~/.chaos``."""
    return Path(os.environ.get("CHAOS_HOME") or Path.home() / ".chaos")


def state_dir(name: str = DEFAULT_CLUSTER) -> Path:
    """Where a docker cluster keeps its key pair and ``nodes.json``."""
    return chaos_home() / ("cluster" if name == DEFAULT_CLUSTER else f"cluster-{name}")


def load_nodes(name: str = DEFAULT_CLUSTER) -> list[Node]:
    """The nodes of the running docker cluster ``name`` as ``up`` recorded them.

    Raises ClusterError when there is no such cluster (``chaos cluster up`` first).
    """
    f = state_dir(name) / "nodes.json"
    if not f.is_file():
        raise ClusterError(f"no docker cluster {name!r} ({f} missing); run `chaos cluster up` first")
    return nodes_from_json(f.read_text())


def generate_keypair(directory: Path) -> Path:
    """Write ``id_ed25519`` (OpenSSH private key, mode 600) and ``id_ed25519.pub`` unless present."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    directory.mkdir(parents=True, exist_ok=True, mode=0o700)
    priv = directory / "id_ed25519"
    pub = directory / "id_ed25519.pub"
    if priv.is_file() and pub.is_file():
        return priv
    key = Ed25519PrivateKey.generate()
    pem = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.OpenSSH, serialization.NoEncryption()
    )
    openssh_pub = key.public_key().public_bytes(
        serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH
    )
    fd = os.open(priv, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(pem)
    pub.write_bytes(openssh_pub + b" chaos\n")
    return priv


def docker_node_count(opts: dict[str, Any]) -> int:
    """The docker cluster's node count: ``node_count`` (unless None), else that of the named
    cluster (``cluster_name``) when it exists, else 5."""
    if opts.get("node_count") is not None:
        return int(opts["node_count"])
    try:
        return len(load_nodes(str(opts.get("cluster_name") or DEFAULT_CLUSTER)))
    except ClusterError:
        return 5


class DockerProvider:
    """Provision, inspect and remove a local cluster of node containers.

    ``nodes``: how many (1..32), named n1..nN. ``name``: cluster name, so that several clusters (a
    test's and the user's) can coexist; the default cluster uses containers ``chaos-n1``... and network
    ``chaos-net``. ``image``: node image tag (default: build/cached :func:`ensure_image`).
    ``break_lock``: let :meth:`up` remove or replace containers although a run holds the cluster
    (:mod:`chaos.cluster.lock`); without it that raises ClusterLocked. ``resize``: let :meth:`up`
    remove the nodes beyond ``nodes`` of an existing cluster (``chaos cluster up --nodes N``, the
    user's explicit word); without it (``chaos run --node-count N``) that raises ClusterShrink, so
    a run never shrinks a cluster others may use as a side effect.
    """

    # the containers make fresh host keys at each start: no known_hosts can hold them
    host_keys_known = False

    @classmethod
    def for_options(
        cls, opts: dict[str, object], log: Callable[[str], None] = lambda s: None
    ) -> DockerProvider:
        """The provider of :mod:`chaos.cluster.providers`' options: ``node_count`` nodes (else the
        named cluster's, else 5), ``cluster_name``, ``break_lock``; ValueError for a bad count or
        name, or ssh-only options."""
        if opts.get("nodes_file"):
            raise ValueError("--nodes-file is for the ssh provider; the docker provider takes a node count")
        return cls(
            nodes=docker_node_count(opts),
            name=str(opts.get("cluster_name") or DEFAULT_CLUSTER),
            log=log,
            break_lock=bool(opts.get("break_lock")),
            resize=bool(opts.get("resize")),
        )

    def existing(self) -> list[Node]:
        """The nodes ``up`` recorded (nothing is started); ClusterError when the cluster is not up."""
        return load_nodes(self.name)

    def __init__(
        self,
        nodes: int = 5,
        *,
        name: str = DEFAULT_CLUSTER,
        image: str | None = None,
        log: Callable[[str], None] = lambda s: None,
        ssh_timeout: float = 60.0,
        break_lock: bool = False,
        resize: bool = False,
    ) -> None:
        if not isinstance(nodes, int) or not 1 <= nodes <= 32:
            raise ValueError(f"nodes {nodes!r}: expected an integer number of nodes in 1..32")
        if not _NAME_RE.match(name):
            raise ValueError(f"cluster name {name!r}: expected lowercase letters, digits, '-' or '_'")
        self.n = nodes
        self.name = name
        self.image = image
        self.log = log
        self.ssh_timeout = ssh_timeout
        self.break_lock = break_lock
        self.resize = resize
        self.state_dir = state_dir(name)
        self.prefix = "chaos-" if name == DEFAULT_CLUSTER else f"chaos-{name}-"
        self.network_name = "chaos-net" if name == DEFAULT_CLUSTER else f"chaos-{name}-net"
        self._client: object = None

    # -- docker plumbing ---------------------------------------------------------------------------

    @property
    def client(self) -> Any:
        if self._client is None:
            try:
                self._client = docker_client()
            except EngineUnreachable as e:
                raise DockerUnavailable(str(e)) from None
            except ImageError as e:
                raise ClusterError(str(e)) from None
        return self._client

    def _labels(self, **extra: str) -> dict[str, str]:
        return {LABEL: "cluster", f"{LABEL}.cluster": self.name, **extra}

    def _node_of(self, c: Any) -> str:
        """The node name of one of this cluster's containers (``chaos-n3`` -> ``n3``)."""
        return str(c.name)[len(self.prefix) :]

    def container_name(self, node: str) -> str:
        return f"{self.prefix}{node}"

    def _containers(self) -> list[Any]:
        # by name, not label: containers an older version labelled differently are still found
        mine = re.compile(rf"^{re.escape(self.prefix)}n\d+$")
        found = self.client.containers.list(all=True, filters={"name": self.prefix})
        return [c for c in found if mine.match(str(c.name))]

    def _network(self, create: bool) -> Any:
        nets = self.client.networks.list(names=[self.network_name])
        nets = [n for n in nets if n.name == self.network_name]
        if nets:
            return nets[0]
        if not create:
            return None
        import docker.types

        # Another cluster created at the same moment (another process) may take the subnet chosen
        # here: the engine refuses the overlap, and the next free subnet is tried.
        for attempt in range(5):
            subnet = self._free_subnet()
            gateway = str(next(subnet.hosts()))
            ipam = docker.types.IPAMConfig(
                pool_configs=[docker.types.IPAMPool(subnet=str(subnet), gateway=gateway)]
            )
            try:
                return self.client.networks.create(
                    self.network_name, driver="bridge", ipam=ipam, labels=self._labels(), check_duplicate=True
                )
            except Exception as e:  # noqa: BLE001
                if "overlap" in str(e).lower() and attempt < 4:
                    time.sleep(0.2 * (attempt + 1))
                    continue
                raise ClusterError(f"creating network {self.network_name} ({subnet}) failed: {e}") from None
        raise AssertionError("unreachable")  # pragma: no cover

    def _free_subnet(self) -> ipaddress.IPv4Network:
        used: list[ipaddress._BaseNetwork] = []
        for net in self.client.networks.list():
            net.reload()
            for cfg in (net.attrs.get("IPAM") or {}).get("Config") or []:
                try:
                    used.append(ipaddress.ip_network(cfg.get("Subnet", ""), strict=False))
                except ValueError:
                    pass
        for sub in ipaddress.ip_network(SUBNET_POOL).subnets(new_prefix=24):
            if not any(sub.overlaps(u) for u in used if u.version == 4):
                return sub  # type: ignore[return-value]
        raise ClusterError(f"no free /24 subnet left in {SUBNET_POOL} for network {self.network_name}")

    # -- provider API ------------------------------------------------------------------------------

    def up(self) -> list[Node]:
        """Start the cluster (a no-op for nodes already running) and wait for every sshd.

        Returns the nodes (name n1.., host = address on the private network, key = the cluster key).
        Raises ClusterError (engine missing, image build failure, a node whose sshd never answers),
        ClusterShrink (fewer nodes than the cluster has, without ``resize``; nothing is touched),
        ClusterLocked (a live run holds containers this would remove or replace).
        """
        self._refuse_shrink()
        try:
            image = self.image or ensure_image(self.client, log=self.log)
        except ImageError as e:
            raise ClusterError(str(e)) from None
        key = generate_keypair(self.state_dir)
        pubkey = key.with_suffix(".pub").read_text().strip()
        net = self._network(create=True)
        net.reload()
        subnet = ipaddress.ip_network(net.attrs["IPAM"]["Config"][0]["Subnet"])
        hosts = list(subnet.hosts())
        wanted = [f"n{i}" for i in range(1, self.n + 1)]
        existing = {self._node_of(c): c for c in self._containers()}

        def stale(c: Any) -> str | None:
            """Why container ``c`` must be replaced, or None."""
            if c.image.tags and image not in c.image.tags:
                return "runs an old image"
            # left by a cluster of the same name under another CHAOS_HOME (or a state directory
            # removed by hand): it authorises a key this control node no longer holds
            if _authorized_key(c) != pubkey:
                return f"authorises another key than {key}"
            return None

        replaced = [c for node, c in existing.items() if node not in wanted or stale(c)]
        if replaced:  # --break-lock lets a dead run's containers go, never a live run's
            self._refuse_if_locked(list(existing.values()), breaking=self.break_lock)
        for node, c in existing.items():
            if node not in wanted:  # the cluster shrank
                self.log(f"removing {c.name}")
                c.remove(force=True)

        def ensure(i: int, node: str) -> Node:
            ip = str(hosts[9 + i])  # .11, .12, ...
            c = existing.get(node)
            why = stale(c) if c is not None else None
            if c is not None and why is not None:
                self.log(f"{c.name} {why}; replacing it")
                c.remove(force=True)
                c = None
            if c is None:
                self._create(node, ip, image, pubkey)
            elif c.status != "running":
                self.log(f"starting {c.name}")
                c.start()
            else:
                ip = self._address(c) or ip
            return Node(name=node, host=ip, port=22, user="root", key_path=str(key))

        # containers are created in parallel: on a busy engine each create takes seconds
        with ThreadPoolExecutor(max_workers=len(wanted)) as pool:
            nodes = list(pool.map(ensure, range(1, len(wanted) + 1), wanted))
        self._wait_ssh(nodes)
        (self.state_dir / "nodes.json").write_text(nodes_to_json(nodes) + "\n")
        return nodes

    def _refuse_shrink(self) -> None:
        """Raise ClusterShrink when this cluster exists with more nodes than asked and ``resize``
        is off: removing nodes others set up is never a side effect of a run."""
        if self.resize:
            return
        names = [self._node_of(c) for c in self._containers()]
        extra = sorted((n for n in names if _node_order(n)[0] > self.n), key=_node_order)
        if not extra:
            return
        have = len(names)
        named = "" if self.name == DEFAULT_CLUSTER else f" --cluster-name {self.name}"
        raise ClusterShrink(
            f"--node-count {self.n}: the docker cluster {self.name!r} has {have} nodes and a run never "
            f"removes nodes of an existing cluster ({', '.join(extra)} would go): run with "
            f"--node-count {have} (or without it), resize the cluster with `chaos cluster up --nodes "
            f"{self.n}{named}`, or give the run a cluster of its own with --cluster-name NAME"
        )

    def _refuse_if_locked(
        self, containers: list[Any], breaking: bool = False, hint: str | None = None
    ) -> None:
        """Raise ClusterLocked when a live run holds the cluster (its lock file on a running node):
        removing or replacing containers under it would wreck that run. ``breaking``
        (``--break-lock``): only a holder provably alive on this host refuses. ``hint``: what the
        refusal line tells the user to do (default: wait, or ``--break-lock``)."""

        for c in containers:
            if c.status != "running":
                continue
            try:
                code, out = c.exec_run(["cat", LOCK_PATH])
            except Exception:  # noqa: BLE001 - an unreadable node holds no lock we can honour
                continue
            if code == 0 and out.strip():
                holder = parse(out.decode(errors="replace"))
                if breaking and live_here(holder):
                    raise ClusterLocked(self._node_of(c), holder, LIVE_HINT)
                if not breaking and not is_stale(holder):
                    raise ClusterLocked(self._node_of(c), holder, hint)

    def _create(self, node: str, ip: str, image: str, pubkey: str) -> None:
        api = self.client.api
        name = self.container_name(node)
        self.log(f"creating {name} ({ip})")
        host_config = api.create_host_config(
            cap_add=CAPS,
            devices=DEVICES,
            init=True,  # reaps SIGKILLed servers so their pids really disappear
            restart_policy={"Name": "no"},
            # a fresh /var/run so pidfiles do not survive a container restart
            tmpfs={"/run": "rw,exec,size=16m"},
        )
        networking = api.create_networking_config(
            {self.network_name: api.create_endpoint_config(ipv4_address=ip, aliases=[node])}
        )
        try:
            cid = api.create_container(
                image,
                name=name,
                hostname=node,
                environment={"CHAOS_AUTHORIZED_KEY": pubkey},
                labels=self._labels(**{f"{LABEL}.node": node}),
                host_config=host_config,
                networking_config=networking,
                detach=True,
            )
            api.start(cid["Id"])
        except Exception as e:  # noqa: BLE001
            raise ClusterError(f"{node}: starting container {name} failed: {e}") from None

    def _address(self, c: Any) -> str | None:
        c.reload()
        nets = c.attrs.get("NetworkSettings", {}).get("Networks", {})
        addr = (nets.get(self.network_name) or {}).get("IPAddress")
        return addr or None

    def _wait_ssh(self, nodes: list[Node]) -> None:

        deadline = time.monotonic() + self.ssh_timeout
        pending = list(nodes)
        last: dict[str, str] = {}
        while pending:
            still = []
            for n in pending:
                try:
                    with socket.create_connection((n.host, n.port), timeout=1.0) as s:
                        if not s.recv(16).startswith(b"SSH-"):
                            raise OSError("no SSH banner")
                except OSError as e:
                    last[n.name] = str(e)
                    still.append(n)
            pending = still
            if pending:
                if time.monotonic() > deadline:
                    n = pending[0]
                    raise ClusterError(
                        f"{n.name}: sshd at {n.host}:{n.port} not answering after {self.ssh_timeout:g}s "
                        f"({last.get(n.name)}); see `docker logs {self.container_name(n.name)}`"
                    )
                time.sleep(0.2)
        ctl = Control(nodes, connect_timeout=10)
        try:
            ctl.connect_all()
        except NodeUnreachable as e:
            raise ClusterError(str(e)) from None
        finally:
            ctl.close()

    def status(self) -> list[dict[str, Any]]:
        """One dict per node container: ``name``, ``container``, ``state``, ``host``, ``ssh`` (bool),
        ``hostname`` (what the node reports over SSH, or None), ``error`` (why SSH failed, or None)."""

        key = self.state_dir / "id_ed25519"
        rows = []
        for c in sorted(self._containers(), key=lambda c: _node_order(self._node_of(c))):
            node = self._node_of(c)
            addr = self._address(c) if c.status == "running" else None
            row: dict[str, object] = dict(
                name=node, container=c.name, state=c.status, host=addr, ssh=False, hostname=None, error=None
            )
            if addr:
                r = Remote(
                    Node(name=node, host=addr, key_path=str(key) if key.is_file() else None),
                    connect_timeout=3,
                    retries=0,
                )
                try:
                    row["hostname"] = r.exec("hostname", timeout=5).stdout.strip()
                    row["ssh"] = True
                except RemoteError as e:
                    row["error"] = e.cause
                finally:
                    r.close()
            rows.append(row)
        return rows

    def down(self, force: bool = False) -> dict[str, list[str]]:
        """Remove the cluster's containers, its network and its key pair and state; returns what went.

        Raises ClusterLocked (nothing removed) when a live run holds the cluster (a lock file of a
        run not provably gone, :func:`chaos.cluster.lock.is_stale`, on a running node), as
        :meth:`up` does before it removes containers; ``force`` removes it anyway (that run then
        fails its heal and teardown)."""
        removed: dict[str, list[str]] = {"containers": [], "networks": [], "files": []}
        containers = self._containers()
        if not force:
            self._refuse_if_locked(
                containers, hint="wait for that run to end, or pass --force to remove the cluster under it"
            )
        for c in containers:
            c.remove(force=True, v=True)
            removed["containers"].append(c.name)
        net = self._network(create=False)
        if net is not None:
            net.remove()
            removed["networks"].append(net.name)
        if self.state_dir.exists():
            removed["files"] = sorted(str(p) for p in self.state_dir.iterdir())
            shutil.rmtree(self.state_dir)
        return removed


def _authorized_key(c: Any) -> str | None:
    """The public key a node container was created to authorise (its ``CHAOS_AUTHORIZED_KEY``)."""
    for item in (c.attrs.get("Config") or {}).get("Env") or []:
        k, _, v = item.partition("=")
        if k == "CHAOS_AUTHORIZED_KEY":
            return v.strip()
    return None


def _node_order(name: str) -> tuple[int, str]:
    m = re.match(r"n(\d+)$", name)
    return (int(m.group(1)), name) if m else (1 << 30, name)
