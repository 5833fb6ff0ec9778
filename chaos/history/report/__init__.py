"""What a person reads of a run: the HTML report (:mod:`chaos.history.report.html`), the
terminal summary (:mod:`chaos.history.report.summary`), ``chaos serve`` and the ``chaos check``
command (:mod:`chaos.history.report.cli`). Above the checkers, whose results it shows.

``write_report`` and ``ReportError`` are the HTML report's (``from chaos.history.report import
write_report``), loaded on first use (PEP 562).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from chaos.history.report.html import ReportError, write_report

__all__ = ["ReportError", "write_report"]


def __getattr__(name: str) -> Any:
    if name in __all__:
        # the report's templates (jinja2) and tables: `chaos check` of a history file starts without them
        from chaos.history.report import html

        return getattr(html, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
