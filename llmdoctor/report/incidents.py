"""The published 2025-2026 incidents where a model loaded and a server answered 200 while the answers were wrong,
findable by the symptom users wrote ("repeats the question", "tool call missing in stream").

Each entry is a `Signature` whose patterns are the symptom in users' words, whose checks are the ids that catch it
and whose references are the public reports (tracker#number). docs/incidents.md lists the same incidents with the
command that shows each; `tests/llmdoctor/report/test_incidents.py` keeps the two in step.
"""
from __future__ import annotations

from llmdoctor.report.signatures import Signature

# ---- files and conversion --------------------------------------------------------------------------
FILES: tuple[Signature, ...] = (
)


# ---- chat templates and the serving chain ----------------------------------------------------------
CHAT: tuple[Signature, ...] = (
    Signature(
        "generation-config-overrides-request-defaults",
        "vLLM ignores my sampling parameters: temperature / top_k from generation_config.json",
        (r"(temperature|top[_ ]?[kp]|sampling param\w*|repetition[_ ]penalty)\W+(\w+\W+){0,4}(is |are |seems? "
         r"(to be )?)?(ignored|not (honou?red|respected|applied))",
         r"generation[_ ]config\W+(\w+\W+){0,6}(overrid\w+|overwrit\w+|override)",
         r"default sampling param\w* (have been |were )?overridden"),
        ("vLLM's --generation-config auto (its default since 0.8) makes generation_config.json's temperature, "
         "top_k, top_p, min_p and repetition_penalty the defaults of every request that leaves them out",
         "a client that sends only temperature (the OpenAI fields) gets the model card's top_k / "
         "repetition_penalty, which change even greedy answers"),
        checks=("EPT032",),
        probes=("llmdoctor probe endpoint URL --model MODEL_DIR --select EPT032",),
        immediate="send every sampling field in each request, or start vLLM with --generation-config vllm",
        references=("vllm#15241", "vllm#15281", "vllm#17075"),
    ),
)


# ---- serving configurations that change answers ----------------------------------------------------
SERVING: tuple[Signature, ...] = (
)


INCIDENTS: tuple[Signature, ...] = FILES + CHAT + SERVING
