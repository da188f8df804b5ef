"""Where a finding points, written once for every check: a key of a config file or a tensor of the weights (the
model's config.json and model.safetensors by default; an adapter's or a shard's where the check names them).

The report (llmdoctor/reporting/locate.py) turns these into a file and line: a key's line in config.json, a tensor's
line in the safetensors index, or with no index the safetensors file itself with no line (a binary file cannot
be shown inline), the tensor's name kept as the logical name."""
from __future__ import annotations

from findings import Location

CONFIG = "config.json"
WEIGHTS = "model.safetensors"
ADAPTER_CONFIG = "adapter_config.json"
ADAPTER_WEIGHTS = "adapter_model.safetensors"


def config_key(name: str | None, file: str = CONFIG) -> Location:
    """A key of a config file (a dotted path for a nested one)."""
    return Location(file=file, logical=name)


def tensor(name: str, file: str | None = WEIGHTS) -> Location:
    """A tensor of the weights, by its name in the files (`file`: the one that holds it, None: unknown)."""
    return Location(file=file, logical=name)


def adapter_key(name: str) -> Location:
    """A key of a LoRA adapter's adapter_config.json."""
    return config_key(name, ADAPTER_CONFIG)


def adapter_tensor(name: str) -> Location:
    """A tensor of a LoRA adapter's adapter_model.safetensors."""
    return tensor(name, ADAPTER_WEIGHTS)
