"""Leadership transfer: ask the leader to hand leadership to another node, through the DB's
``leader-transfer`` capability (:class:`chaos.control.db.LeaderTransfer`; Raft's TimeoutNow,
Ongaro's thesis section 3.10).

``kill-leader``, ``pause-leader`` and ``partition-leader`` are the kill, pause and partition
nemeses aimed at the node the DB reports as leader (``primaries``); see
:mod:`chaos.nemesis.process` and :mod:`chaos.nemesis.partition`.

``start-leader-transfer``: ask the current leader to hand leadership to another node (random, or
``{"to": "n3"}``; ``--nemesis-opt transfer_targets=behind`` aims each transfer at the member whose
log ends furthest behind, ``transfer_targets=random,behind`` draws one of the two per transfer: see
:data:`TRANSFER_TARGETS`); completion ``{"from": leader, "to": node, "outcome": "ok"|"fail"|"info",
"code": the DB's response code, "error": text}`` or ``{"from": null, "error": "no leader"}``.
``stop-leader-transfer`` does nothing (a transfer is instantaneous) and completes with the leader the
DB reports then: ``{"leader": node | null}``. The leader is the ``leader`` target's
(:func:`chaos.nemesis.base.leader_choice`); when several primaries of unknown terms remain, no
transfer is asked (not applied) and the values carry ``leader_choice``. A start is ``applied`` only when the leader answered
ok (its new leader took over); no leader, a refusal (e.g. the target is down or behind) or an
indeterminate answer give ``applied: false`` with ``why``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from chaos.control.test import Test
from chaos.history.op import Op
from chaos.nemesis.base import NemesisKind, NoState, complete, leader_choice, node_names, not_applied, outcome

TRANSFER_TARGETS = ("random", "behind")
"""The ``transfer_targets`` a transfer may aim at: ``random``, any other member; ``behind``, the
member whose log ends furthest behind among those answering the DB's optional
``log_positions(control)`` (:class:`chaos.control.db.LeaderTransfer`; ties broken at random), so
the leader must bring it up to date first (Raft thesis 3.10: the transferee must be caught up) or
refuse. Without log positions, or when no other member answers, a ``behind`` transfer goes to a
random member and says so (``target``: ``"random (no log positions)"``)."""


class LeaderTransferNemesis(NoState):
    """Leadership transfer through ``test.db.transfer_leadership(control, leader, to)``; each
    transfer without an explicit ``to`` aims at one of ``targets`` (:data:`TRANSFER_TARGETS`),
    drawn per transfer. ValueError for an unknown target."""

    kind = "leader-transfer"

    def __init__(self, targets: Sequence[str] = ("random",)) -> None:
        bad = [t for t in targets if t not in TRANSFER_TARGETS]
        if bad or not targets:
            raise ValueError(
                f"transfer_targets {list(targets)}: expected one or more of {', '.join(TRANSFER_TARGETS)}"
            )
        self.targets = tuple(targets)

    def _target(self, test: Test, leader: str, names: list[str]) -> tuple[str, dict[str, object]]:
        """The member to hand leadership to, and what the completion records of the choice."""
        others = [n for n in names if n != leader]
        mode = self.targets[0] if len(self.targets) == 1 else test.rng.choice(self.targets)
        if not others:
            return leader, {}
        if mode == "behind":
            ask = getattr(test.db, "log_positions", None)
            positions = dict(ask(test.control)) if callable(ask) else {}
            known = {n: int(positions[n]) for n in others if isinstance(positions.get(n), int)}
            if known:
                low = min(known.values())
                to = test.rng.choice(sorted(n for n, v in known.items() if v == low))
                return to, {"target": "behind", "log_positions": positions}
            return test.rng.choice(others), {"target": "random (no log positions)"}
        return test.rng.choice(others), ({"target": "random"} if len(self.targets) > 1 else {})

    def fs(self) -> set[str]:
        return {"start-leader-transfer", "stop-leader-transfer"}

    def invoke(self, test: Test, op: Op) -> Op:
        leaders, choice = leader_choice(test)
        note = {"leader_choice": choice} if len(choice["primaries"]) > 1 else {}
        leader = leaders[0] if len(leaders) == 1 else None
        if op.f == "stop-leader-transfer":
            return complete(op, outcome({"leader": leader, **note}, True))
        if op.f != "start-leader-transfer":
            raise ValueError(f"leader-transfer nemesis: unexpected f {op.f!r}")
        names = node_names(test)
        if len(leaders) > 1:  # several primaries of unknown terms: no one leader to ask
            why = f"no single leader: {choice['why']}"
            return not_applied(op, why, **{"from": None, "to": None, "error": why, **note})
        if leader is None:
            return not_applied(op, "no leader", **{"from": None, "to": None, "error": "no leader"})
        to = op.value.get("to") if isinstance(op.value, dict) else None
        chosen: dict[str, object] = {}
        if to is None:
            to, chosen = self._target(test, leader, names)
        elif to not in names:
            raise ValueError(f"leader-transfer target {to!r}: expected one of {names}")
        transfer = getattr(test.db, "transfer_leadership", None)
        if not callable(transfer):  # chaos run refuses the nemesis for such a DB first
            return not_applied(op, "the DB has no leader-transfer capability", **{"from": leader, "to": to})
        r = dict(transfer(test.control, leader, to))
        value = {
            "from": leader,
            "to": to,
            "outcome": r.get("outcome"),
            "code": r.get("code"),
            "error": r.get("error"),
            **chosen,
            **note,
        }
        if to == leader:
            return complete(op, outcome(value, False, f"{to} is already the leader"))
        why = f"the leader answered {r.get('outcome')} (code {r.get('code')}): {r.get('error') or 'no error text'}"
        return complete(op, outcome(value, r.get("outcome") == "ok", why))


def _build(chosen: Any, opts: Mapping[str, Any]) -> Any:
    targets = opts.get("transfer_targets")
    return LeaderTransferNemesis(tuple(targets) if targets else ("random",)), None, None


NEMESIS = NemesisKind(
    names={
        "leader-transfer": "ask the leader to hand leadership to a random node (transfer_targets=behind: "
        "to the member furthest behind)"
    },
    build=_build,
    requires={"leader-transfer": frozenset({"primary", "leader-transfer"})},
    options={"transfer_targets": "list"},
    colours={"leader-transfer": "#7b4173"},
    verbs={"leader-transfer": {"start": "{nodes} leadership transferred"}},
)
"""The leadership fault module (``chaos.nemeses`` entry point ``leadership``): nothing to heal, a
transfer leaves no state on a node."""
