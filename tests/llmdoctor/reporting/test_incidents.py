"""`llmdoctor explain "<symptom>"` finds each published incident by the words users wrote, and docs/incidents.md lists
the same incidents with the same checks and reports (llmdoctor/reporting/incidents.py)."""
from __future__ import annotations

from pathlib import Path

import pytest

from llmdoctor.reporting.explain_text import explain
from llmdoctor.reporting.incidents import CHAT, FILES, SERVING
from llmdoctor.reporting.signatures import match_signatures, render_explanation

DOCS = Path(__file__).resolve().parents[3] / "docs" / "incidents.md"
DOC = DOCS.read_text()

SERVING_SYMPTOMS = {
    "kv-cache-quantized": "after switching the KV cache to q4_0 the model answers AI AI AI",
    "batch-variant-greedy": "identical temperature=0 requests return different completions when concurrent",
    "speculative-changes-output": "speculative decoding diverges from non-speculative output at temperature 0",
    "prompt-cache-changes-logprobs": "prompt caching returns different logprobs for the same request warm vs cold",
}


@pytest.mark.parametrize("slug, symptom", SERVING_SYMPTOMS.items())
def test_serving_incidents_found_by_their_symptom(slug, symptom):
    text, code = explain(symptom)
    assert code == 0 and text.startswith(f"[{slug}]"), text


def test_serving_incidents_listed_in_the_doc():
    section = DOC.split("## Serving configurations that change answers", 1)[1]
    assert {s.id for s in SERVING} == set(SERVING_SYMPTOMS)
    for signature in SERVING:
        for reference in signature.references:
            assert reference in section, reference
        for check_id in signature.checks:
            assert f"`{check_id}`" in section, check_id


# ---- files and conversion --------------------------------------------------------------------------
FILES_SYMPTOMS = {
    "long prompts turn to gibberish after 32k tokens in the GGUF": "rope-scaling-lost-in-conversion",
    "yarn not written by convert_hf_to_gguf": "rope-scaling-lost-in-conversion",
    "attention_factor ignored: logits off by 27 %": "yarn-attention-factor-ignored",
    "worse answers on short prompts after enabling YaRN": "static-yarn-on-short-prompts",
    "the model repeats the question": "bos-missing",
    "add_bos_token is false in the gguf": "bos-missing",
    "double BOS at the start of the prompt": "bos-doubled",
    "GLM's [gMASK]<sop> preamble is missing with --jinja": "bos-stripped-as-duplicate",
    "llama-server strips [gMASK] from the prompt": "bos-stripped-as-duplicate",
    "<|im_end|> shows up in the output and the model never stops": "turn-token-typed-as-text",
    "tie_word_embeddings is false but there is no lm_head, random head": "tied-head-mismatch",
    "different tokens in llama.cpp than in transformers": "pre-tokenizer-regex-mismatch",
}


@pytest.mark.parametrize("symptom", sorted(FILES_SYMPTOMS))
def test_files_incidents_found_by_their_symptom(symptom):
    assert FILES_SYMPTOMS[symptom] in [s.id for s in match_signatures(symptom)]
    text, code = explain(symptom)
    assert code == 0 and f"[{FILES_SYMPTOMS[symptom]}]" in text, text


def test_files_incidents_listed_in_the_doc():
    section = DOC.split("## Files and conversion", 1)[1].split("\n## ", 1)[0]
    assert {s.id for s in FILES} == set(FILES_SYMPTOMS.values())
    for signature in FILES:
        for reference in signature.references:
            assert reference in section, reference
        for check_id in signature.checks:
            assert f"`{check_id}`" in section, check_id


# ---- chat templates and the chain ------------------------------------------------------------------

def test_generation_config_override_is_found_by_its_symptoms():
    """vLLM's --generation-config auto (EPT032): the symptom as users wrote it in vllm#15241 and #15281."""
    signature = next(s for s in CHAT if s.id == "generation-config-overrides-request-defaults")
    for words in ("Temperature is ignored in vLLM 0.8.0", "my top_k seems to be ignored by the server",
                  "WARNING Default sampling parameters have been overridden by the model's huggingface "
                  "generation config"):
        assert signature in match_signatures(words), words
    assert "EPT032" in render_explanation("temperature is ignored")
    assert not match_signatures("the temperature in Paris is 20 degrees")
    row = next(line for line in DOCS.read_text().splitlines() if "vllm#15241" in line)
    assert "EPT032" in row and "--select EPT032" in row


CHAT_SYMPTOMS = {
    "system-message-dropped": ("system prompt ignored", "my second system message is dropped"),
    "tool-call-missing-in-stream": ("tool call missing in stream",),
    "tool-calls-finish-empty": ("finish_reason is tool_calls but tool_calls is an empty list",),
    "tool-call-history-id": ("the next turn ends stop with no call", "ids like call00003 in the history"),
    "tool-call-arguments-empty": ("arguments come back as {} although the model wrote a city",),
    "zero-argument-call-lost": ("zero-argument tool call is lost",),
    "thinking-off-answer-in-reasoning": ("with enable_thinking false the content is null",),
}


@pytest.mark.parametrize("slug, symptom", [(s, w) for s, words in CHAT_SYMPTOMS.items() for w in words])
def test_chat_incidents_found_by_their_symptom(slug, symptom):
    text, code = explain(symptom)
    assert code == 0 and text.startswith(f"[{slug}]"), text


def test_chat_incidents_listed_in_the_doc():
    section = DOC.split("## Chat templates and the serving chain", 1)[1].split("\n## ", 1)[0]
    chain = [s for s in CHAT if s.id in CHAT_SYMPTOMS]
    assert {s.id for s in chain} == set(CHAT_SYMPTOMS)
    for signature in chain:
        for reference in signature.references:
            assert reference in section, reference
        for command in signature.confirm_commands():
            assert command.split("--select ")[1].split(",")[0] in section, command
