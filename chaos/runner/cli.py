"""``chaos run``: one test (or ``--test-count`` tests) end to end; see chaos.runner.runner."""

from __future__ import annotations

import signal
from collections.abc import Mapping, Sequence
from typing import Any

import click
from rich.markup import escape

from chaos import nemesis, plugins
from chaos.control import db as dbmod
from chaos.control.ssh import RemoteError
from chaos.control.test import RunOptions
from chaos.errors import (
    EXIT_CRASH,
    EXIT_SIGINT,
    EXIT_SIGTERM,
    BadArguments,
    ConfigError,
    did_you_mean,
    error_line,
    from_signal,
)
from chaos.history.checkers.elle.anomalies import MODEL_CHOICES
from chaos.nemesis import NemesisSpec
from chaos.plugins import default_db
from chaos.runner.output import make_console
from chaos.runner.runner import AbortedBeforeStart, RunAborted, run_tests
from chaos.workloads import WORKLOADS


def _epilog() -> str:
    lines = ["\b", "DBs (--db NAME or module:attr; --db-opt KEY=VALUE, or --KEY VALUE):"]
    for name in plugins.names("db"):
        try:
            factory = dbmod.db_factory(name)
        except Exception as e:  # a broken plug-in must not break --help
            lines.append(f"  {name:<26} (cannot load: {e})")
            continue
        doc = (getattr(factory, "__doc__", None) or "").strip().splitlines()
        label = f"{name} (default)" if name == plugins.default_name("db") else name
        lines.append(f"  {label:<26} {getattr(factory, 'description', None) or (doc[0] if doc else '')}")
        for o in dbmod.db_options(factory):
            choices = f" ({'|'.join(map(str, o.choices))})" if o.choices else ""
            lines.append(f"    {o.name + choices:<36} {o.help}")
    lines += ["", "\b", "Workloads (--workload NAME or module:attr):"]
    lines += [f"  {k:<26} {v}" for k, v in WORKLOADS.items()]
    lines += [f"  {k:<26} (entry point)" for k in plugins.names("workload") if k not in WORKLOADS]
    lines += ["", "\b", "Nemeses (comma-separated, e.g. partition-ring,kill):"]
    lines += [f"  {k:<26} {v}" for k, v in nemesis.NEMESES.items()]
    lines += [
        "",
        "\b",
        "Exit status: 0 valid, 1 invalid, 2 unknown, 254 bad arguments, 255 crash; interrupted: 130 (SIGINT),",
        "143 (SIGTERM).",
    ]
    return "\n".join(lines)


class _RunCommand(click.Command):
    def format_epilog(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        try:
            text = _epilog()
        except Exception as e:  # a missing part must not break --help
            text = f"(workload/nemesis list unavailable: {e})"
        formatter.write_paragraph()
        for line in text.splitlines():
            if line != "\b":
                formatter.write(f"{'':>{formatter.current_indent}}{line}\n")


# the options of `chaos run`, in --help order
_RUN_OPTIONS = [
    click.option(
        "--db",
        default=default_db,
        show_default=False,
        help="The system under test: a DB name (see below; default: the one marked there) or "
        "module:attr of a DB factory.",
    ),
    click.option(
        "--db-opt",
        multiple=True,
        metavar="KEY=VALUE",
        help="An option of the DB (repeatable; see below); recorded in test.json as db_opts.",
    ),
    click.option(
        "--workload", "-w", default="register", show_default=True, help="Workload name (see below)."
    ),
    click.option(
        "--checker",
        "checkers",
        multiple=True,
        metavar="NAME",
        help="An extra checker (repeatable): module:attr of a checker factory or a chaos.checkers entry point.",
    ),
    click.option("--nemesis", default="none", show_default=True, help="Comma-separated nemeses, or none."),
    click.option(
        "--nemesis-interval", type=float, default=10.0, show_default=True, help="Mean s between faults."
    ),
    click.option(
        "--time-limit", type=float, default=60.0, show_default=True, help="Generator phase length (s)."
    ),
    click.option(
        "--concurrency", default="2n", show_default=True, help="Client threads: N, or Kn = K x nodes."
    ),
    click.option(
        "--rate", type=float, default=50.0, show_default=True, help="Client ops/s in total (0: no limit)."
    ),
    click.option(
        "--provider",
        default="docker",
        show_default=True,
        help="Where the nodes come from: docker (local containers), ssh (existing hosts) or a "
        "chaos.providers plug-in.",
    ),
    click.option(
        "--cluster-name",
        default="default",
        show_default=True,
        help="docker provider: the named cluster (chaos cluster up --cluster-name NAME), provisioned if missing.",
    ),
    click.option(
        "--node-count",
        type=int,
        default=None,
        help="Nodes of the docker cluster [default: the named cluster's, else 5].",
    ),
    click.option(
        "--nodes", default=None, help="ssh provider: comma-separated nodes (name=host[:port] or host)."
    ),
    click.option("--nodes-file", default=None, help="ssh provider: a file with one node per line."),
    click.option("--username", default="root", show_default=True, help="ssh provider: SSH user."),
    click.option("--ssh-private-key", default=None, help="ssh provider: private key file."),
    click.option(
        "--ssh-port", type=int, default=22, show_default=True, help="ssh provider: default SSH port."
    ),
    click.option(
        "--strict-host-key-checking/--no-strict-host-key-checking",
        default=None,
        help="ssh provider: require known host keys (default on; off for the local containers).",
    ),
    click.option(
        "--test-count", type=int, default=1, show_default=True, help="Run the test this many times."
    ),
    click.option("--store", default="store", show_default=True, help="Store directory for run directories."),
    click.option("--seed", type=int, default=None, help="Seed for generator and nemesis choices."),
    click.option("--leave-db-running", is_flag=True, help="Do not tear the DB down at the end."),
    click.option(
        "--break-lock",
        is_flag=True,
        help="Clear the cluster lock another run left (after a crash on another host) before taking it.",
    ),
    click.option(
        "--lock-wait",
        type=float,
        default=0.0,
        show_default=True,
        help="Seconds to wait for another run holding the cluster to end before refusing (a shared "
        "cluster); 0 refuses at once.",
    ),
    click.option(
        "--recovery-time",
        type=float,
        default=5.0,
        show_default=True,
        help="Seconds to wait for the cluster to recover after healing; a DB that declares a longer "
        "recovery bound (recovery_timeout) is waited for that long instead.",
    ),
    click.option("--per-key-limit", type=int, default=100, show_default=True, help="register: ops per key."),
    click.option(
        "--consistency-model",
        type=click.Choice(MODEL_CHOICES),
        default=None,
        help="list-append, rw-register: the model the elle checker checks; recorded in test.json. "
        "[default: strict-serializable]",
    ),
    click.option(
        "--nemesis-opt",
        multiple=True,
        metavar="KEY=VALUE",
        help="A nemesis option (repeatable), e.g. kill_targets=leader,minority or clock_max_rate=1.5; "
        "recorded in test.json as nemesis_opts.",
    ),
    click.option("--no-live", is_flag=True, help="Plain status lines every 10 s instead of the live view."),
]


def db_option_words(db: str | None, words: Sequence[str]) -> list[str]:
    """The words of a ``chaos run`` command line that are none of its own options, read as the
    chosen DB's options given as long options: ``["--read-mode", "lease", "--server-arg=--x"]`` ->
    ``["read-mode=lease", "server-arg=--x"]`` (``--db-opt`` items, in order). A DB option ``KEY``
    is ``--KEY VALUE`` or ``--KEY=VALUE`` as well as ``--db-opt KEY=VALUE``.

    Raises BadArguments (one line, as click words its own): a word that is no option of ``chaos
    run`` nor of the DB (with a "did you mean"), one without its value, a value the DB option
    refuses, a stray argument."""
    if not words:
        return []
    factory = dbmod.db_factory(db)
    declared = {o.name: o for o in dbmod.db_options(factory)}
    name = str(getattr(factory, "name", None) or getattr(factory, "__name__", db))
    items: list[str] = []
    rest = list(words)
    while rest:
        word = rest.pop(0)
        key, eq, value = word[2:].partition("=")
        if not word.startswith("--") or word == "--":
            raise BadArguments(f"Got unexpected extra argument ({word})")
        if key not in declared:
            known = [*(f"--{n}" for n in declared), *_own_flags()]
            raise BadArguments(f"No such option: --{key}{did_you_mean([f'--{key}'], known)}")
        if not eq:
            if not rest:
                raise BadArguments(f"Option '--{key}' requires an argument.")
            value = rest.pop(0)
        try:
            dbmod.parse_db_opts(factory, [f"{key}={value}"], name)
        except ValueError as e:
            why = str(e).partition(": ")[2]
            raise BadArguments(f"--{key} {value}: {why} (an option of the DB {name})") from None
        items.append(f"{key}={value}")
    return items


def _own_flags() -> list[str]:
    return [flag for option in run.params for flag in option.opts if flag.startswith("--")]


def run_options(params: Mapping[str, Any], words: Sequence[str] = ()) -> tuple[RunOptions, NemesisSpec]:
    """``chaos run``'s options, checked once and typed (:class:`RunOptions`, the one source of a
    run's options), and its ``--nemesis`` parsed once (:class:`chaos.nemesis.NemesisSpec`), from
    click's ``params`` and the ``words`` click left over (the DB's own options as long options,
    :func:`db_option_words`): ``db_opts`` (those first, then ``--db-opt``'s), ``checkers``, the
    ``--nemesis-opt`` keys parsed for the chosen nemeses (also under ``nemesis_opts``), numbers
    checked (:meth:`RunOptions.parse`) and the workload loaded. Everything ``chaos run`` refuses
    before it touches anything, and what ``chaos gate`` checks of its runs without starting them;
    BadArguments (one line) otherwise. ``--no-live`` is the command's, not the run's."""
    opts = {k: v for k, v in params.items() if k != "no_live"}
    try:
        opts["db_opts"] = [*db_option_words(opts.get("db"), words), *(opts.pop("db_opt", None) or ())]
        opts["checkers"] = list(opts.get("checkers") or ())
        spec = nemesis.NemesisSpec.parse(opts["nemesis"])
        nemesis_opts = nemesis.parse_nemesis_opts(
            opts.pop("nemesis_opt", None) or (), read=nemesis.selected_options(spec)
        )
        opts.update(nemesis_opts)  # build() reads them from the run's options
        opts["nemesis_opts"] = nemesis_opts
        options = RunOptions.parse(opts)
        plugins.workload_function(options.workload)
        if options.provider == "ssh" and not (opts.get("nodes") or opts.get("nodes_file")):
            raise ConfigError("--provider ssh needs --nodes or --nodes-file")
    except ValueError as e:  # ConfigError and bad --nemesis-opt items
        raise BadArguments(str(e)) from None
    return options, spec


def _run_options(fn: Any) -> Any:
    for option in reversed(_RUN_OPTIONS):
        fn = option(fn)
    return fn


@click.command(
    cls=_RunCommand,
    # a DB's own options as long options (--read-mode lease for --db-opt read-mode=lease): the
    # words click does not know are left to run_options, which knows the chosen DB
    context_settings={"ignore_unknown_options": True, "allow_extra_args": True},
)
@_run_options
def run(**kw: object) -> int:
    """Run a test: cluster, DB, workload, nemesis, check, report.

    Provisions (or reuses) the local Docker cluster, sets the DB up, runs the workload for
    --time-limit seconds while the nemesis injects faults, heals, runs the final phase, checks the
    history, writes the report under --store and exits with the verdict.
    """
    options, spec = run_options(kw, click.get_current_context().args)
    # --no-live: the live view's plain form, one status line every 10 s
    console = make_console(force_terminal=False if kw.get("no_live") else None)
    try:
        return run_tests(options, console=console, live=True, spec=spec)
    except (KeyboardInterrupt, RunAborted) as e:
        if not from_signal(e):
            raise  # plug-in code raised KeyboardInterrupt: chaos.cli names it and exits 255
        if isinstance(e, AbortedBeforeStart):
            console.print(f"aborted ({escape(str(e))}); nothing ran", highlight=False)
        else:
            console.print(f"aborted ({escape(str(e))}); faults healed, history kept", highlight=False)
        return EXIT_SIGTERM if str(e) == f"signal {int(signal.SIGTERM)}" else EXIT_SIGINT
    except ValueError as e:  # ConfigError and the providers' bad node entries
        raise BadArguments(str(e)) from None
    except RemoteError as e:  # raised before a run directory exists: nothing was written
        error_line(f"cannot reach the nodes: {e}")
        return EXIT_CRASH
