"""EPT101+: a live server under load (`probe load`, `triage --load`): throughput.py (latency, throughput, failures,
scaling), answers.py and compare.py (greedy answers that change under load), server_metrics.py (what /metrics says),
inputs.py (LoadInputs), plots.py. Importing this package registers them."""
from checks.endpoint.load import answers, throughput  # noqa: F401 (registers)
