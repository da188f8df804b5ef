"""The RoPE table against transformers' rotary embedding, for every rope_scaling type, up to the table's end."""
from __future__ import annotations

import pytest
import torch

from reference_engine.config import load_config, parse_config
from reference_engine.errors import ModelDirError, UnsupportedError
from reference_engine.core.rope import build_rope_table, rope_parameters
from tests.reference_engine.core.tiny_models import LLAMA_LIKE, hf_model, model_dir

ROPE_VARIANTS = [v for v in sorted(LLAMA_LIKE) if "rope" in v] + ["llama_mha_untied"]


def _hf_cos_sin(variant: str, positions: torch.Tensor):
    model = hf_model(variant)
    x = torch.zeros(1, dtype=torch.float32)
    cos, sin = model.model.rotary_emb(x, positions[None])
    return cos[0], sin[0]


@pytest.mark.parametrize("variant", ROPE_VARIANTS)
def test_table_matches_transformers_at_both_ends(variant):
    config = load_config(model_dir(variant))
    table = build_rope_table(config)
    top = config.max_position_embeddings
    positions = torch.cat([torch.arange(0, 8), torch.arange(top - 8, top)])
    cos, sin = table.lookup(positions)
    hf_cos, hf_sin = _hf_cos_sin(variant, positions)
    assert torch.equal(cos, hf_cos) and torch.equal(sin, hf_sin)
    assert table.validate(top - 1) == []


def test_scaling_types_really_change_the_table():
    tables = {v: build_rope_table(load_config(model_dir(v))) for v in ROPE_VARIANTS}
    # dynamic NTK only rescales past max_position_embeddings, so inside the table it equals default RoPE
    assert torch.equal(tables["llama_rope_dynamic"].cos, tables["llama_mha_untied"].cos)
    last = {v: t.cos[-1] for v, t in tables.items() if v != "llama_rope_dynamic"}
    names = list(last)
    for i, a in enumerate(names):
        for b in names[i + 1:]:
            assert not torch.allclose(last[a], last[b]), (a, b)
    yarn = tables["qwen2_rope_yarn_mscale"]
    assert yarn.attention_scaling != 1.0 and yarn.validate() == []


def test_lookup_past_the_table_raises():
    table = build_rope_table(load_config(model_dir("llama_rope_linear")))
    with pytest.raises(ValueError, match="outside the RoPE table"):
        table.lookup(torch.tensor([0, table.max_positions]))
    assert "position 256 was requested" in table.validate(256)[0]


def _raw(**extra):
    return {"architectures": ["LlamaForCausalLM"], "vocab_size": 10, "hidden_size": 16, "intermediate_size": 32,
            "num_hidden_layers": 1, "num_attention_heads": 2, "max_position_embeddings": 64, **extra}


def test_old_style_rope_scaling_and_top_level_theta_are_read():
    config = parse_config(_raw(rope_theta=500.0, rope_scaling={"type": "linear", "factor": 2.0}))
    params = rope_parameters(config)
    assert params["rope_type"] == "linear" and params["rope_theta"] == 500.0
    new_style = parse_config(_raw(rope_parameters={"rope_type": "linear", "rope_theta": 500.0, "factor": 2.0}))
    assert torch.equal(build_rope_table(config).cos, build_rope_table(new_style).cos)


def test_bad_rope_parameters_are_clear_errors():
    with pytest.raises(UnsupportedError, match="made_up"):
        build_rope_table(parse_config(_raw(rope_scaling={"type": "made_up", "factor": 2.0})))
    with pytest.raises(ModelDirError, match="needs 'short_factor'"):   # "su": Phi-3's name for LongRoPE
        build_rope_table(parse_config(_raw(rope_scaling={"type": "su", "factor": 2.0})))
    with pytest.raises(ModelDirError, match="needs 'factor'"):
        build_rope_table(parse_config(_raw(rope_scaling={"type": "linear"})))
    with pytest.raises(ModelDirError, match="needs 'low_freq_factor'"):
        build_rope_table(parse_config(_raw(rope_scaling={"type": "llama3", "factor": 8.0})))


def test_rows_are_built_as_positions_reach_them():
    """A 2^20-position model (Granite 4-H's GGUF says so) gets INITIAL_ROWS rows up front, not a 1 GiB table; rows
    past them are built when a position reaches them, equal to the rows a whole table holds, and the model's
    limit still bounds the lookup."""
    from reference_engine.core.rope import INITIAL_ROWS, rope_rows
    config = parse_config(_raw(max_position_embeddings=1 << 20, rope_theta=10000.0))
    table = build_rope_table(config)
    assert table.cos.shape[0] == INITIAL_ROWS and table.max_positions == 1 << 20
    positions = torch.tensor([0, INITIAL_ROWS - 1, INITIAL_ROWS, 3 * INITIAL_ROWS + 5, (1 << 20) - 1])
    cos, sin = table.lookup(positions)
    inv_freq = 1.0 / 10000.0 ** (torch.arange(0, 8, 2, dtype=torch.int64).float() / 8)    # head_dim 8
    want_cos, want_sin = rope_rows(positions, inv_freq, 1.0, "cpu", torch.float32)
    # the same elementwise products on both sides, but cos/sin of a row may take the SIMD or the scalar tail
    # path by where it sits in its call: a stated tolerance (fp32 cos/sin are within a few ulp of 1)
    assert torch.allclose(cos, want_cos, rtol=0, atol=1e-6) and torch.allclose(sin, want_sin, rtol=0, atol=1e-6)
    assert table.cos.shape[0] == 1 << 20 and table.validate() == []
    with pytest.raises(ValueError, match="outside the RoPE table"):
        table.lookup(torch.tensor([1 << 20]))
