"""``chaos serve``: browse the store's runs over HTTP (Jepsen's ``jepsen.web``, without the JVM).

Routes (all GET):

- ``/`` lists runs newest first, :data:`PAGE_SIZE` a page: verdict colour, test name, start time,
  workload, nemeses, duration, op counts by type, links to the report, the files and a zip
  download. Query: ``test=<name>`` and ``verdict=valid|invalid|unknown|incomplete`` filter,
  ``page=<n>`` (1-based) pages; a malformed value is a 400. The filters are links (the page
  allows no form).
- ``/runs/<test>/<run>/`` the run's ``index.html``; written on first request if the run has none.
- ``/runs/<test>/<run>/files/`` a listing of the run's files.
- ``/runs/<test>/<run>/<file>`` any other file of the run, never as a type a browser runs: text files
  (logs, histories, JSON) as ``text/plain``, everything else (``.svg``, ``.xhtml``, ``.html``, images,
  archives) as an ``application/octet-stream`` download (``Content-Disposition: attachment``).
  Streamed in :data:`CHUNK` pieces: a 2 GiB node log costs the server one chunk of memory.
- ``/zip/<test>/<run>.zip`` the whole run directory as a zip archive, streamed.

Every response carries a Content-Security-Policy: ``default-src 'none'`` with a sandbox for files, the
hashes of its own inline style for the run list and file list, and for the report only the hashes of
its inline scripts (styles inline, images ``data:``/``blob:``, as Plotly draws them). Every error is
an HTTP status: 400 for a path with ``%00`` or invalid UTF-8, 404 for what is not in the store, 421 for
a Host header that is not loopback (``localhost``, ``127.0.0.0/8``, ``[::1]``), the bound address or
an ``--allow-host`` name (against DNS rebinding), 500 for anything the handler did not foresee.

Paths are resolved and must stay inside the store (no ``..``, no symlinks out). Binds to 127.0.0.1
unless ``--host`` says otherwise (an IPv6 address binds IPv6); a connection idle for 30 s is
closed. Standard library ``http.server.ThreadingHTTPServer``; pages are jinja2 templates with
autoescape, like the report.
"""

from __future__ import annotations

import base64
import hashlib
import ipaddress
import json
import math
import mimetypes
import os
import re
import socket
import threading
import time
import urllib.parse
import zipfile
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import IO, Any, cast

import click
import jinja2
from markupsafe import Markup

from chaos.errors import BadArguments
from chaos.history.analysis import HistoryError, read_history, run_config
from chaos.history.op import NEMESIS
from chaos.history.report import html as _report

_TEXT_SUFFIXES = {".jsonl", ".log", ".txt", ".edn", ".out", ".err", ".json", ".csv", ".yaml", ".yml", ".conf"}
# text/* types that a browser renders or runs: never sent as themselves from a run directory
_ACTIVE_TEXT_TYPES = {"text/html", "text/xml", "text/xsl", "text/javascript", "text/ecmascript", "text/css"}
TEMPLATES = Path(__file__).resolve().parent / "templates"
PAGE_SIZE = 100  # runs per page of the run list
CHUNK = 1 << 16  # bytes per read when a file is sent
VERDICTS = ("valid", "invalid", "unknown", "incomplete")


@dataclass
class RunSummary:
    """One row of the run list; ``ops`` counts history lines by type (invoke/ok/fail/info)."""

    test: str
    run: str
    path: Path
    start: str
    verdict: str
    workload: str
    nemesis: str
    options: str  # the DB and nemesis options the run was given (analysis.run_config)
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
    except (OSError, HistoryError, UnicodeDecodeError, ValueError):
        pass
    return counts, last_time


def _verdict(results: object) -> str:
    if not isinstance(results, dict):
        return "incomplete"
    v = results.get("valid")
    return "valid" if v is True else "invalid" if v is False else "unknown"


_verdicts: dict[Path, tuple[float, str]] = {}


def verdict_of(run: Path) -> str:
    """The run's verdict from ``results.json`` alone (cached until it changes): what the verdict
    filter reads for every run, where :func:`summarize` also reads the history."""
    key = _mtime(run / "results.json")
    with _cache_lock:
        hit = _verdicts.get(run)
        if hit and hit[0] == key:
            return hit[1]
    try:
        verdict = _verdict(json.loads((run / "results.json").read_text(encoding="utf-8")))
    except (OSError, ValueError):
        verdict = "incomplete"
    with _cache_lock:
        _verdicts[run] = (key, verdict)
    return verdict


def start_time(run: Path, test: dict[str, object]) -> str:
    """When the run started, ``YYYY-mm-dd HH:MM:SS`` local time: test.json's ``start_time`` (epoch
    seconds), else the run directory's name (``YYYYmmddTHHMMSS.fff``, chaos.history.store), else
    ``?``."""
    t = test.get("start_time")
    if isinstance(t, int | float) and not isinstance(t, bool) and math.isfinite(t):
        try:
            return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(t))
        except (OverflowError, OSError, ValueError):
            pass
    m = re.fullmatch(r"(\d{4})(\d\d)(\d\d)T(\d\d)(\d\d)(\d\d)(?:\.\d+)?", run.name)
    return "{}-{}-{} {}:{}:{}".format(*m.groups()) if m else "?"


def summarize(run: Path) -> RunSummary:
    """The list row for one run (cached until its history, results or test file changes)."""
    key = (_mtime(run / "history.jsonl"), _mtime(run / "results.json"), _mtime(run / "test.json"))
    with _cache_lock:
        hit = _cache.get(run)
        if hit and hit[0] == key:
            hit[1].has_report = (run / "index.html").exists()
            return hit[1]
    test: dict[str, object] = {}
    results: object = None
    try:
        t = json.loads((run / "test.json").read_text(encoding="utf-8"))
        test = t if isinstance(t, dict) else {}
    except (OSError, ValueError):  # UnicodeDecodeError is a ValueError
        pass
    try:
        results = json.loads((run / "results.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        results = None
    verdict = _verdict(results)
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
        start=start_time(run, test),
        verdict=verdict,
        workload=str(test.get("workload") or "?"),
        nemesis=str(nem) if nem else "none",
        options=run_config(test),
        duration_s=duration,
        ops=ops,
        has_report=(run / "index.html").exists(),
    )
    with _cache_lock:
        _cache[run] = (key, s)
    return s


def _q(s: str) -> str:
    # a name that is not UTF-8 (os.listdir's surrogate escapes) quotes as its bytes
    return urllib.parse.quote(s, safe="", errors="surrogateescape")


def _sha256_source(text: str) -> str:
    """A CSP hash source (``'sha256-…'``) for one inline ``<script>`` or ``<style>`` body."""
    return "'sha256-" + base64.b64encode(hashlib.sha256(text.encode("utf-8")).digest()).decode() + "'"


_env = jinja2.Environment(
    loader=jinja2.FileSystemLoader(str(TEMPLATES)),
    autoescape=jinja2.select_autoescape(["html"], default=True),
    undefined=jinja2.StrictUndefined,
)
_CSS = (TEMPLATES / "serve.css").read_text(encoding="utf-8")
# the run list and file list: no script at all, only their own stylesheet
PAGE_CSP = (
    f"default-src 'none'; style-src {_sha256_source(_CSS)}; img-src 'self'; "
    "base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
)
# any file, error or redirect: nothing may load or run, and the document is sandboxed (own origin lost)
FILE_CSP = "default-src 'none'; sandbox; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
_INLINE_SCRIPT = re.compile(r"<script(?P<attrs>[^>]*)>(?P<body>.*?)</script>", re.S | re.I)


def report_csp(page: str) -> str:
    """The report's policy: its own inline scripts by hash (the JSON data block is not run), inline
    styles (Plotly inserts ``<style>`` elements), ``data:``/``blob:`` images (Plotly's exports), no
    connections, frames or forms."""
    hashes = sorted(
        {
            _sha256_source(m.group("body"))
            for m in _INLINE_SCRIPT.finditer(page)
            if "application/json" not in m.group("attrs").lower()
        }
    )
    script_src = " ".join(hashes) or "'none'"
    return (
        f"default-src 'none'; script-src {script_src}; "
        "style-src 'self' 'unsafe-inline'; img-src 'self' data: blob:; font-src 'self' data:; "
        "base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
    )


class BadQuery(ValueError):
    """A run-list query value that is not one (answered 400)."""


@dataclass(frozen=True)
class RunQuery:
    """What the run list shows: runs of ``test`` (None: all), of ``verdict`` (None: all), page
    ``page`` (1-based)."""

    test: str | None = None
    verdict: str | None = None
    page: int = 1

    @classmethod
    def parse(cls, query: str) -> RunQuery:
        """From a URL query string; BadQuery naming the field for an unknown field, a repeated
        one, an empty or unknown verdict, an empty test, or a page that is not a positive integer."""
        fields: dict[str, str] = {}
        try:
            pairs = urllib.parse.parse_qsl(query, keep_blank_values=True, strict_parsing=bool(query))
        except ValueError as e:
            raise BadQuery(f"query {query!r}: {e}") from None
        for k, v in pairs:
            if k not in ("test", "verdict", "page"):
                raise BadQuery(f"query field {k!r}: expected test, verdict or page")
            if k in fields:
                raise BadQuery(f"query field {k!r} given twice")
            fields[k] = v
        verdict = fields.get("verdict")
        if verdict is not None and verdict not in VERDICTS:
            raise BadQuery(f"verdict {verdict!r}: expected one of {', '.join(VERDICTS)}")
        test = fields.get("test")
        if test is not None and (not test or "/" in test or "\x00" in test):
            raise BadQuery(f"test {test!r}: expected a test name")
        raw = fields.get("page", "1")
        if not (raw.isascii() and raw.isdigit() and 0 < len(raw) <= 9 and int(raw) > 0):
            raise BadQuery(f"page {raw!r}: expected a positive integer")
        return cls(test, verdict, int(raw))

    def href(self, **change: object) -> str:
        """The list's URL for this query with ``change`` applied (a filter change starts at page 1)."""
        fields = {"test": self.test, "verdict": self.verdict, "page": self.page, **change}
        if "page" not in change:
            fields["page"] = 1
        q = [(k, str(v)) for k, v in fields.items() if v is not None and (k != "page" or v != 1)]
        return "/" + ("?" + urllib.parse.urlencode(q) if q else "")


def _row(s: RunSummary) -> dict[str, object]:
    return {
        "test": s.test,
        "run": s.run,
        "start": s.start,
        "verdict": s.verdict,
        "workload": s.workload,
        "nemesis": s.nemesis,
        "options": s.options,
        "duration": f"{s.duration_s:.1f} s" if s.duration_s is not None else "?",
        "client": s.ops["ok"] + s.ops["fail"] + s.ops["info"],
        "ok": s.ops["ok"],
        "fail": s.ops["fail"],
        "info": s.ops["info"],
        "has_report": s.has_report,
        "base": f"/runs/{_q(s.test)}/{_q(s.run)}/",
        "zip": f"/zip/{_q(s.test)}/{_q(s.run)}.zip",
        "only_test": "",
    }


def render_index(store: Path, query: RunQuery | None = None) -> str:
    """The run list page (``serve_index.html``, autoescaped): the runs ``query`` selects, newest
    first, one page of :data:`PAGE_SIZE`. Only the page's runs are summarised (their histories
    read); the verdict filter reads each run's ``results.json``."""
    q = query or RunQuery()
    runs = find_runs(store)
    tests = sorted({r.parent.name for r in runs})
    chosen = [
        r
        for r in runs
        if (q.test is None or r.parent.name == q.test) and (q.verdict is None or verdict_of(r) == q.verdict)
    ]
    pages = max(1, -(-len(chosen) // PAGE_SIZE))
    first = (q.page - 1) * PAGE_SIZE
    rows = []
    for run in chosen[first : first + PAGE_SIZE]:
        row = _row(summarize(run))
        row["only_test"] = q.href(test=row["test"])
        rows.append(row)
    return _env.get_template("serve_index.html").render(
        store=str(store),
        store_abs=str(store.resolve()),
        total=len(runs),
        matching=len(chosen),
        rows=rows,
        page=q.page,
        pages=pages,
        first=first + 1,
        last=first + len(rows),
        prev_href=q.href(page=q.page - 1) if q.page > 1 else None,
        next_href=q.href(page=q.page + 1) if q.page < pages else None,
        query=q,
        verdict_links=[(v or "all", q.href(verdict=v), v == q.verdict) for v in (None, *VERDICTS)],
        test_links=[(t or "all tests", q.href(test=t), t == q.test) for t in (None, *tests)],
        css=Markup(_CSS),
    )


def render_files(run: Path, base: str) -> str:
    """A plain listing of a run's files (``serve_files.html``, autoescaped)."""
    files = []
    for root, dirs, names in os.walk(run):
        dirs.sort()
        for f in sorted(names):
            p = Path(root) / f
            rel = p.relative_to(run)
            try:
                size = p.stat().st_size
            except OSError:
                continue
            files.append({"name": str(rel), "size": size, "href": base + "/".join(_q(x) for x in rel.parts)})
    return _env.get_template("serve_files.html").render(
        test=run.parent.name, run=run.name, base=base, files=files, css=Markup(_CSS)
    )


def _host_name(header: str) -> str:
    """The name in a Host header, without port or IPv6 brackets, lower case."""
    h = header.strip().lower()
    if h.startswith("["):
        return h[1 : h.find("]")] if "]" in h else h
    return h.rsplit(":", 1)[0] if h.count(":") == 1 else h


def is_allowed_host(header: str, bound: str, allowed: frozenset[str]) -> bool:
    """Whether a request's ``Host`` names this server: a loopback name (``localhost``, ``127.0.0.0/8``,
    ``::1``), the bound address, or one of ``allowed`` (``--allow-host``). Anything else may be a DNS
    rebinding page in the user's browser reaching the store."""
    name = _host_name(header).rstrip(".")
    if not name:
        return False
    if name == "localhost" or name.endswith(".localhost") or name in allowed or name == bound.lower():
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False


class _BadPath(Exception):
    """A request path that is not a path (``%00``, invalid UTF-8): answered 400."""


def _path_parts(raw: str) -> list[str]:
    parts = []
    for p in raw.split("/"):
        if not p:
            continue
        try:
            part = urllib.parse.unquote_to_bytes(p).decode("utf-8")
        except UnicodeDecodeError as e:
            raise _BadPath("the path is not UTF-8") from e
        if "\x00" in part or "/" in part:
            raise _BadPath("the path holds a NUL byte or an encoded separator")
        parts.append(part)
    return parts


IDLE_TIMEOUT_S = 30.0


class _ThreadingHTTPServer6(ThreadingHTTPServer):
    address_family = socket.AF_INET6


class _Handler(BaseHTTPRequestHandler):
    server_version = "chaos-serve"
    store: Path  # set on the subclass by make_server
    bound_host: str  # the address the server was bound to (also accepted as Host)
    allowed_hosts: frozenset[str]  # --allow-host names
    _csp = FILE_CSP

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002 - http.server's signature
        pass

    def end_headers(self) -> None:
        # every response, including http.server's own errors (bad request line, 501)
        self.send_header("Content-Security-Policy", self._csp)
        self.send_header("X-Content-Type-Options", "nosniff")
        self.send_header("Referrer-Policy", "no-referrer")
        self.send_header("Cross-Origin-Resource-Policy", "same-origin")
        self._headers_sent = True
        super().end_headers()

    def _send(
        self, status: int, body: bytes, ctype: str, csp: str = FILE_CSP, download: str | None = None
    ) -> None:
        self._headers(status, ctype, len(body), csp, download)
        if self.command != "HEAD":
            self.wfile.write(body)

    def _headers(self, status: int, ctype: str, length: int, csp: str, download: str | None) -> None:
        self._csp = csp
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(length))
        if download is not None:
            ascii_name = re.sub(r"[^A-Za-z0-9._-]", "_", download) or "file"
            self.send_header(
                "Content-Disposition",
                f"attachment; filename=\"{ascii_name}\"; filename*=UTF-8''{_q(download)}",
            )
        self.end_headers()

    def _send_file(self, path: Path, ctype: str, download: str | None = None) -> None:
        """200 with ``path``'s bytes, read and written :data:`CHUNK` at a time (never the whole file
        in memory). The length is the size when opened: a file growing meanwhile (a live log) is
        cut there, one shrinking ends the connection early (the client sees a short body)."""
        with open(path, "rb") as f:
            size = os.fstat(f.fileno()).st_size
            self._headers(200, ctype, size, FILE_CSP, download)
            if self.command == "HEAD":
                return
            left = size
            while left > 0:
                chunk = f.read(min(CHUNK, left))
                if not chunk:
                    self.close_connection = True
                    return
                self.wfile.write(chunk)
                left -= len(chunk)

    def _error(self, status: int, text: str) -> None:
        self._send(status, (text + "\n").encode("utf-8", "replace"), "text/plain; charset=utf-8")

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
        self._headers_sent = False
        self._csp = FILE_CSP
        try:
            self._route()
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True
        except Exception as e:  # noqa: BLE001 - any fault is a 500 rather than a dropped connection
            if self._headers_sent:
                self.close_connection = True  # mid-body (a streamed zip): the client sees a short body
                return
            try:
                self._error(500, f"internal error: {type(e).__name__}: {e}")
            except OSError:
                self.close_connection = True

    def _route(self) -> None:
        host = self.headers.get("Host")
        if host is None:
            self._error(400, "missing Host header")
            return
        if not is_allowed_host(host, self.bound_host, self.allowed_hosts):
            self._error(421, f"Host {host!r} is not served here; start chaos serve with --allow-host NAME")
            return
        url = urllib.parse.urlsplit(self.path)
        try:
            parts = _path_parts(url.path)
        except _BadPath as e:
            self._error(400, f"bad path: {e}")
            return
        if not parts:
            try:
                query = RunQuery.parse(url.query) if url.query else None
            except BadQuery as e:
                self._error(400, f"bad query: {e}")
                return
            page = render_index(self.store, query) if query else render_index(self.store)
            self._send(200, page.encode("utf-8", "backslashreplace"), "text/html; charset=utf-8", PAGE_CSP)
        elif parts[0] == "zip" and len(parts) == 3 and parts[2].endswith(".zip"):
            self._zip(parts[1], parts[2][: -len(".zip")])
        elif parts[0] == "runs" and len(parts) >= 3:
            self._run_file(parts[1], parts[2], parts[3:], url.path.endswith("/"))
        elif parts == ["favicon.ico"]:
            self._send(204, b"", "image/x-icon")
        else:
            self._error(404, f"not found: {url.path}")

    def _run_file(self, test: str, run: str, rest: list[str], slash: bool) -> None:
        rd = self._run_dir(test, run)
        if rd is None:
            self._error(404, f"no run {test}/{run} in the store")
            return
        base = f"/runs/{_q(test)}/{_q(run)}/"
        if not rest and not slash:
            self._csp = FILE_CSP
            self.send_response(301)
            self.send_header("Location", base)
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        if rest == ["files"]:
            page = render_files(rd, base).encode("utf-8", "backslashreplace")
            self._send(200, page, "text/html; charset=utf-8", PAGE_CSP)
            return
        if rest in ([], ["index.html"]):
            self._report(rd, test, run)
            return
        target = (rd / Path(*rest)).resolve()
        if rd not in target.parents or not target.is_file():
            self._error(404, f"no file {'/'.join(rest)} in run {test}/{run}")
            return
        ctype = mimetypes.guess_type(target.name, strict=False)[0] or "application/octet-stream"
        if target.suffix.lower() in _TEXT_SUFFIXES or (
            ctype.startswith("text/") and ctype not in _ACTIVE_TEXT_TYPES
        ):
            self._send_file(target, "text/plain; charset=utf-8")
        else:
            self._send_file(target, "application/octet-stream", download=target.name)

    def _report(self, rd: Path, test: str, run: str) -> None:
        """The run's report (``index.html``), written first if missing: the only HTML served from a run."""
        index = rd / "index.html"
        if not index.exists():
            try:
                _report.write_report(rd)
            except (_report.ReportError, HistoryError, UnicodeDecodeError, ValueError) as e:
                self._error(500, f"cannot write the report of {test}/{run}: {e}")
                return
        page = index.read_bytes()
        csp = report_csp(page.decode("utf-8", "replace"))
        self._send(200, page, "text/html; charset=utf-8", csp)

    def _zip(self, test: str, run: str) -> None:
        rd = self._run_dir(test, run)
        if rd is None:
            self._error(404, f"no run {test}/{run} in the store")
            return
        # Streamed: ZipFile writes data descriptors on an unseekable stream; HTTP/1.0 ends at close.
        self._csp = FILE_CSP
        self.send_response(200)
        self.send_header("Content-Type", "application/zip")
        name = re.sub(r"[^A-Za-z0-9._-]", "_", f"{test}-{run}.zip")
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
    store: str | os.PathLike[str],
    host: str = "127.0.0.1",
    port: int = 8080,
    allow_hosts: tuple[str, ...] = (),
    idle_timeout: float = IDLE_TIMEOUT_S,
) -> ThreadingHTTPServer:
    """An HTTP server over ``store`` (not yet serving; call ``serve_forever``). Port 0 picks a free port.
    An IPv6 ``host`` (``::1``, ``::``) binds an IPv6 socket.

    Requests whose ``Host`` is not loopback, ``host`` or one of ``allow_hosts`` (names or addresses,
    without port) are answered 421. A connection that sends nothing for ``idle_timeout`` seconds
    (between requests or inside one) is closed, so idle or slow clients cannot hold threads for good.

    Raises ValueError if ``store`` is not a directory; OSError if the address cannot be bound.
    """
    path = Path(store)
    if not path.is_dir():
        raise ValueError(f"store {path}: expected an existing directory of runs")
    allowed = frozenset(_host_name(h).rstrip(".") for h in allow_hosts if h.strip())
    handler = type(
        "Handler",
        (_Handler,),
        {
            "store": path,
            "bound_host": _host_name(host).rstrip("."),
            "allowed_hosts": allowed,
            "timeout": idle_timeout,  # StreamRequestHandler: the socket's timeout
        },
    )
    srv = (_ThreadingHTTPServer6 if ":" in host else ThreadingHTTPServer)((host, port), handler)
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
@click.option(
    "--allow-host",
    "allow_hosts",
    multiple=True,
    metavar="NAME",
    help="Also accept requests whose Host header is NAME (repeatable); by default only loopback names "
    "and the bound address are accepted, against DNS rebinding.",
)
def serve(store: str, port: int, host: str, allow_hosts: tuple[str, ...]) -> None:
    """Serve the store's runs and reports over HTTP until interrupted."""

    try:
        srv = make_server(store, host, port, allow_hosts)
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
