"""The tool's errors and exit codes, defined once (Jepsen's ``jepsen.cli`` exit status).

Library code raises :class:`ConfigError` (bad options, plug-ins, files) or a :class:`Refused`
subclass (a cluster another run holds); only click commands raise :class:`BadArguments`.
``chaos.cli.main`` maps all three to one line on stderr and :data:`EXIT_BAD_ARGS`.
"""

from __future__ import annotations

import os
import re
import signal
import sys
from types import TracebackType
from typing import Any

import click

EXIT_VALID = 0
EXIT_INVALID = 1
EXIT_UNKNOWN = 2
EXIT_SIGINT = 130  # 128 + SIGINT, as a shell reports a process Ctrl-C ended
EXIT_SIGTERM = 143  # 128 + SIGTERM
EXIT_BAD_ARGS = 254
EXIT_CRASH = 255


class BadArguments(click.UsageError):
    """Raised by commands for bad input; exits 254 with one clear line."""


class ConfigError(ValueError):
    """A test option is malformed or out of range; the message is one line naming the option (as the
    command line spells it, e.g. ``--time-limit``) or the file, and what was expected."""


class Refused(RuntimeError):
    """The tool refuses to start: the request was well-formed but cannot be served now (e.g. another
    run holds the cluster). Exits 254 with the message as one line."""


class DBError(RuntimeError):
    """A DB step failed on a node. ``node`` names it; ``log_tail`` is the end of its server log."""

    def __init__(self, node: str, message: str, log_tail: str = "") -> None:
        self.node = node
        self.log_tail = log_tail
        tail = " | ".join(ln for ln in log_tail.strip().splitlines()[-5:] if ln.strip())
        super().__init__(f"{node}: {message}" + (f"; server log tail: {tail}" if tail else ""))


def exit_code(valid: object) -> int:
    """The exit status of a verdict: 0 for True, 1 for False, 2 for anything undecided."""
    if valid is True:
        return EXIT_VALID
    if valid is False:
        return EXIT_INVALID
    return EXIT_UNKNOWN


# What a terminal acts on rather than shows: C0 controls (ESC starts CSI/OSC sequences), DEL, C1
# controls (U+009B is a one-character CSI), the bidirectional overrides and isolates that reorder
# what follows ("Trojan Source", CVE-2021-42574), the Unicode line separators, and lone surrogates
# (not text: encoding them for the terminal fails).
_UNPRINTABLE = re.compile("[\x00-\x1f\x7f-\x9f\u200e\u200f\u2028-\u202e\u2066-\u2069\ud800-\udfff]")


def _escape(match: re.Match[str]) -> str:
    code = ord(match.group())
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def printable(text: Any, keep: str = "") -> str:
    """``str(text)`` safe to write to a terminal: every control character (C0, DEL, C1), bidi
    override or isolate, line or paragraph separator and lone surrogate becomes its escape as Python
    writes it (``\\x1b``, ``\\x9b``, ``\\u202e``, ``\\ud800``), except the characters of ``keep``
    (e.g. ``"\\n"`` where a caller prints several lines). Everything else, non-ASCII letters
    included, is unchanged. History keys and values, node names, error texts and plug-in messages
    pass through this before they are printed."""
    s = str(text)
    if _UNPRINTABLE.search(s) is None:
        return s
    if not keep:
        return _UNPRINTABLE.sub(_escape, s)
    return _UNPRINTABLE.sub(lambda m: m.group() if m.group() in keep else _escape(m), s)


def did_you_mean(names: Any, known: Any) -> str:
    """``" (did you mean clock-skew?)"`` for names of ``names`` close to one of ``known`` (difflib's
    ratio >= 0.6, as git and click suggest), else ``""``; appended to an unknown-name error line."""
    import difflib

    pool = [str(k) for k in known]
    hints = [m[0] for n in names for m in [difflib.get_close_matches(str(n), pool, n=1)] if m]
    return f" (did you mean {', '.join(dict.fromkeys(hints))}?)" if hints else ""


def error_line(message: Any) -> None:
    """Print ``chaos: <message>`` to stderr as one line: whitespace runs (newlines included) become
    one space and control characters are escaped (:func:`printable`)."""
    click.echo(f"chaos: {printable(' '.join(str(message).split()))}", err=True)


# -- what raised it: the tool, a real signal, or plug-in code ------------------------------------

_SIGNALS: set[int] = set()  # the signals this process received through watch_sigint


def _on_sigint(signum: int, frame: Any) -> None:
    _SIGNALS.add(signum)
    raise KeyboardInterrupt


def watch_sigint() -> None:
    """Record a real Ctrl-C before raising KeyboardInterrupt, so that :func:`from_signal` can tell
    it from plug-in code raising KeyboardInterrupt itself. Changes nothing when SIGINT is ignored
    (a run started in the background by a non-interactive shell) or handled by someone else."""
    if signal.getsignal(signal.SIGINT) is signal.default_int_handler:
        signal.signal(signal.SIGINT, _on_sigint)


def from_signal(exc: BaseException) -> bool:
    """Whether ``exc`` may come from a real signal: anything but a KeyboardInterrupt does; a
    KeyboardInterrupt does when :func:`watch_sigint` saw SIGINT, never while SIGINT is ignored (no
    signal can have raised it), and is given the benefit of the doubt when someone else handles
    SIGINT."""
    if not isinstance(exc, KeyboardInterrupt):
        return True
    handler = signal.getsignal(signal.SIGINT)
    if handler is signal.SIG_IGN:
        return False
    if handler is _on_sigint:
        return signal.SIGINT in _SIGNALS
    return True


def _package_root(module: Any) -> str:
    return os.path.dirname(os.path.abspath(str(module.__file__))) + os.sep


_TOOL_ROOTS = (_package_root(sys.modules[__name__.split(".")[0]]), _package_root(click))


def raised_in(exc: BaseException) -> str:
    """Where ``exc`` was raised, for a crash line: ``module.function (file:line)`` of the innermost
    frame of its traceback outside this tool and click (plug-in code calling ``sys.exit`` is named
    by its own frame); the innermost frame when all are the tool's."""
    tb: TracebackType | None = exc.__traceback__
    chosen = None
    while tb is not None:
        path = os.path.abspath(tb.tb_frame.f_code.co_filename)
        if chosen is None or not path.startswith(_TOOL_ROOTS):
            chosen = tb
        tb = tb.tb_next
    if chosen is None:
        return "an unknown place"
    frame = chosen.tb_frame
    module = frame.f_globals.get("__name__", "?")
    return f"{module}.{frame.f_code.co_qualname} ({frame.f_code.co_filename}:{chosen.tb_lineno})"
