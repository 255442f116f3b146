"""Host-side kernel pieces that need no simulator: layouts, planning, input checks."""

from __future__ import annotations

import numpy as np
import pytest

from kernels.gemm_plan import plan_gemm
from kernels.layout import int32_to_words, pack_a_panels, pack_b_panels, words_to_int32
from kernels.validate import check_matrix
from rtl.config import ChipConfig
from rtl.isa import COMMAND_LAYOUT, Opcode, pack_command, unpack_command


def test_a_panel_word_holds_one_k_step_of_rows():
    a = np.arange(8 * 3, dtype=np.int8).reshape(8, 3)  # two panels of 4 rows
    w = pack_a_panels(a, 4)
    assert w.shape == (2, 3)
    # panel 1, step 2 = rows 4..7 of column 2, row 4 in the low byte
    assert int(w[1, 2]) == int.from_bytes(bytes(a[4:8, 2].astype(np.uint8)), "little")


def test_b_panel_word_holds_one_k_step_of_cols():
    b = (np.arange(3 * 8, dtype=np.int16) - 12).astype(np.int8).reshape(3, 8)
    w = pack_b_panels(b, 4)
    assert int(w[1, 0]) == int.from_bytes(bytes(b[0, 4:8].astype(np.uint8)), "little")


def test_sixteen_byte_words():
    a = np.arange(-64, 64, dtype=np.int8).reshape(16, 8)
    w = pack_a_panels(a, 16)
    assert int(w[0, 5]) == int.from_bytes(bytes(a[:, 5].astype(np.uint8)), "little")


def test_acc_words_round_trip():
    x = np.array([[-1, 2**31 - 1, -(2**31), 7]], np.int32)
    assert (words_to_int32(int32_to_words(x), 4) == x).all()


def test_command_pack_round_trip_and_field_overflow():
    c = pack_command(Opcode.MATMUL, flags=1, length=300, arg0=5, arg1=6, arg2=7, tag=0xFEED)
    f = unpack_command(c)
    assert (f["opcode"], f["flags"], f["length"], f["arg0"], f["arg1"], f["arg2"], f["tag"]) == (0x10, 1, 300, 5, 6, 7, 0xFEED)
    assert COMMAND_LAYOUT.size == 128
    with pytest.raises(ValueError, match="length=65536 does not fit in 16 bits"):
        pack_command(Opcode.MATMUL, length=65536)


def test_plan_fits_the_memories():
    cfg = ChipConfig()
    for m, n, k in [(1, 1, 1), (256, 256, 256), (37, 19, 100), (9, 6, 1500), (1000, 3, 5)]:
        p = plan_gemm(cfg, m, n, k)
        assert p.ga * p.kc <= cfg.operand_depth and p.gb * p.kc <= cfg.operand_depth
        assert p.ga * p.gb * cfg.rows <= cfg.acc_depth
        assert p.kc <= k


@pytest.mark.parametrize(
    "x, err, msg",
    [
        ([[1]], TypeError, "must be a numpy array"),
        (np.zeros((2, 2), np.float32), TypeError, "must have dtype int8"),
        (np.zeros(3, np.int8), ValueError, "must be 2-D"),
        (np.zeros((0, 3), np.int8), ValueError, "is empty"),
    ],
)
def test_input_checks(x, err, msg):
    with pytest.raises(err, match=msg):
        check_matrix("a", x, (np.int8,), "int8 activations")
