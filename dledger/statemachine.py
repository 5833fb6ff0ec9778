"""The StateMachine interface of DLedger and a linearizable KV state machine built on it.

Follows ``io.openmessaging.storage.dledger.statemachine.StateMachine`` (onApply, onSnapshotSave,
onSnapshotLoad, onShutdown) and its StateMachineCaller: committed entries ``(lastApplied,
commitIndex]`` are applied in index order and client requests complete only after their entry was
applied. Unlike DLedger, :meth:`StateMachine.on_apply` returns one result per entry so the caller can
answer a cas with whether it applied.
"""

from __future__ import annotations

from typing import Any, Protocol

import msgpack

from dledger.store import MAGIC_NORMAL, Entry

KV_PREFIX = b"\x00KV1"
"""Bodies of KV commands start with this; other entries (log workload appends, no-ops) are skipped."""

KV_OPS = ("put", "get", "cas", "delete")
KV_ARGS: dict[str, tuple[str, ...]] = {"put": ("value",), "cas": ("expected", "new")}
"""Request fields each KV op must carry (present, possibly null); a request without them is refused
with UNEXPECTED_ARGUMENT, never applied as if they were null."""


class StateMachine(Protocol):
    """What the StateMachineCaller drives (DLedger's StateMachine)."""

    def on_apply(self, entries: list[Entry]) -> list[Any]:
        """Apply committed ``entries`` (consecutive, in index order); one result per entry."""
        ...

    def on_snapshot_save(self) -> bytes:
        """The state as bytes, consistent with every entry applied so far."""
        ...

    def on_snapshot_load(self, data: bytes) -> None:
        """Replace the state with one saved by :meth:`on_snapshot_save`."""
        ...

    def on_shutdown(self) -> None: ...


def encode_kv(op: str, key: str, *args: Any) -> bytes:
    """The entry body of a KV command; ValueError for an unknown op or a non-string key."""
    if op not in KV_OPS:
        raise ValueError(f"kv op {op!r}: expected one of {KV_OPS}")
    if not isinstance(key, str):
        raise ValueError(f"kv key {key!r}: expected a string")
    return KV_PREFIX + msgpack.packb([op, key, *args], use_bin_type=True)


def decode_kv(body: bytes) -> list[Any] | None:
    """``[op, key, *args]`` of a KV command body, or None for any other body (never raises)."""
    if not body.startswith(KV_PREFIX):
        return None
    try:
        cmd = msgpack.unpackb(body[len(KV_PREFIX) :], raw=False, strict_map_key=False)
    except Exception:
        return None
    if not isinstance(cmd, list) or len(cmd) < 2 or cmd[0] not in KV_OPS or not isinstance(cmd[1], str):
        return None
    return cmd


class KVStateMachine:
    """A dict of string keys to msgpack/JSON-able values; writes and raft-log reads go through the log.

    Commands: ``put(key, value)`` -> None; ``get(key)`` -> value or None when absent;
    ``cas(key, expected, new)`` -> True when the current value equalled ``expected`` (None means
    absent) and was replaced; ``delete(key)`` -> True when the key existed.
    """

    def __init__(self) -> None:
        self.data: dict[str, Any] = {}
        self.last_applied = -1

    def apply_command(self, cmd: list[Any]) -> Any:
        op, key, args = cmd[0], cmd[1], cmd[2:]
        if op == "put" and len(args) == 1:
            if args[0] is None:
                self.data.pop(key, None)  # None means absent, as for cas
            else:
                self.data[key] = args[0]
            return None
        if op == "get":
            return self.data.get(key)
        if op == "cas" and len(args) == 2:
            cur = self.data.get(key)
            if cur == args[0] and (args[0] is not None or key not in self.data):
                if args[1] is None:
                    self.data.pop(key, None)
                else:
                    self.data[key] = args[1]
                return True
            return False
        if op == "delete":
            return self.data.pop(key, _MISSING) is not _MISSING
        return None

    def on_apply(self, entries: list[Entry]) -> list[Any]:
        out: list[Any] = []
        for e in entries:
            cmd = decode_kv(e.body) if e.magic == MAGIC_NORMAL else None
            out.append(None if cmd is None else self.apply_command(cmd))
            self.last_applied = e.index
        return out

    def get(self, key: str) -> Any:
        """Local read (the unsafe, read-index and lease paths)."""
        return self.data.get(key)

    def on_snapshot_save(self) -> bytes:
        return msgpack.packb({"last_applied": self.last_applied, "data": self.data}, use_bin_type=True)

    def on_snapshot_load(self, data: bytes) -> None:
        snap = self.check_snapshot(data)
        self.data = snap["data"]
        self.last_applied = snap["last_applied"]

    @staticmethod
    def check_snapshot(data: bytes) -> dict[str, Any]:
        """The decoded snapshot ``{"last_applied": int, "data": {str: value}}``; ValueError naming
        what is wrong otherwise (the server checks an INSTALL_SNAPSHOT with it before installing)."""
        try:
            snap = msgpack.unpackb(data, raw=False, strict_map_key=False)
        except Exception as e:
            raise ValueError(f"kv snapshot: not msgpack ({e})") from None
        if not isinstance(snap, dict) or not isinstance(snap.get("data"), dict):
            raise ValueError("kv snapshot: expected a map with 'data'")
        if not all(isinstance(k, str) for k in snap["data"]):
            raise ValueError("kv snapshot: expected string keys")
        last = snap.get("last_applied", -1)
        if type(last) is not int:
            raise ValueError(f"kv snapshot: last_applied {last!r}, expected an int")
        return {"last_applied": last, "data": snap["data"]}

    def on_shutdown(self) -> None:
        pass


_MISSING = object()
