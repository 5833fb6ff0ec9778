"""The lose-unfsynced nemesis's checks that need no node: target validation, the node program's
usage line, the shell it runs, and the FUSE layer's journal driven on plain files (the layer
itself, mounted, is tested on a real node in tests/test_nemesis_lazyfs.py)."""

from __future__ import annotations

import errno
import os
import random
import subprocess
import sys
from pathlib import Path

import pytest

from chaos.nemesis.files import LAZYFS_PROGRAM, MAJORITY_FOLLOWERS, FileNemesis, mount_script, unmount_script
from chaos.nemesis.lazyfs_node import Journal


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


# -- the layer's journal on plain files (what the FUSE handlers call for each change) ------------

ROOT_INODE = 1  # pyfuse3.ROOT_INODE


def journal(tmp_path: Path) -> tuple[Journal, Path]:
    backing = tmp_path / "backing"
    backing.mkdir(exist_ok=True)
    return Journal(os.fsencode(backing), os.fsencode(tmp_path / "state"), ROOT_INODE), backing


def test_drop_cuts_appends_and_writes_the_overwritten_bytes_back(tmp_path: Path) -> None:
    j, backing = journal(tmp_path)
    durable = random.Random(1).randbytes(1000)
    (backing / "log").write_bytes(durable)
    p = os.fsencode(backing / "log")
    ino = j.learn(p).st_ino  # a FUSE lookup, before any open
    fd = os.open(p, os.O_RDWR)
    try:
        assert j.write(ino, fd, 100, b"x" * 50) == 50
        assert j.write(ino, fd, 990, b"y" * 510) == 510  # overwrites 10 fsynced bytes, appends 500
    finally:
        os.close(fd)
    assert (backing / "log").read_bytes() == durable[:100] + b"x" * 50 + durable[150:990] + b"y" * 510
    assert j.status()["files"] == {
        "log": {"fsynced_size": 1000, "size": 1500, "unsynced_ranges": 2, "unsynced_bytes": 560}
    }
    report = j.drop()
    assert (backing / "log").read_bytes() == durable
    assert report == {
        "files": {"log": {"cut_from": 1500, "to": 1000, "restored_bytes": 60}},
        "names": [],
        "errors": [],
        "dropped_bytes": 560,
    }
    assert j.drop() == {"files": {}, "names": [], "errors": [], "dropped_bytes": 0}


def test_zero_pre_images_are_kept_as_lengths_and_truncates_are_undone(tmp_path: Path) -> None:
    j, backing = journal(tmp_path)
    (backing / "seg").write_bytes(b"head" + bytes(4096))  # a pre-sized file, fsynced
    p = os.fsencode(backing / "seg")
    ino = j.learn(p).st_ino  # a FUSE lookup, before any open
    fd = os.open(p, os.O_RDWR)
    try:
        j.write(ino, fd, 1000, b"z" * 2000)
    finally:
        os.close(fd)
    assert j.tracks[ino].undo == [(1000, 2000)]  # all zeros: no copy kept
    j.truncate(ino, p, 2)  # cuts "ad", the new z's and the zero tail
    assert (backing / "seg").read_bytes() == b"he"
    assert j.drop()["files"]["seg"] == {"cut_from": 2, "to": 4100, "restored_bytes": 2000 + 4098}
    assert (backing / "seg").read_bytes() == b"head" + bytes(4096)


def test_fsync_makes_a_file_durable(tmp_path: Path) -> None:
    j, backing = journal(tmp_path)
    (backing / "f").write_bytes(b"old")
    p = os.fsencode(backing / "f")
    ino = j.learn(p).st_ino  # a FUSE lookup, before any open
    fd = os.open(p, os.O_RDWR)
    try:
        j.write(ino, fd, 0, b"new and longer")
        j.file_synced(ino)
        j.write(ino, fd, 0, b"N")
    finally:
        os.close(fd)
    assert j.drop()["files"] == {"f": {"cut_from": 14, "to": 14, "restored_bytes": 1}}
    assert (backing / "f").read_bytes() == b"new and longer"


def test_drop_undoes_names_newest_first_until_their_directory_is_fsynced(tmp_path: Path) -> None:
    j, backing = journal(tmp_path)
    (backing / "term").write_bytes(b"term=1\n")
    (backing / "gone").write_bytes(b"removed later\n")
    (backing / "d").mkdir()
    b = os.fsencode(backing)
    tmp = os.fsencode(backing / "term.tmp")
    fd = os.open(tmp, os.O_CREAT | os.O_EXCL | os.O_RDWR, 0o644)
    j.created("create", tmp, ROOT_INODE, os.fstat(fd).st_ino)
    j.write(os.fstat(fd).st_ino, fd, 0, b"term=2\n")
    os.fsync(fd)
    j.file_synced(os.fstat(fd).st_ino)
    os.close(fd)
    j.rename(tmp, b + b"/term", {ROOT_INODE})  # replaces term: its old file goes to the stash
    j.remove(b + b"/gone", ROOT_INODE, is_dir=False)
    os.mkdir(b + b"/d/sub")
    j.created("mkdir", b + b"/d/sub", os.lstat(b + b"/d").st_ino, os.lstat(b + b"/d/sub").st_ino)
    assert sorted(os.listdir(backing)) == ["d", "term"]
    assert [n["op"] for n in j.status()["names"]] == ["create", "rename", "remove", "mkdir"]
    j.dir_synced(os.lstat(b + b"/d").st_ino)  # only d/sub is durable now
    report = j.drop()
    assert report["errors"] == [] and report["files"] == {}
    assert report["names"] == [
        {"op": "remove", "path": "gone"},
        {"op": "rename", "path": "term.tmp", "to": "term"},
        {"op": "create", "path": "term.tmp"},
    ]
    assert sorted(os.listdir(backing)) == ["d", "gone", "term"] and os.listdir(backing / "d") == ["sub"]
    assert (backing / "term").read_bytes() == b"term=1\n"
    assert os.listdir(tmp_path / "state" / "stash") == []


def test_a_directory_fsync_discards_the_stashed_removal(tmp_path: Path) -> None:
    j, backing = journal(tmp_path)
    (backing / "gone").write_bytes(b"x")
    j.remove(os.fsencode(backing / "gone"), ROOT_INODE, is_dir=False)
    assert len(os.listdir(tmp_path / "state" / "stash")) == 1
    j.dir_synced(ROOT_INODE)
    assert os.listdir(tmp_path / "state" / "stash") == [] and j.names == []
    assert j.drop()["names"] == [] and not (backing / "gone").exists()


def test_a_non_empty_directory_is_neither_removed_nor_replaced(tmp_path: Path) -> None:
    j, backing = journal(tmp_path)
    (backing / "full").mkdir()
    (backing / "full" / "f").write_bytes(b"x")
    (backing / "empty").mkdir()
    b = os.fsencode(backing)
    with pytest.raises(OSError) as removing:
        j.remove(b + b"/full", ROOT_INODE, is_dir=True)
    with pytest.raises(OSError) as replacing:
        j.rename(b + b"/empty", b + b"/full", {ROOT_INODE})
    assert removing.value.errno == replacing.value.errno == errno.ENOTEMPTY
    assert sorted(os.listdir(backing)) == ["empty", "full"] and j.names == []
