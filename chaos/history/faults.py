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
window the leader at its start, the leaders seen, ``leader_changes``, the terms, the time without a
leader, and the client ops completed in the window (all, and those on the faulted nodes). The
result's ``bite`` says plainly whether any fault changed leadership. This part never changes the
verdict.

Result (``results.json`` ``checkers.faults``)::

    {"valid": true | "unknown", "cause": str (when unknown),
     "kinds": {"<kind>": {"requested": n, "applied": n, "failed": n, "errors": [str, ...],
                          "stop_failed": n}},
     "requested": n, "applied": n, "failed": n,
     "windows": [{"id", "kind", "start_s", "end_s", "applied", "nodes", "leader_before",
                  "term_before", "leaders", "leader_changes", "terms", "new_terms",
                  "leaderless_s", "ops": {"ok", "fail", "info"}, "ops_on_faulted": {...}}],
     "leadership": {"samples": n, "leaders": [...], "leader_changes": n, "terms": [first, last]},
     "bite": {"observed": bool, "windows": n, "windows_with_leader_change": n,
              "windows_with_election": n, "changed_leadership": bool},
     "summary": str}
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from chaos.history.analysis import FaultWindows
from chaos.history.op import INVOKE, NEMESIS, Op
from chaos.history.verdict import UNKNOWN, StreamChecker

MAX_ERRORS = 10  # distinct reasons kept per kind
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


def faulted_nodes(value: Any) -> list[str]:
    """The nodes a fault acted on, from its completion value: ``killed``, ``nodes`` (a list, or a
    ``{node: ...}`` object), a grudge's nodes that drop something, or a transfer's ``from``/``to``."""
    if not isinstance(value, dict):
        return []
    for key in ("killed", "restarted", "nodes"):
        v = value.get(key)
        if isinstance(v, list) and v:
            return sorted(str(x) for x in v)
        if isinstance(v, dict) and v:
            return sorted(str(x) for x in v)
    grudge = value.get("grudge")
    if isinstance(grudge, dict):
        return sorted(n for n, drops in grudge.items() if drops)
    return sorted({str(value[k]) for k in ("from", "to") if value.get(k)})


def _kind_row() -> dict[str, Any]:
    return {"requested": 0, "applied": 0, "failed": 0, "errors": [], "stop_failed": 0}


class _FaultsAcc:
    def __init__(self, run_dir: Path | None) -> None:
        self.run_dir = run_dir
        self.fw = FaultWindows()
        self.kinds: dict[str, dict[str, Any]] = {}
        self.win: dict[int, dict[str, Any]] = {}  # window id -> counters
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
                        "nodes": faulted_nodes(op.value),
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

    def finish(self) -> dict[str, Any]:
        from chaos.history.leadership import LEADERSHIP_FILE, read_leadership

        kinds = {k: self.kinds[k] for k in sorted(self.kinds) if self.kinds[k]["requested"]}
        never = [k for k, r in kinds.items() if r["applied"] == 0]
        windows: list[dict[str, Any]] = []
        for fw in self.fw.windows:
            c = self.win.get(fw.id, {})
            windows.append(
                {
                    "id": fw.id,
                    "kind": fw.kind,
                    "start_s": round(fw.start / NS, 3),
                    "end_s": None if fw.end is None else round(fw.end / NS, 3),
                    "invoked": fw.invocation.time if fw.invocation.time is not None else fw.start,
                    "start": fw.start,
                    "end": fw.end_or(self.last_time),
                    **c,
                }
            )
        samples: list[dict[str, Any]] = []
        if self.run_dir is not None:
            samples = read_leadership(self.run_dir / LEADERSHIP_FILE)
        windows = leadership_windows(windows, samples)
        for w in windows:
            del w["invoked"], w["start"], w["end"]
        out: dict[str, Any] = {
            "valid": True,
            "kinds": kinds,
            "requested": sum(r["requested"] for r in kinds.values()),
            "applied": sum(r["applied"] for r in kinds.values()),
            "failed": sum(r["failed"] for r in kinds.values()),
            "windows": windows,
            "leadership": overall_leadership(samples),
        }
        if never:
            out["valid"] = UNKNOWN
            out["cause"] = "; ".join(
                f"every requested {k} fault failed to take effect ({kinds[k]['failed']} of "
                f"{kinds[k]['requested']}): {(kinds[k]['errors'] or ['?'])[0]}"
                for k in never
            )
        out["bite"] = bite(windows, samples)
        out["summary"] = summary(out, samples)
        return out


def leadership_windows(windows: list[dict[str, Any]], samples: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Add leadership figures to each window (dicts with ``start``/``end`` in ns, and optionally
    ``invoked``: when the start was invoked, default ``start``) from the observer's samples (sorted
    by ``time``). The fault acts between invocation and completion, so "before" means at or before
    ``invoked`` and "inside" after it up to ``end``: ``leader_before`` (the last leader observed
    before), ``term_before`` (the last term observed before), ``leaders`` (leaders seen inside,
    consecutive repeats collapsed), ``leader_changes`` (times the observed leader differed from
    the previous one seen, from ``leader_before`` on; a time without a leader is not a change by
    itself), ``terms`` (distinct terms seen inside), ``new_terms`` (highest term inside minus
    ``term_before``: elections, whoever won them) and ``leaderless_s`` (time inside with no node
    claiming leadership, between samples). Without samples the figures are None. Returns the
    same list."""
    for w in windows:
        if not samples:
            w.update(
                leader_before=None, term_before=None, leaders=None, leader_changes=None,
                terms=None, new_terms=None, leaderless_s=None,
            )  # fmt: skip
            continue
        start, end = w.get("invoked", w["start"]), w["end"]
        before = [s for s in samples if s["time"] <= start]
        inside = [s for s in samples if start < s["time"] <= end]
        leader_before = next((s["leader"] for s in reversed(before) if s.get("leader")), None)
        term_before = next((s["term"] for s in reversed(before) if isinstance(s.get("term"), int)), None)
        leaders: list[str] = []
        changes = 0
        last = leader_before
        leaderless_ns = 0
        for i, s in enumerate(inside):
            ld = s.get("leader")
            if ld is not None:
                if not leaders or leaders[-1] != ld:
                    leaders.append(ld)
                if last is not None and ld != last:
                    changes += 1
                last = ld
            else:
                nxt = inside[i + 1]["time"] if i + 1 < len(inside) else end
                leaderless_ns += max(0, min(nxt, end) - s["time"])
        terms = sorted({s["term"] for s in inside if isinstance(s.get("term"), int)})
        new_terms = (max(terms) - term_before) if terms and isinstance(term_before, int) else 0
        w.update(
            leader_before=leader_before,
            term_before=term_before,
            leaders=leaders,
            leader_changes=changes,
            terms=terms,
            new_terms=max(0, new_terms),
            leaderless_s=round(leaderless_ns / NS, 3),
        )
    return windows


def overall_leadership(samples: list[dict[str, Any]]) -> dict[str, Any]:
    """The whole observation: ``samples``, ``leaders`` (collapsed sequence), ``leader_changes``,
    ``terms`` ([first seen, last seen])."""
    leaders: list[str] = []
    for s in samples:
        ld = s.get("leader")
        if ld is not None and (not leaders or leaders[-1] != ld):
            leaders.append(ld)
    terms = [s["term"] for s in samples if isinstance(s.get("term"), int)]
    return {
        "samples": len(samples),
        "leaders": leaders,
        "leader_changes": max(0, len(leaders) - 1),
        "terms": [terms[0], terms[-1]] if terms else [],
    }


def bite(windows: list[dict[str, Any]], samples: list[dict[str, Any]]) -> dict[str, Any]:
    """Whether the faults disturbed leadership: ``windows_with_leader_change`` (another node led),
    ``windows_with_election`` (a new term or another leader), ``changed_leadership`` (any election
    in a fault window); ``observed`` is false without samples."""
    changed = [w for w in windows if (w.get("leader_changes") or 0) > 0]
    elected = [w for w in windows if (w.get("leader_changes") or 0) > 0 or (w.get("new_terms") or 0) > 0]
    return {
        "observed": bool(samples),
        "windows": len(windows),
        "windows_with_leader_change": len(changed),
        "windows_with_election": len(elected),
        "changed_leadership": bool(elected),
    }


def summary(result: dict[str, Any], samples: list[dict[str, Any]]) -> str:
    """One plain sentence: faults applied of requested, and whether leadership ever changed."""
    if not result["requested"]:
        return "no faults were requested"
    head = f"{result['applied']} of {result['requested']} requested faults took effect"
    if result["failed"]:
        failed = ", ".join(f"{k} {r['failed']}" for k, r in result["kinds"].items() if r["failed"])
        head += f" (failed: {failed})"
    if not samples:
        return head + "; leadership was not observed"
    b = result["bite"]
    lead = result["leadership"]
    if not b["changed_leadership"]:
        who = ", ".join(lead["leaders"]) or "none"
        terms = "-".join(str(t) for t in dict.fromkeys(lead["terms"])) or "?"
        return head + f"; the faults never changed leadership (leader {who}, term {terms})"
    return (
        head + f"; elections in {b['windows_with_election']} of {b['windows']} fault windows, "
        f"another leader in {b['windows_with_leader_change']} ({lead['leader_changes']} leader changes "
        f"in the run: {' -> '.join(lead['leaders'])}; terms {'-'.join(str(t) for t in lead['terms'])})"
    )


class FaultsChecker(StreamChecker):
    """Requested / applied / failed faults per kind and leadership per fault window (module
    docstring). Options: ``run_dir`` (where ``leadership.jsonl`` is; :meth:`check` uses the
    history's directory)."""

    name = "faults"

    def begin(self, test: dict[str, Any], opts: dict[str, Any]) -> _FaultsAcc:
        run_dir = opts.get("run_dir")
        return _FaultsAcc(Path(run_dir) if run_dir else None)

    def check(self, test: dict[str, Any], history_path: Path, opts: dict[str, Any]) -> dict[str, Any]:
        return super().check(
            test, history_path, {**opts, "run_dir": opts.get("run_dir") or Path(history_path).parent}
        )
