"""Deprecated since API 1.0.0: ``Node`` moved to :mod:`chaos.control.node`; a plug-in imports it
from :mod:`chaos.api`. This module re-exports it with a ``DeprecationWarning`` (shown once in the
run summary) and goes in API 2.0 (CHANGELOG.md)."""

from __future__ import annotations

from chaos.control.node import Node, nodes_from_json, nodes_to_json  # noqa: F401 - re-exported
from chaos.plugins import deprecated

deprecated(
    "chaos.cluster.node is deprecated since API 1.0.0 (moved to chaos.control.node): "
    "import Node from chaos.api; it goes in API 2.0"
)
