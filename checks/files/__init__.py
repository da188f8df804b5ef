"""FIL, CFG, WGT: the model directory's files (integrity.py), config.json's numbers (config.py) and the weight
tensors against the config (weights.py). Nothing here runs the engine."""
