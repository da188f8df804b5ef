"""gpt-oss against transformers' eager path on tiny random models it built (tests/.../tiny_models.py): fp32
logits within 1e-4 past the window and past original_max_position_embeddings, greedy equal, a ragged batch
equal to each sequence alone; each gpt-oss detail is shown to bite (taking it away moves the logits far past
the tolerance); MXFP4 experts dequantize exactly as transformers does and give transformers' logits, resident
and streamed under a budget."""
from __future__ import annotations

import dataclasses
import json
import shutil

import pytest
import torch
from safetensors.torch import load_file

from llmdoctor.run.workloads import CHECK_QUICK
from reference_engine.budget.plan import GiB, make_plan
from reference_engine.core import CoreEngine
from reference_engine.engine import Engine
from reference_engine.errors import ModelDirError
from reference_engine.files.quant.mxfp4 import dequantize
from reference_engine.generate import SamplingParams
from reference_engine.readers.quant_reader import QuantChunkedWeights
from reference_engine.streaming.streaming_core import StreamingCore
from tests.hf_models import hf_logits
from tests.reference_engine.core.mxfp4_copies import mxfp4_dir
from tests.reference_engine.core.tiny_families import GPT_OSS
from tests.reference_engine.core.tiny_models import hf_model, load_hf, model_dir, random_ids
from tests.same_sums import assert_same_sums
from tests.reference_engine.core.greedy import greedy, hf_greedy

TOL = 1e-4
LONG = 100          # > sliding_window (8) and > original_max_position_embeddings (32)


@pytest.mark.parametrize("seed", [0, 1])
def test_logits_and_greedy_match_transformers(seed):
    """~12 s for the first seed on 2 cores: importing transformers and building the models it writes."""
    eng = CoreEngine.from_pretrained(model_dir("gpt_oss", seed))
    ids = random_ids(LONG, seed=seed + 1)
    ours, theirs = eng.logits(ids), hf_logits(hf_model("gpt_oss", seed), ids)
    diff = (ours - theirs).abs().max().item()
    print(f"\ngpt-oss seed {seed}: max |logit diff| {diff:.2e} (max |logit| {theirs.abs().max():.2f})")
    assert diff <= TOL
    assert theirs.abs().max() > 0.5 and theirs.std() > 0.05        # not two flat tensors
    prompt = random_ids(40, seed=seed + 2)
    assert greedy(eng, prompt, 24) == hf_greedy(hf_model("gpt_oss", seed), prompt, 24)
    assert eng.cache.stats().used_blocks == 0


def test_ragged_batch_and_chunked_prefill_match_each_sequence_alone():
    eng = CoreEngine.from_pretrained(model_dir("gpt_oss"), block_size=4)
    prompts = [random_ids(n, seed=n) for n in (70, 9, 33)]
    rows = eng.prefill([0, 1, 2], prompts, all_logits=True).split([len(p) for p in prompts])
    for i, prompt in enumerate(prompts):
        assert (rows[i] - hf_logits(hf_model("gpt_oss"), prompt)).abs().max().item() <= TOL
    eng.prefill([3], [prompts[0][:25]])                             # chunked: 25 tokens, then the rest
    last = eng.prefill([3], [prompts[0][25:]])
    assert (last[0] - hf_logits(hf_model("gpt_oss"), prompts[0])[-1]).abs().max().item() <= TOL


def with_moe(eng: CoreEngine, **changes) -> None:
    bound = eng.config.family
    moe = dataclasses.replace(bound.settings.moe, **changes)
    eng.config.family = dataclasses.replace(bound, settings=dataclasses.replace(bound.settings, moe=moe))


def test_every_gpt_oss_detail_bites():
    """Each feature taken away in turn moves the logits by far more than the tolerance: the model exercises
    the sinks, the clamp (and `up + 1`), the window, YaRN and per-token routing."""
    ids = random_ids(LONG, seed=1)
    theirs = hf_logits(hf_model("gpt_oss"), ids)

    def off(eng):
        return (eng.logits(ids) - theirs).abs().max().item()

    eng = CoreEngine.from_pretrained(model_dir("gpt_oss"))
    for w in eng.weights.layers:
        w.extra["sinks"] = torch.full_like(w.extra["sinks"], -1e4)   # sinks gone: plain softmax
    assert off(eng) > 100 * TOL
    eng = CoreEngine.from_pretrained(model_dir("gpt_oss"))
    with_moe(eng, swiglu_limit=1e9)                                   # no clamp
    assert off(eng) > 100 * TOL
    eng = CoreEngine.from_pretrained(model_dir("gpt_oss"))
    eng.windows = [None] * len(eng.windows)                           # every layer full attention
    assert off(eng) > 100 * TOL
    eng = CoreEngine.from_pretrained(model_dir("gpt_oss"))
    with_moe(eng, method="softmax_topk")                              # Mixtral-style softmax-then-top-k
    assert off(eng) > 100 * TOL
    # routing differs per token: every layer uses more than top_k experts over the prompt
    chosen = {}

    def experts_used(layer, module, x):
        if module == "router":
            chosen[layer] = x.topk(GPT_OSS.base["num_experts_per_tok"], -1).indices.unique().numel()

    CoreEngine.from_pretrained(model_dir("gpt_oss")).logits(ids, capture=experts_used)
    assert min(chosen.values()) > GPT_OSS.base["num_experts_per_tok"]


def test_yarn_bites_past_the_original_context(tmp_path):
    """The same weights with plain RoPE: far from transformers' YaRN logits."""
    plain = tmp_path / "plain"
    shutil.copytree(model_dir("gpt_oss"), plain)
    config = json.loads((plain / "config.json").read_text())
    config["rope_parameters"] = {"rope_type": "default", "rope_theta": 150000.0}
    (plain / "config.json").write_text(json.dumps(config))
    ids = random_ids(LONG, seed=1)
    assert (CoreEngine.from_pretrained(plain).logits(ids) - hf_logits(hf_model("gpt_oss"), ids)).abs().max() > 100 * TOL


@pytest.mark.parametrize("change, field", [({"swiglu_limit": None}, "swiglu_limit"),
                                           ({"num_experts_per_tok": 7}, "num_experts_per_tok")])
def test_unusable_gpt_oss_fields_are_one_line_errors(change, field, tmp_path):
    bad = tmp_path / "bad"
    shutil.copytree(model_dir("gpt_oss"), bad)
    config = {**json.loads((bad / "config.json").read_text()), **change}
    (bad / "config.json").write_text(json.dumps(config))
    with pytest.raises(ModelDirError, match=field):
        CoreEngine.from_pretrained(bad)


def test_mxfp4_dequantization_equals_transformers():
    from transformers.integrations.mxfp4 import convert_moe_packed_tensors
    stored = load_file(mxfp4_dir() / "model.safetensors")
    for proj in ("gate_up_proj", "down_proj"):
        blocks, scales = (stored[f"model.layers.1.mlp.experts.{proj}_{s}"] for s in ("blocks", "scales"))
        ours = dequantize(blocks, scales).transpose(1, 2)
        assert torch.equal(ours, convert_moe_packed_tensors(blocks, scales, dtype=torch.float32))
    # every code and the scale extremes: all 256 byte values under exponents 0, 127 and 254
    blocks = torch.arange(256, dtype=torch.uint8).view(1, 1, 16, 16)
    scales = torch.tensor([[[0, 127, 254, 120] * 4]], dtype=torch.uint8)
    assert torch.equal(dequantize(blocks, scales).transpose(1, 2),
                       convert_moe_packed_tensors(blocks, scales, dtype=torch.float32))


def test_mxfp4_checkpoint_gives_transformers_logits():
    """transformers reads the MXFP4 directory itself (dequantizing on CPU): the oracle for the whole path."""
    ids = random_ids(LONG, seed=1)
    theirs = hf_logits(load_hf(mxfp4_dir(), experts="eager"), ids)
    eng = CoreEngine.from_pretrained(mxfp4_dir())
    assert (eng.logits(ids) - theirs).abs().max().item() <= TOL
    assert (theirs - hf_logits(hf_model("gpt_oss"), ids)).abs().max() > 100 * TOL    # FP4 rounding really changed it


def test_mxfp4_streams_under_a_budget_with_the_same_logits():
    path = mxfp4_dir()
    full = make_plan(path, 64 * GiB, workload=CHECK_QUICK)
    plan = make_plan(path, full.streaming_peak_bytes, workload=CHECK_QUICK)
    assert plan.streaming and plan.predicted_peak_bytes <= plan.budget_bytes
    ids = random_ids(40, seed=3)
    resident = CoreEngine.from_pretrained(path, num_blocks=64)
    streaming = StreamingCore.from_pretrained(path, num_blocks=64, head_block_bytes=4096)
    assert isinstance(streaming.reader, QuantChunkedWeights)
    assert_same_sums(streaming.logits(ids), resident.logits(ids))
    params = SamplingParams(max_new_tokens=5, ignore_eos=True)
    want = [o.token_ids for o in Engine.from_pretrained(path, num_blocks=64).generate([ids[:7]], params)]
    got = Engine.from_pretrained(path, num_blocks=64, streaming=True).generate([ids[:7]], params)
    assert [o.token_ids for o in got] == want
