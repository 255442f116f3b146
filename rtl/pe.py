"""One processing element of the matrix engine (rtl/engine.py): the int8 MAC and the FP path's
exact block sum.

Why a component of its own: it is the one block the engine repeats ``rows x cols`` times. A
Verilog build converts it once, as the module :data:`PE_MODULE`, and the engine instances that
module in every position (``MatrixEngine(shared_pe=True)``), instead of elaborating, converting
and parsing 16 to 256 copies of the same logic (Verilator inlines it again: kept whole, its
per-instance calls made the model slower; docs/simulation.md, "The PE as one module").
Amaranth's simulator and a build with PE faults (whose logic differs per position) take it as a
submodule per position; an area report flattens the instances.

Inputs are the operand bundles as they reach the PE (layouts in rtl/engine.py), passed on to
the next PE a cycle later (``*_out``). The other outputs are registers, valid one cycle after a
step: ``last``/``fmt``/``isum`` the int8 result of the MATMUL's last step, and with FP formats
the pending block sum that the row's finalize units (``MatrixEngine._finalize_units``) take:
``valid`` in the cycle after a block's last step, ``unit`` the block's parity, and the block's
exact sum in two parts (``lo``, ``hi``) with its specials, scale exponent ``x`` and whether it
is the MATMUL's first block.
"""

from __future__ import annotations

from amaranth.hdl import Cat, Module, Mux, Signal, signed
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from .config import ChipConfig
from .faults import FaultKind
from .isa import Format
from .revisions import Defect
from .saboteurs import stuck_value

__all__ = ["PE_MODULE", "ProcessingElement", "A_BUS_BITS", "B_BUS_BITS", "FA_BUS_BITS", "FB_BUS_BITS"]

PE_MODULE = "fl_pe"  # the module name of the PE in a Verilog build

# Bundle widths (rtl/engine.py documents the layouts)
A_BUS_BITS, B_BUS_BITS, FA_BUS_BITS, FB_BUS_BITS = 41, 16, 18, 16

# Widths of a PE's two exact block-sum parts: lo < 32 * 225 * 2**31 and hi < 32 * 49 * 2**26 in
# magnitude, with a sign bit and a bit to spare; both <= 64 bits.
LO_BITS = 46
HI_BITS = 40

# Exponent of the FP block sum's units, 2 - 2*bias - 2*mbits, per format (docs/numerics.md).
_UNIT_EXP = {Format.E4M3: 2 - 14 - 6, Format.E5M2: 2 - 30 - 4, Format.E2M1: 2 - 2 - 2}


def _fp_pipes(config: ChipConfig, fp_domain: str) -> bool:
    """The FP operand bytes travel on pipes of their own, on the gated clock (rtl/engine.py)."""
    return config.has_fp and fp_domain != "sync"


class ProcessingElement(wiring.Component):
    """A PE of ``config``'s engine.

    Parameters
    ----------
    config : ChipConfig
        Its formats (an int8-only chip has no FP path).
    defects : frozenset of Defect
        The revision's; a PE reads ``FP8_SUBNORMALS_READ_AS_ZERO``.
    fp_domain : str
        The domain of the FP path's pending block (``"fp"``, the gated clock, or ``"sync"``).
    faults, index :
        Fault descriptors that may hit a PE (``rtl/saboteurs.py``) and this PE's index
        ``i * cols + j``; a PE with descriptors differs per position and is never shared.
    """

    def __init__(self, config: ChipConfig, defects=frozenset(), fp_domain: str = "sync", faults=(),
                 index: int | None = None):
        self.config = config
        self.daz = Defect.FP8_SUBNORMALS_READ_AS_ZERO in defects
        self.fp_domain = fp_domain
        self.faults = list(faults)
        if self.faults and index is None:
            raise ValueError("a PE with fault descriptors needs its index")
        self.index = index
        self.fp_pipes = _fp_pipes(config, fp_domain)
        members = self.members(config, fp_domain)
        super().__init__(members)

    @property
    def clock_domains(self) -> tuple[str, ...]:
        """The clock domains the PE is clocked by, in the order a module of it lists their clock
        and reset ports (``cosim/build.py`` defines them in this order when it converts the PE
        alone; left to Amaranth, the order would be a set's, which changes between processes)."""
        return ("sync", self.fp_domain) if self.fp_pipes else ("sync",)

    @staticmethod
    def members(config: ChipConfig, fp_domain: str) -> dict:
        """The PE's ports (what an instance of the shared module connects)."""
        members = {"a_bus": In(A_BUS_BITS), "b_bus": In(B_BUS_BITS), "a_out": Out(A_BUS_BITS),
                   "b_out": Out(B_BUS_BITS), "last": Out(1), "fmt": Out(2), "isum": Out(32)}
        if _fp_pipes(config, fp_domain):
            members.update({"fa_out": Out(FA_BUS_BITS), "fb_out": Out(FB_BUS_BITS)})
        if config.has_fp:
            members.update({
                "fa_bus": In(FA_BUS_BITS), "fb_bus": In(FB_BUS_BITS),
                "valid": Out(1), "unit": Out(1), "lo": Out(signed(LO_BITS)), "hi": Out(signed(HI_BITS)),
                "nan": Out(1), "pinf": Out(1), "ninf": Out(1), "scale_nan": Out(1), "x": Out(signed(13)),
                "first_blk": Out(1),
            })
        return members

    def elaborate(self, platform):
        m = Module()
        a_bus, b_bus = self.a_bus, self.b_bus
        a_code, valid, first, last = a_bus[0:8], a_bus[8], a_bus[9], a_bus[10]
        fmt, bfirst, blast, unit_bit = a_bus[28:30], a_bus[30], a_bus[31], a_bus[40]
        b_code = b_bus[0:8]

        # the systolic pipes: A to the right, B down, a cycle per PE
        m.d.sync += [self.a_out.eq(a_bus), self.b_out.eq(b_bus)]
        if self.fp_pipes:
            m.d[self.fp_domain] += [self.fa_out.eq(self.fa_bus), self.fb_out.eq(self.fb_bus)]

        # int8 MAC
        acc = Signal(32)
        prod = Signal(signed(16))
        total = Signal(32)
        if self.faults:  # a stuck bit in this PE's product or its accumulator's input
            raw = Signal(16)
            m.d.comb += raw.eq(a_code.as_signed() * b_code.as_signed())
            m.d.comb += prod.eq(stuck_value(m, raw, self.faults, FaultKind.PE_PRODUCT, self.index, "prod"))
            raw_total = Signal(32)
            m.d.comb += raw_total.eq(Mux(first, prod, acc + prod))
            m.d.comb += total.eq(stuck_value(m, raw_total, self.faults, FaultKind.PE_ACC, self.index, "acc"))
        else:
            m.d.comb += prod.eq(a_code.as_signed() * b_code.as_signed())
            m.d.comb += total.eq(Mux(first, prod, acc + prod))  # signed extends; truncation wraps
        m.d.sync += self.last.eq(valid & last)
        with m.If(valid):
            m.d.sync += acc.eq(total)
            with m.If(last):
                m.d.sync += [self.isum.eq(total), self.fmt.eq(fmt)]
        if self.config.has_fp:
            self._fp_path(m, valid, first, fmt, bfirst, blast, unit_bit)
        return m

    def _decode(self, m: Module, code, fmt, tag: str):
        """(sign, sig, ee, nan, inf) of an operand byte for the FP formats."""
        sign, sig, ee = Signal(name=f"{tag}_s"), Signal(4, name=f"{tag}_sig"), Signal(5, name=f"{tag}_ee")
        nan, inf = Signal(name=f"{tag}_nan"), Signal(name=f"{tag}_inf")
        built = self.config.formats
        daz = self.daz
        with m.Switch(fmt):
            if "e4m3" in built:
                with m.Case(Format.E4M3):
                    e, mnt = code[3:7], code[0:3]
                    m.d.comb += [sign.eq(code[7]), sig.eq(Cat(mnt, e != 0) & Mux(daz & (e == 0), 0, 0xF)),
                                 ee.eq(Mux(e == 0, 1, e)), nan.eq(code[0:7] == 0x7F)]
            if "e5m2" in built:
                with m.Case(Format.E5M2):
                    e, mnt = code[2:7], code[0:2]
                    m.d.comb += [sign.eq(code[7]), sig.eq(Cat(mnt, e != 0) & Mux(daz & (e == 0), 0, 0xF)),
                                 ee.eq(Mux(e == 0, 1, e)), nan.eq((e == 31) & (mnt != 0)),
                                 inf.eq((e == 31) & (mnt == 0))]
            if "e2m1" in built:
                with m.Case(Format.E2M1):
                    e, mnt = code[1:3], code[0]
                    m.d.comb += [sign.eq(code[3]), sig.eq(Cat(mnt, e != 0)), ee.eq(Mux(e == 0, 1, e))]
        return sign, sig, ee, nan, inf

    def _fp_path(self, m: Module, valid, first, fmt, bfirst, blast, unit_bit) -> None:
        # FP: exact product, and the exact block sum in two parts: products of weight below 2**32
        # (every E4M3 and E2M1 product) in `lo`, the others (large E5M2 products) in `hi` in units
        # of 2**32. Each part fits 64 bits (lo < 32 * 225 * 2**31, hi < 32 * 49 * 2**26): the sum
        # is exact, and no per-step arithmetic is wider than a machine word.
        # The operand bytes come from the FP bundles (on the gated clock in Verilog builds, see
        # rtl/engine.py), the control from the core bundle.
        fa_code, f_fmt, f_sa = self.fa_bus[0:8], self.fa_bus[8:10], self.fa_bus[10:18]
        fb_code, f_sb = self.fb_bus[0:8], self.fb_bus[8:16]
        sa_s, sa_sig, sa_ee, a_nan, a_inf = self._decode(m, fa_code, f_fmt, "a")
        sb_s, sb_sig, sb_ee, b_nan, b_inf = self._decode(m, fb_code, f_fmt, "b")
        shift = Signal(6)
        m.d.comb += shift.eq(sa_ee + sb_ee - 2)
        term = Signal(39)  # sig product (8 bits) << shift mod 32
        m.d.comb += term.eq((sa_sig * sb_sig) << shift[:5])
        p_nan = Signal()
        p_inf = Signal()
        m.d.comb += [
            p_nan.eq(a_nan | b_nan | (a_inf & (sb_sig == 0) & ~b_inf) | (b_inf & (sa_sig == 0) & ~a_inf)),
            p_inf.eq((a_inf | b_inf) & ~p_nan),
        ]
        special = p_nan | p_inf
        pneg = sa_s ^ sb_s
        tval = Signal(signed(40))
        m.d.comb += tval.eq(Mux(special, 0, Mux(pneg, -term, term)))
        blk_lo, blk_hi = Signal(signed(LO_BITS)), Signal(signed(HI_BITS))
        lo_new, hi_new = Signal(signed(LO_BITS)), Signal(signed(HI_BITS))
        bnan, bpinf, bninf = Signal(), Signal(), Signal()
        nan_new, pinf_new, ninf_new = Signal(), Signal(), Signal()
        m.d.comb += [
            lo_new.eq(Mux(bfirst, 0, blk_lo) + Mux(shift[5], 0, tval)),
            hi_new.eq(Mux(bfirst, 0, blk_hi) + Mux(shift[5], tval, 0)),
            nan_new.eq(Mux(bfirst, 0, bnan) | p_nan),
            pinf_new.eq(Mux(bfirst, 0, bpinf) | (p_inf & ~pneg)),
            ninf_new.eq(Mux(bfirst, 0, bninf) | (p_inf & pneg)),
        ]

        # the pending block, for the row's finalize units
        fp = self.fp_domain
        unit = Mux(f_fmt == Format.E4M3, _UNIT_EXP[Format.E4M3],
                   Mux(f_fmt == Format.E5M2, _UNIT_EXP[Format.E5M2], _UNIT_EXP[Format.E2M1]))
        m.d[fp] += self.valid.eq(valid & blast & (fmt != Format.INT8))
        with m.If(valid):
            m.d.sync += [blk_lo.eq(lo_new), blk_hi.eq(hi_new), bnan.eq(nan_new), bpinf.eq(pinf_new),
                         bninf.eq(ninf_new)]
            with m.If(blast):
                m.d[fp] += [
                    self.lo.eq(lo_new), self.hi.eq(hi_new), self.nan.eq(nan_new),
                    self.pinf.eq(pinf_new), self.ninf.eq(ninf_new),
                    self.scale_nan.eq((f_sa == 0xFF) | (f_sb == 0xFF)),
                    self.x.eq(unit + f_sa + f_sb - 254), self.unit.eq(unit_bit),
                ]
        # `first` marks the MATMUL's first step, which is in its first block: latch it at the block
        # start and carry it to that block's end.
        first_blk = Signal()
        with m.If(valid & bfirst):
            m.d.sync += first_blk.eq(first)
        with m.If(valid & blast):
            m.d[fp] += self.first_blk.eq(Mux(bfirst, first, first_blk))
