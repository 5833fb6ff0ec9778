"""Liveness after healing: did the cluster come back once the faults were gone?

The runner waits, after healing, for the DB's recovery condition within the bound the DB declares
(its ``await_recovery``, e.g. a leader, every node answering, every follower's commit index caught
up with the leader's) and records the outcome in ``test.json`` under ``"recovery"``::

    {"recovered": bool, "bound_s": float, "waited_s": float, "leader": str | None,
     "term": int | None, "commit_index": int | None, "problems": [str, ...],
     "nodes": {node: {"ok": bool, "role", "term", "leader", "commit_index", "end_index", "error"}},
     "environment": {node: [{"kind": "disk-full" | "oom" | "node-down", "evidence": str}]}}

A failed recovery whose nodes show an environment cause (a full disk, OOM kills, a node gone,
found by :mod:`chaos.cluster.environment`) that the run's nemesis did not inject on purpose is
``unknown`` with those causes quoted: an environment failure is not a verdict on the system.

This checker turns that record into a verdict, so ``chaos check`` on a stored run reproduces it (the
cluster is gone by then; the observation is the evidence). Jepsen checks liveness the same way, as
"the final reads after healing succeed" (e.g. ``jepsen.tests.cycle``'s final generator).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from chaos.history.verdict import UNKNOWN


class LivenessChecker:
    """``valid`` True when the recorded recovery succeeded, False when the cluster did not recover
    within the bound (``cause`` names what did not: no leader, nodes not answering, followers
    behind), ``unknown`` when the run recorded no recovery (it ended before healing)."""

    name = "liveness"

    def check(
        self, test: dict[str, object], history_path: Path, opts: dict[str, object]
    ) -> dict[str, object]:
        rec = test.get("recovery")
        if not isinstance(rec, dict) or not isinstance(rec.get("recovered"), bool):
            return {"valid": UNKNOWN, "error": "no recovery after healing was recorded in test.json"}
        out: dict[str, Any] = {
            "valid": rec["recovered"],
            "bound_s": rec.get("bound_s"),
            "waited_s": rec.get("waited_s"),
            "leader": rec.get("leader"),
            "term": rec.get("term"),
            "commit_index": rec.get("commit_index"),
            "problems": list(rec.get("problems") or []),
            "nodes": rec.get("nodes") or {},
        }
        if rec["recovered"]:
            out["summary"] = recovered_line(rec)
            return out
        if rec.get("beyond_repair"):
            # the DB says its data loss exceeds what its replicas can repair: not a liveness failure
            out["valid"] = UNKNOWN
            out["cause"] = f"damage beyond repair: {rec['beyond_repair']}"
            return out
        out["cause"] = (
            f"the cluster did not recover within {float(rec.get('bound_s') or 0):g} s after healing: "
            + "; ".join(out["problems"] or ["no reason recorded"])
        )
        blamed = environment_causes(rec, str(test.get("nemesis") or ""))
        if blamed:  # not the system's doing: the run says nothing of its liveness
            out["valid"] = UNKNOWN
            out["environment"] = blamed
            out["cause"] = "the environment stopped the system, not a fault the test injected: " + "; ".join(
                blamed
            )
        return out


def environment_causes(rec: dict[str, object], nemesis: str) -> list[str]:
    """The environment causes recorded with a failed recovery (``recovery.environment``:
    ``{node: [{"kind", "evidence"}]}``) that the run's nemesis did not inject on purpose (no
    nemesis name contains the cause's kind, e.g. ``disk-full``), as ``"<node>: <evidence>"``."""
    env = rec.get("environment")
    if not isinstance(env, dict):
        return []
    injected = nemesis.replace("+", ",").split(",")
    out = []
    for node, items in sorted(env.items()):
        for item in items if isinstance(items, list) else []:
            kind = str(item.get("kind") or "") if isinstance(item, dict) else ""
            if kind and not any(kind in name for name in injected):
                out.append(f"{node}: {item.get('evidence')}")
    return out


def recovered_line(rec: dict[str, Any]) -> str:
    """One line for a recovered record, naming only the fields the DB reported (``leader``,
    ``term``, ``commit_index`` are a Raft DB's; another DB may report none of them)."""
    parts = [
        f"{label} {rec[key]}"
        for key, label in (("leader", "leader"), ("term", "term"))
        if rec.get(key) is not None
    ]
    if rec.get("commit_index") is not None:
        parts.append(f"every node at commit index >= {rec['commit_index']}")
    return f"recovered in {float(rec.get('waited_s') or 0):.1f} s" + (
        ": " + ", ".join(parts) if parts else ""
    )
