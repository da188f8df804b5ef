"""What `diff URL_A URL_B` sends both servers: the built-in probe prompts as chat questions (greedy, with top
logprobs) and as plain completion prompts (their token counts), one tool request and one structured-output
request. Every request is sent to both servers with the same body."""
from __future__ import annotations

from checks.shared.prompts import DEFAULT_PROBES
from checks.shared.chat.tool_conversations import ASK, TOOLS

DEFAULT_PROMPTS, QUICK_PROMPTS = 4, 2
DEFAULT_MAX_TOKENS, QUICK_MAX_TOKENS = 24, 12
TOP_LOGPROBS = 5

TOOL_REQUEST = {"messages": ASK, "tools": TOOLS, "tool_choice": "auto", "max_tokens": 40}
ANSWER_SCHEMA = {"type": "object", "properties": {"capital": {"type": "string"}, "country": {"type": "string"}},
                 "required": ["capital", "country"], "additionalProperties": False}
STRUCTURED_REQUEST = {"messages": [{"role": "user", "content": "What is the capital of France? Answer in JSON."}],
                      "max_tokens": 24, "response_format": {"type": "json_schema", "json_schema": {
                          "name": "capital", "strict": True, "schema": ANSWER_SCHEMA}}}
CHAIN_REQUESTS = {"tool call": TOOL_REQUEST, "structured output": STRUCTURED_REQUEST}


def prompt_texts(count: int) -> list[str]:
    """The first `count` built-in probes, cycled when more are asked for than there are."""
    return [DEFAULT_PROBES[i % len(DEFAULT_PROBES)] for i in range(count)]


def chat_messages(text: str) -> list[dict]:
    return [{"role": "user", "content": text}]
