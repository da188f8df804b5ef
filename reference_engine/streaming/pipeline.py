"""A pipeline over torch.distributed ranks: each rank streams a contiguous range of layers, so
several processes (or hosts) share a model none of them could hold.

Launched the standard way (`torchrun --nproc-per-node N PROGRAM`): every rank runs the same program (the
same engine calls in the same order); inside each pass rank r receives the
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

# model.decoder_layer's capture points (MoE layers add "router" [T, experts]); codes travel in record headers
ALL_MODULES = ("input_norm", "attn", "post_norm", "router", "mlp", "hidden")
MODULE_CODES = {m: i for i, m in enumerate(ALL_MODULES)}
# a record's dtype travels too: it need not be its lane's (DeepSeek's router logits are float32 in a bf16 lane)
DTYPES = (torch.float32, torch.bfloat16, torch.float16, torch.float64)
DTYPE_CODES = {d: i for i, d in enumerate(DTYPES)}


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
        from reference_engine.streaming.sweep import run_layers
        n = core.config.num_hidden_layers
        records = [[] for _ in lanes]                 # per lane: (layer, module, tensor) of layers so far, in order
        try:
            if self.rank > 0:
                self._recv(lanes, records)
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
            self._broadcast_last(lanes, records)
            self._replay(lanes, records, self.end, n)
        except PipelineError:
            raise
        except RuntimeError as e:   # gloo/nccl: peer closed, timeout
            raise PipelineError(f"pipeline rank {self.rank}: a peer failed or timed out "
                                f"({type(e).__name__}: {str(e).splitlines()[0][:200]})") from None

    # ---- transport: per lane its hidden state, then (with a capture) its records with a small header -----
    def _exchange(self, op, peer: int, lanes, records, sending: bool) -> None:
        """op(tensor, peer) on every tensor of the payload, in the same order on both sides; a receiving side
        gets each lane's hidden state and records (header: layer, module code, last dim, dtype code) filled in."""
        for k, lane in enumerate(lanes):
            h = lane.h.contiguous()
            op(h, peer)
            lane.h = h
            if lane.capture is None:
                continue
            mine = records[k] if sending else []
            count = torch.tensor([len(mine)], dtype=torch.int64, device=h.device)
            op(count, peer)
            n = int(count.item())
            header = torch.tensor([[i, MODULE_CODES[m], x.shape[-1], DTYPE_CODES[x.dtype]] for i, m, x in mine]
                                  or [[0, 0, 0, 0]] * n, dtype=torch.int64, device=h.device).reshape(n, 4)
            op(header, peer)
            out = []
            for j, (i, code, dim, dtype) in enumerate(header.tolist()):
                x = mine[j][2].contiguous() if sending else h.new_empty(h.shape[0], dim, dtype=DTYPES[dtype])
                op(x, peer)
                out.append((i, ALL_MODULES[code], x))
            records[k] = out

    def _recv(self, lanes, records) -> None:
        self._exchange(lambda t, src: self.dist.recv(t, src=src), self.rank - 1, lanes, records, False)

    def _send(self, lanes, records) -> None:
        self._exchange(lambda t, dst: self.dist.send(t, dst=dst), self.rank + 1, lanes, records, True)

    def _broadcast_last(self, lanes, records) -> None:
        last = self.size - 1
        mine = [list(r) for r in records]
        self._exchange(lambda t, src: self.dist.broadcast(t, src=src), last, lanes, records, self.rank == last)
        if self.rank != last:
            for k, r in enumerate(mine):       # keep this rank's own (live) values; they are the same numbers
                records[k][:len(r)] = r

    def _replay(self, lanes, records, start: int, end: int) -> None:
        """Call each lane's capture for the records of layers start..end-1 with the values their owner saw."""
        for k, lane in enumerate(lanes):
            if lane.capture is None:
                continue
            for i, module, x in records[k]:
                if start <= i < end:
                    lane.capture(i, module, x)


def _recording(capture, sink: list):
    def hook(layer, module, x):
        replaced = capture(layer, module, x)
        sink.append((layer, module, (x if replaced is None else replaced).detach()))
        return replaced
    return hook
