"""GPU, ENV: the machine the model runs on (NVML through probes/nvml.py; the Python environment)."""
