"""Weight checks (WGT): the safetensors tensors are the ones config.json describes (names, shapes, dtypes), and
their values are usable (no NaN/Inf, no all-zero matrices, no layer wildly out of scale). Values are read by one
streamed pass (checks/_tensor_scan.py) shared by every check that needs them."""
from __future__ import annotations

import statistics

from checks.catalogue.registry import Problem, Skip, check
from checks.catalogue.locations import config_key, tensor
from findings import Location
from checks.shared.weights.tensor_layout import (HARMLESS_EXTRA, LM_HEAD, expected_tensors, layer_shortfall,
                                          optional_tensors, role_of, tensor_table_known)
from checks.shared.weights.tensor_scan import weight_scan
from reference_engine.core.model_weights import mtp_tensors
from reference_engine.errors import ModelDirError

FLOAT_DTYPES = {"F32": "float32", "BF16": "bfloat16", "F16": "float16", "F64": "float64"}
FLOAT16_MAX = 65504.0



def _shape_location(cfg, name: str, want: tuple, got: tuple) -> Location:
    """A shape mismatch points at the config key that implies it: vocab_size for the embedding/lm_head rows;
    otherwise the tensor (the key depends on the family's layout)."""
    if got and want and got[0] != want[0] == cfg.vocab_size and ".layers." not in name:
        return config_key("vocab_size")
    return tensor(name)


def _need_table(cfg) -> None:
    """The expected tensor table exists only for the architectures the engine families know: for any other decoder
    the names and shapes would be guesses, and a guessed table raises false findings."""
    if not tensor_table_known(cfg):
        raise Skip(f"no tensor table for architecture {cfg.architecture!r} (not an engine family)")


@check("WGT001", category="weights", severity="error", needs=("config", "weights"),
       hint="Re-export the checkpoint; if lm_head.weight is missing on purpose set tie_word_embeddings=true.")
def missing_tensors(ctx):
    """Every tensor the architecture needs is in the safetensors files.

    transformers fills a missing tensor with random values and only logs "Some weights of X were not
    initialized from the model checkpoint" — the model then produces fluent-looking garbage. The classic
    case is `lm_head.weight` absent from a checkpoint whose config says `tie_word_embeddings: false`
    (the exporter deduplicated a tied tensor but the config disagrees), or a layer lost in a merge.

    Remedy: re-export; for a missing lm_head that should be tied, set `tie_word_embeddings: true`.
    """
    cfg, names = ctx.config, set(ctx.weights.names)
    _need_table(cfg)
    shortfall = layer_shortfall(cfg, names)    # from the names present: a config may claim a billion layers
    if shortfall is not None:
        yield Problem(shortfall.message, evidence={"num_hidden_layers": shortfall.declared,
                                                   "layers_in_weights": shortfall.backed},
                      location=config_key("num_hidden_layers"))
    missing = [n for n in expected_tensors(cfg, names) if n not in names]
    if LM_HEAD in missing:
        yield Problem("lm_head.weight is missing but tie_word_embeddings is false: the output layer would be "
                      "random", evidence={"tensor": LM_HEAD, "tie_word_embeddings": cfg.tie_word_embeddings},
                      location=config_key("tie_word_embeddings"))
        missing.remove(LM_HEAD)
    if missing:
        yield Problem(f"{len(missing)} tensor(s) missing, e.g. {missing[0]}",
                      evidence={"missing": missing[:20], "count": len(missing)}, location=tensor(missing[0]))


@check("WGT002", category="weights", severity="warning", needs=("config", "weights"),
       hint="Check that config.json matches the checkpoint (layer count, architecture); drop stray tensors.")
def unexpected_tensors(ctx):
    """No tensors the architecture does not use.

    Extra tensors are ignored by loaders ("Some weights of the model checkpoint were not used"), which
    usually means config.json describes a different model than the weights: fewer layers than stored,
    a bias the architecture lacks, or LoRA/adapter tensors that were never merged. Leftover
    `rotary_emb.inv_freq` buffers are harmless and reported as info.

    Remedy: make config.json match the weights, or merge the adapter properly.
    """
    cfg = ctx.config
    _need_table(cfg)
    known = set(expected_tensors(cfg, ctx.weights.names)) | optional_tensors(cfg)
    droppable = getattr(ctx.weights, "droppable", frozenset())     # quantized modules' biases: QNT013's
    droppable = droppable | mtp_tensors(cfg, ctx.weights.names)    # DeepSeek-V3's MTP layers: unused by design
    extra = [n for n in ctx.weights.names if n not in known and n not in droppable]
    harmless = [n for n in extra if HARMLESS_EXTRA.search(n)]
    suspicious = [n for n in extra if n not in harmless]
    if suspicious:
        yield Problem(f"{len(suspicious)} tensor(s) the architecture does not use, e.g. {suspicious[0]}",
                      evidence={"unexpected": suspicious[:20], "count": len(suspicious)},
                      location=tensor(suspicious[0]))
    if harmless:
        yield Problem(f"{len(harmless)} leftover buffer(s) such as {harmless[0]} (ignored by loaders)",
                      severity="info", evidence={"ignored": harmless[:20]})


@check("WGT003", category="weights", severity="error", needs=("config", "weights"),
       hint="Make config.json (hidden_size, intermediate_size, heads, head_dim, vocab_size) match the tensors.")
def tensor_shapes(ctx):
    """Every tensor has the shape config.json implies.

    A shape mismatch means config.json and the weights describe different models (a hand-edited
    `intermediate_size`, a `vocab_size` bumped without resizing the embedding, a wrong head_dim).
    transformers raises "size mismatch for ..." — or, with `ignore_mismatched_sizes`, silently
    re-initialises the tensor.

    Remedy: take the numbers from the tensors (they are what was trained) and correct config.json.
    """
    _need_table(ctx.config)
    expected, weights = expected_tensors(ctx.config, ctx.weights.names), ctx.weights
    wrong = [(n, shape, weights.info(n).shape) for n, shape in expected.items()
             if n in weights and tuple(weights.info(n).shape) != shape]
    for name, want, got in wrong[:10]:
        yield Problem(f"{name} has shape {list(got)}, config implies {list(want)}",
                      evidence={"tensor": name, "shape": list(got), "expected": list(want)},
                      location=_shape_location(ctx.config, name, want, got))
    if len(wrong) > 10:
        yield Problem(f"{len(wrong) - 10} more tensors with unexpected shapes", evidence={"count": len(wrong)})


@check("WGT004", category="weights", severity="error", needs=("config", "weights"),
       hint="Save all weights in one float dtype and set config.json torch_dtype to it.")
def tensor_dtypes(ctx):
    """Weights share one float dtype and it matches config.json's torch_dtype.

    A checkpoint with mixed dtypes (one layer float32 among bfloat16) comes from a partial conversion;
    engines cast everything to one dtype, so it loads, but the stored precision differs per layer and
    the file is bigger than needed. A `torch_dtype` that disagrees with the stored dtype makes
    `torch_dtype="auto"` pick a different dtype than the weights (e.g. a float16 label on bfloat16
    weights risks overflow, vllm#14126). Integer tensors without a quantization config cannot be used
    at all (error).

    Remedy: convert the stray tensors, and set torch_dtype to the stored dtype.
    """
    weights = ctx.weights
    counts: dict[str, int] = {}
    for name in stored_float_names(weights):
        counts[weights.info(name).dtype] = counts.get(weights.info(name).dtype, 0) + 1
    ev = {"dtypes": counts}
    non_float = sorted(d for d in counts if d not in FLOAT_DTYPES)
    if non_float and not ctx.raw_config.get("quantization_config"):
        yield Problem(f"non-float tensors ({', '.join(non_float)}) without a quantization_config", evidence=ev,
                      severity="error")
    floats = {d: c for d, c in counts.items() if d in FLOAT_DTYPES}
    if len(floats) > 1:
        main = max(floats, key=floats.get)
        odd = sorted(n for n in stored_float_names(weights)
                     if weights.info(n).dtype in floats and weights.info(n).dtype != main)
        yield Problem(f"mixed float dtypes {floats}: {len(odd)} tensor(s) not {main}, e.g. {odd[0]}",
                      evidence={**ev, "odd": odd[:10]}, severity="warning", location=tensor(odd[0]))
    declared = ctx.config.torch_dtype
    if declared and len(floats) == 1 and FLOAT_DTYPES[next(iter(floats))] != declared:
        yield Problem(f"config torch_dtype is {declared} but the weights are stored as "
                      f"{FLOAT_DTYPES[next(iter(floats))]}", evidence={**ev, "torch_dtype": declared},
                      severity="warning", location=config_key("torch_dtype"))


def stored_float_names(weights) -> list[str]:
    """The tensors stored as they are: a quantized table's dequantized weights (float32 by construction) and
    its scales (float32 beside bfloat16 weights by design) say nothing about the checkpoint's float dtype."""
    from reference_engine.files.quant.module import quant_side
    is_quantized = getattr(weights, "is_quantized", None)
    if is_quantized is None:
        return list(weights.names)
    return [n for n in weights.names if not is_quantized(n) and not quant_side(n)]


@check("WGT005", category="weights", severity="error", needs=("weights",),
       hint="The checkpoint is corrupted (failed training step, bad merge or conversion): restore an earlier one.")
def nonfinite_weights(ctx):
    """No NaN or Inf in any tensor (every value is read once, streamed).

    A single NaN in one weight propagates to every token after the layer that holds it: logits turn NaN,
    argmax returns id 0 and the model prints "!!!!" (vllm#14126, onnxruntime-genai PR#2444). They come
    from a diverged fine-tuning step saved to disk, fp16 overflow during a merge or conversion, or
    damaged files.

    Remedy: go back to the last good checkpoint; re-run the conversion in float32.
    """
    bad = [s for s in weight_scan(ctx).tensors.values() if s.nonfinite]
    for s in bad[:10]:
        yield Problem(f"{s.name} holds {s.nan} NaN and {s.inf} Inf value(s)",
                      evidence={"tensor": s.name, "nan": s.nan, "inf": s.inf, "numel": s.numel})
    if len(bad) > 10:
        yield Problem(f"{len(bad) - 10} more tensors with NaN/Inf", evidence={"count": len(bad)})


@check("WGT006", category="weights", severity="error", needs=("weights",),
       hint="A zeroed weight means a failed save or merge: restore the tensor from the original checkpoint.")
def all_zero_tensors(ctx):
    """No weight matrix or norm vector is all zeros (biases may be: `.bias`, and gpt-oss's experts'
    `gate_up_proj_bias`/`down_proj_bias`, which transformers initialises to zeros).

    An all-zero projection removes its layer's contribution; an all-zero RMSNorm weight zeroes the
    whole residual branch; an all-zero embedding or lm_head makes every token identical. They appear
    when a sharded save drops a tensor's data, a merge script writes placeholders, or a LoRA merge
    subtracts the base weights. Zero-centred norms (Gemma, Qwen3-Next: `(1 + w) * norm(x)`) store the gain
    as an offset from 1: all zeros there is a gain of one (a model saved at its initialisation), and the
    fault is the offset -1 everywhere, a gain of zero.

    Remedy: restore the tensor from the source checkpoint.
    """
    offsets = offset_norm_names(ctx)
    # keyed by the table's names (a multimodal wrapper's decoder under causal-LM names, as offset_norms gives
    # them); s.name is the name stored in the file, what the message shows
    for name, s in weight_scan(ctx).tensors.items():
        if not s.numel or s.nonfinite or s.name.endswith((".bias", "_bias")):
            continue
        if name not in offsets and s.amax == 0.0:
            yield Problem(f"{s.name} is all zeros ({s.numel} values)", evidence={"tensor": s.name, "numel": s.numel})
        elif name in offsets and s.amax == 1.0 and s.sumsq == s.numel and no_gain(ctx.weights.get(name)):
            yield Problem(f"{s.name} is -1 everywhere: this family's norm multiplies by (1 + w), a gain of zero "
                          f"({s.numel} values)", evidence={"tensor": s.name, "numel": s.numel, "offset_norm": True})


def no_gain(offset) -> bool:
    """An offset norm of -1 everywhere: (1 + w) is zero (the scan's amax 1 and mean square 1 say |w| = 1)."""
    return bool((offset == -1).all())


# a multimodal wrapper's own norms outside its text decoder that multiply by (1 + w), by name suffix: Gemma 3's
# projector norm is a Gemma3RMSNorm, initialised to zeros like the decoder's
WRAPPER_OFFSET_NORMS = {"Gemma3ForConditionalGeneration": "multi_modal_projector.mm_soft_emb_norm.weight"}


def offset_norm_names(ctx) -> frozenset[str]:
    """The norm tensors stored as offsets from 1 (families.offset_norms, and a wrapper's own: WRAPPER_OFFSET_NORMS);
    none when the config cannot be read (CFG001 says why) or no family runs it."""
    from checks.catalogue.inputs import ResourceError
    from reference_engine.core.families import offset_norms
    try:
        names = offset_norms(ctx.config)
        suffix = WRAPPER_OFFSET_NORMS.get(ctx.config.wrapper or "")
        return names | {n for n in ctx.weights.names if n.endswith(suffix)} if suffix else names
    except (ResourceError, ModelDirError):
        return frozenset()


@check("WGT007", category="weights", severity="warning", needs=("weights",),
       hint="Compare the named tensor with the original checkpoint; a scale error usually comes from a bad "
            "merge or a wrong dequantization scale.")
def layer_scale_outliers(ctx):
    """No layer's weight matrix is far out of scale with the same matrix in the other layers.

    The same projection (say `mlp.down_proj`) has a similar RMS in every layer of a trained model;
    one layer 50x larger or smaller than the median points to a broken merge (weights added twice, a
    LoRA scale applied wrongly), a bad dequantization scale, or a tensor copied from another model.
    Such a layer saturates activations (fp16 overflow, vllm#14126) or switches itself off.

    Remedy: restore the tensor; the ratio to the median in the evidence shows how far off it is.
    """
    ratio = ctx.threshold("WGT007", "rms_ratio", 50.0)
    groups: dict[str, list] = {}
    for s in weight_scan(ctx).tensors.values():
        if s.numel > 1 and ".layers." in s.name and s.name.endswith(".weight") and not s.nonfinite:
            groups.setdefault(role_of(s.name), []).append(s)
    for role, members in groups.items():
        if len(members) < 3:
            continue
        median = statistics.median(m.rms for m in members)
        for m in members:
            if median > 0 and (m.rms > ratio * median or m.rms * ratio < median):
                yield Problem(f"{m.name} RMS {m.rms:.3g} is {m.rms / median:.3g}x the median {median:.3g} of "
                              f"{role}", evidence={"tensor": m.name, "rms": m.rms, "median_rms": median,
                                                   "ratio": m.rms / median})


@check("WGT008", category="weights", severity="warning", needs=("weights",),
       hint="Run this model in bfloat16 or float32, not float16.")
def float16_range(ctx):
    """No weight exceeds float16's range (65504), so a float16 cast does not create Inf.

    Many engines and GPUs without bfloat16 load weights as float16. A weight above 65504 becomes Inf,
    the next matmul NaN, and the output "!!!!" (vllm#14126, olmo-cookbook#60).

    Remedy: serve in bfloat16/float32, or rescale the offending tensor together with the norm before it.
    """
    big = [s for s in weight_scan(ctx).tensors.values() if s.amax > FLOAT16_MAX]
    for s in big[:10]:
        yield Problem(f"{s.name} has |w| up to {s.amax:.4g}, beyond float16's 65504",
                      evidence={"tensor": s.name, "amax": s.amax})


@check("WGT009", category="weights", severity="error", needs=("config", "weights"),
       hint="Set tie_word_embeddings to false when the stored lm_head is the trained head (or drop the stored "
            "copy when the model was trained tied).")
def tied_flag_with_own_head(ctx):
    """A checkpoint marked tie_word_embeddings stores no lm_head of its own that differs from the embedding.

    With tie_word_embeddings true, transformers, vLLM and llama.cpp's converter take the output head from the
    input embedding and ignore any stored lm_head.weight. When that stored head is not a copy of the embedding,
    the model was trained (or fine-tuned) untied and the flag throws its head away: fluent-looking wrong tokens
    from the first step. The opposite flag without a head (a random head, vllm#53019) is WGT001's.
    """
    cfg, weights = ctx.config, ctx.weights
    if not cfg.tie_word_embeddings:
        raise Skip("tie_word_embeddings is false: the stored head is the one used")
    from checks.shared.weights.tensor_layout import embed_name, lm_head_name
    head, embed = lm_head_name(weights), embed_name(weights)
    if head is None or embed is None:
        return
    a, b = weights.get(embed), weights.get(head)
    if a.shape != b.shape:
        yield Problem(f"tie_word_embeddings is true but {head} {tuple(b.shape)} is not the embedding's shape "
                      f"{tuple(a.shape)}: the stored head is ignored", evidence={"lm_head": head, "embed": embed},
                      location=config_key("tie_word_embeddings"))
        return
    rows, largest = _rows_differing(a, b)
    if rows:
        yield Problem(f"tie_word_embeddings is true but {head} differs from {embed} in {rows} of {a.shape[0]} "
                      f"rows (max |diff| {largest:.3g}): loaders tie the head to the embedding "
                      "and ignore the stored one", location=config_key("tie_word_embeddings"),
                      evidence={"lm_head": head, "embed": embed, "rows_differing": rows, "rows": int(a.shape[0])})


def _rows_differing(a, b, block: int = 4096) -> tuple[int, float]:
    """(rows of a and b that differ, the largest difference), a block of rows in float32 at a time: a vocabulary
    of 256k rows is never copied whole."""
    rows, largest = 0, 0.0
    for start in range(0, a.shape[0], block):
        x, y = a[start:start + block].float(), b[start:start + block].float()
        rows += int((x != y).any(dim=-1).sum())
        largest = max(largest, float((x - y).abs().max()) if x.numel() else 0.0)
    return rows, largest
