"""Mixture-of-experts decoders: Mixtral / Qwen-MoE / OLMoE, MiniMax-M2, Llama 4, gpt-oss, GLM-4.5."""
