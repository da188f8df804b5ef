"""When a request stops. Token-level rules live here; stop strings are matched on text by the detokenizer.

Order matters and mirrors vLLM: an EOS or stop id ends the request before the length rules are looked at,
so a model that says EOS on its last allowed token reports "eos", not "length".
"""
from __future__ import annotations

from dataclasses import dataclass

from reference_engine.generate.sampling_params import SamplingParams


@dataclass
class StopState:
    eos_streak: int = 0  # consecutive steps with P(EOS) >= eos_patience_threshold


def stop_reason(token_id: int, num_generated: int, seq_len: int, params: SamplingParams,
                eos_ids: frozenset[int], max_model_len: int) -> str | None:
    """Finish reason after `token_id` was appended (num_generated counts it, seq_len = prompt + generated)."""
    if token_id in eos_ids and not params.ignore_eos:
        return "eos"
    if token_id in params.stop_token_ids:
        return "stop"
    if num_generated >= params.max_new_tokens:
        return "length"
    if seq_len >= max_model_len:
        return "context_length"
    return None


def eos_patience_reached(state: StopState, eos_prob: float, params: SamplingParams) -> bool:
    """The seed's EOS patience: P(EOS) above the threshold for N steps in a row ends a sampled request."""
    if params.eos_patience <= 0 or params.ignore_eos:
        return False
    state.eos_streak = state.eos_streak + 1 if eos_prob >= params.eos_patience_threshold else 0
    return state.eos_streak >= params.eos_patience

