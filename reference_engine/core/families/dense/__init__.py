"""Dense decoders: Llama and its kin, Gemma, Phi-3, SmolLM3, OLMo."""
