"""Tokenizer-source checks (TOK007, TOK020-TOK028) on real tokenizer files: healthy directories (a converted
Mistral and Llama 2 SentencePiece model with matching flags, Mistral v7 with user-defined pieces and its instruct
template, SmolLM2 with a consistent tiktoken export, Llama 3's vocabulary with its tiktoken file and instruct
template in both tokenizer.json layouts, a tekken vocabulary with its converted tokenizer.json) get no warning;
each planted disagreement fires its check, names the sources and the input that behaves differently, and carries
a location."""
from __future__ import annotations

import shutil

import pytest

from llmdoctor.run.runner import run_checks
from tests.checks.conftest import fired, no_crashes
from tests.checks.zoo_sources import BASES, FAULTS, build_base

pytestmark = pytest.mark.assets
SOURCE_CHECKS = ["TOK007", *(f"TOK0{n}" for n in range(20, 30))]


@pytest.fixture(scope="session")
def source_base(tmp_path_factory):
    built = {}
    root = tmp_path_factory.mktemp("source-bases")

    def get(name):
        if name not in built:
            built[name] = build_base(name, root)
        return built[name]
    return get


def run(model_dir, select=None):
    report = run_checks(model_dir, select=select or ["tokenizer"])
    no_crashes(report)
    return report


@pytest.mark.parametrize("base", BASES)
def test_healthy_real_directories_have_no_warning(base, source_base):
    report = run(source_base(base))
    assert [f"{f.check} {f.message}" for f in report.findings if f.severity.value != "info"] == []
    ran = {c.id for c in report.checks if c.status == "passed"}
    spm = {"TOK020", "TOK021", "TOK022", "TOK023", "TOK024", "TOK025"}
    expected = {"mistral": spm, "mistral_v7": spm, "llama2": {"TOK020", "TOK022", "TOK023", "TOK025"},
                "tiktoken": {"TOK027"}, "tekken": {"TOK028"}, "llama3": {"TOK027"}, "llama3_outside": {"TOK027"}}
    assert expected[base] <= ran, sorted(ran)
    if base in ("llama3", "llama3_outside", "mistral_v7"):   # instruct templates writing BOS: a note, not a warning
        assert [f.severity.value for f in report.findings if f.check == "TOK007"] == ["info"]


def test_smollm2_has_no_source_warning(smollm2_dir):
    report = run(smollm2_dir, SOURCE_CHECKS)
    assert [f.check for f in report.findings if f.severity.value != "info"] == []


@pytest.mark.parametrize("fault", FAULTS, ids=[f.name for f in FAULTS])
def test_planted_disagreement_fires(fault, source_base, tmp_path):
    planted(fault, source_base, tmp_path)


def planted(fault, source_base, tmp_path):
    d = shutil.copytree(source_base(fault.base), tmp_path / "model")
    fault.apply(d)
    report = run(d, SOURCE_CHECKS)
    expected = f"{fault.check}:{fault.severity}"
    assert expected in fired(report), (fault.name, fired(report))
    # one root cause, one finding: the other source checks stay quiet (or note at info)
    assert [f for f in fired(report) if not f.endswith(":info")] == ([] if fault.severity == "info" else [expected]), \
        (fault.name, fired(report))
    finding = next(f for f in report.findings if f.check == fault.check and f.severity.value == fault.severity)
    assert finding.location is not None and finding.location.file, fault.name
    if fault.check != "TOK007":   # the others name what disagrees and show an input
        assert any(name in finding.message for name in ("tokenizer.json", "tokenizer.model", "tekken.json",
                                                         "tokenizer_config.json")), finding.message
    return finding


def test_findings_show_the_smallest_input(source_base, tmp_path):
    legacy = next(f for f in FAULTS if f.name == "legacy_declared_false")
    finding = planted(legacy, source_base, tmp_path)
    assert finding.evidence["input"] == "<s>a" and "declares legacy = false" in finding.message
    prefix = next(f for f in FAULTS if f.name == "dummy_prefix_lost")
    finding = planted(prefix, source_base, tmp_path / "p")
    assert finding.evidence["input"] == "a" and "does not add the dummy prefix" in finding.message
    fallback = next(f for f in FAULTS if f.name == "byte_fallback_lost")
    finding = planted(fallback, source_base, tmp_path / "f")
    assert 0 in finding.evidence["tokenizer.json"] and 0 not in finding.evidence["tokenizer.model"]   # <unk>


@pytest.mark.parametrize("base", ["llama3", "llama3_outside"])
def test_three_swapped_rank_pairs_are_told_apart(base, source_base, tmp_path):
    """The six ids of three swapped pairs, and nothing else: the 256 special tokens tokenizer.json lists (inside
    model.vocab or not) are not ranks of the tiktoken file."""
    from tests.checks.zoo_sources import THREE_PAIRS, swap_tiktoken_ranks
    d = shutil.copytree(source_base(base), tmp_path / "model")
    swap_tiktoken_ranks(d, THREE_PAIRS)
    finding = next(f for f in run(d, ["TOK027"]).findings)
    assert finding.severity.value == "error" and finding.evidence["count"] == 6, finding.message
    assert sorted(case["id"] for case in finding.evidence["ids"]) == sorted(i for pair in THREE_PAIRS for i in pair)
    assert "6 id(s) differ between original/tokenizer.model and tokenizer.json, e.g. id 300" in finding.message


def test_legacy_false_conversion_is_healthy(tmp_path):
    """transformers' own legacy=false conversion (Metaspace "first") with legacy=false declared: no warning. Its
    one departure from sentencepiece, no dummy prefix before a text that starts with a space, is noted (info)."""
    from tests import spm_files
    plain = spm_files.write_dir(tmp_path / "spm", spm_files.mistral_proto())
    d = spm_files.converted_dir(tmp_path / "converted", plain, legacy=False)
    report = run(d)
    assert [f"{f.check} {f.message}" for f in report.findings if f.severity.value != "info"] == []
    note = next(f for f in report.findings if f.check == "TOK022")
    assert note.severity.value == "info" and note.evidence["input"][:1].isspace() and "sentencepiece" in note.message


@pytest.mark.parametrize("name", ["tokenizer.model.v1", "mistral_instruct_tokenizer_241114.model.v7"])
def test_only_tokenizer_model_runs_the_tokenizer_checks(name, tmp_path, mistral_sentencepiece_models):
    """A directory with only tokenizer.model (v7: user-defined pieces): the tokenizer checks run on it (nothing
    crashes, nothing warns)."""
    from tests import spm_files
    d = spm_files.write_dir(tmp_path / "ok", mistral_sentencepiece_models[name].read_bytes())
    report = run(d)
    assert [f"{f.check} {f.message}" for f in report.findings if f.severity.value != "info"] == []
    assert {"TOK005", "TOK006", "TOK029"} <= {c.id for c in report.checks if c.status == "passed"}


def test_trained_nmt_nfkc_model_runs_the_tokenizer_checks(tmp_path, botchan_text):
    """A tokenizer.model trained with sentencepiece's defaults (nmt_nfkc, a precompiled map; byte fallback so that
    every probe can be spelled) loads: TOK029 passes, no tokenizer check warns, and TOK005 notes the probes NFKC and
    whitespace removal rewrite by design instead of calling them lost."""
    from tests import spm_files
    from tests.reference_engine.tokenizer.test_sentencepiece_normalizer import train
    data = train(botchan_text.splitlines(), user_defined_symbols=["[REF]"], byte_fallback=True)
    report = run(spm_files.write_dir(tmp_path / "nfkc", data))
    assert [f"{f.check} {f.message}" for f in report.findings if f.severity.value != "info"] == []
    assert "TOK029" in {c.id for c in report.checks if c.status == "passed"}
    note = next(f for f in report.findings if f.check == "TOK005")
    assert "sentencepiece nmt_nfkc" in note.message and note.severity.value == "info"


@pytest.mark.parametrize("name", ["absurd length", "truncated by one byte", "duplicate piece", "group wire type",
                                  "byte piece without byte_fallback", "no trainer spec"])
def test_corrupt_tokenizer_model_is_one_finding(name, tmp_path):
    from tests.reference_engine.tokenizer.test_sentencepiece_corrupt import CORRUPTIONS
    from tests import spm_files
    d = spm_files.write_dir(tmp_path / "bad", CORRUPTIONS[name])
    report = run(d)
    assert fired(report) == ["TOK029:error"], fired(report)
    finding = report.findings[0]
    assert finding.location.file.endswith("tokenizer.model") and "\n" not in finding.message
    reasons = " ".join(c.reason or "" for c in report.checks if c.status == "skipped")
    assert "tokenizer.model" in reasons


def test_gguf_beside_its_tokenizer_model(tmp_path, llamacpp_vocab):
    """A GGUF directory that kept tokenizer.model: pieces and scores per id are compared with the GGUF's arrays."""
    from tests import spm_files
    proto = spm_files.llama2_proto()
    d = spm_files.write_dir(tmp_path / "gguf", proto)
    shutil.copy(llamacpp_vocab("llama-spm").gguf, d / "model.gguf")
    report = run(d, ["TOK020"])
    assert report.findings == [] and [c.status for c in report.checks] == ["passed"]

    def rescore(p):
        p.pieces[5000].score = p.pieces[5000].score + 1.5
    spm_files.write_dir(d, spm_files.edited(proto, rescore))
    finding = next(f for f in run(d, ["TOK020"]).findings)
    assert finding.severity.value == "error" and "score" in finding.message and "id 5000" in finding.message


def test_transformers_own_conversion_is_judged_by_the_oracles(tmp_path, mistral_sentencepiece_models):
    """tokenizer.json as the installed transformers converts Mistral's tokenizer.model. Whatever TOK020 says must
    match the oracles: a finding's input encodes differently in `tokenizers` and `sentencepiece`, and no finding
    means the two agree on whitespace runs (transformers 5.x ranks the "▁▁" merges by id, not score: "a  the")."""
    import sentencepiece as spm
    from tokenizers import Tokenizer as HFTokenizer
    from transformers import LlamaTokenizer

    path = mistral_sentencepiece_models["tokenizer.model.v1"]
    d = tmp_path / "converted"
    d.mkdir()
    shutil.copy(path, d / "tokenizer.model")
    LlamaTokenizer.from_pretrained(d).save_pretrained(d)
    hf, sp = HFTokenizer.from_file(str(d / "tokenizer.json")), spm.SentencePieceProcessor(model_file=str(path))
    report = run(d, ["TOK020"])
    oracles_differ = any(hf.encode(t, add_special_tokens=False).ids != sp.encode(t)
                         for t in ("a  the", "    def f():", "x  y"))
    if not oracles_differ:
        assert report.findings == []
        return
    finding = report.findings[0]
    assert finding.severity.value == "error" and "score order" in finding.message
    text = finding.evidence["input"]
    assert hf.encode(text, add_special_tokens=False).ids != sp.encode(text), text
