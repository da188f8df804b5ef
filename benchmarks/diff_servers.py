"""`llmdoctor diff URL_A URL_B` on real servers of one GGUF (SmolLM2-135M-Instruct Q4_1): llama.cpp's llama-server
with its default flash attention (-fa auto) and with -fa off, each against llama-cpp-python (plain attention),
and llama-server against llama-cpp-python with the blocks stored in reverse order. Prints, per pair, the two
KL means, the largest KL, the greedy answers that part (token, both margins) and the prompt counts: the numbers
in docs/diff.md "Two servers".

    python3 benchmarks/diff_servers.py [--prompts 4] [--max-tokens 24]
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from checks.diff.servers.inputs import ServerOptions  # noqa: E402
from llmdoctor.run.server_diff import ServerDiffOptions, run_server_diff  # noqa: E402
from tests.assets import smollm2_gguf  # noqa: E402
from tests.checks.endpoint.broken_ggufs import broken_gguf  # noqa: E402
from tests.endpoint_assets import LlamaServer  # noqa: E402
from tests.load_servers import LlamaCppServer  # noqa: E402

SELECT = ["DIF070", "DIF071", "DIF072"]


def summary(name: str, report, seconds: float) -> None:
    kl = report.findings_for("DIF071")
    kl = kl[0].evidence if kl else {}
    parted = [f for f in report.findings if f.check == "DIF070" and "step" in f.evidence]
    counts = report.findings_for("DIF072")
    print(f"{name}: KL ref||cand {kl.get('mean_kld')}, cand||ref {kl.get('mean_kld_reversed')}, max "
          f"{kl.get('max_kld')} over {kl.get('positions')} positions; {len(parted)} answers part; "
          f"counts: {counts[0].message if counts else '-'} ({seconds:.1f} s)")
    for f in parted:
        print(f"    {f.severity.value}: {f.message}")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--prompts", type=int, default=4)
    parser.add_argument("--max-tokens", type=int, default=24)
    args = parser.parse_args()
    options = ServerDiffOptions(ServerOptions(args.prompts, args.max_tokens), timeout_s=300)
    gguf = smollm2_gguf()
    servers = {"llama-server (-fa auto)": LlamaCppServer(gguf, parallel=1, ctx=2048),
               "llama-server -fa off": LlamaCppServer(gguf, "-fa", "off", parallel=1, ctx=2048),
               "llama-cpp-python": LlamaServer(gguf),
               "llama-cpp-python, layers reversed": LlamaServer(broken_gguf(gguf, "layers-reversed"))}
    started = []
    try:
        for server in servers.values():
            started.append(server.start())
        url = {name: server.url for name, server in servers.items()}
        for a, b in (("llama-server (-fa auto)", "llama-cpp-python"), ("llama-server -fa off", "llama-cpp-python"),
                     ("llama-server (-fa auto)", "llama-cpp-python, layers reversed")):
            t = time.perf_counter()
            report = run_server_diff(url[a], url[b], options, select=SELECT)
            summary(f"{a} vs {b}", report, time.perf_counter() - t)
    finally:
        for server in started:
            server.stop()


if __name__ == "__main__":
    main()
