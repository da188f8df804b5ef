"""`llmdoctor generate`: the same text as the engine, JSON fields, streaming, one-line errors."""
import json

import pytest
from click.testing import CliRunner

from llmdoctor.cli import cli
from tests.reference_engine.generate.generate_models import engine, model_dir


@pytest.fixture(scope="module")
def runner():
    return CliRunner()


def test_generate_prints_the_engine_text(runner):
    path = model_dir("llama")
    expected = engine("llama").generate("The old lighthouse", max_new_tokens=12)[0]
    result = runner.invoke(cli, ["generate", str(path), "The old lighthouse", "--max-new-tokens", "12"])
    assert result.exit_code == 0, result.output
    assert result.stdout.rstrip("\n") == expected.text
    assert f"finish_reason={expected.finish_reason}" in result.stderr


def test_generate_json_and_chat(runner):
    path = model_dir("llama")
    chat = [{"role": "user", "content": "hi"}]
    expected = engine("llama").generate([chat], max_new_tokens=6, temperature=0.9, seed=4)[0]
    result = runner.invoke(cli, ["generate", str(path), "hi", "--chat", "--json", "--max-new-tokens", "6",
                                 "--temperature", "0.9", "--seed", "4"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data["token_ids"] == expected.token_ids and data["text"] == expected.text
    assert data["prompt_token_ids"] == expected.prompt_token_ids and len(data["logprobs"]) == 6
    assert data["finish_reason"] == expected.finish_reason


def test_generate_stream(runner):
    path = model_dir("llama")
    expected = engine("llama").generate("A small library", max_new_tokens=10, ignore_eos=True)[0]
    result = runner.invoke(cli, ["generate", str(path), "A small library", "--stream", "--ignore-eos",
                                 "--max-new-tokens", "10"])
    assert result.exit_code == 0 and result.stdout == expected.text + "\n"


@pytest.mark.parametrize("args, message", [
    (["--top-p", "2"], "top_p must be in (0, 1]"),
    (["--num-beams", "2", "--temperature", "0.5"], "beam sampling"),
    (["--max-new-tokens", "0"], "max_new_tokens"),
])
def test_bad_settings_are_one_line_errors(runner, args, message):
    result = runner.invoke(cli, ["generate", str(model_dir("llama")), "x"] + args)
    assert result.exit_code == 2 and message in result.stderr
    assert "Traceback" not in result.output and len(result.stderr.strip().splitlines()) == 1


def test_missing_model_dir(runner, tmp_path):
    result = runner.invoke(cli, ["generate", str(tmp_path / "nope"), "x"])
    assert result.exit_code == 2 and "no such directory" in result.stderr


def test_generate_kv_cache_bound():
    """generate's KV cache is sized to what the request can need (prompt bytes + template slack + reply, per
    beam), and the plan counts those tokens: no default 1 GiB cache beside the plan."""
    from llmdoctor.commands.generate import TEMPLATE_SLACK_TOKENS, kv_tokens_bound
    from reference_engine.generate.sampling_params import SamplingParams
    assert kv_tokens_bound("héllo", SamplingParams(max_new_tokens=10)) == 6 + TEMPLATE_SLACK_TOKENS + 10
    chat = [{"role": "system", "content": "ab"}, {"role": "user", "content": "cd"}]
    assert kv_tokens_bound(chat, SamplingParams(max_new_tokens=4, num_beams=3, temperature=0)) == \
        3 * (4 + TEMPLATE_SLACK_TOKENS + 4)
