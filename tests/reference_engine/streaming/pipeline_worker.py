"""Worker for test_pipeline.py and test_pipeline_hybrid.py: one rank of a gloo pipeline over one tiny model or
several in turn (spawned, not collected)."""
from __future__ import annotations

import json
import os
import sys

import torch
from safetensors.torch import save_file


def run_rank(rank: int, world: int, port: int, model_dir: str, out_dir: str, mode: str) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), WORLD_SIZE=str(world), RANK=str(rank),
                      LOCAL_RANK=str(rank), LLMDOCTOR_DIST_TIMEOUT="20")
    # one intra-op thread, as torchrun gives each worker (OMP_NUM_THREADS=1): MKL partitions a GEMM by its
    # thread count (and, under load, drops threads dynamically), which changes float32 sums; with one thread
    # the one-process reference and every rank run the same kernels, so their logits compare bit for bit
    torch.set_num_threads(1)
    from reference_engine.streaming.pipeline import attach_pipeline, world as start
    from llmdoctor.run.workloads import CHECK_FULL
    from reference_engine.budget.plan import make_plan
    from reference_engine.streaming.streaming_core import StreamingCore
    size, me = start()
    if mode == "die" and me == world - 1:
        os._exit(3)                                   # a rank that dies before the first pass
    # several models (os.pathsep-joined) run one after another in the same process group: model k's files
    # go to out_dir/k (out_dir itself for one model)
    paths = model_dir.split(os.pathsep)
    for k, path in enumerate(paths):
        target = out_dir if len(paths) == 1 else os.path.join(out_dir, str(k))
        os.makedirs(target, exist_ok=True)
        core = StreamingCore.from_pretrained(path, num_blocks=64)
        attach_pipeline(core, make_plan(path, 1 << 40, workload=CHECK_FULL, ranks=size, rank=me, force="streaming"))
        if not run_model(core, me, target):
            sys.exit(0)


def run_model(core, me: int, out_dir: str) -> bool:
    """The pipeline's calls on one model; their outputs (or the PipelineError) written to out_dir."""
    from reference_engine.streaming.pipeline import PipelineError
    from reference_engine.streaming.sweep import LogitsRequest, logits_many
    records, low = [], []           # the float32 lane's captures; the bfloat16 lane's (a MoE router may stay fp32)

    def recorder(sink: list):
        def capture(layer, module, x):
            sink.append((layer, module, float(x.float().abs().max())))
        return capture

    try:
        ids = list(range(3, 30))
        full = core.logits(ids, capture=recorder(records))
        many = logits_many(core, [LogitsRequest(ids[:9]), LogitsRequest(ids, recorder(low), torch.bfloat16)])
        with core.scratch() as (seq,):
            first = core.prefill([seq], [ids[:12]])
            step = core.decode([seq], [int(first.argmax())])
    except PipelineError as e:
        with open(os.path.join(out_dir, f"error{me}.txt"), "w") as f:
            f.write(str(e))
        return False
    save_file({"full": full, "many0": many[0], "many1": many[1], "first": first, "step": step},
              os.path.join(out_dir, f"rank{me}.safetensors"))
    with open(os.path.join(out_dir, f"rank{me}.json"), "w") as f:
        json.dump({"records": records, "low": low, "passes": core.passes, "bytes": core.reader.bytes_read}, f)
    return True
