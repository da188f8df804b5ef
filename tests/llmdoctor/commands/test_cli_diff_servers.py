"""`llmdoctor diff URL_A URL_B` through click's CliRunner, on fake servers behind real ports: the report and exit
codes of `diff DIR DIR`, and every misuse (a URL beside a directory, an option of the other kind, a dead port) as
one line with exit 2."""
from __future__ import annotations

import json
from pathlib import Path

import jsonschema
from click.testing import CliRunner

from llmdoctor.cli import cli
from tests.checks.diff.server_fakes import FakeServer, HttpFake
from tests.endpoint_assets import free_port

FAST = ["--prompts", "1", "--max-tokens", "4"]


def invoke(*args):
    return CliRunner().invoke(cli, [str(a) for a in args], catch_exceptions=False)


def one_line_error(result, start: str) -> None:
    assert result.exit_code == 2, result.output
    assert result.output.strip().count("\n") == 0 and "Traceback" not in result.output
    assert start in result.output


def test_two_servers_report_like_a_diff_and_fail_on_a_difference():
    with HttpFake(FakeServer()) as a, HttpFake(FakeServer()) as same, HttpFake(FakeServer(flip_at=1)) as flipped:
        result = invoke("diff", a.url, same.url + "/v1", *FAST, "--format", "json", "--fail-on", "warning")
        assert result.exit_code == 0, result.output
        report = json.loads(result.output)
        jsonschema.validate(report, json.loads((Path(__file__).parents[3] / "docs" / "report.schema.json")
                                               .read_text(encoding="utf-8")))
        assert report["model"] == f"{a.url} vs {same.url}"
        assert {c["id"] for c in report["checks"]} == {"DIF070", "DIF071", "DIF072", "DIF073"}
        result = invoke("diff", a.url, flipped.url, *FAST, "--fail-on", "warning", "--select", "DIF070",
                        "--format", "json")
        assert result.exit_code == 1
        message = json.loads(result.output)["findings"][0]["message"]
        assert "answers part at token 2: reference ' bravo' vs candidate ' charlie'" in message


def test_quick_and_the_options_are_honoured():
    fake = FakeServer()
    with HttpFake(FakeServer()) as a, HttpFake(fake) as b:
        result = invoke("diff", a.url, b.url, "--quick", "--select", "DIF070", "--format", "json")
        assert result.exit_code == 0, result.output
        answers = json.loads(result.output)["findings"][0]["evidence"]["answers"]
        assert len(answers) == 2 and answers[0]["tokens"] == [7, 7]     # two prompts; the fake stops at 7 words
        assert fake.seen.count("/v1/chat/completions") == 2


def test_served_names_go_into_each_servers_requests():
    a_fake, b_fake = FakeServer(), FakeServer()
    models = {}
    for fake, key in ((a_fake, "a"), (b_fake, "b")):
        chat = fake.chat

        def record(body, chat=chat, key=key):
            models.setdefault(key, set()).add(body.get("model"))
            return chat(body)
        fake.chat = record
    with HttpFake(a_fake) as a, HttpFake(b_fake) as b:
        assert invoke("diff", a.url, b.url, *FAST, "--select", "DIF070", "--served-name", "prod",
                      "--served-name", "canary").exit_code == 0
        assert models == {"a": {"prod"}, "b": {"canary"}}
        one_line_error(invoke("diff", a.url, b.url, "--served-name", "x", "--served-name", "y", "--served-name", "z"),
                       "--served-name given 3 times: once for both servers, or twice")


def test_the_help_states_the_defaults_the_run_uses():
    """The help writes the numbers out (importing the checks for them would load torch into every CLI start)."""
    from checks.diff.servers.requests import DEFAULT_MAX_TOKENS, DEFAULT_PROMPTS, QUICK_MAX_TOKENS, QUICK_PROMPTS
    text = " ".join(invoke("diff", "--help").output.split())
    assert f"prompts sent to both [default: {DEFAULT_PROMPTS}, {QUICK_PROMPTS} with --quick]" in text
    assert f"tokens per answer [default: {DEFAULT_MAX_TOKENS}, {QUICK_MAX_TOKENS} with --quick]" in text


def test_a_url_beside_a_directory_is_one_line(tmp_path):
    result = invoke("diff", "http://127.0.0.1:9", tmp_path)
    one_line_error(result, f"diff compares two models or two servers: http://127.0.0.1:9 is a URL, {tmp_path} is "
                           f"not; to compare a server with a model run `llmdoctor probe endpoint http://127.0.0.1:9 "
                           f"--model {tmp_path}`")


def test_options_of_the_other_kind_are_refused_not_ignored(tmp_path):
    one_line_error(invoke("diff", "http://127.0.0.1:9", "http://127.0.0.1:10", "--text", tmp_path / "t.txt",
                          "--device", "cpu"),
                   "--device, --text: read only when diff compares two models, and these are two servers")
    one_line_error(invoke("diff", tmp_path, tmp_path, "--prompts", "2"),
                   "--prompts: read only when diff compares two servers, and these are two models")


def test_a_dead_port_is_one_line():
    with HttpFake(FakeServer()) as a:
        dead = f"http://127.0.0.1:{free_port()}"
        result = invoke("diff", a.url, dead, "--timeout", "2")
    one_line_error(result, f"{dead}: not an OpenAI-compatible server that answers (GET /v1/models: ConnectError")
