"""Beam search over the paged KV cache, scored exactly as transformers' `_beam_search` scores it.

Beams share KV blocks: a beam with several children forks (the children reference the parent's blocks, ref
counts +1) and the cache copies a shared last block only when a child writes into it (copy-on-write). A beam
with one child simply continues as that child, and beams with none are freed.

Scoring (transformers >= 4.50, batch of one):
- each step keeps the top K = max(2, 1 + #eos) * num_beams continuations over all beams by summed logprob;
- a continuation that ends (EOS/stop id, or the length limit) and ranks in the first num_beams is a finished
  hypothesis, scored sum_logprobs / generated_len ** length_penalty; the best num_beams are kept;
- the best num_beams unfinished continuations run on;
- early_stopping=True stops once num_beams hypotheses are finished; False stops when the best running beam,
  normalised at the current length, cannot beat the worst finished one; "never" uses the maximum length for
  that bound when length_penalty > 0.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import torch

from reference_engine.core.cache.block_allocator import CacheFullError
from reference_engine.generate.detokenizer import decode_text
from reference_engine.generate.request import Output, new_seq_id
from reference_engine.generate.sampler import apply_repetition_penalty
from reference_engine.generate.sampling_params import SamplingParams

UNSET = -1.0e9  # transformers' "no score" value; kept so ties resolve the same way


@dataclass
class BeamState:
    seq_ids: list[int]                    # engine cache sequence of each running beam
    tokens: list[list[int]]               # generated ids of each running beam
    scores: torch.Tensor                  # [num_beams] summed logprobs of the running beams
    finished: list[list[int]] = field(default_factory=list)  # tokens of each finished slot
    finished_scores: torch.Tensor | None = None              # [num_beams] normalised scores (UNSET = empty)
    finished_flags: torch.Tensor | None = None               # [num_beams] bool
    improvable: bool = True               # transformers' is_early_stop_heuristic_unsatisfied


def _step_logprobs(logits: torch.Tensor, prompt_ids: list[int], state: BeamState, params: SamplingParams):
    """logits [n, V] -> accumulated logprobs [n * V]; the penalty applies to logprobs, as in transformers."""
    logprobs = torch.log_softmax(logits.float(), dim=-1)
    if params.repetition_penalty != 1.0:
        rows = [apply_repetition_penalty(logprobs[i], torch.tensor(prompt_ids + t, device=logits.device),
                                         params.repetition_penalty) for i, t in enumerate(state.tokens)]
        logprobs = torch.stack(rows)
    return (logprobs + state.scores[:, None]).reshape(-1)


def _update_finished(state: BeamState, cand_tokens, cand_scores, hits, n: int, gen_len: int, lp: float):
    """Merge just-finished top-n continuations into the finished slots, keeping the best n."""
    finishing = hits.clone()
    finishing[n:] = False
    normalised = cand_scores / (gen_len ** lp) + (~finishing).float() * UNSET
    merged_scores = torch.cat([state.finished_scores, normalised])
    merged_flags = torch.cat([state.finished_flags, finishing])
    keep = torch.topk(merged_scores, k=n).indices.tolist()
    merged_tokens = state.finished + cand_tokens
    state.finished = [merged_tokens[i] for i in keep]
    state.finished_scores = merged_scores[keep]
    state.finished_flags = merged_flags[keep]


def _still_improvable(state: BeamState, gen_len: int, max_gen: int, params: SamplingParams) -> bool:
    lp = params.length_penalty
    best_len = max_gen if params.early_stopping == "never" and lp > 0.0 else gen_len
    best_possible = float(state.scores[0]) / (best_len ** lp)
    worst = float(state.finished_scores.min()) if bool(state.finished_flags.all()) else UNSET
    return state.improvable and best_possible > worst


def _move_kv(engine, state: BeamState, parents: list[int], owned: set) -> list[int]:
    """New running beams come from `parents`: the first child keeps its parent's sequence, the others fork it."""
    claimed, new_ids = set(), []
    for p in parents:
        seq = state.seq_ids[p]
        if seq in claimed:
            child = new_seq_id()
            owned.add(child)
            engine.fork(seq, child)
            new_ids.append(child)
        else:
            claimed.add(seq)
            new_ids.append(seq)
    for seq in set(state.seq_ids) - claimed:
        engine.free(seq)
        owned.discard(seq)
    return new_ids


def _finish_reason(tokens: list[int], stop_ids: frozenset[int], eos_ids: frozenset[int], params, limit_is_context):
    if tokens and tokens[-1] in stop_ids:
        return "eos" if tokens[-1] in eos_ids else "stop"
    return "context_length" if limit_is_context else "length"


def _score_step(state: BeamState, logits, prompt_ids, params: SamplingParams, stop_ids, keep: int, gen_len: int,
                max_gen: int) -> list[int] | None:
    """One step of transformers' scoring; returns each next running beam's parent, or None when the search ends."""
    n = params.num_beams
    acc = _step_logprobs(logits, prompt_ids, state, params)                # [n * V]
    top_scores, top_idx = torch.topk(acc, k=min(keep, acc.numel()))        # [keep]
    vocab = logits.shape[-1]
    parents, tokens = (top_idx // vocab).tolist(), (top_idx % vocab).tolist()
    cand = [state.tokens[p] + [t] for p, t in zip(parents, tokens)]
    hits = torch.tensor([t in stop_ids or gen_len >= max_gen for t in tokens])
    running_scores = top_scores + hits.float() * UNSET                     # finished ones cannot run on
    running = torch.topk(running_scores, k=n).indices.tolist()
    _update_finished(state, cand, top_scores, hits, n, gen_len, params.length_penalty)
    if bool(hits.all()):
        return None
    state.tokens, state.scores = [cand[i] for i in running], running_scores[running]
    state.improvable = _still_improvable(state, gen_len, max_gen, params)
    if not state.improvable or (bool(state.finished_flags.all()) and params.early_stopping is True):
        return None
    return [parents[i] for i in running]


def beam_search(engine, prompt_ids: list[int], params: SamplingParams, eos_ids: frozenset[int],
                max_model_len: int) -> Output:
    n = params.num_beams
    stop_ids = frozenset(() if params.ignore_eos else eos_ids) | frozenset(params.stop_token_ids)
    keep = max(2, 1 + len(stop_ids)) * n
    max_gen = min(params.max_new_tokens, max_model_len - len(prompt_ids))
    root, reason = new_seq_id(), None
    owned = {root}
    try:
        logits = engine.prefill([root], [prompt_ids]).expand(n, -1)       # [n, V]: every beam starts at the prompt
    except CacheFullError:
        return Output([], "", "kv_cache_full", None, list(prompt_ids))
    state = BeamState([root] * n, [[] for _ in range(n)], torch.tensor([0.0] + [UNSET] * (n - 1)),
                      [[] for _ in range(n)], torch.full((n,), UNSET), torch.zeros(n, dtype=torch.bool))
    try:
        for gen_len in range(1, max_gen + 1):
            parents = _score_step(state, logits, prompt_ids, params, stop_ids, keep, gen_len, max_gen)
            if parents is None:
                break
            state.seq_ids = _move_kv(engine, state, parents, owned)
            logits = engine.decode(state.seq_ids, [t[-1] for t in state.tokens])  # [n, V]
    except CacheFullError:
        reason = "kv_cache_full"  # the pool cannot hold the beams; answer with the best hypothesis so far
    finally:
        for seq in owned:
            if seq in engine.cache:
                engine.free(seq)
    best = state.finished[0] if bool(state.finished_flags[0]) else state.tokens[0]
    reason = reason or _finish_reason(best, stop_ids, eos_ids, params, max_gen < params.max_new_tokens)
    return _beam_output(engine, prompt_ids, best, reason, stop_ids, params)


def _beam_output(engine, prompt_ids, tokens, reason, stop_ids, params: SamplingParams) -> Output:
    text_ids = tokens[:-1] if tokens and tokens[-1] in stop_ids else tokens
    text = decode_text(engine, text_ids, params.skip_special_tokens)
    stop_reason = tokens[-1] if reason == "stop" else None
    hits = [(text.find(s), s) for s in params.stop if s in text]
    if hits:  # stop strings are applied to the final text: beams cannot stream
        at, stop_reason = min(hits)
        text, reason = text[:at], "stop"
    return Output(list(tokens), text, reason, None, list(prompt_ids), stop_reason)
