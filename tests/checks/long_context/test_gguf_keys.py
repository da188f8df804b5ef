"""GGF020 on a GGUF with no config.json beside it: the file's rope and context keys held to each other, to what
llama.cpp does with them and to what the architecture needs (checks/long_context/gguf_keys.py). Each broken file
is the zoo's tiny Llama GGUF (tests/checks/zoo_gguf.py) with keys rewritten, or a tensor-less file of another
architecture; the healthy twins are the zoo's healthy files and the real SmolLM2 and Gemma 3 GGUFs. Metadata only:
about a second per file."""
from __future__ import annotations

import io
import json

import numpy as np
import pytest

from llmdoctor.run.runner import run_checks
from reports import json as json_report
from tests import assets
from tests.checks.conftest import no_crashes
from tests.checks.zoo_gguf import DROP, F32, GGUFSpec, healthy, write_spec, write_variant
from tests.conftest import _asset

# name -> (llama.* keys changed on the zoo's healthy file (context_length 256, rope.freq_base 10000), the words
# GGF020's warning must hold)
BROKEN = {
    "freq_base_missing": ({"rope.freq_base": DROP}, "no llama.rope.freq_base: llama.cpp takes 10000"),
    "freq_base_zero": ({"rope.freq_base": 0.0}, "llama.rope.freq_base is 0.0, not a positive number"),
    "freq_base_nan": ({"rope.freq_base": float("nan")}, "llama.rope.freq_base is nan, not a positive number"),
    "scaling_type_unknown": ({"rope.scaling.type": "dynamic", "rope.scaling.factor": 2.0},
                             "'dynamic', none of llama.cpp's (none, linear, yarn, longrope): it aborts"),
    "yarn_without_factor": ({"rope.scaling.type": "yarn", "rope.scaling.original_context_length": 64},
                            "type is yarn but llama.rope.scaling.factor is None: llama.cpp stretches nothing"),
    "linear_factor_zero": ({"rope.scaling.type": "linear", "rope.scaling.factor": 0.0},
                           "type is linear but llama.rope.scaling.factor is 0.0"),
    "factor_without_type": ({"rope.scaling.factor": 4.0, "rope.scaling.original_context_length": 64},
                            "llama.rope.scaling.factor 4 with no llama.rope.scaling.type: llama.cpp applies it as "
                            "linear"),
    "old_linear_key_without_type": ({"rope.scale_linear": 2.0}, "llama.rope.scale_linear 2 with no"),
    "longrope_without_factor_tensors": ({"rope.scaling.type": "longrope", "rope.scaling.original_context_length": 64},
                                        "type is longrope but the file has no rope_factors_long / rope_factors_short"),
    "context_past_the_stretch": ({"rope.scaling.type": "yarn", "rope.scaling.factor": 2.0,
                                  "rope.scaling.original_context_length": 64},
                                 "context_length 256 is past what yarn scaling reaches: "
                                 "llama.rope.scaling.original_context_length 64 x factor 2 = 128"),
    "context_neither_length": ({"rope.scaling.type": "linear", "rope.scaling.factor": 8.0,
                                "rope.scaling.original_context_length": 64},
                               "context_length 256 is neither the original length nor the stretched one"),
    "context_below_original": ({"rope.scaling.type": "yarn", "rope.scaling.factor": 4.0,
                                "rope.scaling.original_context_length": 1024},
                               "context_length 256 is below llama.rope.scaling.original_context_length 1024: the "
                               "yarn scaling never applies"),
    "original_without_scaling": ({"rope.scaling.original_context_length": 64},
                                 "context_length 256 is 4x llama.rope.scaling.original_context_length 64, with no "
                                 "rope scaling"),
    "window_wider_than_context": ({"attention.sliding_window": 1024},
                                  "sliding_window 1024 is wider than context_length 256"),
    "context_zero": ({"context_length": 0}, "llama.context_length is 0: llama.cpp has no trained length"),
}


def ggf020(path):
    report = run_checks(path, select=["GGF020"])
    no_crashes(report)
    (run,) = report.checks
    return report, run.status, [f.message for f in report.findings if f.severity.value == "warning"]


@pytest.mark.parametrize("name", list(BROKEN))
def test_a_broken_key_is_caught_with_no_config_beside(tmp_path, name):
    keys, words = BROKEN[name]
    path = write_variant(tmp_path, "model.gguf", metadata={f"llama.{k}": v for k, v in keys.items()})
    report, status, found = ggf020(path)
    assert status == "failed" and any(words in m for m in found), found
    json_report.render(report, io.StringIO())          # the evidence stays JSON (a NaN base included)


def tensorless(tmp_path, arch: str, **keys):
    """A GGUF of `arch` holding only its long-context keys (GGF020 reads nothing else)."""
    meta = {f"{arch}.context_length": 1024, f"{arch}.rope.freq_base": 1000000.0, **{
        f"{arch}.{k.replace('__', '.')}": v for k, v in keys.items()}}
    meta = {k: v for k, v in meta.items() if v is not DROP}
    return write_spec(GGUFSpec(arch, meta), tmp_path / f"{arch}.gguf")


@pytest.mark.parametrize("arch,words", [("gemma3", "llama.cpp runs every layer as full attention"),
                                        ("gpt-oss", "llama.cpp refuses the file")])
def test_an_architecture_whose_layers_need_a_window_has_one(tmp_path, arch, words):
    _, status, found = ggf020(tensorless(tmp_path, arch))
    assert status == "failed" and any(f"{arch}.attention.sliding_window is None: {words}" in m for m in found), found
    _, status, found = ggf020(tensorless(tmp_path, arch, attention__sliding_window=128))
    assert status == "passed" and found == []


@pytest.mark.parametrize("preset", ["llama", "qwen2", "qwen3"])
def test_the_zoo_healthy_files_are_quiet(tmp_path, preset):
    _, status, found = ggf020(healthy(tmp_path, preset))
    assert status == "passed" and found == []


FACTORS = {name: (np.ones(8, np.float32), F32) for name in ("rope_factors_long.weight", "rope_factors_short.weight")}
HEALTHY = {   # name -> (llama.* keys, tensors added): scalings as convert_hf_to_gguf writes them
    "yarn_stretched_length": ({"rope.scaling.type": "yarn", "rope.scaling.factor": 4.0,
                               "rope.scaling.original_context_length": 64}, {}),
    "yarn_original_length": ({"rope.scaling.type": "yarn", "rope.scaling.factor": 4.0,          # Qwen2.5's way
                              "rope.scaling.original_context_length": 256}, {}),
    "linear_stretched_length": ({"rope.scaling.type": "linear", "rope.scaling.factor": 2.0,
                                 "rope.scaling.original_context_length": 128}, {}),
    "longrope_with_factor_tensors": ({"rope.scaling.type": "longrope"}, FACTORS),
    "phi3_factor_tensors_no_type": ({"rope.scaling.original_context_length": 64}, FACTORS),    # Phi-3 128k's way
    "window_inside_the_context": ({"attention.sliding_window": 128}, {}),
}


@pytest.mark.parametrize("name", list(HEALTHY))
def test_a_healthy_scaling_or_window_is_quiet(tmp_path, name):
    keys, tensors = HEALTHY[name]
    path = write_variant(tmp_path, "model.gguf", metadata={f"llama.{k}": v for k, v in keys.items()}, tensors=tensors)
    _, status, found = ggf020(path)
    assert status == "passed" and found == [], found


@pytest.mark.assets
def test_the_real_ggufs_alone_are_quiet(smollm2_gguf):
    """SmolLM2 (llama, base 100000, context 8192) and Gemma 3 270M (window 512, base 1e6, context 32768), each
    alone in its cache folder: read, nothing to say."""
    for path in (smollm2_gguf, _asset(assets.gemma3_270m_gguf)):
        assert not (path.parent / "config.json").exists()
        _, status, found = ggf020(path)
        assert status == "passed" and found == [], (path, found)


def test_an_unreadable_config_beside_falls_back_to_the_keys(tmp_path):
    path = write_variant(tmp_path, "model.gguf", metadata={"llama.rope.freq_base": DROP})
    (tmp_path / "config.json").write_text("{ not json")
    report, status, found = ggf020(path)
    notes = [f.message for f in report.findings if f.severity.value == "info"]
    assert any("config.json beside the GGUF cannot be read" in m for m in notes), notes
    assert any("no llama.rope.freq_base" in m for m in found), found
    (tmp_path / "config.json").write_text(json.dumps([1, 2]))
    assert any("no llama.rope.freq_base" in m for m in ggf020(path)[2])
