"""Continuous batching: a waiting queue, a running list, and KV blocks as the currency.

Each step is either a prefill (admit waiting requests, oldest first, while their blocks fit) or a decode
(one token for every running request). When a decode step needs more blocks than are free, the youngest
running request is preempted: its blocks are freed and it goes back to the front of the waiting queue, to be
recomputed later from its prompt plus the tokens it already generated (recompute, as vLLM and nano-vllm do;
the result is the same as if it had never been interrupted). A request that cannot fit even alone ends with
finish_reason "kv_cache_full" instead of stalling the queue. Nothing here touches tensors: the generate loop
runs the batches this hands out.
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
        self.max_num_seqs = max_num_seqs
        self.max_prefill_tokens = max_prefill_tokens
        self.waiting: deque[Request] = deque()
        self.running: list[Request] = []  # admission order: the last one is the youngest
        self.stats = SchedulerStats()

    def add(self, request: Request) -> None:
        self.waiting.append(request)

    @property
    def done(self) -> bool:
        return not self.waiting and not self.running

    def schedule(self) -> tuple[str, list[Request]]:
        """("prefill", newly admitted requests) when any fit, else ("decode", requests to advance)."""
        admitted = self._admit()
        if admitted:
            self.stats.prefill_steps += 1
            self.stats.prefill_tokens += sum(len(r.all_ids) for r in admitted)
            return "prefill", admitted
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

    def _admit(self) -> list[Request]:
        admitted: list[Request] = []
        free, tokens = self.cache.allocator.num_free, 0
        while self.waiting and len(self.running) < self.max_num_seqs:
            request = self.waiting[0]
            n = len(request.all_ids)
            need = self.cache.blocks_needed(None, n)
            if need > self.cache.num_blocks:
                self.waiting.popleft()
                request.finish("kv_cache_full")  # could never be admitted, even into an empty cache
                continue
            # keep one block per running request free for its next decode step, or the admission would
            # only be preempted again at once (prefill work thrown away)
            if need > free - len(self.running) or (admitted and tokens + n > self.max_prefill_tokens):
                break
            self.waiting.popleft()
            admitted.append(request)
            self.running.append(request)
            free, tokens = free - need, tokens + n
        self.stats.peak_running = max(self.stats.peak_running, len(self.running))
        return admitted

    def _reserve_decode(self) -> list[Request]:
        """Running requests whose next token fits, oldest first, preempting the youngest until it does."""
        batch: list[Request] = []
        reserved = 0
        for request in list(self.running):
            if request not in self.running:
                continue  # preempted earlier in this loop
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
