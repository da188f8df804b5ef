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
from reference_engine.streaming.sweep import Lane, LogitsRequest, check_tokens, finish_all, logits_many, private_lane


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


def _one_pass(core, scripts: list[Script]) -> list[list[torch.Tensor]]:
    return run_pass(core, [], scripts)[1]


@dataclass
class LiveStep:
    """A step of sequences the caller keeps (their K/V stay in the cache after the pass, for the steps that
    follow): `core.prefill(seq_ids, tokens)` of new sequences, or with decode=True `core.decode` of one token
    each, run as lanes of a shared pass (with the kernels those calls use)."""
    seq_ids: list
    tokens: list[list[int]]
    decode: bool = False


def run_pass(core, requests: list[LogitsRequest], scripts: list[Script],
             step: LiveStep | None = None) -> tuple[list, list, torch.Tensor | None]:
    """Throwaway prefills (sweep.LogitsRequest), scripts and one step of sequences the caller keeps:
    (logits per request, results per script as run_scripts, the step's logits [sequences, vocab] or None).
    On a streaming core all of it is ONE pass over the weights; on a resident engine each part runs as it
    would alone (logits_many, step by step, prefill/decode), so the results do not depend on what shares a
    pass."""
    if not getattr(core, "streaming", False):
        return (logits_many(core, requests) if requests else [], [_step_by_step(core, s) for s in scripts],
                None if step is None else _live_alone(core, step))
    with torch.inference_mode(), ExitStack() as scratch:
        lanes, rows, ropes = [], [], {}
        for r in requests:
            check_tokens(core, r.tokens)
            lanes.append(private_lane(core, core, list(r.tokens), r.capture, r.dtype or core.dtype, ropes))
            lanes[-1].variant = r.variant
            rows.append(None)
        for script in scripts:
            seqs = scratch.enter_context(core.scratch(script.width))
            for s in script.steps:
                lane, wanted = _lane(core, *_active(seqs, s), script.all_logits, scratch)
                lanes.append(lane)
                rows.append(wanted)
        if step is not None:
            lanes.append(_live_lane(core, step, scratch, rows))
        if lanes:
            try:
                core.run_lanes(lanes, F.linear)
            except BaseException:
                if core.cache.states is not None:     # the pass's staged recurrent states are dropped
                    core.cache.states.discard()
                raise
            if core.cache.states is not None:         # a hybrid's lanes staged their states: they become current
                core.cache.states.commit()
        results = iter(finish_all(core, core.config, lanes, F.linear, rows) if lanes else [])
        logits = [next(results) for _ in requests]
        scripted = [[next(results) for _ in script.steps] for script in scripts]
        return logits, scripted, None if step is None else next(results)


def _live_alone(core, step: LiveStep) -> torch.Tensor:
    if step.decode:
        return core.decode(list(step.seq_ids), [t[0] for t in step.tokens])
    return core.prefill(list(step.seq_ids), [list(t) for t in step.tokens])


def _live_lane(core, step: LiveStep, scratch: ExitStack, rows: list) -> Lane:
    """The caller's step as a lane (its rows appended to `rows`): what prefill/decode would run."""
    known = [s in core.cache for s in step.seq_ids]
    bad = (not all(known) or any(len(t) != 1 for t in step.tokens)) if step.decode else any(known)
    if bad:
        raise ValueError("a live step prefills new sequences or decodes one token of each known one")
    lane, wanted = _lane(core, *_active(list(step.seq_ids), [list(t) for t in step.tokens]), False, scratch)
    if step.decode:                       # CoreEngine.decode's kernel (on the plain weights when streaming)
        lane.linear = core.decode_projection(len(step.seq_ids))[0]
    rows.append(wanted)
    return lane


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

