"""gpt-oss from GGUF: a tiny transformers-built gpt-oss (float32 weights) and its MXFP4 copy (experts as
`*_blocks` + `*_scales`, as the released checkpoints ship), each converted by llama.cpp's own
convert_hf_to_gguf.py (--outtype f32; SmolLM2's tokenizer rides along, the converter needs a pre-tokenizer it
knows), give the engine the same logits and greedy continuations as their safetensors directories (and transformers').

What the pinned converter writes: arch "gpt-oss"; the fused interleaved gate_up split into ffn_gate_exps and
ffn_up_exps (columns ::2 and 1::2, transposed to [experts, inter, hidden]) with their biases split the same
way, down transposed, `attn_sinks.weight`; from an MXFP4 checkpoint, ggml's block_mxfp4 (nibbles reordered,
the scale in front of each block: files/gguf_mxfp4.py), which dequantizes to exactly the checkpoint's values,
so both comparisons are exact (asserted <= 1e-4). Not written, hard-coded in llama.cpp: swiglu_limit 7.0 (the
model here uses it, with its experts scaled so the clamp bites), alpha 1.702, the window on even layers,
YaRN's truncate (false, the released config's). The oracle for the dequantization is the sdist's own gguf-py
(quants.MXFP4, run in a subprocess so its package does not shadow the installed gguf).

Cost: three conversions, ~12 s, ~22 s and ~15 s on 2 cores (the module runs ~90 s; the first test pays two)."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest
import torch
from safetensors.torch import load_file, save_file

from reference_engine.core import CoreEngine
from reference_engine.files.gguf_config import load_gguf_config
from reference_engine.files import gguf_mxfp4
from reference_engine.files.gguf_mxfp4 import dequantize_mxfp4
from reference_engine.files.gguf_weights import GGUFWeights
from reference_engine.files.quant.mxfp4 import dequantize as hf_mxfp4
from tests import assets, assets_gguf
from tests.reference_engine.core.gguf_family_runs import check_is_clean, ragged_batch_equals_alone
from tests.conftest import _asset
from tests.hf_models import hf_logits
from tests.reference_engine.core.tiny_models import build, load_hf
from tests.reference_engine.core.mxfp4_copies import mxfp4_copy
from tests.reference_engine.core.greedy import greedy, hf_greedy

TOL = 1e-4
EXPERT_GAIN = 3.0       # gate/up pre-activations of std ~7: well past llama.cpp's fixed limit 7.0 for many tokens


@pytest.fixture(scope="module")
def converted(tmp_path_factory):
    """kind ("f32" | "mxfp4") -> (safetensors directory, its GGUF)."""
    root = tmp_path_factory.mktemp("gpt_oss_gguf")
    tok = _asset(assets.smollm2_dir)
    vocab = json.loads((tok / "config.json").read_text())["vocab_size"]
    hf_dir = build(root / "f32", "gpt_oss", seed=4, vocab_size=vocab, swiglu_limit=7.0)
    tensors = load_file(hf_dir / "model.safetensors")
    for name in tensors:
        if name.endswith("experts.gate_up_proj"):
            tensors[name] = tensors[name] * EXPERT_GAIN
    save_file(tensors, hf_dir / "model.safetensors", metadata={"format": "pt"})
    for name in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(tok / name, hf_dir / name)
    dirs = {"f32": hf_dir, "mxfp4": mxfp4_copy(hf_dir, root / "mxfp4")}
    done: dict = {}

    def convert(kind: str, outtype: str = "f32"):
        if (kind, outtype) not in done:
            out = root / f"{kind}-{outtype}.gguf"
            done[kind, outtype] = dirs[kind], _asset(assets_gguf.convert_hf_dir, dirs[kind], out, outtype)
        return done[kind, outtype]
    return convert


def ids(n: int = 150, seed: int = 0) -> list[int]:
    return torch.randint(3, 49000, (n,), generator=torch.Generator().manual_seed(seed)).tolist()


@pytest.mark.assets
@pytest.mark.parametrize("kind", ["f32", "mxfp4"])
def test_gguf_logits_equal_the_safetensors_model(converted, kind):
    hf_dir, path = converted(kind)
    from_gguf, from_hf = CoreEngine.from_pretrained(path), CoreEngine.from_pretrained(hf_dir)
    assert from_gguf.config.architecture == from_hf.config.architecture == "GptOssForCausalLM"
    assert from_gguf.windows == from_hf.windows and None in from_gguf.windows and 8 in from_gguf.windows
    assert from_gguf.config.family.settings == from_hf.config.family.settings
    tokens = ids()
    ours, ref = from_gguf.logits(tokens), from_hf.logits(tokens)
    diff = (ours - ref).abs().max().item()
    print(f"\ngpt-oss {kind} GGUF vs safetensors: max |logit diff| {diff:.2e}")
    assert diff <= TOL
    prompt = tokens[:40]                     # prefill then decode steps through the paged cache, past the window
    steps = greedy(from_gguf, prompt, 16)
    assert steps == greedy(from_hf, prompt, 16)
    if kind == "f32":       # and transformers' eager path on the same weights
        model = load_hf(hf_dir, experts="eager")
        assert (ours - hf_logits(model, tokens)).abs().max().item() <= TOL
        assert steps == hf_greedy(model, prompt, 16)


@pytest.mark.assets
def test_gguf_experts_are_the_checkpoints_tensors(converted):
    """Every tensor read back under its Hugging Face name: float32 ones equal, the MXFP4 experts equal the
    checkpoint's own blocks dequantized (files/quant/mxfp4.py), the ggml types the converter chose kept. Bit-equal
    on any CPU: F32 values are read back and only moved (de-interleaved, transposed), and an MXFP4 value is a
    table entry times a power of two, exact in float32 on both sides: no BLAS product on either side."""
    for kind in ("f32", "mxfp4"):
        hf_dir, path = converted(kind)
        weights, stored = GGUFWeights.open(path), load_file(hf_dir / "model.safetensors")
        assert not weights.unmapped
        for name in weights.names:
            if name in stored:
                assert torch.equal(weights.get(name), stored[name]), name
            else:
                want = hf_mxfp4(stored[name + "_blocks"], stored[name + "_scales"]).transpose(1, 2)
                assert torch.equal(weights.get(name), want), name
        experts = {weights.info(n).ggml_type for n in weights.names if n.endswith(("gate_up_proj", "down_proj"))}
        assert experts == ({"MXFP4"} if kind == "mxfp4" else {"F32"})


@pytest.mark.assets
def test_q8_0_requantization_keeps_the_mxfp4_experts(converted):
    """--outtype q8_0 from the MXFP4 checkpoint: the experts stay MXFP4 (bit-equal to the checkpoint's: a table
    entry times a power of two, exact in float32; the F32 tensors read back unchanged), the
    2-D weights become Q8_0, each within Q8_0's bound of the float tensor: half a step of a per-32 scale
    d = amax / 127 stored as float16 (d * (1/2 + 127 * 2 ** -11) <= 0.0045 * the tensor's max |w|); measured
    0.0039. Logits are not bounded here: a perturbation this size flips top-k expert choices for some tokens
    (measured max |logit diff| 2.6, 12% of argmaxes) -- the quantization's effect, not the reader's."""
    hf_dir, path = converted("mxfp4", "q8_0")
    weights, stored = GGUFWeights.open(path), load_file(hf_dir / "model.safetensors")
    types = {n: weights.info(n).ggml_type for n in weights.names}
    assert {t for n, t in types.items() if n.endswith(("gate_up_proj", "down_proj"))} == {"MXFP4"}
    assert "Q8_0" in types.values()
    for name in weights.names:
        got = weights.get(name)
        if types[name] == "MXFP4":
            assert torch.equal(got, hf_mxfp4(stored[name + "_blocks"], stored[name + "_scales"]).transpose(1, 2))
        elif types[name] == "Q8_0":
            assert (got - stored[name]).abs().max() <= 0.0045 * stored[name].abs().max(), name
        else:
            assert torch.equal(got, stored[name]), name


@pytest.mark.assets
def test_mxfp4_dequantization_equals_gguf_py(converted, tmp_path, monkeypatch):
    """Our torch kernel against the sdist's gguf-py (quants.MXFP4.dequantize_blocks, the converter's own
    package): random blocks with every scale byte 0..255 (denormal 2 ** -128 and e = 255 included) and every
    code, and the converted file's expert tensors."""
    gen = np.random.default_rng(0)
    raw = gen.integers(0, 256, size=(256, 4 * 17), dtype=np.uint8)
    raw[:, 0] = np.arange(256)                                   # every scale byte once
    _, path = converted("mxfp4")
    weights = GGUFWeights.open(path)
    tensor = weights.stored_tensor("model.layers.1.mlp.experts.down_proj")
    from_file = weights.gguf.tensor_bytes(tensor).numpy().reshape(-1, tensor.nbytes // (tensor.numel // tensor.dims[0]))
    np.save(tmp_path / "random.npy", raw)
    np.save(tmp_path / "file.npy", from_file)
    script = ("import sys, numpy as np\nfrom gguf import GGMLQuantizationType as T\nfrom gguf.quants import "
              "dequantize\nfor name in ('random', 'file'):\n    x = np.load(f'{sys.argv[1]}/{name}.npy')\n"
              "    np.save(f'{sys.argv[1]}/{name}.out.npy', dequantize(x, T.MXFP4))\n")
    sdist = _asset(assets_gguf.llamacpp_sdist)
    env = {**os.environ, "PYTHONPATH": str(sdist / "gguf-py")}
    subprocess.run([sys.executable, "-c", script, str(tmp_path)], check=True, env=env, timeout=120)
    for chunk in (gguf_mxfp4.CHUNK_VALUES, 1000):              # one step, and rows a few at a time
        monkeypatch.setattr(gguf_mxfp4, "CHUNK_VALUES", chunk)
        for name, data, cols in (("random", raw, 4 * 32), ("file", from_file, tensor.dims[0])):
            ref = torch.from_numpy(np.load(tmp_path / f"{name}.out.npy")).float()
            ours = dequantize_mxfp4(torch.from_numpy(data), cols)
            assert ours.shape == ref.shape and torch.equal(ours.isnan(), ref.isnan())
            assert torch.equal(torch.nan_to_num(ours), torch.nan_to_num(ref)), name


@pytest.mark.assets
def test_gguf_config_holds_what_llama_cpp_hard_codes(converted):
    _, path = converted("f32")
    raw = load_gguf_config(path).raw
    assert raw["swiglu_limit"] == 7.0 and raw["swiglu_alpha"] == 1.702
    assert raw["layer_types"] == ["sliding_attention", "full_attention"] * 2 and raw["sliding_window"] == 8
    assert raw["rope_scaling"] == {"rope_type": "yarn", "factor": 8.0, "original_max_position_embeddings": 32,
                                   "truncate": False, "beta_fast": 32.0, "beta_slow": 1.0}
    assert raw["num_local_experts"] == 6 and raw["num_experts_per_tok"] == 2 and raw["intermediate_size"] == 32


@pytest.mark.assets
def test_streaming_from_the_mxfp4_gguf(converted):
    """The layer-at-a-time reader (readers/gguf_reader.py) dequantizes the MXFP4 experts with the same kernel
    and interleaves gate/up the same way: logits equal the resident safetensors engine's."""
    from reference_engine.engine import Engine
    hf_dir, path = converted("mxfp4")
    tokens = ids(60, seed=1)
    streamed = Engine.from_pretrained(path, streaming=True).logits(tokens)
    # streaming reads the head in row blocks: BLAS may pick another kernel for that shape on another CPU
    torch.testing.assert_close(streamed, CoreEngine.from_pretrained(hf_dir).logits(tokens), atol=1e-5, rtol=1e-5)


def test_a_sliding_window_pattern_key_overrides_the_hard_coded_one():
    """llama.cpp reads attention.sliding_window_pattern when a GGUF has it (a bool per layer, or a period n:
    layer i slides when i % n < n - 1) and falls back to a period of 2; the config follows the same rule."""
    from reference_engine.files.gguf_arch import ARCHS
    derive = ARCHS["gpt-oss"].derive
    kinds = {True: "sliding_attention", False: "full_attention"}
    assert derive({"num_hidden_layers": 4})["layer_types"] == [kinds[s] for s in (True, False, True, False)]
    assert derive({"num_hidden_layers": 6, "sliding_window_pattern": 3})["layer_types"] == \
        [kinds[s] for s in (True, True, False) * 2]
    assert derive({"num_hidden_layers": 3, "sliding_window_pattern": [False, True, True]})["layer_types"] == \
        [kinds[s] for s in (False, True, True)]


@pytest.mark.assets
def test_the_mxfp4_gguf_passes_the_gguf_checks(converted):
    """The converter labels the file MOSTLY_MXFP4_MOE and quantizes only the stacked experts: GGF009 counts
    those (it looked at 2-D block weights only and warned on every MXFP4 gpt-oss GGUF), GGF008 reads every
    MXFP4 value finite."""
    from llmdoctor.run.runner import run_checks
    _, path = converted("mxfp4")
    report = run_checks(path, select=["GGF"], device="cpu")
    assert not [f for f in report.findings if f.severity.value != "info"], report.findings
    assert {"GGF008", "GGF009"} <= {r.id for r in report.checks if r.status == "passed"}


@pytest.mark.assets
@pytest.mark.parametrize("drop", ["blk.1.ffn_up_exps.bias", "blk.2.ffn_gate_exps.weight"])
def test_a_missing_half_of_gate_up_is_a_clear_error(converted, drop):
    """gate and up are only meaningful together: a file without one of them names the fused tensor and the
    parts found (a ModelDirError, one line), instead of a model with half its gate_up columns."""
    from reference_engine.errors import ModelDirError
    from reference_engine.files.gguf_file import GGUFFile
    from reference_engine.files.gguf_weights import gguf_arch
    _, path = converted("f32")
    gguf = GGUFFile.open(path)
    del gguf.tensors[drop]                  # the file as read, less one tensor
    with pytest.raises(ModelDirError, match="gate_up_proj.*missing or disagree"):
        GGUFWeights(gguf, gguf_arch(gguf))


@pytest.mark.assets
@pytest.mark.parametrize("kind", ["f32", "mxfp4"])
def test_ragged_batch_from_the_gguf_equals_each_sequence_alone(converted, kind):
    """Sinks and 8-token windows per sequence of the batch, experts from the MXFP4 blocks."""
    hf_dir, path = converted(kind)
    ragged_batch_equals_alone(path, hf_dir if kind == "f32" else None)


@pytest.mark.assets
def test_check_on_the_mxfp4_gguf_is_clean(converted):
    """Expected: transformers zeroes the pad row (id 0, SmolLM2's <|endoftext|>), EMB001's warning."""
    check_is_clean(converted("mxfp4")[1], frozenset({"EMB001"}))
