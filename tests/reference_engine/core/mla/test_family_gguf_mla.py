"""DeepSeek-V3 (q LoRA, YaRN, groups), DeepSeek-V2-Lite (plain q_proj, greedy softmax router), a V2 with
group-limited routing and attention + MLP biases, and GLM-4.5 (q/k norms, biases, partial rotary, groups) from
GGUF: tiny transformers-built models (tests/reference_engine/core/tiny_models.py) converted by llama.cpp's own
convert_hf_to_gguf.py (--outtype f32) give the engine the same logits as their safetensors directories and
transformers', and stream under a memory budget to the same logits.

The models carry what the GGUF can say (files/gguf_mla.py): mscale == mscale_all_dim (only 0.1 * mscale_all_dim
is stored; llama.cpp's arithmetic is transformers' exactly then). The V3 config has no `scoring_func` (as
transformers' DeepseekV3Config writes it): no expert_gating_func key, its exp_probs_b tensors say V3. The
converter needs a pre-tokenizer it knows: SmolLM2's tokenizer rides along, for GLM with the four added tokens its
_set_vocab_glm looks up. Each conversion takes 15-50 s on 2 cores (four here: the module runs 1-3 minutes on a
busy machine; the first test of each model is over 10 s)."""
from __future__ import annotations

import json
import shutil

import pytest
import torch

from llmdoctor.run.workloads import CHECK_QUICK
from reference_engine.budget.plan import GiB, make_plan
from reference_engine.core import CoreEngine
from reference_engine.files.gguf_config import load_gguf_config
from reference_engine.files.gguf_weights import GGUFWeights
from reference_engine.streaming.streaming_core import StreamingCore
from tests import assets, assets_gguf
from tests.conftest import _asset
from tests.hf_models import hf_logits
from tests.reference_engine.core.gguf_family_runs import check_is_clean, ragged_batch_equals_alone
from tests.reference_engine.core.tiny_families import YARN
from tests.reference_engine.core.tiny_models import build, load_hf

TOL = 1e-4
GLM_TOKENS = ("[gMASK]", "<|user|>", "<|endoftext|>", "<|observation|>")
# variant -> overrides: what the GGUF can carry (module docstring)
MODELS = {"dsv3_qlora_yarn_groups": {"rope_parameters": {**YARN, "mscale": 0.7, "mscale_all_dim": 0.7}},
          "dsv2_lite_greedy": {"rope_parameters": {**YARN, "mscale": 0.9, "mscale_all_dim": 0.9}},
          "dsv2_group_limited_bias": {},       # V2 groups, attention and MLP biases (told by the tensors)
          "glm45_qknorm_groups_bias": {}}


@pytest.fixture(scope="module")
def converted(tmp_path_factory):
    root = tmp_path_factory.mktemp("mla_gguf")
    tok = _asset(assets.smollm2_dir)
    vocab = json.loads((tok / "config.json").read_text())["vocab_size"]
    done: dict = {}

    def convert(variant: str):
        if variant in done:
            return done[variant]
        hf_dir, tokenizer = root / variant, json.loads((tok / "tokenizer.json").read_text())
        extra = GLM_TOKENS if variant.startswith("glm") else ()
        tokenizer["added_tokens"] += [{"id": vocab + i, "content": t, "single_word": False, "lstrip": False,
                                       "rstrip": False, "normalized": False, "special": True}
                                      for i, t in enumerate(extra)]
        build(hf_dir, variant, seed=4, vocab_size=vocab + len(extra), **MODELS[variant])
        (hf_dir / "tokenizer.json").write_text(json.dumps(tokenizer))
        shutil.copy(tok / "tokenizer_config.json", hf_dir / "tokenizer_config.json")
        done[variant] = hf_dir, _asset(assets_gguf.convert_hf_dir, hf_dir, root / f"{variant}.gguf", "f32")
        return done[variant]
    return convert


def random_ids(n: int, seed: int) -> list[int]:
    return torch.randint(3, 49000, (n,), generator=torch.Generator().manual_seed(seed)).tolist()


@pytest.mark.assets
@pytest.mark.parametrize("variant", sorted(MODELS))
def test_gguf_logits_equal_the_safetensors_model(converted, variant):
    """150 tokens: past original_max_position_embeddings (64), where YaRN and its mscale bite."""
    hf_dir, path = converted(variant)
    from_gguf, from_hf = CoreEngine.from_pretrained(path), CoreEngine.from_pretrained(hf_dir)
    assert from_gguf.config.architecture == from_hf.config.architecture
    assert from_gguf.config.family.settings == from_hf.config.family.settings
    assert from_gguf.config.num_hidden_layers == from_hf.config.num_hidden_layers
    ids = random_ids(150, 0)
    ours, ref = from_gguf.logits(ids), from_hf.logits(ids)
    diff = (ours - ref).abs().max().item()
    print(f"\n{variant} GGUF vs safetensors: max |logit diff| {diff:.2e}")
    assert diff <= TOL and (ours - hf_logits(load_hf(hf_dir), ids)).abs().max().item() <= TOL


@pytest.mark.assets
def test_the_split_kv_b_and_the_stacked_experts_come_back_as_stored(converted):
    """Every Hugging Face tensor of the DeepSeek-V3 model, kv_b rebuilt from k_b (transposed) and v_b included,
    equals the safetensors file's; the config says what the metadata lost the way llama.cpp assumes it."""
    from safetensors.torch import load_file
    hf_dir, path = converted("dsv3_qlora_yarn_groups")
    theirs, ours = load_file(hf_dir / "model.safetensors"), GGUFWeights.open(path)
    assert set(ours.names) == set(theirs) and not ours.unmapped
    for name, tensor in theirs.items():   # F32 values read back, transposed and concatenated: no arithmetic
        assert torch.equal(ours.get(name), tensor), name
    raw = load_gguf_config(path).raw
    assert raw["rope_scaling"]["mscale"] == pytest.approx(0.7) == raw["rope_scaling"]["mscale_all_dim"]
    assert raw["num_key_value_heads"] == 4 and raw["qk_nope_head_dim"] == 12 and raw["rope_interleave"]


@pytest.mark.assets
def test_streams_under_a_budget_with_the_same_logits(converted):
    """The layer-at-a-time reader (readers/gguf_reader.py) rebuilds kv_b and slices the experts the same way."""
    _, path = converted("dsv3_qlora_yarn_groups")
    # a model this narrow is cheaper resident (its 49152-row embedding dominates): streaming is forced, as a
    # torchrun pipeline or LLMDOCTOR_STREAMING=1 does, under the budget its own plan asks for
    full = make_plan(path, 64 * GiB, workload=CHECK_QUICK, force="streaming")
    plan = make_plan(path, full.predicted_peak_bytes, workload=CHECK_QUICK, force="streaming")
    assert plan.streaming and plan.predicted_peak_bytes <= plan.budget_bytes
    ids = random_ids(80, 1)
    streamed = StreamingCore.from_pretrained(path, head_block_bytes=4096).logits(ids)
    assert (streamed - CoreEngine.from_pretrained(path).logits(ids)).abs().max().item() <= TOL


@pytest.mark.assets
@pytest.mark.parametrize("variant", sorted(MODELS))
def test_ragged_batch_from_the_gguf_equals_each_sequence_alone(converted, variant):
    hf_dir, path = converted(variant)
    ragged_batch_equals_alone(path, hf_dir)


@pytest.mark.assets
@pytest.mark.parametrize("variant", ["dsv3_qlora_yarn_groups", "glm45_qknorm_groups_bias"])
def test_check_on_the_gguf_is_clean(converted, variant):
    """One file per GGUF architecture (deepseek2, glm4moe). Expected warnings, true of these random models:
    transformers zeroes the pad row (id 0, SmolLM2's <|endoftext|>: EMB001), and V3's correction bias N(0, 0.3)
    shuts one expert of layer 2 out of every probe token (MOE004)."""
    expected = {"EMB001", "MOE004"} if variant.startswith("dsv3") else {"EMB001"}
    check_is_clean(converted(variant)[1], frozenset(expected))
