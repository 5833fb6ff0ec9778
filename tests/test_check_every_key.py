"""Every key is checked by default (issue 25, item 1): a violation on one key no longer leaves the
others "undecided"; ``--fail-fast`` stops early and says how many keys it did not check."""

from __future__ import annotations

from pathlib import Path

import pytest

from chaos.history.synth import register_history, write_run


@pytest.fixture
def bad_run(tmp_path: Path) -> tuple[Path, list[str]]:
    ops, violated = register_history(3000, keys=20, processes=6, seed=7, violations=3)
    run = write_run(tmp_path / "store", "register-synth", "20260101T000000.000", ops, {})
    return run, sorted(str(k) for k in violated)


def test_check_lists_every_non_linearizable_key_and_leaves_none_undecided(bad_run, capsys) -> None:
    from chaos.cli import main

    run, violated = bad_run
    assert len(violated) == 3
    with pytest.raises(SystemExit) as e:
        main(["check", str(run), "--workers", "1"])
    assert e.value.code == 1
    out = capsys.readouterr().out
    assert f"3 not linearizable: key {', '.join(violated)}" in out
    assert "undecided" not in out and "not checked" not in out

    from chaos.history.checkers.registry import check_run

    linear = check_run(run, workers=1)["checkers"]["linear"]
    assert sorted(linear["failures"]) == violated and linear["unknown"] == [] and "not_checked" not in linear


def test_fail_fast_stops_early_and_says_what_it_did_not_check(bad_run, capsys) -> None:
    from chaos.cli import main

    run, violated = bad_run
    with pytest.raises(SystemExit) as e:
        main(["check", str(run), "--workers", "1", "--fail-fast"])
    assert e.value.code == 1
    out = capsys.readouterr().out
    from chaos.history.store import find_run

    linear = find_run(run).load_results()["checkers"]["linear"]
    assert linear["failures"] and set(linear["failures"]) <= set(violated)
    assert linear["not_checked"] and linear["unknown"] == []
    assert f"{len(linear['not_checked'])} key(s) not checked (--fail-fast)" in out
