"""The published 2025-2026 incidents where a model loaded and a server answered 200 while the answers were wrong,
findable by the symptom users wrote ("repeats the question", "tool call missing in stream").

Each entry is a `Signature` whose patterns are the symptom in users' words, whose checks are the ids that catch it
and whose references are the public reports (tracker#number). docs/incidents.md lists the same incidents with the
command that shows each; `tests/llmdoctor/report/test_incidents.py` keeps the two in step.
"""
from __future__ import annotations

from llmdoctor.report.signature_types import Signature

# ---- files and conversion --------------------------------------------------------------------------
FILES: tuple[Signature, ...] = (
)


# ---- chat templates and the serving chain ----------------------------------------------------------
CHAT: tuple[Signature, ...] = (
)


# ---- serving configurations that change answers ----------------------------------------------------
SERVING: tuple[Signature, ...] = (
    Signature(
        "kv-cache-quantized", "Answers degrade or turn to gibberish with a quantized KV cache",
        (r"(kv|k/v)[ -]?cache[^.\n]{0,60}(q4_0|q8_0|q4|q8|fp8|quantiz)", r"(q4_0|q8_0|fp8|quantized)[^.\n]{0,40}"
         r"(kv|k/v)[ -]?cache", r"cache[-_]type[-_][kv]", r"kv[-_]cache[-_]dtype"),
        ("a KV cache quantized to 4 bits (llama-server -ctk/-ctv q4_0, OLLAMA_KV_CACHE_TYPE=q4_0) moves the "
         "logprobs measurably and changes greedy answers; q8_0 stays near f16 on a healthy build",
         "a backend's quantized-cache kernel broken for this model or device (gibberish past some length)"),
        ("EPT043",), ("llmdoctor probe endpoint URL --model MODEL_DIR --select EPT043",),
        "serve the same model with an f16 cache and compare the EPT043 windows",
        ("ollama/ollama#17614", "ggml-org/llama.cpp#23044", "ggml-org/llama.cpp#23717")),
    Signature(
        "batch-variant-greedy", "The same temperature-0 request answers differently when others run at once",
        (r"(different|changes?|diverg)[^.\n]{0,60}(concurrent|batch(ed)? (size|composition)|in parallel|batched)",
         r"(concurrent|batched|batch size)[^.\n]{0,60}(different|changes?|diverg|not deterministic)",
         r"batch invarian"),
        ("batch-shape arithmetic: another batch size sums in another order and flips a near tie",
         "state leaking between requests batched together (a real difference, not a near tie)"),
        ("EPT044",), ("llmdoctor probe endpoint URL --model MODEL_DIR --select EPT044",),
        "send the request alone and among others; serve with one slot (-np 1) to confirm",
        ("jundot/omlx#3476", "Blaizzy/mlx-vlm#2242")),
    Signature(
        "speculative-changes-output", "Speculative decoding changes the output at temperature 0",
        (r"speculative[^.\n]{0,80}(diverg|differ|chang|not identical|wrong)",
         r"(draft model|draft-model|-md |ngram|lookup decoding)[^.\n]{0,60}(diverg|differ|chang)"),
        ("drafted tokens accepted without the target's verification (a benchmarking switch such as llama-server "
         "--spec-synth-rates, or a broken acceptance rule)",
         "verification batches computing other numbers than one-token decoding (near ties only)"),
        ("EPT045",), ("llmdoctor probe endpoint URL --model MODEL_DIR --select EPT045",),
        "serve without the draft and compare; `llmdoctor diff URL_A URL_B` compares the two servers",
        ("ml-explore/mlx-lm#1423", "ml-explore/mlx-lm#1470")),
    Signature(
        "prompt-cache-changes-logprobs", "A warm prompt cache gives other logprobs than a cold one",
        (r"(prompt|prefix)[ _-]?cach[^.\n]{0,80}(differ|chang|mismatch|diverg)",
         r"(warm|cold)[^.\n]{0,40}(cache)[^.\n]{0,60}(differ|chang|mismatch)", r"cache_prompt"),
        ("the cached prefix and the recomputed suffix summed in other batch shapes than a cold prefill "
         "(scores move; a near tie can flip)",
         "a prefix cache that reuses state it should not (a real difference)"),
        ("EPT084",), ("llmdoctor probe endpoint URL --model MODEL_DIR --select EPT084",),
        "send the same request with the cache off once and on twice (llama.cpp: cache_prompt false/true)",
        ("ggml-org/llama.cpp#28368",)),
)


INCIDENTS: tuple[Signature, ...] = FILES + CHAT + SERVING
