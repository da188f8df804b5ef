"""What each command does to a model, for the memory plan (reference_engine/budget/plan.py: Workload).

The engine plans any Workload it is given; the numbers below belong to the commands that run it, so they live
with the commands. docs/memory.md "Passes" says how they were counted.
"""
from __future__ import annotations

from dataclasses import replace

import torch

from checks.catalogue.inputs import ResourceError
from checks.engine.kv_cache import FAR_TOKENS_GPU
from checks.long_context.runs import FAMILY as READING_CHECKS, reading_tokens, reads
from checks.shared.chunked_prefill import chunk_tokens
from reference_engine.budget.plan import Workload

# passes counted by the streaming core on the demo model (docs/memory.md "Passes"): one shared pass (every run
# the checks know up front, beside the greedy traces' prefill: checks/shared/passes.py) and one per
# greedy decode step: 1 + 31 for a full check, 1 + 11 with --quick; a model whose probes all stop early makes
# fewer. KV tokens: the far-position check (KVC003: 2048 tokens, 128 with --quick, on a CPU) holds its
# incremental and its full-recompute sequences at once when streaming, plus room for the probes' greedy
# traces and the self-tests' scripts in the same pass. Logit rows: what the shared pass returns at once (every
# probe's positions in float32 and its shadows and norm-shifted copies, the self-tests' rows)
# the competence checks (CMP001/CMP002) add one prefill of the built-in text (257 tokens with --quick, 513
# otherwise) and one of the copy prompt (65): their logit rows, and the text's as the longest --quick step
# sequences: the self-tests' batches hold up to ~8 at once (a hybrid's recurrent state is per sequence)
# tokens per pass: the runs spread over the passes, on average (--quick on a Llama-3 tokenizer: ~580 tokens in
# 12 passes; a full check ~5200 in 32, the far-position check's 2 x 2048 most of them)
CHECK_FULL = Workload("check", 32, 160, 2048, 2 * 2048 + 512, (torch.bfloat16, torch.float16),
                      logit_rows=768 + 513 + 65, sequences=8)
CHECK_QUICK = Workload("check --quick", 12, 48, 257, 2 * 128 + 768, (torch.bfloat16, torch.float16),
                       logit_rows=256 + 257 + 65, sequences=8)
GENERATE = Workload("generate", 257, 4, 512, 1024, pack_decode=True)
BASELINE = Workload("baseline", 33, 24, 512, 512, ())


# the CTX run's second prompt: its passages read again near position 0 (probes/competence/distance.py: a few
# 48-token passages behind 16 filler tokens each), well under this
NEAR_PROMPT_TOKENS = 512


def check_workload(quick: bool, device: str = "cpu", reading: int | None = None, vocab: int = 0) -> Workload:
    """The workload of `llmdoctor check` (and of each model of `llmdoctor diff`). On a GPU the far-position
    check runs the whole context (up to FAR_TOKENS_GPU), and the KV cache, sized to the plan, must hold it.
    reading: the tokens the CTX run reads to when it runs (checks/long_context/runs.py), with the model's vocab
    (its chunk size): its prompt, chunks and logit rows are added (with_reading)."""
    base = CHECK_QUICK if quick else CHECK_FULL
    gpu = str(device).startswith("cuda") or (device == "auto" and torch.cuda.is_available())
    base = replace(base, kv_tokens=2 * FAR_TOKENS_GPU + 512) if gpu else base
    return base if reading is None else with_reading(base, reading, vocab)


def with_reading(base: Workload, tokens: int, vocab: int) -> Workload:
    """`base` with the CTX run on top: a prompt of `tokens` held whole in the KV cache (the run is alone in the
    cache then: it reads in a scratch sequence after the shared passes), prefilled in chunks of up to
    chunk_tokens(vocab, streaming) new tokens, each chunk's logits returned at once; then the near prompt.
    A streamed run makes one pass per chunk. The chunk is the streaming one (the larger), so either mode fits."""
    chunk = chunk_tokens(vocab, True)
    passes = -(-tokens // chunk) + -(-NEAR_PROMPT_TOKENS // chunk)
    total = base.passes * base.tokens_per_pass + tokens + NEAR_PROMPT_TOKENS
    return replace(base, name=f"{base.name}, reading {tokens} tokens", passes=base.passes + passes,
                   tokens_per_pass=total // (base.passes + passes),
                   max_step_tokens=max(base.max_step_tokens, chunk), kv_tokens=max(base.kv_tokens, tokens),
                   logit_rows=max(base.logit_rows, chunk))


def run_workload(ctx, chosen, quick: bool, device: str, context: int | None) -> Workload:
    """check_workload for this run: with the CTX reading when a chosen CTX check will read (runs.reads), sized
    from the model's declared positions and vocabulary (read before any weight is loaded). A config that cannot
    be read plans without it: the CTX checks then end skipped, saying why."""
    if not any(spec.id.startswith(READING_CHECKS) for spec in chosen) or not reads(quick, context, ctx.asked):
        return check_workload(quick, device)
    try:
        config = ctx.config
    except ResourceError:
        return check_workload(quick, device)
    tokens = reading_tokens(int(config.max_position_embeddings), context)
    return check_workload(quick, device, tokens, int(config.vocab_size))
