"""Deploying the DLedger server onto 5 real containers through DLedgerDB (the code the runner uses)."""

from __future__ import annotations

import os
import time

import pytest

from chaos.cluster.docker import DockerProvider
from chaos.cluster.osetup import DebianOS
from chaos.control.db import DB, DBError
from chaos.control.ssh import Control
from chaos_dledger.db import DLedgerDB

pytestmark = [pytest.mark.docker, pytest.mark.slow]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory):
    home = tmp_path_factory.mktemp("chaos-home")
    old = os.environ.get("CHAOS_HOME")
    os.environ["CHAOS_HOME"] = str(home)
    p = DockerProvider(5, name="tdb")
    nodes = p.up()
    control = Control(nodes)
    db = DLedgerDB(client_timeout=3.0)
    try:
        DebianOS().setup(control)
        db.setup(control)
        yield nodes, control, db
    finally:
        try:
            db.teardown(control)
        finally:
            control.close()
            p.down()
            if old is None:
                os.environ.pop("CHAOS_HOME", None)
            else:
                os.environ["CHAOS_HOME"] = old


def _await_other_leader(db: DLedgerDB, control: Control, old: str, timeout: float = 30.0) -> str:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        leaders = [p for p in db.primaries(control) if p != old]
        if leaders:
            return leaders[0]
        time.sleep(0.3)
    raise AssertionError(f"no new leader within {timeout}s (old {old})")


def test_deploy_append_kill_leader_new_leader(cluster) -> None:
    nodes, control, db = cluster
    assert isinstance(DLedgerDB(), DB)  # implements the whole protocol
    # every node runs the server's zipapp, under libfaketime with the offset file
    pids = control.on_nodes(db.pid)
    assert all(isinstance(p, int) for p in pids.values()), pids
    env = control.remote("n2").exec_raw(f"tr '\\0' '\\n' < /proc/{pids['n2']}/environ").stdout
    assert "FAKETIME_TIMESTAMP_FILE=/var/run/dledger.faketime" in env and "libfaketime.so.1" in env
    assert control.remote("n2").exec("cat", db.faketime_file).stdout.strip() == "+0"

    leader = db.await_leader(control, 30)
    assert db.primaries(control) == [leader]

    client = db.client(nodes, leader)
    try:
        r = client.append(b"17")
        assert r.outcome == "ok", r
        first_index = r.index
        assert client.get(first_index).body == b"17"

        db.kill(control.remote(leader))  # SIGKILL over SSH
        assert db.pid(control.remote(leader)) is None
        new_leader = _await_other_leader(db, control, leader)
        assert new_leader != leader

        deadline = time.monotonic() + 20
        while True:
            r = client.append(b"18")
            if r.outcome == "ok" or time.monotonic() > deadline:
                break
            time.sleep(0.3)
        assert r.outcome == "ok" and r.index > first_index, r
        assert r.leader_id == new_leader or r.node == new_leader

        # the killed node comes back, started by another process's DB object (as `chaos heal` would):
        # it uses the start script setup left on the node, with the full peers list
        DLedgerDB().start(control.remote(leader))
        db.await_port(control.remote(leader))
        assert db.running(control.remote(leader))
        assert (
            "n5-"
            in control.remote(leader).exec("cat", f"/proc/{db.pid(control.remote(leader))}/cmdline").stdout
        )
    finally:
        client.close()


def test_pause_resume_and_log_files(cluster) -> None:
    nodes, control, db = cluster
    r = control.remote("n3")
    pid = db.pid(r)
    assert pid is not None
    db.pause(r)
    assert r.exec_raw(f"ps -o stat= -p {pid}").stdout.strip().startswith("T")
    db.resume(r)
    assert not r.exec_raw(f"ps -o stat= -p {pid}").stdout.strip().startswith("T")
    files = db.log_files(r)
    assert files == [db.log_file, db.listing_file]
    log = r.exec("cat", db.log_file).stdout
    assert "n3" in log
    assert db.data_dir in r.exec("cat", db.listing_file).stdout


def test_setup_failure_raises_with_log_tail(cluster) -> None:
    nodes, control, _ = cluster
    # an address the server cannot listen on makes every start fail (a flag its parser refuses is
    # refused before any node is touched: test_every_bad_argument_of_every_command_is_one_line);
    # the error names the node and carries the log. The wait ends as soon as the server exits; the
    # bound is only for a loaded machine
    with pytest.raises(ValueError, match="unrecognized arguments: --no-such-flag"):
        DLedgerDB(server_args=["--no-such-flag"])
    bad = DLedgerDB(server_args=["--bind", "no-such-host.invalid"], tries=1, start_timeout=90)
    one = Control(nodes[:1])
    try:
        with pytest.raises(DBError) as ei:
            bad.setup(one)
        assert ei.value.node == "n1"
        assert "cannot listen" in str(ei.value)
    finally:
        one.close()


def test_teardown_wipes_data(cluster) -> None:
    nodes, control, db = cluster
    one = Control(nodes[4:5])
    try:
        r = one.remote("n5")
        db.teardown(one)
        assert db.pid(r) is None
        assert r.exec_raw(f"ls -A {db.data_dir} | wc -l").stdout.strip() == "0"
    finally:
        one.close()
