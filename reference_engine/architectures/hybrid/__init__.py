"""Hybrids' data (recurrent layers beside attention): Qwen3-Next / Qwen3.5, LFM2, Granite 4, Falcon-H1; `mamba2.py`:
the Mamba2 layer as llama.cpp stores it, shared by Granite 4 and Falcon-H1."""
