"""What a person reads of a run: the HTML report (:mod:`chaos.history.report.html`), the
terminal summary (:mod:`chaos.history.report.summary`), ``chaos serve`` and the ``chaos check``
command (:mod:`chaos.history.report.cli`). Above the checkers, whose results it shows.

``write_report`` and ``ReportError`` are the HTML report's (``from chaos.history.report import
write_report``).
"""

from __future__ import annotations

from chaos.history.report.html import ReportError, write_report

__all__ = ["ReportError", "write_report"]
