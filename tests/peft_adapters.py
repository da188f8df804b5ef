"""LoRA adapters made by peft itself on tiny factory bases (peft and transformers are test oracles only).

`make_adapter(base, out, r=4, target_modules=[...], ...)` builds a PeftModel on the base, gives every trainable
adapter tensor random values (peft initialises lora_B to zero, which would make every variant a no-op), saves
it with save_pretrained and returns (adapter_dir, peft_model). `added_tokens=[...]` adds tokens to the
tokenizer, resizes the embeddings before peft wraps the model and saves the tokenizer beside the adapter.
`peft_logits(model, ids)` is the oracle: the PeftModel forward and its merge_and_unload(), both fp32.
"""
from __future__ import annotations

import copy
from pathlib import Path

import torch


def load_base(base: Path):
    from transformers import AutoModelForCausalLM
    return AutoModelForCausalLM.from_pretrained(base, dtype=torch.float32).eval()


def randomize(model, seed: int, scale: float = 0.05, copies: bool = True) -> None:
    """Trained-looking adapter tensors: LoRA factors random, DoRA magnitudes and (copies) saved copies perturbed."""
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            noise = torch.randn(p.shape, generator=gen, dtype=p.dtype)
            if "lora_A" in name or "lora_B" in name or "lora_embedding" in name:
                p.copy_(noise * scale)
            elif "lora_magnitude_vector" in name:
                p.mul_(1 + 0.1 * noise)
            elif copies and ("modules_to_save" in name or "trainable_tokens_delta" in name):
                p.add_(noise * 0.02)


def make_adapter(base: Path, out: Path, *, seed: int = 0, added_tokens: list[str] | None = None,
                 randomize_weights: bool = True, train_copies: bool = True, save_embedding_layers="auto",
                 **lora):
    from peft import LoraConfig, get_peft_model
    model = load_base(base)
    out = Path(out)
    if added_tokens:
        from transformers import AutoTokenizer
        tok = AutoTokenizer.from_pretrained(base)
        tok.add_tokens(added_tokens)
        model.resize_token_embeddings(len(tok), mean_resizing=False)
        tok.save_pretrained(out)
    lora.setdefault("r", 4)
    lora.setdefault("lora_alpha", 8)
    peft_model = get_peft_model(model, LoraConfig(**lora))
    if randomize_weights:
        randomize(peft_model, seed, copies=train_copies)
    peft_model.save_pretrained(out, save_embedding_layers=save_embedding_layers)
    return out, peft_model.eval()


@torch.no_grad()
def peft_logits(peft_model, ids: list[int]) -> tuple[torch.Tensor, torch.Tensor]:
    """(PeftModel forward, merge_and_unload forward) fp32 logits [seq, vocab] of the same ids."""
    x = torch.tensor([ids])
    unmerged = peft_model(input_ids=x).logits[0].float()
    merged_model = copy.deepcopy(peft_model).merge_and_unload()
    merged = merged_model(input_ids=x).logits[0].float()
    return unmerged, merged


def nearer_gap(ours: torch.Tensor, oracles: tuple[torch.Tensor, ...]) -> float:
    """max |ours - oracle| to the nearer oracle."""
    return min(float((ours - o).abs().max()) for o in oracles)
