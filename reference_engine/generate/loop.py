"""The generate loop: prompts in, Outputs (or streamed text deltas) out.

    prompts -> token ids -> Requests -> Scheduler (prefill / decode batches) -> sampler -> stopping -> Output

A prompt is a string (encoded with the model's special tokens, as transformers does), a list of token ids,
or chat messages ([{"role": ..., "content": ...}], rendered with the model's chat template). Beam-search
requests (num_beams > 1) run on their own through reference_engine.generate.beam; everything else is batched
continuously by the scheduler.
"""
from __future__ import annotations

from dataclasses import fields, replace
from typing import Callable, Iterator

import torch

from reference_engine.generate.beam import beam_search
# the stage's validate() hook is imported here for callers (`from reference_engine.generate.loop import validate`)
from reference_engine.generate.validate import validate  # noqa: F401
from reference_engine.config import load_generation_config
from reference_engine.generate.detokenizer import IncrementalDetokenizer, decode_text, has_text
from reference_engine.errors import ModelDirError
from reference_engine.generate.request import Output, Request
from reference_engine.generate.sampler import Choice, choose, make_generator
from reference_engine.generate.sampling_params import SamplingParams
from reference_engine.generate.scheduler import Scheduler, SchedulerStats

_PARAM_FIELDS = {f.name for f in fields(SamplingParams)}


# ---------------------------------------------------------------------------------------------- prompts

def is_chat(prompt) -> bool:
    return isinstance(prompt, (list, tuple)) and len(prompt) > 0 and all(isinstance(m, dict) for m in prompt)


def _is_ids(prompt) -> bool:
    return isinstance(prompt, (list, tuple)) and all(isinstance(t, int) and not isinstance(t, bool) for t in prompt)


def as_prompt_list(prompts) -> list:
    """One prompt or a batch of them -> a list of prompts (str | list[int] | list[dict])."""
    if isinstance(prompts, str) or is_chat(prompts) or (_is_ids(prompts) and len(prompts) > 0):
        return [prompts]
    if isinstance(prompts, (list, tuple)) and prompts:
        for p in prompts:
            if not (isinstance(p, str) or is_chat(p) or _is_ids(p)):
                raise ValueError(f"a prompt must be a string, a list of token ids or chat messages, found {p!r:.80}")
        return list(prompts)
    raise ValueError(f"expected a prompt or a non-empty list of prompts, found {prompts!r:.80}")


def encode_prompt(engine, prompt) -> list[int]:
    """A prompt -> token ids, checked against the model's vocabulary."""
    if isinstance(prompt, str):
        ids = list(engine.tokenizer.encode(prompt))
    elif is_chat(prompt):
        text = engine.tokenizer.apply_chat_template(list(prompt), add_generation_prompt=True, tokenize=False)
        ids = list(engine.tokenizer.encode(text, add_special_tokens=False))  # the template wrote BOS itself
    else:
        ids = list(prompt)
    if not ids:
        raise ValueError("the prompt is empty (no tokens to condition on)")
    vocab = engine.config.vocab_size
    bad = [t for t in ids if not 0 <= t < vocab]
    if bad:
        raise ValueError(f"token id {bad[0]} is out of vocabulary (the model has {vocab} rows)")
    return ids


def eos_ids_of(engine) -> frozenset[int]:
    """All EOS ids: generation_config.json first (it may list several), else config.json, else the tokenizer."""
    gen = getattr(engine, "generation_config", None)
    if gen is None and getattr(engine, "model_dir", None) is not None:
        try:
            gen = load_generation_config(engine.model_dir)
        except ModelDirError:
            gen = None  # a broken generation_config.json is a config check's finding, not a generate failure
    if gen is not None and getattr(gen, "eos_token_ids", None):
        return frozenset(gen.eos_token_ids)
    if engine.config.eos_token_ids:
        return frozenset(engine.config.eos_token_ids)
    if not has_text(engine):
        return frozenset()
    eos = getattr(engine.tokenizer, "eos_token_id", None)
    return frozenset([eos]) if isinstance(eos, int) else frozenset()


def resolve_params(sampling_params, overrides: dict, count: int) -> list[SamplingParams]:
    """One SamplingParams per prompt; keyword overrides (temperature=..., ...) apply to all."""
    unknown = sorted(set(overrides) - _PARAM_FIELDS)
    if unknown:
        raise TypeError(f"unknown generate() argument(s): {', '.join(unknown)}")
    if isinstance(sampling_params, (list, tuple)):
        if len(sampling_params) != count:
            raise ValueError(f"{len(sampling_params)} SamplingParams for {count} prompts")
        base = list(sampling_params)
    else:
        base = [sampling_params or SamplingParams()] * count
    return [replace(p, **overrides) if overrides else p for p in base]


# ---------------------------------------------------------------------------------------------- the loop

def _make_request(engine, index, prompt_ids, params, stream: bool, on_delta=None) -> Request:
    detok = None
    if (stream or params.stop) and has_text(engine):
        skip = params.skip_special_tokens
        detok = IncrementalDetokenizer(lambda ids: engine.tokenizer.decode(ids, skip_special_tokens=skip), params.stop)
    generator = None if params.greedy else make_generator(params.seed, engine.device)
    return Request(index, prompt_ids, params, generator, detok, on_delta=on_delta)


def _plain_greedy(params: SamplingParams) -> bool:
    return params.greedy and params.repetition_penalty == 1.0 and not params.logprobs and not params.eos_patience


def _choices(batch: list[Request], logits: torch.Tensor, eos_ids) -> list[Choice]:
    """logits [B, V] -> one Choice per request; plain greedy rows share one argmax."""
    fast = [i for i, r in enumerate(batch) if _plain_greedy(r.params)]
    picks = dict(zip(fast, torch.argmax(logits[fast], dim=-1).tolist())) if fast else {}
    out = []
    for i, r in enumerate(batch):
        if i in picks:
            out.append(Choice(picks[i], 0.0))
        else:
            out.append(choose(logits[i], r.params, r.context_tensor(logits.device), r.generator, eos_ids))
    return out


def _step(engine, scheduler: Scheduler, eos_ids, max_model_len: int) -> None:
    kind, batch = scheduler.schedule()
    if not batch:
        if not scheduler.running and scheduler.waiting:
            # the head cannot be admitted and nothing of ours will free blocks: end it rather than spin
            stuck = scheduler.waiting.popleft()
            stuck.finish("kv_cache_full")
        return
    ids = [r.seq_id for r in batch]
    if kind == "prefill":
        logits = engine.prefill(ids, [r.chunk_ids() for r in batch])      # [B, V] float32
        for r in batch:
            r.in_cache = True
            r.chunk_done()
        ready = [i for i, r in enumerate(batch) if not r.prefilling]      # a chunked prefill's last chunk
        batch, logits = [batch[i] for i in ready], logits[ready]
    else:
        logits = engine.decode(ids, [r.output_ids[-1] for r in batch])     # [B, V] float32
    for r, choice in zip(batch, _choices(batch, logits, eos_ids)):
        r.append(choice, eos_ids, max_model_len)
        if r.finished:
            scheduler.finish(r)


def _run(engine, scheduler: Scheduler, eos_ids, max_model_len: int) -> None:
    try:
        while not scheduler.done:
            _step(engine, scheduler, eos_ids, max_model_len)
    finally:
        _release_all(scheduler)  # an exception (or Ctrl-C) mid-batch leaves the shared cache as it found it


def _release_all(scheduler: Scheduler) -> None:
    for r in list(scheduler.running):
        scheduler.finish(r)


def _output(engine, r: Request) -> Output:
    if r.detok is not None and r.detok.stopped_on is not None:
        text = r.detok.text
    else:
        text = decode_text(engine, r.text_ids(), r.params.skip_special_tokens)
    return Output(list(r.output_ids), text, r.finish_reason, list(r.logprobs) if r.params.logprobs else None,
                  list(r.prompt_ids), r.stop_reason)


def _prepare(engine, prompts, sampling_params, overrides):
    prompt_list = as_prompt_list(prompts)
    params = resolve_params(sampling_params, overrides, len(prompt_list))
    ids = [encode_prompt(engine, p) for p in prompt_list]
    if not has_text(engine) and any(p.stop for p in params):
        raise ValueError("stop strings need the model's tokenizer to match text; this model has none "
                         "(use stop_token_ids)")
    max_model_len = engine.config.max_position_embeddings
    for prompt_ids in ids:
        if len(prompt_ids) >= max_model_len:
            raise ValueError(f"the prompt has {len(prompt_ids)} tokens; the model's context is {max_model_len}")
    return ids, params, max_model_len


def generate(engine, prompts, sampling_params=None, *, max_num_seqs: int = 64, max_prefill_tokens: int = 4096,
             stats: SchedulerStats | None = None, **overrides) -> list[Output]:
    """Generate for one prompt or a batch; returns one Output per prompt, in order. No engine step runs more
    than max_prefill_tokens prompt tokens: a longer prompt is prefilled in chunks through the paged cache."""
    ids, params, max_model_len = _prepare(engine, prompts, sampling_params, overrides)
    eos_ids = eos_ids_of(engine)
    outputs: dict[int, Output] = {}
    scheduler = Scheduler(engine.cache, engine.free, max_num_seqs, max_prefill_tokens)
    requests = []
    for i, (prompt_ids, p) in enumerate(zip(ids, params)):
        if p.num_beams > 1:
            outputs[i] = beam_search(engine, prompt_ids, p, eos_ids, max_model_len)
        else:
            requests.append(_make_request(engine, i, prompt_ids, p, stream=False))
            scheduler.add(requests[-1])
    _run(engine, scheduler, eos_ids, max_model_len)
    outputs.update({r.index: _output(engine, r) for r in requests})
    if stats is not None:
        for f in fields(SchedulerStats):
            setattr(stats, f.name, getattr(scheduler.stats, f.name))
    return [outputs[i] for i in range(len(ids))]


def stream(engine, prompt, sampling_params=None, *, on_finish: Callable[[Output], None] | None = None,
           **overrides) -> Iterator[str]:
    """Yield text deltas for one prompt as they become safe to show (never a broken character);
    their concatenation is the Output's text. on_finish, if given, receives the final Output (its token ids:
    a model without a tokenizer streams no text)."""
    ids, params, max_model_len = _prepare(engine, prompt, sampling_params, overrides)
    if len(ids) != 1:
        raise ValueError("stream() takes a single prompt; use generate() for a batch")
    eos_ids = eos_ids_of(engine)
    if params[0].num_beams > 1:  # beam search only knows its answer at the end
        output = beam_search(engine, ids[0], params[0], eos_ids, max_model_len)
        if output.text:
            yield output.text
        if on_finish:
            on_finish(output)
        return
    pending: list[str] = []
    request = _make_request(engine, 0, ids[0], params[0], stream=True, on_delta=pending.append)
    scheduler = Scheduler(engine.cache, engine.free, 1)
    scheduler.add(request)
    try:
        while not scheduler.done:
            _step(engine, scheduler, eos_ids, max_model_len)
            yield from pending
            pending.clear()
    finally:
        _release_all(scheduler)  # a consumer that stops early must not leak KV blocks
    if on_finish:
        on_finish(_output(engine, request))
