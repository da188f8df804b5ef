"""Multi-head latent attention decoders' data: DeepSeek-V2/V3, Kimi K2."""
