"""What a family's tiny model (tests/reference_engine/core/tiny_models.py) gets against transformers: fp32 logits
and greedy tokens, a ragged batch and a chunked prefill, and proof that each feature it claims to test moves the
logits."""
from __future__ import annotations

from tests.hf_models import hf_logits
from tests.reference_engine.core.greedy import greedy, hf_greedy
from tests.reference_engine.core.tiny_models import hf_model, model_dir, random_ids

TOL = 1e-4


def core(variant: str, **kw):
    from reference_engine.core import CoreEngine
    return CoreEngine.from_pretrained(model_dir(variant), **kw)


def check_against_transformers(variant: str, length: int = 256) -> float:
    """fp32 logits over `length` tokens within TOL of transformers' eager path, and 32 greedy tokens after a
    40-token prompt identical; returns the largest logit difference."""
    eng = core(variant)
    ids = random_ids(length, seed=1)
    ours, theirs = eng.logits(ids), hf_logits(hf_model(variant), ids)
    diff = (ours - theirs).abs().max().item()
    print(f"\n{variant}: max |logit diff| {diff:.2e} over {length} tokens (max |logit| {theirs.abs().max():.2f})")
    assert diff <= TOL
    assert theirs.abs().max() > 0.5 and theirs.std() > 0.05      # not two flat tensors
    prompt = random_ids(40, seed=2)
    assert greedy(eng, prompt, 32) == hf_greedy(hf_model(variant), prompt, 32)
    assert eng.cache.stats().used_blocks == 0 and eng.validate(ours) == []
    return diff


def check_batch_equals_alone(variant: str) -> None:
    """A ragged batch (70, 9, 33 tokens, 4-token blocks) gives each sequence transformers' logits, and a prefill
    split in two chunks (25 + rest) gives the last row of the whole."""
    eng = core(variant, block_size=4)
    prompts = [random_ids(n, seed=n) for n in (70, 9, 33)]
    rows = eng.prefill([0, 1, 2], prompts, all_logits=True).split([len(p) for p in prompts])
    for i, prompt in enumerate(prompts):
        assert (rows[i] - hf_logits(hf_model(variant), prompt)).abs().max().item() <= TOL
    eng.prefill([3], [prompts[0][:25]])
    last = eng.prefill([3], [prompts[0][25:]])
    assert (last[0] - hf_logits(hf_model(variant), prompts[0])[-1]).abs().max().item() <= TOL


def bite(variant: str, **changes) -> float:
    """How far the engine's logits (100 tokens) move when its Settings lose a feature (e.g. positions=
    {"nope_layers": frozenset()}: rope on every layer; a dict changes fields of that group of Settings): the tiny
    model must depend on every feature it claims to test."""
    from dataclasses import replace

    eng, ids = core(variant), random_ids(100, seed=3)
    base = eng.logits(ids)
    bound = eng.config.family
    settings = bound.settings
    for name, value in changes.items():
        value = replace(getattr(settings, name), **value) if isinstance(value, dict) else value
        settings = replace(settings, **{name: value})
    eng.config.family = replace(bound, settings=settings)
    try:
        return (eng.logits(ids) - base).abs().max().item()
    finally:
        eng.config.family = bound
