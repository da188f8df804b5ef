"""The embedded demo model is small, complete, consistent, and actually trained (it writes words, not noise)."""
from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import torch

import llmdoctor
from reference_engine.config import load_config, load_generation_config, load_tokenizer_config
from reference_engine.files.weights import Weights

DEMO = Path(llmdoctor.__file__).parent / "demo_model"
FILES = {"config.json", "generation_config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json",
         "special_tokens_map.json", "README.md"}


def test_demo_model_is_complete_and_small():
    assert {p.name for p in DEMO.iterdir()} >= FILES
    assert sum(p.stat().st_size for p in DEMO.iterdir()) < 10 * 1024 * 1024
    assert "public domain" in (DEMO / "README.md").read_text()


def test_demo_model_files_agree_with_each_other():
    cfg, gen, tok_cfg = load_config(DEMO), load_generation_config(DEMO), load_tokenizer_config(DEMO)
    tokenizer = json.loads((DEMO / "tokenizer.json").read_text())
    specials = {t["content"]: t["id"] for t in tokenizer["added_tokens"]}
    assert specials[tok_cfg["bos_token"]] == cfg.bos_token_id == gen.bos_token_id
    assert [specials[tok_cfg["eos_token"]]] == cfg.eos_token_ids == gen.eos_token_ids
    assert specials[tok_cfg["pad_token"]] == cfg.pad_token_id
    weights = Weights.open(DEMO)
    assert weights.info("model.embed_tokens.weight").shape == (cfg.vocab_size, cfg.hidden_size)
    assert cfg.vocab_size == max(specials.values()) + 1 and cfg.tie_word_embeddings


@pytest.mark.assets
def test_demo_model_greedy_text_is_made_of_real_words(botchan_text):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(DEMO)
    model = AutoModelForCausalLM.from_pretrained(DEMO, dtype=torch.float32)
    known = set(re.findall(r"[a-z]+", botchan_text.lower()))
    words = []
    # the demo ends a sentence with its EOS now and then (it was trained on chat turns that do): the special
    # tokens are suppressed so that each prompt gets 30 tokens of text to judge
    specials = [i for i, added in tok.added_tokens_decoder.items() if added.special]
    for prompt in ("I went to the", "The principal said"):
        ids = tok(prompt, return_tensors="pt")
        out = model.generate(**ids, max_new_tokens=30, do_sample=False, pad_token_id=tok.pad_token_id,
                             suppress_tokens=specials)
        words += re.findall(r"[a-z]+", tok.decode(out[0, ids["input_ids"].shape[1]:], skip_special_tokens=True).lower())
    assert len(words) >= 20
    assert sum(w in known for w in words) / len(words) > 0.85, words
