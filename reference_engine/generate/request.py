"""One generation request as the scheduler sees it: ids so far, its sampler state, why it finished."""
from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from typing import Callable

import torch

from reference_engine.generate.detokenizer import IncrementalDetokenizer
from reference_engine.generate.sampler import Choice
from reference_engine.generate.sampling_params import SamplingParams
from reference_engine.generate.stopping import StopState, eos_patience_reached, stop_reason

# Engine cache sequence ids are never reused across generate() calls, so a cache shared with other users of
# the engine never sees a clash.
_seq_ids = itertools.count(1_000_000)


def new_seq_id() -> int:
    return next(_seq_ids)


@dataclass
class Output:
    token_ids: list[int]                  # generated ids (the final EOS / stop id included, as transformers does)
    text: str                             # decoded text of the generated ids, stop string and control ids cut
    finish_reason: str                    # one of sampling_params.FINISH_REASONS
    logprobs: list[float] | None = None   # per generated token, when SamplingParams.logprobs
    prompt_token_ids: list[int] = field(default_factory=list)
    stop_reason: str | int | None = None  # the stop string or stop id that matched, if any


@dataclass
class Request:
    index: int                            # position in the caller's prompt list (also arrival order)
    prompt_ids: list[int]
    params: SamplingParams
    generator: torch.Generator | None
    detok: IncrementalDetokenizer | None  # only when streaming or matching stop strings
    seq_id: int = field(default_factory=new_seq_id)
    output_ids: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    stop_state: StopState = field(default_factory=StopState)
    finish_reason: str | None = None
    stop_reason: str | int | None = None
    ended_on_control: bool = False        # the last id is an EOS / stop id (kept in token_ids, not in text)
    in_cache: bool = False                # its KV lives in the engine cache (False while waiting/preempted)
    on_delta: Callable[[str], None] | None = None
    # its prefill (chunked when longer than a step's budget): all_ids[:prefill_end] are run in steps, the
    # scheduler sets chunk to the tokens of the next one; both are 0 when no prefill is under way
    prefilled: int = 0
    prefill_end: int = 0
    chunk: int = 0

    @property
    def all_ids(self) -> list[int]:
        return self.prompt_ids + self.output_ids

    @property
    def prefilling(self) -> bool:
        """Admitted, and part of its prompt (all_ids when admitted) not yet run."""
        return self.prefilled < self.prefill_end

    def chunk_ids(self) -> list[int]:
        """The ids of this step's prefill chunk."""
        return self.all_ids[self.prefilled:self.prefilled + self.chunk]

    def start_prefill(self, chunk: int) -> None:
        self.prefilled, self.prefill_end, self.chunk = 0, len(self.all_ids), chunk

    def chunk_done(self) -> None:
        self.prefilled, self.chunk = self.prefilled + self.chunk, 0

    def drop_prefill(self) -> None:
        """Its cache was freed: a later admission runs the whole prefill again."""
        self.prefilled = self.prefill_end = self.chunk = 0

    @property
    def finished(self) -> bool:
        return self.finish_reason is not None

    def context_tensor(self, device) -> torch.Tensor | None:
        """Ids the repetition penalty looks at (prompt + generated), only built when the penalty is on."""
        if self.params.repetition_penalty == 1.0:
            return None
        return torch.tensor(self.all_ids, dtype=torch.long, device=device)

    def append(self, choice: Choice, eos_ids: frozenset[int], max_model_len: int) -> None:
        """Record a chosen token and decide whether the request is done."""
        token = choice.token_id
        patience = eos_patience_reached(self.stop_state, choice.eos_prob, self.params)
        if patience and eos_ids:
            token = min(eos_ids)  # the heuristic ends the request the way the model would: with EOS
        self.output_ids.append(token)
        if self.params.logprobs:
            self.logprobs.append(choice.logprob)
        reason = stop_reason(token, len(self.output_ids), len(self.prompt_ids) + len(self.output_ids),
                             self.params, eos_ids, max_model_len)
        if patience:
            reason = "eos_patience"
        control = (token in eos_ids and not self.params.ignore_eos) or token in self.params.stop_token_ids
        if self.detok is not None and not control:
            self._emit(self.detok.push(token))
            if self.detok.finished:
                reason, self.stop_reason = "stop", self.detok.stopped_on
        if reason == "stop" and self.stop_reason is None:
            self.stop_reason = token
        if reason is not None:
            self.ended_on_control = control
            self.finish(reason)

    def finish(self, reason: str) -> None:
        self.finish_reason = reason
        if self.detok is not None:
            self._emit(self.detok.finish())

    def _emit(self, delta: str) -> None:
        if delta and self.on_delta is not None:
            self.on_delta(delta)

    def text_ids(self) -> list[int]:
        """Generated ids that make up the text: a final EOS / stop id is a control token, not text."""
        return self.output_ids[:-1] if self.ended_on_control else self.output_ids
