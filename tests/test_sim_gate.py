"""`chaos gate`'s simulation row: the generic gate asks the DB plug-in for its campaign rows
(``gate_campaign``), DLedger answers with a swarm `chaos sim` campaign; a DB without the attribute
adds nothing."""

from __future__ import annotations

from chaos.history.gate import db_campaign_rows, threshold_failures
from chaos_dledger.sim import gate_campaign


def test_a_db_without_a_campaign_adds_no_row() -> None:
    assert db_campaign_rows(["--db", "chaos.cluster.db:NoopDB"], "store") == []


def test_dledger_adds_a_simulation_row_with_its_verdict() -> None:
    rows = gate_campaign("store", seeds=3, jobs=1)
    assert len(rows) == 1
    row = rows[0]
    assert row["simulated"] is True and row["valid"] is True and row["ops"] > 0
    assert row["run"].startswith("chaos sim --seeds 3")
    # the live-run thresholds do not judge a simulated row; its verdict does
    summary = {"runs": [row]}
    assert threshold_failures(summary, max_p99_ms=1.0, max_unavailable_s=0.1, min_ok_rate=1.0) == []
    bad = dict(row, valid=False, failures=["seed 7: replay with chaos sim --seed 7"])
    fails = threshold_failures({"runs": [bad]})
    assert len(fails) == 1 and fails[0].kind == "invalid"


def test_the_gate_finds_dledgers_campaign_through_its_db_plugin(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    import chaos_dledger.sim as sim

    seen: list[str] = []

    def campaign(store: str) -> list[dict[str, str]]:
        seen.append(store)
        return [{"run": "sim row"}]

    monkeypatch.setattr(sim, "gate_campaign", campaign)
    rows = db_campaign_rows(["--time-limit", "5", "--db", "chaos_dledger.db:DLedgerDB"], "my-store")
    assert rows == [{"run": "sim row"}] and seen == ["my-store"]


def test_damage_beyond_repair_is_unknown_with_its_cause_not_a_liveness_failure(tmp_path) -> None:  # type: ignore[no-untyped-def]
    from chaos.history.liveness import LivenessChecker

    base = {
        "recovered": False,
        "bound_s": 30.0,
        "waited_s": 30.0,
        "problems": ["no node claims to be leader"],
    }
    hist = tmp_path / "history.jsonl"
    hist.write_text("")
    plain = LivenessChecker().check({"recovery": base}, hist, {})
    assert plain["valid"] is False  # a cluster that just did not recover fails
    why = "n1, n2, n3 repair damaged committed prefixes and may not vote; 2 of 5 members can vote"
    beyond = LivenessChecker().check({"recovery": {**base, "beyond_repair": why}}, hist, {})
    assert beyond["valid"] == "unknown" and beyond["cause"] == f"damage beyond repair: {why}"
