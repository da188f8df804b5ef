"""Load a live server and watch it: latency levels (closed and open loop), /metrics, greedy answers alone and
under load. Plain measurements; the findings are made in checks/endpoint/load/throughput.py."""
from probes.load.run import LoadOptions, LoadRun, run_load
from probes.load.stats import percentile, summarize
from probes.load.types import Level, ProbeAnswer, Sample, Scrape

__all__ = ["LoadOptions", "LoadRun", "run_load", "percentile", "summarize", "Level", "ProbeAnswer", "Sample",
           "Scrape"]
