"""``chaos serve``: browse the store's runs over HTTP (Jepsen's ``jepsen.web``, without the JVM).

Routes (all GET):

- ``/`` lists runs newest first: verdict colour, test name, workload, nemeses, duration, op counts by
  type, links to the report, the files and a zip download.
- ``/runs/<test>/<run>/`` the run's ``index.html``; written on first request if the run has none.
- ``/runs/<test>/<run>/<file>`` any file of the run; logs and histories are sent as ``text/plain``
  so that HTML inside them is never rendered.
- ``/zip/<test>/<run>.zip`` the whole run directory as a zip archive, streamed.

Paths are resolved and must stay inside the store (no ``..``, no symlinks out). Binds to 127.0.0.1
unless ``--host`` says otherwise. Standard library only (``http.server.ThreadingHTTPServer``).
"""

from __future__ import annotations

import html
import json
import mimetypes
import os
import threading
import urllib.parse
import zipfile
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import IO, Any, cast

import click

from chaos.history import report as _report
from chaos.history.analysis import HistoryError, read_history
from chaos.history.op import NEMESIS

VERDICT_COLOURS = {"valid": "#1a9850", "invalid": "#d7191c", "unknown": "#f08c00", "incomplete": "#9ca3af"}
_TEXT_SUFFIXES = {".jsonl", ".log", ".txt", ".edn", ".out", ".err", ".json", ".csv", ".yaml", ".yml", ".conf"}
MAX_LISTED = 1000


@dataclass
class RunSummary:
    """One row of the run list; ``ops`` counts history lines by type (invoke/ok/fail/info)."""

    test: str
    run: str
    path: Path
    verdict: str
    workload: str
    nemesis: str
    duration_s: float | None
    ops: dict[str, int]
    has_report: bool


_cache: dict[Path, tuple[tuple[float, float, float], RunSummary]] = {}
_cache_lock = threading.Lock()


def _mtime(p: Path) -> float:
    try:
        return p.stat().st_mtime
    except OSError:
        return 0.0


def _is_run_dir(p: Path) -> bool:
    return (
        p.is_dir()
        and not p.is_symlink()
        and any((p / n).exists() for n in ("history.jsonl", "test.json", "results.json"))
    )


def find_runs(store: Path) -> list[Path]:
    """Run directories ``store/<test>/<run>/``, newest first (run names are timestamps); symlinks skipped."""
    runs: list[Path] = []
    if not store.is_dir():
        return runs
    for test in store.iterdir():
        if test.is_symlink() or not test.is_dir():
            continue
        for run in test.iterdir():
            if _is_run_dir(run):
                runs.append(run)
    runs.sort(key=lambda r: (r.name, r.parent.name), reverse=True)
    return runs


def _count_types(path: Path) -> tuple[dict[str, int], float | None]:
    """Client ops by type and the last op's time (s), read with the validating reader every command
    uses (:func:`chaos.history.analysis.read_history`); a malformed history counts up to its bad
    line (the run's own page names it)."""
    counts = {"invoke": 0, "ok": 0, "fail": 0, "info": 0}
    last_time: float | None = None
    try:
        for op in read_history(path):
            last_time = op.time / 1e9
            if op.process != NEMESIS and op.type in counts:
                counts[op.type] += 1
    except (OSError, HistoryError):
        pass
    return counts, last_time


def summarize(run: Path) -> RunSummary:
    """The list row for one run (cached until its history, results or test file changes)."""
    key = (_mtime(run / "history.jsonl"), _mtime(run / "results.json"), _mtime(run / "test.json"))
    with _cache_lock:
        hit = _cache.get(run)
        if hit and hit[0] == key:
            hit[1].has_report = (run / "index.html").exists()
            return hit[1]
    test: dict[str, Any] = {}
    results: Any = None
    try:
        t = json.loads((run / "test.json").read_text(encoding="utf-8"))
        test = t if isinstance(t, dict) else {}
    except (OSError, ValueError):
        pass
    try:
        results = json.loads((run / "results.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        results = None
    if isinstance(results, dict):
        v = results.get("valid")
        verdict = "valid" if v is True else "invalid" if v is False else "unknown"
    else:
        verdict = "incomplete"
    ops, last = _count_types(run / "history.jsonl")
    nem = test.get("nemesis", test.get("nemeses"))
    if isinstance(nem, list):
        nem = ", ".join(str(x) for x in nem)
    dur = test.get("duration_ns")
    duration = dur / 1e9 if isinstance(dur, int | float) else last
    s = RunSummary(
        test=run.parent.name,
        run=run.name,
        path=run,
        verdict=verdict,
        workload=str(test.get("workload") or "?"),
        nemesis=str(nem) if nem else "none",
        duration_s=duration,
        ops=ops,
        has_report=(run / "index.html").exists(),
    )
    with _cache_lock:
        _cache[run] = (key, s)
    return s


def _q(s: str) -> str:
    return urllib.parse.quote(s, safe="")


def render_index(store: Path) -> str:
    """The run list page; every value goes through ``html.escape``."""
    runs = find_runs(store)
    rows = []
    for run in runs[:MAX_LISTED]:
        s = summarize(run)
        e = html.escape
        colour = VERDICT_COLOURS[s.verdict]
        base = f"/runs/{_q(s.test)}/{_q(s.run)}/"
        dur = f"{s.duration_s:.1f} s" if s.duration_s is not None else "?"
        client = s.ops["ok"] + s.ops["fail"] + s.ops["info"]
        rows.append(
            f'<tr class="run verdict-{e(s.verdict)}" data-test="{e(s.test)}" data-run="{e(s.run)}">'
            f'<td><span class="v" style="background:{colour}">{e(s.verdict)}</span></td>'
            f'<td><a href="{base}">{e(s.test)}</a></td><td class="mono">{e(s.run)}</td>'
            f"<td>{e(s.workload)}</td><td>{e(s.nemesis)}</td><td class='num'>{e(dur)}</td>"
            f"<td class='num'>{client}</td><td class='num ok'>{s.ops['ok']}</td>"
            f"<td class='num fail'>{s.ops['fail']}</td><td class='num info'>{s.ops['info']}</td>"
            f'<td><a href="{base}">report</a>{"" if s.has_report else " (new)"} · '
            f'<a href="{base}files/">files</a> · <a href="/zip/{_q(s.test)}/{_q(s.run)}.zip">zip</a></td></tr>'
        )
    more = (
        f"<p class='dim'>{len(runs) - MAX_LISTED} older runs not listed.</p>"
        if len(runs) > MAX_LISTED
        else ""
    )
    body = "\n".join(rows) or "<tr><td colspan='11' class='dim'>No runs in this store yet.</td></tr>"
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>chaos runs: {html.escape(str(store))}</title>
<style>
body {{ font: 14px/1.45 system-ui, "DejaVu Sans", sans-serif; margin: 0; background: #f6f7f9; color: #1d2430; }}
header {{ background: #1d2430; color: #fff; padding: 12px 24px; }} header h1 {{ margin: 0; font-size: 19px; }}
main {{ padding: 12px 24px; }} .dim {{ color: #6b7280; }} .mono {{ font-family: ui-monospace, monospace; font-size: 12.5px; }}
table {{ border-collapse: collapse; width: 100%; background: #fff; border: 1px solid #e2e5ea; }}
th, td {{ padding: 5px 9px; border-bottom: 1px solid #e2e5ea; text-align: left; }} th {{ background: #f3f4f6; }}
td.num {{ text-align: right; font-variant-numeric: tabular-nums; }} .ok {{ color: #2b83ba; }} .fail {{ color: #d7191c; }}
.info {{ color: #c2410c; }} .v {{ color: #fff; border-radius: 10px; padding: 1px 9px; font-weight: 700; font-size: 12px; }}
tr.run:hover {{ background: #eef4ff; }} a {{ color: #2563eb; }}
</style></head><body>
<header><h1>chaos runs</h1><span class="dim">{html.escape(str(store.resolve()))} · {len(runs)} runs, newest first</span></header>
<main><table id="runs"><thead><tr><th>verdict</th><th>test</th><th>run</th><th>workload</th><th>nemesis</th>
<th>duration</th><th>client ops</th><th>ok</th><th>fail</th><th>info</th><th></th></tr></thead>
<tbody>{body}</tbody></table>{more}</main></body></html>"""


def render_files(run: Path, base: str) -> str:
    """A plain listing of a run's files."""
    items = []
    for root, dirs, files in os.walk(run):
        dirs.sort()
        for f in sorted(files):
            rel = str((Path(root) / f).relative_to(run))
            size = (Path(root) / f).stat().st_size
            href = base + "/".join(_q(x) for x in Path(rel).parts)
            items.append(
                f'<li><a href="{href}">{html.escape(rel)}</a> <span class="dim">{size} bytes</span></li>'
            )
    return (
        "<!DOCTYPE html><html><head><meta charset='utf-8'><title>files</title>"
        "<style>body{font:14px system-ui,sans-serif;margin:20px}.dim{color:#6b7280}</style></head><body>"
        f"<h1>{html.escape(run.parent.name)} / {html.escape(run.name)}</h1><p><a href='/'>all runs</a> · "
        f"<a href='{base}'>report</a></p><ul>{''.join(items)}</ul></body></html>"
    )


class _Handler(BaseHTTPRequestHandler):
    server_version = "chaos-serve"
    store: Path  # set on the subclass by make_server

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - http.server's signature
        pass

    def _send(self, status: int, body: bytes, ctype: str) -> None:
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("X-Content-Type-Options", "nosniff")
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def _error(self, status: int, text: str) -> None:
        self._send(status, (html.escape(text) + "\n").encode(), "text/plain; charset=utf-8")

    def _run_dir(self, test: str, run: str) -> Path | None:
        store = self.store.resolve()
        if not test or not run or test in (".", "..") or run in (".", ".."):
            return None
        p = (self.store / test / run).resolve()
        if p.parent.parent != store or not _is_run_dir(p):
            return None
        return p

    def do_HEAD(self) -> None:
        self.do_GET()

    def do_GET(self) -> None:
        url = urllib.parse.urlsplit(self.path)
        parts = [urllib.parse.unquote(p) for p in url.path.split("/") if p]
        try:
            if not parts:
                self._send(200, render_index(self.store).encode(), "text/html; charset=utf-8")
            elif parts[0] == "zip" and len(parts) == 3 and parts[2].endswith(".zip"):
                self._zip(parts[1], parts[2][: -len(".zip")])
            elif parts[0] == "runs" and len(parts) >= 3:
                self._run_file(parts[1], parts[2], parts[3:], url.path.endswith("/"))
            elif parts == ["favicon.ico"]:
                self._send(204, b"", "image/x-icon")
            else:
                self._error(404, f"not found: {url.path}")
        except (BrokenPipeError, ConnectionResetError):
            pass

    def _run_file(self, test: str, run: str, rest: list[str], slash: bool) -> None:
        rd = self._run_dir(test, run)
        if rd is None:
            self._error(404, f"no run {test}/{run} in the store")
            return
        base = f"/runs/{_q(test)}/{_q(run)}/"
        if not rest and not slash:
            self.send_response(301)
            self.send_header("Location", base)
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        if rest == ["files"] or rest == []:
            if rest == ["files"]:
                self._send(200, render_files(rd, base).encode(), "text/html; charset=utf-8")
                return
            index = rd / "index.html"
            if not index.exists():
                try:
                    _report.write_report(rd)
                except _report.ReportError as e:
                    self._error(500, f"cannot write the report: {e}")
                    return
            rest = ["index.html"]
        target = (rd / Path(*rest)).resolve()
        if rd not in target.parents or not target.is_file():
            self._error(404, f"no file {'/'.join(rest)} in run {test}/{run}")
            return
        ctype = mimetypes.guess_type(target.name)[0] or "application/octet-stream"
        if target.suffix in _TEXT_SUFFIXES or ctype.startswith("text/") and target.name != "index.html":
            ctype = "text/plain"
        if ctype in ("text/plain", "text/html", "application/json"):
            ctype += "; charset=utf-8"
        self._send(200, target.read_bytes(), ctype)

    def _zip(self, test: str, run: str) -> None:
        rd = self._run_dir(test, run)
        if rd is None:
            self._error(404, f"no run {test}/{run} in the store")
            return
        # Streamed: ZipFile writes data descriptors on an unseekable stream; HTTP/1.0 ends at close.
        self.send_response(200)
        self.send_header("Content-Type", "application/zip")
        name = f"{test}-{run}.zip".replace('"', "")
        self.send_header("Content-Disposition", f'attachment; filename="{name}"')
        self.send_header("Connection", "close")
        self.end_headers()
        if self.command == "HEAD":
            return
        prefix = f"{test}/{run}"
        out = cast(IO[bytes], _Unseekable(self.wfile))
        with zipfile.ZipFile(out, "w", compression=zipfile.ZIP_DEFLATED) as zf:
            for root, dirs, files in os.walk(rd):
                dirs.sort()
                for f in sorted(files):
                    p = Path(root) / f
                    if p.is_symlink():
                        continue
                    zf.write(p, f"{prefix}/{p.relative_to(rd)}")
        self.close_connection = True


class _Unseekable:
    """Wraps the socket file so zipfile sees a write-only stream (it then streams entries)."""

    def __init__(self, raw: Any) -> None:
        self.raw = raw
        self.pos = 0

    def write(self, b: bytes) -> int:
        self.raw.write(b)
        self.pos += len(b)
        return len(b)

    def tell(self) -> int:
        return self.pos

    def seekable(self) -> bool:
        return False

    def flush(self) -> None:
        self.raw.flush()


def make_server(
    store: str | os.PathLike[str], host: str = "127.0.0.1", port: int = 8080
) -> ThreadingHTTPServer:
    """An HTTP server over ``store`` (not yet serving; call ``serve_forever``). Port 0 picks a free port.

    Raises ValueError if ``store`` is not a directory; OSError if the address cannot be bound.
    """
    path = Path(store)
    if not path.is_dir():
        raise ValueError(f"store {path}: expected an existing directory of runs")
    handler = type("Handler", (_Handler,), {"store": path})
    srv = ThreadingHTTPServer((host, port), handler)
    srv.daemon_threads = True
    return srv


@click.command(name="serve")
@click.option(
    "--store", "store", default="store", show_default=True, help="Store directory holding the runs."
)
@click.option(
    "--port", default=8080, show_default=True, type=click.IntRange(0, 65535), help="TCP port (0: any)."
)
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to bind.")
def serve(store: str, port: int, host: str) -> None:
    """Serve the store's runs and reports over HTTP until interrupted."""
    from chaos.cli import BadArguments

    try:
        srv = make_server(store, host, port)
    except ValueError as e:
        raise BadArguments(str(e)) from e
    except OSError as e:
        raise BadArguments(f"--host {host} --port {port}: cannot bind ({e.strerror or e})") from e
    h, p = srv.server_address[:2]
    host_s = h.decode() if isinstance(h, bytes) else str(h)
    click.echo(f"Serving {Path(store).resolve()} at http://{host_s}:{p}/ (Ctrl-C to stop)")
    try:
        srv.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        srv.server_close()
