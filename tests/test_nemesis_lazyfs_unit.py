"""The lose-unfsynced nemesis's checks that need no node: target validation, the node program's
usage line, and the shell it runs (the FUSE layer itself is tested on a real node in
tests/test_nemesis_lazyfs.py)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from chaos.nemesis.files import LAZYFS_PROGRAM, MAJORITY_FOLLOWERS, FileNemesis, mount_script, unmount_script


def test_majority_followers_is_a_lose_unfsynced_target_only() -> None:
    nem = FileNemesis(["lose-unfsynced"], lose_unfsynced_targets=[MAJORITY_FOLLOWERS, "all"])
    assert nem.lu_targets == [MAJORITY_FOLLOWERS, "all"]
    with pytest.raises(ValueError, match="file fault target 'majority-followers'"):
        FileNemesis(["truncate"], targets=[MAJORITY_FOLLOWERS])
    with pytest.raises(
        ValueError, match="lose-unfsynced target 'nope': expected one of .*majority-followers"
    ):
        FileNemesis(["lose-unfsynced"], lose_unfsynced_targets=["nope"])


def test_node_program_refuses_bad_arguments_with_one_line() -> None:
    for argv in ([], ["drop"], ["drop", "/x", "soon"], ["mount", "/a", "/b"]):
        res = subprocess.run([sys.executable, str(LAZYFS_PROGRAM), *argv], capture_output=True, text=True)
        assert res.returncode == 254
        assert len(res.stderr.strip().splitlines()) == 1 and "usage: lazyfs_node.py" in res.stderr


def test_drop_without_a_daemon_exits_3(tmp_path: Path) -> None:
    res = subprocess.run(
        [sys.executable, str(LAZYFS_PROGRAM), "drop", str(tmp_path), "1"], capture_output=True, text=True
    )
    assert res.returncode == 3 and "no daemon" in res.stderr


def test_scripts_are_valid_shell() -> None:
    for script in (mount_script("/var/lib/data"), unmount_script("/var/lib/data")):
        assert subprocess.run(["sh", "-n", "-c", script]).returncode == 0
