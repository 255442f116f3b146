"""The session's wire: one message = a JSON header and the raw bytes of its arrays.

Both ends of a session (:mod:`firstlight.session`, the caller's process, and
:mod:`firstlight.jobs.session`, inside the simulator) speak it over one connected Unix stream
socket. A message is

* 8 bytes: the header's length, little-endian;
* the header, UTF-8 JSON: ``{..., "arrays": [{"name", "dtype", "shape", "nbytes"}, ...]}``;
* each array's bytes in that order (C order, the dtype's own byte order, like the data part
  of an ``.npy`` file).

An array crosses as one ``sendall`` of its buffer and arrives through ``recv_into`` straight into
the numpy array that will hold it: no Python runs per element on either side. A closed peer (the
other process ended) is :class:`PeerClosed`, never a hang: the kernel closes a dead process's
sockets, so the survivor's read returns at once.
"""

from __future__ import annotations

import json
import socket
import struct

import ml_dtypes
import numpy as np

__all__ = ["PeerClosed", "send_message", "recv_message", "MAX_HEADER"]

MAX_HEADER = 64 << 20  # a header this long is a corrupted stream, not a message
_LEN = struct.Struct("<Q")


class PeerClosed(ConnectionError):
    """The other end closed the connection (its process ended) before a whole message arrived."""


def _jsonable(o):
    if isinstance(o, np.generic):
        return o.item()
    if isinstance(o, np.ndarray):
        raise TypeError("arrays travel as message arrays, not inside the JSON header")
    return str(o)


def _dtype_name(dt: np.dtype) -> str:
    """numpy's own spelling (byte order included), or the ml_dtypes type's name (float8_e4m3fn,
    ...), which numpy spells as anonymous bytes."""
    if dt.kind == "V" and dt.names is None and hasattr(ml_dtypes, dt.name):
        return dt.name
    return dt.str


def _dtype(name: str) -> np.dtype:
    return np.dtype(getattr(ml_dtypes, name)) if hasattr(ml_dtypes, name) else np.dtype(name)


def send_message(sock: socket.socket, header: dict, arrays: dict[str, np.ndarray] | None = None) -> None:
    """Send ``header`` (JSON-able) and ``arrays`` (name -> ndarray) as one message."""
    arrays = {k: np.require(v, requirements="C") for k, v in (arrays or {}).items()}  # 0-d stays 0-d
    desc = [{"name": k, "dtype": _dtype_name(v.dtype), "shape": list(v.shape), "nbytes": v.nbytes} for k, v in arrays.items()]
    body = json.dumps({**header, "arrays": desc}, default=_jsonable).encode()
    sock.sendall(_LEN.pack(len(body)) + body)
    for v in arrays.values():
        if v.nbytes:
            sock.sendall(memoryview(v.reshape(-1).view(np.uint8)))


def _recv_exact(sock: socket.socket, view: memoryview) -> None:
    got = 0
    while got < len(view):
        n = sock.recv_into(view[got:])
        if n == 0:
            raise PeerClosed(f"the other end closed the connection after {got} of {len(view)} bytes")
        got += n


def recv_message(sock: socket.socket) -> tuple[dict, dict[str, np.ndarray]]:
    """Receive one message: ``(header without "arrays", {name: ndarray})``."""
    raw = bytearray(_LEN.size)
    _recv_exact(sock, memoryview(raw))
    (length,) = _LEN.unpack(raw)
    if length > MAX_HEADER:
        raise ConnectionError(f"a message header of {length:,} bytes: the stream is corrupted")
    body = bytearray(length)
    _recv_exact(sock, memoryview(body))
    header = json.loads(body)
    arrays = {}
    for d in header.pop("arrays", []):
        arr = np.empty(d["shape"], _dtype(d["dtype"]))
        if arr.nbytes != d["nbytes"]:
            raise ConnectionError(f"array {d['name']!r}: {d['nbytes']} bytes announced for {arr.nbytes}")
        if arr.nbytes:
            _recv_exact(sock, memoryview(arr.reshape(-1).view(np.uint8)))
        arrays[d["name"]] = arr
    return header, arrays
