"""`chaos gate`'s simulation row: the generic gate asks the DB plug-in for its campaign rows
(``gate_campaign``), DLedger answers with a swarm `chaos sim` campaign; a DB without the attribute
adds nothing."""

from __future__ import annotations

from chaos.runner.gate import db_campaign_rows, threshold_failures
from chaos_dledger.sim import gate_campaign


def test_a_db_without_a_campaign_adds_no_row() -> None:
    assert db_campaign_rows(["--db", "chaos.control.db:NoopDB"], "store") == []


def test_dledger_adds_a_simulation_row_with_its_verdict(tmp_path, capsys) -> None:  # type: ignore[no-untyped-def]
    rows = gate_campaign(str(tmp_path), seeds=3, jobs=1)
    # the campaign measured the server code's coverage (chaos.history.codecov) into the store
    (campaign,) = (tmp_path / "sim-campaigns").iterdir()
    assert (campaign / "coverage.json").is_file() and (campaign / "unreached.txt").is_file()
    assert "system under test: " in capsys.readouterr().err
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

    seen: list[tuple[str, str | None]] = []

    def campaign(store: str, master: str | None = None) -> list[dict[str, str]]:
        seen.append((store, master))
        return [{"run": "sim row"}]

    monkeypatch.setattr(sim, "gate_campaign", campaign)
    run_args = ["--time-limit", "5", "--db", "chaos_dledger.db:DLedgerDB"]
    rows = db_campaign_rows(run_args, "my-store")
    assert rows == [{"run": "sim row"}] and seen == [("my-store", None)]
    db_campaign_rows(run_args, "my-store", "spark://m:7077")  # a master the gate was given
    assert seen[-1] == ("my-store", "spark://m:7077")


def test_a_plugin_campaign_without_a_master_parameter_still_runs_without_one(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    from chaos.control.db import NoopDB

    monkeypatch.setattr(NoopDB, "gate_campaign", staticmethod(lambda store: [{"run": store}]), raising=False)
    assert db_campaign_rows(["--db", "chaos.control.db:NoopDB"], "s") == [{"run": "s"}]


def test_damage_beyond_repair_is_unknown_with_its_cause_not_a_liveness_failure(tmp_path) -> None:  # type: ignore[no-untyped-def]
    from chaos.history.checkers.liveness import LivenessChecker

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


def test_the_summary_files_say_what_the_gate_table_says(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """The campaign row joins summary.json and index.html, counted as a campaign, not a run, and
    its verdict joins the overall one (a failing campaign makes the summary invalid)."""
    import json

    from chaos.history.spark.pipeline import add_runs, write_summary

    run = {
        "run": "r1",
        "dir": str(tmp_path / "r1"),
        "workload": "register",
        "nemesis": "kill",
        "valid": True,
        "failures": [],
        "ops": 10,
        "ok_rate": 1.0,
        "p99_ms": 2.0,
        "max_unavailable_s": 0.5,
        "faults": None,
    }
    summary = {"valid": True, "runs": [run], "matrix": [], "timings": {}, "master": "local[2]"}
    write_summary(summary, tmp_path)
    summary["out"] = str(tmp_path)
    sim_row = dict(
        run,
        run="chaos sim --seeds 300 (simulation, swarm)",
        dir=None,
        valid=False,
        failures=["seed 7: replay with chaos sim --seed 7"],
        simulated=True,
    )
    add_runs(summary, [sim_row])
    assert summary["valid"] is False
    doc = json.loads((tmp_path / "summary.json").read_text())
    assert doc["valid"] is False and [r["run"] for r in doc["runs"]] == ["r1", sim_row["run"]]
    page = (tmp_path / "index.html").read_text()
    assert "INVALID: 1 run and 1 simulation campaign" in page
    assert "seed 7: replay with chaos sim --seed 7" in page and 'href="None' not in page
