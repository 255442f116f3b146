"""The units' arithmetic on SRAM words, every bit of it from ``golden/``.

Each function takes the words a command reads (numpy arrays as the SRAMs hold them: A and B
words as rows of int8 bytes, accumulator words as rows of LANES uint32 bit patterns, SA/SB words
as rows of E8M0 bytes) and returns the words it writes. The layouts are docs/chip.md's
("Memories and layouts"); the numerics are golden/'s, which are written from docs/numerics.md
and held to the RTL by the suite, so these outputs are the RTL's bits.
"""

from __future__ import annotations

import numpy as np

from golden.int_gemm import gemm_int8, gemm_int8_accumulate
from golden.mx import fp32_add_bits, mx_matmul_bits
from golden.reduce import reduce_rows
from golden.vector import FP_REDUCE_IDENTITY, fold_words, reduce_words, requant, to_fp8, to_int8, vector_op
from rtl.isa import Format, ReduceOp, VecOp

__all__ = ["matmul_int8", "matmul_fp", "reduce_words_to_word", "vec_lanes", "VEC_GOLDEN_OP", "REDUCE_IDENTITY"]

# VecOp -> golden.vector.vector_op's name, for the ops that are one vector_op call
VEC_GOLDEN_OP = {
    VecOp.FADD: "fadd", VecOp.FSUB: "fsub", VecOp.FMUL: "fmul", VecOp.FMAX: "fmax", VecOp.FMIN: "fmin",
    VecOp.I2F: "i2f", VecOp.RELU: "relu", VecOp.EXP: "exp", VecOp.RECIP: "recip", VecOp.RSQRT: "rsqrt",
    VecOp.DEQ: "deq", VecOp.EXPSUB: "expsub", VecOp.IADD: "iadd", VecOp.REQUANT: "requant",
}
_FP_NAMES = {Format.E4M3: "e4m3", Format.E5M2: "e5m2", Format.E2M1: "e2m1"}
_INT_REDUCE = {ReduceOp.SUM: "sum", ReduceOp.MAX: "max", ReduceOp.MIN: "min"}
_FP_REDUCE = {ReduceOp.FSUM: "fsum", ReduceOp.FMAX: "fmax"}
# the identity the other lanes of a REDUCE's destination get (docs/chip.md, "Reduction unit")
REDUCE_IDENTITY = {ReduceOp.SUM: 0, ReduceOp.MAX: 0x80000000, ReduceOp.MIN: 0x7FFFFFFF,
                   ReduceOp.FSUM: FP_REDUCE_IDENTITY["fsum"], ReduceOp.FMAX: FP_REDUCE_IDENTITY["fmax"]}


def matmul_int8(a_words: np.ndarray, b_words: np.ndarray, c_old: np.ndarray | None) -> np.ndarray:
    """int8 MATMUL: ``a_words`` (K, ROWS) int8 (word k = A[:, k]), ``b_words`` (K, COLS) int8
    (word k = B[k, :]); ``c_old`` (ROWS, COLS) uint32 for ``accumulate`` (None: written fresh).
    Returns the ROWS accumulator words (ROWS, COLS) as uint32."""
    a = np.ascontiguousarray(a_words.T)
    b = np.ascontiguousarray(b_words)
    if c_old is None:
        c = gemm_int8(a, b)
    else:
        c = gemm_int8_accumulate(np.ascontiguousarray(c_old).view(np.int32), a, b)
    return np.asarray(c, np.int32).view(np.uint32)


def matmul_fp(fmt: int, a_words: np.ndarray, b_words: np.ndarray, sa_words: np.ndarray, sb_words: np.ndarray,
              c_old: np.ndarray | None) -> np.ndarray:
    """FP (FP8/FP4, MX) MATMUL of one command: codes as the operand SRAMs hold them (a byte per
    code), one SA word (ROWS E8M0 codes) and one SB word (COLS codes) per 32-step block of this
    command. The command's blocks restart at its first step; with ``accumulate`` the result is
    ``C_old (+) acc`` (fp32 add, C_old first), else ``acc`` (golden/mx.py, steps 4-5)."""
    a = np.ascontiguousarray(a_words.T).view(np.uint8)
    b = np.ascontiguousarray(b_words).view(np.uint8)
    acc = mx_matmul_bits(a, b, np.ascontiguousarray(sa_words.T).view(np.uint8),
                         np.ascontiguousarray(sb_words).view(np.uint8), _FP_NAMES[Format(fmt)])
    if c_old is None:
        return acc
    old = np.asarray(c_old, np.uint32)
    out = np.empty_like(acc)
    for (i, j), x in np.ndenumerate(acc):
        out[i, j] = fp32_add_bits(int(old[i, j]), int(x))
    return out


def reduce_words_to_word(op: int, words: np.ndarray, lanes: int) -> np.ndarray:
    """REDUCE over ``words`` (count, LANES) uint32: the one destination word, the result in lane
    0 and the operation's identity in the others."""
    op = ReduceOp(op)
    if op in _INT_REDUCE:
        total = reduce_rows(np.ascontiguousarray(words).view(np.int32).reshape(1, -1), _INT_REDUCE[op])
        value = int(np.asarray(total, np.int32).view(np.uint32)[0])
    else:
        value = int(reduce_words(_FP_REDUCE[op], np.ascontiguousarray(words).reshape(1, *words.shape))[0])
    out = np.full(lanes, REDUCE_IDENTITY[op], np.uint32)
    out[0] = value
    return out


def vec_lanes(op: int, a: np.ndarray, b: np.ndarray | None, fold: bool, fp8: int = 0) -> np.ndarray:
    """VEC's results: ``a`` (count, LANES) uint32, ``b`` broadcastable against it (None for the
    unary ops and FOLD). Returns (n, LANES) uint32 lanes for ACC (n = 1 for FOLD, REQUANT's int8
    values sign-extended), or (count, LANES) int8/uint8 codes for the conversions (CVT_I8,
    CVT_F8; REQUANT into an operand SRAM takes the int32 values' low bytes)."""
    op = VecOp(op)
    if fold:
        return fold_words(VEC_GOLDEN_OP[op], a)[None, :]
    if op == VecOp.CVT_I8:
        return to_int8(a, b)
    if op == VecOp.CVT_F8:
        return to_fp8(a, b, _FP_NAMES[Format(fp8)])
    if op == VecOp.REQUANT:
        return requant(np.ascontiguousarray(a).view(np.int32), b).view(np.uint32)
    return vector_op(VEC_GOLDEN_OP[op], a, b)
