"""Whole ranges of a memory array in one VPI call: ``vpi_put_value_array`` and
``vpi_get_value_array`` (IEEE 1800-2017's VPI) of the running simulator, through ctypes.

Why: the backdoor (:mod:`cosim.device`) moved words one at a time through the GPI, a handle
lookup and a value string per word, about 1-2 us each in Python; a 256^3 GEMM stages, streams and
reads back some 60,000 words inside its timed window. These two calls take the words as packed
little-endian bytes (``vpiRawTwoStateVal``), so a whole range is one call and a ``memcpy``-like
loop in the simulator.

Runs inside the simulator process. Verilator's runtime implements both calls and our Verilator
builds export them (``VPI_ARRAY_LDFLAGS`` in :mod:`cosim.build`); Icarus does not implement
them, so its backdoor stays on the GPI. Two-state: a Verilator model holds no X or Z.
"""

from __future__ import annotations

import ctypes

from .build import VPI_ARRAY_CALLS, HarnessError

__all__ = ["VpiArrayError", "VpiArrays", "open_vpi_arrays"]

_VPI_RAW_TWO_STATE_VAL = 17  # vpi_user.h: vpiRawTwoStateVal
# what this module calls: two that cocotb's VPI library uses (so every model exports them) and
# the array calls our builds export for it
_CALLS = ("vpi_handle_by_name", "vpi_chk_error", *VPI_ARRAY_CALLS)


class VpiArrayError(HarnessError):
    """A whole-array VPI call failed or is not available (a harness error, not a chip failure)."""


class _ArrayValue(ctypes.Structure):
    # s_vpi_arrayvalue: format, flags, then a union of pointers (rawvals is the one used here)
    _fields_ = [("format", ctypes.c_uint32), ("flags", ctypes.c_uint32), ("rawvals", ctypes.c_void_p)]


class _ErrorInfo(ctypes.Structure):
    # s_vpi_error_info
    _fields_ = [("state", ctypes.c_int32), ("level", ctypes.c_int32), ("message", ctypes.c_char_p),
                ("product", ctypes.c_char_p), ("code", ctypes.c_char_p), ("file", ctypes.c_char_p),
                ("line", ctypes.c_int32)]


class VpiArrays:
    """The running simulator's whole-array calls. Use :func:`open_vpi_arrays`."""

    def __init__(self, lib: ctypes.CDLL):
        self._by_name = lib.vpi_handle_by_name
        self._by_name.argtypes = [ctypes.c_char_p, ctypes.c_void_p]
        self._by_name.restype = ctypes.c_void_p
        self._chk = lib.vpi_chk_error
        self._chk.argtypes = [ctypes.POINTER(_ErrorInfo)]
        self._chk.restype = ctypes.c_int32
        self._put = lib.vpi_put_value_array
        self._get = lib.vpi_get_value_array
        for fn in (self._put, self._get):
            fn.argtypes = [ctypes.c_void_p, ctypes.POINTER(_ArrayValue), ctypes.POINTER(ctypes.c_int32),
                           ctypes.c_uint32]
            fn.restype = None

    def _check(self, what: str) -> None:
        info = _ErrorInfo()
        if self._chk(ctypes.byref(info)):
            msg = (info.message or b"").decode(errors="replace").strip()
            raise VpiArrayError(f"{what}: the simulator's VPI said: {msg or 'an error (no message)'}")

    def handle(self, path: str) -> int:
        """The array's VPI handle by its full name (as cocotb's handle ``_path`` gives it)."""
        h = self._by_name(path.encode(), None)
        self._check(f"vpi_handle_by_name({path!r})")
        if not h:
            raise VpiArrayError(f"the simulator has no array named {path!r}")
        return h

    def put(self, handle: int, start: int, raw: bytes, count: int, what: str) -> None:
        """Words [start, start + count) from ``raw`` (``count`` packed little-endian words)."""
        buf = ctypes.create_string_buffer(bytes(raw), len(raw))
        val = _ArrayValue(_VPI_RAW_TWO_STATE_VAL, 0, ctypes.cast(buf, ctypes.c_void_p))
        index = ctypes.c_int32(start)
        self._put(handle, ctypes.byref(val), ctypes.byref(index), count)
        self._check(f"vpi_put_value_array on {what}")

    def get(self, handle: int, start: int, count: int, word_bytes: int, what: str) -> bytes:
        """Words [start, start + count) as packed little-endian bytes (``word_bytes`` each)."""
        val = _ArrayValue(_VPI_RAW_TWO_STATE_VAL, 0, None)
        index = ctypes.c_int32(start)
        self._get(handle, ctypes.byref(val), ctypes.byref(index), count)
        self._check(f"vpi_get_value_array on {what}")
        if not val.rawvals:
            raise VpiArrayError(f"vpi_get_value_array on {what} returned no data")
        # the simulator's own buffer, valid until its next call: copied out now
        return ctypes.string_at(val.rawvals, count * word_bytes)


def open_vpi_arrays(simulator: str) -> VpiArrays | None:
    """The whole-array calls of this process's simulator: None for a simulator that has none
    (Icarus); :class:`VpiArrayError` if a Verilator model does not export them (a build made
    without ``VPI_ARRAY_LDFLAGS``: rebuild it, do not fall back in silence)."""
    if "verilator" not in simulator.lower():
        return None
    lib = ctypes.CDLL(None)
    missing = [n for n in _CALLS if not hasattr(lib, n)]
    if missing:
        raise VpiArrayError(f"this Verilator model does not export {', '.join(missing)}: it was built without "
                            "the backdoor's link flags (cosim.build.VPI_ARRAY_LDFLAGS); rebuild it")
    return VpiArrays(lib)
