"""Jepsen's DB protocol (``jepsen.db``): how a test installs, runs and breaks the system under test.

``setup``/``teardown`` act on all nodes of a :class:`~chaos.control.ssh.Control` (in parallel);
``start``/``kill``/``pause``/``resume`` act on one node's :class:`~chaos.control.ssh.Remote`
(Jepsen's ``db/Process`` and ``db/Pause``); ``primaries`` names the nodes that currently claim to be
leader (``db/Primary``); ``log_files`` lists remote files to collect into the run directory
(``db/LogFiles``). ``log_patterns`` declares the anomalies the DB's logs may show
(:class:`chaos.history.nodelogs.LogPattern`, Jepsen's ``log-file-pattern`` checker) and
``await_recovery`` waits, after healing, up to ``recovery_timeout`` seconds for the cluster to serve
again (the record the ``liveness`` checker judges, see :mod:`chaos.history.liveness`). The DLedger
implementation is :class:`chaos.cluster.dledger_db.DLedgerDB`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

if TYPE_CHECKING:
    from chaos.control.ssh import Control, Remote
    from chaos.history.nodelogs import LogPattern


class DBError(RuntimeError):
    """A DB step failed on a node. ``node`` names it; ``log_tail`` is the end of its server log."""

    def __init__(self, node: str, message: str, log_tail: str = "") -> None:
        self.node = node
        self.log_tail = log_tail
        tail = " | ".join(ln for ln in log_tail.strip().splitlines()[-5:] if ln.strip())
        super().__init__(f"{node}: {message}" + (f"; server log tail: {tail}" if tail else ""))


@runtime_checkable
class DB(Protocol):
    """The DB protocol every system under test implements."""

    def setup(self, control: Control) -> None: ...

    def teardown(self, control: Control) -> None: ...

    def start(self, remote: Remote) -> None: ...

    def kill(self, remote: Remote) -> None: ...

    def pause(self, remote: Remote) -> None: ...

    def resume(self, remote: Remote) -> None: ...

    def primaries(self, control: Control) -> list[str]: ...

    def log_files(self, remote: Remote) -> list[str]: ...

    log_patterns: Sequence[LogPattern]
    recovery_timeout: float

    def await_recovery(self, control: Control, timeout: float) -> dict[str, Any]: ...


class NoopDB:
    """A DB that does nothing (for exercising the control layer and nemeses alone)."""

    def setup(self, control: Control) -> None:
        pass

    def teardown(self, control: Control) -> None:
        pass

    def start(self, remote: Remote) -> None:
        pass

    def kill(self, remote: Remote) -> None:
        pass

    def pause(self, remote: Remote) -> None:
        pass

    def resume(self, remote: Remote) -> None:
        pass

    def primaries(self, control: Control) -> list[str]:
        return []

    def log_files(self, remote: Remote) -> list[str]:
        return []

    log_patterns: Sequence[LogPattern] = ()
    recovery_timeout = 0.0

    def await_recovery(self, control: Control, timeout: float) -> dict[str, Any]:
        return {"recovered": True, "bound_s": timeout, "waited_s": 0.0, "problems": [], "nodes": {}}
