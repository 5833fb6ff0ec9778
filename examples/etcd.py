"""etcd (Debian bookworm's ``etcd-server`` 3.4, Raft) under test: ``chaos run --db examples.etcd:EtcdDB``.

``setup`` installs the package with apt-get on every node over SSH (the docker cluster's nodes reach
deb.debian.org) and runs one member per node. Capabilities: process and pause (a daemon per node),
primary and recovery (each member's ``/v3/maintenance/status``), log-files, and a ``register``
client on etcd's v3 JSON gateway talking to its own node. ``--db-opt reads=serializable``, the
known-weak configuration, serves reads from the member's local state: stale on a cut-off member.
"""

from __future__ import annotations

import base64
from typing import Any

from chaos.api import (
    INVALID,
    DaemonProcess,
    DBOption,
    LeaderViews,
    LogPattern,
    Node,
    await_tcp_port,
    http_json,
)

API = ">=1.0,<2"  # the chaos plug-in API this module is written for (chaos.api.VERSION)

DATA = "/var/lib/etcd-chaos"
INSTALL = "command -v etcd || { apt-get update -q && apt-get install -yq etcd-server; }"
ETCD = "/usr/bin/etcd --name {n} --data-dir {d} --initial-cluster {m} --listen-client-urls \
http://0.0.0.0:2379 --advertise-client-urls http://{h}:2379 --listen-peer-urls http://0.0.0.0:2380 \
--initial-advertise-peer-urls http://{h}:2380"


def call(host: str, path: str, body: dict[str, Any], timeout: float = 1.0) -> Any:
    """POST to the member's gateway (fail when not sent, info when sent without answer: http_json)."""
    return http_json(f"http://{host}:2379/v3/{path}", body, timeout)


def b64(v: Any) -> str:
    return base64.b64encode(str(v).encode()).decode()


class EtcdRegister:
    """The ``register`` client protocol (chaos.api.RegisterClient) over one member."""

    def __init__(self, host: str, serializable: bool) -> None:
        self.host, self.serializable = host, serializable

    def read(self, key: Any) -> int | None:
        kvs = call(self.host, "kv/range", {"key": b64(key), "serializable": self.serializable}).get("kvs")
        return int(base64.b64decode(kvs[0]["value"])) if kvs else None

    def write(self, key: Any, value: Any) -> None:
        call(self.host, "kv/put", {"key": b64(key), "value": b64(value)})

    def delete(self, key: Any) -> None:
        call(self.host, "kv/deleterange", {"key": b64(key)})

    def cas(self, key: Any, expected: Any, new: Any) -> bool:  # etcd fails a value compare on no key
        cmp = {"key": b64(key), "target": "VALUE", "result": "EQUAL", "value": b64(expected)}
        put = {"requestPut": {"key": b64(key), "value": b64(new)}}
        return bool(call(self.host, "kv/txn", {"compare": [cmp], "success": [put]}).get("succeeded"))

    def close(self) -> None:
        pass


class EtcdDB(DaemonProcess, LeaderViews):
    """etcd on every node; ``reads``: ``linearizable`` (quorum reads, the default) or ``serializable``."""

    name, pidfile, logfile, start_script = "etcd", "/run/etcd.pid", "/var/log/etcd.log", "/opt/etcd.sh"
    kill_match, pattern_files, recovery_timeout = "^/usr/bin/etcd ", ("etcd.log",), 30.0
    client_protocols = ("register",)
    db_options = (DBOption("reads", choices=("linearizable", "serializable"), help="etcd range reads"),)
    log_patterns = (LogPattern("panic", r"^panic: |^fatal error: ", INVALID, "etcd crashed"),)

    def __init__(self, reads: str = "linearizable") -> None:
        if reads not in self.db_options[0].choices:
            raise ValueError(f"reads {reads!r}: expected linearizable or serializable")
        self.reads = reads

    def describe(self) -> str:
        return f"etcd-server from Debian, {self.reads} reads"

    def setup(self, control: Any) -> None:
        members = ",".join(f"{n.name}=http://{n.peer_host}:2380" for n in control.nodes)

        def node(r: Any) -> None:
            r.exec_raw(INSTALL, sudo=True, timeout=600)
            self.wipe(r, DATA)
            self.write_start_script(
                r, ETCD.format(n=r.node.name, d=DATA, m=members, h=r.node.peer_host).split()
            )
            self.start(r)
            await_tcp_port(r, 2379, pidfile=self.pidfile, logfile=self.logfile)

        control.on_nodes(node)
        self.await_leader(control, 60)

    def teardown(self, control: Any) -> None:
        control.on_nodes(lambda r: self.wipe(r, DATA))

    def leader_view(self, r: Any) -> tuple[str, str | None]:
        s = call(r.node.host, "maintenance/status", {})
        return s["header"]["member_id"], s.get("leader")

    def open_client(self, protocol: str, test: Any, node: Node, process: Any) -> EtcdRegister:
        return EtcdRegister(node.host, self.reads == "serializable")
