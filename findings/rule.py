"""What a CI format says about a check id (SARIF's rules): built by llmdoctor from the catalogue and handed to
the renderers, so reports never import checks."""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Rule:
    id: str                    # the check id, e.g. "VOC001"
    name: str                  # an identifier for it, e.g. "token_ids_beyond_embedding"
    summary: str               # one line: the check's docstring summary
    description: str           # the check's whole docstring
    help: str                  # what `llmdoctor explain ID` prints
    category: str
    severity: str              # the highest severity the check emits: error, warning or info
