"""A pipeline over torch.distributed ranks: each rank streams a contiguous range of layers (issue 13).

Launched the standard way (`torchrun --nproc-per-node N -m llmdoctor check MODEL`): every rank runs the same
program (the same checks, the same engine calls in the same order); inside each pass rank r receives the
residual streams from rank r-1, runs its layers, and sends them on; the last rank broadcasts the final
streams, and every rank applies the final norm and the LM head itself, so every rank sees the same logits and
takes the same decisions (greedy tokens, early stops). gloo on CPU, nccl on CUDA.

Capture hooks (activation statistics, fault injection) run live on the rank owning the layer (a replacement
takes effect there); the values they saw travel with the hidden states and are replayed on the other ranks in
layer order, so every rank's recorder holds the whole model's statistics, as in one process.

Every collective has the process group's timeout (LLMDOCTOR_DIST_TIMEOUT seconds, default 300): a rank that
dies or never starts is a PipelineError on the others, not a hang.
"""
from __future__ import annotations

import os
from datetime import timedelta

import torch

MODULES = ("input_norm", "attn", "post_norm", "mlp", "hidden")   # model.decoder_layer's capture points, in order


class PipelineError(RuntimeError):
    """The pipeline cannot go on (a rank died, a collective timed out, a bad launch); aborts the whole run."""


def world() -> tuple[int, int]:
    """(world size, rank); initialises the process group from torchrun's environment when there is one."""
    size = int(os.environ.get("WORLD_SIZE", "1") or 1)
    if size <= 1:
        return 1, 0
    import torch.distributed as dist
    if not dist.is_available():
        raise PipelineError("WORLD_SIZE > 1 but this torch has no torch.distributed")
    if not dist.is_initialized():
        backend = "nccl" if torch.cuda.is_available() and os.environ.get("LLMDOCTOR_DIST_BACKEND") != "gloo" else "gloo"
        if backend == "nccl":
            torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
        try:
            dist.init_process_group(backend, timeout=timedelta(seconds=timeout_seconds()))
        except Exception as e:  # missing MASTER_ADDR, a rank that never came, a port in use
            raise PipelineError(f"cannot start the {size}-process pipeline: {type(e).__name__}: {e}") from None
    return dist.get_world_size(), dist.get_rank()


def timeout_seconds() -> float:
    return float(os.environ.get("LLMDOCTOR_DIST_TIMEOUT", "300"))


def attach_pipeline(core, plan) -> None:
    """Give a streaming core its layer range when the plan spans several ranks."""
    if plan.ranks > 1:
        core.pipeline = Pipeline(plan.layers[0], plan.layers[1])


class Pipeline:
    def __init__(self, first: int, end: int):
        import torch.distributed as dist
        self.dist = dist
        self.first, self.end = first, end
        self.rank, self.size = dist.get_rank(), dist.get_world_size()

    def run(self, core, lanes, linear) -> None:
        from reference_engine.core.sweep import run_layers
        n = core.config.num_hidden_layers
        records = [[] for _ in lanes]                 # per lane: captured tensors of layers 0..end-1, in order
        try:
            if self.rank > 0:
                self._recv(lanes, records, self.first)
                self._replay(lanes, records, 0, self.first)
            live = [lane.capture for lane in lanes]
            for k, lane in enumerate(lanes):
                if lane.capture is not None:
                    lane.capture = _recording(lane.capture, records[k])
            try:
                run_layers(core, core.config, core.windows, lanes, linear, range(self.first, self.end))
            finally:
                for lane, capture in zip(lanes, live):
                    lane.capture = capture
            if self.rank < self.size - 1:
                self._send(lanes, records)
            self._broadcast_last(lanes, records, n)
            self._replay(lanes, records, self.end, n)
        except PipelineError:
            raise
        except RuntimeError as e:   # gloo/nccl: peer closed, timeout
            raise PipelineError(f"pipeline rank {self.rank}: a peer failed or timed out "
                                f"({type(e).__name__}: {str(e).splitlines()[0][:200]})") from None

    # ---- transport: the hidden states, then the capture records (shapes known to every rank) -----------
    def _payload(self, lanes, records, layers: int) -> list[torch.Tensor]:
        out = []
        for k, lane in enumerate(lanes):
            out.append(lane.h.contiguous())
            if lane.capture is not None:
                out.append(torch.stack(records[k]) if records[k] else lane.h.new_empty(0, *lane.h.shape))
        return out

    def _empty_like(self, lanes, layers: int) -> list[torch.Tensor]:
        out = []
        for lane in lanes:
            out.append(torch.empty_like(lane.h))
            if lane.capture is not None:
                out.append(lane.h.new_empty(len(MODULES) * layers, *lane.h.shape))
        return out

    def _unpack(self, lanes, records, tensors) -> None:
        it = iter(tensors)
        for k, lane in enumerate(lanes):
            lane.h = next(it)
            if lane.capture is not None:
                records[k] = list(next(it).unbind(0))

    def _recv(self, lanes, records, layers: int) -> None:
        tensors = self._empty_like(lanes, layers)
        for t in tensors:
            self.dist.recv(t, src=self.rank - 1)
        self._unpack(lanes, records, tensors)

    def _send(self, lanes, records) -> None:
        for t in self._payload(lanes, records, self.end):
            self.dist.send(t, dst=self.rank + 1)

    def _broadcast_last(self, lanes, records, n: int) -> None:
        last = self.size - 1
        tensors = self._payload(lanes, records, n) if self.rank == last else self._empty_like(lanes, n)
        for t in tensors:
            self.dist.broadcast(t, src=last)
        if self.rank != last:
            mine = [list(r) for r in records]
            self._unpack(lanes, records, tensors)
            for k, r in enumerate(mine):       # keep this rank's own (live) values; they are the same numbers
                records[k][:len(r)] = r

    def _replay(self, lanes, records, start: int, end: int) -> None:
        """Call each lane's capture for layers start..end-1 with the values their owner saw."""
        for k, lane in enumerate(lanes):
            if lane.capture is None:
                continue
            for i in range(start, end):
                for j, module in enumerate(MODULES):
                    lane.capture(i, module, records[k][i * len(MODULES) + j])


def _recording(capture, sink: list):
    def hook(layer, module, x):
        replaced = capture(layer, module, x)
        sink.append((x if replaced is None else replaced).detach())
        return replaced
    return hook
