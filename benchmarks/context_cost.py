"""What the long-context reading costs: wall time of `llmdoctor check --context N` beside
`check --quick` on SmolLM2-135M and Gemma 3 270M, and of `probe endpoint --context N` on llama.cpp's
llama-server serving SmolLM2's Q4_1 GGUF, and on llama-cpp-python's server, the one that gives prompt logprobs:
with --model it is read by its echo, without by greedy retrieval (the echo needs the BOS text only --model names);
and on vLLM (the float32 directory, tests/vllm_server.py), whose prompt logprobs come from the forward pass;
with the peak resident memory of each check run (the chunked prefill keeps it linear in N).

    python benchmarks/context_cost.py [--tokens 4096] [--skip-server] [--servers-only]
    python benchmarks/context_cost.py --scaling 4096 8192     # the CTX run at each N side by side, ratios printed

Each command runs in a fresh process (python -m llmdoctor ...), so the times are what a user waits for.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


READINGS: list[str] = []      # CTX003 / EPT122 lines, printed under the table


def timed(args: list[str]) -> tuple[float, float, int, float]:
    """(wall seconds, peak RSS of this run's process in MiB, exit code, its CPU seconds); the run's CTX/EPT
    messages are kept in READINGS. The peak is the child's own (wait4's rusage), not a running maximum."""
    started = time.perf_counter()
    child = subprocess.Popen([sys.executable, "-m", "llmdoctor", *args], cwd=ROOT, stdout=subprocess.PIPE,
                             stderr=subprocess.DEVNULL, text=True)
    out = child.stdout.read()
    _, status, usage = os.wait4(child.pid, 0)
    child.returncode = os.waitstatus_to_exitcode(status)
    wall = time.perf_counter() - started
    try:
        READINGS.extend(f"{f['check']} ({args[1]}): {f['message']}" for f in json.loads(out)["findings"]
                        if f["check"] in ("CTX001", "CTX002", "CTX003", "EPT122", "EPT123"))
    except (ValueError, KeyError, TypeError):
        pass
    return wall, usage.ru_maxrss / 1024, child.returncode, usage.ru_utime + usage.ru_stime


def scaling_rows(path: Path, name: str, sizes: tuple[int, ...]) -> None:
    """The CTX run at each size side by side: a chunked prefill holds one chunk's logits and a chunk x context
    attention block, so its peak grows with N (the KV cache), not N squared; the time grows faster (each chunk
    attends over all the context before it)."""
    print("\n| check --select CTX --context N | model | wall s | CPU s | peak RSS MiB (this run) | exit |")
    print("|---|---|---|---|---|---|")
    rows = []
    for tokens in sizes:
        wall, peak, code, cpu = timed(["check", str(path), "--format", "json", "--select", "CTX", "--context",
                                       str(tokens)])
        rows.append((tokens, wall, cpu, peak))
        print(f"| {tokens} | {name} | {wall:.1f} | {cpu:.1f} | {peak:.0f} | {code} |", flush=True)
    (small, w0, c0, p0), (large, w1, c1, p1) = rows[0], rows[-1]
    print(f"\n{large}/{small} tokens = {large / small:.1f}x: peak RSS {p1 / p0:.2f}x, CPU time {c1 / c0:.2f}x, "
          f"wall time {w1 / w0:.2f}x (quadratic memory would be {(large / small) ** 2:.0f}x)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokens", type=int, default=4096)
    parser.add_argument("--skip-server", action="store_true")
    parser.add_argument("--servers-only", action="store_true")
    parser.add_argument("--scaling", type=int, nargs="*", default=None, metavar="N",
                        help="only the CTX run on SmolLM2 at each N side by side (e.g. 4096 8192), with ratios")
    args = parser.parse_args()
    from tests import assets
    if args.scaling:
        scaling_rows(assets.smollm2_dir(), "SmolLM2-135M", tuple(args.scaling))
        print("\n" + "\n".join(f"- {line}" for line in READINGS))
        return
    models = {"SmolLM2-135M": assets.smollm2_dir(), "Gemma 3 270M": assets.gemma3_270m_dir()}
    print("| command | model | wall s | peak RSS MiB (this run) | exit |")
    print("|---|---|---|---|---|")
    if not args.servers_only:
        check_rows(models["SmolLM2-135M"], "SmolLM2-135M", args.tokens)
    if not args.skip_server:
        server_rows(assets.smollm2_gguf(), models["SmolLM2-135M"], args.tokens)
    if not args.servers_only:
        check_rows(models["Gemma 3 270M"], "Gemma 3 270M", args.tokens)
    print("\n" + "\n".join(f"- {line}" for line in READINGS))


def check_rows(path: Path, name: str, tokens: int) -> None:
    for label, extra in ((f"check --select CTX --context {tokens}", ["--select", "CTX", "--context", str(tokens)]),
                         ("check --quick", ["--quick"])):
        wall, peak, code, _ = timed(["check", str(path), "--format", "json", *extra])
        print(f"| {label} | {name} | {wall:.1f} | {peak:.0f} | {code} |", flush=True)


def server_rows(gguf: Path, model: Path, tokens: int) -> None:
    from tests.endpoint_assets import LlamaServer
    from tests.load_servers import LlamaCppServer
    from tests.vllm_server import VllmServer
    for name, start in (("llama-server SmolLM2 Q4_1", lambda: LlamaCppServer(gguf, parallel=1, ctx=tokens).start()),
                        ("llama-cpp-python SmolLM2 Q4_1",
                         lambda: LlamaServer(gguf, "--n_ctx", str(max(tokens, 2048))).start()),
                        ("vLLM SmolLM2 float32", lambda: VllmServer(model).start())):
        server = start()
        try:
            for label, extra in ((f"probe endpoint --context {tokens}", []),
                                 (f"probe endpoint --context {tokens} --model", ["--model", str(model)])):
                wall, peak, code, _ = timed(["probe", "endpoint", server.url, "--context", str(tokens), "--select",
                                          "EPT121,EPT122,EPT123", "--timeout", "600", "--format", "json", *extra])
                print(f"| {label} | {name} | {wall:.1f} | {peak:.0f} | {code} |", flush=True)
        finally:
            server.stop()


if __name__ == "__main__":
    main()
