"""The bug catalogue's patches (chaos_dledger/mutants/*.patch) stay exact: each applies without fuzz to the
current dledger package, the patched copy imports from its own directory, the shipped package is
left untouched, and the header names the class, its source and at least one configuration."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from chaos_dledger.mutants import (
    MUTANTS_DIR,
    PROJECT_ROOT,
    Mutant,
    MutantError,
    apply_mutant,
    check_imports,
    load_mutants,
    parse_mutant,
)

MUTANTS = load_mutants()
REQUIRED = {
    "ack-before-quorum",
    "follower-ack-before-fsync",
    "vote-not-persisted",
    "vote-without-log-check",
    "read-index-no-confirm",
    "lease-no-step-down",
    "figure8-old-term-commit",
    "get-uncommitted",
}


def _digest(pkg: Path) -> str:
    h = hashlib.sha256()
    for p in sorted(pkg.rglob("*.py")):
        h.update(str(p.relative_to(pkg)).encode() + p.read_bytes())
    return h.hexdigest()


def test_patches_are_package_data_of_the_glue_package() -> None:
    """The patches ship inside ``chaos_dledger`` (an installed wheel has them), not in bench/."""
    import configparser

    import chaos_dledger

    assert MUTANTS_DIR.parent == Path(chaos_dledger.__file__).resolve().parent
    cfg = configparser.ConfigParser()
    cfg.read(PROJECT_ROOT / "setup.cfg")
    patterns = [p.strip() for p in cfg["options.package_data"]["chaos_dledger"].split(",")]
    shipped = {p for pat in patterns for p in MUTANTS_DIR.parent.glob(pat)}
    assert {m.path for m in MUTANTS} <= shipped and len(MUTANTS) >= len(REQUIRED)


def test_catalogue_covers_the_issue_classes() -> None:
    names = {m.name for m in MUTANTS}
    assert REQUIRED <= names, f"missing classes: {sorted(REQUIRED - names)}"
    for m in MUTANTS:
        assert m.path.name == f"{m.name}.patch"
        assert m.bug and m.source and (m.real or m.sim)


@pytest.mark.parametrize("mutant", MUTANTS, ids=[m.name for m in MUTANTS])
def test_patch_applies_and_the_copy_imports(mutant: Mutant, tmp_path: Path) -> None:
    root = PROJECT_ROOT
    before = _digest(root / "dledger")
    dest = apply_mutant(mutant, tmp_path / "copy")
    check_imports(dest)
    for rel in mutant.files:
        assert (dest / rel).read_text() != (root / rel).read_text(), f"{rel} unchanged by {mutant.name}"
    assert _digest(root / "dledger") == before  # the shipped server is never patched


def test_drifted_patch_is_refused(tmp_path: Path) -> None:
    bad = tmp_path / "drift.patch"
    bad.write_text(
        "# class: drift\n# bug: b\n# source: s\n# real: log kill\n"
        "--- a/dledger/core/node.py\n+++ b/dledger/core/node.py\n"
        "@@ -1,3 +1,3 @@\n-no such line one\n+changed\n no such line two\n no such line three\n"
    )
    with pytest.raises(MutantError, match="does not apply"):
        apply_mutant(parse_mutant(bad), tmp_path / "copy")


def test_header_errors_name_the_file(tmp_path: Path) -> None:
    bad = tmp_path / "nohead.patch"
    bad.write_text("--- a/x\n+++ b/x\n")
    with pytest.raises(MutantError, match=r"nohead\.patch:1: header line '# class"):
        parse_mutant(bad)
