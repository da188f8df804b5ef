"""Decode and prefill speed of the reference engine vs llama.cpp (llama-cpp-python), measured in the same run.

    python benchmarks/llamacpp.py [--dtype float32|bfloat16] [--threads N] [--repeats 5]

Same model on both sides: SmolLM2-135M-Instruct, ours from the Hugging Face directory, llama.cpp's from the F32 or
BF16 GGUF that llama.cpp's own convert_hf_to_gguf.py writes from that directory (tests/assets_gguf.py). Same token
ids, same thread count (torch.set_num_threads / n_threads and n_threads_batch). Workloads:
- decode, batch 1: after a 64-token prompt, 64 single-token steps (fixed ids: the cost does not depend on them);
  both sides compute the full logits row every step;
- prefill: one 512-token prompt in one batch (llama.cpp n_batch = 512).
Rounds are interleaved (ours, llama.cpp, ours, ...) and the best round of each side counts. Prints wall-clock
tokens/s and, with one thread, CPU-time tokens/s (the figure that other processes on a loaded machine disturb
least); ratio = ours / llama.cpp (target >= 1.0x). A sanity row checks both sides computed the same logits.
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from reference_engine.engine import Engine  # noqa: E402

GGUF_TYPES = {"float32": "f32", "bfloat16": "bf16"}


def timed(fn) -> tuple[float, float]:
    """(wall seconds, CPU seconds of this process) of one call."""
    wall, cpu = time.perf_counter(), time.process_time()
    fn()
    return time.perf_counter() - wall, time.process_time() - cpu


def best_interleaved(fns: dict, repeats: int) -> dict[str, tuple[float, float]]:
    best = {name: (float("inf"), float("inf")) for name in fns}
    for _ in range(repeats):
        for name, fn in fns.items():
            wall, cpu = timed(fn)
            best[name] = (min(best[name][0], wall), min(best[name][1], cpu))
    return best


class Ours:
    def __init__(self, engine: Engine):
        self.engine = engine

    def prefill(self, ids: list[int]) -> torch.Tensor:
        logits = self.engine.prefill(["bench"], [ids])
        self.engine.free("bench")
        return logits[0]

    def decode(self, prompt: list[int], steps: list[int]) -> None:
        self.engine.prefill(["bench"], [prompt])
        try:
            for t in steps:
                self.engine.decode(["bench"], [t])
        finally:
            self.engine.free("bench")


class LlamaCpp:
    def __init__(self, gguf: Path, threads: int, n_ctx: int):
        import llama_cpp
        self.llm = llama_cpp.Llama(str(gguf), n_threads=threads, n_threads_batch=threads, n_ctx=n_ctx,
                                   n_batch=512, n_ubatch=512, verbose=False)

    def prefill(self, ids: list[int]) -> torch.Tensor:
        self.llm.reset()
        self.llm.eval(ids)
        # the last token's logits row as llama.cpp computed it (llama-cpp-python copies it only with logits_all)
        row = np.ctypeslib.as_array(self.llm._ctx.get_logits(), shape=(self.llm.n_vocab(),))
        return torch.from_numpy(row.copy())

    def decode(self, prompt: list[int], steps: list[int]) -> None:
        self.llm.reset()
        self.llm.eval(prompt)
        for t in steps:
            self.llm.eval([t])


def run(args) -> list[tuple[str, float, float]]:
    from tests.assets import smollm2_dir
    from tests.assets_gguf import smollm2_converted_gguf
    import llama_cpp

    torch.set_num_threads(args.threads)
    hf_dir, gguf = smollm2_dir(), smollm2_converted_gguf(GGUF_TYPES[args.dtype])
    ours = Ours(Engine.from_pretrained(hf_dir, dtype=args.dtype))
    theirs = LlamaCpp(gguf, args.threads, n_ctx=1024)
    gen = torch.Generator().manual_seed(0)
    vocab = ours.engine.config.vocab_size
    prefill_ids = torch.randint(0, vocab, (args.prefill_tokens,), generator=gen).tolist()
    prompt, steps = prefill_ids[:64], torch.randint(0, vocab, (args.decode_steps,), generator=gen).tolist()

    a, b = ours.prefill(prompt), theirs.prefill(prompt)      # warm-up, and the same model on both sides?
    print(f"model {hf_dir.name} / {gguf.name}, {args.dtype}, {args.threads} thread(s), llama-cpp-python "
          f"{llama_cpp.__version__}, best of {args.repeats} interleaved rounds")
    print(f"same logits: max |ours - llama.cpp| on a 64-token prompt's last row = {(a - b).abs().max().item():.2e} "
          f"(argmax {int(a.argmax())} vs {int(b.argmax())})")
    print(f"{'workload':<26}{'ours tok/s':>12}{'llama.cpp tok/s':>17}{'ratio':>8}{'ratio (CPU time)':>18}")
    rows = []
    workloads = (
        (f"decode batch 1 ({len(steps)} steps)", len(steps),
         {"ours": lambda: ours.decode(prompt, steps), "llama.cpp": lambda: theirs.decode(prompt, steps)},
         # the decode rounds include the 64-token prompt: measured alone below and subtracted
         {"ours": lambda: ours.prefill(prompt), "llama.cpp": lambda: theirs.prefill(prompt)}),
        (f"prefill {len(prefill_ids)} tokens", len(prefill_ids),
         {"ours": lambda: ours.prefill(prefill_ids), "llama.cpp": lambda: theirs.prefill(prefill_ids)}, None),
    )
    for name, tokens, fns, setup in workloads:
        best = best_interleaved(fns, args.repeats)
        if setup is not None:
            base = best_interleaved(setup, args.repeats)
            best = {k: (best[k][0] - base[k][0], best[k][1] - base[k][1]) for k in best}
        (w_ours, c_ours), (w_cpp, c_cpp) = best["ours"], best["llama.cpp"]
        cpu_ratio = f"{c_cpp / c_ours:>17.2f}x" if args.threads == 1 else f"{'(1 thread only)':>18}"
        rows.append((name, tokens / w_ours, tokens / w_cpp))
        print(f"{name:<26}{tokens / w_ours:>12.1f}{tokens / w_cpp:>17.1f}{w_cpp / w_ours:>7.2f}x{cpu_ratio}",
              flush=True)
    return rows


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dtype", default="float32", choices=tuple(GGUF_TYPES))
    parser.add_argument("--threads", type=int, default=torch.get_num_threads())
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--decode-steps", type=int, default=64)
    parser.add_argument("--prefill-tokens", type=int, default=512)
    run(parser.parse_args(argv))


if __name__ == "__main__":
    main()
