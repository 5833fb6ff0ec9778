"""The closing summary of a run on the terminal, the same for ``chaos run`` and ``chaos check``.

Jepsen's order (``jepsen.cli``'s test output): the tables first (ops by f and type with fails apart,
faults and leadership, anomalies, the report's path; :func:`chaos.history.report.summary.summary_table`),
then what liveness and the server logs found, then one line per checker with a few anomalies and
the first counterexample in a few lines (the op that cannot be placed, the state the longest
linearizable prefix leaves), and last the verdict. A history file without a run directory gets the
checker lines, the counterexample and the verdict only.
"""

from __future__ import annotations

import os
import re
import sys
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from chaos.errors import printable
from chaos.history.checkers import clienterrors
from chaos.history.checkers.nodelogs import INVALID, report_rows
from chaos.history.checkers.perf import ops_line
from chaos.history.op import Op
from chaos.history.report import faults as report_faults
from chaos.history.report.run import TYPE_ORDER, ReportError, pair_ops, read_history
from chaos.history.report.verdicts import checker_summaries
from chaos.history.verdict import verdict_word

if TYPE_CHECKING:
    from rich.table import Table

PIPE_WIDTH = 4096  # as the runner's console: a pipe gets whole lines, never folded


def _key_order(label: Any) -> tuple[int, float, str]:
    """Key labels in numeric order where they are numbers (``2`` before ``10``), then as text."""
    try:
        return (0, float(label), "")
    except (TypeError, ValueError):
        return (1, 0.0, str(label))


def _summary_line(name: str, r: dict[str, Any]) -> str:
    detail = r.get("error") or ""
    if not detail:
        if name == "linear":
            fails = r.get("failures") or []
            keys = r.get("keys") or {}
            if fails:
                more = f" and {len(fails) - 5} more" if len(fails) > 5 else ""
                detail = f"{len(fails)} not linearizable: key {', '.join(map(str, fails[:5]))}{more}"
                if r.get("not_checked"):
                    detail += f"; {len(r['not_checked'])} key(s) not checked (--fail-fast)"
            elif r.get("unknown"):
                unk = sorted(r["unknown"], key=_key_order)
                more = f" and {len(unk) - 5} more" if len(unk) > 5 else ""
                detail = f"undecided: {len(unk)} key{'s' if len(unk) != 1 else ''}: {', '.join(map(str, unk[:5]))}{more}"
            else:
                detail = f"{len(keys)} key(s), {r.get('ops', '?')} ops"
        elif name == "perf":
            detail = (r.get("availability") or {}).get("summary", "")
            if isinstance(r.get("ops"), dict):
                detail = f"{ops_line(r['ops'])}; {detail}"
        elif name == "stats":
            detail = f"{r.get('ok', 0)} ok, {r.get('fail', 0)} fail, {r.get('info', 0)} info"
        elif name == "elle":
            counts = r.get("counts") or {}
            found = ", ".join(f"{a} x{counts.get(a, '?')}" for a in r.get("anomaly_types") or [])
            detail = f"{r.get('consistency_model')}: " + (found or r.get("cause") or "no anomaly")
            if r.get("not"):
                detail += f"; not {', '.join(r['not'])}"
        elif name == "client-errors":
            detail = str(r.get("summary") or "")
        elif name in ("log", "set"):
            detail = f"{r.get('acknowledged', r.get('acknowledged_count', 0))} acknowledged, none lost"
    return f"  {name:<8} {verdict_word(r.get('valid')):<8} {detail}".rstrip()


def _examples(r: dict[str, Any], limit: int = 3) -> list[str]:
    """A few anomalies of a log/set result, each with the ops involved."""
    out = []
    for kind in ("lost", "duplicated", "unexpected", "reordered", "divergent"):
        for a in (r.get(kind) or [])[:limit]:
            if not isinstance(a, dict):
                continue
            if kind == "divergent":
                vals = ", ".join(f"{n}={v}" for n, v in (a.get("values") or {}).items())
                out.append(f"    divergent at index {a.get('index')}: {vals}")
                continue
            ops = [f"{k} op {a[k]}" for k in ("invoke", "complete") if k in a]
            where = f"found at {a['found']}" if a.get("found") else ""
            why = a.get("reason", "")
            bits = ", ".join(x for x in (*ops, where, why) if x)
            out.append(f"    {kind} {a.get('value')!r}" + (f" ({bits})" if bits else ""))
    return out


def _first_explanation(r: dict[str, Any]) -> list[str]:
    """The first anomaly of an invalid elle result, as Elle explains it: the cycle's steps."""
    for kind, cases in (r.get("anomalies") or {}).items():
        for case in cases or []:
            if isinstance(case, dict) and case.get("explanation"):
                return [f"    {kind}: " + "\n      ".join(str(case["explanation"]).splitlines())]
    return []


def _arg(v: object) -> str:
    return "nil" if v is None else str(v) if isinstance(v, int | str) else repr(v)


def describe_call(op: dict[str, object]) -> str:
    """``read() -> 1``, ``write(2)``, ``cas(1, 3) -> false``: a counterexample op (docs/design.md
    shape: ``f``, ``value``, ``output``, ``type``)."""
    f, value, out, typ = op.get("f"), op.get("value"), op.get("output"), op.get("type")
    if f in ("read", "get", "delete"):
        args = ""
    elif f == "cas" and isinstance(value, list) and len(value) == 2:
        args = f"{_arg(value[0])}, {_arg(value[1])}"
    else:
        args = _arg(value)
    text = f"{f}({args})"
    if typ == "info":
        return text + " -> ?"
    if f in ("read", "get") or (out is not None and out is not True):
        text += f" -> {_arg(out)}"
    return text


def counterexamples(results: dict[str, Any] | None) -> list[dict[str, object]]:
    """The counterexample of each invalid key of the linearizability checker (docs/design.md):
    ``{"key", "model", "ce"}``, the failing keys in the checker's order first. Here rather than
    in the report, so printing a check's summary never imports the report (jinja2)."""
    linear = ((results or {}).get("checkers") or {}).get("linear") or {}
    keys = linear.get("keys") or {}
    if not isinstance(keys, dict):
        return []
    failures = [str(k) for k in (linear.get("failures") or [])]
    order = failures + sorted((k for k in keys if k not in failures), key=str)
    out = []
    for key in order:
        r = keys.get(key)
        if not isinstance(r, dict) or r.get("valid") is not False:
            continue
        ce = r.get("counterexample")
        out.append({"key": key, "model": linear.get("model"), "ce": ce if isinstance(ce, dict) else None})
    return out


def counterexample_lines(results: dict[str, Any], prefix_shown: int = 3) -> list[str]:
    """The first counterexample of the ``linear`` checker in a few lines: the key, the longest
    linearizable prefix (its last ``prefix_shown`` ops) and the state it leaves, and the op that
    cannot be placed. Empty when there is none."""
    linear = (results.get("checkers") or {}).get("linear") or {}
    keys = linear.get("keys") if isinstance(linear, dict) else None
    if not isinstance(keys, dict) or not any(
        isinstance(r, dict) and r.get("valid") is False for r in keys.values()
    ):
        return []  # no invalid key, no counterexample
    for item in counterexamples(results):
        ce = item.get("ce")
        if not isinstance(ce, dict) or not isinstance(ce.get("ops"), list):
            continue
        by_id = {o.get("id"): o for o in ce["ops"] if isinstance(o, dict)}
        prefix = [by_id[i] for i in ce.get("prefix") or [] if i in by_id]
        model = f" (model {item['model']})" if item.get("model") else ""
        out = [f"first counterexample: key {item['key']}{model}, {len(ce['ops'])} ops"]
        shown = ", ".join(
            f"{describe_call(o)} p{o.get('process')} #{o.get('index')}" for o in prefix[-prefix_shown:]
        )
        more = "..., " if len(prefix) > prefix_shown else ""
        state = ce.get("failing_state")
        out.append(
            f"  linearizable prefix ({len(prefix)} ops): {more}{shown or 'empty'}"
            + (f"; state after it: {state}" if state is not None else "")
        )
        bad = by_id.get(ce.get("failing"))
        if bad is not None:
            call, ret = bad.get("call"), bad.get("return")
            span = (
                f", {call / 1e9:.3f}-{'?' if ret is None else f'{ret / 1e9:.3f}'} s"
                if isinstance(call, int | float)
                else ""
            )
            out.append(
                f"  cannot be placed: {describe_call(bad)}, process {bad.get('process')}, op "
                f"#{bad.get('index')}{span}: no legal step from state {state}"
            )
        if isinstance(ce.get("why"), str):
            out.append(f"  why: {ce['why']}")
        return out
    return []


def closing_lines(results: dict[str, object], where: str, notes: list[str] | None = None) -> list[str]:
    """One line per checker (a few anomalies under an invalid log/set check, Elle's first
    explanation), the first counterexample, what made the run unknown when client code crashed,
    ``notes`` (e.g. deprecations), and last the verdict line ``VERDICT: where``."""
    out: list[str] = []
    checkers = results.get("checkers")
    if isinstance(checkers, dict):
        for name, r in checkers.items():
            if isinstance(r, dict):
                out.append(_summary_line(name, r))
                if r.get("valid") is False:
                    out += _examples(r)
                    if name == "elle":
                        out += _first_explanation(r)
    out += counterexample_lines(results)
    crashed = (checkers or {}).get("client-errors") if isinstance(checkers, dict) else None
    if isinstance(crashed, dict) and crashed.get("cause"):
        out.append(f"cause: {crashed['cause']}")
    out += list(notes or ())
    out.append(f"{verdict_word(results.get('valid'))}: {where}")
    return out


def console(file: Any = None) -> Any:
    """A rich Console as ``chaos run``'s: a terminal's width, or whole lines on a pipe."""
    from rich.console import Console

    out = file if file is not None else sys.stdout
    isatty = getattr(out, "isatty", None)
    if callable(isatty) and isatty():
        return Console(file=file)
    return Console(file=file, width=PIPE_WIDTH, soft_wrap=True)


def escape(text: str) -> str:
    """``text`` with rich markup escaped (rich's own ``escape``, imported when first needed)."""
    from rich.markup import escape as rich_escape

    return rich_escape(text)


def print_findings(con: Any, results: dict[str, Any]) -> None:
    """What liveness and the server logs found, with the lines quoted."""

    checkers = results.get("checkers") or {}
    live = checkers.get("liveness")
    if isinstance(live, dict) and live.get("valid") is False:
        con.print(
            f"[red]liveness failure:[/red] {escape(printable(str(live.get('cause'))))}", highlight=False
        )
    for row in report_rows(results, first=3):
        style = "red" if row["severity"] == INVALID else "yellow"
        by_node = ", ".join(f"{n} {c}" for n, c in sorted(row["by_node"].items()))
        con.print(
            f"[{style}]server log {escape(row['kind'])}[/{style}] ({row['severity']}): "
            + escape(printable(f"{row['count']} line(s) [{by_node}] - {row['description']}")),
            highlight=False,
        )
        for ln in row["lines"]:
            con.print(printable(f"  {ln['file']}:{ln['line']}: {ln['text']}"), highlight=False, markup=False)


_STYLE = {"valid": "bold green", "INVALID": "bold red", "unknown": "bold yellow"}


def print_run_summary(
    con: Any,
    results: dict[str, object],
    history_path: Any,
    where: str,
    notes: list[str] | None = None,
    history: Sequence[Op] | None = None,
) -> None:
    """The whole closing summary of a run on ``con`` (module docstring); ``history_path`` None for
    a history file without a run directory (no tables then); ``notes``: lines printed before the
    verdict (the run's deprecation warnings); ``history``: the run's ops as the checkers read them
    (else the file is read)."""
    if history_path is not None:
        # a valid run fits a terminal: the tables (ops by f, fault windows, leadership) are in the
        # report, the checkers' lines say the rest (issue 35 item 8)
        table = summary_table(
            results, history_path, checkers_table=False, compact=results.get("valid") is True, history=history
        )
        if con.is_terminal:
            con.print(table)
        else:  # a pipe: no padding to the widest row at the end of each line
            with con.capture() as cap:
                con.print(table)
            text = "\n".join(line.rstrip() for line in cap.get().splitlines())
            con.print(printable(text, keep="\n"), markup=False, highlight=False)
        print_findings(con, results)
    lines = closing_lines(results, where, notes)
    for line in lines[:-1]:
        con.print(printable(line, keep="\n"), markup=False, highlight=False)
    word = verdict_word(results.get("valid"))
    # one logical line, never broken by rich (a long path wraps on the terminal, not in the text)
    con.print(
        f"[{_STYLE[word]}]{word}[/{_STYLE[word]}]: {escape(printable(where))}",
        highlight=False,
        soft_wrap=True,
    )


# what rich would change in a line printed without markup on a pipe: an emoji code (``:name:``)
_RICH_CHANGES = re.compile(r":\S*?:")
# settings under which rich styles, or lays out, what it writes to a pipe
_RICH_ENV = (
    "FORCE_COLOR",
    "TTY_COMPATIBLE",
    "TTY_INTERACTIVE",
    "JUPYTER_COLUMNS",
    "DATABRICKS_RUNTIME_VERSION",
)


def _plain_lines(results: dict[str, object], where: str, notes: list[str] | None = None) -> list[str] | None:
    """The closing lines of a history file's check as rich would write them to a pipe, when
    plain text is exactly that (stdout not a terminal, nothing that makes rich style a pipe, no
    emoji code), so the common case is printed without importing rich; else None."""
    isatty = getattr(sys.stdout, "isatty", None)
    if not callable(isatty) or isatty() or any(os.environ.get(k) for k in _RICH_ENV):
        return None
    lines = [printable(line, keep="\n") for line in closing_lines(results, where, notes)[:-1]]
    lines.append(f"{verdict_word(results.get('valid'))}: {printable(where)}")
    if any(_RICH_CHANGES.search(line) for line in lines):
        return None
    return lines


def print_summary(
    results: dict[str, object],
    where: str,
    history_path: Any = None,
    notes: list[str] | None = None,
    history: Sequence[Op] | None = None,
) -> None:
    """``chaos check``'s output on stdout: :func:`print_run_summary` (for a history file on a
    pipe, the same text written without rich); ``notes`` are printed before the verdict line;
    ``history``: the run's ops as the checkers read them."""
    plain = None if history_path else _plain_lines(results, where, notes)
    if plain is not None:
        sys.stdout.write("".join(line + "\n" for line in plain))
        return
    hp = Path(history_path) if history_path else None
    print_run_summary(console(), results, hp, where, notes, history)


# --------------------------------------------------------------------------------------------
# the closing summary's tables

_VERDICT_STYLE = {"valid": "bold green", "invalid": "bold red", "unknown": "bold yellow"}


def _ops_by_f(
    results: dict[str, Any] | None, hp: Path, history: Sequence[Op] | None = None
) -> tuple[dict[str, dict[str, int]], int]:
    """Per f, the counts of ok / fail / info and of the fails that were no match or aborted (from
    the history: ``history``, else the file ``hp``; else the stats checker's ``by_f``); and how
    many faults were requested."""
    by_f: dict[str, dict[str, int]] = defaultdict(
        lambda: {"ok": 0, "fail": 0, "info": 0, "no_match": 0, "aborted": 0}
    )
    nemesis_ops = 0
    if history is None:
        try:
            read, _ = read_history(hp)
        except ReportError:
            read = None
        history = read.ops if read is not None else []
    if history:
        pairs, nem, _end = pair_ops(history)
        for m in range(len(pairs.p)):
            counts = by_f[pairs.fs[pairs.f[m]]]
            counts[TYPE_ORDER[pairs.t[m]]] += 1
            counts["no_match"] += pairs.nm[m]
            counts["aborted"] += pairs.ab[m]
        nemesis_ops = sum(1 for d in nem if d.f.startswith("start-"))
    else:
        stats = ((results or {}).get("checkers") or {}).get("stats") or {}
        for f, c in (stats.get("by_f") or {}).items():
            if isinstance(c, dict):
                for t in TYPE_ORDER:
                    by_f[str(f)][t] = int(c.get(t, 0) or 0)
    return by_f, nemesis_ops


def _ops_table(by_f: dict[str, dict[str, int]]) -> Table:
    """The "ops by f and type" table, fails apart, with a total row."""
    from rich.table import Table  # rich only when a table is drawn (start-up of a plain check)
    from rich.text import Text

    ops = Table(title="ops by f and type", title_justify="left", expand=False)
    ops.add_column("f")
    ops.add_column("ok", justify="right", style="green")
    ops.add_column("fail: no match", justify="right", style="magenta")
    aborted = any(c.get("aborted") for c in by_f.values())
    if aborted:  # a definite failure the system chose (chaos.api.Aborted), not an outage
        ops.add_column("fail: aborted", justify="right", style="magenta")
    ops.add_column("fail: unavailable", justify="right", style="red")
    ops.add_column("info", justify="right", style="yellow")
    tot = {"ok": 0, "fail": 0, "info": 0, "no_match": 0, "aborted": 0}
    for f in sorted(by_f):
        ops.add_row(f, *_op_cells(by_f[f], aborted), end_section=f == max(by_f))
        for t in tot:
            tot[t] += by_f[f].get(t, 0)
    ops.add_row(Text("total", style="bold"), *_op_cells(tot, aborted))
    return ops


def summary_table(
    results: dict[str, object] | None,
    history_path: str | os.PathLike[str],
    checkers_table: bool = True,
    compact: bool = False,
    history: Sequence[Op] | None = None,
) -> Table:
    """The closing summary's tables: ops by f and type (fails apart), checker verdicts (unless
    ``checkers_table`` is false: :mod:`chaos.history.report.summary` gives one line per checker after
    the tables instead), faults and leadership, anomalies, the report's path. The verdict comes
    last, after these (:func:`chaos.history.report.summary.print_run_summary`).

    ``results`` is the results.json dict (None if the checkers did not run); ``history_path`` is the
    run's history.jsonl, whose directory holds ``index.html``. Counts come from the history (the
    stats checker's ``by_f`` when the history cannot be read). ``compact`` (a valid run): no ops
    table and no fault tables, which the report holds; client errors, the faults' caption and the
    report's path stay. ``history``: the run's ops as the checkers read them (else the file is read).
    """
    from rich.table import Table  # rich only when a table is drawn (start-up of a plain check)
    from rich.text import Text

    hp = Path(history_path)
    by_f, nemesis_ops = _ops_by_f(results, hp, history)
    outer = Table.grid(padding=(0, 0))
    outer.add_column()
    outer.add_row(
        Text(
            "Run summary" + (" (ops by f, fault windows and leadership: in the report)" if compact else ""),
            style="bold",
        )
    )
    ops = _ops_table(by_f)

    fault_caption = report_faults.caption(results)  # took effect, not merely requested
    if fault_caption is None and nemesis_ops:
        ops.caption = f"{nemesis_ops} nemesis fault{'s' if nemesis_ops != 1 else ''} requested"
        ops.caption_justify = "left"
    if not compact:
        outer.add_row(ops)
    elif ops.caption:
        outer.add_row(Text(str(ops.caption)))
    crashed = client_errors_row(results)
    if crashed is not None:
        outer.add_row(Text(f"client errors: {crashed}", style="bold yellow"))
    if fault_caption is not None and nemesis_ops:
        outer.add_row(Text(fault_caption))
    checkers = checker_summaries(results)
    chk = Table(title="checkers", title_justify="left", expand=False)
    chk.add_column("checker")
    chk.add_column("verdict")
    chk.add_column("details", overflow="fold")
    for c in checkers:
        chk.add_row(
            Text(c["name"]), Text(c["verdict"], style=_VERDICT_STYLE[c["verdict"]]), Text(c["summary"])
        )
    if not checkers:
        chk.add_row("none", Text("unknown", style=_VERDICT_STYLE["unknown"]), "results.json missing")
    if checkers_table or not checkers:
        outer.add_row(chk)
    for part in [] if compact else report_faults.summary_tables(results):
        outer.add_row(part)
    anomalies = _anomaly_counts(results)
    if anomalies:
        an = Table(title="anomalies", title_justify="left", expand=False)
        an.add_column("anomaly")
        an.add_column("count", justify="right", style="red")
        for k, v in anomalies.items():
            an.add_row(k, str(v))
        outer.add_row(an)
    report = hp.parent / "index.html"
    outer.add_row(
        Text.assemble(
            "report: ", (str(report), "bold cyan") if report.exists() else (f"{report} (not written)", "dim")
        )
    )
    return outer


def _op_cells(c: dict[str, int], aborted: bool = False) -> list[str]:
    """ok, fail that was an answered no, (fail the system aborted,) fail that was the DB not
    serving, info."""
    ab = int(c.get("aborted", 0))
    mid = [str(ab)] if aborted else []
    return [str(c["ok"]), str(c["no_match"]), *mid, str(c["fail"] - c["no_match"] - ab), str(c["info"])]


def client_errors_row(results: dict[str, Any] | None) -> str | None:
    """The "client errors" row (``ValueError: ... at etcd_db.py:42, 1,499 of 1,499 ops``) of a
    run whose client code crashed, else None (:func:`chaos.history.checkers.clienterrors.row`)."""

    return clienterrors.row(((results or {}).get("checkers") or {}).get(clienterrors.NAME))


def _anomaly_counts(results: dict[str, Any] | None) -> dict[str, int]:
    out: dict[str, int] = {}
    checkers = (results or {}).get("checkers") or {}
    lin = checkers.get("linear")
    if isinstance(lin, dict) and isinstance(lin.get("failures"), list) and lin["failures"]:
        out["non-linearizable keys"] = len(lin["failures"])
    log = checkers.get("log")
    if isinstance(log, dict):
        for k in ("lost", "duplicated", "unexpected", "reordered", "divergent"):
            if isinstance(log.get(f"{k}_count"), int) and log[f"{k}_count"]:
                out[k] = log[f"{k}_count"]
            elif isinstance(log.get(k), list) and log[k]:
                out[k] = len(log[k])
    return out
