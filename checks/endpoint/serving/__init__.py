"""Serving configurations that change answers: a quantized KV cache (EPT043), the batch a request shares (EPT044),
speculative decoding (EPT045)."""
