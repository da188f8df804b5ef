"""Continuous batching: a waiting queue, a running list, and KV blocks as the currency.

Each step is either a prefill (admit waiting requests, oldest first, while their blocks fit) or a decode
(one token for every running request). A prefill step runs at most max_prefill_tokens prompt tokens: a prompt
longer than that is prefilled in chunks over several steps (chunked prefill, as in vLLM), each chunk appended
to its sequence in the paged cache, and only the last chunk's logits choose a token. A chunked prefill under
way goes first in the next step and no decode step runs before it is done; its blocks are counted at
admission for the whole prompt, so a later chunk never finds the pool taken. When a decode step needs more
blocks than are free, the youngest running request is preempted: its blocks are freed and it goes back to the
front of the waiting queue, to be recomputed later from its prompt plus the tokens it already generated
(recompute, as vLLM and nano-vllm do; the result is the same as if it had never been interrupted). A request
that cannot fit even alone ends with finish_reason "kv_cache_full" instead of stalling the queue. Nothing here
touches tensors: the generate loop runs the batches this hands out.
"""
from __future__ import annotations

from collections import deque
from dataclasses import dataclass

from reference_engine.generate.request import Request


@dataclass
class SchedulerStats:
    prefill_steps: int = 0
    decode_steps: int = 0
    prefill_tokens: int = 0
    decode_tokens: int = 0
    preemptions: int = 0
    peak_running: int = 0


class Scheduler:
    def __init__(self, cache, free_seq, max_num_seqs: int = 64, max_prefill_tokens: int = 4096):
        self.cache = cache                # engine.cache: blocks_needed, allocator.num_free, num_blocks
        self.free_seq = free_seq          # engine.free: releases a sequence's blocks
        if max_prefill_tokens < 1:
            raise ValueError(f"max_prefill_tokens must be at least 1, found {max_prefill_tokens}")
        self.max_num_seqs = max_num_seqs
        self.max_prefill_tokens = max_prefill_tokens       # tokens one prefill step runs at most
        self.waiting: deque[Request] = deque()
        self.running: list[Request] = []  # admission order: the last one is the youngest
        self.stats = SchedulerStats()

    def add(self, request: Request) -> None:
        self.waiting.append(request)

    @property
    def done(self) -> bool:
        return not self.waiting and not self.running

    def schedule(self) -> tuple[str, list[Request]]:
        """("prefill", requests with a chunk to run) when any prefill work is ready, else ("decode", requests to
        advance). A prefill request's `chunk` says how many of its ids this step runs (Request.chunk_ids)."""
        batch = self._prefill_batch()
        if batch:
            self.stats.prefill_steps += 1
            self.stats.prefill_tokens += sum(r.chunk for r in batch)
            return "prefill", batch
        batch = self._reserve_decode()
        if batch:
            self.stats.decode_steps += 1
            self.stats.decode_tokens += len(batch)
        return "decode", batch

    def finish(self, request: Request) -> None:
        """Drop a finished request and release its blocks."""
        if request in self.running:
            self.running.remove(request)
        self._release(request)

    def preempt(self, request: Request) -> None:
        """Free a running request's blocks and queue it first, to be recomputed when blocks are free."""
        self.running.remove(request)
        self._release(request)
        self.waiting.appendleft(request)
        self.stats.preemptions += 1

    # ------------------------------------------------------------------------------------------ internals

    def _release(self, request: Request) -> None:
        if request.in_cache:
            self.free_seq(request.seq_id)
            request.in_cache = False
        request.drop_prefill()

    def _prefill_batch(self) -> list[Request]:
        """Chunked prefills under way (oldest first), then new admissions, within max_prefill_tokens tokens."""
        budget = self.max_prefill_tokens
        batch: list[Request] = []
        for request in self.running:
            if request.prefilling and budget > 0:
                request.chunk = min(budget, request.prefill_end - request.prefilled)
                budget -= request.chunk
                batch.append(request)
        return batch + self._admit(budget, first=not batch)

    def _promised(self) -> int:
        """Blocks the chunks still to run of the prefills under way will take (counted when they were admitted)."""
        return sum(self.cache.blocks_needed(r.seq_id if r.in_cache else None, r.prefill_end - r.prefilled)
                   for r in self.running if r.prefilling)

    def _admit(self, budget: int, first: bool) -> list[Request]:
        """Waiting requests that fit, oldest first; only the step's first one is chunked to the budget, the
        others wait for a step with room for their whole prompt (a short prompt is never split)."""
        admitted: list[Request] = []
        free = self.cache.allocator.num_free - self._promised()
        while self.waiting and len(self.running) < self.max_num_seqs and budget > 0:
            request = self.waiting[0]
            n = len(request.all_ids)
            need = self.cache.blocks_needed(None, n)
            if need > self.cache.num_blocks:
                self.waiting.popleft()
                request.finish("kv_cache_full")  # could never be admitted, even into an empty cache
                continue
            # keep one block per running request free for its next decode step, or the admission would
            # only be preempted again at once (prefill work thrown away)
            if need > free - len(self.running) or (n > budget and (admitted or not first)):
                break
            self.waiting.popleft()
            request.start_prefill(min(n, budget))
            admitted.append(request)
            self.running.append(request)
            free, budget = free - need, budget - request.chunk
        self.stats.peak_running = max(self.stats.peak_running, len(self.running))
        return admitted

    def _reserve_decode(self) -> list[Request]:
        """Running requests whose next token fits, oldest first, preempting the youngest until it does."""
        batch: list[Request] = []
        reserved = 0
        for request in list(self.running):
            if request not in self.running or request.prefilling:
                continue  # preempted earlier in this loop (a prefill under way: never here, prefills go first)
            need = self.cache.blocks_needed(request.seq_id, 1)
            while need > self.cache.allocator.num_free - reserved:
                victim = self.running[-1]
                if victim is request and not batch:
                    # alone and still too big: the pool cannot hold this request at all
                    self.finish(request)
                    request.finish("kv_cache_full")
                    break
                self.preempt(victim)
                if victim is request:
                    break
            else:
                batch.append(request)
                reserved += need
        return batch
