"""Where findings point (llmdoctor/reporting/locate.py, json_lines.py) and their fingerprints across runs."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from findings import Finding, Location, Report
from llmdoctor.reporting.json_lines import find_key_line, key_lines
from llmdoctor.reporting.locate import KnownReportError, load_known, locate_report, mark_known, normalize_message

NESTED = """{
  "text_config": {"vocab_size": 3,
    "items": [{"vocab_size": 2}, "a \\"quoted\\": string, with , and {"]},
  "vocab_size": 5,
  "weight_map": {"model.layers.0.self_attn.q_proj.weight": "model-00001-of-00002.safetensors",
    "lm_head.weight": "model-00002-of-00002.safetensors"}
}
"""


def test_key_lines_follow_nesting_and_ignore_string_contents():
    keys = dict(key_lines(NESTED))
    assert keys[("vocab_size",)] == 4 and keys[("text_config", "vocab_size")] == 2
    assert keys[("text_config", "items", 0, "vocab_size")] == 3
    assert keys[("weight_map", "lm_head.weight")] == 6
    assert len(keys) == 8   # nothing invented from the quoted string's colon, comma and brace


def test_find_key_line_prefers_exact_then_dotted_then_shallowest(tmp_path):
    path = tmp_path / "x.json"
    path.write_text(NESTED)
    assert find_key_line(path, "vocab_size") == 4                     # the top-level one, not text_config's
    assert find_key_line(path, "text_config.vocab_size") == 2
    assert find_key_line(path, "lm_head.weight") == 6                 # a tensor name in weight_map (dots in it)
    assert find_key_line(path, "missing") is None
    assert find_key_line(tmp_path / "absent.json", "vocab_size") is None


def model_dir(root: Path, sharded: bool = True) -> Path:
    model = root / "m"
    model.mkdir()
    (model / "config.json").write_text('{\n  "hidden_size": 8,\n  "vocab_size": 32\n}\n')
    (model / "tokenizer_config.json").write_text('{\n  "bos_token": "<s>",\n  "eos_token": "</s>"\n}\n')
    (model / "chat_template.jinja").write_text("{% for m in messages %}\n{{ m.content }}\n{% endfor %}\n")
    (model / "model.safetensors").write_bytes(b"\0" * 16)
    if sharded:
        (model / "model.safetensors.index.json").write_text(json.dumps(
            {"metadata": {}, "weight_map": {"model.embed_tokens.weight": "a", "lm_head.weight": "b"}}, indent=2))
    return model


def finding(check="VOC002", message="config.vocab_size 32 is less than 40 ids", location=None, **kw) -> Finding:
    return Finding(check, kw.pop("category", "vocab"), kw.pop("severity", "error"), message, location=location, **kw)


def located(model: Path, *findings: Finding, shown: str | None = None) -> list[Finding]:
    report = Report(model=str(model), fingerprint=None, tool_version="0", generated_at="t", findings=list(findings))
    locate_report(report, model, shown)
    return report.findings


def test_lines_point_at_the_key_the_template_line_and_the_index(tmp_path):
    model = model_dir(tmp_path)
    out = located(model, finding(location=Location("config.json", logical="vocab_size")),
                  finding(location=Location("tokenizer_config.json", logical="eos_token")),
                  finding(location=Location("chat_template.jinja", line=2, logical="chat_template")),
                  finding(location=Location("model.safetensors", logical="lm_head.weight")),
                  finding(location=Location("model.safetensors", logical="model.norm.weight")),
                  finding(), shown="repo/m")
    where = [(f.location.file, f.location.line, f.location.logical) for f in out]
    assert where == [("repo/m/config.json", 3, "vocab_size"), ("repo/m/tokenizer_config.json", 3, "eos_token"),
                     ("repo/m/chat_template.jinja", 2, "chat_template"),
                     ("repo/m/model.safetensors.index.json", 5, "lm_head.weight"),   # its line in the index
                     ("repo/m/model.safetensors", None, "model.norm.weight"),   # not in the index: its file
                     ("repo/m/config.json", 1, None)]                  # nothing named: config.json line 1


def test_a_tensor_points_at_its_safetensors_file_and_a_missing_file_at_config(tmp_path):
    model = model_dir(tmp_path, sharded=False)
    tensor, missing = located(model, finding(evidence={"tensor": "lm_head.weight"}),
                              finding(location=Location("tokenizer.json")))
    assert (tensor.location.file, tensor.location.line, tensor.location.logical) == \
        (f"{model.as_posix()}/model.safetensors", None, "lm_head.weight")   # inferred from the evidence
    assert (missing.location.file, missing.location.line, missing.location.logical) == \
        (f"{model.as_posix()}/config.json", 1, "tokenizer.json")


def test_a_shard_named_by_the_check_or_none_at_all(tmp_path):
    model = model_dir(tmp_path)
    (model / "model.safetensors").unlink()             # sharded: only the shards and the index
    (model / "model-00002-of-00002.safetensors").write_bytes(b"\0" * 16)
    shard, unlisted, pickled = located(
        model, finding(location=Location("model-00002-of-00002.safetensors", logical="model.norm.weight")),
        finding(location=Location("model.safetensors", logical="model.norm.weight")),
        finding(location=Location("pytorch_model.bin")))
    assert (shard.location.file, shard.location.line) == (f"{model.as_posix()}/model-00002-of-00002.safetensors", None)
    assert (unlisted.location.file, unlisted.location.line, unlisted.location.logical) == \
        (f"{model.as_posix()}/config.json", 1, "model.norm.weight")      # no file holds it: config.json stands in
    assert (pickled.location.file, pickled.location.line, pickled.location.logical) == \
        (f"{model.as_posix()}/config.json", 1, "pytorch_model.bin")      # a missing binary file, no tensor named
    assert len({shard.fingerprint, unlisted.fingerprint}) == 2


def test_a_gguf_file_is_its_own_anchor(tmp_path):
    gguf = tmp_path / "model.gguf"
    gguf.write_bytes(b"GGUF" + b"\0" * 20)
    (out,) = located(gguf, finding(check="GGF003", category="files", evidence={"tensor": "blk.0.attn_q.weight"}),
                     shown="models/model.gguf")
    assert (out.location.file, out.location.line, out.location.logical) == \
        ("models/model.gguf", None, "blk.0.attn_q.weight")


def test_fingerprints_ignore_numbers_paths_and_where_the_model_lives(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    a.mkdir(), b.mkdir()
    first = model_dir(a)
    second = model_dir(b)
    loc = Location("config.json", logical="vocab_size")
    (x,) = located(first, finding(message=f"{first}/config.json: vocab_size 32 < 40", location=loc))
    (y,) = located(second, finding(message=f"{second.resolve()}/config.json: vocab_size 31 < 44", location=loc),
                   shown="relative/m")
    assert x.fingerprint == y.fingerprint and len(x.fingerprint) == 32
    (other,) = located(first, finding(location=Location("config.json", logical="hidden_size")))
    assert other.fingerprint != x.fingerprint
    repeats = located(first, finding(message="tensor 1 is zero"), finding(message="tensor 2 is zero"))
    assert repeats[0].fingerprint != repeats[1].fingerprint   # the same text twice stays two findings
    assert normalize_message("run at 0x7f3a12 took 1.5e-3 s, sha 3fa4bc9d1e") == "run at # took # s, sha #"
    short = tmp_path / "c" / "m"
    short.mkdir(parents=True)
    (short / "config.json").write_text("{}")
    (z,) = located(short, finding(message="m/config.json: embedding too small", location=loc), shown="m")
    (w,) = located(short, finding(message=f"{short}/config.json: embedding too small", location=loc))
    assert z.fingerprint == w.fingerprint      # the path replaced as a path, "embedding" left alone


def test_known_findings_never_fail_and_new_ones_do(tmp_path):
    model = model_dir(tmp_path)
    old = located(model, finding(location=Location("config.json", logical="vocab_size")))
    known = tmp_path / "known.json"
    known.write_text(json.dumps({"tool": "llmdoctor", "findings": [{"fingerprint": old[0].fingerprint}]}))
    report = Report(model="m", fingerprint=None, tool_version="0", generated_at="t",
                    findings=[finding(location=Location("config.json", logical="vocab_size")),
                              finding(check="CFG002", category="config", message="head_dim 7 is odd",
                                      location=Location("config.json", logical="hidden_size"))])
    locate_report(report, model)
    mark_known(report, known)
    assert [f.known for f in report.findings] == [True, False] and report.known_report == str(known)
    assert report.failing() == [report.findings[1]] and report.exit_code() == 1
    report.findings.pop()
    assert report.exit_code() == 0


@pytest.mark.parametrize("content, why", [("not json", "not JSON"), ("[1, 2]", "not a JSON report"),
                                          ('{"tool": "other", "findings": []}', "not a JSON report")])
def test_a_bad_known_file_is_one_clear_error(tmp_path, content, why):
    path = tmp_path / "known.json"
    path.write_text(content)
    with pytest.raises(KnownReportError, match=why):
        load_known(path)
    with pytest.raises(KnownReportError, match="cannot read"):
        load_known(tmp_path / "absent.json")
