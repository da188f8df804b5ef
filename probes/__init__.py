"""Measurements of the machine and the runtime, below the checks: NVML and GPU state, memory bandwidth and the
decode roofline, paged-KV fragmentation, environment information. Each returns data or findings; none prints."""
