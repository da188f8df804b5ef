"""GGF: GGUF files — the file and its tokenizer metadata (metadata.py, pre_tokenizer.py and pre_hashes.py: llama.cpp's
pre-tokenizer names and their hashes), tensors and model metadata (tensors.py), the Qwen3-Next / Qwen3.5 DeltaNet
sizes llama.cpp assumes (linear_attn.py)."""
