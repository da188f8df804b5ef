"""The reference engine's self-test on this model's shapes (ENG): invariants of llmdoctor's own engine that no
model file can break. The paged KV cache must reproduce a full recompute, a padded batch must give each sequence
the logits it gets alone, and the tokenizer's padded batches must mask exactly the padding and number positions
0..n-1 over the real tokens. They run on the model being checked because its shapes (head counts, GQA groups,
head_dim, vocabulary, block boundaries) exercise code paths a fixed test model may not; a finding here is a bug
in llmdoctor to report, never a fault of the model. Formerly KVC001, KVC002 and ACT004 (see RETIRED in
checks/catalogue/registry.py) and the batch part of GLD001."""
from __future__ import annotations

from checks.shared.logit_compare import (batched_and_alone, batched_scripts, close, incremental, incremental_scripts,
                                         probe_sequence, scripted_part)
from checks.shared.prompts import CHAT_PROBE, probe_texts, render_chat
from checks.catalogue.registry import Problem, SharedRun, check
from reference_engine.tokenizer import validate as tokenizer_validate

PREFIX = "reference engine self-test: "
ENGINE_BUG = ("A bug in llmdoctor's reference engine, not a fault of this model: report it to the llmdoctor "
              "maintainers with this finding's evidence (--format json); the model's other findings still hold.")


def paged_inputs(ctx) -> tuple[list[int], int, int]:
    """ENG001's run: (probe ids crossing several KV blocks, tokens prefilled, chunk size). The chunks straddle
    block boundaries; the rest is decoded token by token."""
    block = ctx.engine.cache.block_size
    n = min(2 * block + 8 if ctx.quick else 4 * block + 8, ctx.engine.config.max_position_embeddings)
    ids = probe_sequence(ctx, n)
    decode = min(8 if ctx.quick else 2 * block, n - 2)
    return ids, n - decode, max(1, block - 3)


PAGED = SharedRun("paged self-test", lambda ctx: scripted_part(incremental_scripts(*paged_inputs(ctx), "all")))
PADDED = SharedRun("padded-batch self-test", lambda ctx: padded_part(ctx))


@check("ENG001", category="selftest", severity="error", needs=("engine", "tokenizer"),
       hint=ENGINE_BUG + " Suspects: the cache's slot mapping, block table or the RoPE position of cached keys.",
       shares=(PAGED,))
def paged_decode_vs_recompute(ctx):
    """Reference engine self-test: chunked prefill + decode through the paged cache equals a full recompute.

    The probe ids (crossing several KV blocks) are run once as one prefill, and again as a chunked prefill
    (chunks that straddle block boundaries) followed by one decode step per token through the paged cache.
    In float32 the logits must agree to 1e-4 relative and the argmax must match at every position; in
    bfloat16/float16 the argmaxes may differ only within each other's top-5 and the relative difference must
    stay under 5e-2 (vLLM's check_logprobs_close). Both sides run the same weights through the same kernels,
    so a difference is a bug in llmdoctor's cache path, the kind transformers#25420 and #46190 report for
    other engines. Formerly KVC001.
    """
    engine = ctx.engine
    ids, prefill, chunk = paged_inputs(ctx)
    n, block, decode = len(ids), engine.cache.block_size, len(ids) - prefill
    # a streaming engine runs both sides in one pass over the weights (the run's shared pass)
    inc, full = incremental(ctx, ids, prefill, chunk, recompute="all")
    result = close(inc, full, engine.dtype)
    if not result["ok"]:
        yield Problem(f"{PREFIX}incremental decode disagrees with a full recompute (relative diff "
                      f"{result['rel_diff']:.3g}, argmax differs at {len(result['argmax_mismatch'])} of "
                      f"{len(full)} positions)",
                      evidence={**result, "tokens": n, "prefill": prefill, "decode_steps": decode,
                                "dtype": str(engine.dtype), "block_size": block})


def padded_rows(ctx) -> tuple[list[list[int]], list[dict]]:
    """The probes padded into one batch by llmdoctor's tokenizer (left padding): each row's real tokens (by its
    attention mask), and the rows whose real tokens or position ids are not the prompt's own."""
    tok = ctx.tokenizer
    texts = list(probe_texts(ctx.quick))
    batch = tok(texts, padding=True, padding_side="left", return_tensors=None)
    rows, problems = [], []
    for i, (ids, mask, pos) in enumerate(zip(batch["input_ids"], batch["attention_mask"], batch["position_ids"])):
        real = [t for t, m in zip(ids, mask) if m]
        real_pos = [p for p, m in zip(pos, mask) if m]
        if real != tok.encode(texts[i]) or real_pos != list(range(len(real))):
            problems.append({"row": i + 1, "real_ids": real[:20], "positions": real_pos[:20]})
        rows.append(real)
    return rows, problems


def padded_part(ctx):
    rows, problems = padded_rows(ctx)
    return None if problems else scripted_part(batched_scripts(rows))


@check("ENG002", category="selftest", severity="error", needs=("engine", "tokenizer"),
       hint=ENGINE_BUG + " Suspects: position ids under left padding, or attention crossing batch rows.",
       shares=(PADDED,))
def padded_batch_vs_alone(ctx):
    """Reference engine self-test: a left-padded batch gives each sequence the logits it gets alone.

    The probes are padded into one batch by llmdoctor's tokenizer (left padding); each row's real tokens (by
    its attention mask) must be that prompt's ids, with position ids 0..n-1 over them. The rows then run as
    one batched prefill and one batched decode step (of each row's first id, known in advance so a streaming
    engine needs one pass), and each sequence alone; logits must agree (float32: 1e-4 relative, same
    argmax; low precision: top-5 containment). The position-id and padding bugs users
    report against other stacks (unsloth#3699, transformers PR#48161) and attention leaking between
    sequences would show here. Formerly KVC002.
    """
    engine = ctx.engine
    rows, problems = padded_rows(ctx)
    if problems:
        yield Problem(f"{PREFIX}padded batch: {len(problems)} rows lose their ids or positions under the "
                      "attention mask", evidence={"rows": problems})
        return
    batched, alone = batched_and_alone(ctx, rows)
    result = close(batched, alone, engine.dtype)
    if not result["ok"]:
        yield Problem(f"{PREFIX}batched logits differ from each sequence alone (relative diff "
                      f"{result['rel_diff']:.3g})",
                      evidence={**result, "rows": len(rows), "lengths": [len(r) for r in rows]})


@check("ENG003", category="selftest", severity="error", needs=("tokenizer",),
       hint=ENGINE_BUG + " Suspect: the tokenizer's batch padding (reference_engine/tokenizer/batch_encoding.py).")
def mask_covers_padding(ctx):
    """Reference engine self-test: in a padded probe batch the attention mask hides exactly the padding.

    Pads the probe prompts into one batch with llmdoctor's tokenizer and compares each row's attention-mask
    sum with the row's real token count (encode() of that prompt): a mask that covers pads lets the model
    attend to padding, a row whose mask is empty feeds nothing. The mask is computed from the encodings'
    lengths, never from the model's files, so a mismatch is a bug in llmdoctor. The valid ratios (mask sum /
    width) are reported in evidence. Formerly ACT004.
    """
    tok = ctx.tokenizer
    texts = list(probe_texts(ctx.quick))
    batch = tok(texts, padding=True, return_tensors=None)
    lengths = [len(tok.encode(t)) for t in texts]
    width = len(batch["input_ids"][0]) if batch["input_ids"] else 0
    ratios = [sum(m) / width if width else 0.0 for m in batch["attention_mask"]]
    wrong = [{"row": i + 1, "tokens": n, "mask_sum": sum(m)} for i, (n, m) in
             enumerate(zip(lengths, batch["attention_mask"])) if sum(m) != n or n == 0]
    if wrong:
        yield Problem(f"{PREFIX}attention mask does not match the real tokens in {len(wrong)} of {len(texts)} "
                      f"rows (e.g. row {wrong[0]['row']}: {wrong[0]['tokens']} tokens, mask sum "
                      f"{wrong[0]['mask_sum']})", evidence={"rows": wrong, "valid_ratio": ratios, "width": width})


@check("ENG004", category="selftest", severity="error", needs=("tokenizer",),
       hint=ENGINE_BUG + " Suspect: the tokenizer's batch encoding (reference_engine/tokenizer/batch_encoding.py).")
def batch_encoding_invariants(ctx):
    """Reference engine self-test: batched encodings equal encode() per row, positions run 0..n-1.

    The batch part of the tokenizer stage's validate(), on the probe prompts and the chat probe rendered with
    the model's template: in a padded batch every row's attention-mask sum equals its token count, the
    unmasked ids are exactly what encode() gives for that text, and position ids run 0, 1, 2, ... over the
    real tokens. Padding, masks and positions are computed by llmdoctor from the encodings, so whatever the
    tokenizer files say, a failure is a bug in llmdoctor. What the files decide (ids in the vocabulary,
    special tokens where the post-processor puts them, round trips, pads the chat template writes) stays in
    GLD001.
    """
    tok = ctx.tokenizer
    texts = list(probe_texts(ctx.quick))
    chats = [c for c in (render_chat(tok, CHAT_PROBE),) if c is not None]
    for line in tokenizer_validate(tok, texts + chats, parts=("batch",)):
        yield Problem(f"{PREFIX}tokenizer batch: {line}", evidence={"probes": texts + chats})
