"""Showing differences: a rendered-prompt diff and the text spans where two tokenizations split differently."""
from __future__ import annotations

import difflib


def rendered_diff(reference: str, server: str, limit: int = 40) -> list[str]:
    """Unified diff lines (reference -> server) with newlines made visible, at most `limit` lines."""
    a = [line.replace("\n", "\\n") + "\n" for line in reference.splitlines(keepends=True)]
    b = [line.replace("\n", "\\n") + "\n" for line in server.splitlines(keepends=True)]
    lines = [line.rstrip("\n") for line in difflib.unified_diff(a, b, "reference", "server", n=1, lineterm="\n")]
    return lines[:limit] + ([f"... {len(lines) - limit} more lines"] if len(lines) > limit else [])


def first_difference(a: str, b: str, context: int = 24) -> dict:
    at = next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
    return {"offset": at, "reference": a[max(0, at - context):at + context],
            "server": b[max(0, at - context):at + context]}


def boundaries(decode, ids: list[int]) -> list[int]:
    """Character offsets where each token ends (prefix decoding: robust to pieces that are partial UTF-8)."""
    return [len(decode(ids[:k + 1])) for k in range(len(ids))]


def split_spans(text: str, decode, reference_ids: list[int], server_ids: list[int], limit: int = 8) -> list[dict]:
    """Regions of `text` where the two id lists put token boundaries differently, with each side's pieces."""
    ref_ends, srv_ends = boundaries(decode, reference_ids), boundaries(decode, server_ids)
    common = sorted({0} | (set(ref_ends) & set(srv_ends)))
    spans = []
    for start, end in zip(common, common[1:]):
        ref_pieces = _pieces_between(decode, reference_ids, ref_ends, start, end)
        srv_pieces = _pieces_between(decode, server_ids, srv_ends, start, end)
        if ref_pieces != srv_pieces:
            spans.append({"text": text[start:end], "reference": ref_pieces, "server": srv_pieces})
    return spans[:limit]


def _pieces_between(decode, ids, ends, start, end) -> list[str]:
    out = []
    for token_id, stop in zip(ids, ends):
        if start < stop <= end or (start == stop == end):
            out.append(decode([token_id]))
    return out
