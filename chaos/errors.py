"""The tool's errors and exit codes, defined once (Jepsen's ``jepsen.cli`` exit status).

Library code raises :class:`ConfigError` (bad options, plug-ins, files) or a :class:`Refused`
subclass (a cluster another run holds); only click commands raise :class:`BadArguments`.
``chaos.cli.main`` maps all three to one line on stderr and :data:`EXIT_BAD_ARGS`.
"""

from __future__ import annotations

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


def error_line(message: Any) -> None:
    """Print ``chaos: <message>`` to stderr as one line (newlines inside become spaces)."""
    click.echo(f"chaos: {' '.join(str(message).split())}", err=True)
