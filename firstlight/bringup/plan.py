"""The stage ladder: names, order, dependencies and the stages meant to catch each kind of fault
(shared by the host, the simulator side and the fault campaigns)."""

from __future__ import annotations

from dataclasses import dataclass

from rtl.faults import Fault, FaultKind

__all__ = ["Stage", "STAGES", "STAGE_NAMES", "STATUSES", "closure", "DRAM_TEST_BYTES", "dram_test_bytes", "CATCHERS",
           "check_faults_seen"]

# failed: the chip is wrong. error: the harness could not tell (simulator crash, failed build,
# corrupt cache, a bug in a stage). interrupted: SIGINT/SIGTERM arrived while it ran.
STATUSES = ("passed", "failed", "error", "interrupted", "blocked", "skipped")


@dataclass(frozen=True)
class Stage:
    name: str
    title: str
    depends_on: tuple[str, ...]


STAGES: tuple[Stage, ...] = (
    Stage("build", "elaborate + build", ()),
    Stage("reset", "reset values, no X on outputs", ("build",)),
    Stage("identity", "ID, REV, CAPS, TRACE_DEPTH; errata set", ("reset",)),
    Stage("csr_bus", "CSR bus: walking ones/zeros, read-only registers", ("identity",)),
    Stage("memories", "SRAMs through the front door: data bus, address bus, address-in-address, March C-",
          ("csr_bus",)),
    Stage("command_path", "NOP, FENCE, DONE_COUNT, bad opcode and recovery", ("memories",)),
    Stage("dram", "DRAM through the DMA: data bus, address bus, address-in-address, March C- over a region",
          ("command_path",)),
    Stage("dma_smoke", "1D/2D DMA into every SRAM and from ACC; bad descriptors; DMA status and semaphores",
          ("dram",)),
    # The GEMM and reduction kernels move their data by DMA: no engine test means anything
    # until the DMA has passed (errata and kernels depend on this one, so on the DMA too).
    Stage("engine_smoke", "identity and random MATMUL, reductions, vector-unit ops vs golden",
          ("command_path", "dma_smoke")),
    Stage("errata", "every reproducer vs the registry", ("engine_smoke",)),
    Stage("kernels", "GEMM, reduction, softmax, norm and attention suite with mitigations", ("engine_smoke",)),
    Stage("performance", "perf counters consistent; a GEMM within the tolerance of its schedule model (else the term "
          "that grew); the binding roof and the gap in one sentence", ("kernels",)),
)
STAGE_NAMES = tuple(s.name for s in STAGES)

# The stages meant to catch each kind of fault (rtl/faults.py). A campaign counts a fault as
# detected only when the first stage that fails is one of them (firstlight/faults/campaign.py);
# ``bringup --inject`` refuses an --only selection that runs none of them (check_faults_seen).
CATCHERS: dict[FaultKind, tuple[str, ...]] = {
    FaultKind.SRAM_STUCK: ("memories",),
    FaultKind.SRAM_WRITE_STUCK: ("memories",),
    FaultKind.SRAM_ADDR_TIE: ("memories",),
    FaultKind.SRAM_ADDR_BRIDGE: ("memories",),
    FaultKind.SRAM_TRANSITION: ("memories",),
    FaultKind.SRAM_COUPLING: ("memories",),
    FaultKind.CSR_STUCK: ("reset", "identity", "csr_bus", "command_path", "dma_smoke"),
    FaultKind.PE_PRODUCT: ("engine_smoke",),
    FaultKind.PE_ACC: ("engine_smoke",),
    FaultKind.REDUCE_LANE: ("engine_smoke",),
    FaultKind.CMD_FIFO: ("command_path",),
    FaultKind.BUS_HANG: ("reset",),
    FaultKind.PIN_STUCK: ("reset", "command_path"),
    FaultKind.DRAM_STUCK: ("dram",),
    FaultKind.DMA_ADDR_ALIAS: ("dram",),
    # the dram stage's block loads reach every burst ordinal of the universe; dma_smoke's long
    # load too, should the dram stage's loads ever be shorter
    FaultKind.DMA_DROP_BEAT: ("dram", "dma_smoke"),
}

# The dram stage's region: DRAM bytes 0..DRAM_TEST_BYTES-1 get the address-in-address and March
# C- tests (the data and address buses are walked over the whole DRAM whatever the region). One
# 4 KiB page keeps the stage at a fraction of a second on Verilator and a few seconds on Icarus;
# the bring-up job's ``dram_test_bytes`` option widens it (the CLI has no option for it: the whole
# DRAM is a board memory test's).
DRAM_TEST_BYTES = 4096
_PAGE = 4096


def dram_test_bytes(n: int | None, board) -> int:
    """The dram stage's region for ``board`` (a resolved rtl.board.BoardConfig): ``n`` bytes
    (None: DRAM_TEST_BYTES), a whole number of 4 KiB pages inside the DRAM, or ValueError."""
    n = DRAM_TEST_BYTES if n is None else n
    if not isinstance(n, int) or isinstance(n, bool) or n < _PAGE or n % _PAGE or n > board.dram_bytes:
        raise ValueError(f"the DRAM test region must be a whole number of 4 KiB pages (4096, 8192, ...) up to the "
                         f"{board.dram_bytes:,}-byte DRAM, not {n!r}")
    return n


BY_NAME = {s.name: s for s in STAGES}


def closure(names) -> set[str]:
    """The named stages and everything they depend on."""
    out, todo = set(), list(names)
    while todo:
        n = todo.pop()
        if n not in BY_NAME:
            raise ValueError(f"unknown stage {n!r}; stages: {', '.join(STAGE_NAMES)}")
        if n not in out:
            out.add(n)
            todo.extend(BY_NAME[n].depends_on)
    return out


def check_faults_seen(faults: tuple[Fault, ...], selected: set[str]) -> None:
    """ValueError if an injected fault has none of the stages meant to catch its kind
    (:data:`CATCHERS`) among ``selected`` (the stages that will run, dependencies included):
    such a run would pass and say nothing about the fault."""
    ran = [n for n in STAGE_NAMES if n in selected]
    for f in faults:
        catchers = CATCHERS[f.kind]
        if not set(catchers) & selected:
            raise ValueError(
                f"no stage --only selects can see the injected fault {f.spec}: a {f.family} fault is caught by "
                f"{' or '.join(catchers)}, and the stages that would run are {', '.join(ran)}. Add "
                f"{catchers[0]} to --only (its dependencies come with it), or drop --only to run every stage")
