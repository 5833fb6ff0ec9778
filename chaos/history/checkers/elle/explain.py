"""Explanations a person can follow (Elle's ``elle.explanation`` and the explainers in each
workload): for a cycle, its transactions named T1, T2, ... and one sentence per edge saying why it
holds; for a non-cycle anomaly, one sentence.
"""

from __future__ import annotations

from typing import Protocol

from chaos.history.checkers.elle.graph import LABELS, PROCESS, REALTIME
from chaos.history.checkers.elle.history import TxnTable


class Explainer(Protocol):
    def explain(self, table: TxnTable, a: int, b: int, label: int, name: dict[int, str]) -> str | None: ...


def edge_why(table: TxnTable, workload: Explainer, a: int, b: int, label: int, name: dict[int, str]) -> str:
    """Why ``a -label-> b``: the workload's data explainer, or process/realtime order."""
    if label == PROCESS:
        return (
            f"process {table.process[a]} ran {name[a]} and then {name[b]}, so {name[a]} -process-> {name[b]}"
        )
    if label == REALTIME:
        return (
            f"{name[a]} completed (op {table.index[a]}) before {name[b]} was invoked (op {table.invoke_index[b]}), "
            f"so {name[a]} -realtime-> {name[b]}"
        )
    why = workload.explain(table, a, b, label, name)
    lab = LABELS[label]
    if why is None:
        return f"{name[a]} -{lab}-> {name[b]}"
    return f"{why}, so {name[a]} -{lab}-> {name[b]}"


def cycle_case(
    table: TxnTable, workload: Explainer, kind: str, edges: list[tuple[int, int, int]]
) -> dict[str, object]:
    """One cycle anomaly: ``{"type", "cycle": [txn summaries], "edges": [{"from", "to", "type",
    "why"}], "conclusion", "explanation"}``. ``explanation`` is the whole story in one paragraph
    (Elle's ``elle.explanation``: who T1, T2, ... are, why each edge holds, the cycle) and does not
    repeat the anomaly's name, which its reader shows beside it once; ``conclusion`` is its last
    sentence alone, for a reader that lists the edges' ``why`` itself (the report)."""
    order = [a for a, _, _ in edges]
    name = {t: f"T{i + 1}" for i, t in enumerate(order)}
    steps = []
    for a, b, label in edges:
        steps.append(
            {
                "from": name[a],
                "to": name[b],
                "type": LABELS[label],
                "why": edge_why(table, workload, a, b, label, name),
            }
        )
    lets = "; ".join(
        f"{name[t]} = op {table.index[t]}"
        + (f" (process {table.process[t]})" if table.process[t] is not None else "")  # Elle's nil: none
        for t in order
    )
    chain = " ".join([*(f"{s['from']} -{s['type']}->" for s in steps), steps[0]["from"]])
    body = " ".join(f"{s['why']}." for s in steps)
    order_kind = kind.rsplit("-", 1)[1] if kind.endswith(("-process", "-realtime")) else ""
    also = f" and their {order_kind} order" if order_kind else ""
    conclusion = (
        f"So {chain}: a cycle, so no order of these transactions agrees with what they read and wrote{also}."
    )
    return {
        "type": kind,
        "cycle": [{"name": name[t], **table.summary(t)} for t in order],
        "edges": steps,
        "conclusion": conclusion,
        "explanation": f"Let {lets}. {body} {conclusion}",
    }
