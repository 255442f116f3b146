"""pytest entry: the low-precision path on Verilator and Icarus (one simulator process each)."""

from __future__ import annotations

import pytest

from conftest import check_cocotb, cocotb_results
from cosim.build import Variant

# B0 reads FP8 subnormals as specified (A0/A1 have FL-NU-001); the errata matrix covers those.
VARIANT = Variant(revision="B0")

LOWP_TESTS = [
    "random_codes_and_scales_bit_exact",
    "special_values_bit_exact",
    "long_k_chunks_and_accumulate",
    "recipes_end_to_end",
]


@pytest.mark.sim
@pytest.mark.parametrize("name", LOWP_TESTS)
def test_lowp(name, sim, tmp_path_factory):
    results = cocotb_results("lowp_tests", sim, tmp_path_factory.getbasetemp(), variant=VARIANT)
    check_cocotb(results, name, sim)
