"""validate() of the transformer core: logits shape/finiteness/magnitude, KV allocator invariants, RoPE coverage.

Pure and total: every problem becomes a message, nothing raises.
"""
from __future__ import annotations

import torch


def validate_logits(logits, vocab_size: int, max_abs_logit: float) -> list[str]:
    if not isinstance(logits, torch.Tensor):
        return [f"logits are a {type(logits).__name__}, not a tensor"]
    problems = []
    if logits.dim() != 2 or logits.shape[-1] != vocab_size:
        problems.append(f"logits have shape {list(logits.shape)}, expected [seq, {vocab_size}]")
    if logits.numel() == 0:
        return problems + ["logits are empty"]
    finite = torch.isfinite(logits)
    if not finite.all():
        bad = (~finite).nonzero()[0].tolist()
        problems.append(f"{int((~finite).sum())} non-finite logits (first at index {bad})")
        logits = logits[finite]
    if logits.numel():
        peak = float(logits.abs().max())
        if peak >= max_abs_logit:
            problems.append(f"max |logit| is {peak:.4g}, not below the threshold {max_abs_logit:g}")
    return problems


def validate(engine, logits=None, positions=None, max_abs_logit: float = 100.0) -> list[str]:
    problems: list[str] = []
    try:
        if logits is not None:
            problems += validate_logits(logits, engine.config.vocab_size, max_abs_logit)
        problems += engine.cache.validate()
        top = None
        if positions is not None:
            values = torch.as_tensor(positions).reshape(-1)
            top = int(values.max()) if values.numel() else None
        problems += engine.rope.validate(top)
    except Exception as e:  # never raises
        problems.append(f"core validation failed: {type(e).__name__}: {e}")
    return problems
