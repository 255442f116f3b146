// Testbench top around the generated chip. The clock comes from the HDL (fast: the simulator
// toggles it without calling into Python) unless FL_GPI_CLOCK is defined, in which case clk is
// a port that cocotb drives with Clock(..., impl="gpi").
`timescale 1ns/1ps
module fl_tb (
`ifdef FL_GPI_CLOCK
    input  wire        clk,
`endif
    input  wire        rst,
    input  wire [7:0]  csr_addr,
    input  wire [31:0] csr_wdata,
    input  wire        csr_we,
    input  wire        csr_re,
    output wire [31:0] csr_rdata,
    output wire        csr_ready,
    output wire        irq,
    output wire        idle,
    // Testbench-only: csr_ready, or the bus watchdog firing. Python waits on one edge of this
    // instead of racing a Timer against csr_ready (which costs ~45 us of host time per access).
    output wire        csr_event,
    output wire        bus_timeout
);
`ifndef FL_GPI_CLOCK
    reg clk = 1'b0;
    always #5 clk = ~clk;
`endif
    localparam BUS_TIMEOUT_CYCLES = 16'd65535;
    reg [15:0] bus_wait = 16'd0;
    always @(posedge clk)
        bus_wait <= ((csr_we | csr_re) & ~csr_ready & (bus_wait != BUS_TIMEOUT_CYCLES)) ? bus_wait + 16'd1
                  : ((csr_we | csr_re) & ~csr_ready) ? bus_wait : 16'd0;
    assign bus_timeout = (bus_wait == BUS_TIMEOUT_CYCLES);
    assign csr_event = csr_ready | bus_timeout;

`ifdef FL_DUMP
    // Icarus waveforms (cocotb's own dump module is SystemVerilog; this file is Verilog-2005).
    initial begin
        $dumpfile("fl_tb.fst");
        $dumpvars(0, fl_tb);
    end
`endif

`ifdef FL_FAULT_PORT
    // Fault-campaign builds: the descriptor of the one fault this run injects (rtl/faults.py),
    // written once by the testbench before reset and constant afterwards; 0 is a good chip.
    reg [`FL_FAULT_PORT-1:0] fault_sel = 0;
`endif

    fl_chip chip (
        .clk(clk), .rst(rst),
`ifdef FL_FAULT_PORT
        .fault_sel(fault_sel),
`endif
        .csr_addr(csr_addr), .csr_wdata(csr_wdata), .csr_we(csr_we), .csr_re(csr_re),
        .csr_rdata(csr_rdata), .csr_ready(csr_ready), .irq(irq), .idle(idle)
    );
endmodule
