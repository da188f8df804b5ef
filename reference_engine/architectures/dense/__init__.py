"""Dense decoders' data: Llama and its kin, Gemma, Phi-3, SmolLM3, OLMo."""
