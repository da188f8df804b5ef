"""File checks never unpickle, list every damaged file, and notice shards the index forgot."""
from __future__ import annotations

import os
import pickle
import shutil

from llmdoctor.run.runner import run_checks
from tests.checks import zoo


class Payload:
    """A pickle that would create a file if anything ever unpickled it."""

    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return (os.mkdir, (self.marker,))


def test_hostile_pickle_is_listed_never_loaded(broken_copy, tmp_path):
    marker = str(tmp_path / "pwned")
    d = broken_copy("llama", lambda d: (d / "pytorch_model.bin").write_bytes(pickle.dumps(Payload(marker))))
    report = run_checks(d, select=["files", "config", "weights", "vocab", "embeddings", "tokenizer"])
    assert [(f.check, f.severity.value) for f in report.findings if f.check == "FIL004"] == [("FIL004", "warning")]
    assert not os.path.exists(marker)


def test_every_damaged_file_is_reported(broken_copy):
    def two_bad(d):
        zoo.truncate(d)
        shutil.copy(d / "model.safetensors", d / "extra.safetensors")
    report = run_checks(broken_copy("llama", two_bad), select=["FIL002"])
    assert sorted(f.evidence["file"] for f in report.findings) == ["extra.safetensors", "model.safetensors"]


def test_shard_missing_from_index_is_a_warning(broken_copy):
    d = broken_copy("sharded", lambda d: shutil.copy(d / zoo.SHARD_2, d / "model-extra.safetensors"))
    report = run_checks(d, select=["FIL003"])
    found = [(f.severity.value, f.evidence["shard"]) for f in report.findings]
    assert found == [("warning", "model-extra.safetensors")]
