"""The daemon helpers (``chaos.control.util``, Jepsen's ``control.util``) on a real node container."""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import pytest

from chaos.control import util
from chaos.control.util import DaemonError

PIDFILE = "/var/run/chaos-util-test/echo.pid"
LOGFILE = "/var/log/chaos-util-test/echo.log"
PORT = 20977
# a one-connection-at-a-time TCP echo server, started after a second so the port wait is a wait
SERVER = [
    "python3",
    "-u",
    "-c",
    "import socket, sys, time\n"
    "time.sleep(1)\n"
    f"s = socket.create_server(('0.0.0.0', {PORT}))\n"
    "print('listening', flush=True)\n"
    "while True:\n"
    "    c, _ = s.accept()\n"
    "    c.sendall(c.recv(100))\n"
    "    c.close()\n",
]


def test_daemon_script_is_checked_and_quotes() -> None:
    s = util.daemon_script(["prog", "a b"], pidfile="/p", logfile="/l", env={"K": "x y"}, chdir="/d")
    assert "setsid prog 'a b' >> /l 2>&1 < /dev/null &" in s
    assert "export K='x y'" in s and "cd /d || exit 3" in s
    with pytest.raises(ValueError, match="expected at least the program"):
        util.daemon_script([], pidfile="/p", logfile="/l")
    with pytest.raises(ValueError, match="pidfile 'p': expected an absolute path"):
        util.daemon_script(["x"], pidfile="p", logfile="/l")


@pytest.fixture(scope="module")
def remote(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    from chaos.cluster.docker import DockerProvider
    from chaos.control.ssh import Control

    home = tmp_path_factory.mktemp("chaos-home")
    old = os.environ.get("CHAOS_HOME")
    os.environ["CHAOS_HOME"] = str(home)
    provider = DockerProvider(1, name="tutil")
    nodes = provider.up()
    control = Control(nodes)
    try:
        yield control.remote("n1")
    finally:
        control.close()
        provider.down()
        if old is None:
            os.environ.pop("CHAOS_HOME", None)
        else:
            os.environ["CHAOS_HOME"] = old


@pytest.mark.docker
@pytest.mark.slow
def test_start_wait_signal_stop(remote: Any) -> None:
    util.stop_daemon(remote, PIDFILE)  # nothing running: a no-op
    assert not util.daemon_running(remote, PIDFILE)
    util.start_daemon(remote, SERVER, pidfile=PIDFILE, logfile=LOGFILE, chdir="/tmp")
    pid = util.daemon_pid(remote, PIDFILE)
    assert pid is not None
    # the pidfile names the program itself, detached in its own session
    assert "create_server" in remote.exec("cat", f"/proc/{pid}/cmdline").stdout
    assert remote.exec_raw(f"ps -o sid= -p {pid}").stdout.strip() == str(pid)
    util.start_daemon(remote, SERVER, pidfile=PIDFILE, logfile=LOGFILE)  # already running: no second one
    assert util.daemon_pid(remote, PIDFILE) == pid

    util.await_tcp_port(remote, PORT, pidfile=PIDFILE, logfile=LOGFILE, timeout=20)
    echo = f"exec 3<>/dev/tcp/127.0.0.1/{PORT}; echo hi >&3; head -c 3 <&3"
    assert remote.exec("bash", "-c", echo).stdout == "hi\n"
    assert "listening" in util.tail_log(remote, LOGFILE)
    assert util.tail_log(remote, LOGFILE).startswith("=== start ")

    assert util.signal_daemon(remote, PIDFILE, "STOP")
    assert remote.exec_raw(f"ps -o stat= -p {pid}").stdout.strip().startswith("T")
    util.signal_daemon(remote, PIDFILE, "CONT")
    assert not remote.exec_raw(f"ps -o stat= -p {pid}").stdout.strip().startswith("T")

    util.signal_daemon(remote, PIDFILE, "STOP")  # a stopped daemon is killed all the same
    util.stop_daemon(remote, PIDFILE)
    assert not util.daemon_running(remote, PIDFILE)
    assert not remote.exec_raw(f"kill -0 {pid}", check=False).ok
    assert not remote.exec_raw(f"test -e {PIDFILE}", check=False).ok
    assert util.signal_daemon(remote, PIDFILE, "CONT", missing_ok=True) is False
    with pytest.raises(DaemonError, match="n1: SIGSTOP to the daemon of .* failed: not running") as ei:
        util.signal_daemon(remote, PIDFILE, "STOP")
    assert "Usage" not in str(ei.value) and "\n" not in str(ei.value)


@pytest.mark.docker
@pytest.mark.slow
def test_stop_by_match_and_failures_carry_the_log(remote: Any) -> None:
    # a leftover the pidfile does not name is found by its command line
    remote.exec_raw("setsid sleep 1234 > /dev/null 2>&1 < /dev/null &")
    util.stop_daemon(remote, PIDFILE, match="^sleep 1234$")
    assert not remote.exec_raw("pgrep -f '^sleep 1234$'", check=False).ok

    # a daemon that dies before listening: the wait ends at once, with the daemon's own words
    dies = ["sh", "-c", "echo cannot bind: address in use >&2; exit 1"]
    util.start_daemon(remote, dies, pidfile=PIDFILE, logfile=LOGFILE)
    with pytest.raises(DaemonError) as ei:
        util.await_tcp_port(remote, PORT, pidfile=PIDFILE, logfile=LOGFILE, timeout=30)
    assert ei.value.node == "n1" and "exited before listening" in str(ei.value)
    assert "cannot bind: address in use" in ei.value.log_tail

    # nothing listening and no pidfile to watch: the bound is what ends the wait
    with pytest.raises(DaemonError, match=f"nothing listening on 127.0.0.1:{PORT} after 1s"):
        util.await_tcp_port(remote, PORT, timeout=1)

    # a prelude that refuses aborts the start, naming the node and the reason
    with pytest.raises(DaemonError, match="n1: starting true failed: no license"):
        util.start_daemon(
            remote, ["true"], pidfile=PIDFILE, logfile=LOGFILE, prelude="echo no license >&2; exit 3"
        )


@pytest.fixture
def http_server() -> Iterator[str]:
    """A real HTTP server on 127.0.0.1: ``/ok`` echoes the JSON body, ``/boom`` answers 500,
    ``/silent`` never answers (until the test ends)."""
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    release = threading.Event()

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: Any) -> None:
            pass

        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            if self.path == "/silent":
                release.wait(10)
                return
            code, out = (
                (500, b'{"error": "etcdserver: request timed out"}') if self.path == "/boom" else (200, body)
            )
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.end_headers()
            self.wfile.write(out)

        do_GET = do_POST

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        release.set()
        server.shutdown()
        server.server_close()


def test_http_json_maps_not_sent_to_fail_and_no_answer_to_info(http_server: str) -> None:
    import socket

    from chaos.control.client import Indeterminate, NotSent, complete
    from chaos.history.op import Op

    assert util.http_json(http_server + "/ok", {"key": "a2V5"}) == {"key": "a2V5"}
    # nothing listens: the request never left, so the op certainly did not happen
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        closed = s.getsockname()[1]
    with pytest.raises(NotSent, match="Connection refused"):
        util.http_json(f"http://127.0.0.1:{closed}/ok", {})
    # sent, and no answer within the timeout: it may have happened
    with pytest.raises(Indeterminate, match="timed out"):
        util.http_json(http_server + "/silent", {}, timeout=0.5)
    # the system's own error status: whether it applied is the system's to say, so info by default
    with pytest.raises(Indeterminate, match="HTTP 500: .*request timed out") as ei:
        util.http_json(http_server + "/boom", {})
    assert ei.value.fields == {"status": 500}
    # and that is what a workload records
    op = Op(index=0, type="invoke", process=0, f="write", value=1, time=0)
    assert complete(op, lambda: util.http_json(f"http://127.0.0.1:{closed}/", {})).type == "fail"
    assert complete(op, lambda: util.http_json(http_server + "/boom", {})).type == "info"
