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
    output wire        idle
);
`ifndef FL_GPI_CLOCK
    reg clk = 1'b0;
    always #5 clk = ~clk;
`endif
    fl_chip chip (
        .clk(clk), .rst(rst),
        .csr_addr(csr_addr), .csr_wdata(csr_wdata), .csr_we(csr_we), .csr_re(csr_re),
        .csr_rdata(csr_rdata), .csr_ready(csr_ready), .irq(irq), .idle(idle)
    );
endmodule
