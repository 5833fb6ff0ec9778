"""The checkers: each reads a history and gives a verdict (``valid`` true, false or ``"unknown"``),
Jepsen's ``jepsen.checker``; the registry that picks and composes them for a run is
:mod:`chaos.history.checkers.registry`. Above the ground of :mod:`chaos.history` (ops, store,
formats), below :mod:`chaos.history.report` and :mod:`chaos.history.spark`.

``check_run``, ``checkers_for`` and ``compose`` are the registry's (``from chaos.history.checkers
import check_run``). The Elle checker's package loads its checker (rustworkx, numpy) on first use.
"""

from __future__ import annotations

from chaos.history.checkers.registry import check_run, checkers_for, compose

__all__ = ["check_run", "checkers_for", "compose"]
