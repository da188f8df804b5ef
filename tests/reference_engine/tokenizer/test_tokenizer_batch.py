"""tokenizer(texts): padding side, truncation with special tokens kept, position ids; from_pretrained."""
from __future__ import annotations

import json

import pytest
import torch

from reference_engine.tokenizer.batch_encoding import PAD_POSITION
from reference_engine.errors import ModelDirError
from reference_engine.tokenizer.tokenizer import Tokenizer
from tests.reference_engine.tokenizer import tokenizer_cases as cases

TEXTS = ["Hello world", "A considerably longer prompt, with more tokens than the others.", ""]


@pytest.fixture(scope="module")
def llama3():
    tok = cases.ours("llama3")
    tok.config["pad_token"] = "<|endoftext|>"
    return tok


def test_left_padding_is_the_default(llama3):
    batch = llama3(TEXTS)
    assert set(batch) == {"input_ids", "attention_mask", "position_ids"}
    assert all(t.dtype == torch.long and t.shape == batch["input_ids"].shape for t in batch.values())
    for row, text in enumerate(TEXTS):
        ids, mask = batch["input_ids"][row].tolist(), batch["attention_mask"][row].tolist()
        expected = llama3.encode(text)
        n = len(expected)
        assert ids[len(ids) - n:] == expected and sum(mask) == n and mask[len(mask) - n:] == [1] * n
        assert ids[:len(ids) - n] == [llama3.pad_token_id] * (len(ids) - n)


def test_position_ids_count_real_tokens_and_pads_get_a_fixed_value(llama3):
    batch = llama3(TEXTS)
    mask = batch["attention_mask"]
    expected = (mask.cumsum(-1) - 1).masked_fill(mask == 0, PAD_POSITION)
    assert torch.equal(batch["position_ids"], expected)
    assert batch["position_ids"][0, -1].item() == int(mask[0].sum()) - 1


def test_right_padding_on_request(llama3):
    batch = llama3(TEXTS, padding_side="right")
    row = batch["input_ids"][0].tolist()
    assert row[:len(llama3.encode(TEXTS[0]))] == llama3.encode(TEXTS[0])
    assert batch["position_ids"][0, 0].item() == 0


def test_special_tokens_are_added_before_truncation(llama3):
    batch = llama3([TEXTS[1]], truncation=True, max_length=5)
    ids = batch["input_ids"][0].tolist()
    assert len(ids) == 5 and ids[0] == llama3.bos_token_id  # BOS survives truncation
    assert ids[1:] == llama3.encode(TEXTS[1], add_special_tokens=False)[:4]
    assert llama3([TEXTS[1]], add_special_tokens=False, truncation=True, max_length=3)["input_ids"].shape == (1, 3)


def test_padding_to_max_length_and_unpadded_errors(llama3):
    assert llama3(["hi"], padding="max_length", max_length=12)["input_ids"].shape == (1, 12)
    with pytest.raises(ValueError, match="padding=True"):
        llama3(TEXTS, padding=False)
    with pytest.raises(ValueError, match="max_length"):
        llama3(TEXTS, truncation=True)


def test_matches_transformers_fast_tokenizer(tmp_path):
    from transformers import PreTrainedTokenizerFast

    spec = cases.spec_json("llama3")
    reference = PreTrainedTokenizerFast(tokenizer_object=_hf_from(spec), bos_token="<|begin_of_text|>",
                                        eos_token="<|endoftext|>", pad_token="<|endoftext|>", padding_side="left")
    ours = Tokenizer.from_json(spec, {"bos_token": "<|begin_of_text|>", "eos_token": "<|endoftext|>",
                                      "pad_token": "<|endoftext|>"})
    got, expected = ours(TEXTS), reference(TEXTS, padding=True, return_tensors="pt")
    assert torch.equal(got["input_ids"], expected["input_ids"])
    assert torch.equal(got["attention_mask"], expected["attention_mask"])


def _hf_from(spec: str):
    from tokenizers import Tokenizer as HFTokenizer

    return HFTokenizer.from_str(spec)


def _write_dir(path, spec: dict, config: dict | None = None, special_map: dict | None = None):
    path.mkdir(exist_ok=True)
    (path / "tokenizer.json").write_text(json.dumps(spec), encoding="utf-8")
    if config is not None:
        (path / "tokenizer_config.json").write_text(json.dumps(config), encoding="utf-8")
    if special_map is not None:
        (path / "special_tokens_map.json").write_text(json.dumps(special_map), encoding="utf-8")
    return path


def test_from_pretrained_reads_config_special_map_and_template_file(tmp_path, dir_snapshot):
    spec = json.loads(cases.spec_json("gpt2"))
    directory = _write_dir(tmp_path / "m", spec, {"eos_token": {"content": "<|endoftext|>"}},
                           {"bos_token": "<|begin_of_text|>", "pad_token": "<|im_end|>",
                            "additional_special_tokens": ["<|im_start|>"]})
    (directory / "chat_template.jinja").write_text("{{ bos_token }}{{ messages[0]['content'] }}", encoding="utf-8")
    before = dir_snapshot(directory)
    tok = Tokenizer.from_pretrained(directory)
    assert dir_snapshot(directory) == before  # never writes into the model directory
    vocab = spec["model"]["vocab"]
    assert (tok.bos_token_id, tok.eos_token_id, tok.pad_token_id) == (
        vocab["<|begin_of_text|>"], vocab["<|endoftext|>"], vocab["<|im_end|>"])
    assert tok.all_special_ids == [vocab[t] for t in ("<|begin_of_text|>", "<|endoftext|>", "<|im_end|>",
                                                      "<|im_start|>")]
    assert tok.apply_chat_template([{"role": "user", "content": "hi"}]) == "<|begin_of_text|>hi"


def test_add_bos_token_applies_only_without_a_post_processor(tmp_path):
    spec = json.loads(cases.spec_json("gpt2"))
    spec["post_processor"] = None
    config = {"bos_token": "<|begin_of_text|>", "eos_token": "<|endoftext|>", "add_bos_token": True,
              "add_eos_token": True}
    tok = Tokenizer.from_pretrained(_write_dir(tmp_path / "a", spec, config))
    assert tok.add_bos_token and tok.add_eos_token
    ids = tok.encode("hi")
    assert ids[0] == tok.bos_token_id and ids[-1] == tok.eos_token_id
    with_template = json.loads(cases.spec_json("llama3"))  # its template adds BOS only
    tok = Tokenizer.from_pretrained(_write_dir(tmp_path / "b", with_template, {**config, "add_bos_token": False}))
    assert tok.add_bos_token and not tok.add_eos_token  # tokenizer.json wins, as in transformers 5


@pytest.mark.parametrize("content, message", [
    ("{not json", "invalid JSON"),
    ("[1, 2]", "expected a JSON object"),
    ('{"model": 3}', "no 'model' object"),
    ('{"model": {"type": "BPE", "vocab": {"a": 0}, "merges": ["a b"]}}', "not in the vocab"),
])
def test_bad_tokenizer_json_is_a_one_line_error(tmp_path, content, message):
    (tmp_path / "tokenizer.json").write_text(content, encoding="utf-8")
    with pytest.raises(ModelDirError, match=message) as error:
        Tokenizer.from_pretrained(tmp_path)
    assert "\n" not in str(error.value)


def test_missing_tokenizer_json(tmp_path):
    with pytest.raises(ModelDirError, match="tokenizer.json: file not found"):
        Tokenizer.from_pretrained(tmp_path)
