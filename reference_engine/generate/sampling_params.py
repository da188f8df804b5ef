"""SamplingParams: how one request turns logits into tokens and when it stops.

Validated on construction: a bad value raises ValueError naming the field, the value and the allowed range,
so a CLI or API caller gets one clear line instead of a failure deep inside the generate loop.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field, fields

FINISH_REASONS = ("eos", "stop", "length", "context_length", "eos_patience", "kv_cache_full")
# eos:            the model produced one of the EOS ids (generation_config may list several)
# stop:           a stop string matched the text, or a stop_token_ids id was produced
# length:         max_new_tokens was reached
# context_length: the sequence filled the model's context window (max_position_embeddings)
# eos_patience:   the EOS-patience heuristic ended a sampled request (see below)
# kv_cache_full:  the request alone outgrew the whole KV pool (other requests are preempted first)


@dataclass
class SamplingParams:
    temperature: float = 0.0          # 0 = greedy (argmax); > 0 = sample from softmax(logits / temperature)
    top_k: int = 0                    # keep the k most likely tokens; 0 (or -1) = off
    top_p: float = 1.0                # keep the smallest set whose probability mass is >= top_p; 1.0 = off
    min_p: float = 0.0                # drop tokens with prob < min_p * max prob; 0.0 = off
    repetition_penalty: float = 1.0   # transformers' CTRL penalty on prompt+generated ids; 1.0 = off
    max_new_tokens: int = 256         # always enforced, whatever the model does
    stop: list[str] = field(default_factory=list)           # stop strings, matched on decoded text
    stop_token_ids: list[int] = field(default_factory=list)  # extra ids that end the request
    ignore_eos: bool = False          # keep generating past EOS (benchmarks, forced lengths)
    seed: int | None = None           # per-request torch.Generator: reproducible whatever the batch
    num_beams: int = 1                # > 1 = beam search (deterministic, requires temperature 0)
    length_penalty: float = 1.0       # beam score = sum logprobs / generated_len ** length_penalty
    early_stopping: bool | str = False  # True, False or "never", exactly as transformers defines them
    logprobs: bool = False            # return the log-probability of each generated token
    skip_special_tokens: bool = True  # drop special tokens (EOS, chat markers) from Output.text
    # The seed article's two heuristics, off by default.
    # Entropy-based dynamic temperature: (low, high). A flat (high-entropy) distribution is sampled at `low`,
    # a peaked one at `high`, linearly in the entropy normalised by log(vocab). Only used when sampling.
    dynamic_temperature: tuple[float, float] | None = None
    # EOS patience: end a sampled request when P(EOS) stays >= eos_patience_threshold for eos_patience
    # consecutive steps, instead of waiting for the sampler to happen to draw EOS. 0 = off.
    eos_patience: int = 0
    eos_patience_threshold: float = 0.95

    def __post_init__(self):
        self.stop = _as_list(self.stop, "stop", str)
        self.stop_token_ids = _as_list(self.stop_token_ids, "stop_token_ids", int)
        if self.top_k == -1:
            self.top_k = 0  # vLLM spells "off" as -1
        for check in _CHECKS:
            problem = check(self)
            if problem:
                raise ValueError(f"SamplingParams: {problem}")

    @property
    def greedy(self) -> bool:
        return self.temperature == 0.0

    @classmethod
    def from_generation_config(cls, generation_config, **overrides) -> "SamplingParams":
        """Defaults from a model's generation_config.json (reference_engine.config.GenerationConfig),
        overridden by keyword arguments. do_sample=False there means greedy, as in transformers."""
        values: dict = {}
        if generation_config is not None:
            if generation_config.max_new_tokens:
                values["max_new_tokens"] = generation_config.max_new_tokens
            if generation_config.do_sample:
                values["temperature"] = generation_config.temperature or 1.0
                for name in ("top_k", "top_p"):
                    if getattr(generation_config, name) is not None:
                        values[name] = getattr(generation_config, name)
            if generation_config.repetition_penalty is not None:
                values["repetition_penalty"] = generation_config.repetition_penalty
        values.update(overrides)
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(values) - known)
        if unknown:
            raise ValueError(f"SamplingParams: unknown field(s) {', '.join(unknown)}")
        return cls(**values)


def _as_list(value, name: str, kind: type) -> list:
    if value is None:
        return []
    if isinstance(value, kind) and not isinstance(value, bool):
        value = [value]
    if not isinstance(value, (list, tuple)) or any(
            not isinstance(v, kind) or isinstance(v, bool) for v in value):
        raise ValueError(f"SamplingParams: {name} must be a {kind.__name__} or a list of them, found {value!r}")
    return list(value)


def _is_number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _is_int(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _check_temperature(p):
    if not _is_number(p.temperature) or p.temperature < 0:
        return f"temperature must be a finite number >= 0 (0 = greedy), found {p.temperature!r}"
    if 0 < p.temperature < 1e-5:
        return f"temperature {p.temperature!r} is too small to sample stably; use 0 for greedy"


def _check_filters(p):
    if not _is_int(p.top_k) or p.top_k < 0:
        return f"top_k must be an integer >= 0 (0 or -1 = off), found {p.top_k!r}"
    if not _is_number(p.top_p) or not 0 < p.top_p <= 1:
        return f"top_p must be in (0, 1], found {p.top_p!r}"
    if not _is_number(p.min_p) or not 0 <= p.min_p <= 1:
        return f"min_p must be in [0, 1], found {p.min_p!r}"
    if not _is_number(p.repetition_penalty) or p.repetition_penalty <= 0:
        return f"repetition_penalty must be > 0 (1.0 = off), found {p.repetition_penalty!r}"


def _check_lengths(p):
    if not _is_int(p.max_new_tokens) or p.max_new_tokens < 1:
        return f"max_new_tokens must be an integer >= 1, found {p.max_new_tokens!r}"
    if any(s == "" for s in p.stop):
        return "stop strings must not be empty"
    if any(t < 0 for t in p.stop_token_ids):
        return f"stop_token_ids must be >= 0, found {p.stop_token_ids!r}"
    if p.seed is not None and not _is_int(p.seed):
        return f"seed must be an integer or None, found {p.seed!r}"


def _check_beams(p):
    if not _is_int(p.num_beams) or p.num_beams < 1:
        return f"num_beams must be an integer >= 1, found {p.num_beams!r}"
    if p.num_beams > 1 and not p.greedy:
        return f"num_beams={p.num_beams} needs temperature 0 (beam sampling is not supported)"
    if not _is_number(p.length_penalty):
        return f"length_penalty must be a finite number, found {p.length_penalty!r}"
    if p.early_stopping not in (True, False, "never"):
        return f"early_stopping must be True, False or 'never', found {p.early_stopping!r}"


def _check_heuristics(p):
    dyn = p.dynamic_temperature
    if dyn is not None:
        if (not isinstance(dyn, (tuple, list)) or len(dyn) != 2 or not all(_is_number(t) for t in dyn)
                or not 0 < dyn[0] <= dyn[1]):
            return f"dynamic_temperature must be (low, high) with 0 < low <= high, found {dyn!r}"
        p.dynamic_temperature = (float(dyn[0]), float(dyn[1]))
    if not _is_int(p.eos_patience) or p.eos_patience < 0:
        return f"eos_patience must be an integer >= 0 (0 = off), found {p.eos_patience!r}"
    if not _is_number(p.eos_patience_threshold) or not 0 < p.eos_patience_threshold <= 1:
        return f"eos_patience_threshold must be in (0, 1], found {p.eos_patience_threshold!r}"


_CHECKS = (_check_temperature, _check_filters, _check_lengths, _check_beams, _check_heuristics)
