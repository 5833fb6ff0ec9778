"""Deprecated since API 1.0.0: the client protocols moved to :mod:`chaos.control.client`; a
plug-in imports them from :mod:`chaos.api`. This module re-exports them with a
``DeprecationWarning`` (shown once in the run summary) and goes in API 2.0 (CHANGELOG.md)."""

from __future__ import annotations

from chaos.control.client import (  # noqa: F401 - re-exported for plug-ins of the previous contract
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
    node_of,
    open_db_client,
)
from chaos.plugins import deprecated

deprecated(
    "chaos.workloads.clients is deprecated since API 1.0.0 (moved to chaos.control.client): "
    "import its names from chaos.api; it goes in API 2.0"
)
