"""Moved to :mod:`chaos.history.checkers.bank`; this name stays until ``chaos_dledger/sim.py``
imports the new one (issue 37: the history's sub-packages), then goes."""

from __future__ import annotations

from chaos.history.checkers.bank import ACCOUNTS, MAX_TRANSFER, TOTAL

__all__ = ["ACCOUNTS", "MAX_TRANSFER", "TOTAL"]
