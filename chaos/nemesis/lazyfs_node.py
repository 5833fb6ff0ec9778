"""A FUSE layer that can lose what was written but not fsynced (the idea of Jepsen's LazyFS).

Runs on a node with the node's own ``python3`` and Debian's ``python3-pyfuse3`` (FUSE 3, trio); it
is shipped to the node as a file by :mod:`chaos.nemesis.files` and imports nothing from the tool.
It mounts ``MOUNTPOINT`` as a passthrough view of ``BACKING`` and keeps, from the outside, the
record a power loss would need:

- per file, the length it had at its last fsync/fdatasync and the pre-images of every byte range
  below that length overwritten since (writes and truncates go to the backing file at once; a
  pre-image that is all zeros is kept as a length only, so appends into sparse pre-sized files
  cost no memory);
- per directory, the names created, removed and renamed since the directory's last fsync (the
  POSIX rule: a name is durable once its directory is fsynced). A removed or replaced file is
  moved into ``STATE/stash`` until the removal is durable, so it can come back.

The ``drop`` command ("clear-cache" in LazyFS) undoes all of that: names go back to their last
durable state, in reverse order, then every file is cut back to its fsynced length and its saved
pre-images are written back, so the files read exactly as they were at their last fsync. It is
meant to run while the process that wrote the files is dead (a crash).

Usage (paths absolute)::

    python3 lazyfs_node.py mount BACKING MOUNTPOINT STATE   # foreground; pid in STATE/pid
    python3 lazyfs_node.py drop STATE [TIMEOUT_S]           # prints the drop report as JSON
    python3 lazyfs_node.py status STATE [TIMEOUT_S]         # prints what a drop would undo

Control: the client writes ``STATE/req-<nonce>`` holding the command, sends SIGUSR1 to the daemon,
and waits for ``STATE/res-<nonce>`` (JSON). The drop report is ``{"files": {path: {"cut_from":
size, "to": fsynced size, "restored_bytes": n}}, "names": [undone ops], "errors": [...],
"dropped_bytes": n}`` with paths relative to the mount; ``status`` reports ``{"files": {path:
{"fsynced_size": n, "size": n, "unsynced_ranges": k}}, "names": [pending ops]}``. Exit status 0,
or 3 (no answer within TIMEOUT_S, default 30; one line on stderr).

Kernel caching is off (``direct_io`` opens, zero attribute and entry timeouts), so what the layer
restores is what the next reader sees.
"""

from __future__ import annotations

import errno
import functools
import json
import logging
import os
import shutil
import signal
import stat
import sys
import time
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

log = logging.getLogger("lazyfs")


class Track:
    """Unfsynced changes of one file: its size at the last fsync and the pre-images (offset, bytes
    or a zero length) of ranges below it overwritten since, oldest first."""

    __slots__ = ("synced_size", "undo", "unsynced")

    def __init__(self, synced_size: int) -> None:
        self.synced_size = synced_size
        self.undo: list[tuple[int, bytes | int]] = []
        self.unsynced = 0  # bytes written or cut since the last fsync


class NameOp:
    """One namespace change not yet durable: ``kind`` is create, mkdir, remove or rename;
    ``pending`` holds the directory inodes still to be fsynced before it is durable."""

    __slots__ = ("kind", "src", "dst", "stash", "pending", "ino")

    def __init__(
        self, kind: str, src: bytes, dst: bytes | None, stash: bytes | None, pending: set[int], ino: int
    ):
        self.kind, self.src, self.dst, self.stash, self.pending, self.ino = (
            kind,
            src,
            dst,
            stash,
            pending,
            ino,
        )

    def describe(self, root: bytes) -> dict[str, str]:
        d = {"op": self.kind, "path": _rel(root, self.src)}
        if self.dst is not None:
            d["to"] = _rel(root, self.dst)
        return d


def _rel(root: bytes, path: bytes) -> str:
    return os.fsdecode(os.path.relpath(path, root))


def _all_zero(b: bytes) -> bool:
    return not b or (b[0] == 0 and b == bytes(len(b)))


def _os_error(code: int, path: bytes) -> OSError:
    return OSError(code, os.strerror(code), os.fsdecode(path))


class Journal:
    """What a power loss would undo under ``backing``: the :class:`Track` of every file changed since
    its fsync, the :class:`NameOp` of every name changed since its directories' fsync, and the stash
    of removed files (``STATE/stash``). Standard library only: :class:`LazyOps` calls it for each
    change it passes to the backing file system, and :meth:`drop` undoes them all.

    Inodes are the backing file system's, except its root, which is ``root_inode`` (FUSE's). The
    change methods raise ``OSError`` from the backing file system (``ENOTEMPTY`` for a non-empty
    directory removed or replaced)."""

    def __init__(self, backing: bytes, state: bytes, root_inode: int) -> None:
        self.backing = backing
        self.root_inode = root_inode
        self.root_ino = os.lstat(backing).st_ino
        self.paths: dict[int, bytes] = {root_inode: backing}
        self.tracks: dict[int, Track] = {}
        self.names: list[NameOp] = []
        self.stash = os.path.join(state, b"stash")
        os.makedirs(self.stash, exist_ok=True)
        self.stash_n = 0

    def ino_of(self, st: os.stat_result) -> int:
        return self.root_inode if st.st_ino == self.root_ino else st.st_ino

    def learn(self, path: bytes) -> os.stat_result:
        """``lstat`` of ``path``, remembered as the path of its inode."""
        st = os.lstat(path)
        self.paths[self.ino_of(st)] = path
        return st

    # -- data: the pre-image before each change -------------------------------------------------

    def track(self, ino: int, size_now: int) -> Track:
        t = self.tracks.get(ino)
        if t is None:
            t = self.tracks[ino] = Track(size_now)
        return t

    def save(self, t: Track, fd: int, off: int, end: int) -> None:
        """Keep the pre-image of [off, end) clipped to the fsynced length."""
        end = min(end, t.synced_size)
        if off >= end:
            return
        pre = os.pread(fd, end - off, off)
        if len(pre) < end - off:  # the file is shorter now (cut earlier; that cut saved the rest)
            if not pre:
                return
        t.undo.append((off, len(pre)) if _all_zero(pre) else (off, pre))

    def truncate(self, ino: int, path: bytes, size: int) -> None:
        fd = os.open(path, os.O_RDWR)
        try:
            now = os.fstat(fd).st_size
            t = self.track(ino, now)
            if size < now:
                self.save(t, fd, size, now)
            t.unsynced += abs(now - size)
            os.ftruncate(fd, size)
        finally:
            os.close(fd)

    def write(self, ino: int, fd: int, off: int, buf: bytes) -> int:
        """``pwrite`` ``buf`` at ``off`` into ``fd`` (file ``ino``), saving what it overwrites first;
        returns the bytes written."""
        t = self.tracks.get(ino)
        if t is None:
            t = self.track(ino, os.fstat(fd).st_size)
        self.save(t, fd, off, off + len(buf))
        n = os.pwrite(fd, buf, off)
        t.unsynced += n
        return n

    def file_synced(self, ino: int) -> None:
        """File ``ino`` was fsynced: nothing of it is lost any more (fdatasync too: it keeps the size)."""
        self.tracks.pop(ino, None)

    # -- names: durable once their directories are fsynced -------------------------------------

    def created(self, kind: str, path: bytes, parent: int, ino: int) -> None:
        """``path`` (inode ``ino``) was created in directory ``parent``; ``kind`` is create or mkdir."""
        self.paths[ino] = path
        if kind == "create":
            self.tracks[ino] = Track(0)
        self.names.append(NameOp(kind, path, None, None, {parent}, ino))

    def remove(self, path: bytes, parent: int, is_dir: bool) -> None:
        """Unlink (or rmdir) ``path`` from directory ``parent`` by moving it into the stash."""
        if is_dir and os.listdir(path):
            raise _os_error(errno.ENOTEMPTY, path)
        ino = self.ino_of(os.lstat(path))
        s = self.to_stash(path)
        self.names.append(NameOp("remove", path, None, s, {parent}, ino))

    def rename(self, src: bytes, dst: bytes, parents: set[int]) -> None:
        """Rename ``src`` to ``dst``; a ``dst`` it replaces goes into the stash (and back if the
        rename fails)."""
        st = os.lstat(src)
        stashed = None
        if os.path.lexists(dst):
            if stat.S_ISDIR(os.lstat(dst).st_mode) and os.listdir(dst):
                raise _os_error(errno.ENOTEMPTY, dst)
            stashed = self.to_stash(dst)
        try:
            os.rename(src, dst)
        except OSError:
            if stashed is not None:
                os.rename(stashed, dst)
                self.learn(dst)
            raise
        ino = self.ino_of(st)
        self.repath(src, dst)
        self.paths[ino] = dst
        self.names.append(NameOp("rename", src, dst, stashed, parents, ino))

    def dir_synced(self, ino: int) -> None:
        """Directory ``ino`` was fsynced: the name changes waiting only for it are durable."""
        keep = []
        for op in self.names:
            op.pending.discard(ino)
            if op.pending:
                keep.append(op)
            elif op.stash:
                self.discard_stash(op.stash)
        self.names = keep

    def to_stash(self, p: bytes) -> bytes:
        self.stash_n += 1
        s = os.path.join(self.stash, b"%d" % self.stash_n)
        os.rename(p, s)
        self.learn(s)
        return s

    def discard_stash(self, s: bytes) -> None:
        try:
            if os.path.isdir(s) and not os.path.islink(s):
                shutil.rmtree(s, ignore_errors=True)
            else:
                os.unlink(s)
        except OSError as e:
            log.warning("cannot remove %r: %s", s, e)

    def repath(self, old: bytes, new: bytes) -> None:
        prefix = old + b"/"
        for i, q in list(self.paths.items()):
            if q.startswith(prefix):
                self.paths[i] = new + q[len(old) :]

    # -- the fault -------------------------------------------------------------------------------

    def status(self) -> dict:
        files = {}
        for ino, t in self.tracks.items():
            p = self.paths.get(ino)
            if p is None:
                continue
            try:
                size = os.lstat(p).st_size
            except OSError:
                size = -1
            files[_rel(self.backing, p)] = {
                "fsynced_size": t.synced_size,
                "size": size,
                "unsynced_ranges": len(t.undo),
                "unsynced_bytes": t.unsynced,
            }
        return {"files": files, "names": [op.describe(self.backing) for op in self.names]}

    def drop(self) -> dict:
        """Undo every change not made durable by an fsync; see the module docstring."""
        names, errors = self.undo_names()
        files, dropped = {}, 0
        for ino, t in self.tracks.items():
            p = self.paths.get(ino)
            if p is None or not os.path.lexists(p) or self.ino_of(os.lstat(p)) != ino:
                continue  # a file whose name was undone: nothing of it survives
            try:
                size, restored = self.restore(p, t)
            except OSError as e:
                errors.append(f"restore {_rel(self.backing, p)}: {e}")
                continue
            if size != t.synced_size or restored:
                files[_rel(self.backing, p)] = {
                    "cut_from": size,
                    "to": t.synced_size,
                    "restored_bytes": restored,
                }
                dropped += max(0, size - t.synced_size) + restored
        self.tracks = {}
        for n in os.listdir(self.stash):  # stashed removals that were undone are back already
            self.discard_stash(os.path.join(self.stash, n))
        self.sync_dirs()
        return {"files": files, "names": names, "errors": errors, "dropped_bytes": dropped}

    def undo_names(self) -> tuple[list[dict[str, str]], list[str]]:
        """Undo the pending name changes, newest first: (the undone ones described, errors)."""
        names, errors = [], []
        for op in reversed(self.names):
            try:
                self.undo_name(op)
                names.append(op.describe(self.backing))
            except OSError as e:
                errors.append(f"undo {op.kind} {_rel(self.backing, op.src)}: {e}")
        self.names = []
        return names, errors

    def undo_name(self, op: NameOp) -> None:
        if op.kind in ("create", "mkdir"):
            if os.path.lexists(op.src) and self.ino_of(os.lstat(op.src)) == op.ino:
                self.to_stash(op.src)  # gone; the stash is emptied at the end of the drop
        elif op.kind == "remove":
            if op.stash and os.path.lexists(op.stash) and not os.path.lexists(op.src):
                os.rename(op.stash, op.src)
                self.learn(op.src)
        elif op.kind == "rename":
            assert op.dst is not None
            if os.path.lexists(op.dst) and self.ino_of(os.lstat(op.dst)) == op.ino:
                os.rename(op.dst, op.src)
                self.repath(op.dst, op.src)
                self.paths[op.ino] = op.src
            if op.stash and os.path.lexists(op.stash) and not os.path.lexists(op.dst):
                os.rename(op.stash, op.dst)
                self.learn(op.dst)

    @staticmethod
    def restore(path: bytes, t: Track) -> tuple[int, int]:
        """Cut ``path`` back to its fsynced length, write its pre-images back newest first, and
        fsync it: (its size before, the bytes written back)."""
        fd = os.open(path, os.O_RDWR)
        try:
            size = os.fstat(fd).st_size
            os.ftruncate(fd, t.synced_size)
            restored = 0
            for off, pre in reversed(t.undo):
                data = bytes(pre) if isinstance(pre, int) else pre
                os.pwrite(fd, data, off)
                restored += len(data)
            os.fsync(fd)
        finally:
            os.close(fd)
        return size, restored

    def sync_dirs(self) -> None:
        """Make the restored names durable in the backing file system."""
        for d, _, _ in os.walk(self.backing):
            try:
                fd = os.open(d, os.O_RDONLY | os.O_DIRECTORY)
                os.fsync(fd)
                os.close(fd)
            except OSError:
                pass


def _fuse_errors(handler: Callable[..., Awaitable[Any]]) -> Callable[..., Awaitable[Any]]:
    """An async FUSE handler whose ``OSError`` from the backing file system becomes the
    ``FUSEError`` (same errno, EIO without one) that pyfuse3 answers the kernel with."""

    @functools.wraps(handler)
    async def answer(self: LazyOps, *args: Any, **kwargs: Any) -> Any:
        try:
            return await handler(self, *args, **kwargs)
        except OSError as e:
            raise self.fuse.FUSEError(e.errno or errno.EIO) from None

    return answer


class LazyOps:
    """The FUSE operations (pyfuse3's ``Operations`` methods) over ``backing``: a passthrough that
    tells its :class:`Journal` of every change. ``fuse`` is the pyfuse3 module, passed in so this
    file imports without it for the client commands; :func:`make_ops` mixes in its base class."""

    enable_writeback_cache = False

    def __init__(self, fuse: Any, backing: bytes, state: bytes) -> None:
        super().__init__()
        self.fuse = fuse
        self.backing = backing
        self.journal = Journal(backing, state, fuse.ROOT_INODE)
        self.fds: dict[int, int] = {}  # fh (backing fd) -> inode
        self.dirs: dict[int, int] = {}  # dir fh -> inode

    # -- inodes and attributes -----------------------------------------------------------------

    def path(self, ino: int) -> bytes:
        p = self.journal.paths.get(ino)
        if p is None:
            raise self.fuse.FUSEError(errno.ENOENT)
        return p

    def child(self, parent: int, name: bytes) -> bytes:
        if name in (b".", b"..") or b"/" in name:
            raise self.fuse.FUSEError(errno.EINVAL)
        return os.path.join(self.path(parent), name)

    def attrs(self, st: os.stat_result) -> Any:
        a = self.fuse.EntryAttributes()
        a.st_ino = self.journal.ino_of(st)
        a.generation = 0
        a.entry_timeout = 0
        a.attr_timeout = 0
        for f in ("st_mode", "st_nlink", "st_uid", "st_gid", "st_rdev", "st_size", "st_blksize", "st_blocks"):
            setattr(a, f, getattr(st, f))
        a.st_atime_ns, a.st_mtime_ns, a.st_ctime_ns = st.st_atime_ns, st.st_mtime_ns, st.st_ctime_ns
        return a

    def enter(self, path: bytes) -> Any:
        try:
            st = self.journal.learn(path)
        except OSError as e:
            raise self.fuse.FUSEError(e.errno or errno.EIO) from None
        return self.attrs(st)

    async def lookup(self, parent_inode, name, ctx=None):
        return self.enter(self.child(parent_inode, name))

    async def forget(self, inode_list):
        pass  # paths stay known: a name is re-resolved on every lookup anyway

    @_fuse_errors
    async def getattr(self, inode, ctx=None):
        return self.attrs(os.lstat(self.path(inode)))

    @_fuse_errors
    async def setattr(self, inode, attr, fields, fh, ctx):
        p = self.path(inode)
        if fields.update_size:
            self.journal.truncate(inode, p, attr.st_size)
        if fields.update_mode:
            os.chmod(p, stat.S_IMODE(attr.st_mode))
        if fields.update_uid or fields.update_gid:
            os.chown(p, attr.st_uid if fields.update_uid else -1, attr.st_gid if fields.update_gid else -1)
        if fields.update_atime or fields.update_mtime:
            st = os.lstat(p)
            at = attr.st_atime_ns if fields.update_atime else st.st_atime_ns
            mt = attr.st_mtime_ns if fields.update_mtime else st.st_mtime_ns
            os.utime(p, ns=(at, mt))
        return self.attrs(os.lstat(p))

    async def statfs(self, ctx):
        s = os.statvfs(self.backing)
        out = self.fuse.StatvfsData()
        for f in ("f_bsize", "f_frsize", "f_blocks", "f_bfree", "f_bavail", "f_files", "f_ffree", "f_favail"):
            setattr(out, f, getattr(s, f))
        out.f_namemax = s.f_namemax
        return out

    # -- files ---------------------------------------------------------------------------------

    def file_info(self, fd: int) -> Any:
        fi = self.fuse.FileInfo(fh=fd)
        fi.direct_io = True
        fi.keep_cache = False
        return fi

    @_fuse_errors
    async def open(self, inode, flags, ctx):
        p = self.path(inode)
        if flags & os.O_TRUNC:
            self.journal.truncate(inode, p, 0)
        fd = os.open(p, flags & ~(os.O_TRUNC | os.O_CREAT | os.O_EXCL | os.O_APPEND | os.O_NOCTTY))
        self.fds[fd] = inode
        return self.file_info(fd)

    @_fuse_errors
    async def create(self, parent_inode, name, mode, flags, ctx):
        p = self.child(parent_inode, name)
        fd = os.open(p, os.O_CREAT | os.O_EXCL | (flags & (os.O_RDWR | os.O_WRONLY)), stat.S_IMODE(mode))
        st = os.fstat(fd)
        ino = self.journal.ino_of(st)
        self.fds[fd] = ino
        self.journal.created("create", p, parent_inode, ino)
        return self.file_info(fd), self.attrs(st)

    @_fuse_errors
    async def read(self, fh, off, size):
        return os.pread(fh, size, off)

    @_fuse_errors
    async def write(self, fh, off, buf):
        ino = self.fds.get(fh)
        if ino is None:
            raise self.fuse.FUSEError(errno.EBADF)
        return self.journal.write(ino, fh, off, buf)

    @_fuse_errors
    async def fsync(self, fh, datasync):
        ino = self.fds.get(fh)
        os.fsync(fh)  # fdatasync keeps the size too: the layer makes no difference
        if ino is not None:
            self.journal.file_synced(ino)

    async def flush(self, fh):
        pass

    async def release(self, fh):
        self.close_handle(self.fds, fh)

    @staticmethod
    def close_handle(handles: dict[int, int], fh: int) -> None:
        """Forget the file or directory handle ``fh`` and close its backing fd (quietly: the
        kernel ignores a failed release)."""
        handles.pop(fh, None)
        try:
            os.close(fh)
        except OSError:
            pass

    # -- directories ---------------------------------------------------------------------------

    @_fuse_errors
    async def opendir(self, inode, ctx):
        fd = os.open(self.path(inode), os.O_RDONLY | os.O_DIRECTORY)
        self.dirs[fd] = inode
        return fd

    @_fuse_errors
    async def readdir(self, fh, start_id, token):
        p = self.path(self.dirs[fh])
        entries = sorted(os.listdir(p))
        for i, name in enumerate(entries[start_id:], start_id + 1):
            try:
                attr = self.enter(os.path.join(p, name))
            except self.fuse.FUSEError:
                continue
            if not self.fuse.readdir_reply(token, name, attr, i):
                break

    async def releasedir(self, fh):
        self.close_handle(self.dirs, fh)

    @_fuse_errors
    async def fsyncdir(self, fh, datasync):
        ino = self.dirs.get(fh)
        os.fsync(fh)
        if ino is not None:
            self.journal.dir_synced(ino)

    @_fuse_errors
    async def mkdir(self, parent_inode, name, mode, ctx):
        p = self.child(parent_inode, name)
        os.mkdir(p, stat.S_IMODE(mode))
        a = self.enter(p)
        self.journal.created("mkdir", p, parent_inode, a.st_ino)
        return a

    @_fuse_errors
    async def unlink(self, parent_inode, name, ctx):
        self.journal.remove(self.child(parent_inode, name), parent_inode, is_dir=False)

    @_fuse_errors
    async def rmdir(self, parent_inode, name, ctx):
        self.journal.remove(self.child(parent_inode, name), parent_inode, is_dir=True)

    @_fuse_errors
    async def rename(self, parent_inode_old, name_old, parent_inode_new, name_new, flags, ctx):
        if flags:
            raise self.fuse.FUSEError(errno.EINVAL)  # RENAME_EXCHANGE / NOREPLACE are not needed here
        src = self.child(parent_inode_old, name_old)
        dst = self.child(parent_inode_new, name_new)
        self.journal.rename(src, dst, {parent_inode_old, parent_inode_new})

    # -- the control commands --------------------------------------------------------------------

    def status(self) -> dict:
        """What a drop would undo (the module docstring gives the shape)."""
        return self.journal.status()

    def drop(self) -> dict:
        """Undo every change not made durable by an fsync; see the module docstring."""
        return self.journal.drop()


def make_ops(pyfuse3: Any, backing: bytes, state: bytes) -> type:
    """The ``pyfuse3.Operations`` subclass over ``backing``: :class:`LazyOps` with pyfuse3's base
    class mixed in, constructed without arguments."""

    class FuseLazyOps(LazyOps, pyfuse3.Operations):
        def __init__(self) -> None:
            super().__init__(pyfuse3, backing, state)

    return FuseLazyOps


# ---------------------------------------------------------------------------------------------
# daemon


def serve(backing: str, mountpoint: str, state: str) -> int:
    import pyfuse3
    import trio

    b, s = os.fsencode(os.path.abspath(backing)), os.fsencode(os.path.abspath(state))
    os.makedirs(s, exist_ok=True)
    ops = make_ops(pyfuse3, b, s)()
    options = set(pyfuse3.default_options)
    options.discard("default_permissions")  # the backing files' own permissions decide
    options |= {"fsname=chaos-lazyfs", "allow_other"}
    pyfuse3.init(ops, mountpoint, options)
    with open(os.path.join(state, "pid"), "w") as f:
        f.write(f"{os.getpid()}\n")
    log.info("mounted %s over %s", mountpoint, backing)

    async def control() -> None:
        with trio.open_signal_receiver(signal.SIGUSR1, signal.SIGTERM, signal.SIGINT) as signals:
            async for sig in signals:
                if sig != signal.SIGUSR1:
                    pyfuse3.terminate()
                    return
                for name in sorted(os.listdir(state)):
                    if not name.startswith("req-"):
                        continue
                    req = os.path.join(state, name)
                    try:
                        with open(req) as f:
                            cmd = f.read().strip()
                        os.unlink(req)
                    except OSError:
                        continue
                    try:
                        out = ops.drop() if cmd == "drop" else ops.status()
                    except Exception as e:  # noqa: BLE001 - reported to the client
                        log.exception("%s failed", cmd)
                        out = {"error": f"{type(e).__name__}: {e}"}
                    if cmd == "drop":
                        log.info("drop: %s", json.dumps(out))
                    res = os.path.join(state, "res-" + name[4:])
                    with open(res + ".tmp", "w") as f:
                        json.dump(out, f)
                    os.rename(res + ".tmp", res)

    async def main() -> None:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(control)
            await pyfuse3.main()
            nursery.cancel_scope.cancel()

    try:
        trio.run(main)
    finally:
        try:
            pyfuse3.close(unmount=True)
        except Exception:  # noqa: BLE001 - unmounted from outside already
            pass
        try:
            os.unlink(os.path.join(state, "pid"))
        except OSError:
            pass
    return 0


def ask(state: str, cmd: str, timeout: float) -> int:
    """Client: send ``cmd`` to the daemon of ``state`` and print its JSON answer."""
    try:
        with open(os.path.join(state, "pid")) as f:
            pid = int(f.read().strip())
        nonce = uuid.uuid4().hex
        req = os.path.join(state, "req-" + nonce)
        with open(req + ".tmp", "w") as f:
            f.write(cmd)
        os.rename(req + ".tmp", req)
        os.kill(pid, signal.SIGUSR1)
    except (OSError, ValueError) as e:
        print(f"lazyfs {cmd}: no daemon for {state}: {e}", file=sys.stderr)
        return 3
    res = os.path.join(state, "res-" + nonce)
    deadline = time.monotonic() + timeout
    while not os.path.exists(res):
        if time.monotonic() > deadline:
            print(f"lazyfs {cmd}: no answer from pid {pid} within {timeout:g} s", file=sys.stderr)
            return 3
        time.sleep(0.02)
    with open(res) as f:
        sys.stdout.write(f.read() + "\n")
    os.unlink(res)
    return 0


def main(argv: list[str]) -> int:
    usage = "usage: lazyfs_node.py mount BACKING MOUNTPOINT STATE | drop STATE [TIMEOUT_S] | status STATE [TIMEOUT_S]"
    if len(argv) == 4 and argv[0] == "mount":
        logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
        return serve(argv[1], argv[2], argv[3])
    if len(argv) in (2, 3) and argv[0] in ("drop", "status"):
        try:
            timeout = float(argv[2]) if len(argv) == 3 else 30.0
        except ValueError:
            timeout = -1.0
        if timeout > 0:
            return ask(argv[1], argv[0], timeout)
    print(f"{usage}; got {argv!r}", file=sys.stderr)
    return 254


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
