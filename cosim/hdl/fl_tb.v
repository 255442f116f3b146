// Testbench top: the board (the generated chip and the generated DRAM model behind its AXI
// port; FL_BUS_BITS is the AXI data width, from rtl/board.py). The clock comes from the HDL (the
// simulator toggles it without calling into Python) unless FL_CLOCK_PORT is defined, in which
// case clk is a port: toggled by the Verilator main (cosim/hdl/fl_tb_main.cpp, clock "cpp"), by
// cocotb's Clock(..., impl="gpi") (clock "gpi"), or by the limit's loop (cosim/limit.py).
`timescale 1ns/1ps
module fl_tb (
`ifdef FL_CLOCK_PORT
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
`ifdef FL_EXT_AXI
    // The chip's AXI master port on the testbench's ports (an independent memory model in
    // cocotb serves it: tests/test_axi_ram.py), with the single ID the port uses as constants.
    ,
    output wire [31:0] axi_awaddr, output wire [7:0] axi_awlen, output wire [2:0] axi_awsize,
    output wire [1:0]  axi_awburst, output wire axi_awvalid, input wire axi_awready,
    output wire [`FL_BUS_BITS-1:0] axi_wdata, output wire [`FL_BUS_BITS/8-1:0] axi_wstrb,
    output wire axi_wlast, output wire axi_wvalid, input wire axi_wready,
    input wire [1:0] axi_bresp, input wire axi_bvalid, output wire axi_bready,
    output wire [31:0] axi_araddr, output wire [7:0] axi_arlen, output wire [2:0] axi_arsize,
    output wire [1:0]  axi_arburst, output wire axi_arvalid, input wire axi_arready,
    input wire [`FL_BUS_BITS-1:0] axi_rdata, input wire [1:0] axi_rresp, input wire axi_rlast,
    input wire axi_rvalid, output wire axi_rready,
    output wire axi_awid, output wire axi_arid, input wire axi_bid, input wire axi_rid
`endif
);
`ifndef FL_CLOCK_PORT
    reg clk = 1'b0;
    always #5 clk = ~clk;
`endif
    // The board registers what the host drives: reset through a synchroniser flop, the CSR bus
    // through one register stage (a bus bridge). The chip sees each a cycle later; a strobe the
    // host drops at the falling edge after csr_ready is low again before the chip's bus returns
    // to idle, so a transfer still happens once. Why: an input port of the model is logic the
    // simulator re-evaluates on every evaluation (it cannot know whether the testbench wrote it),
    // and reset reaches every register's next-state logic; behind a flop it is evaluated only
    // when the flop changes (docs/simulation.md: measured with `firstlight bench --limit`).
    reg        rst_q = 1'b1;
    reg [7:0]  csr_addr_q = 8'd0;
    reg [31:0] csr_wdata_q = 32'd0;
    reg        csr_we_q = 1'b0;
    reg        csr_re_q = 1'b0;
    always @(posedge clk) begin
        rst_q <= rst;
        csr_addr_q <= csr_addr;
        csr_wdata_q <= csr_wdata;
        csr_we_q <= csr_we;
        csr_re_q <= csr_re;
    end

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
    // The chip and the board's DRAM (a DRAM fault) both take it.
    reg [`FL_FAULT_PORT-1:0] fault_sel = 0;
`endif

`ifdef FL_EXT_AXI
    assign axi_awid = 1'b0;
    assign axi_arid = 1'b0;
`else
    // The board: the chip's AXI master port wired to the DRAM model (rtl/dram.py).
    wire [31:0] axi_awaddr, axi_araddr;
    wire [7:0]  axi_awlen, axi_arlen;
    wire [2:0]  axi_awsize, axi_arsize;
    wire [1:0]  axi_awburst, axi_arburst, axi_bresp, axi_rresp;
    wire axi_awvalid, axi_awready, axi_wlast, axi_wvalid, axi_wready, axi_bvalid, axi_bready;
    wire axi_arvalid, axi_arready, axi_rlast, axi_rvalid, axi_rready;
    wire [`FL_BUS_BITS-1:0] axi_wdata, axi_rdata;
    wire [`FL_BUS_BITS/8-1:0] axi_wstrb;
    fl_dram dram (
        .clk(clk), .rst(rst_q),
`ifdef FL_FAULT_PORT
        .fault_sel(fault_sel),
`endif
        .axi_awaddr(axi_awaddr), .axi_awlen(axi_awlen), .axi_awsize(axi_awsize), .axi_awburst(axi_awburst),
        .axi_awvalid(axi_awvalid), .axi_awready(axi_awready), .axi_wdata(axi_wdata), .axi_wstrb(axi_wstrb),
        .axi_wlast(axi_wlast), .axi_wvalid(axi_wvalid), .axi_wready(axi_wready), .axi_bresp(axi_bresp),
        .axi_bvalid(axi_bvalid), .axi_bready(axi_bready), .axi_araddr(axi_araddr), .axi_arlen(axi_arlen),
        .axi_arsize(axi_arsize), .axi_arburst(axi_arburst), .axi_arvalid(axi_arvalid), .axi_arready(axi_arready),
        .axi_rdata(axi_rdata), .axi_rresp(axi_rresp), .axi_rlast(axi_rlast), .axi_rvalid(axi_rvalid),
        .axi_rready(axi_rready)
    );
`endif

    fl_chip chip (
        .clk(clk), .rst(rst_q),
`ifdef FL_FAULT_PORT
        .fault_sel(fault_sel),
`endif
        .csr_addr(csr_addr_q), .csr_wdata(csr_wdata_q), .csr_we(csr_we_q), .csr_re(csr_re_q),
        .csr_rdata(csr_rdata), .csr_ready(csr_ready), .irq(irq), .idle(idle),
        .axi_awaddr(axi_awaddr), .axi_awlen(axi_awlen), .axi_awsize(axi_awsize), .axi_awburst(axi_awburst),
        .axi_awvalid(axi_awvalid), .axi_awready(axi_awready), .axi_wdata(axi_wdata), .axi_wstrb(axi_wstrb),
        .axi_wlast(axi_wlast), .axi_wvalid(axi_wvalid), .axi_wready(axi_wready), .axi_bresp(axi_bresp),
        .axi_bvalid(axi_bvalid), .axi_bready(axi_bready), .axi_araddr(axi_araddr), .axi_arlen(axi_arlen),
        .axi_arsize(axi_arsize), .axi_arburst(axi_arburst), .axi_arvalid(axi_arvalid), .axi_arready(axi_arready),
        .axi_rdata(axi_rdata), .axi_rresp(axi_rresp), .axi_rlast(axi_rlast), .axi_rvalid(axi_rvalid),
        .axi_rready(axi_rready)
    );
endmodule
