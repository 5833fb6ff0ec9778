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

Since 1.2.0 the API also carries what a plug-in that brings its own simulator or campaign needs
(the default DB's deterministic simulator, ``chaos sim``, is one, and imports this module only):
writing a run directory and its history, having it checked and reported as ``chaos run``'s are,
measuring the system's coverage, starting Spark, and drawing the built-in workloads' ops with
their generators' own parameters (so the checkers' defaults hold for its histories).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

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
from chaos.control.test import RunOptions, Test, check_number
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
from chaos.errors import BadArguments, ConfigError, DBError, Refused, did_you_mean
from chaos.history import codecov
from chaos.history.checkers import checkers_for, compose
from chaos.history.checkers.bank import ACCOUNTS as BANK_ACCOUNTS
from chaos.history.checkers.bank import MAX_TRANSFER as BANK_MAX_TRANSFER
from chaos.history.checkers.nodelogs import INVALID, WARNING, LogPattern
from chaos.history.op import FAIL, INFO, INVOKE, NEMESIS, OK, Op
from chaos.history.spark.session import spark_session

if TYPE_CHECKING:  # at run time through __getattr__ below: the report's jinja2 on first use
    from chaos.history.report import ReportError, write_report
from chaos.history.store import HistoryWriter, RunDir
from chaos.history.verdict import UNKNOWN, Checker, StreamChecker, merge_valid, verdict_word
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
from chaos.workloads.bank import initial_balances as bank_initial_balances
from chaos.workloads.counter import MAX_ADD as COUNTER_MAX_ADD
from chaos.workloads.counter import CounterClient
from chaos.workloads.long_fork import GROUP_SIZE as LONG_FORK_GROUP_SIZE
from chaos.workloads.long_fork import read_txn as long_fork_read_txn
from chaos.workloads.register import DELETE_ONE_IN as REGISTER_DELETE_ONE_IN
from chaos.workloads.register import VALUES as REGISTER_VALUES
from chaos.workloads.set import SetClient
from chaos.workloads.txn import DEFAULTS as TXN_DEFAULTS
from chaos.workloads.txn import draw_txn

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
    "verdict_word",
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
    # -- 1.2.0: for a plug-in that brings its own simulator or campaign (the default DB's chaos sim) --
    # a run directory (test.json, history.jsonl) as chaos run writes it, so every reader of runs
    # (chaos check, report, serve, analyze) reads a simulated run as a real one
    "RunDir",
    "HistoryWriter",
    # the run's checkers, picked and composed as chaos run does (names from the workload's
    # checkers), so a simulated history gets the same verdicts
    "checkers_for",
    "compose",
    # the HTML report of a run directory (ReportError: the report could not be written)
    "write_report",
    "ReportError",
    # coverage of the system under test over a campaign (codecov.Spec, start, save, paused,
    # measured, chunk_data, add_data, report, campaign_dir; the DB declares source_packages)
    "codecov",
    # a SparkSession for a campaign's tasks (chaos analyze's: UI off, its workers' daemon)
    "spark_session",
    # option checks with chaos run's wording: a number option's range, a name's suggestion
    "check_number",
    "did_you_mean",
    # the built-in workloads' draws, for a simulator drawing their ops as their generators do
    # (the checkers' defaults, e.g. the bank's accounts and total, then hold for its histories)
    "BANK_ACCOUNTS",
    "BANK_MAX_TRANSFER",
    "bank_initial_balances",
    "COUNTER_MAX_ADD",
    "LONG_FORK_GROUP_SIZE",
    "long_fork_read_txn",
    "REGISTER_VALUES",
    "REGISTER_DELETE_ONE_IN",
    "TXN_DEFAULTS",
    "draw_txn",
]


def __getattr__(name: str) -> object:
    if name in ("ReportError", "write_report"):
        # the HTML report (jinja2) only when a plug-in writes one: loading a DB plug-in through the
        # API must not cost every command the report's templates
        from chaos.history import report

        return getattr(report, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
