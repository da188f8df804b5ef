"""The real SmolLM2-135M-Instruct model: logits and botchan perplexity against transformers (float32)."""
from __future__ import annotations

import math

import pytest
import torch

from reference_engine.engine import Engine
from tests.hf_models import hf_logits

pytestmark = pytest.mark.assets
PROMPTS = ["The capital of France is", "def fibonacci(n):\n    if n < 2:\n        return n\n",
           "<|im_start|>user\nWhat is 2 + 2?<|im_end|>\n<|im_start|>assistant\n"]


@pytest.fixture(scope="module")
def models(smollm2_dir, smollm2_hf_model):
    import transformers
    tok = transformers.AutoTokenizer.from_pretrained(smollm2_dir)
    return Engine.from_pretrained(smollm2_dir), smollm2_hf_model, tok


def test_logits_match_transformers_on_prompts(models):
    eng, hf, tok = models
    for prompt in PROMPTS:
        ids = tok(prompt)["input_ids"]
        ours, theirs = eng.logits(ids), hf_logits(hf, ids)
        assert (ours - theirs).abs().max().item() <= 1e-4, prompt
        assert eng.validate(ours) == []


def test_botchan_perplexity_equals_transformers(models, botchan_text):
    eng, hf, tok = models
    ids = tok(botchan_text)["input_ids"][:1024]
    assert len(ids) == 1024
    targets = torch.tensor(ids[1:])
    ours = math.exp(torch.nn.functional.cross_entropy(eng.logits(ids)[:-1], targets).item())
    with torch.no_grad():
        theirs = math.exp(hf(input_ids=torch.tensor([ids]), labels=torch.tensor([ids])).loss.item())
    assert abs(ours - theirs) / theirs <= 1e-3
    # measured 24.87 (ours == transformers); the issue quoted ~31.75, which neither side reproduces on this
    # Q4_1-dequantized checkpoint with the plain first 1024 tokens, so the band only guards against nonsense
    assert 20 < ours < 45, ours
