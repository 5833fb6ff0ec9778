"""The checkers: each reads a history and gives a verdict (``valid`` true, false or ``"unknown"``),
Jepsen's ``jepsen.checker``; the registry that picks and composes them for a run is
:mod:`chaos.history.checkers.registry`. Above the ground of :mod:`chaos.history` (ops, store,
formats), below :mod:`chaos.history.report` and :mod:`chaos.history.spark`.

``check_run``, ``checkers_for`` and ``compose`` are read here from the registry on first use
(``from chaos.history.checkers import check_run`` keeps working; a checker module imported alone
does not load the registry).
"""

from __future__ import annotations

from typing import Any

# the sub-package's entry names, read from their module on first use (as chaos.history.checkers.elle
# does): importing one module of the sub-package does not import the others
_LAZY = ("check_run", "checkers_for", "compose")


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        from chaos.history.checkers import registry

        return getattr(registry, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = list(_LAZY)
