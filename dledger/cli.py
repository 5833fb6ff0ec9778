"""The ``dledger`` command, mirroring DLedger's BossCommand (server, append, get, leadershipTransfer)
plus ``metadata``, ``kv`` and ``bench``.

Only the standard library and msgpack are needed, so a node runs it with plain ``python3``.
Exit status: 0 success, 1 the cluster answered with a failure, 2 indeterminate (timeout, 501, 502),
254 bad arguments.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import sys
from typing import Any

from dledger.client import DLedgerClient, Result

BAD_ARGS = 254


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> Any:  # argparse exits 2 by default; we promise 254
        self.print_usage(sys.stderr)
        print(f"{self.prog}: error: {message}", file=sys.stderr)
        sys.exit(BAD_ARGS)


def _setup_logging(level: str) -> None:
    logging.basicConfig(
        stream=sys.stderr,
        level=getattr(logging, level.upper(), logging.INFO),
        format="%(asctime)s.%(msecs)03d %(levelname)s %(name)s %(message)s",
        datefmt="%Y-%m-%dT%H:%M:%S",
    )


def _add_client_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("-p", "--peers", required=True, help='"n0-host:port;n1-host:port;..."')
    p.add_argument("-g", "--group", default="default")
    p.add_argument("--timeout", type=float, default=3.0, help="seconds per request (default 3)")
    p.add_argument("--prefer", default=None, help="member id to ask first")


def build_parser() -> argparse.ArgumentParser:
    ap = _Parser(prog="dledger", description="A Python DLedger: Raft-based commit log and KV store.")
    sub = ap.add_subparsers(dest="cmd", required=True, parser_class=_Parser)

    s = sub.add_parser("server", help="run one member in the foreground (SIGTERM stops it cleanly)")
    s.add_argument("-g", "--group", default="default")
    s.add_argument("-i", "--id", default="n0")
    s.add_argument("-p", "--peers", default="n0-localhost:20911")
    s.add_argument("-s", "--store-dir", "--store-base-dir", dest="store_dir", default="/tmp/dledgerstore")
    s.add_argument("--memory", action="store_true", help="keep the log in memory (tests only)")
    s.add_argument("--flush", choices=["sync", "async"], default="sync")
    s.add_argument("--read-mode", choices=["raft-log", "read-index", "lease", "unsafe"], default="raft-log")
    s.add_argument("--bind", default=None, help="address to listen on (default: own peers entry)")
    s.add_argument("--heartbeat-ms", type=int, default=100)
    s.add_argument("--max-heartbeat-leak", type=int, default=3)
    s.add_argument("--min-vote-interval-ms", type=int, default=30)
    s.add_argument("--max-vote-interval-ms", type=int, default=180)
    s.add_argument("--flush-interval-ms", type=int, default=10, help="async flush period")
    s.add_argument("--max-wait-ack-ms", type=int, default=2500)
    s.add_argument("--max-pending", type=int, default=10000)
    s.add_argument("--max-frame", type=int, default=16 * 1024 * 1024, help="bytes per frame")
    s.add_argument(
        "--secret-file",
        default=None,
        help="file holding the group's peer secret: members prove it before their messages count "
        "(required for a group of more than one member unless --insecure)",
    )
    s.add_argument(
        "--insecure",
        action="store_true",
        help="run a multi-member group without a peer secret: any process that reaches the port "
        "can vote and push as a member (tests only)",
    )
    s.add_argument(
        "--adopt-insecure-state",
        action="store_true",
        help="start with a secret on a store an --insecure run wrote (refused otherwise: its term "
        "may be forged)",
    )
    s.add_argument("--max-buffered", type=int, default=64 * 1024 * 1024, help="bytes of unfinished frames")
    s.add_argument("--max-connections", type=int, default=1000, help="incoming connections in all")
    s.add_argument("--max-connections-per-host", type=int, default=500)
    s.add_argument("--frame-timeout-ms", type=int, default=30_000, help="first to last byte of a frame")
    s.add_argument("--idle-timeout-ms", type=int, default=120_000, help="close after no frame this long")
    s.add_argument("--max-write-buffer", type=int, default=1024 * 1024, help="unread answer bytes")
    s.add_argument("--max-entry-bytes", type=int, default=1024 * 1024, help="bytes per client entry (1 MiB)")
    s.add_argument("--preferred-leader", "--preferred-leader-id", dest="preferred", default="")
    s.add_argument("--data-file-size", type=int, default=None, help="bytes per data segment file")
    s.add_argument("--snapshot-every", type=int, default=0, help="snapshot every N applied entries (0: off)")
    s.add_argument("--snapshot-keep", type=int, default=3)
    s.add_argument("--log-level", default="INFO")

    a = sub.add_parser("append", help="append entries; prints each index")
    _add_client_args(a)
    a.add_argument("-d", "--data", required=True)
    a.add_argument("-c", "--count", type=int, default=1)

    g = sub.add_parser("get", help="print the committed entry at an index")
    _add_client_args(g)
    g.add_argument("-i", "--index", type=int, required=True)

    m = sub.add_parser("metadata", help="leader id and term")
    _add_client_args(m)

    t = sub.add_parser("leadership-transfer", aliases=["leadershipTransfer"], help="move leadership")
    _add_client_args(t)
    t.add_argument("-t", "--to", required=True)
    t.add_argument("--term", type=int, default=None)

    k = sub.add_parser("kv", help="KV state machine: put|get|cas|delete KEY [VALUE ...], or txn MICRO-OP ...")
    _add_client_args(k)
    k.add_argument("op", choices=["put", "get", "cas", "delete", "txn"])
    k.add_argument("key", help="the key; txn: the first micro-op")
    k.add_argument(
        "values",
        nargs="*",
        help="put: VALUE; cas: EXPECTED NEW (JSON, or text; null = absent); txn: more micro-ops, each "
        "r:KEY, w:KEY=VALUE or append:KEY=VALUE (or one JSON list of [f, key, value] lists)",
    )

    i = sub.add_parser(
        "inspect",
        help="verify a stopped member's store directory, or damage it by hand (dledger.tools.inspect)",
        add_help=False,
    )
    i.add_argument("args", nargs=argparse.REMAINDER, help="dledger inspect --help lists them")

    b = sub.add_parser("bench", help="start 3 local members and measure appends/s")
    b.add_argument("--flush", choices=["sync", "async"], default="async")
    b.add_argument("--concurrency", type=int, default=256)
    b.add_argument("--seconds", type=float, default=10.0)
    b.add_argument("--size", type=int, default=1024)
    b.add_argument("--base-port", type=int, default=21911)
    b.add_argument("--client-procs", type=int, default=2, help="client processes generating the load")
    b.add_argument(
        "--connections", type=int, default=0, help="pipeline the load over N connections (0: one per request)"
    )
    return ap


def _json_arg(text: str) -> Any:
    try:
        return json.loads(text)
    except ValueError:
        return text


def _micro_ops(args: list[str]) -> list[list[Any]]:
    """Micro-ops from the command line: one JSON list of ``[f, key, value]`` lists, or items
    ``r:KEY``, ``w:KEY=VALUE``, ``append:KEY=VALUE`` (VALUE as JSON, or text). ValueError otherwise."""
    if len(args) == 1 and args[0].lstrip().startswith("["):
        mops = _json_arg(args[0])
        if isinstance(mops, list) and all(isinstance(m, list) and len(m) == 3 for m in mops):
            return mops
        raise ValueError(f"{args[0]!r}: expected a JSON list of [f, key, value] lists")
    out: list[list[Any]] = []
    for a in args:
        f, sep, rest = a.partition(":")
        key, eq, value = rest.partition("=")
        if not sep or not key or f not in ("r", "w", "append") or (f == "r") == bool(eq):
            raise ValueError(f"{a!r}: expected r:KEY, w:KEY=VALUE or append:KEY=VALUE")
        out.append([f, key, _json_arg(value) if eq else None])
    return out


def _finish(r: Result, out: dict[str, Any]) -> int:
    out.setdefault("outcome", r.outcome)
    out.setdefault("code", r.code)
    if r.error:
        out["error"] = r.error
    out.setdefault("leader", r.leader_id)
    out.setdefault("term", r.term)
    out.setdefault("node", r.node)
    print(json.dumps(out, default=repr))
    return {"ok": 0, "fail": 1}.get(r.outcome, 2)


def _client(ns: argparse.Namespace) -> DLedgerClient:
    try:
        return DLedgerClient(ns.peers, timeout=ns.timeout, group=ns.group, prefer=ns.prefer)
    except ValueError as e:
        print(f"dledger: {e}", file=sys.stderr)
        sys.exit(BAD_ARGS)


def main(argv: list[str] | None = None) -> int:
    words = sys.argv[1:] if argv is None else argv
    if words[:1] == ["inspect"]:  # its own options, --help included, go to the tool as they are
        from dledger.tools.inspect import main as inspect_main

        return inspect_main(words[1:])
    ns = build_parser().parse_args(argv)
    if ns.cmd == "server":
        return _server(ns)
    if ns.cmd == "bench":
        from dledger.bench import main as bench_main

        return bench_main(ns)
    c = _client(ns)
    try:
        if ns.cmd == "append":
            if ns.count < 1:
                print("dledger: --count must be >= 1", file=sys.stderr)
                return BAD_ARGS
            rc = 0
            for _ in range(ns.count):
                r = c.append(ns.data.encode())
                rc = max(rc, _finish(r, {"index": r.index}))
            return rc
        if ns.cmd == "get":
            r = c.get(ns.index)
            body = r.body.decode(errors="replace") if r.body is not None else None
            return _finish(r, {"index": r.index, "body": body})
        if ns.cmd == "metadata":
            r = c.metadata()
            extra = {k: v for k, v in (r.raw or {}).items() if k not in ("code", "leaderId", "term", "node")}
            return _finish(r, {"leader": r.leader_id, "term": r.term, **extra})
        if ns.cmd in ("leadership-transfer", "leadershipTransfer"):
            return _finish(c.leadership_transfer(ns.to, ns.term), {"to": ns.to})
        if ns.cmd == "kv" and ns.op == "txn":
            try:
                mops = _micro_ops([ns.key, *ns.values])
            except ValueError as e:
                print(f"dledger kv txn: {e}", file=sys.stderr)
                return BAD_ARGS
            r = c.kv_txn(mops)
            return _finish(r, {"txn": r.value if r.ok else mops, "index": r.index})
        if ns.cmd == "kv":
            vals = [_json_arg(v) for v in ns.values]
            want = {"put": 1, "get": 0, "cas": 2, "delete": 0}[ns.op]
            if len(vals) != want:
                print(f"dledger kv {ns.op}: expected {want} value(s), got {len(vals)}", file=sys.stderr)
                return BAD_ARGS
            if ns.op == "put":
                r = c.kv_put(ns.key, vals[0])
            elif ns.op == "get":
                r = c.kv_get(ns.key)
            elif ns.op == "cas":
                r = c.kv_cas(ns.key, vals[0], vals[1])
            else:
                r = c.kv_delete(ns.key)
            return _finish(r, {"key": ns.key, "value": r.value, "applied": r.applied, "index": r.index})
    finally:
        c.close()
    return BAD_ARGS


def _read_secret(path: str | None) -> bytes | None:
    """The peer secret in ``path`` (surrounding white space dropped); ValueError naming the file
    when it cannot be read or is empty."""
    if path is None:
        return None
    try:
        secret = open(path, "rb").read().strip()
    except OSError as e:
        raise ValueError(f"--secret-file {path}: cannot read it ({e.strerror or e})") from None
    if not secret:
        raise ValueError(f"--secret-file {path}: empty (expected the group's secret)")
    return secret


def _check_auth(cfg: Any, insecure: bool) -> None:
    """A group of more than one member runs with a peer secret unless ``--insecure`` says
    otherwise (etcd warns the same way about peers without TLS): without one, any process that
    reaches a member's port can vote and push under a member's name. ValueError naming the fix."""
    n = len(cfg.peer_map)
    if cfg.secret is not None or n == 1:
        return
    if not insecure:
        raise ValueError(
            f"a group of {n} members needs --secret-file FILE (the same secret on every member: "
            "members prove it before their votes and pushes count), or --insecure to run without "
            "peer authentication"
        )
    logging.getLogger("dledger").warning(
        "%s: running WITHOUT peer authentication (--insecure): any process that reaches the port "
        "can vote and push as a member",
        cfg.self_id,
    )


def _server(ns: argparse.Namespace) -> int:
    from dledger.server import ServerConfig, run_server
    from dledger.store import StoreError

    _setup_logging(ns.log_level)
    try:
        cfg = ServerConfig(
            self_id=ns.id,
            peers=ns.peers,
            group=ns.group,
            store_dir=None if ns.memory else ns.store_dir,
            flush=ns.flush,
            read_mode=ns.read_mode,
            bind=ns.bind,
            heartbeat_ms=ns.heartbeat_ms,
            max_heartbeat_leak=ns.max_heartbeat_leak,
            min_vote_interval_ms=ns.min_vote_interval_ms,
            max_vote_interval_ms=ns.max_vote_interval_ms,
            flush_interval_ms=ns.flush_interval_ms,
            max_wait_ack_ms=ns.max_wait_ack_ms,
            max_pending=ns.max_pending,
            max_frame=ns.max_frame,
            max_buffered=ns.max_buffered,
            max_connections=ns.max_connections,
            max_connections_per_host=ns.max_connections_per_host,
            frame_timeout_ms=ns.frame_timeout_ms,
            idle_timeout_ms=ns.idle_timeout_ms,
            max_write_buffer=ns.max_write_buffer,
            max_entry_bytes=ns.max_entry_bytes,
            preferred_leaders=[p for p in ns.preferred.split(";") if p],
            data_file_size=ns.data_file_size,
            snapshot_every=ns.snapshot_every,
            snapshot_keep=ns.snapshot_keep,
            secret=_read_secret(ns.secret_file),
            adopt_insecure_state=ns.adopt_insecure_state,
        )
        cfg.core_config()
        _check_auth(cfg, ns.insecure)
    except ValueError as e:
        print(f"dledger server: {e}", file=sys.stderr)
        return BAD_ARGS
    try:
        prof_path = os.environ.get("DLEDGER_PROFILE")  # developer aid: cProfile stats at exit
        if prof_path:
            import cProfile

            with cProfile.Profile() as prof:
                asyncio.run(run_server(cfg))
            prof.dump_stats(f"{prof_path}.{ns.id}")
        else:
            asyncio.run(run_server(cfg))
    except StoreError as e:
        logging.getLogger("dledger").critical("%s: cannot start: %s", ns.id, e)
        return 1
    except OSError as e:
        logging.getLogger("dledger").critical("%s: cannot listen: %s", ns.id, e)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
