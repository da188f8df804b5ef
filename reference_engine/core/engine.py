"""CoreEngine: the transformer core of the reference engine (weights + RoPE table + paged KV cache).

`CoreEngine.from_pretrained(dir)` reads config.json and the safetensors weights; `prefill`/`decode` run
batched steps over the paged cache for the generate loop; `logits(token_ids)` is the one-shot view the
checks and tests use. It knows nothing of tokenizers or sampling: `reference_engine.engine.Engine` composes
the three stages. See docs/design.md "Engine API for the generate loop".
"""
from __future__ import annotations

import operator
from contextlib import contextmanager
from pathlib import Path

import torch
import torch.nn.functional as F

from reference_engine.core.attention import build_metadata
from reference_engine.config import ModelConfig
from reference_engine.core import families
from reference_engine.core.cache.kv_cache import CacheFullError, PagedKVCache
from reference_engine.core.cache.layout import bytes_per_token, is_hybrid
from reference_engine.readers.chunked import chunked_reader
from reference_engine.core.linear import decode_linear, pack_for_decode, single_row_plain
from reference_engine.core.model import (CaptureHook, Projection, check_supported, final_logits, forward,
                                         layer_windows)
from reference_engine.core.model_weights import ModelWeights, load_model_weights
from reference_engine.core.rope import RopeTable, build_rope_table
from reference_engine.source import model_source
from reference_engine.errors import UnsupportedError
from reference_engine.limits import available_bytes, check_allocation

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16,
          "fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}
DEFAULT_KV_BYTES = 1 << 30   # default cache budget when num_blocks is not given


def resolve_dtype(dtype) -> torch.dtype:
    if isinstance(dtype, torch.dtype):
        return dtype
    if dtype not in DTYPES:
        raise ValueError(f"unsupported dtype {dtype!r} (choose from float32, bfloat16, float16)")
    return DTYPES[dtype]


def resolve_device(device) -> torch.device:
    try:
        device = torch.device(device)
    except (RuntimeError, TypeError) as e:
        raise ValueError(f"invalid device {device!r}: {e}") from None
    if device.type == "cuda" and not torch.cuda.is_available():
        raise ValueError(f"device {str(device)!r} requested but CUDA is not available to torch")
    return device


def default_num_blocks(config: ModelConfig, block_size: int, bytes_per_token: int) -> int:
    """Room for 4 full-length sequences, capped at ~1 GiB or half the memory available, whichever is less (but
    at least 4096 tokens, or one full sequence if shorter); pass num_blocks to size it yourself. The cache's
    pages are touched only as tokens are written, but its size is what is checked against the memory left."""
    free = available_bytes()
    budget_tokens = min(DEFAULT_KV_BYTES, free // 2 if free else DEFAULT_KV_BYTES) // bytes_per_token
    tokens = min(4 * config.max_position_embeddings,
                 max(budget_tokens, min(config.max_position_embeddings, 4096)))
    check_allocation("the default KV cache", tokens * bytes_per_token, "config.json",   # before allocating
                     f"{tokens} tokens x {bytes_per_token} bytes")
    return -(-tokens // block_size)


def new_cache(config: ModelConfig, num_blocks: int | None, block_size: int, dtype: torch.dtype, device,
              prefix_caching: bool = False) -> PagedKVCache:
    """The two-kind cache the config's family lays out (core/cache/layout.py): paged pools for the layers that
    keep K/V (or MLA's latent) per token, a state per sequence for the recurrent ones."""
    layout = families.cache_layout(config)
    if prefix_caching and is_hybrid(layout):
        raise UnsupportedError("config.json", "prefix caching is not available for a model with recurrent layers "
                                              f"({', '.join(sorted(set(families.mixers(config)) - {'attention'}))}): "
                                              "their state summarises the whole prefix and cannot be shared block "
                                              "by block; run without prefix caching")
    if num_blocks is None:
        num_blocks = default_num_blocks(config, block_size, max(bytes_per_token(layout, dtype), 1))
    return PagedKVCache(config.num_hidden_layers, num_blocks, block_size, config.num_key_value_heads,
                        config.head_dim, dtype, device, prefix_caching, layout)


class CoreEngine:
    def __init__(self, config: ModelConfig, weights: ModelWeights, rope: RopeTable, cache: PagedKVCache,
                 device: torch.device, dtype: torch.dtype, model_dir: Path | None = None):
        self.config, self.weights, self.rope, self.cache = config, weights, rope, cache
        self.device, self.dtype, self.model_dir = device, dtype, model_dir
        self.windows = layer_windows(config)
        self._decode_weights: tuple | None = None   # (source, packed) on the first decode step (linear.py)
        self.pack_decode = True     # False: decode reads the plain projections (no second copy; the plan decides)
        if rope.restart_at is not None:
            cache.keep_tokens_until(rope.restart_at)

    @classmethod
    def from_pretrained(cls, model_dir, device="cpu", dtype="float32", num_blocks: int | None = None,
                        block_size: int = 16, prefix_caching: bool = False, adapter=None) -> "CoreEngine":
        source = model_source(model_dir, adapter)   # a Hugging Face directory or a GGUF file (+ a LoRA adapter)
        root, config = source.root, source.config
        check_supported(config, source.config_path)
        device, torch_dtype = resolve_device(device), resolve_dtype(dtype)
        rope = build_rope_table(config, device, torch_dtype, str(source.config_path))  # cheap errors first
        # read with plain reads that drop the page cache after them: the model is held once, in the engine
        # (a memory map would leave every page charged to the process and its cgroup beside the copies)
        tensors = source.open_weights()
        reader = chunked_reader(tensors, source.gguf is not None)
        try:
            weights = load_model_weights(tensors, config, root, device, torch_dtype, reader)
        finally:
            reader.close()
        cache = new_cache(config, num_blocks, block_size, torch_dtype, device, prefix_caching)
        return cls(config, weights, rope, cache, device, torch_dtype, root)

    # ---- steps ---------------------------------------------------------------------------------------
    def prefill(self, seq_ids: list, token_lists: list, *, all_logits: bool = False,
                capture: CaptureHook | None = None) -> torch.Tensor:
        """Run new tokens of several sequences in one batched step (new ids are allocated, known ones extended).
        Returns float32 logits [len(seq_ids), vocab] of each sequence's last new token, or with
        all_logits=True [total new tokens, vocab] packed in input order. With prefix caching on (and
        all_logits off) a new sequence reuses the cached blocks of its longest known prefix."""
        return self._step(seq_ids, token_lists, all_logits, capture, torch.nn.functional.linear, self.weights)

    @torch.inference_mode()
    def _step(self, seq_ids: list, token_lists: list, all_logits: bool, capture: CaptureHook | None,
              linear, weights: ModelWeights) -> torch.Tensor:
        token_lists = [_as_ids(t) for t in token_lists]
        requested = [len(t) for t in token_lists]
        run_ids, token_lists, restarts = self.restarts(seq_ids, token_lists)
        self._check_step(run_ids, token_lists)
        new = [s for s in run_ids if s not in self.cache]
        starts = [self.cache.length(s) if s in self.cache else 0 for s in run_ids]
        try:
            if self.cache.prefix is not None and not all_logits:
                # cached blocks hold short-factor K/V (keep_tokens_until): never for a recomputation, nor for a
                # sequence that goes past the LongRoPE switch in this step
                limit = self.rope.restart_at
                fresh = [s for s, t in zip(run_ids, token_lists)
                         if s in new and s not in restarts and (limit is None or len(t) <= limit)]
                token_lists, starts = self._reuse_prefixes(run_ids, token_lists, starts, fresh)
            counts = [len(t) for t in token_lists]
            slots = torch.cat([self.cache.append(s, len(t), t) if s in self.cache else self.cache.allocate(s, len(t), t)
                               for s, t in zip(run_ids, token_lists)])
            meta = build_metadata(self.cache, run_ids, starts, counts, slots, self.device)
            tokens = torch.tensor([t for ts in token_lists for t in ts], dtype=torch.int64, device=self.device)
            hidden = self._forward(weights, tokens, meta, capture, linear)
        except BaseException:
            self._rollback(run_ids, starts, new)
            raise
        if self.cache.states is not None:          # the step succeeded: its recurrent states become current
            self.cache.states.commit()
        self.adopt(restarts)
        if not all_logits:
            last = torch.tensor(counts, device=self.device).cumsum(0) - 1
            hidden = hidden[last]
        elif restarts:                                   # only the rows of the tokens the caller passed
            keep = torch.cat([torch.arange(c - r, c) for c, r in zip(torch.tensor(counts).cumsum(0).tolist(),
                                                                     requested)])
            hidden = hidden[keep.to(self.device)]
        logits = final_logits(self._head(hidden, weights, linear), self.config)   # Gemma 2: soft-capped
        if capture is not None:
            replaced = capture(self.config.num_hidden_layers, "logits", logits)
            logits = logits if replaced is None else replaced
        return logits.float()

    def _forward(self, weights, tokens, meta, capture, linear) -> torch.Tensor:
        """tokens [T] -> final-norm hidden [T, hidden]; the streaming core (streaming.py) loads layers instead."""
        return forward(weights, self.config, tokens, self.cache, meta, self.rope, self.windows, capture, linear)

    def _head(self, hidden, weights, linear) -> torch.Tensor:
        return linear(hidden, weights.lm_head)                 # [rows, vocab]

    def restarts(self, seq_ids: list, token_lists: list[list[int]]) -> tuple[list, list[list[int]], dict]:
        """LongRoPE picks its factors by the sequence's length: K/V cached while a sequence was within
        original_max_position_embeddings were rotated with the short factors, and once it grows past that every
        position must use the long ones. A step that takes a sequence across is run on a private id over the
        sequence's whole history plus its new tokens, as transformers' Phi-3 generate drops its cache there.
        Returns (ids to run, their token lists, {private id: sequence}); `adopt` swaps them in afterwards."""
        limit = self.rope.restart_at
        if limit is None:
            return seq_ids, token_lists, {}
        run_ids, lists, restarts = list(seq_ids), list(token_lists), {}
        for i, s in enumerate(seq_ids):
            start = self.cache.length(s) if s in self.cache else 0
            if 0 < start <= limit < start + len(lists[i]):
                history = self.cache.token_ids.get(s)
                if history is None or len(history) != start:
                    raise ValueError(f"sequence {s!r} crosses the LongRoPE switch at {limit} tokens but its "
                                     "earlier tokens are unknown, so it cannot be recomputed")
                run_ids[i], lists[i] = _Scratch(), list(history) + lists[i]
                restarts[run_ids[i]] = s
        return run_ids, lists, restarts

    def adopt(self, restarts: dict) -> None:
        """Each recomputed copy takes its sequence's place; the old blocks go back to the pool."""
        for private, seq in restarts.items():
            self.cache.swap(seq, private)
            self.cache.free(private)

    def _reuse_prefixes(self, seq_ids, token_lists, starts, new):
        """New sequences start on the cached blocks of their longest known prefix; only the rest is computed."""
        for i, s in enumerate(seq_ids):
            if s in new:
                cached = self.cache.allocate_prefix(s, token_lists[i])
                token_lists[i], starts[i] = token_lists[i][cached:], cached
        return token_lists, starts

    def decode(self, seq_ids: list, token_ids: list[int], *, capture: CaptureHook | None = None) -> torch.Tensor:
        """One new token per (already prefilled) sequence -> float32 logits [len(seq_ids), vocab]."""
        missing = [s for s in seq_ids if s not in self.cache]
        if missing:
            raise KeyError(f"decode of sequences without a prefill: {missing[:5]}")
        linear, weights = self.decode_projection(len(seq_ids))
        return self._step(seq_ids, [[int(t)] for t in token_ids], False, capture, linear, weights)

    def decode_projection(self, rows: int) -> tuple[Projection, ModelWeights]:
        """(projection function, weights) a decode step of `rows` sequences runs: the fastest kernel and layout
        for few-row steps (see linear.py); prefill keeps transformers' kernel. benchmarks/decode_profile.py times
        the projections of real steps through this."""
        if single_row_plain(rows, self.dtype, self.device):
            return F.linear, self.weights
        return decode_linear, self._weights_for_decode()

    def _weights_for_decode(self) -> ModelWeights:
        """self.weights with the projections in oneDNN's layout, built once (again if self.weights is replaced)."""
        if not self.pack_decode:
            return self.weights
        if self._decode_weights is None or self._decode_weights[0] is not self.weights:
            self._decode_weights = (self.weights, pack_for_decode(self.weights))
        return self._decode_weights[1]

    def _check_step(self, seq_ids: list, token_lists: list[list[int]]) -> None:
        if not seq_ids or len(seq_ids) != len(token_lists):
            raise ValueError(f"need one token list per sequence ({len(seq_ids)} ids, {len(token_lists)} lists)")
        if len(set(seq_ids)) != len(seq_ids):
            raise ValueError("a sequence id appears twice in one step")
        vocab, table = self.config.vocab_size, self.rope.max_positions
        for s, tokens in zip(seq_ids, token_lists):
            if not tokens:
                raise ValueError(f"sequence {s!r} has no new tokens")
            bad = [t for t in tokens if not 0 <= t < vocab]
            if bad:
                raise ValueError(f"token id {bad[0]!r} is outside the vocabulary (size {vocab})")
            end = (self.cache.length(s) if s in self.cache else 0) + len(tokens)
            if end > table and not self.rope.unbounded:    # dynamic NTK computes rows past its table
                raise ValueError(f"sequence {s!r} would reach position {end - 1}, past the RoPE table "
                                 f"(max_position_embeddings = {table})")
        needed = sum(self.cache.blocks_needed(s, len(t)) for s, t in zip(seq_ids, token_lists))
        if needed > self.cache.allocator.num_free:
            raise CacheFullError(f"step needs {needed} KV blocks, {self.cache.allocator.num_free} free")

    def _rollback(self, seq_ids: list, starts: list[int], new: list) -> None:
        if self.cache.states is not None:          # recurrent states staged by the failed step are dropped
            self.cache.states.discard()
        for s, start in zip(seq_ids, starts):   # new sequences are freed whatever their start
            if s in new and s in self.cache:
                self.cache.free(s)
            elif s in self.cache:
                self.cache.truncate(s, start)

    # ---- sequence management -------------------------------------------------------------------------
    def fork(self, parent_id, child_id) -> None:
        self.cache.fork(parent_id, child_id)

    def free(self, seq_id) -> None:
        self.cache.free(seq_id)

    @contextmanager
    def scratch(self, count: int = 1):
        """`count` private sequence ids, equal only to themselves, freed from the cache on exit whatever happens."""
        seqs = tuple(_Scratch() for _ in range(count))
        try:
            yield seqs
        finally:
            for seq in seqs:
                if seq in self.cache:
                    self.cache.free(seq)

    # ---- one-shot logits -----------------------------------------------------------------------------
    def logits(self, token_ids, *, capture: CaptureHook | None = None) -> torch.Tensor:
        """float32 logits [seq_len, vocab] of every position of one prefill (the cache is left as it was)."""
        if isinstance(token_ids, torch.Tensor):
            token_ids = token_ids.reshape(-1).tolist()
        with self.scratch() as (seq,):
            return self.prefill([seq], [list(token_ids)], all_logits=True, capture=capture)

    def validate(self, logits: torch.Tensor | None = None, *, positions=None,
                 max_abs_logit: float = 100.0) -> list[str]:
        """Problems with the core (and with `logits` when given); [] when healthy. Never raises."""
        from reference_engine.core.validate import validate
        return validate(self, logits, positions, max_abs_logit)


def _as_ids(tokens) -> list[int]:
    if isinstance(tokens, torch.Tensor):
        tokens = tokens.reshape(-1).tolist()
    try:
        return [operator.index(t) for t in tokens]
    except TypeError:
        raise ValueError(f"token ids must be integers, found {tokens!r:.80}") from None


class _Scratch:
    """A private sequence id, equal only to itself, so it never clashes with a caller's ids."""

    def __repr__(self) -> str:
        return "<scratch sequence>"
