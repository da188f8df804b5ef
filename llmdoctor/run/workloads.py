"""What each command does to a model, for the memory plan (reference_engine/budget/plan.py: Workload).

The engine plans any Workload it is given; the numbers below belong to the commands that run it, so they live
with the commands. docs/memory.md "Passes" says how they were counted.
"""
from __future__ import annotations

from dataclasses import replace

import torch

from checks.engine.kv_cache import FAR_TOKENS_GPU
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


def check_workload(quick: bool, device: str = "cpu") -> Workload:
    """The workload of `llmdoctor check` (and of each model of `llmdoctor diff`). On a GPU the far-position
    check runs the whole context (up to FAR_TOKENS_GPU), and the KV cache, sized to the plan, must hold it."""
    base = CHECK_QUICK if quick else CHECK_FULL
    gpu = str(device).startswith("cuda") or (device == "auto" and torch.cuda.is_available())
    return replace(base, kv_tokens=2 * FAR_TOKENS_GPU + 512) if gpu else base
