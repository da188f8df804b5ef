"""Hybrids, recurrent layers beside attention: Qwen3-Next / Qwen3.5, LFM2, Granite 4, Falcon-H1; `mamba.py`: the
Mamba2 layer's sizes, plan and state, shared by Granite 4 and Falcon-H1."""
