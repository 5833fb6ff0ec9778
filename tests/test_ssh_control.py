"""The SSH control layer against real containers with real sshd (no mocks)."""

from __future__ import annotations

import hashlib
import os
import time
from pathlib import Path

import pytest

from chaos.cluster.docker import DockerProvider, generate_keypair
from chaos.cluster.image import SUDO_USER
from chaos.control.node import Node
from chaos.control.ssh import CommandTimeout, Control, NodeUnreachable, Remote, RemoteError

pytestmark = pytest.mark.docker


@pytest.fixture(scope="module")
def nodes(tmp_path_factory: pytest.TempPathFactory):
    home = tmp_path_factory.mktemp("chaos-home")
    old = os.environ.get("CHAOS_HOME")
    os.environ["CHAOS_HOME"] = str(home)
    p = DockerProvider(5, name="tssh")
    try:
        yield p.up()
    finally:
        p.down()
        if old is None:
            os.environ.pop("CHAOS_HOME", None)
        else:
            os.environ["CHAOS_HOME"] = old


@pytest.fixture()
def control(nodes):
    c = Control(nodes)
    yield c
    c.close()


def test_command_on_all_nodes_returns_per_node_output(control: Control) -> None:
    out = control.on_nodes(lambda r: r.exec("hostname").stdout.strip())
    assert out == {f"n{i}": f"n{i}" for i in range(1, 6)}
    # a subset, and a function of the remote
    sub = control.on_nodes(
        lambda r: r.node.name + ":" + r.exec_raw("echo $((6*7))").stdout.strip(), ["n2", "n4"]
    )
    assert sub == {"n2": "n2:42", "n4": "n4:42"}


def test_exec_quotes_arguments_and_exec_raw_does_not(control: Control) -> None:
    r = control.remote("n1")
    tricky = "a b; echo INJECTED $HOME 'q' \"d\""
    assert r.exec("printf", "%s", tricky).stdout == tricky
    assert r.exec_raw("echo $((1+2)) | tr 3 x").stdout == "x\n"
    assert r.exec("cat", stdin="from stdin\n").stdout == "from stdin\n"
    assert r.exec_raw("exit 7", check=False).exit_code == 7


def test_failing_command_raises_with_stderr(control: Control) -> None:
    r = control.remote("n3")
    with pytest.raises(RemoteError) as ei:
        r.exec_raw("echo partial; echo 'boom: no such thing' >&2; exit 3")
    e = ei.value
    assert (e.node, e.exit_code) == ("n3", 3)
    assert e.stdout == "partial\n" and e.stderr == "boom: no such thing\n"
    assert "exit 3" in e.cmd
    msg = str(e)
    assert (
        "\n" not in msg and msg.startswith("n3:") and "exit status 3" in msg and "boom: no such thing" in msg
    )


def test_on_nodes_raises_the_failing_nodes_error(control: Control) -> None:
    def fn(r: Remote) -> str:
        return r.exec_raw("[ $(hostname) != n2 ] || { echo bad n2 >&2; exit 1; }; hostname").stdout

    with pytest.raises(RemoteError) as ei:
        control.on_nodes(fn)
    assert ei.value.node == "n2" and "bad n2" in str(ei.value)


def test_command_timeout(control: Control) -> None:
    r = control.remote("n2")
    t0 = time.monotonic()
    with pytest.raises(CommandTimeout) as ei:
        r.exec_raw("echo started; sleep 20", timeout=1.0)
    assert time.monotonic() - t0 < 15  # cut off, not waited out
    assert ei.value.exit_code is None and "timed out" in str(ei.value) and ei.value.stdout == "started\n"
    # the connection is still usable
    assert r.exec("echo", "after").stdout == "after\n"


def test_killed_sshd_session_is_reestablished_transparently(nodes: list[Node]) -> None:
    victim = Remote(nodes[0])
    killer = Remote(nodes[0])
    try:
        session_pid = int(victim.exec_raw("echo $PPID").stdout)  # the sshd process serving this connection
        assert "sshd" in killer.exec_raw(f"cat /proc/{session_pid}/cmdline | tr '\\0' ' '").stdout
        before = victim.reconnects
        killer.exec("kill", "-9", str(session_pid))
        # the next command runs on a new connection, no error surfaces
        assert victim.exec("hostname").stdout.strip() == "n1"
        assert victim.reconnects > before
        new_pid = int(victim.exec_raw("echo $PPID").stdout)
        assert new_pid != session_pid
        assert killer.exec("kill", "-0", str(session_pid), check=False).exit_code != 0

        # dropped under a running command: the command is re-run on a new connection
        import threading

        result: list[str] = []
        t = threading.Thread(
            target=lambda: result.append(victim.exec_raw("sleep 1.5; hostname").stdout.strip())
        )
        t.start()
        time.sleep(0.5)
        killer.exec("kill", "-9", str(new_pid))
        t.join(30)
        assert result == ["n1"]
        assert int(victim.exec_raw("echo $PPID").stdout) not in (session_pid, new_pid)
    finally:
        victim.close()
        killer.close()


def test_upload_and_download_roundtrip(control: Control, tmp_path: Path) -> None:
    data = os.urandom(300_000)
    src = tmp_path / "blob.bin"
    src.write_bytes(data)
    r = control.remote("n5")
    r.upload(src, "/tmp/blob.bin")
    assert r.exec("sha256sum", "/tmp/blob.bin").stdout.split()[0] == hashlib.sha256(data).hexdigest()
    back = tmp_path / "sub" / "back.bin"
    r.download("/tmp/blob.bin", back)
    assert back.read_bytes() == data
    with pytest.raises(RemoteError) as ei:
        r.download("/nonexistent/file", tmp_path / "x")
    assert ei.value.node == "n5"
    with pytest.raises(FileNotFoundError):
        r.upload(tmp_path / "missing", "/tmp/x")
    # braces in a local path are taken literally (fabric would format {host} and the like)
    braced = tmp_path / "{host}" / "b.bin"
    r.download("/tmp/blob.bin", braced)
    assert braced.read_bytes() == data


def test_on_nodes_awaits_every_node_and_notes_the_other_failures(control: Control) -> None:
    marker = "/tmp/on-nodes-finished"
    control.remote("n5").exec("rm", "-f", marker)

    def fn(r: Remote) -> str:
        name = r.node.name
        if name in ("n2", "n4"):
            r.exec_raw(f"echo {name} broke >&2; exit 5")
        if name == "n5":
            r.exec_raw(f"sleep 1; touch {marker}")
        return name

    with pytest.raises(RemoteError) as ei:
        control.on_nodes(fn)
    assert (ei.value.node, ei.value.exit_code) == ("n2", 5)
    assert ei.value.__notes__ == [
        "also failed on n4: n4: `echo n4 broke >&2; exit 5` exit status 5: n4 broke"
    ]
    # the slow node had finished before the error was raised
    assert control.remote("n5").exec("test", "-e", marker, check=False).ok
    # exec_all: every node's own result
    res = control.exec_all("sh", "-c", "exit $(hostname | tr -d n)", check=False)
    assert {name: r.exit_code for name, r in res.items()} == {f"n{i}": i for i in range(1, 6)}


def test_timeouts_per_control_and_per_call(nodes: list[Node]) -> None:
    with Control(nodes[:2], timeout=1) as short:
        r = short.remote("n1")
        t0 = time.monotonic()
        with pytest.raises(CommandTimeout) as ei:
            r.exec_raw("sleep 4")
        assert time.monotonic() - t0 < 3.5 and "timed out after 1s" in str(ei.value)
        # a call's own timeout wins over the Control's
        assert r.exec_raw("sleep 2; echo done", timeout=15).stdout == "done\n"
        with pytest.raises(CommandTimeout) as ei:
            short.exec_all("sleep", "4")
        assert ei.value.node == "n1" and "also failed on n2" in ei.value.__notes__[0]
        r.timeout = 15  # the remote's default can be changed later
        assert r.exec_raw("sleep 2; echo again").stdout == "again\n"


def test_stdin_bytes_and_split_characters_arrive_whole(control: Control) -> None:
    r = control.remote("n4")
    blob = os.urandom(1_000_000)  # not UTF-8: sent as bytes, not re-encoded text
    r.write_file("/tmp/blob-stdin", blob)
    assert r.exec("sha256sum", "/tmp/blob-stdin").stdout.split()[0] == hashlib.sha256(blob).hexdigest()
    # two-byte characters after an odd prefix straddle the reads' boundaries
    out = r.exec_raw("{ printf x; yes é | head -n 200000; } | tr -d '\\n'").stdout
    assert out == "x" + "é" * 200_000


def test_background_child_holding_stdout_does_not_stall_the_command(control: Control) -> None:
    r = control.remote("n2")
    t0 = time.monotonic()
    try:
        res = r.exec_raw("sleep 31 & echo started", timeout=20)
        assert (res.exit_code, res.stdout) == (0, "started\n")
        assert time.monotonic() - t0 < 15  # an EOF grace after the exit status, not the timeout
    finally:
        r.exec_raw("pkill -f '^sleep 31$' || true")  # anchored: not this shell's own line


def test_sftp_timeout_keeps_the_connection_and_the_next_transfer_works(
    nodes: list[Node], tmp_path: Path
) -> None:
    r = Remote(nodes[3])  # its own connection, so the SFTP server found below is this one's
    server = ""
    try:
        r.write_file("/tmp/sftp-src", "payload\n")
        r.download("/tmp/sftp-src", tmp_path / "a")
        conn = r._conn
        sshd = r.exec_raw("echo $PPID").stdout.strip()  # the sshd process serving this connection
        server = r.exec("pgrep", "-P", sshd, "-x", "sftp-server").stdout.strip()
        assert server.isdigit()
        r.exec("kill", "-STOP", server)  # requests get no answer
        t0 = time.monotonic()
        with pytest.raises(CommandTimeout) as ei:
            r.download("/tmp/sftp-src", tmp_path / "b", timeout=1)
        assert time.monotonic() - t0 < 10
        assert ei.value.node == "n4" and "no SFTP answer within 1s" in str(ei.value)
        # commands go on on the same connection; the next transfer opens a new SFTP session
        assert r.exec("echo", "alive").stdout == "alive\n"
        r.download("/tmp/sftp-src", tmp_path / "c")
        assert (tmp_path / "c").read_text() == "payload\n"
        assert r._conn is conn and r.reconnects == 0
    finally:
        if server:
            r.exec("kill", "-KILL", server, check=False)
        r.close()


def test_write_file(control: Control) -> None:
    r = control.remote("n4")
    r.write_file("/tmp/deep/dir/f.txt", "+1h\n")
    assert r.exec("cat", "/tmp/deep/dir/f.txt").stdout == "+1h\n"


def test_parallel_commands_share_one_connection(control: Control) -> None:
    r = control.remote("n1")
    r.exec("true")
    conn_before, reconnects_before = r._conn, r.reconnects
    from concurrent.futures import ThreadPoolExecutor

    # more threads than the 8 sessions a connection allows: the rest wait for a free one. A node
    # loaded by the rest of the suite may break a session twice in a row, which rightly drops the
    # connection (counted in reconnects); then the burst runs again on the new one.
    for _ in range(3):
        with ThreadPoolExecutor(12) as pool:
            outs = list(pool.map(lambda i: r.exec("echo", str(i)).stdout.strip(), range(48)))
        assert outs == [str(i) for i in range(48)]
        if r.reconnects == reconnects_before:
            break
        assert r._conn is not conn_before  # a drop is counted and replaces the connection
        r.exec("true")
        conn_before, reconnects_before = r._conn, r.reconnects
    assert r._conn is conn_before and r.reconnects == reconnects_before


def test_unreachable_port_wrong_key_and_unknown_host_key_are_one_clear_line(
    nodes: list[Node], tmp_path: Path
) -> None:
    n1 = nodes[0]
    refused = Remote(Node(name="n1", host=n1.host, port=2222, key_path=n1.key_path), connect_timeout=3)
    with pytest.raises(NodeUnreachable) as ei:
        refused.exec("true")
    assert str(ei.value).startswith("n1:") and "unreachable" in str(ei.value) and "\n" not in str(ei.value)

    other_key = generate_keypair(tmp_path / "other")
    wrong = Remote(Node(name="n1", host=n1.host, key_path=str(other_key)), connect_timeout=3)
    with pytest.raises(NodeUnreachable) as ei:
        wrong.exec("true")
    assert "authentication failed" in str(ei.value) and str(other_key) in str(ei.value)

    strict = Remote(Node(name="n1", host=n1.host, key_path=n1.key_path, strict_host_key_checking=True))
    with pytest.raises(NodeUnreachable) as ei:
        strict.exec("true")
    assert "host key unknown" in str(ei.value)

    free = n1.host.rsplit(".", 1)[0] + ".250"  # in the test cluster's own subnet, no container there
    gone = Remote(Node(name="n9", host=free, key_path=n1.key_path), connect_timeout=1.5)
    t0 = time.monotonic()
    with pytest.raises(NodeUnreachable) as ei:
        gone.exec("true")
    assert time.monotonic() - t0 < 10
    assert str(ei.value).startswith("n9:") and "unreachable" in str(ei.value)


def test_ssh_provider_cli_on_existing_hosts(nodes: list[Node], tmp_path: Path) -> None:
    import subprocess
    import sys

    key = nodes[0].key_path
    assert key is not None
    hosts = ",".join(f"{n.name}={n.host}" for n in nodes[:3])
    env = {**os.environ, "HOME": str(tmp_path), "CHAOS_HOME": str(tmp_path / "chaos")}

    def chaos(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            [sys.executable, "-m", "chaos.cli", "cluster", *args],
            capture_output=True,
            text=True,
            env=env,
            timeout=300,
        )

    # strict host key checking is on by default for existing hosts: unknown keys are refused
    r = chaos("up", "--nodes", hosts, "--ssh-private-key", key)
    assert r.returncode == 255
    assert len(r.stderr.strip().splitlines()) == 1 and "host key unknown" in r.stderr and "n1" in r.stderr

    # known_hosts filled (as an operator would), strict checking passes; OS setup runs
    (tmp_path / ".ssh").mkdir()
    lines = []
    for n in nodes[:3]:
        pub = Remote(n).exec("cat", "/etc/ssh/ssh_host_ed25519_key.pub").stdout.split()
        lines.append(f"{n.host} {pub[0]} {pub[1]}")
    (tmp_path / ".ssh" / "known_hosts").write_text("\n".join(lines) + "\n")
    r = chaos("up", "--nodes", hosts, "--ssh-private-key", key)
    assert r.returncode == 0, r.stderr
    assert [ln.split("hostname=")[1] for ln in r.stdout.splitlines()] == ["n1", "n2", "n3"]
    r = chaos("exec", "--nodes", hosts, "--ssh-private-key", key, "--", "echo +0")
    assert r.returncode == 0 and r.stdout.count("+0") == 3


def test_os_setup_checks_packages_and_heals_the_baseline(control: Control) -> None:
    from chaos.cluster.osetup import DebianOS, OSSetupError

    r = control.remote("n2")
    r.exec_raw(
        "iptables -w -N CHAOS-TEST && iptables -w -A CHAOS-TEST -s 10.0.0.9 -j DROP && "
        "iptables -w -I INPUT 1 -j CHAOS-TEST && "
        "tc qdisc add dev eth0 root tbf rate 1mbit burst 32kbit latency 400ms"
    )
    DebianOS().setup(control)  # every node, in parallel
    rules = r.exec_raw("iptables -w -S").stdout
    assert "CHAOS-TEST" not in rules
    assert "tbf" not in r.exec("tc", "qdisc", "show", "dev", "eth0").stdout
    DebianOS().setup(control)  # idempotent

    with pytest.raises(OSSetupError) as ei:
        DebianOS(packages=["iptables", "no-such-package-xyz"]).setup_node(r)
    assert str(ei.value).startswith("n2:") and "missing packages no-such-package-xyz" in str(ei.value)


def test_non_root_user_and_sudo_wrapping(nodes: list[Node], control: Control, tmp_path: Path) -> None:
    """The image's non-root user (``SUDO_USER``, passwordless sudo, the cluster key) runs commands
    as itself and privileged ones through ``sudo -n``; a user without sudo rights gets one error
    naming the node and the sudo command."""
    n3 = nodes[2]
    user = Remote(Node(name="n3", host=n3.host, user=SUDO_USER, key_path=n3.key_path))
    try:
        assert user.exec("whoami").stdout.strip() == SUDO_USER
        assert user.exec("whoami", sudo=True).stdout.strip() == "root"
        assert user.wrap("whoami", sudo=True).startswith("sudo -n -- sh -c ")
        # a root-only directory: uploaded as the user to /tmp, moved into place with sudo
        assert user.exec("test", "-w", "/var/lib", check=False).exit_code != 0
        local = tmp_path / "payload"
        local.write_bytes(b"through sudo\n")
        user.upload(local, "/var/lib/sudo-upload", sudo=True)
        assert control.remote("n3").exec("cat", "/var/lib/sudo-upload").stdout == "through sudo\n"
        user.write_file("/var/lib/sudo-write", "x", sudo=True)
        assert control.remote("n3").exec("cat", "/var/lib/sudo-write").stdout == "x"
    finally:
        control.remote("n3").exec("rm", "-f", "/var/lib/sudo-upload", "/var/lib/sudo-write")
        user.close()

    root = control.remote("n3")
    root.exec_raw(
        "id nosudo >/dev/null 2>&1 || useradd -m -s /bin/sh -p '*' nosudo; "
        "mkdir -p /home/nosudo/.ssh && cp /root/.ssh/authorized_keys /home/nosudo/.ssh/ && "
        "chown -R nosudo /home/nosudo/.ssh"
    )
    plain = Remote(Node(name="n3", host=n3.host, user="nosudo", key_path=n3.key_path))
    try:
        assert plain.exec("whoami").stdout.strip() == "nosudo"
        with pytest.raises(RemoteError) as ei:
            plain.exec("whoami", sudo=True)
        assert (
            ei.value.node == "n3" and ei.value.cmd.startswith("sudo -n -- sh -c ") and "sudo" in str(ei.value)
        )
    finally:
        plain.close()


def test_run_through_the_non_root_sudo_user(nodes: list[Node], tmp_path: Path) -> None:
    """``chaos run --provider ssh --username chaos`` against the containers: the DB is set up, the
    kill and pause faults act and are healed, logs come back, and the verdict is valid, every
    privileged step going through sudo (issue 16 item 9)."""
    import json
    import subprocess
    import sys

    import docker

    from chaos.history.store import RunDir

    key = nodes[0].key_path
    assert key is not None
    store = tmp_path / "store"
    r = subprocess.run(
        [
            sys.executable, "-m", "chaos.cli", "run", "--provider", "ssh",
            "--nodes", ",".join(f"{n.name}={n.host}" for n in nodes),
            "--username", SUDO_USER, "--ssh-private-key", key, "--no-strict-host-key-checking",
            "--workload", "register", "--nemesis", "kill,pause", "--nemesis-interval", "2",
            # one node at a time, so a pause seldom finds its node killed
            "--nemesis-opt", "kill_targets=one", "--nemesis-opt", "pause_targets=one",
            "--time-limit", "12", "--store", str(store), "--no-live", "--seed", "5",
        ],
        capture_output=True,
        text=True,
        timeout=900,
        env={**os.environ, "HOME": str(tmp_path)},
    )  # fmt: skip
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    run = RunDir(store / "latest")
    results = json.loads(run.results_path.read_text())
    assert results["valid"] is True
    kinds = results["checkers"]["faults"]["kinds"]
    # each fault took effect through sudo at least once, and every heal (restart, SIGCONT) did
    assert kinds["kill"]["applied"] >= 1 and kinds["pause"]["applied"] >= 1, kinds
    assert kinds["kill"]["stop_failed"] == kinds["pause"]["stop_failed"] == 0, kinds
    for n in nodes:
        assert (run.path / "nodes" / n.name / "dledger.log").is_file(), n.name
    # healed: no stopped process is left on any node (a pause not undone would show state T)
    with Control(nodes) as root:
        stopped = root.on_nodes(
            lambda rem: rem.exec_raw("ps -eo stat= | grep -c '^T' || true").stdout.strip()
        )
    assert set(stopped.values()) == {"0"}, stopped
    # the sessions were the user's, not root's: sshd (logging to the container's stderr) says so
    client = docker.from_env()
    for n in nodes:
        log = client.containers.get(f"chaos-tssh-{n.name}").logs().decode(errors="replace")
        assert f"Accepted publickey for {SUDO_USER}" in log, n.name
