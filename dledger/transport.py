"""Length-prefixed msgpack frames: the wire format between members and between client and server.

A frame is a 4-byte big-endian length followed by that many bytes of msgpack, a map
``{"c": request code, "o": opaque (request id), "r": 0 request | 1 response, "b": body map}``
(the fields of RocketMQ's remoting header that DLedger uses). Frames larger than ``max_frame``
bytes are refused: :class:`FrameDecoder` raises :class:`FrameError`, and the server closes that
connection.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import struct
import threading
from typing import Any

import msgpack

DEFAULT_MAX_FRAME = 16 * 1024 * 1024
_LEN = struct.Struct(">I")


class FrameError(ValueError):
    """A frame that is oversized or not a valid msgpack header map."""


_local = threading.local()


def packer() -> msgpack.Packer:
    """This thread's msgpack Packer (``use_bin_type``): ``msgpack.packb`` builds a new Packer, and
    its buffer, for every call, which cost a third of encoding a small frame."""
    pk = getattr(_local, "packer", None)
    if pk is None:
        pk = _local.packer = msgpack.Packer(use_bin_type=True)
    return pk


def encode_frame(code: int, opaque: int, body: dict[str, Any], response: bool = False) -> bytes:
    """One frame for ``body`` (a msgpack-able map). The body is the header's last field, so a
    frame whose body ends with a nil may be completed by splicing (see the server's push frames)."""
    payload = packer().pack({"c": code, "o": opaque, "r": 1 if response else 0, "b": body})
    return _LEN.pack(len(payload)) + payload


def decode_payload(payload: bytes) -> tuple[int, int, bool, dict[str, Any]]:
    """``(code, opaque, is_response, body)`` of one frame payload; FrameError when malformed."""
    try:
        obj = msgpack.unpackb(payload, raw=False, strict_map_key=False)
    except Exception as e:
        raise FrameError(f"frame payload is not msgpack: {e}") from None
    if not isinstance(obj, dict):
        raise FrameError(f"frame payload: expected a map, got {type(obj).__name__}")
    code, opaque, resp, body = obj.get("c"), obj.get("o"), obj.get("r"), obj.get("b")
    if type(code) is not int or type(opaque) is not int or resp not in (0, 1) or not isinstance(body, dict):
        raise FrameError("frame header: expected c:int, o:int, r:0|1, b:map")
    return code, opaque, bool(resp), body


def peek_header(payload: bytes) -> tuple[int, int, bool] | None:
    """``(code, opaque, is_response)`` of a frame payload read without decoding its body (the
    header fields come first, as :func:`encode_frame` writes them), or None when the payload does
    not start that way. Lets a server refuse an oversized request before paying for its decode."""
    try:
        up = msgpack.Unpacker(raw=False, max_buffer_size=len(payload))
        up.feed(payload)
        if up.read_map_header() != 4:
            return None
        head = {}
        for _ in range(3):
            key = up.unpack()
            if key not in ("c", "o", "r"):
                return None
            head[key] = up.unpack()
    except Exception:
        return None
    code, opaque, resp = head["c"], head["o"], head["r"]
    if type(code) is not int or type(opaque) is not int or resp not in (0, 1):
        return None
    return code, opaque, bool(resp)


class FrameDecoder:
    """Incremental decoder: :meth:`feed` bytes, get complete payloads back.

    Memory is bounded by ``max_frame`` plus one read: a length above it raises FrameError at once,
    before the frame's bytes are buffered.
    """

    def __init__(self, max_frame: int = DEFAULT_MAX_FRAME) -> None:
        if max_frame <= 0:
            raise ValueError(f"max_frame {max_frame}: expected > 0")
        self.max_frame = max_frame
        self._buf = bytearray()

    def feed(self, data: bytes) -> list[bytes]:
        self._buf += data
        out: list[bytes] = []
        pos = 0
        buf = self._buf
        while len(buf) - pos >= 4:
            (n,) = _LEN.unpack_from(buf, pos)
            if n > self.max_frame:
                self._buf = bytearray()
                raise FrameError(f"frame of {n} bytes exceeds the maximum frame size {self.max_frame}")
            if len(buf) - pos - 4 < n:
                break
            out.append(bytes(buf[pos + 4 : pos + 4 + n]))
            pos += 4 + n
        if pos:
            del self._buf[:pos]
        return out

    @property
    def buffered(self) -> int:
        """Bytes held waiting for the rest of a frame."""
        return len(self._buf)


# -- peer authentication --------------------------------------------------------------------------
# A member proves it holds the group's secret before its messages count: the connecting member
# sends PEER_HELLO {id}, the accepting one answers PEER_CHALLENGE {nonce} (16 fresh random bytes)
# and the connecting one PEER_PROOF {mac}, HMAC-SHA256(secret, "dledger-peer" | nonce | its id |
# the accepting id). No clock is involved (clock faults cannot lock members out) and a proof is
# good for one connection only (a fresh nonce each time). Clients never take part.

NONCE_BYTES = 16


def new_nonce() -> bytes:
    """A fresh challenge for one incoming peer connection."""
    return os.urandom(NONCE_BYTES)


def peer_proof(secret: bytes, nonce: bytes, src: str, dst: str) -> bytes:
    """The MAC member ``src`` sends to member ``dst`` for ``nonce``."""
    msg = b"dledger-peer\0" + nonce + b"\0" + src.encode() + b"\0" + dst.encode()
    return hmac.new(secret, msg, hashlib.sha256).digest()


def check_proof(secret: bytes, nonce: bytes, src: str, dst: str, mac: object) -> bool:
    """Whether ``mac`` is ``src``'s proof for ``nonce`` (constant-time compare)."""
    return isinstance(mac, bytes) and hmac.compare_digest(mac, peer_proof(secret, nonce, src, dst))
