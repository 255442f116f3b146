// The board DRAM's storage array (rtl/dram_array.py): ROWS rows of ROW_BITS bits, one read
// port (registered, read-before-write, like an Amaranth memory read port) and one write port
// with a byte enable per byte. Written by hand because Amaranth spells out an initial value
// for every word of a memory: 131,072 rows for 4 MiB, minutes of elaboration per build.
module fl_dram_array #(
    parameter ROWS = 1024,
    parameter ROW_BITS = 256,
    parameter ADDR_BITS = 10
) (
    input  wire                    clk,
    input  wire [ADDR_BITS-1:0]    r_addr,
    input  wire                    r_en,
    output reg  [ROW_BITS-1:0]     r_data,
    input  wire [ADDR_BITS-1:0]    w_addr,
    input  wire [ROW_BITS/8-1:0]   w_en,
    input  wire [ROW_BITS-1:0]     w_data
);
    reg [ROW_BITS-1:0] mem [0:ROWS-1];  // the host backdoor's array (cosim/device.py)
    integer i;
    initial begin
        for (i = 0; i < ROWS; i = i + 1)
            mem[i] = {ROW_BITS{1'b0}};
        r_data = {ROW_BITS{1'b0}};
    end
    always @(posedge clk) begin
        if (r_en)
            r_data <= mem[r_addr];
        for (i = 0; i < ROW_BITS / 8; i = i + 1)
            if (w_en[i])
                mem[w_addr][i * 8 +: 8] <= w_data[i * 8 +: 8];
    end
endmodule
