"""LRA: a LoRA adapter read against the base it runs on (structure.py, vocab.py: statically, from headers and the
adapter's small tensors; serving.py: what vLLM and llama.cpp's converter will make of it). scan.py reads the
adapter's tensors once for them."""
