"""Long prompts read in chunks through the paged KV cache (the CTX checks and the endpoint's --context reference):
each chunk is one engine step after the cached ones, so no step holds more than CHUNK_LOGITS_BYTES of logits nor
an attention block larger than chunk x context per head; memory grows linearly with the context."""
from __future__ import annotations

from probes.competence import token_logprobs

CHUNK_LOGITS_BYTES = 128 * 2 ** 20  # float32 logits per chunk: 682 tokens at a 49k vocabulary, 128 at 262k
MIN_CHUNK, MAX_CHUNK, STREAMING_CHUNK = 64, 1024, 512


def chunk_tokens(vocab: int, streaming: bool) -> int:
    """Tokens per prefill step: logits within CHUNK_LOGITS_BYTES (larger when streaming: fewer passes)."""
    chunk = max(MIN_CHUNK, min(MAX_CHUNK, CHUNK_LOGITS_BYTES // (4 * max(vocab, 1))))
    return max(chunk, STREAMING_CHUNK) if streaming else chunk


def chunked_logprobs(engine, ids, chunk: int) -> list[float]:
    """log P(ids[i + 1] | ids[:i + 1]) for every i, read in steps of `chunk` new tokens after the cached ones."""
    out: list[float] = []
    with engine.scratch() as (seq,):
        for at in range(0, len(ids), chunk):
            part = list(ids[at:at + chunk])
            logits = engine.prefill([seq], [part], all_logits=True)          # [len(part), vocab]
            out += token_logprobs(logits, ids[at:at + len(part) + 1])
            del logits
    return out
