"""config.json / generation_config.json / tokenizer_config.json loading, good and bad."""
from __future__ import annotations

import json
import shutil

import pytest

from reference_engine.config import (load_config, load_generation_config, load_tokenizer_config, parse_config,
                                     read_json)
from reference_engine.errors import ModelDirError, UnsupportedError
from reference_engine.files.weights import Weights
from tests.conftest import snapshot_dir


def write_config(tmp_path, config) -> None:
    text = config if isinstance(config, (str, bytes)) else json.dumps(config)
    (tmp_path / "config.json").write_bytes(text if isinstance(text, bytes) else text.encode())


def llama_config(**changes) -> dict:
    base = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "vocab_size": 100, "hidden_size": 64,
            "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2}
    base.update(changes)
    return {k: v for k, v in base.items() if v is not None}


@pytest.mark.parametrize("config, problem", [
    (None, "config.json: file not found"),
    ("{oops", "config.json: invalid JSON: Expecting property name enclosed in double quotes at line 1 column 2"),
    (b"\xff\xfe{}", "config.json: not UTF-8 text"),
    ("[1, 2]", "config.json: expected a JSON object, found list"),
    (llama_config(architectures=None, model_type="bert"), "no 'architectures' and no known 'model_type'"),
    (llama_config(hidden_size=None), "'hidden_size' must be an integer, found None"),
    (llama_config(num_hidden_layers=0), "'num_hidden_layers' must be >= 1, found 0"),
    (llama_config(vocab_size="32000"), "'vocab_size' must be an integer, found '32000'"),
    (llama_config(num_key_value_heads=True), "'num_key_value_heads' must be a positive integer"),
    (llama_config(rope_scaling="linear"), "'rope_scaling' must be an object or null"),
    (llama_config(rope_theta=-1), "'rope_theta' must be a positive number, found -1"),
    (llama_config(rope_parameters=[1]), "'rope_parameters' must be an object or null"),
])
def test_bad_config_is_a_one_line_error_naming_the_file(tmp_path, config, problem):
    if config is not None:
        write_config(tmp_path, config)
    with pytest.raises(ModelDirError) as err:
        load_config(tmp_path)
    message = str(err.value)
    assert message.startswith(str(tmp_path / "config.json") + ": ") and problem in message and "\n" not in message


def test_unknown_architecture_parses_and_the_engine_refuses_it(tmp_path):
    """Config parsing reads any causal decoder (static checks need it); running it is the engine families'
    business, which name the architecture in one UnsupportedError."""
    from reference_engine.core.families import bind
    write_config(tmp_path, llama_config(architectures=["MambaForCausalLM"]))
    cfg = load_config(tmp_path)
    assert cfg.architecture == "MambaForCausalLM" and cfg.hidden_size > 0
    with pytest.raises(UnsupportedError, match="unsupported architecture 'MambaForCausalLM'"):
        bind(cfg)


def test_missing_directory_and_file_instead_of_directory(tmp_path):
    with pytest.raises(ModelDirError, match="absent: no such directory"):
        load_config(tmp_path / "absent")
    (tmp_path / "file").write_text("x")
    with pytest.raises(ModelDirError, match="file: not a directory"):
        load_config(tmp_path / "file")


def test_oversized_json_is_refused_without_reading_it(tmp_path):
    path = tmp_path / "config.json"
    with open(path, "wb") as f:
        f.truncate(65 * 1024 * 1024)  # sparse: no bytes written
    with pytest.raises(ModelDirError, match="too large for a JSON config"):
        read_json(path)


def test_transformers5_rope_parameters_are_read(tmp_path):
    raw = llama_config(rope_parameters={"rope_theta": 100000.0, "rope_type": "default"})
    assert parse_config(raw).rope_theta == 100000.0 and parse_config(raw).rope_scaling is None
    scaled = llama_config(rope_parameters={"rope_theta": 500000.0, "rope_type": "llama3", "factor": 8.0})
    cfg = parse_config(scaled)
    assert cfg.rope_theta == 500000.0 and cfg.rope_scaling == {"rope_type": "llama3", "factor": 8.0}
    classic = llama_config(rope_theta=1e6, rope_scaling={"type": "linear", "factor": 2.0})
    assert (parse_config(classic).rope_theta, parse_config(classic).rope_scaling["factor"]) == (1e6, 2.0)


@pytest.mark.parametrize("preset", ["llama", "mistral", "qwen2", "qwen3"])
def test_factory_configs_agree_with_transformers(factory_model_dir, preset):
    from transformers import AutoConfig

    model = factory_model_dir(preset)
    cfg, hf = load_config(model), AutoConfig.from_pretrained(model)
    assert cfg.architecture == hf.architectures[0]
    for field in ("vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
                  "num_key_value_heads", "max_position_embeddings", "tie_word_embeddings", "bos_token_id",
                  "eos_token_id", "pad_token_id"):
        assert getattr(cfg, field) == getattr(hf, field), field
    assert cfg.head_dim == (getattr(hf, "head_dim", None) or hf.hidden_size // hf.num_attention_heads)
    assert cfg.rms_norm_eps == pytest.approx(hf.rms_norm_eps)
    assert cfg.rope_theta == hf.rope_parameters["rope_theta"]
    assert cfg.attention_bias == (preset == "qwen2") and cfg.qk_norm == (preset == "qwen3")


def test_generation_and_tokenizer_configs(factory_model_dir, tmp_path):
    model = factory_model_dir("llama")
    gen, tok_cfg, cfg = load_generation_config(model), load_tokenizer_config(model), load_config(model)
    assert gen.eos_token_ids == cfg.eos_token_ids and gen.bos_token_id == cfg.bos_token_id
    assert "{% for message in messages %}" in tok_cfg["chat_template"]
    assert load_generation_config(tmp_path) is None and load_tokenizer_config(tmp_path) == {}


@pytest.mark.assets
def test_smollm2_directory_loads_and_stays_untouched(smollm2_dir):
    before = snapshot_dir(smollm2_dir)
    cfg = load_config(smollm2_dir)
    assert (cfg.architecture, cfg.num_hidden_layers, cfg.hidden_size, cfg.num_attention_heads,
            cfg.num_key_value_heads, cfg.head_dim, cfg.vocab_size) == ("LlamaForCausalLM", 30, 576, 9, 3, 64, 49152)
    assert cfg.tie_word_embeddings and cfg.rope_theta == 100000.0 and cfg.torch_dtype == "float32"
    weights = Weights.open(smollm2_dir)
    assert "lm_head.weight" not in weights and weights.info("model.embed_tokens.weight").shape == (49152, 576)
    assert len(weights) == 1 + 30 * 9 + 1
    assert weights.get("model.norm.weight").shape == (576,)
    assert load_generation_config(smollm2_dir).eos_token_ids == [2]
    assert snapshot_dir(smollm2_dir) == before


def test_loading_a_factory_dir_changes_nothing(factory_model_dir, tmp_path):
    model = tmp_path / "m"
    shutil.copytree(factory_model_dir("mistral"), model)
    before = snapshot_dir(model)
    load_config(model), load_generation_config(model), load_tokenizer_config(model), Weights.open(model)
    assert snapshot_dir(model) == before
