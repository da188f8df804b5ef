"""Recurrent state per sequence for the layers that keep one (the second kind of layer cache, see layout.py).

Each recurrent layer holds, for every live sequence, a fixed set of named tensors (a conv window, a recurrent
state) allocated zeroed when the sequence starts and dropped when it is freed. A step never edits a state in
place: a mixer computes the new state and `stage`s it; the engine `commit`s the step's states once the whole
step succeeded, or `discard`s them (a failed step leaves every sequence as it was, like the KV rollback).
Forks copy the state (beam search: each beam continues from its own copy). A state cannot be cut back to an
earlier length: `truncate` to anything but 0 or the current length is an error, never a silent wrong state.
"""
from __future__ import annotations

import torch

from reference_engine.core.cache.layout import LayerCache, state_part

STATE_DTYPE = torch.float32


class StateCache:
    def __init__(self, layout: list[LayerCache], device="cpu"):
        self.layers = {i: state_part(c) for i, c in enumerate(layout) if state_part(c) is not None}
        self.device = device
        self.states: dict = {}      # seq_id -> {layer: {name: tensor}}
        self.pending: dict = {}     # (seq_id, layer) -> {name: tensor} staged by the current step

    def __contains__(self, seq_id) -> bool:
        return seq_id in self.states

    @property
    def bytes_per_sequence(self) -> int:
        return sum(c.numel() for c in self.layers.values()) * STATE_DTYPE.itemsize

    def allocate(self, seq_id) -> None:
        if seq_id in self.states:
            raise ValueError(f"sequence {seq_id!r} already has a recurrent state")
        self.states[seq_id] = {i: {name: torch.zeros(shape, dtype=STATE_DTYPE, device=self.device)
                                   for name, shape in c.tensors} for i, c in self.layers.items()}

    def get(self, layer: int, seq_id) -> dict[str, torch.Tensor]:
        """The state this step starts from: what an earlier layer call of this step staged, else the committed."""
        staged = self.pending.get((seq_id, layer))
        return staged if staged is not None else self.states[seq_id][layer]

    def stage(self, layer: int, seq_id, state: dict[str, torch.Tensor]) -> None:
        self.pending[(seq_id, layer)] = state

    def commit(self) -> None:
        for (seq_id, layer), state in self.pending.items():
            if seq_id in self.states:
                self.states[seq_id][layer] = state
        self.pending.clear()

    def discard(self) -> None:
        self.pending.clear()

    def reset(self, seq_id) -> None:
        """Back to the zero state (the sequence is truncated to length 0)."""
        self.states.pop(seq_id, None)
        self.allocate(seq_id)

    def fork(self, parent_id, child_id) -> None:
        if child_id in self.states:
            raise ValueError(f"sequence {child_id!r} already has a recurrent state")
        self.states[child_id] = {i: {n: t.clone() for n, t in s.items()}
                                 for i, s in self.states[parent_id].items()}

    def swap(self, a, b) -> None:
        self.states[a], self.states[b] = self.states.get(b), self.states.get(a)
        for k in (a, b):
            if self.states[k] is None:
                del self.states[k]

    def free(self, seq_id) -> None:
        self.states.pop(seq_id, None)
        for key in [k for k in self.pending if k[0] == seq_id]:
            del self.pending[key]

    def validate(self, live: set) -> list[str]:
        problems = []
        if set(self.states) != live:
            stray = set(self.states) ^ live
            problems.append(f"recurrent states and KV tables disagree on {len(stray)} sequences")
        for seq_id, layers in self.states.items():
            for i, state in layers.items():
                for name, t in state.items():
                    if not torch.isfinite(t).all():
                        problems.append(f"sequence {seq_id!r} layer {i}: recurrent state {name!r} is not finite")
        return problems
