"""The CSR stage, driven by the register map: every bit of every register against its access.

* read/write registers: walking ones and zeros over their storage bits; strobe and reserved
  bits must read 0;
* read-only registers ignore writes;
* event counters (perf counters both words, DONE_COUNT, ERR_COUNT): loaded from SCRATCH with
  CTRL.load_counters and read back, each bit seen at 0 and at 1; CYCLES against the
  testbench's own clock (so a stuck bit cannot cancel in a delta);
* the window data registers walked on their own, on two SRAMs, before the memories stage
  relies on them: a fault on one register's read path is told apart from a bad cell.

Each finding names the register and bit. The counting behaviour of the counters (MACs from
the commands, busy cycles, interrupts) needs commands and is checked in the command-path stage.
"""

from __future__ import annotations

from rtl.csr_map import PERF_COUNTERS, REG, REGISTERS, WINDOW_DATA, Access, Register
from rtl.memories import MEMORIES

__all__ = ["check_rw", "check_read_only", "check_counters", "check_window_data", "READ_ONLY", "EVENT_COUNTERS",
           "COUNTER_PATTERNS", "stuck_bits"]

# Read-only registers whose value holds still while the chip is idle: a write must not move them.
READ_ONLY = tuple(r.name for r in REGISTERS if r.access is Access.RO and not r.volatile)
EVENT_COUNTERS = tuple(f"{n}_{w}" for n in PERF_COUNTERS for w in ("LO", "HI")) + ("DONE_COUNT", "ERR_COUNT", "TRACE_DROPPED")
# Every bit at 0 and at 1 twice over; the last leaves the counters at 0.
COUNTER_PATTERNS = (0x55555555, 0xAAAAAAAA, 0xFFFFFFFF, 0x33333333, 0xCCCCCCCC, 0x00000000)
# CYCLES read right after a load, against the testbench's cycle count between the two bus
# transfers' returns: both transfers end one falling edge after their ACK cycle, the load acts
# at the end of the CTRL write's ACCESS cycle and the read samples in its ACCESS cycle, one
# cycle earlier relative to its return than the write: one cycle fewer (docs/chip.md, CSR bus).
CYCLES_READ_OFFSET = -1


def _field_of(reg: Register, bit: int) -> str:
    for f in reg.fields:
        if f.lsb <= bit < f.lsb + f.width:
            return f" ({f.name})"
    return " (reserved)" if reg.fields else ""


def stuck_bits(reg: Register, seen: list[tuple[int, int]]) -> list[str]:
    """From (expected, read) pairs: which bits of ``reg`` read wrong, and how."""
    wrong = 0
    for want, got in seen:
        wrong |= want ^ got
    out = []
    for b in range(32):
        if not wrong >> b & 1:
            continue
        reads = {got >> b & 1 for want, got in seen if (want ^ got) >> b & 1}
        wants = [want for want, got in seen if (want ^ got) >> b & 1]
        if len(reads) == 1:
            v = reads.pop()
            first = next((w, g) for w, g in seen if (w ^ g) >> b & 1)
            out.append(f"{reg.name} bit {b}{_field_of(reg, b)} stuck at {v} (expected 0x{first[0]:08x}, "
                       f"read 0x{first[1]:08x})")
        else:
            out.append(f"{reg.name} bit {b}{_field_of(reg, b)} reads wrong ({len(wants)} times, both ways)")
    return out


def _storage(reg: Register) -> tuple[int, int]:
    """(bits that hold a written value, bits that must read 0) of a read/write register."""
    if not reg.fields:
        return 0xFFFFFFFF, 0
    store = strobe = 0
    for f in reg.fields:
        if f.strobe:
            strobe |= f.mask
        else:
            store |= f.mask
    return store, 0xFFFFFFFF & ~store


RW_REGISTERS = tuple(r for r in REGISTERS if r.access is Access.RW and r.name not in WINDOW_DATA)


async def check_rw(dev) -> tuple[list[str], int]:
    """Walking ones and zeros over every read/write register's storage bits (strobes never set:
    they would reset the chip). Returns (problems, patterns written)."""
    problems, written = [], 0
    for reg in RW_REGISTERS:
        store, _zero = _storage(reg)
        bits = [b for b in range(32) if store >> b & 1]
        patterns = [0, store] + [1 << b for b in bits] + [store ^ (1 << b) for b in bits]
        seen = []
        for p in patterns:
            await dev.write_csr(reg.name, p)
            seen.append((p, await dev.read_csr(reg.name)))
        written += len(patterns)
        await dev.write_csr(reg.name, 0)
        problems += stuck_bits(reg, seen)
    # CMDQ_TAIL is the doorbell: the walk made the chip fetch ring entries (all-zero NOPs on a
    # fresh chip). Let it finish, then restart the ring.
    await dev.wait_idle_polled()
    await dev.soft_reset()
    return problems, written


async def check_read_only(dev) -> list[str]:
    problems = []
    for name in READ_ONLY:
        before = await dev.read_csr(name)
        await dev.write_csr(name, ~before & 0xFFFFFFFF)
        after = await dev.read_csr(name)
        if after != before:
            problems.append(f"{name} is read-only but changed from 0x{before:08x} to 0x{after:08x} on a write")
    return problems


async def check_counters(dev) -> tuple[list[str], dict]:
    """Load every event counter from SCRATCH and read it back (the chip is idle: only CYCLES
    moves, and by exactly the testbench's count)."""
    load = REG["CTRL"].pack(load_counters=1)
    seen: dict[str, list[tuple[int, int]]] = {n: [] for n in EVENT_COUNTERS}
    for p in COUNTER_PATTERNS:
        await dev.write_csr("SCRATCH", p)
        await dev.write_csr("CTRL", load)
        t_load = dev.now_cycles()
        for name in PERF_COUNTERS:
            lo = await dev.read_csr(f"{name}_LO")
            t_read = dev.now_cycles()
            hi = await dev.read_csr(f"{name}_HI")
            value = (p << 32) | p
            if name == "CYCLES":
                value = (value + (t_read - t_load) + CYCLES_READ_OFFSET) & (2**64 - 1)
            seen[f"{name}_LO"].append((value & 0xFFFFFFFF, lo))
            seen[f"{name}_HI"].append((value >> 32, hi))
        for name in ("DONE_COUNT", "ERR_COUNT"):
            seen[name].append((p, await dev.read_csr(name)))
    await dev.write_csr("SCRATCH", 0)
    problems = []
    for name, pairs in seen.items():
        problems += stuck_bits(REG[name], pairs)
    # Which bits the expected values exercised at both 0 and 1 (CYCLES_LO's low bits move).
    uncovered = {}
    for name, pairs in seen.items():
        ones = zeros = 0
        for want, _ in pairs:
            ones |= want
            zeros |= ~want & 0xFFFFFFFF
        miss = 0xFFFFFFFF & ~(ones & zeros)
        if miss:
            uncovered[name] = f"0x{miss:08x}"
    return problems, {"counter_patterns": len(COUNTER_PATTERNS), "counter_bits_not_exercised": uncovered}


def _window_memories(cfg):
    """Two memories with 32-bit chunks to walk the window data registers on."""
    ms = [m for m in MEMORIES if m.chunk_bits(cfg) == 32]
    return ms[:2]


async def check_window_data(dev, cfg) -> list[str]:
    """Write walking patterns through MEM_DATA_KEEP into word 0 of two SRAMs and read each back
    through all three window data registers. A register that reads wrong on both SRAMs while
    the others read right has a faulty read path; all three wrong on one SRAM is that SRAM's
    cell (left to the memories stage, which tests every cell)."""
    patterns = [1 << b for b in range(32)] + [0xFFFFFFFF ^ (1 << b) for b in range(32)]
    wrong: dict[tuple[str, str], list[tuple[int, int]]] = {}
    mems = _window_memories(cfg)
    for mem in mems:
        for p in patterns:
            await dev.window_seek(mem.region, 0)
            await dev.write_csr("MEM_DATA_KEEP", p)
            for reg in WINDOW_DATA:
                await dev.window_seek(mem.region, 0)
                got = await dev.read_csr(reg)
                wrong.setdefault((mem.name, reg), []).append((p, got))
        await dev.window_seek(mem.region, 0)
        await dev.write_csr("MEM_DATA_KEEP", 0)
    await dev.write_csr("MEM_ADDR", 0)
    problems = []
    bad = {k: v for k, v in wrong.items() if any(w != g for w, g in v)}
    for reg in WINDOW_DATA:
        others = [r for r in WINDOW_DATA if r != reg]
        on_all = all((m.name, reg) in bad for m in mems)
        others_ok = all((m.name, r) not in bad for m in mems for r in others)
        if on_all and others_ok:
            problems += [f"window data register {s}" for s in stuck_bits(REG[reg], wrong[(mems[0].name, reg)])]
    if not problems and bad and all((m.name, r) in bad for m in mems for r in WINDOW_DATA):
        problems.append("the window's read path is wrong on every data register and SRAM: "
                        + "; ".join(stuck_bits(REG["MEM_DATA"], wrong[(mems[0].name, "MEM_DATA")])))
    return problems
