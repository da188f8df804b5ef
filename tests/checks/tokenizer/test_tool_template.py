"""Tool-use template checks (TOK030-TOK033) on real templates (tool_templates/, copied from llama.cpp's
models/templates, which fetches them from the models' repositories) over a tokenizer holding each family's
markers as added tokens: every healthy template is clean, and each planted fault is caught (the definitions never
rendered, a marker that is not a single token, a call the family's parser does not read back, a template that
fails on the tool turn). SmolLM2's and Gemma 3's real templates do not mention tools: the checks skip."""
from __future__ import annotations

import html
import io
import json
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner

from llmdoctor.cli import cli
from llmdoctor.run.runner import run_checks
from tests.checks import zoo

TEMPLATES = Path(__file__).parent / "tool_templates"
TOOL_CHECKS = ["TOK030", "TOK031", "TOK032", "TOK033"]
LLAMA3 = ["<|begin_of_text|>", "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>", "<|eom_id|>",
          "<|python_tag|>"]
CHATML = ["<|im_start|>", "<|im_end|>"]
MISTRAL = ["<s>", "</s>", "[INST]", "[/INST]", "[TOOL_CALLS]", "[AVAILABLE_TOOLS]", "[/AVAILABLE_TOOLS]",
           "[TOOL_RESULTS]", "[/TOOL_RESULTS]"]
DEEPSEEK = ["<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>", "<｜User｜>", "<｜Assistant｜>",
            "<｜tool▁calls▁begin｜>", "<｜tool▁calls▁end｜>", "<｜tool▁call▁begin｜>", "<｜tool▁call▁end｜>",
            "<｜tool▁sep｜>", "<｜tool▁outputs▁begin｜>", "<｜tool▁outputs▁end｜>", "<｜tool▁output▁begin｜>",
            "<｜tool▁output▁end｜>"]
COHERE = ["<BOS_TOKEN>", "<|START_OF_TURN_TOKEN|>", "<|END_OF_TURN_TOKEN|>", "<|SYSTEM_TOKEN|>", "<|USER_TOKEN|>",
          "<|CHATBOT_TOKEN|>", "<|START_ACTION|>", "<|END_ACTION|>", "<|START_THINKING|>", "<|END_THINKING|>",
          "<|START_RESPONSE|>", "<|END_RESPONSE|>", "<|START_TOOL_RESULT|>", "<|END_TOOL_RESULT|>"]
HARMONY = ["<|startoftext|>", "<|endoftext|>", "<|start|>", "<|end|>", "<|message|>", "<|channel|>", "<|call|>",
           "<|return|>", "<|constrain|>"]
# template -> (format, tokens the family's tokenizer holds as added tokens, bos, eos); Qwen's <tool_call> tokens
# are added but not special (special=False in its tokenizer.json), as here
FAMILIES = {
    "qwen2.5-7b-instruct": ("hermes", CHATML + ["<tool_call>", "</tool_call>"], None, "<|im_end|>"),
    "hermes-3-llama-3.1-8b": ("hermes", CHATML + ["<tool_call>", "</tool_call>", "<|begin_of_text|>"],
                              "<|begin_of_text|>", "<|im_end|>"),
    "llama-3.1-8b-instruct": ("llama3_json", LLAMA3, "<|begin_of_text|>", "<|eot_id|>"),
    "mistral-nemo-instruct-2407": ("mistral_v3", MISTRAL, "<s>", "</s>"),
    "mistral-small-3.2-24b-instruct-2506": ("mistral_v11", MISTRAL + ["[SYSTEM_PROMPT]", "[/SYSTEM_PROMPT]", "[ARGS]",
                                                                      "[CALL_ID]", "[TOOL_CONTENT]"], "<s>", "</s>"),
    "granite-3.3-2b-instruct": ("granite", ["<|start_of_role|>", "<|end_of_role|>", "<|end_of_text|>",
                                            "<|tool_call|>"], None, "<|end_of_text|>"),
    "functionary-medium-v3.2": ("functionary_v3_2", LLAMA3, "<|begin_of_text|>", "<|eot_id|>"),
    "command-r7b-12-2024": ("command_r7b", COHERE, "<BOS_TOKEN>", "<|END_OF_TURN_TOKEN|>"),
    "deepseek-r1-distill-qwen-32b": ("deepseek_r1", DEEPSEEK, "<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>"),
    "openai-gpt-oss-120b": ("harmony", HARMONY, "<|startoftext|>", "<|return|>"),
}
NOT_SPECIAL = {"<tool_call>", "</tool_call>"}


def family_tokens(tokens: list[str], drop=()):
    """Add the family's tokens to the factory tokenizer as added tokens (ids after the last one)."""
    def change(tok: dict) -> None:
        have = {t["content"] for t in tok["added_tokens"]}
        next_id = max(t["id"] for t in tok["added_tokens"]) + 1
        for token in (t for t in tokens if t not in have and t not in drop):
            tok["added_tokens"].append({"id": next_id, "content": token, "single_word": False, "lstrip": False,
                                        "rstrip": False, "normalized": False, "special": token not in NOT_SPECIAL})
            next_id += 1
    return change


def tool_model(broken_copy, name: str, *, template: str | None = None, drop=()) -> Path:
    _, tokens, bos, eos = FAMILIES[name]
    text = template if template is not None else (TEMPLATES / f"{name}.jinja").read_text(encoding="utf-8")
    return broken_copy("llama", zoo.both(zoo.edit_tokenizer(family_tokens(tokens, drop)),
                                         zoo.edit_json("tokenizer_config.json", chat_template=text,
                                                       bos_token=bos, eos_token=eos)))


def findings(model_dir, select=TOOL_CHECKS):
    report = run_checks(model_dir, select=select)
    assert all(c.status != "crashed" for c in report.checks), [c.reason for c in report.checks]
    return report


def fired(report) -> list[tuple[str, str]]:
    return [(f.check, f.severity.value) for f in report.findings]


def qwen(**edits) -> str:
    text = (TEMPLATES / "qwen2.5-7b-instruct.jinja").read_text(encoding="utf-8")
    for old, new in edits.values():
        assert old in text, old
        text = text.replace(old, new)
    return text


@pytest.mark.parametrize("name", [n for n in FAMILIES if n != "deepseek-r1-distill-qwen-32b"])
def test_real_tool_templates_are_clean(broken_copy, name):
    report = findings(tool_model(broken_copy, name))
    assert [f for f in fired(report) if f[1] != "info"] == []
    assert {c.id: c.status for c in report.checks} == dict.fromkeys(TOOL_CHECKS, "passed")


def test_granite_3_3_drops_earlier_calls_from_history_as_a_note(broken_copy):
    report = findings(tool_model(broken_copy, "granite-3.3-2b-instruct"))
    assert fired(report) == [("TOK033", "info")]
    assert report.findings[0].evidence["format"] == "granite"


def test_deepseek_r1_distill_never_renders_the_tool_definitions(broken_copy):
    # the released template handles tool calls and results but never reads `tools` (a real, known gap)
    report = findings(tool_model(broken_copy, "deepseek-r1-distill-qwen-32b"))
    assert ("TOK031", "warning") in fired(report)
    finding = next(f for f in report.findings if f.check == "TOK031")
    assert "identical with and without tools" in finding.message and finding.evidence["format"] == "deepseek_r1"


def test_definitions_dropped_from_a_healthy_template_are_caught(broken_copy):
    dropped = qwen(loop=("{%- for tool in tools %}\n        {{- \"\\n\" }}\n        {{- tool | tojson }}\n"
                         "    {%- endfor %}", ""))
    report = findings(tool_model(broken_copy, "qwen2.5-7b-instruct", template=dropped))
    assert fired(report) == [("TOK031", "warning")]
    assert "'get_weather' never appears" in report.findings[0].message


def test_a_split_marker_is_caught_and_named(broken_copy):
    report = findings(tool_model(broken_copy, "mistral-nemo-instruct-2407", drop=("[TOOL_CALLS]",)))
    assert fired(report) == [("TOK032", "warning")]
    evidence = report.findings[0].evidence
    assert evidence["format"] == "mistral_v3" and list(evidence["markers"]) == ["[TOOL_CALLS]"]
    assert "[AVAILABLE_TOOLS]" in evidence["single"]


def test_a_qwen_tool_call_tag_missing_from_the_tokenizer_is_caught(broken_copy):
    report = findings(tool_model(broken_copy, "qwen2.5-7b-instruct", drop=("<tool_call>", "</tool_call>")))
    assert fired(report) == [("TOK032", "warning")]
    assert set(report.findings[0].evidence["markers"]) == {"<tool_call>", "</tool_call>"}


def test_double_encoded_arguments_do_not_round_trip(broken_copy):
    doubled = qwen(args=("{{- tool_call.arguments | tojson }}", "{{- tool_call.arguments | tojson | tojson }}"))
    report = findings(tool_model(broken_copy, "qwen2.5-7b-instruct", template=doubled))
    assert fired(report) == [("TOK033", "warning")]
    finding = report.findings[0]
    assert finding.evidence["format"] == "hermes" and "double-encoded" in finding.evidence["parser_errors"][0]


def test_a_call_written_without_its_closing_brace_does_not_round_trip(broken_copy):
    broken = qwen(brace=("{{- '}\\n</tool_call>' }}", "{{- '\\n</tool_call>' }}"))
    report = findings(tool_model(broken_copy, "qwen2.5-7b-instruct", template=broken))
    assert fired(report) == [("TOK033", "warning")]
    assert "no call read" in report.findings[0].message


def test_llama_parameters_renamed_do_not_round_trip(broken_copy):
    # the template writes "args" where every Llama 3 parser reads "parameters"/"arguments": the arguments are lost
    text = (TEMPLATES / "llama-3.1-8b-instruct.jinja").read_text(encoding="utf-8")
    text = text.replace("{{- '\"parameters\": ' }}", "{{- '\"args\": ' }}")
    report = findings(tool_model(broken_copy, "llama-3.1-8b-instruct", template=text))
    assert fired(report) == [("TOK033", "warning")]
    assert "arguments {} read" in report.findings[0].message


def test_only_the_first_of_two_calls_written_is_caught(broken_copy):
    first_only = qwen(loop=("{%- for tool_call in message.tool_calls %}",
                            "{%- for tool_call in message.tool_calls[:1] %}"))
    report = findings(tool_model(broken_copy, "qwen2.5-7b-instruct", template=first_only))
    assert fired(report) == [("TOK033", "warning")]
    assert "two calls" in report.findings[0].message and "1 call(s) read, 2 written" in report.findings[0].message


def test_a_template_that_fails_on_the_tool_role_is_an_error(broken_copy):
    refuses = qwen(tool=('{%- elif message.role == "tool" %}',
                         '{%- elif message.role == "tool" %}{{ raise_exception("no tool role") }}'))
    report = findings(tool_model(broken_copy, "qwen2.5-7b-instruct", template=refuses))
    assert ("TOK030", "error") in fired(report)
    assert "no tool role" in next(f.message for f in report.findings if f.check == "TOK030")


def test_a_template_that_renders_only_tool_names_is_warned(broken_copy):
    names_only = qwen(tojson=("{{- tool | tojson }}", "{{- tool.function.name }}"))
    report = findings(tool_model(broken_copy, "qwen2.5-7b-instruct", template=names_only))
    assert fired(report) == [("TOK031", "warning")]


def test_gpt_oss_harmony_calls_round_trip(broken_copy):
    """gpt-oss's real template: recognised as harmony, its markers single tokens, its call read back (TOK033
    passes on the harmony parser, not on a 'no known format' note)."""
    report = findings(tool_model(broken_copy, "openai-gpt-oss-120b"))
    assert fired(report) == []


def test_gpt_oss_faults_are_caught(broken_copy):
    """The harmony template writing double-encoded arguments, and a tokenizer without <|call|>."""
    text = (TEMPLATES / "openai-gpt-oss-120b.jinja").read_text(encoding="utf-8")
    doubled = text.replace("{{- tool_call.arguments|tojson }}", "{{- tool_call.arguments|tojson|tojson }}")
    assert doubled != text
    report = findings(tool_model(broken_copy, "openai-gpt-oss-120b", template=doubled))
    assert fired(report) == [("TOK033", "warning")]
    assert report.findings[0].evidence["format"] == "harmony"
    assert "double-encoded" in report.findings[0].evidence["parser_errors"][0]
    report = findings(tool_model(broken_copy, "openai-gpt-oss-120b", drop=("<|call|>",)))
    assert fired(report) == [("TOK032", "warning")]
    assert list(report.findings[0].evidence["markers"]) == ["<|call|>"]


def test_a_template_without_tools_skips_all_four(factory_model_dir):
    report = findings(factory_model_dir("llama"))
    assert {c.id: c.status for c in report.checks} == dict.fromkeys(TOOL_CHECKS, "skipped")


@pytest.mark.assets
def test_smollm2_and_gemma3_templates_do_not_mention_tools(smollm2_dir, gemma3_270m_dir):
    for model in (smollm2_dir, gemma3_270m_dir):
        report = findings(model)
        assert fired(report) == []
        assert all(c.status == "skipped" for c in report.checks)


def real_tokenizer_with(tmp_path, source: Path, template: str, added: dict[str, int] | None = None) -> Path:
    """A copy of a real tokenizer directory with another template (and added tokens at the given ids)."""
    target = tmp_path / "tokenizer"
    shutil.copytree(source, target)
    (target / "chat_template.jinja").unlink(missing_ok=True)
    zoo.edit_json("tokenizer_config.json", chat_template=template)(target)
    if added:
        zoo.edit_tokenizer(lambda tok: tok["added_tokens"].extend(
            {"id": i, "content": c, "single_word": False, "lstrip": False, "rstrip": False, "normalized": False,
             "special": False} for c, i in added.items()))(target)
    return target


@pytest.mark.assets
def test_qwen2_5_template_on_the_real_qwen2_tokenizer(tmp_path, llamacpp_tokenizer_dir):
    # Qwen2's tokenizer predates <tool_call>/</tool_call> (ids 151657/151658 in Qwen2.5's): a Qwen2 fine-tune
    # served with Qwen2.5's template splits them; with the two tokens added as Qwen2.5 has them, it is clean
    template = (TEMPLATES / "qwen2.5-7b-instruct.jinja").read_text(encoding="utf-8")
    split = findings(real_tokenizer_with(tmp_path / "a", llamacpp_tokenizer_dir("qwen2"), template))
    assert fired(split) == [("TOK032", "warning")]
    assert set(split.findings[0].evidence["markers"]) == {"<tool_call>", "</tool_call>"}
    whole = real_tokenizer_with(tmp_path / "b", llamacpp_tokenizer_dir("qwen2"), template,
                                {"<tool_call>": 151657, "</tool_call>": 151658})
    assert fired(findings(whole)) == []


@pytest.mark.assets
def test_llama_3_1_template_on_the_real_llama_3_tokenizer(tmp_path, llamacpp_tokenizer_dir):
    # Llama 3.0's tokenizer has <|reserved_special_token_5|> where 3.1 has <|python_tag|> (128010), and no
    # <|eom_id|>: the template's built-in-tool branch writes markers that tokenizer splits
    template = (TEMPLATES / "llama-3.1-8b-instruct.jinja").read_text(encoding="utf-8")
    report = findings(real_tokenizer_with(tmp_path, llamacpp_tokenizer_dir("llama-bpe"), template))
    assert fired(report) == [("TOK032", "warning")]
    assert set(report.findings[0].evidence["markers"]) == {"<|python_tag|>", "<|eom_id|>"}


def test_a_gguf_whose_template_writes_markers_its_vocabulary_lacks(tmp_path):
    # the tiny GGUF (zoo_gguf: the factory's ChatML vocabulary) carrying Qwen2.5's tool template in
    # tokenizer.chat_template: the template renders and round-trips, but <tool_call> is no token of the vocabulary
    from tests.checks.zoo_gguf import write_variant
    template = (TEMPLATES / "qwen2.5-7b-instruct.jinja").read_text(encoding="utf-8")
    report = findings(write_variant(tmp_path, "model.gguf", metadata={"tokenizer.chat_template": template}))
    assert fired(report) == [("TOK032", "warning")]
    assert set(report.findings[0].evidence["markers"]) == {"<tool_call>", "</tool_call>"}


@pytest.mark.parametrize("name", list(FAMILIES))
def test_tool_turns_render_as_transformers_renders_them(broken_copy, name):
    # what the checks read is what transformers (an oracle here; vLLM renders through it) renders for the same
    # messages and tools, for every shape of the assistant turn both accept
    import transformers
    from checks.shared.chat.tool_conversations import CALL, SECOND_CALL, TOOLS, VARIANTS, conversation
    from reference_engine.tokenizer.tokenizer import Tokenizer
    model = tool_model(broken_copy, name)
    ours, theirs = Tokenizer.from_pretrained(model), transformers.PreTrainedTokenizerFast.from_pretrained(model)
    compared = 0
    for calls in ([CALL], [CALL, SECOND_CALL]):
        for arguments, content in VARIANTS:
            texts = []
            for tok in (ours, theirs):
                try:
                    texts.append(tok.apply_chat_template(conversation(calls, arguments, content), tools=TOOLS,
                                                         add_generation_prompt=False, tokenize=False))
                except Exception:   # both sides' template errors: compared where both render
                    texts.append(None)
            if None not in texts:
                assert texts[0] == texts[1], (len(calls), arguments, content)
                compared += 1
    assert compared >= 2


@pytest.mark.parametrize("name", [n for n in FAMILIES
                                  if n not in ("granite-3.3-2b-instruct", "deepseek-r1-distill-qwen-32b")])
def test_the_one_shot_conversation_renders_with_every_real_template(broken_copy, name):
    # the endpoint probes can send it; granite 3.3 drops the earlier call (TOK033's note) and the DeepSeek R1
    # distill never renders the definition (TOK031), the others show both
    from checks.shared.chat.tool_conversations import CALL, TOOLS, VARIANTS, one_shot
    from reference_engine.tokenizer.tokenizer import Tokenizer
    tok = Tokenizer.from_pretrained(tool_model(broken_copy, name))
    rendered = []
    for arguments, content in VARIANTS:
        try:
            rendered.append(tok.apply_chat_template(one_shot(arguments, content), tools=TOOLS, tokenize=False))
        except Exception:   # a shape this template refuses; another one renders
            continue
    assert rendered and "Lyon" in rendered[0] and CALL.arguments["city"] in rendered[0]
    assert rendered[0].count("get_weather") >= 2      # the definition and the earlier call


@pytest.mark.parametrize("version,spm", [("v2", True), ("v3", True), ("v3", False), ("v7", True), ("v7", False),
                                         ("v11", False), ("v13", False)])
def test_mistral_common_generated_templates_are_clean(broken_copy, version, spm):
    # mistral-common (Mistral's reference implementation, an oracle in tests only) generates the chat template of
    # each tokenizer version: v2-v7 write the [TOOL_CALLS] JSON list, v11+ name[ARGS]{...}
    from mistral_common.integrations.chat_templates import template_generator as generator
    from mistral_common.tokens.tokenizers.base import TokenizerVersion
    template = generator.build_chat_template(generator.TemplateConfig(version=TokenizerVersion(version), spm=spm))
    report = findings(tool_model(broken_copy, "mistral-small-3.2-24b-instruct-2506", template=template))
    assert fired(report) == []
    assert {c.id: c.status for c in report.checks} == dict.fromkeys(TOOL_CHECKS, "passed")


@pytest.mark.parametrize("fmt", ["sarif", "github", "gitlab", "junit"])
def test_tool_findings_render_in_every_ci_format(broken_copy, tmp_path, fmt):
    doubled = qwen(args=("{{- tool_call.arguments | tojson }}", "{{- tool_call.arguments | tojson | tojson }}"))
    model = tool_model(broken_copy, "qwen2.5-7b-instruct", template=doubled, drop=("</tool_call>",))
    out = tmp_path / f"report.{fmt}"
    result = CliRunner().invoke(cli, ["check", str(model), "--select", ",".join(TOOL_CHECKS), "--format", fmt,
                                      "-o", str(out), "--fail-on", "never"])
    assert result.exit_code == 0, result.output
    text = html.unescape(out.read_text(encoding="utf-8"))     # JUnit is XML
    assert "TOK032" in text and "</tool_call>" in text and "TOK033" in text and "double-encoded" in text
    if fmt in ("sarif", "gitlab"):
        json.load(io.StringIO(out.read_text(encoding="utf-8")))
