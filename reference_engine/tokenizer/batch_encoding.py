"""`tokenizer(texts)`: a padded batch of torch tensors ready for generation.

Order matters and follows transformers: encode each text, add the template's special tokens, then
truncate (keeping the special tokens) and pad. Padding is on the left by default because generation
appends on the right, so every row's last real token must sit in the last column.
"""
from __future__ import annotations

import torch

# Pads get position 1, as transformers' generate() does (`position_ids.masked_fill_(mask == 0, 1)`):
# the value never reaches attention (the mask hides pads) and using theirs keeps tensors comparable.
PAD_POSITION = 1


def encode_batch(tok, texts, *, padding=True, truncation=False, max_length=None, add_special_tokens=True,
                 padding_side="left", return_tensors="pt") -> dict:
    """{"input_ids", "attention_mask", "position_ids"}: int64 tensors [batch, seq] (lists when
    return_tensors is None). A single string gives a batch of one."""
    if isinstance(texts, str):
        texts = [texts]
    if padding_side not in ("left", "right"):
        raise ValueError(f"padding_side must be 'left' or 'right', not {padding_side!r}")
    limit = _truncation_limit(tok, truncation, max_length)
    rows = [_encode_row(tok, text, add_special_tokens, limit) for text in texts]
    width = _padded_width(rows, padding, max_length)
    pad_id = _pad_id(tok)
    input_ids, attention_mask = [], []
    for row in rows:
        pad = [pad_id] * (width - len(row))
        mask = [1] * len(row)
        zeros = [0] * len(pad)
        input_ids.append(pad + row if padding_side == "left" else row + pad)
        attention_mask.append(zeros + mask if padding_side == "left" else mask + zeros)
    position_ids = [_positions(m) for m in attention_mask]
    batch = {"input_ids": input_ids, "attention_mask": attention_mask, "position_ids": position_ids}
    if return_tensors == "pt":
        return {k: torch.tensor(v, dtype=torch.long).reshape(len(rows), width) for k, v in batch.items()}
    return batch


def _encode_row(tok, text: str, add_special_tokens: bool, limit: int | None) -> list[int]:
    ids = tok.encode(text, add_special_tokens=False)
    if limit is not None:
        n_special = len(tok.post_process([])) if add_special_tokens else 0
        keep = max(limit - n_special, 0)
        if tok.config.get("truncation_side", "right") == "left":
            ids = ids[len(ids) - keep:] if keep else []
        else:
            ids = ids[:keep]
    return tok.post_process(ids) if add_special_tokens else ids


def _truncation_limit(tok, truncation, max_length) -> int | None:
    if not truncation or truncation == "do_not_truncate":
        return None
    if max_length is None:
        preset = tok.truncation_preset or {}
        max_length = preset.get("max_length", tok.config.get("model_max_length"))
        if not isinstance(max_length, int) or max_length > 10**9:
            raise ValueError("truncation=True needs max_length "
                             "(no usable preset in tokenizer.json or model_max_length)")
    return max_length


def _padded_width(rows: list[list[int]], padding, max_length) -> int:
    longest = max((len(r) for r in rows), default=0)
    if padding == "max_length":
        if max_length is None:
            raise ValueError("padding='max_length' needs max_length")
        return max(max_length, longest)
    if padding in (True, "longest"):
        return longest
    if any(len(r) != longest for r in rows):
        raise ValueError("rows differ in length; pass padding=True to build a rectangular batch")
    return longest


def _pad_id(tok) -> int:
    """pad_token, else eos, else 0: the value is hidden by the attention mask, so any valid id works
    (transformers refuses to pad without a pad token; for generation batches that only gets in the way)."""
    for candidate in (tok.pad_token_id, tok.eos_token_id):
        if candidate is not None:
            return candidate
    return 0


def _positions(mask: list[int]) -> list[int]:
    """cumsum(mask) - 1 over real tokens (0, 1, 2, ... from each row's first real token); pads get PAD_POSITION."""
    out, count = [], 0
    for m in mask:
        if m:
            out.append(count)
            count += 1
        else:
            out.append(PAD_POSITION)
    return out
