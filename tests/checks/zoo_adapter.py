"""The LoRA adapter fault zoo: adapters made by peft on a tiny factory base, then broken the way they break in
the field, each with the LRA check that must catch it. ADAPTER_FAULTS is the one table.

A fault's `build(base, other_base, out)` writes the adapter directory `out` (peft's save_pretrained, then edits
of adapter_config.json / adapter_model.safetensors where the fault is an edit)."""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from safetensors.torch import load_file, save_file

from tests.peft_adapters import make_adapter

ATTN = ["q_proj", "v_proj"]
WEIGHTS = "adapter_model.safetensors"
CONFIG = "adapter_config.json"


@dataclass(frozen=True)
class AdapterFault:
    name: str
    build: Callable[[Path, Path, Path], None]
    check: str
    severity: str
    anchor: str = ""


def peft(**lora) -> Callable[[Path, Path, Path], None]:
    def build(base: Path, other: Path, out: Path) -> None:
        make_adapter(base, out, **{"target_modules": ATTN, **lora})
    return build


def on_other_base(**lora) -> Callable[[Path, Path, Path], None]:
    def build(base: Path, other: Path, out: Path) -> None:
        make_adapter(other, out, **{"target_modules": ATTN, **lora})
    return build


def then(first: Callable, *edits: Callable[[Path], None]) -> Callable[[Path, Path, Path], None]:
    def build(base: Path, other: Path, out: Path) -> None:
        first(base, other, out)
        for edit in edits:
            edit(out)
    return build


def config(**updates) -> Callable[[Path], None]:
    def edit(out: Path) -> None:
        obj = json.loads((out / CONFIG).read_text())
        obj.update(updates)
        (out / CONFIG).write_text(json.dumps(obj, indent=2))
    return edit


def tensors(change: Callable[[dict], None]) -> Callable[[Path], None]:
    def edit(out: Path) -> None:
        t = load_file(out / WEIGHTS)
        change(t)
        save_file(t, out / WEIGHTS, metadata={"format": "pt"})
    return edit


def drop_first(part: str) -> Callable[[dict], None]:
    def change(t: dict) -> None:
        del t[sorted(k for k in t if part in k)[0]]
    return change


def nan_in(part: str) -> Callable[[dict], None]:
    def change(t: dict) -> None:
        t[sorted(k for k in t if part in k)[0]][0, 0] = float("nan")
    return change


def rename_module(old: str, new: str) -> Callable[[dict], None]:
    def change(t: dict) -> None:
        for k in [k for k in t if f".{old}." in k]:
            t[k.replace(f".{old}.", f".{new}.")] = t.pop(k)
    return change


def pickle_only(out: Path) -> None:
    (out / WEIGHTS).unlink()
    (out / "adapter_model.bin").write_bytes(b"\x80\x04\x95\x00")   # never unpickled


def truncate_weights(out: Path) -> None:
    data = (out / WEIGHTS).read_bytes()
    (out / WEIGHTS).write_bytes(data[: len(data) // 2])


ADDED = ["<tool>", "<think>", "</think>"]
ADAPTER_FAULTS = [
    AdapterFault("target_absent", then(peft(), config(target_modules=["q_proj", "v_proj", "W_pack"])),
                 "LRA002", "error", "LlamaFactory#181 (Baichuan W_pack on another architecture)"),
    AdapterFault("tensors_for_absent_module", then(peft(), config(target_modules=["q_proj", "c_attn"]),
                                                   tensors(rename_module("v_proj", "c_attn"))),
                 "LRA002", "error", "LlamaFactory#181 (GPT-2 c_attn)"),
    AdapterFault("layers_beyond_base", then(peft(), config(layers_to_transform=[0, 9])), "LRA002", "error"),
    AdapterFault("trained_on_other_base", on_other_base(), "LRA003", "error", "peft#1932"),
    AdapterFault("rank_differs_from_config", then(peft(), config(r=8)), "LRA004", "error"),
    AdapterFault("lora_b_without_a", then(peft(), tensors(drop_first("lora_A"))), "LRA005", "error"),
    AdapterFault("dora_flag_dropped", then(peft(use_dora=True), config(use_dora=False)), "LRA005", "error"),
    AdapterFault("nan_in_lora_b", then(peft(), tensors(nan_in("lora_B"))), "LRA006", "error"),
    AdapterFault("saved_before_training", peft(randomize_weights=False), "LRA007", "error"),
    AdapterFault("alpha_far_too_large", then(peft(), config(lora_alpha=4096)), "LRA008", "warning"),
    AdapterFault("resized_vocab_not_saved", peft(added_tokens=ADDED, save_embedding_layers=False), "LRA009",
                 "error", "peft#1457, peft#2415"),
    AdapterFault("added_rows_untrained", peft(added_tokens=ADDED, modules_to_save=["embed_tokens", "lm_head"],
                                              train_copies=False), "LRA010", "warning"),
    AdapterFault("trained_on_bnb_4bit", then(peft(), config(base_model_name_or_path="unsloth/llama-3-8b-bnb-4bit")),
                 "LRA011", "warning", "unsloth-zoo PR #810, peft#2321"),
    AdapterFault("declared_base_differs", then(peft(), config(base_model_name_or_path="Qwen/Qwen2.5-7B")),
                 "LRA011", "warning", "peft#1932"),
    AdapterFault("vllm_modules_to_save", peft(modules_to_save=["lm_head"]), "LRA012", "info", "vllm#2847"),
    AdapterFault("vllm_dora", peft(use_dora=True), "LRA012", "info"),
    AdapterFault("vllm_rank_above_default", peft(r=32, lora_alpha=32), "LRA012", "info"),
    AdapterFault("llamacpp_embeddings", peft(added_tokens=ADDED, modules_to_save=["embed_tokens", "lm_head"]),
                 "LRA013", "info", "llama.cpp#11554"),
    AdapterFault("pickle_only", then(peft(), pickle_only), "LRA001", "error"),
    AdapterFault("truncated_weights", then(peft(), truncate_weights), "LRA001", "error"),
    AdapterFault("config_wrong_type", then(peft(), config(r="four")), "LRA001", "error"),
]
