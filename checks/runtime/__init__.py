"""GLD, ACT, NUM, GEN, CNV, MOE, DRF: what the model does when the reference engine runs it — the golden three
steps, activations, numerics across dtypes, generation, conversion conventions, MoE routing (routing.py), drift
against a recorded baseline. checks/shared/weights/init_stats.py tells an untrained (freshly initialised) model
apart."""
