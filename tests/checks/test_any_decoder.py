"""Static checks on a decoder the engine does not implement: config sizes through their aliases
(GPT-2's n_embd/n_layer/n_head, a multimodal wrapper's text_config), embedding/LM head found by role. Only
the engine-backed checks skip, and CFG001 says why in one info line."""
from __future__ import annotations

import json
import shutil

import pytest
import torch

from llmdoctor.run.runner import run_checks
from reference_engine.config import parse_config
from tests.checks.conftest import no_crashes, problems, run_static


@pytest.fixture(scope="module")
def gpt2_dir(tmp_path_factory, factory_model_dir):
    """A transformers-built GPT-2 (GPT2LMHeadModel: transformer.wte, tied head, n_embd naming) next to the
    factory model's tokenizer, its vocabulary sized to the tokenizer."""
    import transformers
    src = factory_model_dir("llama")
    out = tmp_path_factory.mktemp("gpt2") / "model"
    shutil.copytree(src, out)
    llama = json.loads((src / "config.json").read_text())
    config = transformers.GPT2Config(vocab_size=llama["vocab_size"], n_embd=32, n_layer=2, n_head=4,
                                     n_positions=llama["max_position_embeddings"],
                                     bos_token_id=llama["bos_token_id"], eos_token_id=llama["eos_token_id"])
    torch.manual_seed(0)
    model = transformers.GPT2LMHeadModel(config)
    (out / "model.safetensors").unlink()
    model.save_pretrained(out, safe_serialization=True)
    return out


def test_gpt2_config_reads_through_aliases(gpt2_dir):
    cfg = parse_config(json.loads((gpt2_dir / "config.json").read_text()))
    assert (cfg.architecture, cfg.hidden_size, cfg.num_hidden_layers, cfg.num_attention_heads) == \
        ("GPT2LMHeadModel", 32, 2, 4)
    assert cfg.max_position_embeddings >= 128 and cfg.intermediate_size == 128 and cfg.num_key_value_heads == 4


def test_multimodal_text_config_is_lifted():
    raw = {"architectures": ["Gemma3ForConditionalGeneration"], "model_type": "gemma3",
           "text_config": {"hidden_size": 640, "num_hidden_layers": 18, "num_attention_heads": 4,
                           "num_key_value_heads": 1, "head_dim": 256, "vocab_size": 262144,
                           "intermediate_size": 2048, "max_position_embeddings": 32768}}
    cfg = parse_config(raw)
    assert (cfg.hidden_size, cfg.num_hidden_layers, cfg.head_dim, cfg.vocab_size) == (640, 18, 256, 262144)


def test_static_checks_run_on_gpt2_and_only_engine_checks_skip(gpt2_dir):
    report = run_static(gpt2_dir)
    no_crashes(report)
    assert problems(report) == []
    by_id = {c.id: c for c in report.checks}
    info = [f for f in report.findings if f.check == "CFG001"]
    assert len(info) == 1 and "GPT2LMHeadModel" in info[0].message and info[0].severity.value == "info"
    vocab = [f for f in report.findings if f.check == "VOC001"][0]
    assert vocab.evidence["embedding_rows"] == vocab.evidence["config_vocab_size"]       # found by role
    assert vocab.evidence["lm_head_rows"] == vocab.evidence["embedding_rows"]            # tied: the embedding
    for check_id in ("WGT001", "WGT002", "WGT003"):                                       # no tensor table
        assert by_id[check_id].status == "skipped" and "GPT2LMHeadModel" in by_id[check_id].reason
    ran = {c.id for c in report.checks if c.status == "passed"}
    assert {"EMB001", "EMB004", "VOC002", "WGT005"} <= ran, ran

    full = run_checks(gpt2_dir, select=["config", "activations", "golden"], device="cpu")
    no_crashes(full)
    ran_or_skipped = [c for c in full.checks if c.category in ("activations", "golden")]
    # GLD001 needs only the tokenizer
    assert ran_or_skipped and all(c.status in ("skipped", "passed") for c in ran_or_skipped)
    engine = [c for c in ran_or_skipped if c.reason.startswith("needs engine")]
    assert len(engine) >= 3 and all("unsupported architecture 'GPT2LMHeadModel'" in c.reason for c in engine)
