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
_PROBE = "llmdoctor probe endpoint URL --model MODEL_DIR --select {}"
CHAT: tuple[Signature, ...] = (
    Signature(
        "system-message-dropped", "A second or mid-conversation system message never reaches the prompt",
        (r"system (prompt|message|instruction)s? (is |are |gets? |being )?(ignored|dropped|lost|missing|skipped)",
         r"(second|later|mid[- ]conversation|multiple) system (prompt|message)",
         r"(ignores?|drops?|loses?) (the |my )?system (prompt|message)"),
        ("the chat template keeps only the first system message (gpt-oss's released template)",
         "the server renders another template than the model's own (--chat-template-file, a built-in)"),
        checks=("TOK034",), probes=(_PROBE.format("EPT085"),), references=("vllm#44330",)),
    Signature(
        "tool-call-history-id", "The next turn ends \"stop\" with no tool call once the history holds earlier calls",
        (r"(tool[- ]?call )?ids? (format|like|such as)? ?(functions\.\w+:\d+|call\d{3,})",
         r"(next|second|third|later) (turn|call)s? (ends?|finish(es)?) (with )?.?stop.? (with )?no (tool )?call",
         r"tool calls? (silently )?dropped in multi[- ]turn"),
        ("the template or the tool parser expects its own id form (Kimi K2: functions.NAME:INDEX) and gets another",
         "a gateway rewrote the ids the server gave"),
        checks=(), probes=(_PROBE.format("EPT075"),), references=("sglang#25362", "vllm#21259", "sglang#9606")),
    Signature(
        "tool-calls-finish-empty", "finish_reason \"tool_calls\" with an empty tool_calls list",
        (r"finish_reason.{0,12}tool_calls.{0,40}(empty|no|\[\]) ?(tool_calls|tool calls)",
         r"empty tool_calls", r"tool_calls (list )?(is |are )?(an )?empty", r"tool calls? (are )?never executed"),
        ("the server's parser found no call but the finish reason was set from the request's tool_choice",
         "the parser lost the call the model wrote"),
        checks=(), probes=(_PROBE.format("EPT071"),), references=("vllm#53255",)),
    Signature(
        "tool-call-missing-in-stream", "A tool call missing in the stream while the non-streamed answer has it",
        (r"tool[- ]?calls? (is |are )?(missing|lost|dropped|absent) (in|from|when) (the )?stream",
         r"stream(ing|ed)? .{0,40}(no|missing|lost) tool[- ]?calls?",
         r"(begin|start) and end .{0,30}(one|same|single) (delta|chunk)"),
        ("the streaming tool parser misses a call whose begin and end markers arrive in one delta",),
        checks=(), probes=(_PROBE.format("EPT072"),), references=("vllm#48020",)),
    Signature(
        "zero-argument-call-lost", "A call to a tool without arguments is lost",
        (r"(zero|no)[- ]arg(ument)?s? (tool )?(call )?(is |are |gets? )?(lost|dropped|discarded|missing|ignored)",
         r"tool (call )?(with|without) (no |omitted |empty )?arguments? .{0,30}(lost|dropped|discarded|ignored)"),
        ("the tool parser treats a call without arguments as no call",),
        checks=(), probes=(_PROBE.format("EPT076"),), references=("ollama#17328",)),
    Signature(
        "tool-call-arguments-empty", "Tool call arguments \"{}\" where the model wrote some",
        (r"arguments? (is |are |come back |returned )?(as )?.?\{\}.? ?(empty|although|but|instead|where)",
         r"empty (tool[- ]call )?arguments", r"arguments (are |is )?(lost|dropped|empty)"),
        ("the tool parser lost the arguments (a format it half reads)",),
        checks=(), probes=(_PROBE.format("EPT071"),), references=()),
    Signature(
        "thinking-off-answer-in-reasoning", "With thinking off the answer is in reasoning_content and content is null",
        (r"enable_thinking.{0,20}(false|off).{0,80}(content|reasoning)",
         r"content (is )?(null|empty|none).{0,60}reasoning_content",
         r"answer (is |goes |lands |ends up )?in(to)? (the )?reasoning(_content)?"),
        ("the reasoning parser treats the start of every answer as thinking, ignoring the template's closed block",),
        checks=(), probes=(_PROBE.format("EPT086"),), references=("QwenLM/Qwen3#1297", "sglang#20586")),
)


# ---- serving configurations that change answers ----------------------------------------------------
SERVING: tuple[Signature, ...] = (
)


INCIDENTS: tuple[Signature, ...] = FILES + CHAT + SERVING
