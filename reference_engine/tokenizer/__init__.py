"""Stage 1, the tokenizer: text -> token ids (BPE from tokenizer.json, id-for-id equal to Hugging Face tokenizers).

    tokenizer.py       Tokenizer: normalizer -> pre-tokenizer -> BPE model -> post-processor; decoder back to text
    batch_encoding.py  padding, attention_mask, position_ids
    chat_template.py   chat templates rendered in a jinja2 sandbox
    validate.py        validate(tokenizer): round trips, batch invariants, special tokens
    pipeline/          the tokenizer.json stages: added tokens, normalizers, pre-tokenizers, post-processors, decoders
    models/            the subword models: BPE by merge rank (Hugging Face), BPE by piece score (sentencepiece)
    sources/           tokenizers from other files: tokenizer.model, tiktoken/tekken, GGUF metadata

Imports point down: this folder's modules -> sources/ -> models/; pipeline/ imports neither.
"""
from reference_engine.tokenizer.tokenizer import InvalidTextError, Tokenizer
from reference_engine.tokenizer.validate import validate

__all__ = ["Tokenizer", "InvalidTextError", "validate"]
