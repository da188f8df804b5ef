"""Tokenizers built in-process for the tokenizer tests, each as tokenizer.json content.

Four "factory" families, mirroring the layouts of real decoder LLMs:
  gpt2   - ByteLevel(use_regex) pre-tokenizer, trained by Hugging Face's BpeTrainer;
  llama3 - Split(Llama-3 regex) + ByteLevel, ignore_merges, BOS template; trained by our train_bpe;
  qwen2  - NFC normalizer + Split(Qwen2 regex) + ByteLevel; trained by our train_bpe;
  spm    - SentencePiece-style: Metaspace(prepend_scheme=first) + byte_fallback + fuse_unk + <unk>;
  spm_legacy - Llama-2's layout: Prepend("▁") + Replace(" ", "▁") normalizers, no pre-tokenizer.
Each is built once per test session (functools.cache) and compared against `tokenizers.Tokenizer`.
"""
from __future__ import annotations

import functools
import json

from reference_engine.tokenizer.tokenizer import Tokenizer
from reference_engine.testing.train_bpe import LLAMA3_PATTERN, QWEN2_PATTERN, train_bpe

CORPUS_LINES = [
    "The quick brown fox jumps over the lazy dog. It's what we'll do, isn't it? They've said I'd go.",
    "In 1906 Natsume Soseki wrote Botchan; the hero's father never liked him, and his mother favoured his brother.",
    "Numbers: 3.14159, 2718281828, 1,000,000 and 42 -- also 0x1F and 1e-9 appear in technical text.",
    "def encode(text: str) -> list[int]:\n    ids = []\n    for word in split(text):\n"
    "        ids += bpe(word)\n    return ids\n",
    "for (int i = 0; i < n; ++i) { total += values[i] * weights[i]; }  // dot product",
    "吾輩は猫である。名前はまだ無い。どこで生れたかとんと見当がつかぬ。",
    "我们在北京大学学习自然语言处理和机器学习。今天天气很好。",
    "한국어 텍스트도 조금 있습니다. Здравствуйте, как дела? Καλημέρα κόσμε. مرحبا بالعالم",
    "Emoji: 😀 👍🏽 👨‍👩‍👧 🇯🇵 — and symbols ©®™ «quotes» “curly” ‘single’ …",
    "  Leading spaces, trailing spaces   \n\n\tTabs\tand\r\nCRLF line endings\n",
    "Café naïve résumé coöperate façade Ångström ﬁ ligature ＦＵＬＬＷＩＤＴＨ",
    "<html><body class=\"main\"><p>Hello &amp; welcome!</p></body></html>",
    '{"key": [1, 2, 3], "nested": {"a": null, "b": true}}',
]
CORPUS = [line * 3 for line in CORPUS_LINES] * 4
SPECIALS = ["<|endoftext|>", "<|begin_of_text|>", "<|im_start|>", "<|im_end|>"]
SPM_SPECIALS = ["<unk>", "<s>", "</s>"]
FAMILIES = ("gpt2", "llama3", "qwen2", "spm", "spm_legacy")


@functools.cache
def spec_json(family: str) -> str:
    """tokenizer.json text of one factory family."""
    builders = {"gpt2": _gpt2, "llama3": _llama3, "qwen2": _qwen2, "spm": _spm, "spm_legacy": _spm_legacy}
    return json.dumps(builders[family]())


def ours(family: str) -> Tokenizer:
    return Tokenizer.from_json(spec_json(family), config=config(family))


def hf(family: str):
    from tokenizers import Tokenizer as HFTokenizer

    return HFTokenizer.from_str(spec_json(family))


def config(family: str) -> dict:
    if family.startswith("spm"):
        return {"bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>"}
    return {"bos_token": "<|begin_of_text|>", "eos_token": "<|endoftext|>"}


def _gpt2() -> dict:
    from tokenizers import Tokenizer as HFTokenizer, decoders, models, pre_tokenizers, trainers

    tok = HFTokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=900, special_tokens=SPECIALS, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(CORPUS, trainer)
    return json.loads(tok.to_str())


def _llama3() -> dict:
    return train_bpe(CORPUS, 900, SPECIALS, LLAMA3_PATTERN, ignore_merges=True, bos_token="<|begin_of_text|>")


def _qwen2() -> dict:
    return train_bpe(CORPUS, 900, SPECIALS, QWEN2_PATTERN, normalizer="NFC")


def _spm() -> dict:
    """Trained with Metaspace(split=True); byte tokens join the model vocab, not the added tokens."""
    from tokenizers import Tokenizer as HFTokenizer, models, pre_tokenizers, trainers

    byte_tokens = [f"<0x{b:02X}>" for b in range(256)]
    tok = HFTokenizer(models.BPE(unk_token="<unk>", byte_fallback=True, fuse_unk=True))
    tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="first")
    trainer = trainers.BpeTrainer(vocab_size=1200, special_tokens=SPM_SPECIALS + byte_tokens, show_progress=False,
                                  limit_alphabet=200)
    tok.train_from_iterator(CORPUS, trainer)
    spec = json.loads(tok.to_str())
    spec["added_tokens"] = [t for t in spec["added_tokens"] if t["content"] in SPM_SPECIALS]
    spec["decoder"] = {"type": "Sequence", "decoders": [
        {"type": "Metaspace", "replacement": "▁", "prepend_scheme": "first", "split": True},
        {"type": "ByteFallback"}, {"type": "Fuse"}]}
    spec["post_processor"] = {
        "type": "TemplateProcessing",
        "single": [{"SpecialToken": {"id": "<s>", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}],
        "pair": [{"Sequence": {"id": "A", "type_id": 0}}, {"Sequence": {"id": "B", "type_id": 1}}],
        "special_tokens": {"<s>": {"id": "<s>", "ids": [spec["model"]["vocab"]["<s>"]], "tokens": ["<s>"]}}}
    return spec


def _spm_legacy() -> dict:
    """Same model as `spm`, with Llama-2's legacy normalizer layout and decoder chain."""
    spec = _spm()
    spec["normalizer"] = {"type": "Sequence", "normalizers": [
        {"type": "Prepend", "prepend": "▁"}, {"type": "Replace", "pattern": {"String": " "}, "content": "▁"}]}
    spec["pre_tokenizer"] = None
    spec["decoder"] = LEGACY_SPM_DECODER
    return spec


LEGACY_SPM_DECODER = {"type": "Sequence", "decoders": [
    {"type": "Replace", "pattern": {"String": "▁"}, "content": " "}, {"type": "ByteFallback"}, {"type": "Fuse"},
    {"type": "Strip", "content": " ", "start": 1, "stop": 0}]}
LEGACY_SPM_NORMALIZER = {"type": "Sequence", "normalizers": [
    {"type": "Prepend", "prepend": "▁"}, {"type": "Replace", "pattern": {"String": " "}, "content": "▁"}]}
