"""The runner: what a command runs on (model, adapter, settings, selection, memory workload) and running the checks
on it -- `check` (runner.py), `diff` (diff_runner.py), `probe endpoint` (endpoint.py), `probe load`
(load_probe.py), `baseline` (baseline.py) -- isolated, into one Report."""
