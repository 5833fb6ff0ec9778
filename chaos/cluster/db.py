"""Deprecated since API 1.1.0: the DB contract moved to :mod:`chaos.control.db`, into the kit beside
the ``Test`` it is part of; a plug-in imports it from :mod:`chaos.api`. This module re-exports it
with a ``DeprecationWarning`` (shown once in the run summary) and goes in API 2.0 (CHANGELOG.md)."""

from __future__ import annotations

from chaos.control import db as _moved
from chaos.control.db import *  # noqa: F403 - the public names, re-exported
from chaos.plugins import deprecated

globals().update({k: v for k, v in vars(_moved).items() if not k.startswith("__")})  # the private ones too

deprecated(
    "chaos.cluster.db is deprecated since API 1.1.0 (moved to chaos.control.db): "
    "import the DB contract from chaos.api; it goes in API 2.0"
)
