"""read_adapter(dir) -> Adapter: a PEFT LoRA adapter directory, parsed but not merged.

adapter_model.safetensors keys, as peft's get_peft_model_state_dict writes them (prefix `base_model.model.`,
adapter name removed):
    M.lora_A.weight [r, in]   M.lora_B.weight [out, r]      LoRA on a linear module M
    M.lora_embedding_A [r, vocab]   M.lora_embedding_B [hidden, r]   LoRA on an embedding
    M.lora_magnitude_vector [out]                            DoRA's magnitude
    M.token_adapter.trainable_tokens_delta [n, hidden]       new rows for trainable_token_indices
    M.weight, M.modules_to_save.weight                       modules_to_save: the trained copy
    M.original_module.weight, M.base_layer.weight            the base's own weight, saved beside it
peft loads `M.weight` into the trained copy and `original_module` / `base_layer` into the base module, so a
saved base_layer weight (a resized, LoRA-targeted embedding) replaces the base's. Nothing here raises for
a missing partner or a wrong shape: the LRA checks report those, and AdaptedWeights refuses to merge them.
adapter_model.bin is a pickle and is never opened.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from reference_engine.adapter.config import AdapterConfig, read_adapter_config
from reference_engine.config import model_dir_path
from reference_engine.errors import ModelDirError
from reference_engine.files.safetensors_io import read_header
from reference_engine.files.weights import Weights, tensor_infos

ADAPTER_WEIGHTS = "adapter_model.safetensors"
PICKLED_WEIGHTS = ("adapter_model.bin", "adapter_model.pt")
PREFIX = "base_model.model."
# key suffix -> (role, drop): role of the tensor in module M = key without the suffix
SUFFIXES = (
    (".lora_A.weight", "A"), (".lora_B.weight", "B"),
    (".lora_embedding_A", "embedding_A"), (".lora_embedding_B", "embedding_B"),
    (".lora_magnitude_vector.weight", "magnitude"), (".lora_magnitude_vector", "magnitude"),
    (".token_adapter.trainable_tokens_delta", "tokens"),
    (".modules_to_save.weight", "saved_copy"), (".original_module.weight", "original"),
    (".base_layer.weight", "base"), (".weight", "copy"),
)


@dataclass
class LoraModule:
    """One adapted module (dotted name without `.weight`, e.g. model.layers.0.self_attn.q_proj)."""
    name: str
    keys: dict[str, str] = field(default_factory=dict)   # role -> tensor key in adapter_model.safetensors

    @property
    def weight(self) -> str:
        return self.name + ".weight"

    @property
    def layer(self) -> int | None:
        parts = self.name.split(".")
        for a, b in zip(parts, parts[1:]):
            if a in ("layers", "h", "blocks") and b.isdigit():
                return int(b)
        return None

    @property
    def short(self) -> str:
        return self.name.rsplit(".", 1)[-1]

    @property
    def lora_a(self) -> str | None:
        return self.keys.get("A") or self.keys.get("embedding_A")

    @property
    def lora_b(self) -> str | None:
        return self.keys.get("B") or self.keys.get("embedding_B")

    @property
    def is_embedding_lora(self) -> bool:
        return "embedding_A" in self.keys or "embedding_B" in self.keys

    @property
    def has_lora(self) -> bool:
        return self.lora_a is not None or self.lora_b is not None

    @property
    def full_copy(self) -> str | None:
        """The trained copy that replaces the module's weight (modules_to_save, saved resized embeddings)."""
        return self.keys.get("copy") or self.keys.get("saved_copy")


@dataclass
class Adapter:
    root: Path
    config: AdapterConfig
    tensors: Weights                        # adapter_model.safetensors, keys as stored
    modules: dict[str, LoraModule]          # module name -> its tensors
    unknown: list[str] = field(default_factory=list)   # keys that are no LoRA/DoRA/modules_to_save tensor

    @property
    def file(self) -> Path:
        return self.root / ADAPTER_WEIGHTS

    def lora_modules(self) -> list[LoraModule]:
        return [m for m in self.modules.values() if m.has_lora]

    def rank_in_tensors(self, module: LoraModule) -> int | None:
        """The rank the tensors carry: rows of A (or columns of B when A is missing)."""
        if module.lora_a is not None:
            return self.tensors.info(module.lora_a).shape[0]
        if module.lora_b is not None and len(self.tensors.info(module.lora_b).shape) == 2:
            return self.tensors.info(module.lora_b).shape[1]
        return None

    def close(self) -> None:
        self.tensors.close()


def module_key(key: str) -> tuple[str, str] | None:
    """(module name, role) of an adapter tensor key, or None when it is not one peft writes."""
    name = key[len(PREFIX):] if key.startswith(PREFIX) else key
    for suffix, role in SUFFIXES:
        if name.endswith(suffix) and len(name) > len(suffix):
            return name[: -len(suffix)], role
    return None


def read_adapter(adapter_dir: str | Path) -> Adapter:
    """Parse adapter_config.json and the safetensors header (no tensor bytes read); one-line errors."""
    root = model_dir_path(adapter_dir)
    config = read_adapter_config(root)
    weights_path = root / ADAPTER_WEIGHTS
    if not weights_path.is_file():
        pickled = [n for n in PICKLED_WEIGHTS if (root / n).exists()]
        if pickled:
            raise ModelDirError(root / pickled[0], "a pickle checkpoint, which is never unpickled; save the "
                                                   "adapter with safe_serialization=True (adapter_model.safetensors)")
        raise ModelDirError(root, f"no {ADAPTER_WEIGHTS}")
    header = read_header(weights_path)
    tensors = Weights(tensor_infos({weights_path: header}), {weights_path: header})
    modules: dict[str, LoraModule] = {}
    unknown = []
    for key in tensors.names:
        parsed = module_key(key)
        if parsed is None:
            unknown.append(key)
            continue
        name, role = parsed
        modules.setdefault(name, LoraModule(name)).keys[role] = key
    return Adapter(root, config, tensors, modules, unknown)


def is_adapter_dir(path: str | Path) -> bool:
    path = Path(path)
    return path.is_dir() and (path / "adapter_config.json").is_file()
