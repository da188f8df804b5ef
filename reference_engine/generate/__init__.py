"""Stage 3, generation: logits -> tokens -> text (sampler, beam search, stop rules, streaming detokenizer,
continuous batching).

    loop.py             generate() / stream(): prompts -> Requests -> scheduler -> sampler -> stopping -> Output
    sampling_params.py  SamplingParams (validated)
    sampler.py          penalties -> temperature -> top-k -> top-p -> min-p, per-request generators
    beam.py             beam search on shared (copy-on-write) KV blocks
    scheduler.py        waiting / running queues, preemption by recompute
    request.py          one request's state and its Output
    stopping.py         EOS, stop strings, stop ids, length limits
    detokenizer.py      UTF-8-safe incremental detokenizer
    validate.py         validate(engine): the closed loop (logits -> probabilities -> token -> text)
    tool_calls.py       the families' tool-call formats, one table: recognise a template's, render and parse calls
    tool_call_syntax.py one render/parse pair per shape of call (marker + JSON, [ARGS], <function=...>, ...)
    tool_call_types.py  ToolCall, ParsedCalls and the JSON reading the parsers share
"""
from reference_engine.generate.loop import encode_prompt, eos_ids_of, generate, stream
from reference_engine.generate.request import Output
from reference_engine.generate.sampling_params import SamplingParams
from reference_engine.generate.validate import validate

__all__ = ["generate", "stream", "validate", "Output", "SamplingParams", "encode_prompt", "eos_ids_of"]
