"""One pass over the layers carrying several independent steps ("lanes") at once.

A lane is one step of one or more sequences: its residual stream, KV cache, step metadata, RoPE rows, capture
hook and compute dtype. `run_layers` fetches each layer's weights once from a source and advances every lane
through `model.decoder_layer` before the next layer is fetched, so N probes, or a probe in float32 with its
bfloat16 and float16 shadows, cost one read of the weights instead of N (or three engines). Each lane computes
exactly what it would compute alone (same inputs, same kernels), so its logits are those of `Engine.logits`.

Sources: `ResidentSource` (the weights already in memory; other dtypes are cast one layer at a time) and the
streaming core (streaming.py, loads each layer from the files just in time). A source provides
`layer(i)`, `layer_done(i)`, `embed(tokens, dtype)`, `norm(dtype)`, `heads(hiddens, linear)`.
"""
from __future__ import annotations

from dataclasses import dataclass, fields, replace

import torch
import torch.nn.functional as F

from reference_engine.core import families
from reference_engine.core.attention import StepMetadata, build_metadata
from reference_engine.core.cache.kv_cache import PagedKVCache
from reference_engine.core.engine import new_cache
from reference_engine.core.model import CaptureHook, emit_capture, decoder_layer, embed, final_logits, norm
from reference_engine.core.model_weights import LayerWeights
from reference_engine.core.rope import build_rope_table

HEAD_BLOCK_BYTES = 64 << 20     # LM head rows cast and multiplied at a time when it is not resident


@dataclass
class Lane:
    h: torch.Tensor                   # [num_tokens, hidden] residual stream, in `dtype`
    cache: PagedKVCache
    meta: StepMetadata
    cos: torch.Tensor                 # [num_tokens, head_dim]
    sin: torch.Tensor
    capture: CaptureHook | None
    dtype: torch.dtype
    variant: "NormShift | None" = None   # the weights this lane sees differ from the model's (a probe)
    linear: object = None             # this lane's projection kernel (a decode step's), else the pass's


@dataclass(frozen=True)
class NormShift:
    """Every RMSNorm gain (decoder layers and the final norm) plus `shift`: how the model would run under the
    other norm convention (Gemma's 1 + w vs w), computed beside the real weights in the same pass (CNV001)."""
    shift: float
    FIELDS = ("input_norm", "post_norm", "pre_ff_norm", "post_ff_norm", "qk_norm")

    def layer(self, w: LayerWeights) -> LayerWeights:
        return replace(w, **{name: getattr(w, name) + self.shift for name in self.FIELDS
                             if getattr(w, name) is not None})

    def norm(self, weight: torch.Tensor) -> torch.Tensor:
        return weight + self.shift


@dataclass
class LogitsRequest:
    """One throwaway prefill (what Engine.logits does): float32 logits [len(tokens), vocab]."""
    tokens: list[int]
    capture: CaptureHook | None = None
    dtype: torch.dtype | None = None  # None: the engine's dtype; another one runs as a shadow in the same pass
    variant: NormShift | None = None  # run on adjusted weights (a copy per layer; the model is untouched)


def cast_layer(w: LayerWeights, dtype: torch.dtype, into: dict | None = None) -> LayerWeights:
    """The layer's tensors in another dtype (a shadow lane's copy). into: the previous layer's copies in this
    dtype (field name -> tensor), overwritten where the shapes match: layer after layer of a pass, no fresh
    allocation to page-fault in."""
    def cast(name: str, t: torch.Tensor) -> torch.Tensor:
        if into is None:
            return t.to(dtype)
        old = into.get(name)
        if old is None or old.shape != t.shape or old.device != t.device:
            into[name] = old = None
            into[name] = old = torch.empty(t.shape, dtype=dtype, device=t.device)
        return old.copy_(t)
    extra = {name: cast("extra." + name, t) for name, t in w.extra.items()}
    return replace(w, extra=extra, **{f.name: cast(f.name, getattr(w, f.name)) for f in fields(w)
                                      if isinstance(getattr(w, f.name), torch.Tensor)})


def run_layers(source, config, windows, lanes: list[Lane], linear=F.linear, layers=None) -> None:
    """Advance every lane through `layers` (default: all), fetching each layer's weights once."""
    shadows: dict = {}                                     # dtype -> that dtype's copies, reused layer to layer
    for i in (range(config.num_hidden_layers) if layers is None else layers):
        w = source.layer(i)
        views = {(w.dtype, None): w}                   # (dtype, variant) -> the layer as that lane sees it
        for lane in lanes:
            key = (lane.dtype, lane.variant)
            if (lane.dtype, None) not in views:
                views[(lane.dtype, None)] = cast_layer(w, lane.dtype, shadows.setdefault(lane.dtype, {}))
            if key not in views:
                views[key] = lane.variant.layer(views[(lane.dtype, None)])
            lane.h = decoder_layer(lane.h, views[key], config, i, lane.cache, lane.meta, lane.cos,
                                   lane.sin, windows[i], lane.capture, lane.linear or linear)
        del w, views
        source.layer_done(i)


def finish_all(source, config, lanes: list[Lane], linear=F.linear, rows: list | None = None) -> list[torch.Tensor]:
    """Final norm and LM head of every lane of a pass -> float32 logits [rows[k] or all tokens, vocab] each (as
    CoreEngine._step), with one read of the LM head for all of them (source.heads)."""
    n = config.num_hidden_layers
    hidden = []
    for lane, r in zip(lanes, rows or [None] * len(lanes)):
        gain = source.norm(lane.dtype) if lane.variant is None else lane.variant.norm(source.norm(lane.dtype))
        h = emit_capture(lane.capture, n, "final_norm", norm(lane.h, gain, config))
        hidden.append(h if r is None else h[r])
    # without a final soft-cap the head's output is the logits: written straight into float32 (a lower-precision
    # lane's values upcast exactly, as .float() would), so no [tokens, vocab] copy in the lane's dtype is made
    direct = families.settings(config).scales.final_softcap is None
    out = []
    linears = [lane.linear or linear for lane in lanes]
    for lane, head in zip(lanes, source.heads(hidden, linears, torch.float32 if direct else None)):
        logits = final_logits(head, config)
        if lane.capture is not None:
            replaced = lane.capture(n, "logits", logits)
            logits = logits if replaced is None else replaced
        out.append(logits.float())
    return out


def blocked_head(hidden: torch.Tensor, read_rows, vocab: int, linear=F.linear,
                 block_bytes: int = HEAD_BLOCK_BYTES, out_dtype=None) -> torch.Tensor:
    """hidden [T, H] @ head^T block by block: read_rows(start, end) -> [end - start, H] in any dtype."""
    return blocked_heads([hidden], read_rows, vocab, linear, block_bytes, out_dtype)[0]


def blocked_heads(hiddens: list[torch.Tensor], read_rows, vocab: int, linear=F.linear,
                  block_bytes: int = HEAD_BLOCK_BYTES, out_dtype=None) -> list[torch.Tensor]:
    """Each hiddens[k] [T_k, H] @ head^T, reading each block of the head once for all of them; a block is at
    most `block_bytes` in the widest dtype involved, cast once per other dtype. Each lane's product is the
    one it would get alone (each logit is one dot product over H: block boundaries change no sum). linear:
    one kernel for all, or one per hidden."""
    linears = linear if isinstance(linear, (list, tuple)) else [linear] * len(hiddens)
    width = max(h.element_size() for h in hiddens)
    rows = max(1, block_bytes // (hiddens[0].shape[-1] * width))
    outs = [torch.empty(h.shape[0], vocab, dtype=out_dtype or h.dtype, device=h.device)      # [T_k, vocab]
            for h in hiddens]
    for start in range(0, vocab, rows):
        end = min(vocab, start + rows)
        block = read_rows(start, end)
        cast: dict = {}
        for h, out, lin in zip(hiddens, outs, linears):
            key = (h.device, h.dtype)
            if key not in cast:
                cast[key] = block.to(device=h.device, dtype=h.dtype)
            out[:, start:end] = lin(h, cast[key])
        del block, cast
    return outs


def embed_rows(rows: torch.Tensor, config) -> torch.Tensor:
    """model.embed on rows already gathered [T, hidden] (the family's scale applied in their dtype, as an
    engine loaded in that dtype would)."""
    return embed(torch.arange(rows.shape[0], device=rows.device), rows, config)


class ResidentSource:
    """The resident engine's weights as a sweep source; other dtypes are cast layer by layer, never whole."""

    def __init__(self, core):
        self.core = core

    def layer(self, i: int) -> LayerWeights:
        return self.core.weights.layers[i]

    def layer_done(self, i: int) -> None:
        pass

    def embed(self, tokens: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
        return embed_rows(F.embedding(tokens, self.core.weights.embed).to(dtype), self.core.config)

    def norm(self, dtype: torch.dtype) -> torch.Tensor:
        return self.core.weights.norm.to(dtype)

    def head(self, hidden: torch.Tensor, linear=F.linear) -> torch.Tensor:
        return self.heads([hidden], linear)[0]

    def heads(self, hiddens: list[torch.Tensor], linear=F.linear, out_dtype=None) -> list[torch.Tensor]:
        head = self.core.weights.lm_head
        linears = linear if isinstance(linear, (list, tuple)) else [linear] * len(hiddens)
        return [lin(h, head) if h.dtype == head.dtype
                else blocked_head(h, lambda a, b: head[a:b], head.shape[0], lin, out_dtype=out_dtype)
                for h, lin in zip(hiddens, linears)]


def private_lane(core, source, tokens: list[int], capture, dtype: torch.dtype, ropes: dict) -> Lane:
    """A lane for one fresh sequence on its own small cache (what a scratch prefill would do)."""
    config, device = core.config, core.device
    n = len(tokens)
    block = core.cache.block_size
    cache = new_cache(config, -(-n // block) + 1, block, dtype, device)
    slots = cache.allocate(0, n)
    meta = build_metadata(cache, [0], [0], [n], slots, device)
    if dtype not in ropes:
        ropes[dtype] = core.rope if dtype == core.dtype else build_rope_table(config, device, dtype)
    cos, sin = ropes[dtype].lookup(meta.positions, check=False, ends=meta.ends)
    ids = torch.tensor(tokens, dtype=torch.int64, device=device)
    h = emit_capture(capture, -1, "embed", source.embed(ids, dtype))
    return Lane(h, cache, meta, cos, sin, capture, dtype)


@torch.inference_mode()
def logits_many(core, requests: list[LogitsRequest]) -> list[torch.Tensor]:
    """float32 logits [len(tokens), vocab] per request. Resident engines run their own dtype through
    `core.logits` (today's path) and the shadows in one sweep over the in-memory layers; a streaming core
    runs everything in one pass over the files."""
    streaming = getattr(core, "streaming", False)
    source = core if streaming else ResidentSource(core)
    out: list[torch.Tensor | None] = [None] * len(requests)
    lanes, where, ropes = [], [], {}
    for k, r in enumerate(requests):
        dtype = r.dtype or core.dtype
        if not streaming and dtype == core.dtype and r.variant is None:
            out[k] = core.logits(list(r.tokens), capture=r.capture)
            continue
        check_tokens(core, r.tokens)
        lanes.append(private_lane(core, source, list(r.tokens), r.capture, dtype, ropes))
        lanes[-1].variant = r.variant
        where.append(k)
    if lanes:
        if streaming:
            core.run_lanes(lanes)          # the streaming core's pass (progress, pipeline across ranks)
        else:
            run_layers(source, core.config, core.windows, lanes)
        for k, logits in zip(where, finish_all(source, core.config, lanes)):
            out[k] = logits
    return out


def check_tokens(core, tokens) -> None:
    vocab, table = core.config.vocab_size, core.rope.max_positions
    if not tokens:
        raise ValueError("a request has no tokens")
    bad = [t for t in tokens if not 0 <= int(t) < vocab]
    if bad:
        raise ValueError(f"token id {bad[0]!r} is outside the vocabulary (size {vocab})")
    if len(tokens) > table:
        raise ValueError(f"{len(tokens)} tokens reach past the RoPE table (max_position_embeddings = {table})")
