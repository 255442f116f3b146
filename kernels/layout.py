"""Layout transforms between numpy matrices and SRAM words.

* A operand word: one K step of an A tile, ``A[r0:r0+ROWS, k]``, byte ``i`` = row ``i``.
* B operand word: ``B[k, c0:c0+COLS]``, byte ``j`` = column ``j``.
* Accumulator word: one row of a C tile, lane ``j`` (int32, little-endian) = column ``j``.
"""

from __future__ import annotations

import numpy as np

__all__ = ["pack_a_panels", "pack_b_panels", "a_panel_bytes", "b_panel_bytes", "tiles_to_matrix", "bytes_to_words",
           "words_to_int32", "int32_to_words"]

_UINT = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}


def bytes_to_words(raw: np.ndarray) -> np.ndarray:
    """(..., nbytes) uint8 -> (...) words as Python-int-compatible numbers (object for 16 bytes)."""
    nbytes = raw.shape[-1]
    raw = np.ascontiguousarray(raw)
    if nbytes in _UINT:
        return raw.view(_UINT[nbytes])[..., 0]
    if nbytes % 8 == 0:
        parts = raw.view(np.uint64)  # (..., nbytes // 8)
        out = np.zeros(parts.shape[:-1], dtype=object)
        for i in range(parts.shape[-1] - 1, -1, -1):
            out = out * (1 << 64) + parts[..., i].astype(object)
        return out
    raise ValueError(f"unsupported word size {nbytes} bytes")


def a_panel_bytes(a: np.ndarray, rows: int) -> np.ndarray:
    """int8 (Mp, K) with Mp % rows == 0 -> uint8 (Mp // rows, K, rows): panel p, step k, byte i = row i."""
    mp, k = a.shape
    return np.ascontiguousarray(a.reshape(mp // rows, rows, k).transpose(0, 2, 1)).view(np.uint8)


def b_panel_bytes(b: np.ndarray, cols: int) -> np.ndarray:
    """int8 (K, Np) with Np % cols == 0 -> uint8 (Np // cols, K, cols): panel q, step k, byte j = column j."""
    k, np_ = b.shape
    return np.ascontiguousarray(b.reshape(k, np_ // cols, cols).transpose(1, 0, 2)).view(np.uint8)


def tiles_to_matrix(tiles: np.ndarray) -> np.ndarray:
    """Tile-major (TM, TN, ROWS, COLS) -> the (TM * ROWS, TN * COLS) matrix."""
    tm, tn, r, c = tiles.shape
    return tiles.transpose(0, 2, 1, 3).reshape(tm * r, tn * c)


def pack_a_panels(a: np.ndarray, rows: int) -> np.ndarray:
    """int8 (Mp, K) with Mp % rows == 0 -> words (Mp // rows, K): panel p, step k."""
    return bytes_to_words(a_panel_bytes(a, rows))


def pack_b_panels(b: np.ndarray, cols: int) -> np.ndarray:
    """int8 (K, Np) with Np % cols == 0 -> words (Np // cols, K): panel q, step k."""
    return bytes_to_words(b_panel_bytes(b, cols))


def words_to_int32(words: list[int], lanes: int) -> np.ndarray:
    """Accumulator words -> int32 (n, lanes)."""
    raw = b"".join(int(w).to_bytes(4 * lanes, "little") for w in words)
    return np.frombuffer(raw, dtype="<i4").reshape(len(words), lanes).astype(np.int32)


def int32_to_words(x: np.ndarray) -> list[int]:
    """int32 (n, lanes) -> accumulator words."""
    x = np.ascontiguousarray(x, dtype="<i4")
    lanes = x.shape[1]
    raw = x.view(np.uint8).reshape(x.shape[0], 4 * lanes)
    return [int.from_bytes(bytes(r), "little") for r in raw]
