"""Where a finding points, written once for every check: a config.json key or a tensor of the weights.

The report (llmdoctor/reporting/locate.py) turns these into a file and line: a key's line in config.json, a tensor's
line in the safetensors index, or with no index the safetensors file itself with no line (a binary file cannot
be shown inline), the tensor's name kept as the logical name."""
from __future__ import annotations

from findings import Location

CONFIG = "config.json"
WEIGHTS = "model.safetensors"


def config_key(name: str | None) -> Location:
    """A key of config.json (a dotted path for a nested one)."""
    return Location(file=CONFIG, logical=name)


def tensor(name: str) -> Location:
    """A tensor of the model's weights, by its name in the files."""
    return Location(file=WEIGHTS, logical=name)
