"""LoRA adapter vocabulary checks (LRA): an adapter that added tokens must carry the rows for them.

Fine-tuning with new tokens resizes embed_tokens and lm_head; peft saves the resized matrices only when they
are in modules_to_save, targeted, or save_embedding_layers guessed right ("auto" compares with the base's
config.json; peft#1457, #2415). The adapter's tokenizer then names ids the base cannot embed."""
from __future__ import annotations

import torch

from checks.catalogue.locations import adapter_key, adapter_tensor
from checks.shared.weights.tensor_layout import EMBED, LM_HEAD
from checks.catalogue.registry import Problem, Skip, check


def adapter_tokenizer(ctx):
    if not (ctx.adapter_dir / "tokenizer.json").is_file():
        raise Skip("the adapter ships no tokenizer: it uses the base's")
    return ctx.tokenizer


@check("LRA009", category="adapter", severity="error", needs=("adapter", "config"),
       hint="Add embed_tokens and lm_head to modules_to_save (or save_embedding_layers=True) and save again.")
def tokenizer_beyond_base_rows(ctx):
    """The adapter's tokenizer has ids beyond the embedding rows, and the adapter carries no resized embeddings.

    The vocabulary was resized for new tokens but the resized matrices were not saved with the adapter: peft
    fails at load with a size mismatch, or (tokens within padding rows) the new tokens embed as untrained
    rows. Each matrix is named with its rows and the tokenizer's largest id."""
    tok, weights, base = adapter_tokenizer(ctx), ctx.weights, ctx.base_weights
    top = tok.max_token_id
    names = [EMBED] + ([] if ctx.config.tie_word_embeddings or LM_HEAD not in base else [LM_HEAD])
    for name in names:
        if name not in weights:
            continue
        rows, carried = weights.info(name).shape[0], name in weights.modules
        if top >= rows:
            module = name[: -len(".weight")]
            where = "and the adapter carries no " + module.rsplit(".", 1)[-1] if not carried else "in the adapter"
            yield Problem(f"the adapter's tokenizer has ids up to {top} but {module} has {rows} rows {where}",
                          evidence={"max_token_id": top, "rows": rows, "tensor": name,
                                    "in_adapter": carried, "base_rows": base.info(name).shape[0]},
                          location=adapter_key("modules_to_save"))


@check("LRA010", category="adapter", severity="warning", needs=("adapter", "config"),
       hint="Train the new tokens' rows (modules_to_save or trainable_token_indices) or drop the tokens.")
def added_rows_untrained(ctx):
    """Added tokens whose embedding or LM-head rows were never trained (still their initial values).

    A token added to the tokenizer gets a freshly initialised row; when the embedding is not trained (not in
    modules_to_save, not in trainable_token_indices) the model sees noise for it, and an untrained LM-head row
    makes it never (or randomly) predicted. Found by comparing each saved row with the base copy peft stored
    beside it (original_module), with zero rows, and with the base rows trainable tokens replace."""
    adapter, weights = ctx.adapter, ctx.weights
    base_rows = ctx.base_weights.info(EMBED).shape[0] if EMBED in ctx.base_weights else 0
    ids = set()
    if (ctx.adapter_dir / "tokenizer.json").is_file():
        ids |= {t.id for t in ctx.tokenizer.added_tokens if t.id >= base_rows or not t.special}
    for name in (EMBED, LM_HEAD):
        module = weights.modules.get(name)
        if module is None:
            continue
        rows = weights.info(name).shape[0]
        new = sorted(i for i in ids | set(range(base_rows, rows)) if i < rows)
        stale = _stale_rows(adapter, module, new, ctx.base_weights)
        if stale:
            key = module.full_copy or module.keys.get("tokens")
            yield Problem(f"{len(stale)} added token row(s) of {module.name} are untrained (ids {stale[:8]})",
                          evidence={"ids": stale[:50], "tensor": key}, location=adapter_tensor(key))
    if not any(m in weights.modules for m in (EMBED, LM_HEAD)) and adapter.config.trainable_token_indices:
        yield Problem("trainable_token_indices is set but no trainable_tokens_delta is stored",
                      location=adapter_key("trainable_token_indices"))


def _stale_rows(adapter, module, new_ids: list[int], base) -> list[int]:
    copy, original, tokens = module.full_copy, module.keys.get("original"), module.keys.get("tokens")
    stale = []
    if copy is not None and new_ids:
        rows = adapter.tensors.get(copy)[new_ids].float()
        stale += [i for i, row in zip(new_ids, rows) if not bool(row.any())]
        if original is not None:
            before = adapter.tensors.get(original)[new_ids].float()
            stale += [i for i, a, b in zip(new_ids, rows, before) if bool(a.any()) and torch.equal(a, b)]
    if tokens is not None:
        from reference_engine.adapter.merge import token_indices
        ids = token_indices(adapter, module)
        delta = adapter.tensors.get(tokens).float()
        if module.weight in base and len(ids) == delta.shape[0]:
            w = base.get(module.weight)
            inside = [(j, i) for j, i in enumerate(ids) if i < w.shape[0]]
            stale += [i for j, i in inside if torch.equal(delta[j], w[i].float())]
    return sorted(set(stale))
