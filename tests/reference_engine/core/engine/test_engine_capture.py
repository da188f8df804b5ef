"""Activation capture hooks, validate(), the lazy tokenizer and the generate/stream delegation."""
from __future__ import annotations

import math

import pytest
import torch

import reference_engine.generate as generate_module
from reference_engine.core.capture import ActivationRecorder
from reference_engine.errors import ModelDirError
from tests.reference_engine.core.tiny_models import any_ids, engine, hf_model
from tests.hf_models import hf_logits


def test_recorder_sees_every_sub_module_in_order_and_matches_transformers_hidden_states():
    eng = engine("llama_gqa4_tied_bias")
    ids = any_ids(9, seed=8)
    recorder = ActivationRecorder(keep=True)
    logits = eng.logits(ids, capture=recorder)
    layers = eng.config.num_hidden_layers
    expected = [(-1, "embed")] + [(i, m) for i in range(layers)
                                  for m in ("input_norm", "attn", "post_norm", "mlp", "hidden")]
    expected += [(layers, "final_norm"), (layers, "logits")]
    assert [(s.layer, s.module) for s in recorder.stats] == expected
    assert torch.equal(recorder.tensors[(layers, "logits")].float(), logits)
    with torch.no_grad():
        out = hf_model("llama_gqa4_tied_bias")(input_ids=torch.tensor([ids]), output_hidden_states=True)
    # transformers' hidden_states: embeddings, then the residual stream after each layer but the last
    # (its last entry is after the final norm)
    assert (recorder.tensors[(-1, "embed")] - out.hidden_states[0][0]).abs().max() <= 1e-5
    assert (recorder.tensors[(0, "hidden")] - out.hidden_states[1][0]).abs().max() <= 1e-4
    assert (recorder.tensors[(layers, "final_norm")] - out.hidden_states[-1][0]).abs().max() <= 1e-4
    stat = recorder.by_layer()[1]["mlp"]
    assert stat.nonfinite == 0 and stat.max_abs > 0 and stat.rms > 0 and stat.shape == (9, 64)
    assert recorder.first_nonfinite() is None


def test_injected_nan_is_located_at_its_layer_and_module():
    eng = engine("llama_gqa4_tied_bias")
    recorder = ActivationRecorder()

    def inject(layer, module, x):
        if (layer, module) == (1, "attn"):
            x = x.clone()
            x[3, 0] = float("nan")
            recorder(layer, module, x)
            return x
        return recorder(layer, module, x)

    logits = eng.logits(any_ids(6), capture=inject)
    first = recorder.first_nonfinite()
    assert (first.layer, first.module, first.first_nonfinite_token) == (1, "attn", 3)
    assert any("non-finite" in p for p in eng.validate(logits))
    assert math.isfinite(first.max_abs)


def test_validate_flags_shape_and_magnitude():
    eng = engine("llama_mha_untied")
    vocab = eng.config.vocab_size
    assert eng.validate(torch.zeros(3, vocab)) == []
    assert any("shape" in p for p in eng.validate(torch.zeros(3, vocab + 1)))
    big = torch.zeros(2, vocab)
    big[1, 5] = -250.0
    assert any("max |logit| is 250" in p for p in eng.validate(big))
    assert eng.validate(big, max_abs_logit=300.0) == []
    assert eng.validate("not a tensor") == ["logits are a str, not a tensor"]
    eng.cache.allocator.ref_counts[0] = 2             # corrupt the allocator: validate reports, never raises
    assert any("free list" in p for p in eng.validate())


def test_tokenizer_is_lazy_and_missing_one_is_a_clear_error():
    eng = engine("llama_mha_untied")
    with pytest.raises(ModelDirError, match="tokenizer.json"):
        eng.tokenizer


def test_generate_and_stream_delegate_to_the_generate_module(monkeypatch):
    eng = engine("llama_mha_untied")
    calls = []
    monkeypatch.setattr(generate_module, "generate", lambda e, p, s, **kw: calls.append(("g", e, p, s, kw)) or 1,
                        raising=False)
    monkeypatch.setattr(generate_module, "stream", lambda e, p, s, **kw: calls.append(("s", e, p, s, kw)) or 2,
                        raising=False)
    assert eng.generate(["hi"], "params", max_new_tokens=3) == 1
    assert eng.stream("hi") == 2
    assert calls == [("g", eng, ["hi"], "params", {"max_new_tokens": 3}), ("s", eng, "hi", None, {})]


def test_bf16_logits_track_fp32():
    ids = any_ids(30, seed=6)
    ref = hf_logits(hf_model("qwen2_mqa_bias"), ids)
    for dtype in ("bfloat16", "float16"):
        assert (engine("qwen2_mqa_bias", dtype=dtype).logits(ids) - ref).abs().max() < 0.1


def test_bad_device_and_dtype_are_one_line_errors():
    from reference_engine.engine import Engine
    from tests.reference_engine.core.tiny_models import model_dir
    with pytest.raises(ValueError, match="unsupported dtype 'int8'"):
        Engine.from_pretrained(model_dir("llama_mha_untied"), dtype="int8")
    with pytest.raises(ValueError, match="invalid device"):
        Engine.from_pretrained(model_dir("llama_mha_untied"), device="gpu0")
    if not torch.cuda.is_available():
        with pytest.raises(ValueError, match="CUDA is not available"):
            Engine.from_pretrained(model_dir("llama_mha_untied"), device="cuda")
