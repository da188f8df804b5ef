"""Multi-head latent attention decoders: DeepSeek-V2/V3, Kimi K2."""
