"""LFM2 (block_auto_adjust_ff_dim false) whose config.json says things the way Lfm2Config reads them, against
transformers loading the same directory: fp32 logits within 1e-4 over 120 tokens and for each row of an
unequal-length batch. Lfm2Config reads its norms' eps from `norm_eps` only (a generic `rms_norm_eps` beside it
runs nothing; absent, 1e-5), its RoPE base defaults to 1e6, and the release's `block_ff_dim` and `tie_embedding`
win over `intermediate_size` and `tie_word_embeddings`."""
from __future__ import annotations

import json
import shutil

import pytest
import torch

from reference_engine.core import CoreEngine
from tests.hf_models import hf_logits
from tests.reference_engine.core.tiny_models import model_dir, random_ids

TOL = 1e-4
VARIANT = "lfm2_bias_untied_no_adjust"


def stray_rms_norm_eps(raw: dict) -> dict:
    return {**raw, "rms_norm_eps": 1e-6}


def no_norm_eps(raw: dict) -> dict:
    return {k: v for k, v in raw.items() if k != "norm_eps"}


def no_rope_block(raw: dict) -> dict:
    return {k: v for k, v in raw.items() if k not in ("rope_parameters", "rope_theta")}


def release_names(raw: dict) -> dict:
    """The LFM2 release's spellings: block_ff_dim beside an intermediate_size transformers overrides with it,
    tie_embedding beside a tie_word_embeddings it overrides."""
    return {**raw, "block_ff_dim": raw["intermediate_size"], "intermediate_size": 4 * raw["hidden_size"],
            "tie_embedding": raw["tie_word_embeddings"], "tie_word_embeddings": not raw["tie_word_embeddings"]}


@pytest.fixture(scope="module")
def edited(tmp_path_factory):
    """edit -> (directory, transformers' model of it)."""
    import transformers
    out = {}
    for edit in (stray_rms_norm_eps, no_norm_eps, no_rope_block, release_names):
        path = tmp_path_factory.mktemp(edit.__name__) / "m"
        shutil.copytree(model_dir(VARIANT), path)
        raw = json.loads((path / "config.json").read_text())
        (path / "config.json").write_text(json.dumps(edit(raw)))
        model = transformers.AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
        out[edit.__name__] = path, model
    return out


@pytest.mark.parametrize("edit", ["stray_rms_norm_eps", "no_norm_eps", "no_rope_block", "release_names"])
def test_logits_single_and_batched_match_transformers(edited, edit):
    path, model = edited[edit]
    eng = CoreEngine.from_pretrained(path, block_size=4)
    ids = random_ids(120, seed=1)
    theirs = hf_logits(model, ids)
    diff = (eng.logits(ids) - theirs).abs().max().item()
    print(f"\n{edit}: max |logit diff| {diff:.2e} (max |logit| {theirs.abs().max():.2f})")
    assert diff <= TOL and theirs.std() > 0.05
    prompts = [random_ids(n, seed=n) for n in (37, 5, 21)]
    rows = eng.prefill([0, 1, 2], prompts, all_logits=True).split([len(p) for p in prompts])
    for row, prompt in zip(rows, prompts):
        assert (row - hf_logits(model, prompt)).abs().max().item() <= TOL
