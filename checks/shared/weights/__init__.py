"""The weights read without running the engine: the tensors a checkpoint must hold (tensor_layout.py), one
streamed scan over every tensor (tensor_scan.py), and whether the weights still hold their initialisation
(init_stats.py)."""
