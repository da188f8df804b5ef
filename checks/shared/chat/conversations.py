"""The conversations that exercise a chat template's branches, and rendering a template over all of them.

A template bug usually shows in one branch only: the default system turn a template writes when the
conversation has none (SmolLM2, Qwen2.5), the handling of a system message, later turns, or the generation
prompt. The endpoint checks (EPT) send CONVERSATIONS to a server; diff (DIF004) renders every branch on both
sides, each with and without the generation prompt.
"""
from __future__ import annotations

CONVERSATIONS = {
    "no system": [{"role": "user", "content": "What is the capital of France? Answer in one word."}],
    "with system": [{"role": "system", "content": "You are a concise assistant."},
                    {"role": "user", "content": "Name one primary colour."}],
    "multi-turn": [{"role": "user", "content": "Hi!"},
                   {"role": "assistant", "content": "Hello! How can I help you today?"},
                   {"role": "user", "content": "What is 2 + 2?"}],
}
# the template checks' turns (TOK007-TOK009) and the embedding check's rendered prompts (EMB): a user message alone,
# user/assistant turns, and the same after a system message
USER_ONLY = [{"role": "user", "content": "What is the capital of France?"}]
NO_SYSTEM = [{"role": "user", "content": "Hi there"}, {"role": "assistant", "content": "Hello, how can I help?"},
             {"role": "user", "content": "Tell me a joke"}]
WITH_SYSTEM = [{"role": "system", "content": "You are a helpful assistant."}] + NO_SYSTEM
# local renderings cost nothing: diff also renders several turns after a system message
BRANCHES = {**CONVERSATIONS,
            "multi-turn with system": [{"role": "system", "content": "You are a helpful assistant."},
                                       {"role": "user", "content": "Hi! What is 2 + 2?"},
                                       {"role": "assistant", "content": "2 + 2 = 4."},
                                       {"role": "user", "content": "And in French?"}]}


def has_system(messages: list[dict]) -> bool:
    return any(m["role"] == "system" for m in messages)


def render_all(tokenizer) -> dict[tuple[str, bool], str]:
    """(conversation, add_generation_prompt) -> the rendered text, or "<error: ...>" where the template raises
    (Mistral-style templates refuse a system message: both sides raising alike is no difference)."""
    out = {}
    for name, messages in BRANCHES.items():
        for generation_prompt in (True, False):
            try:
                out[name, generation_prompt] = tokenizer.apply_chat_template(
                    list(messages), add_generation_prompt=generation_prompt, tokenize=False)
            except Exception as e:      # the sandbox's and the template's own errors alike
                out[name, generation_prompt] = f"<error: {type(e).__name__}: {e}>"
    return out


def label(case: tuple[str, bool]) -> str:
    return f"{case[0]}, {'with' if case[1] else 'without'} the generation prompt"


def default_system_dropped(differing: set[str], names: set[str], reference_no_system: str) -> bool:
    """Only the conversations without a system message differ (not all of them), and the reference template
    writes a system turn of its own there: the other side's template dropped that default system turn."""
    without = {n for n in names if not has_system(BRANCHES[n])}
    return bool(differing) and differing <= without and differing != names and "system" in reference_no_system


# system messages where templates drop them (the gpt-oss template keeps only the first: vllm#44330): each message
# distinct, so the one that never reaches the prompt can be named (TOK035 on the template, EPT085 on a server)
_FIRST = {"role": "system", "content": "Answer every question in French."}
_LATER = {"role": "system", "content": "From now on, answer in German."}
_ASK = {"role": "user", "content": "Name one primary colour."}
_REPLY = {"role": "assistant", "content": "Rouge."}
_AGAIN = {"role": "user", "content": "Name another one."}
SYSTEM_SHAPES = {
    "system first": [_FIRST, _ASK],
    "two system messages": [_FIRST, _LATER, _ASK],
    "system mid-conversation": [_FIRST, _ASK, _REPLY, _LATER, _AGAIN],
    "system after the first turn only": [_ASK, _REPLY, _LATER, _AGAIN],
}


def missing_messages(rendered: str, messages: list[dict]) -> list[int]:
    """The indices of the messages whose text the rendered prompt does not hold."""
    return [i for i, m in enumerate(messages) if m["content"] not in rendered]


def describe(messages: list[dict], index: int) -> str:
    m = messages[index]
    return f"message {index} ({m['role']}: {m['content']!r})"
