"""Serving notes for a LoRA adapter (LRA): what vLLM and llama.cpp's converter will refuse or ignore.

These are facts about the serving engines, not faults of the adapter. vLLM's (LRA012): a note (info) when a flag
fixes it or when vLLM refuses the adapter with an error (modules_to_save, DoRA, trainable tokens, rank: the user
is told at load time, and merging fixes it); a warning only when vLLM would load it and silently serve the base
model. llama.cpp's converter
(LRA013) is a note (info): the adapter is healthy, the converter has a limit, and the merged model converts
(a warning on every healthy adapter with modules_to_save would teach users to ignore warnings). Each names the
engine and the reason.
"""
from __future__ import annotations

from checks.catalogue.locations import adapter_key
from checks.adapter.scan import EMBEDDING_MODULES
from checks.catalogue.registry import Problem, Skip, check

# vLLM's LoRA layers: the decoder's projections (packed or not) and the embedding/LM head
VLLM_MODULES = {"q_proj", "k_proj", "v_proj", "o_proj", "qkv_proj", "gate_proj", "up_proj", "down_proj",
                "gate_up_proj", "embed_tokens", "lm_head", "dense", "query_key_value", "dense_h_to_4h",
                "dense_4h_to_h", "c_attn", "c_proj", "c_fc", "w1", "w2", "w3", "wqkv", "wo"}
VLLM_DEFAULT_MAX_RANK = 16
VLLM_RANKS = (8, 16, 32, 64, 128, 256, 320, 512)


@check("LRA012", category="adapter", severity="warning", needs=("adapter",),
       hint="For vLLM: drop modules_to_save / DoRA (merge the adapter instead), pass --max-lora-rank.")
def vllm_serving(ctx):
    """vLLM serving: refused (modules_to_save, DoRA, trainable tokens), a flag needed, or the base served silently.

    Refused: modules_to_save, DoRA, trainable tokens. A flag: a rank above --max-lora-rank (default 16).
    Silently the base model: no target module vLLM supports. vLLM loads LoRA weights only into its own LoRA
    layers (vllm#2847: modules_to_save; DoRA is not implemented) and checks the rank against --max-lora-rank;
    an adapter none of whose modules vLLM supports is accepted and serves the base model unchanged (vllm#55193).
    """
    adapter = ctx.adapter
    cfg = adapter.config
    modules = {m.short for m in adapter.lora_modules()}
    if cfg.modules_to_save or any(m.full_copy for m in adapter.modules.values()):
        saved = ", ".join(cfg.modules_to_save) or "saved copies"
        yield Problem(f"vLLM refuses adapters with modules_to_save ({saved}): merge the adapter into the base to "
                      f"serve it", severity="info",
                      evidence={"engine": "vLLM", "modules_to_save": cfg.modules_to_save},
                      location=adapter_key("modules_to_save"))
    if cfg.use_dora:
        yield Problem("vLLM does not support DoRA (use_dora): merge the adapter into the base to serve it",
                      severity="info", evidence={"engine": "vLLM"}, location=adapter_key("use_dora"))
    if cfg.trainable_token_indices:
        yield Problem("vLLM does not load trainable tokens (trainable_token_indices): merge the adapter to serve it",
                      severity="info", evidence={"engine": "vLLM"}, location=adapter_key("trainable_token_indices"))
    rank = max([adapter.rank_in_tensors(m) or 0 for m in adapter.lora_modules()] + [cfg.r])
    if rank > VLLM_RANKS[-1]:
        yield Problem(f"vLLM supports LoRA ranks up to {VLLM_RANKS[-1]}; this adapter has rank {rank}",
                      severity="info", evidence={"engine": "vLLM", "rank": rank}, location=adapter_key("r"))
    elif rank > VLLM_DEFAULT_MAX_RANK:
        need = next(r for r in VLLM_RANKS if r >= rank)
        yield Problem(f"vLLM needs --max-lora-rank {need} for this adapter's rank {rank} (default "
                      f"{VLLM_DEFAULT_MAX_RANK})", severity="info", evidence={"engine": "vLLM", "rank": rank},
                      location=adapter_key("r"))
    unsupported = sorted(modules - VLLM_MODULES)
    if modules and not modules & VLLM_MODULES:
        yield Problem(f"vLLM supports none of this adapter's modules ({', '.join(unsupported)}): it would load "
                      f"it and serve the base model unchanged", severity="warning",
                      evidence={"engine": "vLLM", "modules": unsupported}, location=adapter_key("target_modules"))
    elif unsupported:
        yield Problem(f"vLLM ignores the LoRA weights of {', '.join(unsupported)}", severity="info",
                      evidence={"engine": "vLLM", "modules": unsupported}, location=adapter_key("target_modules"))


@check("LRA013", category="adapter", severity="info", needs=("adapter",),
       hint="For llama.cpp: convert the merged model instead (merge_and_unload, then convert_hf_to_gguf.py).")
def llamacpp_conversion(ctx):
    """llama.cpp's convert_lora_to_gguf.py cannot convert an adapter that carries embeddings (a note).

    The converter maps LoRA A/B pairs of the decoder's matrices; full embed_tokens / lm_head copies
    (modules_to_save, resized vocabularies), trainable tokens and LoRA on the embedding abort the conversion
    (llama.cpp#11554). A limit of the converter, not a fault of the adapter: reported as info. To serve it with
    llama.cpp, merge it (merge_and_unload) and convert the merged model with convert_hf_to_gguf.py."""
    adapter = ctx.adapter
    carried = sorted({m.short for m in adapter.modules.values() if m.short in EMBEDDING_MODULES
                      and (m.full_copy or m.is_embedding_lora or "tokens" in m.keys or "base" in m.keys)})
    if not carried:
        raise Skip("no embeddings in the adapter")
    yield Problem(f"llama.cpp's convert_lora_to_gguf cannot convert this adapter: it carries embeddings "
                  f"({', '.join(carried)})", evidence={"engine": "llama.cpp", "modules": carried},
                  location=adapter_key("modules_to_save"))
