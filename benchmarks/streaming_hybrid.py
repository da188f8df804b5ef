"""What streaming a hybrid costs per layer: a Qwen3-Next (Gated DeltaNet and gated attention layers, MoE MLPs)
built by transformers at a size where it shows in a minute, run resident and streamed under a memory budget 8 %
below its weights (the plan chooses streaming), the same passes on both: one prefill and a few decode steps, as
`check`'s greedy traces make them. Prints, per pass and per layer, the streamed time against the resident time
measured in the same process, and the bytes a streamed pass read against the weight files.

    python benchmarks/streaming_hybrid.py [--hidden 512] [--layers 16] [--experts 16] [--decode 3] [--threads 2]
                                          [--check]

--check also runs `llmdoctor check` on the model under the same budget, as a user would (OMP_WAIT_POLICY unset),
and prints its wall time, the passes it made and what each read.

Each measurement runs in a child process under each OpenMP wait policy: "spin" imports torch before llmdoctor
(libgomp reads OMP_WAIT_POLICY when torch loads, so its default, waiters that spin, stays: what every run did
before llmdoctor set PASSIVE), "passive" imports llmdoctor first (reference_engine/threads.py). On a machine whose
cores are all busy a spinning waiter holds its core while the thread it waits for cannot run, and a MoE layer is
thousands of small parallel ops; the streaming core's read-ahead thread is one more thread on the same cores.
The machine's load average is printed beside the numbers: they mean nothing without it.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
POLICIES = ("spin", "passive")


def build_model(out: Path, hidden: int, layers: int, experts: int) -> Path:
    """A random Qwen3-Next (every 4th layer full attention, every layer MoE) saved by transformers, with the test
    factory's tokenizer beside it (what `llmdoctor check` reads whole)."""
    import torch
    import transformers
    from safetensors.torch import load_file
    from reference_engine.testing import factory
    tok = factory.tokenizer_json()
    ids = factory.special_ids(tok)
    config = transformers.Qwen3NextConfig(
        vocab_size=factory.tokenizer_length(tok), bos_token_id=ids[factory.BOS], eos_token_id=ids[factory.IM_END],
        pad_token_id=ids[factory.PAD], hidden_size=hidden, num_hidden_layers=layers, num_attention_heads=8,
        num_key_value_heads=2, head_dim=64, intermediate_size=2 * hidden, linear_num_key_heads=4,
        linear_num_value_heads=8, linear_key_head_dim=64, linear_value_head_dim=64, linear_conv_kernel_dim=4,
        num_experts=experts, num_experts_per_tok=4, moe_intermediate_size=hidden // 2,
        shared_expert_intermediate_size=hidden, full_attention_interval=4, max_position_embeddings=4096)
    torch.manual_seed(0)
    transformers.Qwen3NextForCausalLM(config).save_pretrained(out, safe_serialization=True)
    raw = json.loads((out / "config.json").read_text())
    factory.write_model_dir(out, raw, tok, dict(load_file(out / "model.safetensors")))
    return out


def check_run(model: Path, budget: int, env: dict) -> None:
    """`llmdoctor check MODEL --memory-budget B` as a user runs it: wall time, the passes it made, each pass's
    mean time and bytes."""
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "report.json"
        load = "load average %.1f %.1f %.1f" % os.getloadavg()
        started = time.perf_counter()
        done = subprocess.run([sys.executable, "-m", "llmdoctor", "check", str(model), "--no-config",
                               "--memory-budget", str(budget), "--format", "json", "-o", str(out)],
                              capture_output=True, text=True, env=env, cwd=ROOT)
        wall = time.perf_counter() - started
        if not out.exists():
            print(f"\ncheck: no report (exit {done.returncode})\n{done.stderr[-2000:]}")
            return
        plan = json.loads(out.read_text())["plan"]
    actual = plan["actual"]
    print(f"\ncheck --memory-budget {budget / 2**20:.0f} MiB ({load}): {plan['mode']}, {wall:.1f} s wall, "
          f"{actual['passes']} passes (the plan counted {plan['passes']}), "
          f"{actual['bytes_read'] / max(1, actual['passes']) / 2**20:.1f} MiB read per pass, "
          f"peak {actual['peak_bytes'] / 2**20:.0f} MiB")


def weight_bytes(model: Path) -> int:
    return sum(p.stat().st_size for p in model.glob("*.safetensors"))


def run_passes(engine, prompt: list[int], decode: int) -> list[float]:
    """Seconds of each pass: a prefill of the prompt, then `decode` greedy steps."""
    times = []
    with engine.scratch() as (seq,):
        started = time.perf_counter()
        token = int(engine.prefill([seq], [prompt])[0].argmax())
        times.append(time.perf_counter() - started)
        for _ in range(decode):
            started = time.perf_counter()
            token = int(engine.decode([seq], [token])[0].argmax())
            times.append(time.perf_counter() - started)
    return times


def child(args) -> dict:
    """One policy's measurement: resident and streamed passes in this process."""
    if args.policy == "spin":
        import torch                                       # noqa: F401  (loads libgomp before llmdoctor can)
    import llmdoctor                                       # noqa: F401  (sets OMP_WAIT_POLICY when torch is not loaded)
    import torch
    from reference_engine.engine_builder import EngineSpec, build_engine
    from reference_engine.budget.plan import Workload
    from reference_engine.core import CoreEngine
    torch.set_num_threads(args.threads)
    model, layers = Path(args.model), args.layers
    prompt = list(range(5, 5 + args.prompt))
    budget = int(weight_bytes(model) * 0.92)
    workload = Workload("bench", 1 + args.decode, args.prompt, args.prompt, args.prompt + args.decode + 16)
    built = build_engine(EngineSpec(model, workload=workload, memory_budget=budget))
    core = built.engine.core
    stamps: list[float] = []
    core.on_layer = lambda done, total, nbytes: stamps.append(time.perf_counter())
    run_passes(built.engine, prompt, 0)                   # warm: buffers allocated, pages touched
    core.reader.bytes_read, passes0, stamps[:] = 0, core.passes, []
    streamed = run_passes(built.engine, prompt, args.decode)
    per_layer = [b - a for a, b in zip(stamps, stamps[1:]) if len(stamps) > 1]
    resident_engine = CoreEngine.from_pretrained(model)
    run_passes(resident_engine, prompt, 0)
    resident = run_passes(resident_engine, prompt, args.decode)
    return {"policy": args.policy, "streaming": built.plan.streaming, "budget": budget,
            "predicted_peak": built.plan.predicted_peak_bytes, "passes": core.passes - passes0,
            "bytes_per_pass": core.reader.bytes_read / max(1, core.passes - passes0),
            "streamed": streamed, "resident": resident, "per_layer": per_layer[:layers - 1], "layers": layers}


def report(result: dict, file_bytes: int, load: str) -> None:
    s, r = result["streamed"], result["resident"]
    sd, rd = sum(s[1:]) / max(1, len(s) - 1), sum(r[1:]) / max(1, len(r) - 1)
    layer_ms = 1000 * sum(result["per_layer"]) / max(1, len(result["per_layer"]))
    print(f"\n{result['policy']} waiters ({load}); plan streams: {result['streaming']}, budget "
          f"{result['budget'] / 2**20:.0f} MiB, predicted peak {result['predicted_peak'] / 2**20:.0f} MiB")
    print(f"  prefill pass   resident {r[0]:7.3f} s  streamed {s[0]:7.3f} s  ratio {s[0] / r[0]:6.1f}x")
    print(f"  decode pass    resident {rd:7.3f} s  streamed {sd:7.3f} s  ratio {sd / rd:6.1f}x")
    print(f"  per layer      resident {1000 * (r[0] + sum(r[1:])) / len(r) / result['layers']:7.1f} ms "
          f"streamed {layer_ms:7.1f} ms (first layer of the prefill pass to the next, mean)")
    print(f"  bytes read per pass {result['bytes_per_pass'] / 2**20:.1f} MiB = "
          f"{result['bytes_per_pass'] / file_bytes:.3f} x the weight files ({result['passes']} passes)")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--hidden", type=int, default=512)
    ap.add_argument("--layers", type=int, default=16)
    ap.add_argument("--experts", type=int, default=16)
    ap.add_argument("--prompt", type=int, default=64)
    ap.add_argument("--decode", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--check", action="store_true", help="also run `llmdoctor check` under the budget")
    ap.add_argument("--policy", choices=POLICIES, default=None, help=argparse.SUPPRESS)     # a child's
    ap.add_argument("--model", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.policy is not None:
        print(json.dumps(child(args)))
        return 0
    with tempfile.TemporaryDirectory(prefix="streaming-hybrid-") as tmp:
        model = build_model(Path(tmp) / "qwen3next", args.hidden, args.layers, args.experts)
        file_bytes = weight_bytes(model)
        print(f"Qwen3-Next hidden {args.hidden}, {args.layers} layers, {args.experts} experts: "
              f"{file_bytes / 2**20:.0f} MiB of weights; {args.threads} intra-op threads, {os.cpu_count()} cores")
        env = {k: v for k, v in os.environ.items() if k != "OMP_WAIT_POLICY"}
        env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")])
        for policy in POLICIES:
            load = "load average %.1f %.1f %.1f" % os.getloadavg()
            cmd = [sys.executable, __file__, "--policy", policy, "--model", str(model),
                   *[f"--{k}={getattr(args, k)}" for k in ("layers", "prompt", "decode", "threads")]]
            done = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=ROOT)
            if done.returncode != 0:
                print(f"{policy}: the child failed\n{done.stderr[-2000:]}")
                return 1
            report(json.loads(done.stdout.strip().splitlines()[-1]), file_bytes, load)
        if args.check:
            check_run(model, int(file_bytes * 0.92), env)
    return 0


if __name__ == "__main__":
    sys.exit(main())
