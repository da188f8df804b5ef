"""Pure-torch kernels of the recurrent mixers (short convolution, gated delta rule, Mamba2 SSD): plain functions on
one sequence's packed tokens and its carried state, importing nothing of ours. The block functions that read
weights and the cache live beside the other mixers in reference_engine/core/."""
