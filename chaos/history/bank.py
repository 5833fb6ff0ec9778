"""Moved to :mod:`chaos.history.checkers.bank`; this name stays until the simulation campaign
imports the new one (issue 37: the history's sub-packages), then goes."""

from __future__ import annotations

from chaos.history.checkers.bank import ACCOUNTS, MAX_TRANSFER, TOTAL

__all__ = ["ACCOUNTS", "MAX_TRANSFER", "TOTAL"]
