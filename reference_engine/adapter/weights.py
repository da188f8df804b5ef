"""AdaptedWeights: a tensor table over a base model's table and a LoRA adapter, merged tensor by tensor.

`get(name)` returns the base tensor for an untouched name and the merged weight (adapter/merge.py) for an
adapted one, so the resident loader, the streaming core, the static checks and diff read an adapted model
exactly as they read any other. `chunked_reader()` gives the streaming core the same tensors row block by
row block (the LM head, the embedding rows of a step) without merging the whole matrix.
"""
from __future__ import annotations

from dataclasses import replace

import torch

from reference_engine.adapter.merge import check_fits, merge_rows
from reference_engine.adapter.reader import Adapter, LoraModule
from reference_engine.errors import ModelDirError
from reference_engine.files.weights import TensorTable

EMBED, LM_HEAD = "model.embed_tokens.weight", "lm_head.weight"


class AdaptedWeights(TensorTable):
    dequantizes = True   # readers must use get(): an adapted tensor's bytes are not at info.offset

    def __init__(self, base, adapter: Adapter):
        self.base, self.adapter = base, adapter
        self.modules: dict[str, LoraModule] = {m.weight: m for m in adapter.modules.values()
                                               if m.has_lora or m.full_copy or {"base", "tokens"} & set(m.keys)}
        self._infos = {name: base.info(name) for name in base.names}
        for name, module in self.modules.items():
            start = self.start_key(module)
            if start is not None:      # a saved copy or base layer: its shape (a resized vocabulary) is the model's
                self._infos[name] = replace(adapter.tensors.info(start), name=name)
            if name not in self._infos:
                raise ModelDirError(adapter.file, f"{module.name}: the base has no {name}")
            if module.has_lora or "magnitude" in module.keys:
                check_fits(adapter, module, tuple(self._infos[name].shape))
        head = self.modules.get(LM_HEAD)
        # an adapter that carries its own lm_head (saved beside a resized embedding) unties a tied base
        self.unties = head is not None and head.full_copy is not None
        self.head_alias = None if self.unties else self._untied_head()
        self.unties = self.unties or self.head_alias is not None

    def _untied_head(self) -> tuple[str, str] | None:
        """A tied model whose embed_tokens alone is saved (modules_to_save): peft leaves the LM head on the base's
        embedding (the original module) unless ensure_weight_tying, so the adapted model is untied and its
        lm_head.weight is that base embedding: ("adapter", key of the stored original) or ("base", EMBED)."""
        embed = self.modules.get(EMBED)
        if embed is None or embed.full_copy is None or LM_HEAD in self.modules \
                or self.adapter.config.raw.get("ensure_weight_tying"):
            return None
        if LM_HEAD in self.base:
            return ("base", LM_HEAD)
        original = embed.keys.get("original")
        alias = ("adapter", original) if original else ("base", EMBED)
        info = self.adapter.tensors.info(original) if original else self.base.info(EMBED)
        self._infos[LM_HEAD] = replace(info, name=LM_HEAD)
        return alias

    @property
    def names(self) -> list[str]:
        return list(self._infos)

    @property
    def files(self) -> list:
        return sorted(set(self.base.files) | {self.adapter.file})

    @staticmethod
    def start_key(module: LoraModule) -> str | None:
        """The adapter tensor the module's weight starts from instead of the base's, if any."""
        return module.full_copy or module.keys.get("base")

    def get(self, name: str) -> torch.Tensor:
        return self._get(name, self.base.get, self.adapter.tensors.get)

    def _get(self, name: str, base_get, adapter_get) -> torch.Tensor:
        if name == LM_HEAD and self.head_alias is not None:
            where, key = self.head_alias
            return adapter_get(key) if where == "adapter" else base_get(key)
        module = self.modules.get(name)
        if module is None:
            return base_get(name)
        start = self.start_key(module)
        w = adapter_get(start) if start is not None else base_get(name)
        if module.full_copy is not None and not module.has_lora and "tokens" not in module.keys:
            return w
        return merge_rows(self.adapter, module, w, w.shape[0], adapter_get, 0, w.shape[0])

    def close(self) -> None:
        self.base.close()
        self.adapter.close()

    def chunked_reader(self):
        from reference_engine.readers.layer_reader import ChunkedWeights
        from reference_engine.readers.chunked import chunked_reader
        from reference_engine.files.gguf_weights import GGUFWeights
        return AdaptedReader(self, chunked_reader(self.base, isinstance(self.base, GGUFWeights)),
                             ChunkedWeights(self.adapter.tensors))


class AdaptedReader:
    """The chunked reader interface (layer_reader.ChunkedWeights) over AdaptedWeights."""

    def __init__(self, table: AdaptedWeights, base_reader, adapter_reader):
        self.table, self.base_reader, self.adapter_reader = table, base_reader, adapter_reader

    def __contains__(self, name: str) -> bool:
        return name in self.table

    def info(self, name: str):
        return self.table.info(name)

    @property
    def bytes_read(self) -> int:
        return self.base_reader.bytes_read + self.adapter_reader.bytes_read

    def get(self, name: str) -> torch.Tensor:
        return self.table._get(name, self.base_reader.get, self.adapter_reader.get)

    def rows(self, name: str, start: int, end: int) -> torch.Tensor:
        if name == LM_HEAD and self.table.head_alias is not None:
            where, key = self.table.head_alias
            return (self.adapter_reader if where == "adapter" else self.base_reader).rows(key, start, end)
        module = self.table.modules.get(name)
        if module is None:
            return self.base_reader.rows(name, start, end)
        first = self.table.start_key(module)
        w = self.adapter_reader.rows(first, start, end) if first is not None \
            else self.base_reader.rows(name, start, end)
        out_rows = self.table.info(name).shape[0]
        return merge_rows(self.table.adapter, module, w, out_rows, self.adapter_reader.get, start, end)

    def gather_rows(self, name: str, ids: torch.Tensor) -> torch.Tensor:
        if name not in self.table.modules:
            return self.base_reader.gather_rows(name, ids)
        unique, inverse = torch.unique(ids.cpu(), return_inverse=True)
        return torch.cat([self.rows(name, int(i), int(i) + 1) for i in unique])[inverse]

    def drop_all(self) -> None:
        self.base_reader.drop_all()
        self.adapter_reader.drop_all()

    def drop_tensor(self, name: str) -> None:
        if name in self.table.base and not (name == LM_HEAD and self.table.head_alias is not None):
            self.base_reader.drop_tensor(name)

    def close(self) -> None:
        self.base_reader.close()
        self.adapter_reader.close()


def adapted_vocab(table: AdaptedWeights) -> int | None:
    """Rows of the adapted input embedding when the adapter resized it, else None."""
    if EMBED in table.modules and EMBED in table:
        return table.info(EMBED).shape[0]
    return None
