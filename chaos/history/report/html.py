"""The run's HTML report (``index.html``), ``chaos report``, and the terminal closing summary.

A report is one self-contained HTML file written into the run directory (see docs/design.md, "Run
directory"): styles, scripts (plotly.js from the installed ``plotly`` package) and the data are all
inlined, so it opens from disk without network. It follows what Jepsen's checkers draw
(``jepsen.checker.perf``: latency-raw and rate plots with nemesis windows shaded;
``jepsen.checker.timeline``: one lane per process) and porcupine's visualizer for counterexamples
(one row per process, ops as boxes, the longest linearizable prefix, the op that cannot be placed).

Every history value reaches the page only through one ``<script type="application/json">`` block
whose ``<``, ``>`` and ``&`` are escaped as ``\\u003c`` etc.; the page's script sets text with
``textContent`` only, so a value such as ``<script>`` shows as text.

The data sent to the browser is prepared here: ops are paired (invoke with completion) and stored
column-wise, latency points are downsampled per (f, type) trace to keep the page fast for 100,000-op
histories, rates are bucketed. The history is read, paired and cut into fault windows by the one
analysis core (:mod:`chaos.history.analysis`); verdicts and availability come from ``results.json``
only, never recomputed here.
"""

from __future__ import annotations

import datetime as _dt
import json
import logging
import os
import urllib.parse
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import click
import jinja2

from chaos.errors import BadArguments
from chaos.history.analysis import fault_names, run_config
from chaos.history.checkers.nodelogs import report_rows
from chaos.history.report import faults as report_faults
from chaos.history.report import jepsen as report_jepsen
from chaos.history.report import plots
from chaos.history.report import txn as report_txn
from chaos.history.report.figures import (
    _ptext,
    availability_windows,
    log_anomaly_rows,
    nemesis_colours,
    nemesis_windows,
    perf_figures,
)
from chaos.history.report.run import (
    TYPE_COLOURS,
    TYPE_ORDER,
    NemesisOp,
    Paired,
    ReportError,
    Run,
    _list_files,
    _short,
    load_run,
    pair_ops,
)
from chaos.history.report.summary import counterexamples
from chaos.history.report.verdicts import _verdict, checker_summaries, counterexample_note
from chaos.history.store import ParsedHistory, find_run

TEMPLATES = Path(__file__).resolve().parent / "templates"


def _fmt_duration(ns: float) -> str:
    s = ns / 1e9
    if s < 60:
        return f"{s:.1f} s"
    m, s = divmod(int(s), 60)
    h, m = divmod(m, 60)
    return f"{h}h{m:02d}m{s:02d}s" if h else f"{m}m{s:02d}s"


def _fmt_start(v: object) -> str:
    """Wall-clock start: a unix timestamp (s) as UTC ISO text; anything else as given."""
    if isinstance(v, int | float) and not isinstance(v, bool) and 1e8 < v < 1e11:
        return _dt.datetime.fromtimestamp(v, _dt.UTC).strftime("%Y-%m-%d %H:%M:%S.%f")[:-3] + " UTC"
    return str(v)


def _meta(run: Run, end_ns: int, n_client: int) -> dict[str, object]:
    t = run.test
    name = t.get("name") or run.path.parent.name
    nodes = t.get("nodes") or []
    node_names = (
        [n.get("name", str(n)) if isinstance(n, dict) else str(n) for n in nodes]
        if isinstance(nodes, list)
        else []
    )
    nem = t.get("nemesis", t.get("nemeses"))
    if isinstance(nem, list):
        nem = ", ".join(str(x) for x in nem) or "none"
    opts = t.get("opts") if isinstance(t.get("opts"), dict) else None
    options = {k: _short(v, 300) for k, v in (opts or t).items() if k not in ("nodes", "versions")}
    versions = t.get("versions")
    dur = t.get("duration_ns") or t.get("duration")
    if isinstance(dur, int | float) and not t.get("duration_ns") and dur < 1e6:
        dur = dur * 1e9  # seconds
    return {
        "name": str(name),
        "run": run.path.name,
        "workload": str(t.get("workload") or (opts or {}).get("workload") or "?"),
        "nemesis": str(nem if nem is not None else (opts or {}).get("nemesis") or "none"),
        "nodes": node_names,
        "versions": versions if isinstance(versions, dict) else ({"": versions} if versions else {}),
        "seed": t.get("seed", (opts or {}).get("seed")),
        "start": _fmt_start(t.get("start_time") or t.get("start") or run.path.name),
        "duration": _fmt_duration(float(dur) if isinstance(dur, int | float) else end_ns),
        "ops": len(run.history),
        "client_ops": n_client,
        "options": options,
        "skipped_lines": run.skipped_lines,
        # the DB and nemesis options given (read mode, targets...): what tells apart runs of the
        # same workload and nemesis (issue 35 item 10)
        "run_options": run_config(t),
    }


@dataclass
class Laid:
    """A run's ops laid out once for the page and the PNGs: the pairs (:func:`pair_ops`), the
    nemesis pairs, the end time (ns) and the fault windows."""

    pairs: Paired
    nemesis: list[NemesisOp]
    end: int
    windows: list[dict[str, Any]]

    @classmethod
    def of(cls, run: Run) -> Laid:
        pairs, nem, end = pair_ops(run.history)
        wins = nemesis_windows(run.history, end, nemesis_colours(run.test), fault_names(run.test))
        return cls(pairs, nem, end, wins)


def build_data(run: Run, laid: Laid | None = None) -> dict[str, Any]:
    """Everything the page draws, as one JSON-ready dict (see templates/report.js for its use);
    ``laid``: the run's ops already laid out (:class:`Laid`), else laid out here."""
    laid = laid or Laid.of(run)
    pairs, nem, end, wins = laid.pairs, laid.nemesis, laid.end, laid.windows
    figs = perf_figures(pairs, end)
    rate, quant = plots.rate_series(pairs, end), plots.quantile_series(pairs, end)
    avail, avail_src = availability_windows(run.results, pairs, wins, end)
    verdict = _verdict((run.results or {}).get("valid")) if run.results is not None else "unknown"
    return {
        "verdict": verdict,
        "has_results": run.results is not None,
        "checkers": checker_summaries(run.results),
        "meta": _meta(run, end, len(pairs.p)),
        "end_us": end // 1000,
        "procs": pairs.procs,
        "fs": pairs.fs,
        "types": list(TYPE_ORDER),
        "type_colours": TYPE_COLOURS,
        "ops": {
            "p": pairs.p,
            "f": pairs.f,
            "t": pairs.t,
            "s": pairs.s,
            "e": pairs.e,
            "i": pairs.i,
            "j": pairs.j,
            "v": pairs.v,
            "k": pairs.k,
            "n": pairs.n,
            "err": pairs.err,
        },
        "nemesis": [
            {
                "kind": w["name"],  # the page's lanes and legend: the faults as the user typed them
                "label": w["label"],
                "plot_label": _ptext(w["label"]),
                "start_s": w["start"] / 1e9,
                "end_s": w["end"] / 1e9,
                "open": w["open"],
                "detail": w["detail"],
                "result": w["result"],
                "colour": w["colour"],
            }
            for w in wins
        ],
        "nemesis_ops": [
            {
                "f": d.f,
                "start_s": d.start / 1e9,
                "end_s": (d.end if d.end is not None else d.start) / 1e9,
                "value": _short(d.value, 300),
                "result": _short(d.result, 300),
                "i": d.i,
            }
            for d in nem
        ],
        "latency": figs["latency"],
        "rate": plots.rate_traces(rate),
        "rate_bucket_s": rate["bucket_s"],
        "quantiles": plots.quantile_traces(quant),
        "quantile_bucket_s": quant["bucket_s"],
        "lat_dtick": figs["lat_dtick"],
        "availability": [
            {
                "start_s": w["start"] / 1e9,
                "end_s": w["end"] / 1e9,
                "f": w.get("f"),
                "faults": w["faults"],
                "counts": w["counts"],
                "note": w["note"],
            }
            for w in avail
        ],
        "availability_source": avail_src,
        "counterexamples": counterexamples(run.results),
        "counterexample_note": counterexample_note(run.results),
        "log_rows": log_anomaly_rows(run.results, run.history),
        "files": run.files,
    }


def json_for_script(data: object) -> str:
    """JSON safe inside ``<script type="application/json">``: ``<``, ``>``, ``&``, U+2028/9 escaped."""
    s = json.dumps(data, separators=(",", ":"), default=str, ensure_ascii=False, allow_nan=False)
    return (
        s.replace("&", "\\u0026")
        .replace("<", "\\u003c")
        .replace(">", "\\u003e")
        .replace("\u2028", "\\u2028")
        .replace("\u2029", "\\u2029")
    )


def _inline_js(text: str) -> str:
    # A literal "</script" inside inlined code would end the element early.
    return text.replace("</script", "<\\/script")


def _plotly_js() -> str:
    import plotly

    path = Path(plotly.__file__).resolve().parent / "package_data" / "plotly.min.js"
    try:
        return path.read_text(encoding="utf-8")
    except OSError as e:
        raise ReportError(f"plotly.js {path}: expected the installed plotly package's bundle ({e})") from e


def render_html(run: Run, laid: Laid | None = None) -> str:
    """The report page as a string (see ``write_report``)."""
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(TEMPLATES)),
        autoescape=jinja2.select_autoescape(["html"], default=True),
        undefined=jinja2.StrictUndefined,
    )
    data = build_data(run, laid)
    tpl = env.get_template("report.html")
    return tpl.render(
        title=f"{data['meta']['name']} {data['meta']['run']}: {data['verdict']}",
        verdict=data["verdict"],
        meta=data["meta"],
        checkers=data["checkers"],
        data_json=jinja2.utils.markupsafe.Markup(json_for_script(data)),
        css=jinja2.utils.markupsafe.Markup((TEMPLATES / "report.css").read_text(encoding="utf-8")),
        report_js=jinja2.utils.markupsafe.Markup(
            _inline_js((TEMPLATES / "report.js").read_text(encoding="utf-8"))
        ),
        plotly_js=jinja2.utils.markupsafe.Markup(_inline_js(_plotly_js())),
        generated=_dt.datetime.now(_dt.UTC).strftime("%Y-%m-%d %H:%M:%S UTC"),
        data_files=[(urllib.parse.quote(f), f) for f in run.files],
        server_log_rows=_server_log_rows(run.results),
        # transactions: the anomaly counts in the banner, each anomaly's cycle drawn (Elle results)
        txn_band=jinja2.utils.markupsafe.Markup(report_txn.anomaly_band_html(run.results)),
        txn_section=jinja2.utils.markupsafe.Markup(
            report_txn.txn_section_html(run.results) + report_jepsen.sections_html(run.results)
        ),
        **_fault_sections(run.results),
    )


def _fault_sections(results: dict[str, object] | None) -> dict[str, object]:
    # the "faults" section (chaos.history.report.faults): per kind, per window with leadership
    r = report_faults.faults_result(results)
    return {
        "fault_kinds": report_faults.kind_rows(results),
        "fault_windows": report_faults.window_rows(results),
        "fault_summary": (r or {}).get("summary") or "",
        "split_brain": list(((r or {}).get("leadership") or {}).get("split_brain") or []),
    }


def _server_log_rows(results: dict[str, object] | None) -> list[dict[str, object]]:
    # the "server log anomalies" section (chaos.history.checkers.nodelogs), with a link to each quoted log
    rows = report_rows(results)
    for row in rows:
        for ln in row["lines"]:
            ln["href"] = urllib.parse.quote(str(ln.get("file", "")))
    return rows


def write_plot_pngs(run: Run, laid: Laid | None = None) -> list[Path]:
    """``latency-raw.png``, ``latency-quantiles.png`` and ``rate.png`` in the run directory
    (:func:`chaos.history.report.plots.write_pngs`); none when matplotlib is not installed (logged)."""
    laid = laid or Laid.of(run)
    try:
        return plots.write_pngs(run.path, laid.pairs, laid.windows, laid.end)
    except ImportError as e:
        logging.getLogger("chaos.report").warning("no PNG plots (matplotlib: %s)", e)
        return []


def write_report(run_dir: str | os.PathLike[str], history: ParsedHistory | None = None) -> Path:
    """Write ``index.html`` into ``run_dir`` and return its path.

    Reads ``test.json`` and ``results.json``, and ``history.jsonl`` unless ``history`` is the run's
    history as the checkers already read it (docs/design.md); lays the ops out once for the page
    and the PNG plots beside it (:func:`write_plot_pngs`). A missing results.json gives an
    "unknown" banner (checkers not run). Writes atomically (temp file, rename).
    Raises ReportError for a missing directory or unreadable files.
    """
    run = load_run(run_dir, history)
    laid = Laid.of(run)
    write_plot_pngs(run, laid)
    run.files = _list_files(run.path)
    html = render_html(run, laid)
    out = run.path / "index.html"
    tmp = run.path / ".index.html.tmp"
    tmp.write_text(html, encoding="utf-8")
    os.replace(tmp, out)
    return out


# --------------------------------------------------------------------------------------------
# chaos report


@click.command(name="report")
@click.argument(
    "run_dir", type=click.Path(file_okay=False, path_type=Path), required=False, default=Path("store/latest")
)
def report(run_dir: Path) -> int:
    """Write RUN_DIR/index.html (default store/latest; a store root means its latest run), the
    run's HTML report, and print its path."""
    try:
        if (
            run_dir.is_dir()
            and not (run_dir / "history.jsonl").exists()
            and not (run_dir / "test.json").exists()
        ):
            run_dir = Path(find_run(run_dir).path)
        out = write_report(run_dir)
    except (ReportError, FileNotFoundError) as e:
        raise BadArguments(str(e)) from e
    click.echo(str(out))
    return 0
