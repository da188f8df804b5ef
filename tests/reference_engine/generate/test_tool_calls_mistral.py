"""The Mistral rows of the tool-call table against mistral-common, Mistral's own reference implementation (an oracle
in tests only): what its instruct tokenizers write for an assistant's tool calls (v3 and v7 SentencePiece, v3/v7
tekken, and tekken at v11 and v13) is what `parse_calls` reads, and what `render_calls` writes is what
mistral-common's tool-call decoder reads back. (Its generated chat templates: tests/checks/tokenizer/
test_tool_template.py.)"""
from __future__ import annotations

import json
from pathlib import Path

import mistral_common
import pytest
import regex
from mistral_common.experimental.tools import _decode_tool_calls, _split_content_and_tool_calls
from mistral_common.protocol.instruct import messages as mc_messages, request as mc_request
from mistral_common.protocol.instruct import tool_calls as mc_tools
from mistral_common.protocol.instruct.validator import ValidationMode
from mistral_common.tokens.tokenizers.base import SpecialTokenPolicy, TokenizerVersion
from mistral_common.tokens.tokenizers.mistral import MistralTokenizer

from reference_engine.generate.tool_calls import ToolCall, parse_calls, render_calls

DATA = Path(mistral_common.__file__).parent / "data"
CALLS = [ToolCall("get_weather", {"city": "Paris", "unit": "celsius"}, "call0abcd"),
         ToolCall("get_time", {}, "call1abcd")]
SPECIAL = regex.compile(r"(\[TOOL_CALLS\]|\[ARGS\]|\[CALL_ID\])")


def tekken(tmp_path: Path, version: str) -> Path:
    """tekken_240911.json (shipped with mistral-common) at another version. v11+ files must list their special
    tokens: the v7 list plus [ARGS] and [CALL_ID], padded with <SPECIAL_i> (ranks differ from the released files;
    the format does not depend on them)."""
    tok = json.loads((DATA / "tekken_240911.json").read_text(encoding="utf-8"))
    tok["config"]["version"] = version
    if version in ("v11", "v13"):
        names = ["<unk>", "<s>", "</s>", "[INST]", "[/INST]", "[AVAILABLE_TOOLS]", "[/AVAILABLE_TOOLS]",
                 "[TOOL_RESULTS]", "[/TOOL_RESULTS]", "[TOOL_CALLS]", "[IMG]", "<pad>", "[IMG_BREAK]", "[IMG_END]",
                 "[PREFIX]", "[MIDDLE]", "[SUFFIX]", "[SYSTEM_PROMPT]", "[/SYSTEM_PROMPT]", "[TOOL_CONTENT]",
                 "[ARGS]", "[CALL_ID]"]
        names += [f"<SPECIAL_{i}>" for i in range(len(names), tok["config"]["default_num_special_tokens"])]
        tok["special_tokens"] = [{"rank": i, "token_str": s, "is_control": True} for i, s in enumerate(names)]
    path = tmp_path / f"tekken_{version}.json"
    path.write_text(json.dumps(tok), encoding="utf-8")
    return path


TOKENIZERS = {"v3-spm": lambda tmp: DATA / "mistral_instruct_tokenizer_240323.model.v3",
              "v7-spm": lambda tmp: DATA / "mistral_instruct_tokenizer_241114.model.v7",
              **{f"{v}-tekken": (lambda v: lambda tmp: tekken(tmp, v))(v) for v in ("v3", "v7", "v11", "v13")}}


@pytest.fixture(scope="module")
def load(tmp_path_factory):
    """load(name) -> (MistralTokenizer, its raw tokenizer, the table's format); each loaded once (tekken is slow)."""
    loaded = {}

    def get(name):
        if name not in loaded:
            path = TOKENIZERS[name](tmp_path_factory.mktemp(name))
            mistral = MistralTokenizer.from_file(str(path), mode=ValidationMode.finetuning)
            raw = mistral.instruct_tokenizer.tokenizer
            loaded[name] = mistral, raw, ("mistral_v11" if raw.version >= TokenizerVersion.v11 else "mistral_v3")
        return loaded[name]
    return get


def assistant_tokens(mistral, raw) -> list[int]:
    """The tokens mistral-common writes for an assistant turn holding CALLS, from [TOOL_CALLS] to before EOS."""
    calls = [mc_tools.ToolCall(id=c.id, function=mc_tools.FunctionCall(name=c.name, arguments=json.dumps(c.arguments)))
             for c in CALLS]
    request = mc_request.ChatCompletionRequest(messages=[mc_messages.UserMessage(content="Weather in Paris?"),
                                                         mc_messages.AssistantMessage(tool_calls=calls)])
    tokens = mistral.encode_chat_completion(request).tokens
    start = tokens.index(raw.get_special_token("[TOOL_CALLS]"))
    return tokens[start:tokens.index(raw.eos_id, start)]


def as_text(raw, tokens: list[int]) -> str:
    # SentencePiece pieces carry "▁" for a space; detokenizing servers write the space
    return raw.decode(tokens, special_token_policy=SpecialTokenPolicy.KEEP).replace("▁", " ")


def as_tokens(raw, text: str) -> list[int]:
    """Text with Mistral's control strings -> ids: the control strings as their single ids, the rest encoded."""
    ids = []
    for part in SPECIAL.split(text):
        if SPECIAL.fullmatch(part):
            ids.append(raw.get_special_token(part))
        elif part:
            ids.extend(raw.encode(part, bos=False, eos=False))
    return ids


@pytest.mark.parametrize("name", list(TOKENIZERS))
def test_what_mistral_common_writes_is_parsed(load, name):
    mistral, raw, fmt = load(name)
    parsed = parse_calls(fmt, as_text(raw, assistant_tokens(mistral, raw)))
    assert parsed.errors == [] and parsed.content == ""
    assert [(c.name, c.arguments) for c in parsed.calls] == [(c.name, c.arguments) for c in CALLS]
    if name != "v13-tekken":    # v13 writes no call ids; v3/v7 put them in the JSON, v11 after [CALL_ID]
        assert [c.id for c in parsed.calls] == [c.id for c in CALLS]


@pytest.mark.parametrize("name", list(TOKENIZERS))
def test_what_render_calls_writes_mistral_common_reads(load, name):
    _, raw, fmt = load(name)
    tokens = as_tokens(raw, render_calls(fmt, CALLS))
    content, call_tokens = _split_content_and_tool_calls(tokens, raw.get_special_token("[TOOL_CALLS]"))
    decoded = _decode_tool_calls(call_tokens, raw)
    assert content == []
    assert [(c.function.name, json.loads(c.function.arguments)) for c in decoded] == \
        [(c.name, c.arguments) for c in CALLS]
