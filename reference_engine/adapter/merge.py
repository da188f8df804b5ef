"""The merged weight of one adapted module, computed by our own code (peft is only the tests' oracle).

For rows a..b of a module's weight W [out, in] (the whole weight when a=0, b=out):
    W' = W + s * B @ A                       LoRA on a linear (A [r, in], B [out, r]), s = alpha/r or alpha/sqrt(r)
    W' = W + s * (B @ A)^T                   LoRA on an embedding (A [r, vocab], B [hidden, r]), W [vocab, hidden]
    W' = m / ||W + s B A||_row * (W + s B A) DoRA (peft's LoraLayer.merge: the norm of each output row, detached)
    W'[i] = delta[j] for i = indices[j]      trainable tokens (peft's TrainableTokensLayer: index_copy of new rows)
A module in modules_to_save replaces W with its trained copy. Everything is computed in float32 and cast
back to W's dtype once, as merge_and_unload does.
"""
from __future__ import annotations

import math

import torch

from reference_engine.adapter.reader import Adapter, LoraModule
from reference_engine.errors import ModelDirError, UnsupportedError


def lora_delta(adapter: Adapter, module: LoraModule, out_rows: int, in_features: int, read, start: int,
               end: int) -> torch.Tensor:
    """s * B @ A for output rows start..end-1 -> [end - start, in] float32; `read(key)` gives adapter tensors."""
    path = adapter.file
    if module.lora_a is None or module.lora_b is None:
        have, miss = ("lora_A", "lora_B") if module.lora_a is not None else ("lora_B", "lora_A")
        raise ModelDirError(path, f"{module.name}: {have} without its {miss}")
    a, b = read(module.lora_a).float(), read(module.lora_b).float()
    scale = adapter.config.scale_of(module.name)
    if module.is_embedding_lora:                      # A [r, vocab], B [hidden, r] -> delta [vocab, hidden]
        ok = a.dim() == 2 and b.dim() == 2 and a.shape[0] == b.shape[1] and a.shape[1] == out_rows \
            and b.shape[0] == in_features
        if not ok:
            raise ModelDirError(path, f"{module.name}: lora_embedding_A {list(a.shape)} / lora_embedding_B "
                                      f"{list(b.shape)} do not fit the base weight [{out_rows}, {in_features}]")
        return (b @ a[:, start:end]).T * scale
    if adapter.config.fan_in_fan_out:                 # Conv1D stores W^T: B @ A is [in, out] there
        a, b = b.T, a.T
    ok = a.dim() == 2 and b.dim() == 2 and a.shape[0] == b.shape[1] and a.shape[1] == in_features \
        and b.shape[0] == out_rows
    if not ok:
        raise ModelDirError(path, f"{module.name}: lora_A {list(a.shape)} / lora_B {list(b.shape)} do not fit "
                                  f"the base weight [{out_rows}, {in_features}]")
    return (b[start:end] @ a) * scale                 # [end - start, r] @ [r, in]


def check_fits(adapter: Adapter, module: LoraModule, base_shape: tuple[int, ...]) -> None:
    """Refuse, before any tensor is read, a module whose stored tensors cannot be merged into `base_shape`."""
    info = adapter.tensors.info
    if module.has_lora and (module.lora_a is None or module.lora_b is None):
        have, miss = ("lora_A", "lora_B") if module.lora_a is not None else ("lora_B", "lora_A")
        raise ModelDirError(adapter.file, f"{module.name}: {have} without its {miss}")
    if len(base_shape) != 2:
        raise ModelDirError(adapter.file, f"{module.name}: the base weight {list(base_shape)} is not a matrix")
    out, inp = base_shape
    if module.has_lora:
        a, b = tuple(info(module.lora_a).shape), tuple(info(module.lora_b).shape)
        r = a[0] if a else 0
        if module.is_embedding_lora:
            want = ((r, out), (inp, r))
        else:
            want = ((r, inp), (out, r)) if not adapter.config.fan_in_fan_out else ((r, out), (inp, r))
        if (a, b) != want:
            raise ModelDirError(adapter.file, f"{module.name}: lora_A {list(a)} / lora_B {list(b)} do not fit the "
                                              f"base weight {list(base_shape)}")
    magnitude = module.keys.get("magnitude")
    if magnitude is not None and math.prod(info(magnitude).shape) != out:
        raise ModelDirError(adapter.file, f"{module.name}: lora_magnitude_vector {list(info(magnitude).shape)} "
                                          f"for {out} output rows")


def merge_rows(adapter: Adapter, module: LoraModule, w: torch.Tensor, out_rows: int, read, start: int,
               end: int) -> torch.Tensor:
    """Rows start..end-1 of the adapted weight, given the same rows `w` of the weight it starts from."""
    dtype = w.dtype
    merged = w.float()
    if module.has_lora:
        merged = merged + lora_delta(adapter, module, out_rows, w.shape[1], read, start, end)
        magnitude = module.keys.get("magnitude")
        if magnitude is not None:
            if module.is_embedding_lora:
                raise UnsupportedError(adapter.file, f"{module.name}: DoRA on an embedding is not supported")
            m = read(magnitude).float().reshape(-1)
            if m.numel() != out_rows:
                raise ModelDirError(adapter.file, f"{module.name}: lora_magnitude_vector has {m.numel()} values "
                                                  f"for {out_rows} output rows")
            merged = merged * (m[start:end] / torch.linalg.norm(merged, dim=1)).unsqueeze(1)
    tokens = module.keys.get("tokens")
    if tokens is not None:
        merged = put_token_rows(adapter, module, merged, read(tokens), start, end, out_rows)
    return merged.to(dtype)


def put_token_rows(adapter: Adapter, module: LoraModule, merged: torch.Tensor, delta: torch.Tensor, start: int,
                   end: int, out_rows: int) -> torch.Tensor:
    ids = token_indices(adapter, module)
    if delta.dim() != 2 or delta.shape[0] != len(ids) or delta.shape[1] != merged.shape[1]:
        raise ModelDirError(adapter.file, f"{module.name}: trainable_tokens_delta {list(delta.shape)} does not "
                                          f"hold {len(ids)} rows of {merged.shape[1]}")
    if ids and max(ids) >= out_rows:
        raise ModelDirError(adapter.config.path, f"{module.name}: trainable token id {max(ids)} is beyond the "
                                                 f"{out_rows} rows of the embedding")
    inside = [(i - start, j) for j, i in enumerate(ids) if start <= i < end]
    if inside:
        rows, src = zip(*inside)
        merged = merged.index_copy(0, torch.tensor(rows), delta[list(src)].float())
    return merged


def token_indices(adapter: Adapter, module: LoraModule) -> list[int]:
    ids = adapter.config.token_indices(module.name, embedding_module=EMBEDDING_MODULE)
    if ids is None:
        raise ModelDirError(adapter.config.path, f"{module.name}: trainable_tokens_delta stored but "
                                                 f"trainable_token_indices names no ids for it")
    return ids


EMBEDDING_MODULE = "model.embed_tokens"
