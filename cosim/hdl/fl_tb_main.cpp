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
static uint64_t edges = 0, edges_fast = 0;  // clock edges, and those fast_forward ran

double sc_time_stamp() { return static_cast<double>(main_time); }  // $time, and VPI's time

extern "C" {
void vlog_startup_routines_bootstrap(void);
}

// True if any value-change callback ran.
static bool settle_value_callbacks() {
    // value-change callbacks may write signals, which may change other watched signals
    bool any = false;
    while (VerilatedVpi::callValueCbs()) any = true;
    return any;
}

// Nothing is registered that a time step without a timed callback would serve: no value-change
// callback (an edge Python waits for), no ReadWrite, ReadOnly or next-time-step callback.
// (Callbacks registered for the next time step wait outside these lists, but only Python
// registers them, and Python did not run in a step where no callback ran.)
static bool nothing_waits_on_a_step() {
    return !VerilatedVpi::hasCbs(cbValueChange) && !VerilatedVpi::hasCbs(cbReadWriteSynch)
           && !VerilatedVpi::hasCbs(cbReadOnlySynch) && !VerilatedVpi::hasCbs(cbNextSimTime);
}

// While Python sleeps on a Timer (the host waiting for the chip to drain the command ring), every
// clock edge before that timer's time is a step in which nothing but the model runs: toggle the
// clock and evaluate, as the loop would, without asking VPI at every step whether anything is
// due. Returns the next edge; the edge at the timer's own time is left to the loop (the timer
// first, then the edge, as in any step). Measured in docs/simulation.md ("Fast-forward").
static uint64_t fast_forward(Vtop* top, uint64_t next_edge, uint64_t half) {
    const uint64_t deadline = VerilatedVpi::cbNextDeadline();
    while (next_edge < deadline && !Verilated::gotFinish()) {
        main_time = next_edge;
        top->clk = !top->clk;
        next_edge += half;
        ++edges_fast;
        top->eval_step();
        top->eval_end_step();
    }
    return next_edge;
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

    // Did any callback run in this time step? If none did, Python did not run: it cannot have
    // written a signal or registered a callback since the step before, so every step until the
    // next timed callback would only toggle the clock and evaluate (see fast_forward below).
    bool woke = true;
    while (!Verilated::gotFinish()) {
        do {
            do {
                top->eval_step();
                VerilatedVpi::clearEvalNeeded();
                VerilatedVpi::doInertialPuts();
                woke |= settle_value_callbacks();
            } while (VerilatedVpi::evalNeeded());
            if (VerilatedVpi::hasCbs(cbReadWriteSynch)) woke |= VerilatedVpi::callCbs(cbReadWriteSynch);
            // Writes cocotb made with inertial delay during this step's value-change callbacks
            // (its handles' writes): applied here, then evaluated again in this time step.
            VerilatedVpi::doInertialPuts();
            woke |= settle_value_callbacks();
        } while (VerilatedVpi::evalNeeded());
        top->eval_end_step();
        if (VerilatedVpi::hasCbs(cbReadOnlySynch)) woke |= VerilatedVpi::callCbs(cbReadOnlySynch);

        if (!woke && nothing_waits_on_a_step()) next_edge = fast_forward(top.get(), next_edge, half);
        if (Verilated::gotFinish()) break;

        // The next time step: the next clock edge or the next timed callback, whichever is first.
        // The clock never stops, so there is always a next one; the run ends with $finish or
        // when cocotb ends the simulation (gotFinish).
        const uint64_t deadline = VerilatedVpi::cbNextDeadline();
        main_time = deadline < next_edge ? deadline : next_edge;

        // also moves callbacks that are due into their lists
        woke = VerilatedVpi::callCbs(cbNextSimTime);
        woke |= settle_value_callbacks();
        woke |= VerilatedVpi::callCbs(cbAfterDelay);  // the timed callbacks (callTimedCbs)
        woke |= settle_value_callbacks();
        if (main_time == next_edge && !Verilated::gotFinish()) {  // not an edge the run never evaluates
            top->clk = !top->clk;
            next_edge += half;
            ++edges;
        }
    }

    top->final();
    wrap_up();
    // on the simulator's log: how much of the run needed no VPI at all (a test checks it is used)
    std::printf("fl_tb_main: %llu of %llu clock edges fast-forwarded\n", (unsigned long long)edges_fast,
                (unsigned long long)(edges + edges_fast));
    return Verilated::threadContextp()->errorCount() > 0 ? 1 : 0;
}
