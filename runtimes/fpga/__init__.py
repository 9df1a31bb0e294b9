"""The FPGA table-lookup simulation: ternary TLMM, its cycle, energy and resource models."""
