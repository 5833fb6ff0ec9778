"""The SSH layer's settings, checked without a node (the sshd tests are in test_ssh_control.py)."""

from __future__ import annotations

import pytest

from chaos.control.node import Node
from chaos.control.ssh import DEFAULT_TIMEOUT, Control, NodeUnreachable, Remote


def test_timeouts_default_to_a_minute_and_are_set_per_control() -> None:
    nodes = [Node("n1", "h1"), Node("n2", "h2")]
    assert Remote(nodes[0]).timeout == DEFAULT_TIMEOUT == 60.0
    c = Control(nodes, timeout=600, connect_timeout=3)
    assert [(c.remote(n).timeout, c.remote(n).connect_timeout) for n in c.names] == [(600.0, 3.0)] * 2


@pytest.mark.parametrize("bad", [0, -1, float("nan"), "60", True])
def test_non_positive_or_non_numeric_timeouts_are_refused(bad: object) -> None:
    with pytest.raises(ValueError, match="timeout"):
        Remote(Node("n1", "h"), timeout=bad)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="timeout"):
        Control([Node("n1", "h")], timeout=bad)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="timeout"):
        Remote(Node("n1", "h")).exec_raw("true", timeout=bad)  # type: ignore[arg-type]


def test_connect_to_a_closed_port_is_one_line_and_leaves_no_connection() -> None:
    r = Remote(Node("n1", "127.0.0.1", port=1), connect_timeout=2, retries=2, backoff=0.01)
    with pytest.raises(NodeUnreachable) as ei:
        r.connect()
    assert str(ei.value) == "n1: root@127.0.0.1:1: unreachable (Connection refused)"
    assert not r.connected and r.reconnects == 0
