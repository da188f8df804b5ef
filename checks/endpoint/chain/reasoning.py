"""EPT081: the reasoning split — thinking text goes to `reasoning_content`, the answer to `content`."""
from __future__ import annotations

from checks.endpoint.chain import answers, scenarios
from checks.endpoint.inputs import EndpointInputs, asks_server
from checks.catalogue.registry import Problem, Skip, check
from findings import Location
from reference_engine.generate import harmony

TEMPLATE = Location(file="tokenizer_config.json", logical="chat_template")
DROPPED_SLACK = 8      # completion tokens beyond the content's own count before reasoning counts as dropped


def is_harmony(ref) -> bool:
    """gpt-oss's chat format: the template writes the analysis and final channels."""
    template = ref.tokenizer.chat_template or ""
    return harmony.CHANNEL in template and "final" in template and "analysis" in template


def harmony_problems(answer, evidence):
    """A harmony server's split gone wrong: channel markup (or its stripped remains) in content or in the
    reasoning field, the final answer in the reasoning field with the content left empty."""
    claimed = answer.reasoning is not None
    left = harmony.has_markup(answer.content)
    if left:
        yield Problem(f"harmony channel markup left in content ({', '.join(left[:4])}): the server's harmony "
                      f"parser did not split the channels" + ("" if claimed else " (it sent no reasoning field)"),
                      evidence={**evidence, "markup": left}, location=TEMPLATE)
        return
    in_reasoning = [m for m in (harmony.CHANNEL + "final", "assistantfinal") if m in (answer.reasoning or "")]
    if in_reasoning or (claimed and (answer.reasoning or "").strip() and not answer.content.strip()
                        and answer.finish_reason == "stop"):
        yield Problem("the final answer is in the reasoning field and content is empty: the server's harmony "
                      "parser put the final channel with the analysis", evidence={**evidence, "markup": in_reasoning},
                      location=TEMPLATE)


def think_markers(ref) -> tuple[str, str] | None:
    """The (open, close) thinking markers the model's template or vocabulary knows, if any."""
    template = ref.tokenizer.chat_template or ""
    vocab = {t.content for t in ref.tokenizer.added_by_id.values()}
    return next((pair for pair in scenarios.THINK_MARKERS if pair[0] in template or pair[0] in vocab), None)


@check("EPT081", category="endpoint", severity="error", needs=("endpoint", "tokenizer"),
       hint="start the server with the model family's reasoning parser (vLLM --reasoning-parser, llama.cpp "
            "--reasoning-format deepseek) and the model's own template")
@asks_server
def reasoning_split(ctx: EndpointInputs):
    """Thinking text leaks into `content`, or `reasoning_content` comes back empty where the server splits it.

    Runs only for models whose template or vocabulary has thinking markers (<think>, [THINK], harmony's
    analysis channel, ...). For gpt-oss (harmony) any channel markup in content (`<|channel|>`, `<|message|>`,
    or its remains once decoded without special tokens: "analysisThe user...", "assistantfinal") and a final
    answer put in the reasoning field with the content empty are errors (sglang#9190, vllm#23694,
    llama.cpp#15789). A greedy
    question that makes the model think must come back with the thinking in `reasoning_content` (or
    `reasoning`) and none of the markers in `content`. Markers in the content are an error when the server
    claims a parser (it sent a reasoning field), a warning when it has none (clients see raw thinking; so is
    content without a reasoning field when the template opens the thinking block in the generation prompt). An
    empty reasoning field while usage.completion_tokens is well above the content's own token count means the
    server cut the reasoning away."""
    ref = ctx.reference
    markers = think_markers(ref)
    if markers is None:
        raise Skip("the model's template and vocabulary have no thinking markers (<think>, [THINK], ...)")
    answer = answers.ask_chat(ctx, "reasoning", scenarios.REASONING, feature="a reasoning request")
    evidence = {"request": scenarios.REASONING, "markers": list(markers), "answer": answer.summary()}
    claimed = answer.reasoning is not None
    if is_harmony(ref):
        found = list(harmony_problems(answer, evidence))
        yield from found
        if found:
            return
    leaked = [m for m in markers if m in answer.content]
    if leaked:
        if claimed:
            yield Problem(f"thinking leaks into content ({leaked} in it) although the server splits reasoning "
                          f"(it sent a reasoning field)", evidence=evidence, location=TEMPLATE)
        else:
            yield Problem(f"the server has no reasoning parser for this model: {leaked} and the thinking arrive in "
                          f"content", severity="warning", evidence=evidence, location=TEMPLATE)
        return
    prompt = answers.reference_render(ctx, scenarios.REASONING["messages"]) or ""
    if not claimed and answer.content.strip() and prompt.rstrip().endswith(markers[0]):
        yield Problem(f"the server has no reasoning parser for this model: the template opens {markers[0]!r} in the "
                      f"generation prompt, so the content it returns is the model's thinking",
                      severity="warning", evidence=evidence, location=TEMPLATE)
        return
    content_tokens = len(ref.tokenizer.encode(answer.content, add_special_tokens=False))
    if claimed and not answer.reasoning.strip() and answer.completion_tokens is not None \
            and answer.completion_tokens > content_tokens + DROPPED_SLACK:
        yield Problem(f"reasoning_content is empty but the model generated {answer.completion_tokens} tokens and the "
                      f"content holds {content_tokens}: the server dropped the reasoning",
                      evidence={**evidence, "content_tokens": content_tokens})
        return
    yield Problem(f"reasoning split: {len(answer.reasoning or '')} characters of reasoning, "
                  f"{len(answer.content)} of content", severity="info", evidence=evidence)


@check("EPT086", category="endpoint", severity="error", needs=("endpoint", "tokenizer"),
       hint="update the server's reasoning parser (it must read the template's closed thinking block), or start it "
            "without one for requests with thinking off; clients reading `content` get nothing")
@asks_server
def thinking_off_routing(ctx: EndpointInputs):
    """With thinking off (`chat_template_kwargs: {"enable_thinking": false}`) the answer lands in
    `reasoning_content` and `content` is empty or null.

    Runs for templates that read `enable_thinking` (Qwen3 and its kind). The reasoning question is asked with
    thinking switched off: the template closes the thinking block in the generation prompt, so everything the
    model writes is the answer. A reasoning parser that still treats the start of the answer as thinking routes
    it all to `reasoning_content` (vLLM's Qwen3 and DeepSeek parsers with thinking off), and a client reading
    `content` sees nothing; that is an error. The answer in `content` is information."""
    if "enable_thinking" not in (ctx.reference.tokenizer.chat_template or ""):
        raise Skip("the model's template has no enable_thinking switch")
    answer = answers.ask_chat(ctx, "thinking-off", scenarios.THINKING_OFF, feature="chat_template_kwargs")
    evidence = {"request": scenarios.THINKING_OFF, "answer": answer.summary()}
    if not answer.content.strip() and (answer.reasoning or "").strip():
        yield Problem(f"with thinking off the answer arrived in the reasoning field ({len(answer.reasoning)} "
                      f"characters: {answer.reasoning.strip()[:60]!r}) and content is empty: the server's "
                      f"reasoning parser ignores the closed thinking block", evidence=evidence, location=TEMPLATE)
        return
    yield Problem(f"with thinking off the answer is in content ({len(answer.content)} characters, reasoning "
                  f"{len(answer.reasoning or '')})", severity="info", evidence=evidence)
