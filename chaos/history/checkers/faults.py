"""Did the faults take effect, and did they bite? The ``faults`` checker.

**Took effect.** Every nemesis completion says whether its fault took effect: the value carries
``applied`` (bool) and, when false, ``why`` (see ``chaos.nemesis.base.outcome``); a completion
without ``applied`` (histories from before it was recorded) counts as applied unless the op has an
``error``. Per fault kind (``start-<kind>``) the checker counts ``requested`` (start completions),
``applied`` and ``failed``, with the distinct reasons in ``errors``; ``stop-<kind>`` completions that
failed are counted in ``stop_failed``.

**Verdict rule.** A kind that was requested and never took effect (``applied == 0``) makes the
result ``"unknown"`` with a ``cause`` naming it: the run did not test what it was asked to test,
so it cannot be called valid (Jepsen would call such a test unknown), and ``chaos gate`` does not
pass it. Otherwise ``valid`` is true. The checker never says ``false``: a fault that failed is no
safety violation.

**Did they bite.** From ``leadership.jsonl`` (written during the run by
:mod:`chaos.runner.observer`; absent for older runs) :func:`leadership_windows` computes per fault
window the leader at its start, the leaders seen, the terms, the time without a leader, and the
client ops completed in the window (all, and those on the faulted nodes). Each leader change and
each new term of the run counts for one window only (:func:`attribute`): the window in force that
began last, else the one that ended last within the DB's recovery bound before it (test.json's
``recovery.bound_s``, else ``opts.recovery_time``): a leader change 0.9 s after a kill ended is the
kill's doing, and three leader changes are never "another leader in 6 windows". Two nodes calling
themselves leader in the same term (Raft's Election Safety broken) are a split brain; in different
terms they are a stale leader (a deposed leader that has not heard of the new term yet, legal in
Raft), reported apart with its length, nodes and terms. The result's ``bite`` says plainly whether
any fault changed leadership, and the summary says "no leader change in the run" only when none
was observed. This part never changes the verdict.

Result (``results.json`` ``checkers.faults``)::

    {"valid": true | "unknown", "cause": str (when unknown),
     "kinds": {"<kind>": {"requested": n, "applied": n, "failed": n, "errors": [str, ...],
                          "stop_failed": n}},
     "requested": n, "applied": n, "failed": n,
     "windows": [{"id", "kind", "start_s", "end_s", "applied", "nodes", "leader_before",
                  "term_before", "leaders", "leader_changes", "terms", "new_terms",
                  "leaderless_s", "leader_changes_after", "changed_after_s",
                  "ops": {"ok", "fail", "info"}, "ops_on_faulted": {...}}],
     "leadership": {"samples": n, "leaders": [...], "leader_changes": n, "terms": [first, last],
                    "split_brain": [{"start_s", "end_s", "duration_s", "nodes", "terms"}],
                    "stale_leaders": [same shape]},
     "attribution_s": s (the recovery bound a change after a window is attributed within),
     "bite": {"observed": bool, "windows": n, "windows_with_leader_change": n,
              "windows_with_election": n, "changed_leadership": bool},
     "summary": str}
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, TypedDict

from chaos.history.analysis import FaultWindows, fault_name, fault_names
from chaos.history.leadership import LEADERSHIP_FILE, read_leadership
from chaos.history.op import INVOKE, NEMESIS, Op
from chaos.history.verdict import UNKNOWN, StreamChecker

MAX_ERRORS = 10  # distinct reasons kept per kind
DEFAULT_AFTER_S = 5.0  # chaos run's default recovery_time, for runs that recorded no bound


class KindRow(TypedDict):
    """One fault kind's figures (the result's ``kinds[kind]``, with its ``name`` as typed):
    ``requested`` start ops, of which ``applied`` took effect and ``failed`` did not; the first
    distinct ``errors`` (at most :data:`MAX_ERRORS`); ``stop_failed`` stop ops that failed."""

    requested: int
    applied: int
    failed: int
    errors: list[str]
    stop_failed: int


class KindResult(KindRow):
    name: str


class WindowCounts(TypedDict):
    """What happened while one fault window was open: whether its start ``applied``, the
    ``nodes`` it hit, client completions by type (``ops``) and those on a faulted node."""

    applied: bool
    nodes: list[str]
    ops: dict[str, int]
    ops_on_faulted: dict[str, int]


def recovery_bound(test: dict[str, object]) -> float:
    """The DB's recovery bound for a run, s: test.json's recorded ``recovery.bound_s``, else its
    ``opts.recovery_time``, else :data:`DEFAULT_AFTER_S`."""
    rec, opts = test.get("recovery"), test.get("opts")
    rec = rec if isinstance(rec, dict) else {}
    opts = opts if isinstance(opts, dict) else {}
    for v in (rec.get("bound_s"), opts.get("recovery_time"), test.get("recovery_time")):
        if isinstance(v, int | float) and not isinstance(v, bool) and v >= 0:
            return float(v)
    return DEFAULT_AFTER_S


NS = 1_000_000_000


def applied(completion: Op) -> tuple[bool, str | None]:
    """``(took effect, why not)`` of a nemesis completion (rule in the module docstring)."""
    v = completion.value
    if isinstance(v, dict) and "applied" in v:
        ok = v.get("applied") is True
        return ok, None if ok else str(v.get("why") or completion.error or "did not take effect")
    if completion.error:
        return False, str(completion.error)
    return True, None


def _kind_row() -> KindRow:
    return {"requested": 0, "applied": 0, "failed": 0, "errors": [], "stop_failed": 0}


class _FaultsAcc:
    def __init__(
        self,
        run_dir: Path | None,
        after_s: float = DEFAULT_AFTER_S,
        names: Mapping[str, Sequence[str]] | None = None,
    ) -> None:
        self.run_dir = run_dir
        self.after_s = after_s
        self.names = dict(names or {})  # op kind -> the --nemesis names typed (analysis.fault_names)
        self.fw = FaultWindows()
        self.kinds: dict[str, KindRow] = {}
        self.win: dict[int, WindowCounts] = {}  # window id -> counters
        self.last_time = 0

    def step(self, op: Op) -> None:
        if op.time is not None and op.time > self.last_time:
            self.last_time = op.time
        if op.process == NEMESIS:
            n_before = len(self.fw.windows)
            inv = self.fw.step(op)
            if inv is None:
                return
            f = op.f
            kind = f.split("-", 1)[1] if "-" in f else f
            row = self.kinds.setdefault(kind, _kind_row())
            ok, why = applied(op)
            if f.startswith("start-"):
                row["requested"] += 1
                row["applied" if ok else "failed"] += 1
                if why and why not in row["errors"] and len(row["errors"]) < MAX_ERRORS:
                    row["errors"].append(why)
                if len(self.fw.windows) > n_before:
                    w = self.fw.windows[-1]
                    self.win[w.id] = {
                        "applied": ok,
                        "nodes": list(w.nodes),
                        "ops": {"ok": 0, "fail": 0, "info": 0},
                        "ops_on_faulted": {"ok": 0, "fail": 0, "info": 0},
                    }
            elif f.startswith("stop-") and not ok:
                row["stop_failed"] += 1
                if why and len(row["errors"]) < MAX_ERRORS:
                    row["errors"].append(f"stop: {why}")
            return
        if op.type == INVOKE:
            return
        for wid in self.fw.active_ids:
            c = self.win.get(wid)
            if c is None:
                continue
            c["ops"][op.type] = c["ops"].get(op.type, 0) + 1
            if op.node is not None and op.node in c["nodes"]:
                c["ops_on_faulted"][op.type] = c["ops_on_faulted"].get(op.type, 0) + 1

    def finish(self) -> dict[str, object]:

        kinds: dict[str, KindResult] = {
            k: {**self.kinds[k], "name": fault_name(k, self.names)}
            for k in sorted(self.kinds)
            if self.kinds[k]["requested"]
        }
        never = [k for k, r in kinds.items() if r["applied"] == 0]
        windows: list[dict[str, object]] = []
        for fw in self.fw.windows:
            c: Mapping[str, object] = self.win.get(fw.id) or {}
            windows.append(
                {
                    "id": fw.id,
                    "kind": fw.kind,
                    "name": fault_name(fw.kind, self.names, fw.invocation.value),
                    "start_s": round(fw.start / NS, 3),
                    "end_s": None if fw.end is None else round(fw.end / NS, 3),
                    "invoked": fw.invocation.time if fw.invocation.time is not None else fw.start,
                    "start": fw.start,
                    "end": fw.end_or(self.last_time),
                    **c,
                }
            )
        samples: list[dict[str, object]] = []
        if self.run_dir is not None:
            samples = read_leadership(self.run_dir / LEADERSHIP_FILE)
        windows = leadership_windows(windows, samples, self.after_s)
        for w in windows:
            del w["invoked"], w["start"], w["end"]
        out: dict[str, object] = {
            "valid": True,
            "kinds": kinds,
            "requested": sum(r["requested"] for r in kinds.values()),
            "applied": sum(r["applied"] for r in kinds.values()),
            "failed": sum(r["failed"] for r in kinds.values()),
            "windows": windows,
            "leadership": overall_leadership(samples),
            "attribution_s": self.after_s,
        }
        if never:
            out["valid"] = UNKNOWN
            out["cause"] = "; ".join(
                f"every requested {kinds[k]['name']} fault failed to take effect ({kinds[k]['failed']} of "
                f"{kinds[k]['requested']}): {(kinds[k]['errors'] or ['?'])[0]}"
                for k in never
            )
        out["bite"] = bite(windows, samples)
        out["summary"] = summary(out, samples)
        return out


def claim(sample: dict[str, object]) -> str | None:
    """Who claimed leadership in a sample: the node, or ``"n1+n3"`` when several nodes called
    themselves leader at once (in one term or not: see :func:`split_brain`), or None."""
    primaries = sample.get("primaries")
    if isinstance(primaries, list) and len(primaries) > 1:
        return "+".join(sorted(str(p) for p in primaries))
    ld = sample.get("leader")
    return None if ld is None else str(ld)


def _claims(inside: list[dict[str, Any]], last: str | None, end: int) -> tuple[list[str], int, int]:
    """Over samples ``inside`` (up to ``end`` ns), starting from the claim ``last``: the claims seen
    (consecutive repeats collapsed), how often the claim changed (a time without a leader is not a
    change by itself) and the ns without any claim."""
    seen: list[str] = []
    changes = 0
    leaderless_ns = 0
    for i, s in enumerate(inside):
        c = claim(s)
        if c is not None:
            if not seen or seen[-1] != c:
                seen.append(c)
            if last is not None and c != last:
                changes += 1
            last = c
        else:
            nxt = inside[i + 1]["time"] if i + 1 < len(inside) else end
            leaderless_ns += max(0, min(nxt, end) - s["time"])
    return seen, changes, leaderless_ns


def change_events(samples: list[dict[str, Any]]) -> list[tuple[int, int, int]]:
    """The whole observation's leadership events, each once: ``[(time ns, claim changes, new
    terms)]``, one per sample where the claim (:func:`claim`) differed from the last claim seen
    (a time without a leader is not a change by itself) or a term above every earlier one was
    first seen (``new terms``: how far above)."""
    out: list[tuple[int, int, int]] = []
    last: str | None = None
    top: int | None = None
    for s in samples:
        c = claim(s)
        changed = int(c is not None and last is not None and c != last)
        last = c if c is not None else last
        term = s.get("term")
        grew = 0
        if isinstance(term, int) and not isinstance(term, bool):
            grew = term - top if top is not None and term > top else 0
            top = term if top is None else max(top, term)
        if changed or grew:
            out.append((int(s["time"]), changed, grew))
    return out


def attribute(windows: list[dict[str, Any]], when: int, after_ns: int) -> tuple[int, bool] | None:
    """The one window a leadership event at ``when`` (ns) counts for, as ``(index in windows,
    after its end)``: the window in force then that began last (the newest fault), else the one
    that ended last within ``after_ns`` before it (a fault's effect outlasts it by up to the
    recovery bound), else None (the event is no fault's doing)."""
    inside = [
        (w.get("invoked", w["start"]), i)
        for i, w in enumerate(windows)
        if w.get("invoked", w["start"]) < when <= w["end"]
    ]
    if inside:
        return max(inside)[1], False
    after = [(w["end"], i) for i, w in enumerate(windows) if w["end"] < when <= w["end"] + after_ns]
    return (max(after)[1], True) if after else None


def leadership_windows(
    windows: list[dict[str, Any]], samples: list[dict[str, Any]], after_s: float = 0.0
) -> list[dict[str, object]]:
    """Add leadership figures to each window (dicts with ``start``/``end`` in ns, and optionally
    ``invoked``: when the start was invoked, default ``start``) from the observer's samples (sorted
    by ``time``). The fault acts between invocation and completion, so "before" means at or before
    ``invoked`` and "inside" after it up to ``end``. What was seen: ``leader_before`` (the last
    claim observed before), ``term_before`` (the last term observed before), ``leaders`` (claims
    seen inside, consecutive repeats collapsed; ``"n1+n3"`` while several nodes claimed at once,
    see :func:`claim`), ``terms`` (distinct terms seen inside) and ``leaderless_s`` (time inside
    with no node claiming leadership, between samples).

    What the window counts for: each leadership event of the run (:func:`change_events`) counts
    for one window only (:func:`attribute`), so overlapping windows never count one election
    twice and the windows' changes add up to at most the run's: ``leader_changes`` (claim changes
    inside the window), ``leader_changes_after`` (those within ``after_s``, the DB's recovery
    bound, after its end), ``changed_after_s`` (s after ``end`` of the first of these; None
    without one) and ``new_terms`` (terms begun inside or within the bound after: elections,
    whoever won them). Without samples the figures are None. Returns the same list."""
    if not samples:
        for w in windows:
            w.update(
                leader_before=None, term_before=None, leaders=None, leader_changes=None,
                terms=None, new_terms=None, leaderless_s=None, leader_changes_after=None,
                changed_after_s=None,
            )  # fmt: skip
        return windows
    for w in windows:
        start, end = w.get("invoked", w["start"]), w["end"]
        before = [s for s in samples if s["time"] <= start]
        inside = [s for s in samples if start < s["time"] <= end]
        leader_before = next((c for c in map(claim, reversed(before)) if c), None)
        term_before = next((s["term"] for s in reversed(before) if isinstance(s.get("term"), int)), None)
        leaders, _, leaderless_ns = _claims(inside, leader_before, end)
        w.update(
            leader_before=leader_before,
            term_before=term_before,
            leaders=leaders,
            leader_changes=0,
            terms=sorted({s["term"] for s in inside if isinstance(s.get("term"), int)}),
            new_terms=0,
            leaderless_s=round(leaderless_ns / NS, 3),
            leader_changes_after=0,
            changed_after_s=None,
        )
    after_ns = int(after_s * NS)
    for when, changes, grew in change_events(samples):
        hit = attribute(windows, when, after_ns)
        if hit is None:
            continue
        w = windows[hit[0]]
        w["new_terms"] += grew
        if not changes:
            continue
        if not hit[1]:
            w["leader_changes"] += changes
            continue
        w["leader_changes_after"] += changes
        if w["changed_after_s"] is None:
            w["changed_after_s"] = round((when - w["end"]) / NS, 3)
    return windows


def _primary_terms(sample: dict[str, object]) -> dict[str, int | None]:
    """``{node: the term it answered, or None}`` for each node of a sample that called itself leader."""
    raw = sample.get("primaries")
    got = sample.get("nodes")
    answers: dict[str, Any] = got if isinstance(got, dict) else {}
    out: dict[str, int | None] = {}
    for p in raw if isinstance(raw, list) else []:
        term = (answers.get(p) or {}).get("term")
        out[str(p)] = term if isinstance(term, int) and not isinstance(term, bool) else None
    return out


def same_term(primaries: dict[str, int | None]) -> bool:
    """Whether two of these self-declared leaders share a term (Raft's Election Safety broken),
    or their terms are not known so they cannot be told apart (a DB without terms)."""
    known = [t for t in primaries.values() if t is not None]
    return len(known) != len(set(known)) or len(primaries) - len(known) >= 2


def _intervals(samples: list[dict[str, object]], split: bool) -> list[dict[str, object]]:
    """The intervals in which more than one node called itself leader, with (``split``) or
    without two of them in one term (:func:`same_term`)."""
    out: list[dict[str, Any]] = []
    cur: dict[str, Any] | None = None
    for i, s in enumerate(samples):
        primaries = _primary_terms(s)
        if len(primaries) > 1 and same_term(primaries) == split:
            if cur is None:
                cur = {"start": s["time"], "nodes": set(), "terms": set()}
            cur["nodes"].update(primaries)
            cur["terms"].update(t for t in primaries.values() if t is not None)
            cur["end"] = samples[i + 1]["time"] if i + 1 < len(samples) else s["time"]
        elif cur is not None:
            out.append(cur)
            cur = None
    if cur is not None:
        out.append(cur)
    return [
        {
            "start_s": round(c["start"] / NS, 3),
            "end_s": round(c["end"] / NS, 3),
            "duration_s": round((c["end"] - c["start"]) / NS, 3),
            "nodes": sorted(c["nodes"]),
            "terms": sorted(c["terms"]),
        }
        for c in out
    ]


def split_brain(samples: list[dict[str, object]]) -> list[dict[str, object]]:
    """Every interval in which two nodes called themselves leader in the same term (or without
    terms to tell them apart): ``{"start_s", "end_s", "duration_s", "nodes", "terms"}``, from the
    first sample showing it to the first sample that no longer does (the last sample when none
    follows). Two leaders in different terms are legal in Raft (a deposed leader that has not
    heard of the new term yet): those are :func:`stale_leaders`."""
    return _intervals(samples, True)


def stale_leaders(samples: list[dict[str, object]]) -> list[dict[str, object]]:
    """Every interval in which several nodes called themselves leader, each in a term of its own
    (a deposed leader not yet told of the newer term), shaped as :func:`split_brain`'s."""
    return _intervals(samples, False)


def overall_leadership(samples: list[dict[str, object]]) -> dict[str, object]:
    """The whole observation: ``samples``, ``leaders`` (the claims, collapsed sequence; see
    :func:`claim`), ``leader_changes``, ``terms`` ([first seen, last seen]; empty for a DB
    without terms), ``split_brain`` (:func:`split_brain`), ``stale_leaders``
    (:func:`stale_leaders`)."""
    leaders: list[str] = []
    for s in samples:
        c = claim(s)
        if c is not None and (not leaders or leaders[-1] != c):
            leaders.append(c)
    terms = [s["term"] for s in samples if isinstance(s.get("term"), int)]
    return {
        "samples": len(samples),
        "leaders": leaders,
        "leader_changes": max(0, len(leaders) - 1),
        "terms": [terms[0], terms[-1]] if terms else [],
        "split_brain": split_brain(samples),
        "stale_leaders": stale_leaders(samples),
    }


def bite(windows: list[dict[str, Any]], samples: list[dict[str, object]]) -> dict[str, object]:
    """Whether the faults disturbed leadership: ``windows_with_leader_change`` (another node led,
    during the window or within the recovery bound after it), ``windows_with_election`` (a new
    term or another leader), ``changed_leadership`` (any of them); ``observed`` is false without
    samples."""

    def moved(w: dict[str, Any]) -> bool:
        return (w.get("leader_changes") or 0) > 0 or (w.get("leader_changes_after") or 0) > 0

    changed = [w for w in windows if moved(w)]
    elected = [w for w in windows if moved(w) or (w.get("new_terms") or 0) > 0]
    return {
        "observed": bool(samples),
        "windows": len(windows),
        "windows_with_leader_change": len(changed),
        "windows_with_election": len(elected),
        "changed_leadership": bool(elected),
    }


def _terms_text(terms: list[object]) -> str:
    return "-".join(str(t) for t in dict.fromkeys(terms))


def _terms_clause(sb: dict[str, Any]) -> str:
    terms = sb.get("terms") or []
    return f" (term{'s' if len(terms) != 1 else ''} {', '.join(map(str, terms))})" if terms else ""


def split_brain_text(intervals: list[dict[str, Any]]) -> str:
    """``"split brain: n1, n3 leaders at once in one term for 12.0 s from 40.1 s (term 3)"``, one
    clause per interval ('' when none)."""
    if not intervals:
        return ""
    parts = []
    for sb in intervals:
        how = "in one term" if sb.get("terms") else "with no term to tell them apart"
        parts.append(
            f"{', '.join(sb['nodes'])} leaders at once {how} for {sb['duration_s']:.1f} s from "
            f"{sb['start_s']:.1f} s{_terms_clause(sb)}"
        )
    return "split brain: " + "; ".join(parts)


def stale_leader_text(intervals: list[dict[str, Any]]) -> str:
    """``"a stale leader for 11.8 s from 40.1 s (n1, n3; terms 1, 2)"``, one clause per interval
    ('' when none): a deposed leader still calling itself leader beside the newer term's, which
    Raft allows until it hears of that term."""
    parts = []
    for sb in intervals:
        terms = ", ".join(map(str, sb.get("terms") or []))
        parts.append(
            f"a stale leader for {sb['duration_s']:.1f} s from {sb['start_s']:.1f} s "
            f"({', '.join(sb['nodes'])}; terms {terms})"
        )
    return "; ".join(parts)


def summary(result: dict[str, Any], samples: list[dict[str, object]]) -> str:
    """One plain sentence: faults applied of requested, any split brain or stale leader, and
    whether and when leadership changed ("no leader change in the run" only when none was observed at all)."""
    head = (
        f"{result['applied']} of {result['requested']} requested faults took effect"
        if result["requested"]
        else "no faults were requested"
    )
    if result["failed"]:
        failed = ", ".join(
            f"{r.get('name') or k} {r['failed']}" for k, r in result["kinds"].items() if r["failed"]
        )
        head += f" (failed: {failed})"
    if not samples:
        return head + ("; leadership was not observed" if result["requested"] else "")
    b = result["bite"]
    lead = result["leadership"]
    after = result.get("attribution_s") or 0.0
    parts = [head]
    if lead.get("split_brain"):
        parts.append(split_brain_text(lead["split_brain"]))
    if lead.get("stale_leaders"):
        parts.append(stale_leader_text(lead["stale_leaders"]))
    terms = _terms_text(lead["terms"])
    if not lead["leader_changes"]:
        who = ", ".join(lead["leaders"]) or "none"
        parts.append(f"no leader change in the run (leader {who}{f', term {terms}' if terms else ''})")
    elif not b["changed_leadership"] and result["requested"]:
        parts.append(
            f"{lead['leader_changes']} leader change{'s' if lead['leader_changes'] != 1 else ''} in the "
            f"run ({' -> '.join(lead['leaders'])}), none during a fault or within {after:g} s after one"
        )
    elif not result["requested"]:
        parts.append(f"{lead['leader_changes']} leader changes in the run: {' -> '.join(lead['leaders'])}")
    else:
        parts.append(
            f"elections in {b['windows_with_election']} of {b['windows']} fault windows, another leader "
            f"in {b['windows_with_leader_change']} ({lead['leader_changes']} leader changes in the run: "
            f"{' -> '.join(lead['leaders'])}{f'; terms {terms}' if terms else ''}); a change within "
            f"{after:g} s after a fault counts for it"
        )
    return "; ".join(parts)


class FaultsChecker(StreamChecker):
    """Requested / applied / failed faults per kind and leadership per fault window (module
    docstring). Options: ``run_dir`` (where ``leadership.jsonl`` is; :meth:`check` uses the
    history's directory)."""

    name = "faults"

    def begin(self, test: dict[str, object], opts: dict[str, Any]) -> _FaultsAcc:
        run_dir = opts.get("run_dir")
        return _FaultsAcc(Path(run_dir) if run_dir else None, recovery_bound(test), fault_names(test))

    def check(
        self, test: dict[str, object], history_path: Path, opts: dict[str, object]
    ) -> dict[str, object]:
        return super().check(
            test, history_path, {**opts, "run_dir": opts.get("run_dir") or Path(history_path).parent}
        )
