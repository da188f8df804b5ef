"""What the long-context reading costs (issue 40 ask 4): wall time of `llmdoctor check --context N` beside
`check --quick` on SmolLM2-135M and Gemma 3 270M, and of `probe endpoint --context N` on llama.cpp's
llama-server serving SmolLM2's Q4_1 GGUF, and on llama-cpp-python's server, the one that gives prompt logprobs:
with --model it is read by its echo, without by greedy retrieval (the echo needs the BOS text only --model names);
with the peak resident memory of each check run (the chunked prefill keeps it linear in N).

    python benchmarks/context_cost.py [--tokens 4096] [--skip-server] [--servers-only]

Each command runs in a fresh process (python -m llmdoctor ...), so the times are what a user waits for.
"""
from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


READINGS: list[str] = []      # CTX003 / EPT122 lines, printed under the table


def timed(args: list[str]) -> tuple[float, float, int]:
    """(wall seconds, peak RSS of the child in MiB, exit code); the run's CTX003 message is kept in READINGS."""
    started = time.perf_counter()
    before = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    done = subprocess.run([sys.executable, "-m", "llmdoctor", *args], cwd=ROOT, capture_output=True, text=True)
    wall = time.perf_counter() - started
    peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    try:
        READINGS.extend(f"{f['check']} ({args[1]}): {f['message']}" for f in json.loads(done.stdout)["findings"]
                        if f["check"] in ("CTX001", "CTX002", "CTX003", "EPT122", "EPT123"))
    except (ValueError, KeyError, TypeError):
        pass
    return wall, max(peak, before) / 1024, done.returncode


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokens", type=int, default=4096)
    parser.add_argument("--skip-server", action="store_true")
    parser.add_argument("--servers-only", action="store_true")
    args = parser.parse_args()
    from tests import assets
    models = {"SmolLM2-135M": assets.smollm2_dir(), "Gemma 3 270M": assets.gemma3_270m_dir()}
    print("| command | model | wall s | peak RSS MiB (largest so far) | exit |")
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
        wall, peak, code = timed(["check", str(path), "--format", "json", *extra])
        print(f"| {label} | {name} | {wall:.1f} | {peak:.0f} | {code} |", flush=True)


def server_rows(gguf: Path, model: Path, tokens: int) -> None:
    from tests.endpoint_assets import LlamaServer
    from tests.load_servers import LlamaCppServer
    for name, start in (("llama-server", lambda: LlamaCppServer(gguf, parallel=1, ctx=tokens).start()),
                        ("llama-cpp-python", lambda: LlamaServer(gguf, "--n_ctx", str(max(tokens, 2048))).start())):
        server = start()
        try:
            for label, extra in ((f"probe endpoint --context {tokens}", []),
                                 (f"probe endpoint --context {tokens} --model", ["--model", str(model)])):
                wall, peak, code = timed(["probe", "endpoint", server.url, "--context", str(tokens), "--select",
                                          "EPT121,EPT122,EPT123", "--timeout", "600", "--format", "json", *extra])
                print(f"| {label} | {name} SmolLM2 Q4_1 | {wall:.1f} | {peak:.0f} | {code} |", flush=True)
        finally:
            server.stop()


if __name__ == "__main__":
    main()
