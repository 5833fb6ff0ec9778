"""A valid run's closing summary on an 80-column terminal (issue 35 item 8): at most 20 lines from
"Run summary" on, the verdict last; an invalid one keeps its tables. Run under a real pty, as a
person's terminal runs it."""

from __future__ import annotations

import os
import pty
import re
import shutil
import subprocess
import sys
from pathlib import Path

CORPUS = Path(__file__).resolve().parent / "data" / "verdicts"
ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]|\x1b\][^\x07]*\x07")


def _on_a_terminal(*args: str, columns: int = 80) -> tuple[int, list[str]]:
    """``chaos ARGS`` on a pseudo-terminal ``columns`` wide: exit status and the lines it showed."""
    leader, follower = pty.openpty()
    env = {**os.environ, "COLUMNS": str(columns), "LINES": "50", "TERM": "xterm"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "chaos.cli", *args], stdin=follower, stdout=follower, stderr=follower, env=env
    )
    os.close(follower)
    out = b""
    while True:
        try:
            chunk = os.read(leader, 65536)
        except OSError:  # EIO: the child closed its end
            break
        if not chunk:
            break
        out += chunk
    os.close(leader)
    code = proc.wait(timeout=300)
    text = ANSI.sub("", out.decode("utf-8", "replace")).replace("\r", "")
    return code, [line for line in text.split("\n") if line.strip()]


def test_a_valid_runs_summary_fits_an_80_column_terminal_with_the_verdict_last(tmp_path: Path) -> None:
    run = tmp_path / "run"
    shutil.copytree(CORPUS / "register-valid", run)
    code, lines = _on_a_terminal("check", str(run))
    assert code == 0, lines
    start = next(i for i, line in enumerate(lines) if line.startswith("Run summary"))
    summary = lines[start:]
    assert len(summary) <= 20, "\n".join(summary)
    # every line fits, but the verdict's: it names the run directory, however long its path
    assert all(len(line) <= 80 for line in summary[:-1]), "\n".join(summary)
    assert summary[-1].startswith("valid: "), summary[-1]
    assert not any("ops by f and type" in line for line in summary)  # the table is in the report


def test_an_invalid_runs_summary_keeps_its_ops_table(tmp_path: Path) -> None:
    run = tmp_path / "run"
    shutil.copytree(CORPUS / "register-linear-invalid", run)
    code, lines = _on_a_terminal("check", str(run))
    assert code == 1, lines
    assert any("ops by f and type" in line for line in lines)
    assert lines[-1].startswith("INVALID: "), lines[-1]
