"""GGUF checks (GGF), part 2: tensors and the {arch}.* model metadata — rope scaling, the quantization census,
general.file_type, context length, vocabulary size vs embedding rows, a hybrid's layer kinds."""
from __future__ import annotations

import os
from collections import Counter

from checks.gguf.metadata import _gguf_or_skip
from checks.catalogue.registry import Problem, Skip, check
from reference_engine.files.gguf_arch import ARCHS, layer_kinds

LLAMA3_THETA = 500000.0
LLAMA3_TRAINED_CONTEXT = 8192
# general.file_type names whose main tensor type is not the name minus its _S/_M/_L/_XS size suffix
FILE_TYPE_MAIN = {"ALL_F32": "F32", "MOSTLY_F16": "F16", "MOSTLY_BF16": "BF16", "MOSTLY_IQ3_XS": "IQ3_S",
                  "MOSTLY_IQ3_M": "IQ3_S", "MOSTLY_IQ2_M": "IQ2_S", "MOSTLY_Q2_K_S": "Q2_K"}


def _arch_key(gguf, key: str):
    return gguf.get(f"{gguf.get('general.architecture')}.{key}")


def _head_dim(gguf) -> int | None:
    explicit = _arch_key(gguf, "attention.key_length")
    hidden, heads = _arch_key(gguf, "embedding_length"), _arch_key(gguf, "attention.head_count")
    if isinstance(explicit, int):
        return explicit
    if isinstance(hidden, int) and isinstance(heads, int) and heads > 0:
        return hidden // heads
    return None


@check("GGF007", category="config", severity="error", needs=("gguf",),
       hint="Re-convert with a convert_hf_to_gguf.py that writes rope_freqs.weight (Llama 3.1+), or set "
            "{arch}.rope.scaling.* to the original config's rope_scaling.")
def gguf_rope_scaling_present(ctx):
    """Long-context rope scaling survived the conversion (rope_freqs for Llama-3.1-style scaling).

    Llama 3.1+ extends Llama 3's 8k context with per-frequency rope factors; GGUF stores them as the
    rope_freqs.weight tensor (one per rotary pair: rope.dimension_count / 2), not as metadata. A file converted
    without it (llama.cpp #8650) runs with unscaled rope: fine on short prompts, degraded past 8k tokens. A
    Llama-3-style model (rope theta 500000) that claims more than 8k context with neither rope_freqs nor
    rope.scaling.* is flagged, and so is a rope_freqs tensor of the wrong length.
    """
    gguf = _gguf_or_skip(ctx)
    freqs = gguf.tensors.get("rope_freqs.weight")
    head_dim = _head_dim(gguf)
    rotary = _arch_key(gguf, "rope.dimension_count")          # llama.cpp's n_rot: the rotary width
    rotary = rotary if isinstance(rotary, int) and rotary > 0 else head_dim
    if freqs is not None and rotary and freqs.numel != rotary // 2:
        yield Problem(f"rope_freqs.weight has {freqs.numel} values; a rotary width of {rotary} needs {rotary // 2}",
                      evidence={"rope_freqs": freqs.numel, "head_dim": head_dim, "rotary_dim": rotary})
    theta, context = _arch_key(gguf, "rope.freq_base"), _arch_key(gguf, "context_length")
    scaled = isinstance(_arch_key(gguf, "rope.scaling.type"), str) and _arch_key(gguf, "rope.scaling.type") != "none"
    if (gguf.get("general.architecture") == "llama" and theta == LLAMA3_THETA and isinstance(context, int)
            and context > LLAMA3_TRAINED_CONTEXT and freqs is None and not scaled):
        yield Problem(f"a Llama-3-style model (rope theta {theta:g}) claims {context} tokens of context but has "
                      f"no rope_freqs.weight and no rope.scaling.*: prompts past {LLAMA3_TRAINED_CONTEXT} tokens "
                      f"degrade", evidence={"context_length": context, "rope_freq_base": theta})


@check("GGF008", category="weights", severity="error", needs=("gguf",),
       hint="Re-quantize from the original weights; a NaN or all-zero block means the source or the quantizer "
            "failed for that tensor.")
def gguf_quantization_census(ctx):
    """Every tensor dequantizes to finite values, without runs of all-zero quantization blocks.

    Each tensor is read and dequantized a block of rows at a time (gguf's kernels, at most 4M values held,
    whatever the tensor's size) and its quantization blocks inspected: NaN/Inf (a broken scale, an
    overflowed F16) is an error; a weight matrix with more than `zero_block_fraction` of its blocks entirely
    zero (a quantizer that lost a row range, a zero scale) is a warning. The evidence carries the census:
    tensors and bytes per quantization type.
    """
    gguf = _gguf_or_skip(ctx)
    limit = ctx.threshold("GGF008", "zero_block_fraction", 0.01)
    census: Counter = Counter()
    nbytes: Counter = Counter()
    for t in gguf.tensors.values():
        census[t.type_name] += 1
        nbytes[t.type_name] += t.nbytes
    bad, zero = [], []
    for t in gguf.tensors.values():
        nonfinite, zero_fraction = _inspect_blocks(gguf, t)
        if nonfinite:
            bad.append((t.name, t.type_name, nonfinite))
        if zero_fraction is not None and zero_fraction > limit:
            zero.append((t.name, t.type_name, round(zero_fraction, 4)))
    evidence = {"census": dict(census), "bytes": dict(nbytes)}
    for name, kind, count in bad[:5]:
        yield Problem(f"{name} ({kind}) dequantizes to {count} NaN/Inf values", evidence={**evidence, "tensor": name})
    for name, kind, fraction in zero[:5]:
        yield Problem(f"{name} ({kind}): {fraction:.1%} of its quantization blocks are all zero",
                      evidence={**evidence, "tensor": name, "zero_block_fraction": fraction}, severity="warning")
    if not bad and not zero:
        summary = ", ".join(f"{k} x{v} ({nbytes[k] / 2 ** 20:.1f} MiB)" for k, v in census.most_common())
        yield Problem(f"quantization census: {summary}; every tensor dequantizes to finite values",
                      evidence=evidence, severity="info")


def _inspect_blocks(gguf, t) -> tuple[int, float | None]:
    """(NaN/Inf count, share of all-zero quantization blocks or None where not judged) of one tensor, read a
    block of rows at a time."""
    from reference_engine.readers.gguf_reader import row_blocks
    from reference_engine.files.gguf_file import ggml_types
    block = ggml_types()[t.ggml_type][1]
    judge_zero = block > 1 and len(t.dims) == 2 and t.name not in ("token_embd.weight", "output.weight")
    nonfinite, zero_blocks, blocks = 0, 0, 0
    fd = os.open(gguf.path, os.O_RDONLY)
    try:
        for _, values in row_blocks(fd, gguf.path, t):                   # [rows, dims[0]]
            if not values.is_floating_point():
                return 0, None
            nonfinite += int((~values.isfinite()).sum())
            if judge_zero:
                quant = values.reshape(-1, block)                         # [n_blocks, block]: rows are whole blocks
                zero_blocks += int((quant == 0).all(dim=1).sum())
                blocks += quant.shape[0]
    finally:
        os.close(fd)
    return nonfinite, (zero_blocks / blocks if judge_zero and blocks else None)


@check("GGF009", category="files", severity="warning", needs=("gguf",),
       hint="Re-quantize, or correct general.file_type; tools size and label the file by it.")
def gguf_file_type_matches(ctx):
    """general.file_type matches the types the block weights actually have.

    general.file_type is what Ollama, LM Studio and Hugging Face show as the quantization ("Q4_K_M"). A
    file whose block weight matrices contain no tensor of that type was relabelled or half-requantized:
    its size, speed and quality are not what its name says. Stacked expert weights ([experts, rows, cols],
    `blk.N.ffn_*_exps.weight`) count as block weights: MOSTLY_MXFP4_MOE (gpt-oss) quantizes only those.
    """
    gguf = _gguf_or_skip(ctx)
    from gguf import LlamaFileType
    value = gguf.get("general.file_type")
    if not isinstance(value, int):
        raise Skip("no general.file_type")
    try:
        name = LlamaFileType(value).name
    except ValueError:
        yield Problem(f"general.file_type = {value} is not a llama.cpp file type", evidence={"file_type": value})
        return
    if name == "GUESSED":
        raise Skip("general.file_type is GUESSED")
    main = FILE_TYPE_MAIN.get(name) or name.removeprefix("MOSTLY_")
    from reference_engine.files.gguf_file import ggml_types
    known = {v[0] for v in ggml_types().values()}
    if main not in known:
        main = main.rsplit("_", 1)[0]
    weights = Counter(t.type_name for t in gguf.tensors.values()
                      if t.name.startswith("blk.") and t.name.endswith(".weight") and len(t.dims) in (2, 3))
    if weights and main not in weights:
        yield Problem(f"general.file_type says {name} but no block weight is {main} "
                      f"(found {', '.join(f'{k} x{v}' for k, v in weights.most_common(3))})",
                      evidence={"file_type": name, "expected_type": main, "block_weight_types": dict(weights)})


@check("GGF010", category="config", severity="warning", needs=("gguf",),
       hint="Make context_length, rope.dimension_count and rope.scaling.* agree with the original config.json.")
def gguf_context_vs_rope(ctx):
    """context_length, rope dimensions and rope scaling agree.

    rope.dimension_count smaller than the head dimension makes llama.cpp rotate only part of each head (a
    partial-rotary model; Llama/Qwen are not; architectures whose rope width is by design another, MLA's
    decoupled rope dims or GLM-4.5's partial rotary, are let be: gguf_arch.GGUFArch.partial_rotary). With
    linear/YaRN scaling, a context_length beyond original_context_length x factor is a length the model was
    never extended to. A missing context_length
    leaves runtimes to guess.
    """
    gguf = _gguf_or_skip(ctx)
    head_dim, dims = _head_dim(gguf), _arch_key(gguf, "rope.dimension_count")
    context = _arch_key(gguf, "context_length")
    if not isinstance(context, int):
        yield Problem("no {arch}.context_length: runtimes guess the context window", evidence={})
    arch = ARCHS.get(gguf.get("general.architecture"))
    if isinstance(dims, int) and head_dim and dims != head_dim and not (arch and arch.partial_rotary):
        yield Problem(f"rope.dimension_count = {dims} but the head dimension is {head_dim}: llama.cpp rotates "
                      f"only {dims} of {head_dim} dims per head", evidence={"rope_dims": dims, "head_dim": head_dim})
    kind, factor = _arch_key(gguf, "rope.scaling.type"), _arch_key(gguf, "rope.scaling.factor")
    original = _arch_key(gguf, "rope.scaling.original_context_length")
    if isinstance(kind, str) and kind != "none" and isinstance(factor, (int, float)) and isinstance(original, int) \
            and isinstance(context, int) and context > original * factor * 1.001:
        yield Problem(f"context_length {context} exceeds {kind} rope scaling's reach "
                      f"({original} x {factor:g} = {original * factor:g})",
                      evidence={"context_length": context, "original": original, "factor": factor, "type": kind})


@check("GGF011", category="vocab", severity="error", needs=("gguf",),
       hint="Re-convert: the token list, {arch}.vocab_size and the embedding rows must agree.")
def gguf_vocab_vs_embedding(ctx):
    """The token list, {arch}.vocab_size and token_embd/output rows agree.

    A token id at or beyond the embedding's row count reads past the matrix (a crash or garbage in llama.cpp);
    an embedding with more rows than tokens means the converter padded the matrix but not the vocabulary,
    or the tokenizer of another model was attached.
    """
    gguf = _gguf_or_skip(ctx)
    tokens, embed = gguf.get("tokenizer.ggml.tokens"), gguf.tensors.get("token_embd.weight")
    if not isinstance(tokens, list) or embed is None:
        raise Skip("no token list or no token_embd.weight")
    rows = embed.shape[0]
    declared = _arch_key(gguf, "vocab_size")
    evidence = {"tokens": len(tokens), "embedding_rows": rows, "vocab_size": declared}
    if len(tokens) > rows:
        yield Problem(f"{len(tokens)} tokens but token_embd.weight has {rows} rows: ids {rows}.. have no embedding",
                      evidence=evidence)
    elif len(tokens) < rows:
        yield Problem(f"token_embd.weight has {rows} rows for {len(tokens)} tokens", evidence=evidence,
                      severity="warning")
    output = gguf.tensors.get("output.weight")
    if output is not None and output.shape[0] != rows:
        yield Problem(f"output.weight has {output.shape[0]} rows, token_embd.weight {rows}", evidence=evidence)
    if isinstance(declared, int) and declared != len(tokens):
        yield Problem(f"{{arch}}.vocab_size = {declared} but the token list has {len(tokens)} entries",
                      evidence=evidence, severity="warning")


@check("GGF035", category="config", severity="error", needs=("gguf",),
       hint="Re-convert from a config.json whose layer_types name the attention layers as the converter expects "
            "(Granite 4: \"mamba\" / \"attention\", not transformers 5's \"full_attention\"; CFG043).")
def gguf_hybrid_layer_kinds(ctx):
    """A hybrid's layer kinds (head_count_kv per layer, 0 = recurrent) are the tensors' kinds.

    llama.cpp takes a layer with head_count_kv 0 for a recurrent layer (Mamba2, short conv) and asks it for
    recurrent tensors. The pinned convert_hf_to_gguf.py finds Granite 4's attention layers only where layer_types
    says "attention"; a config re-saved by transformers 5 ("full_attention") converts with head_count_kv 0 on
    every layer, its attention tensors beside: llama.cpp refuses the file. The reference engine reads such
    layers as the attention layers their tensors are (KV heads from attn_k), so the other checks still run; a
    layer counted attention that holds no attention tensors is refused in one line.
    """
    gguf = _gguf_or_skip(ctx)
    arch = ARCHS.get(gguf.get("general.architecture"))
    if arch is None or arch.per_layer is None:
        raise Skip("not a hybrid architecture (per-layer head_count_kv)")
    kinds = layer_kinds(gguf, arch)
    if kinds is not None and kinds.problem:
        yield Problem(kinds.problem, evidence={"head_count_kv": _arch_key(gguf, "attention.head_count_kv"),
                                               "read_as": kinds.head_count_kv if kinds.readable else None})
