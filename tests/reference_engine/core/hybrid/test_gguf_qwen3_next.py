"""Qwen3-Next (`qwen3next`) and Qwen3.5-MoE (`qwen35moe`) from GGUF: tiny transformers-built MoE hybrids
(decays spread over ~0.3-0.95, 150-token prompts past the conv window and the 64-token chunks) converted by
llama.cpp's pinned convert_hf_to_gguf.py (F32, --no-mtp) read back as their safetensors directory, tensor for
tensor: Qwen3-Next's q/k/v/z joined per key head from `attn_qkv` + `attn_gate`, `ssm_ba` as in_proj_ba, value
heads left grouped; Qwen3.5-MoE's tiled value heads (4 over 2 key heads) untiled; both with `ssm_a` = -exp(A_log),
the 1 + w norms, the [C, K] conv, stacked experts, the shared expert and its gate
(reference_engine/files/gguf_linear_attn.py). Logits within 1e-4 of transformers, greedy equal.

Cost: two conversions (tests/reference_engine/core/gguf_pairs.gguf_pair, shared with
tests/checks/test_qwen3_next_checks.py), ~10 s and ~15 s on 2 cores; the first test of each architecture
pays its conversion (~20-35 s on a loaded machine); the Q8_0 test converts once more (~15-25 s)."""
from __future__ import annotations

import pytest
import torch
from safetensors.torch import load_file

from reference_engine.core import CoreEngine
from reference_engine.files.gguf_weights import GGUFWeights
from tests.assets import or_fail
from tests.hf_models import hf_logits
from tests.reference_engine.core.greedy import greedy, hf_greedy
from tests.reference_engine.core.gguf_pairs import gguf_pair

pytestmark = pytest.mark.assets
TOL = 1e-4
ARCHS = ["qwen3next", "qwen35moe"]


def pair(arch: str):
    return or_fail(gguf_pair, arch)           # an asset that cannot be fetched fails the test: never a skip


def ids(n: int = 150, seed: int = 0) -> list[int]:
    return torch.randint(3, 49000, (n,), generator=torch.Generator().manual_seed(seed)).tolist()


@pytest.mark.parametrize("arch", ARCHS)
def test_gguf_tensors_are_the_checkpoints(arch):
    """Every Hugging Face tensor comes back from the GGUF (none left unmapped, none missing), equal up to the
    float32 rounding of the converter's own arithmetic (exp/log of A_log, the + 1 on norms)."""
    hf_dir, path = pair(arch)
    weights, stored = GGUFWeights.open(path), load_file(hf_dir / "model.safetensors")
    assert not weights.unmapped and set(weights.names) == set(stored)
    for name in weights.names:
        got = weights.get(name)
        assert got.shape == stored[name].shape and weights.info(name).shape == tuple(stored[name].shape), name
        torch.testing.assert_close(got, stored[name], atol=1e-6, rtol=1e-6, msg=name)
    if arch == "qwen3next":
        assert weights.composed("model.layers.0.linear_attn.in_proj_qkvz.weight")


@pytest.mark.parametrize("arch", ARCHS)
def test_gguf_logits_and_greedy_equal_transformers(arch):
    import transformers
    hf_dir, path = pair(arch)
    ours, ref = CoreEngine.from_pretrained(path), CoreEngine.from_pretrained(hf_dir)
    assert ours.config.architecture == ref.config.architecture
    assert ours.config.raw["layer_types"] == ref.config.raw["layer_types"]
    assert ours.config.family.settings == ref.config.family.settings
    tokens = ids()
    a, b = ours.logits(tokens), ref.logits(tokens)
    print(f"\n{arch} GGUF vs safetensors: max |logit diff| {(a - b).abs().max().item():.2e}")
    assert (a - b).abs().max().item() <= 1e-5
    hf = transformers.AutoModelForCausalLM.from_pretrained(hf_dir, dtype=torch.float32).eval()
    assert (a - hf_logits(hf, tokens)).abs().max().item() <= TOL
    prompt = tokens[:70]                        # past one chunk; then the recurrent form, step by step
    steps = greedy(ours, prompt, 12)
    assert steps == hf_greedy(hf, prompt, 12) == greedy(ref, prompt, 12)
    with ours.scratch() as (s,):                # the state carried across a prefill in pieces and decode steps
        ours.prefill([s], [tokens[:40]])
        ours.prefill([s], [tokens[40:100]])
        decoded = torch.stack([ours.decode([s], [t])[0] for t in tokens[100:108]])
    assert (decoded - b[100:108]).abs().max().item() <= TOL


def test_streaming_joins_qwen3_next_qkvz():
    """The layer-at-a-time reader (readers/gguf_reader.py) reads the joined in_proj_qkvz whole: logits equal."""
    from reference_engine.engine import Engine
    hf_dir, path = pair("qwen3next")
    tokens = ids(80, seed=1)
    streamed = Engine.from_pretrained(path, streaming=True).logits(tokens)
    # streaming reads the head in row blocks: BLAS may pick another kernel for that shape on another CPU
    torch.testing.assert_close(streamed, CoreEngine.from_pretrained(hf_dir).logits(tokens), atol=1e-5, rtol=1e-5)


def test_q8_0_qwen3_next_reads_within_the_quantization_bound(tmp_path):
    """--outtype q8_0: the joined in_proj_qkvz is dequantized part by part, every tensor within Q8_0's bound of
    the float one (half a step of a per-32 scale amax / 127 stored as float16: <= 0.0045 x the tensor's max |w|;
    measured 0.0041). Logits are not bounded here (a random MoE's top-k flips under a perturbation this size).
    ~15-25 s: one more conversion."""
    from tests import assets_gguf
    from tests.conftest import _asset
    hf_dir, _ = pair("qwen3next")
    path = _asset(assets_gguf.convert_hf_dir, hf_dir, tmp_path / "q8_0.gguf", "q8_0", None, ("--no-mtp",))
    weights, stored = GGUFWeights.open(path), load_file(hf_dir / "model.safetensors")
    assert weights.info("model.layers.0.linear_attn.in_proj_qkvz.weight").ggml_type == "Q8_0"
    for name in weights.names:
        assert (weights.get(name) - stored[name]).abs().max() <= 0.0045 * stored[name].abs().max(), name


@pytest.mark.parametrize("key", ["ssm.group_count", "ssm.time_step_rank"])
def test_sizes_the_metadata_breaks_are_findings_not_crashes(key, tmp_path):
    """A qwen3next GGUF whose DeltaNet head count says 0: the tensors cannot be mapped back (the value heads are
    split by it). Every check that reads weights reports the file unreadable (an error finding naming the tensor),
    CFG053 names the size, nothing crashes, and the engine refuses in one line."""
    from gguf import GGUFReader

    from llmdoctor.run.runner import run_checks
    from reference_engine.engine import Engine
    from reference_engine.errors import ModelDirError
    from tests.endpoint_assets import copy_gguf
    _, gguf = pair("qwen3next")
    bad = tmp_path / "bad.gguf"
    copy_gguf(GGUFReader(gguf), bad, {f"qwen3next.{key}": 0})
    report = run_checks(bad, quick=True)
    assert not [c.id for c in report.checks if c.status == "crashed"]
    unreadable = [f for f in report.findings if f.message.startswith("the model cannot be read for this check")]
    assert unreadable and all(f.severity.value == "error" and "blk.0." in f.message for f in unreadable)
    assert any(f.check == "CFG053" and f.severity.value == "error" for f in report.findings)
    with pytest.raises(ModelDirError) as refused:
        Engine.from_pretrained(bad)
    assert "\n" not in str(refused.value)


@pytest.mark.parametrize("arch", ARCHS)
def test_ragged_batch_from_the_gguf_equals_each_sequence_alone(arch):
    """Each sequence's DeltaNet state apart in one prefill; the check run: tests/checks/test_qwen3_next_checks.py."""
    from tests.reference_engine.core.gguf_family_runs import ragged_batch_equals_alone
    hf_dir, path = pair(arch)
    ragged_batch_equals_alone(path, hf_dir)
