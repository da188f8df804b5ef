"""The recurrent token mixers (LFM2's short convolution, Mamba2, Gated DeltaNet) and their pure-torch kernels.

The kernels (causal_conv.py, ssd.py, delta_rule.py) are plain functions on one sequence's packed tokens and its
carried state, importing nothing of ours. The mixers (short_conv.py, mamba2.py, gated_delta_net.py) read their
layer's weights and the sequence's state from the cache (core/cache/state_cache.py), run the kernels sequence
by sequence, and stage the new state; core/model.MIXERS registers them. They import the families' settings,
never the rest of the core."""
