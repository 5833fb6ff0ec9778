"""Pure-logic tests of the cluster layer: node validation, host entries, the zipapp, peers, errors."""

from __future__ import annotations

import pickle
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from chaos.cluster.image import debian_mirror, image_tag, recipe_hash
from chaos.cluster.sshhosts import SSHHosts, parse_entry, read_nodes_file
from chaos.control.db import DBError
from chaos.control.node import Node, check_unique, nodes_from_json, nodes_to_json
from chaos.control.ssh import Control, NodeUnreachable, Remote, RemoteError
from chaos_dledger.db import PROJECT_ROOT, DLedgerDB, build_zipapp, source_hash


def test_node_validation_names_the_bad_input() -> None:
    with pytest.raises(ValueError, match="node name"):
        Node(name="", host="h")
    with pytest.raises(ValueError, match="n1: SSH port 0"):
        Node(name="n1", host="h", port=0)
    with pytest.raises(ValueError, match="n1: host"):
        Node(name="n1", host=" ")
    with pytest.raises(ValueError, match="appears twice"):
        check_unique([Node("n1", "a"), Node("n1", "b")])
    n = Node("n1", "10.0.0.2", db_host="n1.internal")
    assert n.peer_host == "n1.internal" and Node("n2", "h").peer_host == "h"
    assert nodes_from_json(nodes_to_json([n])) == [n]
    with pytest.raises(ValueError, match="unknown fields"):
        Node.from_dict({"name": "n1", "host": "h", "colour": "red"})


@pytest.mark.parametrize(
    "entry, expected",
    [
        ("db1", ("db1", "db1", 22)),
        ("db-1.example.com:2222", ("db_1.example.com", "db-1.example.com", 2222)),
        ("n3=10.0.0.3", ("n3", "10.0.0.3", 22)),
        ("n4=[fe80::1]:2200", ("n4", "fe80::1", 2200)),
    ],
)
def test_parse_entry(entry: str, expected: tuple[str, str, int]) -> None:
    assert parse_entry(entry) == expected


def test_parse_entry_and_nodes_file_errors(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="expected host, host:port"):
        parse_entry("a b")
    with pytest.raises(ValueError, match="outside 1..65535"):
        parse_entry("h:70000")
    f = tmp_path / "nodes"
    f.write_text("# cluster\nn1=10.0.0.1\n\n10.0.0.2:2022  # second\n")
    assert read_nodes_file(f) == ["n1=10.0.0.1", "10.0.0.2:2022"]
    hosts = SSHHosts.from_options(nodes="n0=h0", nodes_file=str(f), username="admin")
    assert [(n.name, n.host, n.port, n.user, n.strict_host_key_checking) for n in hosts.up()] == [
        ("n0", "h0", 22, "admin", True),
        ("n1", "10.0.0.1", 22, "admin", True),
        ("10.0.0.2", "10.0.0.2", 2022, "admin", True),
    ]
    (tmp_path / "empty").write_text("# nothing\n")
    with pytest.raises(ValueError, match="no node entries"):
        read_nodes_file(tmp_path / "empty")


def test_remote_error_is_one_line_with_stderr_tail() -> None:
    e = RemoteError("n2", "ls /nope", 2, "", "line1\nls: cannot access '/nope': No such file or directory\n")
    assert (
        str(e) == "n2: `ls /nope` exit status 2: line1 | ls: cannot access '/nope': No such file or directory"
    )
    e2 = pickle.loads(pickle.dumps(e))
    assert (e2.node, e2.exit_code, e2.stderr) == ("n2", 2, e.stderr)
    u = pickle.loads(pickle.dumps(NodeUnreachable("n3", "root@h:22: unreachable (Connection refused)")))
    assert str(u) == "n3: root@h:22: unreachable (Connection refused)" and u.exit_code is None


def test_sudo_wrapping_only_for_non_root() -> None:
    assert Remote(Node("n1", "h")).wrap("echo 'x'", sudo=True) == "echo 'x'"
    assert (
        Remote(Node("n1", "h", user="admin")).wrap("echo 'x'", sudo=True)
        == "sudo -n -- sh -c 'echo '\"'\"'x'\"'\"''"
    )
    assert Remote(Node("n1", "h", user="admin")).wrap("ls", sudo=False) == "ls"


def test_control_rejects_bad_input() -> None:
    with pytest.raises(ValueError, match="at least one node"):
        Control([])
    c = Control([Node("n1", "h")])
    with pytest.raises(ValueError, match="unknown node 'n7'; expected one of n1"):
        c.remote("n7")
    with pytest.raises(ValueError, match="non-empty string"):
        c.remote("n1").exec_raw("  ")
    with pytest.raises(ValueError, match="timeout"):
        c.remote("n1").exec("true", timeout=0)


def test_missing_key_file_is_a_clear_error() -> None:
    r = Remote(Node("n1", "127.0.0.1", port=1, key_path="/nonexistent/key"))
    with pytest.raises(NodeUnreachable, match="n1: private key /nonexistent/key does not exist"):
        r.exec("true")


def test_unreachable_loopback_port_is_one_line() -> None:
    r = Remote(Node("n1", "127.0.0.1", port=1), connect_timeout=2)
    with pytest.raises(NodeUnreachable) as ei:
        r.exec("true")
    assert str(ei.value) == "n1: root@127.0.0.1:1: unreachable (Connection refused)"


def test_peers_and_db_options() -> None:
    db = DLedgerDB(port=20999)
    nodes = [Node("n1", "10.0.0.2"), Node("n2", "10.0.0.3", db_host="n2")]
    assert db.peers(nodes) == "n1-10.0.0.2:20999;n2-n2:20999"
    assert db.client_peers(nodes) == "n1-10.0.0.2:20999;n2-10.0.0.3:20999"
    cmd = DLedgerDB(flush="async", read_mode="lease", server_args="--heartbeat-ms 50").server_command(
        nodes[0], nodes
    )
    assert cmd[:4] == ["python3", "/opt/dledger/dledger.pyz", "server", "--group"]
    assert cmd[-8:] == ["--flush", "async", "--read-mode", "lease", "--secret-file", "/opt/dledger/peer.secret",
                        "--heartbeat-ms", "50"]  # fmt: skip
    no_auth = DLedgerDB(peer_auth=False).server_command(nodes[0], nodes)
    assert "--secret-file" not in no_auth and "--insecure" in no_auth  # the server refuses otherwise
    with pytest.raises(ValueError, match="cannot contain '-'"):
        db.peers([Node("db-1", "h")])
    with pytest.raises(ValueError, match="flush 'fast'"):
        DLedgerDB(flush="fast")
    with pytest.raises(ValueError, match="read mode 'x'"):
        DLedgerDB(read_mode="x")
    with pytest.raises(ValueError, match="port"):
        DLedgerDB(port=0)


def test_zipapp_runs_with_plain_python_and_is_cached(tmp_path: Path) -> None:
    pyz = build_zipapp(PROJECT_ROOT, tmp_path / "cache")
    assert pyz.name.startswith(f"dledger-{source_hash()}-") and pyz.suffix == ".pyz"
    assert build_zipapp(PROJECT_ROOT, tmp_path / "cache") == pyz  # cached
    with zipfile.ZipFile(pyz) as z:
        names = z.namelist()
    assert "__main__.py" in names and "dledger/__init__.py" in names and "dledger/server.pyc" in names
    assert not any(n.startswith("chaos/") or "__pycache__" in n for n in names)
    # the archive alone, outside the source tree, is the dledger command
    out = subprocess.run(
        [sys.executable, "-I", str(pyz), "server", "--help"], capture_output=True, text=True, cwd=tmp_path
    )
    assert out.returncode == 0 and "--read-mode" in out.stdout, out.stderr
    # a changed source is a new build (CHAOS_DLEDGER_SOURCE's patched copies get their own)
    copy = tmp_path / "src"
    shutil.copytree(PROJECT_ROOT / "dledger", copy / "dledger", ignore=shutil.ignore_patterns("__pycache__"))
    (copy / "dledger" / "cli.py").write_text((copy / "dledger" / "cli.py").read_text() + "\n# mutant\n")
    assert build_zipapp(copy, tmp_path / "cache").name != pyz.name
    (copy / "dledger" / "cli.py").write_text("def main(:\n")
    with pytest.raises(DBError, match="cli.py does not compile"):
        build_zipapp(copy, tmp_path / "cache")


def test_image_recipe_tag_and_mirror() -> None:
    assert image_tag() == f"chaos-node:{recipe_hash()}" and len(recipe_hash()) == 12
    assert debian_mirror().startswith("http")


def test_db_packages_come_from_the_db_not_the_image_or_the_os_setup() -> None:
    """The node image and the tool's OS setup carry the tool's packages only; a DB's packages are
    its ``os_packages``, which the OS setup adds for that DB (DLedger's python3-msgpack)."""
    from chaos.cluster import image
    from chaos.cluster.osetup import REQUIRED_PACKAGES, DebianOS
    from chaos.control.db import NoopDB, os_packages

    assert "python3-msgpack" not in image.PACKAGES and "python3-msgpack" not in REQUIRED_PACKAGES
    assert "dledger" not in image.NODE_INIT.lower()
    assert os_packages(NoopDB()) == [] and DebianOS(db=NoopDB()).packages == list(REQUIRED_PACKAGES)
    db = DLedgerDB()
    assert "python3-msgpack" in os_packages(db)
    with_db = DebianOS(db=db).packages
    assert with_db[: len(REQUIRED_PACKAGES)] == list(REQUIRED_PACKAGES) and "python3-msgpack" in with_db
    assert len(with_db) == len(set(with_db))  # python3, in both, once


def test_a_lone_string_declaration_is_one_name_not_its_characters() -> None:
    """``os_packages = ("redis-server")`` (the comma forgotten) is the package redis-server, not
    r, e, d, i, s, -, v: the OS setup once ran apt-get on the characters (issue 34 audit); likewise
    daemons, data_files, source packages and the runner's pattern files. ``chaos plugin check``
    still reports the declaration, one line."""
    from types import SimpleNamespace

    from chaos.cluster.osetup import REQUIRED_PACKAGES, DebianOS
    from chaos.control.db import daemons, data_files, os_packages, source_packages
    from chaos.runner.plugincheck import Findings, check_declarations
    from chaos.runner.runner import _server_logs_doc

    db = SimpleNamespace(os_packages="redis-server", daemons="server", data_files="*/data/*",
                         source_packages="redis", source_omit="redis/tests/*",
                         pattern_files="/var/log/redis.log", log_patterns=())  # fmt: skip
    assert os_packages(db) == ["redis-server"]
    assert DebianOS(db=db).packages == [*REQUIRED_PACKAGES, "redis-server"]
    assert daemons(db) == ("server",) and data_files(db) == ["*/data/*"]
    assert source_packages(db) == (("redis",), ("redis/tests/*",))
    assert _server_logs_doc(db)["files"] == ["redis.log"]
    found = Findings(lambda line: None)
    check_declarations(db, found)
    declared = {v.split(": ")[1] for v in found.violations}
    assert declared >= {"os_packages", "daemons", "data_files", "pattern_files"}, found.violations


class TwoDaemonDB:
    """A DB with a server and a sentinel per node (as Redis with Sentinel), recording the calls
    the tool makes per daemon."""

    name = "two"
    daemons = ("server", "sentinel")

    def __init__(self) -> None:
        self.calls: list[tuple[str, str]] = []
        self.up = {"server": True, "sentinel": False}

    def setup(self, control: object) -> None: ...
    def teardown(self, control: object) -> None: ...
    def describe(self) -> str:
        return "two daemons"

    def start(self, remote: object, daemon: str = "server") -> None:
        self.calls.append(("start", daemon))
        self.up[daemon] = True

    def kill(self, remote: object, daemon: str = "server") -> None:
        self.calls.append(("kill", daemon))
        self.up[daemon] = False

    def running(self, remote: object, daemon: str = "server") -> bool:
        return self.up[daemon]

    def pause(self, remote: object, daemon: str = "server") -> None:
        if not self.up[daemon]:
            raise DBError("n1", f"{daemon} not running")
        self.calls.append(("pause", daemon))

    def resume(self, remote: object, daemon: str = "server") -> None:
        self.calls.append(("resume", daemon))


def test_every_declared_daemon_is_killed_started_paused_and_resumed() -> None:
    from chaos.control import db as dbmod

    db = TwoDaemonDB()
    r = Remote(Node(name="n1", host="192.0.2.1"))  # never connected: the DB records the calls
    assert dbmod.daemons(db) == ("server", "sentinel") and dbmod.daemons(DLedgerDB()) == (None,)
    assert dbmod.running_any(db, r) and not dbmod.running_all(db, r)
    dbmod.pause_all(db, r)  # the sentinel is down: the server still pauses
    assert db.calls == [("pause", "server")]
    dbmod.kill_all(db, r)
    assert not dbmod.running_any(db, r)
    with pytest.raises(DBError, match="not running"):
        dbmod.pause_all(db, r)  # nothing to pause
    dbmod.start_all(db, r)
    dbmod.resume_all(db, r)
    assert dbmod.running_all(db, r)
    assert db.calls[1:] == [
        ("kill", "server"),
        ("kill", "sentinel"),
        ("start", "server"),
        ("start", "sentinel"),
        ("resume", "server"),
        ("resume", "sentinel"),
    ]


def test_open_client_is_handed_the_node_with_its_address() -> None:
    """A workload's worker is bound to a node name; the DB's ``open_client`` gets that node's
    :class:`Node` (its ``host`` is where to connect), for each new process."""
    from types import SimpleNamespace

    from chaos.control.client import ProtocolWorker
    from chaos.history.op import Op

    opened: list[tuple[Node, int]] = []

    class AddressDB:
        client_protocols = ("register",)

        def open_client(self, protocol: str, test: object, node: Node, process: int) -> object:
            opened.append((node, process))
            return SimpleNamespace(close=lambda: None)

    n2 = Node(name="n2", host="10.0.0.12", db_host="db-n2")
    test = SimpleNamespace(db=AddressDB(), nodes=[Node(name="n1", host="10.0.0.11"), n2])
    worker = ProtocolWorker("n2")
    worker.protocol = "register"
    worker.client(test, Op(process=3, type="invoke", f="read", value=None))
    worker.client(test, Op(process=3, type="invoke", f="read", value=None))  # same process: reused
    worker.client(test, Op(process=8, type="invoke", f="read", value=None))  # a new process
    assert opened == [(n2, 3), (n2, 8)] and opened[0][0].host == "10.0.0.12"


class FixedHosts:
    """A provider plug-in (``--provider test_cluster_unit:FixedHosts``): two hosts whose keys can
    be known."""

    host_keys_known = True

    def __init__(self, user: str) -> None:
        self.user = user

    @classmethod
    def for_options(cls, opts: dict[str, object], log: object = None) -> FixedHosts:
        return cls(str(opts.get("username") or "root"))

    def up(self) -> list[Node]:
        return [Node(name=f"f{i}", host=f"192.0.2.{i}", user=self.user) for i in (1, 2)]

    existing = up


def test_one_provider_selector_with_one_ssh_default() -> None:
    """``chaos run`` (provision), ``chaos heal`` (_nodes) and ``chaos cluster`` (resolve_nodes) pick
    nodes through chaos.cluster.providers and agree on strict host key checking: on for ssh hosts
    unless turned off, off for the local containers."""
    from chaos.cluster import providers
    from chaos.cluster.cli import resolve_nodes
    from chaos.nemesis.cli import _nodes as heal_nodes

    assert providers.provider_name({}) == "docker"
    assert providers.provider_name({"nodes": "5"}) == "docker"
    assert providers.provider_name({"nodes": "h1,h2"}) == "ssh"
    assert providers.provider_name({"provider": "docker", "nodes_file": "f"}) == "docker"
    ssh = {"provider": "ssh", "nodes": "a=192.0.2.1,b=192.0.2.2:2222"}
    assert providers.strict_host_key_checking(ssh)
    assert providers.strict_host_key_checking({**ssh, "strict_host_key_checking": None})
    assert not providers.strict_host_key_checking({**ssh, "strict_host_key_checking": False})
    assert not providers.strict_host_key_checking({"provider": "docker", "strict_host_key_checking": True})

    run = providers.provision(ssh, lambda s: None)
    cluster = resolve_nodes("ssh", ssh["nodes"], up=False)
    heal = heal_nodes("ssh", "default", ssh["nodes"], None, username="root", key_path=None, port=22)
    assert run == cluster == heal and all(n.strict_host_key_checking for n in run)
    assert [(n.name, n.port) for n in run] == [("a", 22), ("b", 2222)]
    off = heal_nodes("ssh", "default", ssh["nodes"], None, strict_host_key_checking=False)
    assert not any(n.strict_host_key_checking for n in off)

    plugged = {"provider": "test_cluster_unit:FixedHosts", "username": "ops"}
    nodes = providers.provision(plugged, lambda s: None)
    assert [n.host for n in nodes] == ["192.0.2.1", "192.0.2.2"] and nodes[0].user == "ops"
    assert all(n.strict_host_key_checking for n in nodes)
    with pytest.raises(ValueError, match="--provider nope: unknown provider"):
        providers.provision({"provider": "nope"}, lambda s: None)
    with pytest.raises(ValueError, match="--nodes"):
        providers.provision({"provider": "ssh"}, lambda s: None)


def test_two_names_for_one_host_and_port_are_refused_before_any_node_is_touched(tmp_path) -> None:
    """Issue 26 item 10: two node names for one host:port would fault one machine twice and count
    it twice in a quorum; chaos run refuses it with one 254 line."""
    import subprocess
    import sys

    with pytest.raises(ValueError, match="'a' and 'b' are both 10.0.0.1:22"):
        check_unique([Node("a", "10.0.0.1"), Node("b", "10.0.0.1")])
    check_unique([Node("a", "10.0.0.1"), Node("b", "10.0.0.1", port=2222)])  # two sshds: two nodes
    r = subprocess.run(
        [sys.executable, "-c", "import sys; from chaos.cli import main; sys.exit(main())", "run",
         "--provider", "ssh", "--nodes", "a=10.0.0.1,b=10.0.0.1", "--store", str(tmp_path / "s")],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert r.returncode == 254, (r.stdout, r.stderr)
    assert r.stderr.strip().splitlines() == [
        "chaos: nodes 'a' and 'b' are both 10.0.0.1:22; each node must be its own host"
    ]
