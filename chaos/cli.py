"""The ``chaos`` command.

Subcommands live beside the code they drive and are imported only when used, so that
``chaos --help`` stays fast. Exit status follows Jepsen's CLI: 0 valid, 1 invalid, 2 unknown,
254 bad arguments, 255 crash.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any, NoReturn

import click

from chaos import plugins, supervisor
from chaos.errors import (
    EXIT_BAD_ARGS,
    EXIT_CRASH,
    EXIT_SIGINT,
    ConfigError,
    Refused,
    error_line,
    from_signal,
    raised_in,
    watch_sigint,
)

# the tool's own commands (registered in chaos.plugins.BUILTINS["command"], as setup.cfg's
# chaos.commands entry points) -> one line for `chaos --help`, written here so the help imports none
COMMANDS: dict[str, str] = {
    "run": "Run a test: cluster, DB, workload, nemesis, check, report.",
    "heal": "Heal every fault the tool may have left on the nodes.",
    "cluster": "Provision, inspect and remove the node cluster.",
    "check": "Re-check a stored run or a history file.",
    "report": "Write the HTML report of a run directory.",
    "serve": "Serve the store's runs and reports over HTTP.",
    "analyze": "Analyse runs on Spark: verdicts, latency, availability.",
    "gate": "Release gate: run or analyse a matrix of tests, exit 0 only if all pass.",
    "plugin": "Check a DB plug-in: its API contract and a smoke run.",
}


class LazyGroup(click.Group):
    """The ``chaos`` group: every subcommand read from the one registry (:mod:`chaos.plugins`, kind
    ``command``: the tool's own and ``chaos.commands`` entry points alike), each loaded only when
    it runs, so ``chaos --help`` stays fast."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return plugins.names("command")

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        # a built-in resolves before any entry point: no scan of the installed distributions
        # (importlib.metadata, tens of ms) for the tool's own commands
        if cmd_name not in plugins.BUILTINS["command"] and cmd_name not in plugins.names("command"):
            return None
        try:
            cmd = plugins.resolve("command", cmd_name)
        except ConfigError as e:  # a broken plug-in names itself and never runs as a command
            if cmd_name in COMMANDS and "no module named" in str(e):
                return _missing(cmd_name)  # a part left out of this build
            raise
        return cmd if isinstance(cmd, click.Command) else None

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        rows = [(name, COMMANDS.get(name) or _short_help(name)) for name in self.list_commands(ctx)]
        with formatter.section("Commands"):
            formatter.write_dl(rows)


def _short_help(name: str) -> str:
    """A plug-in command's one line, from the command itself (loaded for it)."""
    try:
        cmd = plugins.resolve("command", name)
    except Exception as e:  # a broken plug-in must not break --help
        return f"(cannot load it: {' '.join(str(e).split())[:60]})"
    return cmd.get_short_help_str(limit=70) if isinstance(cmd, click.Command) else ""


def _missing(name: str) -> click.Command:
    @click.command(name=name, help=COMMANDS[name] + " (not available in this build)")
    def cmd() -> None:
        raise click.ClickException(f"'chaos {name}' is not available in this build")

    return cmd


def _print_version(ctx: click.Context, _param: click.Parameter, value: bool) -> None:
    """``--version``: the version of the distribution that installed this package, looked up only
    when asked (scanning the installed distributions costs a few hundred ms)."""
    if not value or ctx.resilient_parsing:
        return
    from importlib import metadata

    dist = (metadata.packages_distributions().get("chaos") or ["?"])[0]  # __name__ is __main__ under -m
    try:
        version = metadata.version(dist)
    except metadata.PackageNotFoundError:
        version = "unknown (not installed)"
    click.echo(f"chaos, version {version}")
    ctx.exit()


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.option(
    "--version",
    is_flag=True,
    expose_value=False,
    is_eager=True,
    callback=_print_version,
    help="Show the version and exit.",
)
def cli() -> None:
    """Jepsen-style chaos testing for real clusters."""


def main(argv: list[str] | None = None) -> Any:
    """Entry point; maps errors onto Jepsen's exit codes: bad arguments (click's usage errors,
    ``BadArguments``, a library's ``ConfigError``, a cluster another run holds) print one line and
    exit 254; an exception no command handled prints one line (the traceback too when
    ``CHAOS_TRACEBACK`` is set) and exits 255; Ctrl-C exits 130.

    A run exits 0 only through a verdict: commands return their status (or raise click's
    ``Exit``), so a ``SystemExit``, a KeyboardInterrupt no signal caused, or any other
    BaseException from plug-in code is a crash (255) naming the code that raised it. As the
    program's entry point (``argv`` None) the command runs under :mod:`chaos.supervisor`, whose
    process exits with the status this function reports on completion: plug-in code ending the
    process itself (``os._exit(0)``) is a crash too, never a pass. A command that can run no
    plug-in code (:func:`runs_plugins`) runs in this process, unsupervised."""
    completed = supervisor.start() if argv is None and runs_plugins(sys.argv[1:]) else None
    try:
        _main(argv)
    except SystemExit as e:
        if completed is not None:
            completed(e.code)
        if argv is None:
            _exit_now(e.code)
        raise


# the options of `chaos check` that name no plug-in (only the tool's own formats, workloads and
# consistency models), each with whether it takes a value
_OWN_CHECK_OPTIONS = {
    "--format": True,
    "--time-limit": True,
    "--workers": True,
    "--workload": True,
    "--consistency-model": True,
    "--fail-fast": False,
}


def runs_plugins(args: list[str]) -> bool:
    """Whether the command line ``args`` (without the program name) may run plug-in code, and so
    runs under :mod:`chaos.supervisor`: every command but ``chaos check`` of one history file,
    not a run's (whose ``test.json`` may name plug-in checkers), with none but the options of
    :data:`_OWN_CHECK_OPTIONS` (``--model`` may name a plug-in): its checkers and models are the
    tool's own, read from :data:`chaos.plugins.BUILTINS` before any entry point. Such a check
    starts without the supervisor's fork (about a sixth of its start-up)."""
    if not args or args[0] != "check":
        return True
    paths: list[str] = []
    i = 1
    while i < len(args):
        name, eq, _ = args[i].partition("=")
        if name in _OWN_CHECK_OPTIONS:
            i += 2 if _OWN_CHECK_OPTIONS[name] and not eq else 1
        elif name.startswith("-"):  # --model, --help, anything else
            return True
        else:
            paths.append(args[i])
            i += 1
    if len(paths) != 1:
        return True
    path = Path(paths[0])
    return not path.is_file() or (path.parent / "test.json").exists()


def _exit_now(code: object) -> None:
    """End the program with ``code`` at once, without the interpreter's teardown (freeing every
    module and object: about 10 ms of a short ``chaos check``, more after a long one), when that
    is all that is left: ``code`` an int, no thread but this one, no profiler or tracer, the exit
    handlers (``atexit``) run and stdout and stderr flushed. Returns otherwise, and the caller
    exits as usual."""
    threading = sys.modules.get("threading")
    if not isinstance(code, int) or (threading is not None and threading.active_count() > 1):
        return
    if sys.getprofile() is not None or sys.gettrace() is not None:  # a profiler reports after the run
        return
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    except (OSError, ValueError):  # a closed pipe: the usual exit reports it
        return
    import atexit

    atexit._run_exitfuncs()  # what they print is flushed below
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    except (OSError, ValueError):
        pass
    os._exit(code)


def _main(argv: list[str] | None) -> NoReturn:
    watch_sigint()
    try:
        rv = cli.main(args=argv, prog_name="chaos", standalone_mode=False)
    except click.exceptions.Exit as e:
        sys.exit(e.exit_code)
    except (click.exceptions.Abort, KeyboardInterrupt) as e:
        cause = e.__cause__ if isinstance(e, click.exceptions.Abort) else e  # click wraps Ctrl-C
        if cause is not None and not from_signal(cause):
            _crash(cause, "raised KeyboardInterrupt")
        error_line("aborted")
        sys.exit(EXIT_SIGINT)
    except click.UsageError as e:
        error_line(e.format_message())
        sys.exit(EXIT_BAD_ARGS)
    except click.ClickException as e:
        error_line(e.format_message())
        sys.exit(EXIT_BAD_ARGS if e.exit_code in (1, 2) else e.exit_code)
    except (ConfigError, Refused) as e:
        error_line(e)
        sys.exit(EXIT_BAD_ARGS)
    except SystemExit as e:  # no command of the tool exits this way: plug-in code did
        _crash(e, f"called sys.exit({e.code!r})")
    except Exception as e:
        _crash(e, f"{type(e).__name__}: {e}")
    except BaseException as e:  # GeneratorExit and the like, from plug-in code
        _crash(e, f"raised {type(e).__name__}: {e}")
    sys.exit(rv if isinstance(rv, int) else 0)


def _crash(e: BaseException, what: str) -> NoReturn:
    if os.environ.get("CHAOS_TRACEBACK"):
        import traceback  # only on a crash: start-up does not pay for it

        traceback.print_exception(e)
    where = "" if isinstance(e, Exception) else f" in {raised_in(e)}; no verdict"
    error_line(f"crashed: {what}{where}")
    sys.exit(EXIT_CRASH)


if __name__ == "__main__":
    main()
