"""Deploying a pure-Python program to nodes as a standard-library ``zipapp`` (PEP 441).

The control node builds one ``.pyz`` per source version: the package directory (no ``__pycache__``)
plus bytecode compiled by the control node's Python, with a ``__main__`` calling the entry point.
The archive is cached in ``~/.chaos/zipapps/`` under ``<package>-<source hash>-<cache tag>.pyz``,
so an unchanged source is built once. A node runs it with its own ``python3 <file>.pyz ARGS``: no
venv, no pip, no network; third-party imports come from the node's Debian packages. The bytecode is
checked-hash ``.pyc`` next to each module, which ``zipimport`` uses when the node's Python has the
same magic number (Debian bookworm's 3.11 on both sides in the docker cluster) and ignores
otherwise (it compiles the source then; zip archives get no bytecode cache).
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import py_compile
import shlex
import shutil
import sys
import tempfile
import zipapp
from pathlib import Path
from typing import TYPE_CHECKING

from chaos.cluster.docker import chaos_home

if TYPE_CHECKING:
    from chaos.control.ssh import Remote


class DeployError(RuntimeError):
    """The program could not be built or installed; the message names the file or node."""


def _files(package_dir: Path) -> list[Path]:
    return sorted(
        p
        for p in package_dir.rglob("*")
        if p.is_file() and "__pycache__" not in p.parts and p.suffix not in (".pyc", ".pyo")
    )


def source_hash(package_dir: Path) -> str:
    """12 hex digits over every file of the package (paths relative to its parent, and contents)."""
    if not (package_dir / "__init__.py").is_file():
        raise DeployError(f"no Python package at {package_dir} (no __init__.py)")
    h = hashlib.sha256()
    for p in _files(package_dir):
        h.update(str(p.relative_to(package_dir.parent)).encode() + b"\0" + p.read_bytes() + b"\0")
    return h.hexdigest()[:12]


def build_zipapp(package_dir: Path, main: str, cache_dir: Path | None = None) -> Path:
    """The zipapp of ``package_dir`` whose ``__main__`` calls ``main`` (``"pkg.module:function"``).

    Built once per source hash and Python cache tag into ``cache_dir`` (default
    ``~/.chaos/zipapps``); safe under concurrent builds (file lock, atomic rename). Raises
    DeployError for a directory that is not a package or a module that does not compile (naming
    the file).
    """

    package_dir = Path(package_dir).resolve()
    digest = source_hash(package_dir)
    cache_dir = Path(cache_dir) if cache_dir is not None else chaos_home() / "zipapps"
    cache_dir.mkdir(parents=True, exist_ok=True)
    tag = sys.implementation.cache_tag or "py"
    path = cache_dir / f"{package_dir.name}-{digest}-{tag}.pyz"
    if path.is_file():
        return path
    with open(cache_dir / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if path.is_file():
            return path
        with tempfile.TemporaryDirectory(prefix="chaos-zipapp-", dir=cache_dir) as tmp:
            stage = Path(tmp) / "app"
            for src in _files(package_dir):
                dst = stage / package_dir.name / src.relative_to(package_dir)
                dst.parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(src, dst)
                if dst.suffix == ".py":
                    try:  # zipimport reads pkg/mod.pyc beside pkg/mod.py (not __pycache__)
                        py_compile.compile(
                            str(dst),
                            cfile=str(dst.with_suffix(".pyc")),
                            dfile=str(src.relative_to(package_dir.parent)),
                            doraise=True,
                            invalidation_mode=py_compile.PycInvalidationMode.CHECKED_HASH,
                        )
                    except py_compile.PyCompileError as e:
                        raise DeployError(f"{src} does not compile: {e.msg.strip()}") from None
            part = Path(tmp) / path.name
            zipapp.create_archive(stage, part, interpreter="/usr/bin/env python3", main=main, compressed=True)
            os.replace(part, path)
    return path


def install_file(remote: Remote, local: Path, target: str) -> bool:
    """Put ``local`` at ``target`` on the node unless that exact file is there (idempotent).

    The file's name is recorded in ``<target>.installed``, so a later call with the same build is
    one SSH round trip; a new build is uploaded beside the target and renamed over it. Returns True
    when it uploaded. Raises RemoteError for SSH or remote failures.
    """
    t = shlex.quote(target)
    marker = shlex.quote(target + ".installed")
    res = remote.exec_raw(f"[ -f {t} ] && cat {marker} 2>/dev/null || true", sudo=True)
    if res.stdout.strip() == local.name:
        return False
    part = f"{target}.part"
    remote.exec_raw(f"mkdir -p $(dirname {t})", sudo=True)
    remote.upload(local, part, sudo=True)
    remote.exec_raw(
        f"chmod 644 {shlex.quote(part)} && mv -f {shlex.quote(part)} {t} && echo {shlex.quote(local.name)} > {marker}",
        sudo=True,
    )
    return True
