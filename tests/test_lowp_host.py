"""Low-precision kernel input checks and host-side pieces (no simulator needed: they fail first)."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest

from golden.quant import flush_subnormals as _flush_subnormal_codes
from kernels.lowp import gemm_lowp

A = np.ones((4, 32), np.float32)
B = np.ones((32, 4), np.float32)


@pytest.mark.parametrize(
    "a, b, recipe, err, msg",
    [
        (A, B, "fp7-tensor", ValueError, "fp7-tensor"),
        (A.astype(np.float64), B, "mxfp8-e4m3-floor", TypeError, "float32"),
        (np.where(np.eye(4, 32) > 0, np.nan, 1).astype(np.float32), B, "mxfp8-e4m3-floor", ValueError,
         r"non-finite value at \(0, 0\)"),
        (A, np.ones((31, 4), np.float32), "int8-tensor", ValueError, "inner dimensions differ"),
    ],
)
def test_gemm_lowp_rejects_bad_input_before_touching_the_chip(a, b, recipe, err, msg):
    with pytest.raises(err, match=msg):
        asyncio.run(gemm_lowp(None, a, b, recipe, mitigations=None))


def test_flush_subnormal_codes_keeps_sign_and_normals():
    codes = np.array([0x01, 0x81, 0x07, 0x08, 0x80, 0x00, 0x7E], np.uint8)  # e4m3
    out, n = _flush_subnormal_codes(codes, "e4m3")
    assert out.tolist() == [0x00, 0x80, 0x00, 0x08, 0x80, 0x00, 0x7E] and n == 3
    out, n = _flush_subnormal_codes(np.array([0x01, 0x04, 0x83], np.uint8), "e5m2")
    assert out.tolist() == [0x00, 0x04, 0x80] and n == 2
