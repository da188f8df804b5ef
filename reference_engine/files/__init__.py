"""Reading model files without trusting them: our own safetensors header validator and lazy, memory-mapped weights."""
