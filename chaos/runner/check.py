"""The end of a run: its history read once, then ``history.txt``, the checkers, the HTML report
and the terminal summary, all from that one read (issue 37: a run's check and report open
``history.jsonl`` at most three times; ``tests/test_history_reads.py`` counts them).

Jepsen's ``jepsen.core/analyze!`` followed by ``jepsen.cli``'s summary: the checkers
(:func:`chaos.history.checkers.registry.check_run`) write ``results.json``, the report
(:func:`chaos.history.report.html.write_report`) ``index.html`` and its PNGs, and the summary
(:func:`chaos.history.report.summary.print_run_summary`) ends with the verdict.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from rich.console import Console

from chaos.history.checkers.registry import check_run
from chaos.history.report.html import write_report
from chaos.history.report.summary import print_run_summary
from chaos.history.store import HistoryError, ParsedHistory, RunDir
from chaos.history.text import write_history_text
from chaos.history.verdict import verdict_word
from chaos.plugins import DEPRECATIONS

LOG = logging.getLogger("chaos.run")


def read_once(run: RunDir) -> ParsedHistory | None:
    """The run's history read and validated once (:class:`ParsedHistory`), or None when it cannot
    be (malformed, missing): then each step reads the file itself and names the problem."""
    try:
        return ParsedHistory.read(run.history_path)
    except (HistoryError, OSError) as e:
        LOG.warning("history not read once for the check and report: %s", e)
        return None


def check_and_report(
    run: RunDir,
    *,
    time_limit: float,
    say: Callable[..., None],
    console: Console | None = None,
) -> dict[str, object]:
    """``history.txt``, the checkers' ``results.json``, ``index.html`` and (with a ``console``) the
    closing summary of ``run``, from one read of its history; returns the results. A checker
    run that raises gives ``valid: "unknown"`` with the error; a report that fails is said and
    logged, never fatal. ``say(text, lead=...)``: the runner's status line."""
    history = read_once(run)
    ops = history.ops if history is not None else None
    try:
        write_history_text(run.history_path, ops)  # history.txt, Jepsen's human-readable history
    except Exception as e:
        LOG.warning("history.txt not written: %s", e)
    say("checking the history")
    t0 = time.monotonic()
    try:
        results = check_run(run, time_limit=time_limit, history=history)
    except Exception as e:
        LOG.exception("check failed")
        results = {"valid": "unknown", "error": f"{type(e).__name__}: {e}", "checkers": {}}
        run.write_results(results)
    say(f"checked in {time.monotonic() - t0:.1f} s: {verdict_word(results.get('valid'))}")
    try:
        path = write_report(run.path, history)
        say(f"report {path}")
    except Exception as e:
        LOG.exception("report failed")
        say(str(e), lead="[yellow]report failed:[/yellow]")
    if console is not None:
        notes = [f"deprecated: {m}" for m in DEPRECATIONS]  # plug-ins' moved names, once each
        print_run_summary(console, results, run.history_path, str(run.path), notes, ops)
    return results
