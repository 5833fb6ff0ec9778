"""What a person reads of a run: the HTML report (:mod:`chaos.history.report.html`), the
terminal summary (:mod:`chaos.history.report.summary`), ``chaos serve`` and the ``chaos check``
command (:mod:`chaos.history.report.cli`). Above the checkers, whose results it shows.

``write_report`` and ``ReportError`` are read here from :mod:`chaos.history.report.html` on first
use, so the terminal summary imported alone does not load jinja2.
"""

from __future__ import annotations

from typing import Any

# the sub-package's entry names, read from their module on first use (as chaos.history.checkers.elle
# does): importing one module of the sub-package does not import the others
_LAZY = ("ReportError", "write_report")


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        from chaos.history.report import html

        return getattr(html, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = list(_LAZY)
