"""The plug-in API: everything a DB, workload, nemesis or checker plug-in needs, in one module.

Import from here and nowhere else of ``chaos``::

    from chaos.api import DB, DBOption, DaemonProcess, Failed, Indeterminate, Node, NotSent

The names below are the contract; the modules they live in are not, and may move between
versions without notice. :data:`VERSION` is the API's semantic version (``CHANGELOG.md`` at the
repository root lists what each version added, changed, deprecated and removed): a minor version
only adds, a name that moves or goes keeps working for at least one minor version with a
``DeprecationWarning`` naming its new import, and only a major version removes. A plug-in may
declare the range it was written for, ``API = ">=1.0,<2"`` (a PEP 440 specifier) on its class,
function or module; ``chaos run`` refuses it with one line (exit 254) when this tool's version is
outside it. ``chaos plugin check MODULE:ATTR`` checks a DB plug-in against the contract and runs
a short fault-free smoke on the cluster.

The guide is ``docs/plugins.md``; the contracts are in ``docs/design.md``. The source each part
follows: Jepsen's ``jepsen.db`` (the DB and its capabilities), ``jepsen.client`` (client
protocols, ``ok``/``fail``/``info``), ``jepsen.control`` and ``jepsen.control.util`` (SSH,
daemons), ``jepsen.generator`` (generators), ``jepsen.checker`` (verdicts).
"""

from __future__ import annotations

from chaos.cluster import deploy
from chaos.cluster.osetup import install_packages
from chaos.control import generator as gen
from chaos.control.client import (
    Aborted,
    Answer,
    ClientError,
    Failed,
    Indeterminate,
    LogClient,
    NotSent,
    ProtocolWorker,
    RegisterClient,
    TxnClient,
    complete,
    open_db_client,
    value_kind,
)
from chaos.control.db import (
    CAPABILITIES,
    DB,
    Clients,
    Clock,
    DataDir,
    DBOption,
    GateRun,
    Leadership,
    LeaderTransfer,
    LogFiles,
    Pause,
    Primary,
    Process,
    Recovery,
    capabilities,
    has,
)
from chaos.control.node import Node
from chaos.control.ssh import CmdResult, CommandTimeout, Control, NodeUnreachable, Remote, RemoteError
from chaos.control.test import RunOptions, Test
from chaos.control.util import (
    DaemonError,
    DaemonProcess,
    LeaderViews,
    await_tcp_port,
    daemon_pid,
    daemon_running,
    daemon_script,
    http_json,
    signal_daemon,
    start_daemon,
    stop_daemon,
    tail_log,
)
from chaos.errors import BadArguments, ConfigError, DBError, Refused
from chaos.history.checkers.nodelogs import INVALID, WARNING, LogPattern
from chaos.history.op import FAIL, INFO, INVOKE, NEMESIS, OK, Op
from chaos.history.verdict import UNKNOWN, Checker, StreamChecker, merge_valid
from chaos.nemesis.base import (
    TARGETS,
    Nemesis,
    NemesisError,
    NemesisKind,
    NoState,
    choose_nodes,
    not_applied,
    on_nodes,
    outcome,
    sh,
)
from chaos.nemesis.base import complete as complete_nemesis_op
from chaos.nemesis.partition import PARTITION_SHAPES, Grudge
from chaos.nemesis.partition import shape_grudge as partition_grudge
from chaos.plugins import API_VERSION as VERSION
from chaos.workloads import Workload
from chaos.workloads.bank import BankClient
from chaos.workloads.counter import CounterClient
from chaos.workloads.set import SetClient

__all__ = [
    # the version of this API
    "VERSION",
    # the DB contract and its capabilities (chaos/control/db.py)
    "DB",
    "DBOption",
    "GateRun",
    "CAPABILITIES",
    "Clients",
    "Clock",
    "DataDir",
    "LeaderTransfer",
    "Leadership",
    "LogFiles",
    "Pause",
    "Primary",
    "Process",
    "Recovery",
    "capabilities",
    "has",
    # nodes, SSH, OS packages, own code on the nodes
    "Node",
    "Control",
    "Remote",
    "CmdResult",
    "RemoteError",
    "CommandTimeout",
    "NodeUnreachable",
    "install_packages",
    "deploy",
    # daemons and leaders (jepsen.control.util)
    "DaemonError",
    "DaemonProcess",
    "LeaderViews",
    "await_tcp_port",
    "daemon_pid",
    "daemon_running",
    "daemon_script",
    "http_json",
    "signal_daemon",
    "start_daemon",
    "stop_daemon",
    "tail_log",
    # clients: the protocols a workload drives and the errors that decide fail / info
    "RegisterClient",
    "LogClient",
    "TxnClient",
    "BankClient",
    "CounterClient",
    "SetClient",
    "Answer",
    "ClientError",
    "Failed",
    "Aborted",
    "NotSent",
    "Indeterminate",
    "ProtocolWorker",
    "complete",
    "open_db_client",
    "value_kind",
    # the test, workloads, generators, ops
    "Test",
    "RunOptions",
    "Workload",
    "gen",
    "Op",
    "INVOKE",
    "OK",
    "FAIL",
    "INFO",
    "NEMESIS",
    # checkers and verdicts
    "Checker",
    "StreamChecker",
    "UNKNOWN",
    "merge_valid",
    "LogPattern",
    "INVALID",
    "WARNING",
    # nemeses
    "Nemesis",
    "NemesisKind",
    "NemesisError",
    "NoState",
    "TARGETS",
    "choose_nodes",
    "complete_nemesis_op",
    "not_applied",
    "on_nodes",
    "outcome",
    "sh",
    # partition shapes as grudges, for a simulator that cuts its own links (1.2.0)
    "Grudge",
    "PARTITION_SHAPES",
    "partition_grudge",
    # errors
    "ConfigError",
    "BadArguments",
    "Refused",
    "DBError",
]
