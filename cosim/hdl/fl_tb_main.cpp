// The harness's Verilator main (build clock mode "cpp", cosim/build.py): cocotb's main loop with
// the clock toggled here, in C++, instead of by an `always #5` in the wrapper under --timing.
//
// Why: with the HDL clock every edge is a time step of Verilator's timing scheduler (a coroutine
// resumed, the next time slot looked up), and cocotb's main calls every VPI region's callbacks
// at every time step whether anything waits there or not. Here the model is built without
// --timing, the clock is a port, and the ReadWrite and ReadOnly regions are entered only when
// a callback waits in them (pending writes are applied at every step's ReadWrite point, as
// cocotb's main does). What Python sees is the same: the same edges at the same times
// (clk low at 0, rising at 5 ns, period 10 ns: testbench.CLOCK_PERIOD_NS), the same regions in
// the same order within a time step, value-change callbacks after every evaluation.
//
// The regions of one time step follow cocotb's verilator.cpp (cocotb 2.1): timed callbacks,
// then the clock edge, then evaluation until no VPI write asks for another, ReadWrite, ReadOnly.
#include <cstdint>
#include <cstdio>
#include <memory>

#include "Vtop.h"
#include "verilated.h"
#include "verilated_vpi.h"

static uint64_t main_time = 0;  // in the model's time precision (1 ps: `timescale 1ns/1ps)

double sc_time_stamp() { return static_cast<double>(main_time); }  // $time, and VPI's time

extern "C" {
void vlog_startup_routines_bootstrap(void);
}

static void settle_value_callbacks() {
    // value-change callbacks may write signals, which may change other watched signals
    while (VerilatedVpi::callValueCbs()) {
    }
}

static void wrap_up() { VerilatedVpi::callCbs(cbEndOfSimulation); }

// Half the clock period in time-precision units: 5 ns.
static uint64_t half_period(const VerilatedContext* ctx) {
    uint64_t units = 5;
    for (int p = -9; p > ctx->timeprecision(); --p) units *= 10;
    return units;
}

int main(int argc, char** argv) {
    Verilated::commandArgs(argc, argv);
    std::unique_ptr<Vtop> top(new Vtop(""));
    Verilated::fatalOnVpiError(false);  // as cocotb's main: systemtf registration would be fatal

    const uint64_t half = half_period(Verilated::threadContextp());
    uint64_t next_edge = half;
    top->clk = 0;

    vlog_startup_routines_bootstrap();
    Verilated::addExitCb([](void*) { wrap_up(); }, nullptr);
    VerilatedVpi::callCbs(cbStartOfSimulation);
    settle_value_callbacks();

    while (!Verilated::gotFinish()) {
        do {
            do {
                top->eval_step();
                VerilatedVpi::clearEvalNeeded();
                VerilatedVpi::doInertialPuts();
                settle_value_callbacks();
            } while (VerilatedVpi::evalNeeded());
            if (VerilatedVpi::hasCbs(cbReadWriteSynch)) VerilatedVpi::callCbs(cbReadWriteSynch);
            // Writes cocotb made with inertial delay during this step's value-change callbacks
            // (its handles' writes): applied here, then evaluated again in this time step.
            VerilatedVpi::doInertialPuts();
            settle_value_callbacks();
        } while (VerilatedVpi::evalNeeded());
        top->eval_end_step();
        if (VerilatedVpi::hasCbs(cbReadOnlySynch)) VerilatedVpi::callCbs(cbReadOnlySynch);

        // The next time step: the next clock edge or the next timed callback, whichever is first.
        // The clock never stops, so there is always a next one; the run ends with $finish or
        // when cocotb ends the simulation (gotFinish).
        const uint64_t deadline = VerilatedVpi::cbNextDeadline();
        main_time = deadline < next_edge ? deadline : next_edge;

        VerilatedVpi::callCbs(cbNextSimTime);  // also moves callbacks that are due into their lists
        settle_value_callbacks();
        VerilatedVpi::callTimedCbs();
        settle_value_callbacks();
        if (main_time == next_edge) {
            top->clk = !top->clk;
            next_edge += half;
        }
    }

    top->final();
    wrap_up();
    return Verilated::threadContextp()->errorCount() > 0 ? 1 : 0;
}
