"""Scripted steps: fresh sequences fed tokens known in advance (chunked prefills, teacher-forced decode steps).

The engine self-tests and the far-position check compare two ways of computing the same thing: a prefill in
chunks followed by decode steps through the paged cache against a full recompute, a padded batch against
each row alone. Their tokens are all known before the first step runs, so a whole script can be described
up front:

    Script(steps=[[ids[:13]], [ids[13:26]], [[ids[26]]], [[ids[27]]]])     # one sequence: 2 chunks, 2 decodes
    Script(steps=[[a, b]], all_logits=True)                                # two sequences in one batched step

`run_scripts(core, scripts)` returns, per script and step, float32 logits of each sequence's last new token
in that step [sequences in the step, vocab] (every new token with all_logits), what `prefill`/`decode` return.

On the resident engine every step is an `engine.prefill` or `engine.decode` (a step of one token per already
started sequence is a decode), exactly as the generate loop runs them. On a streaming core each step is a
lane of ONE pass over the weights (sweep.py): the lanes of a script share its sequences in the paged cache
and go through every layer in step order, so at layer i a step reads the K/V its earlier steps wrote at
layer i just before — the same values as step after step, one read of the weights instead of one per step.
"""
from __future__ import annotations

from contextlib import ExitStack
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from reference_engine.core.attention import build_metadata
from reference_engine.budget.sweep import Lane, finish_all


@dataclass
class Script:
    steps: list[list[list[int]]]     # steps[k][j]: new tokens of sequence j at step k ([]: not in this step)
    all_logits: bool = False         # logits of every new token, not only each sequence's last

    @property
    def width(self) -> int:
        return max((len(step) for step in self.steps), default=0)


def chunked_then_decoded(ids: list[int], prefill: int, chunk: int) -> Script:
    """One sequence: ids[:prefill] in chunks of `chunk`, then one decode step per remaining token. Its results
    from step len(chunks) - 1 on are the logits of positions prefill-1 .. len(ids)-1."""
    chunks = [[list(ids[s:min(s + chunk, prefill)])] for s in range(0, prefill, chunk)]
    return Script(chunks + [[[int(t)]] for t in ids[prefill:]])


def run_scripts(core, scripts: list[Script]) -> list[list[torch.Tensor]]:
    """Per script, per step: float32 logits (see the module docstring)."""
    if getattr(core, "streaming", False):
        return _one_pass(core, scripts)
    return [_step_by_step(core, script) for script in scripts]


def _active(seqs, step: list[list[int]]) -> tuple[list, list[list[int]]]:
    pairs = [(seqs[j], [int(t) for t in tokens]) for j, tokens in enumerate(step) if len(tokens)]
    if not pairs:
        raise ValueError("a scripted step has no tokens")
    return [s for s, _ in pairs], [t for _, t in pairs]


@torch.inference_mode()
def _step_by_step(core, script: Script) -> list[torch.Tensor]:
    out = []
    with core.scratch(script.width) as seqs:
        for step in script.steps:
            ids, tokens = _active(seqs, step)
            decode = (not script.all_logits and all(len(t) == 1 for t in tokens)
                      and all(s in core.cache for s in ids))
            out.append(core.decode(ids, [t[0] for t in tokens]) if decode
                       else core.prefill(ids, tokens, all_logits=script.all_logits))
    return out


@torch.inference_mode()
def _one_pass(core, scripts: list[Script]) -> list[list[torch.Tensor]]:
    """Every step of every script as a lane of one streaming pass (cache slots allocated in step order)."""
    with ExitStack() as scratch:
        lanes, rows = [], []
        for script in scripts:
            seqs = scratch.enter_context(core.scratch(script.width))
            for step in script.steps:
                lane, rows_wanted = _lane(core, *_active(seqs, step), script.all_logits, scratch)
                lanes.append(lane)
                rows.append(rows_wanted)
        core.run_lanes(lanes, F.linear)
        results = iter(finish_all(core, core.config, lanes, F.linear, rows))
    return [[next(results) for _ in script.steps] for script in scripts]


def _lane(core, seq_ids: list, tokens: list[list[int]], all_logits: bool,
          scratch: ExitStack) -> tuple[Lane, torch.Tensor | None]:
    """One step's lane on the core's cache: (lane, rows of the logits wanted: each sequence's last new token,
    or None for every row)."""
    requested = [len(t) for t in tokens]
    run_ids, tokens, restarts = core.restarts(seq_ids, tokens)   # LongRoPE crossings: recomputed (engine.py)
    core._check_step(run_ids, tokens)            # ids, RoPE table and cache room, before allocating
    cache = core.cache
    starts = [cache.length(s) if s in cache else 0 for s in run_ids]
    counts = [len(t) for t in tokens]
    slots = torch.cat([cache.append(s, len(t), t) if s in cache else cache.allocate(s, len(t), t)
                       for s, t in zip(run_ids, tokens)])
    meta = build_metadata(cache, run_ids, starts, counts, slots, core.device)
    flat = torch.tensor([t for ts in tokens for t in ts], dtype=torch.int64, device=core.device)  # [T]
    cos, sin = core.rope.lookup(meta.positions, check=False, ends=meta.ends)
    h = core.embed(flat, core.dtype)                                                            # [T, hidden]
    for private, seq in restarts.items():
        # later lanes read the recomputed blocks; earlier lanes still write the old ones in this pass, so the
        # private id keeps those until the pass is over
        cache.swap(seq, private)
        scratch.callback(lambda private=private: private in cache and cache.free(private))
    ends = torch.tensor(counts).cumsum(0)
    if all_logits:
        rows = None if not restarts else torch.cat([torch.arange(e - r, e) for e, r in zip(ends.tolist(), requested)])
    else:
        rows = ends - 1
    return Lane(h, cache, meta, cos, sin, None, core.dtype), (None if rows is None else rows.to(core.device))

