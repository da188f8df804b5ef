"""EPT02x: does the server stop where the model ends its turn?"""
from __future__ import annotations

from checks.endpoint.inputs import CONVERSATIONS, STOP_CONVERSATION, EndpointInputs, asks_server
from checks.endpoint.teacher import teacher_force
from checks.catalogue.registry import Problem, check
from checks.catalogue.locations import config_key
from findings import Location

# the model's stop ids: what a server stopping too late or never should be configured from
EOS = Location(file="generation_config.json", logical="eos_token_id")
ROLE_MARKERS = ("user\n", "assistant\n", "system\n", "\nuser:", "\nassistant:", "\nUser:", "\nAssistant:")


@check("EPT021", category="endpoint", severity="error", needs=("endpoint", "tokenizer"),
       hint="list every end-of-turn id as EOS (generation_config.json eos_token_id list / GGUF eos or eot id) "
            "and give the server the same stop set")
@asks_server
def stop_set(ctx: EndpointInputs):
    """Effective stop set vs the model's EOS ids and the template's end-of-turn token.

    The chat template closes each turn with a token (<|im_end|>, <|eot_id|>); when that token is not among the
    ids the server stops on, answers never stop or run into the next turn (vLLM #4180, ollama #3759). Also
    flags EOS ids only generation_config.json lists (servers reading config.json alone miss them) and a server
    whose declared stop set (llama.cpp /props, Ollama parameters) misses the model's end tokens."""
    ref = ctx.reference
    eos = ref.eos_ids
    turn_end = ref.end_of_turn()
    evidence = {"eos_ids": {str(i): {"piece": ref.piece(i), "declared_in": src} for i, src in ref.eos_sources.items()},
                "end_of_turn": None if turn_end is None else {"id": turn_end[0], "piece": turn_end[1]}}
    if turn_end is not None and turn_end[0] not in eos:
        yield Problem(f"the chat template ends a turn with {turn_end[1]!r} (id {turn_end[0]}), which is not an EOS id "
                      f"(EOS: {eos}): a server stopping on EOS will not stop after the answer", evidence=evidence,
                      location=EOS)
    if ref.generation is not None:
        only_gen = sorted(set(ref.generation.eos_token_ids) - set(ref.config.eos_token_ids))
        if only_gen:
            yield Problem(f"EOS ids {only_gen} are listed only in generation_config.json: servers that read "
                          f"config.json alone do not stop on them", severity="warning", evidence=evidence,
                          location=config_key("eos_token_id"))
    declared = ctx.ask("stop_set", lambda: ctx.surface.stop_set())
    if declared is not None and (declared.token_ids or declared.strings):
        ends = {ref.piece(i) for i in eos} | ({turn_end[1]} if turn_end else set())
        if not (set(declared.strings) & ends or set(declared.token_ids) & set(eos)):
            yield Problem(f"the server's declared stop set {declared.strings or declared.token_ids} "
                          f"({declared.source}) holds none of the model's end tokens {sorted(ends)}",
                          evidence={**evidence, "server": {"strings": declared.strings, "ids": declared.token_ids,
                                                            "source": declared.source}}, location=EOS)


@check("EPT022", category="endpoint", severity="error", needs=("endpoint", "tokenizer"),
       hint="make the server stop on the model's end-of-turn token (stop token ids / EOS metadata / Modelfile stop)")
@asks_server
def live_stop(ctx: EndpointInputs):
    """A short greedy answer must end with finish_reason `stop`, not `length`, and leak no role markers.

    Asks the server a one-word question at temperature 0 with a generous max_tokens. When the answer runs
    to the limit, the reference engine is run over the server's own tokens to find where the model ended its
    turn and the server went on. Text after the answer such as `user\\n`, `<|im_start|>` or the next turn is
    the visible symptom (ollama #3759)."""
    ref = ctx.reference
    answer = ctx.stop_answer()
    evidence = {"question": CONVERSATIONS[STOP_CONVERSATION][-1]["content"], "answer": answer.text[:400],
                "finish_reason": answer.finish_reason, "completion_tokens": answer.completion_tokens,
                "max_tokens": ctx.max_tokens}
    leaks = sorted({m for m in [*ref.special_texts(), *ROLE_MARKERS] if m and m in answer.text})
    if answer.finish_reason == "length":
        where = end_position(ctx, answer)
        if where is not None:
            step, piece = where
            yield Problem(f"the server did not stop where the model ended its turn: after {step} tokens the model "
                          f"emits {piece!r} (an end id), the server went on to max_tokens={ctx.max_tokens} "
                          f"(finish_reason=length)", evidence={**evidence, "model_end_at_token": step,
                                                               "leaked_markers": leaks}, location=EOS)
            return
        yield Problem(f"a one-word answer ran to max_tokens={ctx.max_tokens} (finish_reason=length)",
                      severity="warning", evidence={**evidence, "leaked_markers": leaks}, location=EOS)
        return
    if leaks:
        yield Problem(f"role markers leak into the answer: {leaks}", evidence=evidence, location=EOS)
    elif answer.finish_reason not in ("stop", "eos", "eos_token", "stop_sequence"):
        yield Problem(f"unexpected finish_reason {answer.finish_reason!r} for a short answer", severity="warning",
                      evidence=evidence, location=EOS)


def end_position(ctx: EndpointInputs, answer) -> tuple[int, str] | None:
    """Where the reference, fed the server's own tokens, picks an end id (EOS or end-of-turn), if it does."""
    if not answer.tokens:
        return None
    ref = ctx.reference
    prompt = ref.chat_ids(CONVERSATIONS[STOP_CONVERSATION])
    if answer.prompt_tokens is not None and answer.prompt_tokens != len(prompt):
        return None  # the server built another prompt (EPT012): its tokens cannot be replayed on ours
    ends = set(ref.eos_ids) | ({ref.end_of_turn()[0]} if ref.end_of_turn() else set())
    forced = teacher_force(ref, ctx.engine(), prompt, answer.tokens)
    ctx.state["stop_forced"] = forced
    for step in forced.steps:
        if step.reference_id in ends:
            return step.position, ref.piece(step.reference_id)
    return None
