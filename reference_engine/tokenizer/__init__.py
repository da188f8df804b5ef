"""Stage 1, the tokenizer: text -> token ids (BPE from tokenizer.json, id-for-id equal to Hugging Face tokenizers).

    tokenizer.py       Tokenizer: normalizer -> pre-tokenizer -> BPE model -> post-processor; decoder back to text
    bpe.py             the BPE model (merge ranks, byte fallback, dropout off)
    normalizers.py, pre_tokenizers.py, decoders.py, post_processors.py   the tokenizer.json pipeline components
    components.py      the one chain/builder mechanism they share
    added_tokens.py    special and added tokens, matched before BPE
    batch_encoding.py  padding, attention_mask, position_ids
    chat_template.py   chat templates rendered in a jinja2 sandbox
    validate.py        validate(tokenizer): round trips, batch invariants, special tokens
"""
from reference_engine.tokenizer.tokenizer import InvalidTextError, Tokenizer
from reference_engine.tokenizer.validate import validate

__all__ = ["Tokenizer", "InvalidTextError", "validate"]
