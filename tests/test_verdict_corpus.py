"""The verdict corpus (tests/data/verdicts/): ``chaos check`` gives each case its known verdict.

Data-driven from ``tests/data/verdicts/manifest.json``: each case's expected verdict and exit status,
for malformed input the line the one-line message must name. ``chaos`` runs as a real subprocess, so
the exit status and stderr are what a user gets. Other commands (``chaos analyze``, ``chaos gate``)
can reuse :data:`CASES`, :func:`copy_case` and :func:`run_chaos` to hold them to the same verdicts.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

CORPUS = Path(__file__).resolve().parent / "data" / "verdicts"
MANIFEST: dict[str, Any] = json.loads((CORPUS / "manifest.json").read_text())
CASES: list[dict[str, Any]] = MANIFEST["cases"]
# the first word of `chaos check`'s first line for each verdict
WORDS = {"valid": "valid", "invalid": "INVALID", "unknown": "unknown"}


def copy_case(case: dict[str, Any], dest: Path) -> Path:
    """A copy of the case under ``dest`` (checking a run directory rewrites its results.json)."""
    src = CORPUS / case["name"]
    out = dest / case["name"]
    if src.is_dir():
        shutil.copytree(src, out)
    else:
        shutil.copyfile(src, out)
    return out


def run_chaos(*args: str | Path) -> subprocess.CompletedProcess[str]:
    """``chaos ARGS...`` as a subprocess (the installed script, else ``python -m chaos.cli``)."""
    exe = shutil.which("chaos")
    argv = [exe] if exe else [sys.executable, "-m", "chaos.cli"]
    return subprocess.run(
        [*argv, *map(str, args)], capture_output=True, text=True, errors="replace", timeout=600
    )


def checker_lines(stdout: str) -> dict[str, tuple[str, str]]:
    """``{checker: (verdict word, detail)}`` from the summary ``chaos check`` prints."""
    out = {}
    for line in stdout.splitlines():
        m = re.match(r"^  (\S+)\s+(valid|INVALID|unknown)\b\s*(.*)$", line)
        if m:
            out[m.group(1)] = (m.group(2), m.group(3))
    return out


def test_manifest_covers_every_case_and_kind() -> None:
    """Every file here is a case, and the corpus holds each kind of verdict the issue names."""
    names = {c["name"] for c in CASES}
    on_disk = {
        p.name for p in CORPUS.iterdir() if p.name not in ("manifest.json", "README.md", "make_corpus.py")
    }
    assert names == on_disk
    assert {c["verdict"] for c in CASES} == {"valid", "invalid", "unknown", "malformed"}
    for c in CASES:
        assert c["exit"] == {"valid": 0, "invalid": 1, "unknown": 2, "malformed": 254}[c["verdict"]], c
        assert c["kind"] == ("run" if (CORPUS / c["name"]).is_dir() else "file"), c


@pytest.mark.parametrize("case", CASES, ids=[c["name"] for c in CASES])
def test_chaos_check_gives_the_known_verdict(case: dict[str, Any], tmp_path: Path) -> None:
    path = copy_case(case, tmp_path)
    r = run_chaos("check", *case["args"], path)
    shown = f"exit {r.returncode}\nstdout:\n{r.stdout}\nstderr:\n{r.stderr}"
    assert "Traceback" not in r.stdout + r.stderr, shown
    assert r.returncode == case["exit"], shown
    if case["verdict"] == "malformed":
        lines = r.stderr.splitlines()
        assert len(lines) == 1, shown
        assert str(path) in lines[0], shown
        if case.get("line") is not None:
            assert f": line {case['line']}:" in lines[0], shown
        assert r.stdout == "", shown
        if case["kind"] == "run":
            assert not (path / "results.json").exists()
        return
    last = r.stdout.splitlines()[-1]  # the verdict comes last, after the summary (issue 25)
    assert last.startswith(f"{WORDS[case['verdict']]}: {path}"), shown
    checkers = checker_lines(r.stdout)
    if case["verdict"] == "valid":
        assert checkers and all(v == "valid" for v, _ in checkers.values()), shown
    if case.get("checker"):
        assert checkers[case["checker"]][0] == "INVALID", shown
    if case["verdict"] == "unknown":
        assert any(v == "unknown" for v, _ in checkers.values()), shown
        assert not any(v == "INVALID" for v, _ in checkers.values()), shown
    if case["kind"] == "run":
        results = json.loads((path / "results.json").read_text())
        assert results["valid"] == {"valid": True, "invalid": False, "unknown": "unknown"}[case["verdict"]]
        linear = results["checkers"].get("linear") or {}
        for key in case.get("failures", []):
            assert key in linear["failures"], linear
        if case.get("keys"):
            assert sorted(linear["keys"]) == sorted(case["keys"]), linear
    else:
        for key in case.get("failures", []):
            assert re.search(rf"not linearizable: key .*\b{re.escape(key)}\b", r.stdout), shown
