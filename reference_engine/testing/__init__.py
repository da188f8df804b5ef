"""Not inference: tools that build models for tests, the demo and benchmarks (tiny model directories, BPE training)."""
