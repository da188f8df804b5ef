"""Embedding checks (EMB): the input-embedding and lm_head rows of special and added tokens are trained (or said
to be mean-initialised, not trained yet), and no row is far out of scale. Untrained special-token rows give NaN
losses when fine-tuning on a chat template. Row statistics come from the streamed weight scan; only the few
special-token rows are read individually."""
from __future__ import annotations

from checks.shared.chat.conversations import NO_SYSTEM, USER_ONLY, WITH_SYSTEM
from checks.catalogue.registry import Problem, Skip, check
from reference_engine.errors import ModelDirError
from checks.vocab.special_rows import LOW_NORM_RATIO, NEAR_ZERO_RATIO, MatrixVerdicts, classify, read_rows, row_key
from checks.shared.weights.tensor_layout import embed_name, lm_head_name
from checks.shared.weights.tensor_scan import weight_scan


def special_token_ids(tok) -> list[int]:
    """Ids of the named special tokens and of every added token (where untrained rows live)."""
    return sorted(set(tok.all_special_ids) | {t.id for t in tok.added_tokens})


def row_verdicts(ctx) -> list[MatrixVerdicts]:
    """Verdicts for the special rows of the embedding and (untied) lm_head, cached in ctx.state."""
    if "special_rows" in ctx.state:
        return ctx.state["special_rows"]
    weights, scan = ctx.weights, weight_scan(ctx)
    embed, head = embed_name(weights), lm_head_name(weights)      # by role: any decoder's names
    names = [n for n in (embed, None if ctx.config.tie_word_embeddings else head) if n is not None]
    ids = special_token_ids(ctx.tokenizer)
    near = ctx.threshold("EMB001", "near_zero_ratio", NEAR_ZERO_RATIO)
    low = ctx.threshold("EMB002", "low_norm_ratio", LOW_NORM_RATIO)
    out = []
    for name in names:
        if name not in scan.rows:
            continue  # missing or not 2-D: WGT001/WGT003 report it
        stats = scan.rows[name]
        in_range = [i for i in ids if i < stats.norms.numel()]
        if getattr(weights, "dequantizes", False):   # GGUF, quantized, adapted: only these rows, computed
            from reference_engine.readers.chunked import chunked_reader
            reader = chunked_reader(weights, getattr(weights, "gguf", None) is not None)
            values = {i: reader.rows(name, i, i + 1)[0].float() for i in in_range}
        else:
            info = weights.info(name)       # info.name: the name in the file (a multimodal view renames)
            values = read_rows(info.file, info.name, in_range)
        out.append(classify(name, stats.norms, stats.amax, stats.row_sum, values, near, low))
    ctx.state["special_rows"] = out
    return out


def _verdicts_or_skip(ctx) -> list[MatrixVerdicts]:
    if not special_token_ids(ctx.tokenizer):
        raise Skip("the tokenizer has no special or added tokens")
    return row_verdicts(ctx)


def _label(ctx, token_id: int) -> str:
    return f"{token_id} {ctx.tokenizer.id_to_token(token_id)!r}"


@check("EMB001", category="embeddings", severity="warning", needs=("config", "tokenizer", "weights"),
       hint="Initialise the rows before fine-tuning: `llmdoctor fix MODEL -o NEW --untrained-embeddings` "
            "(sets them to the mean of the trained rows, as unsloth's fix_untrained_tokens does).")
def zero_special_rows(ctx):
    """No special/added token has an all-zero or near-zero row in the embedding or lm_head.

    Base models ship special tokens they never saw in training; with weight decay their rows shrink to
    zero. Llama-3 base has zero rows for its reserved and chat tokens (meta-llama/llama3#77); fine-tuning
    a chat template onto it gives NaN losses/gradients (unsloth#658, #1056, axolotl#1666,
    torchtune#2429). A zero lm_head row pins that token's logit at 0 whatever the input. Rows with
    max |w| == 0 or below NEAR_ZERO_RATIO x the median row's max |w| are flagged (threshold
    `near_zero_ratio`).

    Remedy: set them to the mean of the trained rows before training (`llmdoctor fix --untrained-embeddings`).
    """
    for m in _verdicts_or_skip(ctx):
        bad = m.of_kind("zero", "near_zero")
        if bad:
            yield Problem(f"{m.name}: {len(bad)} special-token row(s) are zero or near zero, e.g. "
                          f"{_label(ctx, bad[0].id)} (max |w| {bad[0].amax:.3g}, median row {m.median_amax:.3g})",
                          evidence={"tensor": m.name, "ids": [v.id for v in bad][:32], "count": len(bad),
                                    "median_row_amax": m.median_amax})


@check("EMB002", category="embeddings", severity="warning", needs=("config", "tokenizer", "weights"),
       hint="Treat these tokens as untrained: `llmdoctor fix MODEL -o NEW --untrained-embeddings`, then "
            "fine-tune with the embeddings trainable.")
def untrained_special_rows(ctx):
    """No special/added token row has a norm far below the trained rows' distribution.

    A row that training never touched keeps a small initialisation or decays towards zero without
    reaching it; its norm sits far below the typical row (the statistical side of llama3#77 and
    unsloth#1056). The model has not learned what these tokens mean: a template that uses them gives
    near-random behaviour at those positions. Flagged below LOW_NORM_RATIO x the median row norm
    (threshold `low_norm_ratio`).

    Remedy: initialise from the trained rows (`llmdoctor fix --untrained-embeddings`) and train them.
    """
    for m in _verdicts_or_skip(ctx):
        low = m.of_kind("low_norm")
        if low:
            yield Problem(f"{m.name}: {len(low)} special-token row(s) have norms far below the median "
                          f"{m.median_norm:.3g}, e.g. {_label(ctx, low[0].id)} (norm {low[0].norm:.3g})",
                          evidence={"tensor": m.name, "ids": [v.id for v in low][:32], "count": len(low),
                                    "norms": [v.norm for v in low][:32], "median_norm": m.median_norm})


def tokens_in_use(ctx) -> set[int]:
    """Special ids every chat or generation touches: bos/eos/pad and the special tokens the chat template writes."""
    tok = ctx.tokenizer
    used = {i for i in (tok.bos_token_id, tok.eos_token_id, tok.pad_token_id) if i is not None}
    if tok.chat_template:
        for messages in (WITH_SYSTEM, NO_SYSTEM, USER_ONLY):
            try:
                used |= set(tok.apply_chat_template(messages, add_generation_prompt=True, tokenize=True))
                break
            except ModelDirError:
                continue
    return used & set(special_token_ids(tok))


@check("EMB003", category="embeddings", severity="warning", needs=("config", "tokenizer", "weights"),
       hint="Rows copied from one vector were never trained: initialise them (llmdoctor fix) and fine-tune "
            "before relying on these tokens.")
def identical_special_rows(ctx):
    """No two special/added tokens that the model actually uses share an identical embedding or lm_head row.

    Trained rows are never bit-identical; identical rows mean several tokens were initialised from one
    vector (resize_token_embeddings with a constant, a converter writing placeholders) and never
    trained, so the model cannot tell them apart (axolotl#1666, torchtune#2429). It is a warning when
    one of them is bos/eos/pad or written by the chat template; for special tokens nothing uses
    (SmolLM2's code-metadata tokens, Llama-3's reserved tokens) it is info: harmless until someone
    starts using them. Rows equal to the mean of the trained rows are EMB005's, zero rows EMB001's.

    Remedy: train the tokens before use; `llmdoctor fix --untrained-embeddings` gives them a safe start.
    """
    matrices = _verdicts_or_skip(ctx)
    used = tokens_in_use(ctx)
    for m in matrices:
        groups: dict[bytes, list[int]] = {}
        for i, row in m.values.items():
            if m.verdicts[i].kind not in ("zero", "mean_init"):
                groups.setdefault(row_key(row), []).append(i)
        for ids in (g for g in groups.values() if len(g) > 1):
            in_use = sorted(set(ids) & used)
            usage = f", {len(in_use)} of them used by the chat template/generation" if in_use else ", none in use"
            yield Problem(f"{m.name}: {len(ids)} special-token rows are identical, set to one vector{usage}: "
                          f"{', '.join(_label(ctx, i) for i in ids[:4])}",
                          evidence={"tensor": m.name, "ids": ids[:32], "count": len(ids), "in_use": in_use},
                          severity="warning" if in_use else "info")


@check("EMB005", category="embeddings", severity="warning", needs=("config", "tokenizer", "weights"),
       hint="These rows are a starting point, not trained vectors: fine-tune with the embeddings (and lm_head) "
            "trainable on data that uses these tokens before relying on them.")
def mean_initialised_rows(ctx):
    """Special/added token rows equal to the mean of the trained rows are reported as not trained yet.

    Setting untrained rows to the mean of the trained rows (`llmdoctor fix --untrained-embeddings`, unsloth's
    fix_untrained_tokens, transformers' mean_resizing) removes the zero rows that give NaN losses, but the
    model has still learnt nothing about those tokens: every one of them looks like "an average token". Rows
    whose direction (cosine >= 0.999) and norm (within 2%) match the mean of the trained rows are listed with
    their ids. A warning when bos/eos/pad or the chat template uses one of them (the model will meet them in
    every conversation), info for special tokens nothing uses.

    Remedy: fine-tune with trainable embeddings on data that uses these tokens; until then, do not rely on them.
    """
    used = tokens_in_use(ctx)
    for m in _verdicts_or_skip(ctx):
        ids = sorted(v.id for v in m.of_kind("mean_init"))
        if not ids:
            continue
        in_use = sorted(set(ids) & used)
        usage = f"{len(in_use)} of them used by the chat template/generation" if in_use else "none in use"
        yield Problem(f"{m.name}: {len(ids)} special-token row(s) are mean-initialised (equal to the mean of the "
                      f"trained rows, no trained meaning yet; {usage}): "
                      f"{', '.join(_label(ctx, i) for i in ids[:4])}{', ...' if len(ids) > 4 else ''}",
                      evidence={"tensor": m.name, "ids": ids[:64], "count": len(ids), "in_use": in_use},
                      severity="warning" if in_use else "info")


@check("EMB004", category="embeddings", severity="warning", needs=("config", "weights"),
       hint="Compare the row with the original checkpoint; a huge row usually comes from a bad merge or a "
            "wrong dequantization scale.")
def row_norm_outliers(ctx):
    """No embedding or lm_head row has a norm far above the median row (threshold `norm_ratio`, default 25x).

    Row norms of a trained embedding spread over a factor of a few; one row 25x the median dominates
    every residual stream it enters (fp16 overflow, vllm#14126) or wins every argmax as an output row
    (the model repeats one token). It comes from a merge that added a delta twice, a dequantization
    with a wrong scale, or a hand edit.

    Remedy: restore the row from the source checkpoint.
    """
    ratio = ctx.threshold("EMB004", "norm_ratio", 25.0)
    scan = weight_scan(ctx)
    for name in (embed_name(ctx.weights), lm_head_name(ctx.weights)):
        stats = scan.rows.get(name)
        if stats is None or stats.norms.numel() < 8:
            continue
        median = float(stats.norms.median())
        big = (stats.norms > ratio * median).nonzero().flatten().tolist()
        if median > 0 and big:
            worst = max(big, key=lambda i: float(stats.norms[i]))
            yield Problem(f"{name}: {len(big)} row(s) with norm > {ratio:g}x the median {median:.3g}, e.g. "
                          f"row {worst} (norm {float(stats.norms[worst]):.3g})",
                          evidence={"tensor": name, "rows": big[:32], "count": len(big), "median_norm": median})
