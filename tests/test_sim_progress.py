"""`chaos sim` shows its progress while it runs (issue 25 item 9): on a terminal (a pty here) a
progress bar with seeds done / total, seeds/s, failures so far and an ETA appears before the
campaign ends."""

from __future__ import annotations

import fcntl
import os
import pty
import re
import select
import struct
import subprocess
import sys
import termios
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.slow
def test_chaos_sim_shows_progress_on_a_terminal_before_it_ends(tmp_path: Path) -> None:
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 200, 0, 0))
    env = dict(os.environ, PYTHONPATH=str(ROOT), TERM="xterm-256color", COLUMNS="200")
    env.pop("NO_COLOR", None)
    cmd = [sys.executable, "-c", "import sys; from chaos.cli import main; sys.exit(main())"]
    cmd += ["sim", "--seeds", "50", "--jobs", "1", "--store", str(tmp_path / "store")]
    p = subprocess.Popen(cmd, stdin=slave, stdout=slave, stderr=slave, env=env, cwd=tmp_path)
    os.close(slave)
    out = b""
    progress_before_end: list[tuple[int, str]] = []
    deadline = time.monotonic() + 600
    try:
        while time.monotonic() < deadline:
            ready, _, _ = select.select([master], [], [], 1.0)
            if ready:
                try:
                    chunk = os.read(master, 65536)
                except OSError:
                    break
                if not chunk:
                    break
                out += chunk
                text = re.sub(rb"\x1b\[[0-9;?]*[A-Za-z]", b"", out).decode(errors="replace")
                for m in re.finditer(r"(\d+)/50 seeds, ([\d.-]+) seeds/s, (\d+) not valid, ETA", text):
                    if 0 < int(m[1]) < 50:  # only drawn while seeds remain
                        progress_before_end.append((int(m[1]), m[0]))
                if "seeds/s (" in text:  # the summary line: the campaign ended
                    break
            elif p.poll() is not None:
                break
        assert p.wait(timeout=60) == 0
        while select.select([master], [], [], 0.5)[0]:  # the lines after the summary's first
            try:
                chunk = os.read(master, 65536)
            except OSError:
                break
            if not chunk:
                break
            out += chunk
        text = re.sub(rb"\x1b\[[0-9;?]*[A-Za-z]", b"", out).decode(errors="replace")
    finally:
        if p.poll() is None:
            p.kill()
        os.close(master)
    text = re.sub(rb"\x1b\[[0-9;?]*[A-Za-z]", b"", out).decode(errors="replace")
    assert progress_before_end, text[-2000:]  # a bar with k/50 seeds (0 < k < 50) while running
    assert "50 seeds, 0 not valid" in text and "coverage (50 seeds" in text
