"""Mixture-of-experts decoders' data: Mixtral / Qwen-MoE / OLMoE, MiniMax-M2, Llama 4, gpt-oss, GLM-4.5."""
