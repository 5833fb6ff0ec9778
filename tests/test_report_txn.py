"""The report's transactional section: a G-single (write skew's read-only cousin) and a G1c history
checked by Elle, drawn as cycles of labelled edges, with the anomaly counts for the verdict band."""

from __future__ import annotations

import re
from typing import Any
from xml.etree import ElementTree

from chaos.history.checkers.elle import check_ops
from chaos.history.op import Op
from chaos.history.report.txn import anomaly_band_html, cycle_svg, elle_result, txn_section_html


def _history(*txns: tuple[int, list[list[Any]], list[list[Any]]]) -> list[Op]:
    ops: list[Op] = []
    for p, inv, done in txns:
        ops.append(Op("invoke", p, "txn", inv, time=len(ops), index=len(ops)))
        ops.append(Op("ok", p, "txn", done, time=len(ops), index=len(ops)))
    return ops


def _g1c_result() -> dict[str, Any]:
    # Elle's README: T1 appends x 1 and reads y [1]; T2 appends x 2 and y 1; T3 reads x [1 2]
    ops = _history(
        (0, [["append", "x", 1], ["r", "y", None]], [["append", "x", 1], ["r", "y", [1]]]),
        (1, [["append", "x", 2], ["append", "y", 1]], [["append", "x", 2], ["append", "y", 1]]),
        (2, [["r", "x", None]], [["r", "x", [1, 2]]]),
    )
    r = check_ops(ops, "list-append", "serializable")
    assert r["valid"] is False and "G1c" in r["anomaly_types"]
    return {"valid": False, "checkers": {"elle": r}}


def test_a_g1c_cycle_is_drawn_with_its_labelled_edges() -> None:
    results = _g1c_result()
    case = elle_result(results)["anomalies"]["G1c"][0]  # type: ignore[index]
    svg = cycle_svg(case)
    root = ElementTree.fromstring(svg)  # well-formed XML
    ns = "{http://www.w3.org/2000/svg}"
    nodes = [t.text for t in root.iter(f"{ns}text") if t.text and t.text.startswith("T")]
    assert sorted(nodes) == sorted(t["name"] for t in case["cycle"])
    labels = sorted(
        t.text or "" for g in root.iter(f"{ns}g") if g.get("class") == "txn-edge" for t in g.iter(f"{ns}text")
    )
    assert labels == sorted(e["type"] for e in case["edges"]) == ["wr", "ww"]
    paths = [p for p in root.iter(f"{ns}path") if p.get("marker-end")]
    assert len(paths) == 2 and paths[0].get("d") != paths[1].get("d")  # a 2-cycle's arrows do not overlap


def test_the_section_lists_counts_transactions_and_reasons() -> None:
    results = _g1c_result()
    band = anomaly_band_html(results)
    assert "serializable" in band and re.search(r"<b>G1c</b> &times;1", band)
    section = txn_section_html(results)
    assert "<svg" in section and "append x 2, append y 1" in section and "append x 1, r y [1]" in section
    assert "-ww->" in section or "-ww-&gt;" in section  # the edge reasons, escaped
    assert "<script" not in section


def test_text_from_the_history_is_escaped() -> None:
    ops = _history(
        (0, [["append", "<x>", 1], ["r", "y", None]], [["append", "<x>", 1], ["r", "y", [1]]]),
        (1, [["append", "<x>", 2], ["append", "y", 1]], [["append", "<x>", 2], ["append", "y", 1]]),
        (2, [["r", "<x>", None]], [["r", "<x>", [1, 2]]]),
    )
    section = txn_section_html({"checkers": {"elle": check_ops(ops, "list-append", "serializable")}})
    assert "<x>" not in section and "&lt;x&gt;" in section


def test_nothing_without_an_elle_result_and_a_clean_line_for_a_valid_one() -> None:
    assert txn_section_html({"checkers": {"linear": {"valid": True}}}) == ""
    assert anomaly_band_html(None) == ""
    ops = _history(
        (0, [["append", "x", 1]], [["append", "x", 1]]), (1, [["r", "x", None]], [["r", "x", [1]]])
    )
    ok = check_ops(ops, "list-append", "serializable")
    assert ok["valid"] is True
    assert "no anomaly in 2 transactions" in anomaly_band_html({"checkers": {"elle": ok}})
