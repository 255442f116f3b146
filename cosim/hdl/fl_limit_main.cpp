// The bare Verilator reference (cosim/limit.py): the board of the harness build, driven by a
// Verilog replay of a recorded run (fl_limit), clocked by this loop. No VPI, no cocotb, nothing
// public: what the simulator alone can do with the same Verilog and the same stimulus.
//
// +window_start=N +window_end=M: the loop times cycles (N, M], the kernel's window of the
// recorded run, and prints them as one JSON line. The replay ends the run with $finish.
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>

#include "Vfl_limit.h"
#include "verilated.h"

static uint64_t plusarg(VerilatedContext* ctx, const char* name) {
    const char* hit = ctx->commandArgsPlusMatch(name);  // "+name=value" or ""
    if (!hit || !*hit) {
        std::fprintf(stderr, "fl_limit: missing +%svalue\n", name);
        std::exit(2);
    }
    return std::strtoull(hit + 1 + std::char_traits<char>::length(name), nullptr, 10);
}

int main(int argc, char** argv) {
    auto ctx = std::make_unique<VerilatedContext>();
    ctx->commandArgs(argc, argv);
    const uint64_t start = plusarg(ctx.get(), "window_start=");
    const uint64_t end = plusarg(ctx.get(), "window_end=");
    auto top = std::make_unique<Vfl_limit>(ctx.get());
    using clock = std::chrono::steady_clock;
    top->clk = 0;
    top->eval();
    clock::time_point t0 = clock::now(), t1 = t0;
    uint64_t cycle = 0;
    // cycle n: the rising edge, then the falling edge at n clock periods (where the replay acts)
    while (!ctx->gotFinish()) {
        if (cycle == start) t0 = clock::now();
        ++cycle;
        top->clk = 1;
        top->eval();
        top->clk = 0;
        top->eval();
        if (cycle == end) t1 = clock::now();
    }
    if (cycle < end) t1 = clock::now();
    top->final();
    std::printf("{\"fl_limit\": true, \"cycles_run\": %llu, \"window_cycles\": %llu, \"window_s\": %.6f}\n",
                (unsigned long long)cycle, (unsigned long long)(end - start),
                std::chrono::duration<double>(t1 - t0).count());
    return 0;
}
