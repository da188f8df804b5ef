"""Regenerate recordings/*.json: answers in each server's documented shape, for SmolLM2-135M-Instruct's ids.

Shapes: vLLM (docs: OpenAI-compatible server, /tokenize: {count, max_model_len, tokens, token_strs}, /detokenize:
{prompt}; /v1/models
entries carry max_model_len), llama.cpp tools/server/README.md (/props default_generation_settings{n_ctx, params},
/apply-template {prompt}, /tokenize {tokens}), TGI (GET /info {model_id, max_input_tokens, max_total_tokens},
POST /tokenize [{id, text, start, stop}]), Ollama docs/api.md (/api/version, /api/show {parameters, template,
model_info}, /api/generate {response, done_reason, prompt_eval_count, eval_count}). Each recording carries one
incident (see FAULTS). Run: python -m tests.probes.endpoint.make_recordings SMOLLM2_DIR
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

from checks.endpoint.inputs import COMPLETION_PROMPT, CONVERSATIONS, RAW_TEXTS
from checks.endpoint.reference import Reference

OUT = Path(__file__).parent / "recordings"
MODEL = "HuggingFaceTB/SmolLM2-135M-Instruct"
FAULTS = {"vllm": "double BOS: /tokenize of chat messages starts with BOS twice (vllm#16853)",
          "llamacpp": "built-in chatml template (no default system turn); /props defaults override generation_config",
          "tgi": "special tokens not recognised by /tokenize; max_total_tokens past the trained context",
          "ollama": "Modelfile stop set without <|im_end|> (ollama#3759); rope base differs from the model's"}


def chat_answer(prompt_tokens: int, text="Paris.", finish="stop") -> dict:
    return {"id": "chatcmpl-1", "object": "chat.completion", "created": 1764547200, "model": MODEL,
            "choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "logprobs": None,
                         "finish_reason": finish}],
            "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": 2, "total_tokens": prompt_tokens + 2}}


def chat_exchanges(counts: dict[str, int]) -> list[dict]:
    return [{"method": "POST", "route": "/v1/chat/completions", "match": {"messages": CONVERSATIONS[n]},
             "response": chat_answer(c)} for n, c in counts.items()]


def vllm(ref: Reference) -> list[dict]:
    ex = [{"method": "GET", "route": "/v1/models", "response": {"object": "list", "data": [
        {"id": MODEL, "object": "model", "created": 1764547200, "owned_by": "vllm", "root": MODEL, "parent": None,
         "max_model_len": 8192, "permission": []}]}},
          {"method": "POST", "route": "/tokenize", "match": {"prompt": "a"},
           "response": {"count": 1, "max_model_len": 8192, "tokens": ref.prompt_ids("a"), "token_strs": None}}]
    for text in [*RAW_TEXTS, COMPLETION_PROMPT, *ref.special_texts(), *(ref.render(m) for m in CONVERSATIONS.values())]:
        toks = ref.prompt_ids(text)
        ex.append({"method": "POST", "route": "/tokenize", "match": {"prompt": text},
                   "response": {"count": len(toks), "max_model_len": 8192, "tokens": toks, "token_strs": None}})
    for name, messages in CONVERSATIONS.items():
        toks = [ref.bos_id] + ref.chat_ids(messages)
        ex.append({"method": "POST", "route": "/tokenize", "match": {"messages": messages},
                   "response": {"count": len(toks), "max_model_len": 8192, "tokens": toks,
                                "token_strs": None}})
        ex.append({"method": "POST", "route": "/detokenize", "match": {"tokens": toks},
                   "response": {"prompt": ref.tokenizer.decode(toks)}})
    ex += chat_exchanges({n: len(ref.chat_ids(m)) + 1 for n, m in CONVERSATIONS.items()})
    return ex


def chatml_render(messages) -> str:
    return "".join(f"<|im_start|>{m['role']}\n{m['content']}<|im_end|>\n" for m in messages) + "<|im_start|>assistant\n"


def llamacpp(ref: Reference) -> list[dict]:
    props = {"default_generation_settings": {"n_ctx": 4096, "params": {
        "temperature": 0.8, "top_k": 40, "top_p": 0.95, "min_p": 0.05, "repeat_penalty": 1.0, "n_predict": -1}},
             "total_slots": 1, "model_path": "smollm2.gguf", "chat_template": "{{ chatml }}",
             "bos_token": "<|im_start|>", "eos_token": "<|im_end|>", "build_info": "b6000-abcdef"}
    ex = [{"method": "GET", "route": "/v1/models", "response": {"object": "list", "data": [
        {"id": "smollm2.gguf", "object": "model", "created": 1764547200, "owned_by": "llamacpp", "meta": {}}]}},
          {"method": "GET", "route": "/props", "response": props}]
    for name, messages in CONVERSATIONS.items():
        ex.append({"method": "POST", "route": "/apply-template", "match": {"messages": messages},
                   "response": {"prompt": chatml_render(messages)}})
    for text in [*RAW_TEXTS, COMPLETION_PROMPT, *ref.special_texts(),
                 *(chatml_render(m) for m in CONVERSATIONS.values()), *(ref.render(m) for m in CONVERSATIONS.values())]:
        ex.append({"method": "POST", "route": "/tokenize", "match": {"content": text},
                   "response": {"tokens": ref.tokenizer.encode(text, add_special_tokens=False)}})
    ex += chat_exchanges({n: len(ref.tokenizer.encode(chatml_render(m), add_special_tokens=False))
                          for n, m in CONVERSATIONS.items()})
    return ex


def tgi(ref: Reference) -> list[dict]:
    info = {"model_id": MODEL, "model_sha": None, "model_pipeline_tag": "text-generation",
            "max_concurrent_requests": 128,
            "max_best_of": 2, "max_stop_sequences": 4, "max_input_tokens": 16383, "max_total_tokens": 16384,
            "validation_workers": 2, "max_client_batch_size": 4, "router": "text-generation-router",
            "version": "3.3.4", "sha": None, "docker_label": None}
    ex = [{"method": "GET", "route": "/v1/models", "response": {"object": "list", "data": [
        {"id": MODEL, "object": "model", "created": 0, "owned_by": MODEL}]}},
          {"method": "GET", "route": "/info", "response": info}]
    specials = set(ref.special_texts())
    for text in [*RAW_TEXTS, COMPLETION_PROMPT, *specials, *(ref.render(m) for m in CONVERSATIONS.values())]:
        toks = ref.tokenizer.encode(text, add_special_tokens=False)
        if text in specials:  # the fault: the token's text split into ordinary pieces
            toks = ref.tokenizer.encode(text.replace("|", "| ").replace("| ", "|", 1), add_special_tokens=False)
        pieces, at = [], 0
        for t in toks:
            piece = ref.piece(t)
            pieces.append({"id": t, "text": piece, "start": at, "stop": at + len(piece)})
            at += len(piece)
        ex.append({"method": "POST", "route": "/tokenize", "match": {"inputs": text}, "response": pieces})
    ex += chat_exchanges({n: len(ref.chat_ids(m)) for n, m in CONVERSATIONS.items()})
    return ex


def ollama(ref: Reference) -> list[dict]:
    show = {"modelfile": "FROM smollm2:135m", "parameters": 'stop                           "<|endoftext|>"\n'
            "temperature                    0.2\nnum_ctx                        8192",
            "template": "{{- range .Messages }}<|im_start|>{{ .Role }}\n{{ .Content }}<|im_end|>\n{{ end }}"
                        "<|im_start|>assistant\n",
            "details": {"format": "gguf", "family": "llama", "parameter_size": "134.52M", "quantization_level": "F16"},
            "model_info": {"general.architecture": "llama", "llama.context_length": 8192,
                           "llama.rope.freq_base": 10000.0, "tokenizer.ggml.model": "gpt2",
                           "tokenizer.ggml.eos_token_id": 2, "tokenizer.ggml.bos_token_id": 1}}
    ex = [{"method": "GET", "route": "/v1/models", "response": {"object": "list", "data": [
        {"id": "smollm2:135m", "object": "model", "created": 1764547200, "owned_by": "library"}]}},
          {"method": "GET", "route": "/api/version", "response": {"version": "0.12.6"}},
          {"method": "POST", "route": "/api/show", "match": {"model": "smollm2:135m"}, "response": show}]
    for text in [*RAW_TEXTS, COMPLETION_PROMPT]:
        ex.append({"method": "POST", "route": "/api/generate", "match": {"prompt": text, "raw": True},
                   "response": {"model": "smollm2:135m", "created_at": "2025-12-01T00:00:00Z", "response": " x",
                                "done": True, "done_reason": "length", "prompt_eval_count": len(ref.prompt_ids(text)),
                                "eval_count": 1}})
    ex += chat_exchanges({n: len(ref.chat_ids(m)) for n, m in CONVERSATIONS.items()})
    return ex


def main(model_dir: str) -> None:
    ref = Reference.load(model_dir)
    for name, build in (("vllm", vllm), ("llamacpp", llamacpp), ("tgi", tgi), ("ollama", ollama)):
        data = {"server": name, "incident": FAULTS[name], "shapes_from": __doc__.split("Shapes: ")[1].split(" Each")[0],
                "exchanges": build(ref)}
        (OUT / f"{name}.json").write_text(json.dumps(data, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main(sys.argv[1])
