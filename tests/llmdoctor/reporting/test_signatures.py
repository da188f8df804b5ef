"""`llmdoctor explain "<error text>"`: real error texts map to their signatures; unknown text degrades."""
from __future__ import annotations

import pytest
from hypothesis import given, settings, strategies as st

from checks.catalogue.registry import FAMILIES
from findings import CATEGORIES
from llmdoctor.reporting.signatures import SIGNATURES, every_signature
from llmdoctor.reporting.signatures import match_details, match_signatures, render_explanation

# (text as users paste it, the signature it must produce) — the table first.
REAL_TEXTS = [
    ("IndexError: index out of range in self", "index-out-of-range"),
    ("../aten/src/ATen/native/cuda/Indexing.cu:1289: indexSelectLargeIndex: block: [12,0,0], thread: [32,0,0] "
     "Assertion `srcIndex < srcSelectDimSize` failed.\nRuntimeError: CUDA error: device-side assert triggered\n"
     "CUDA kernel errors might be asynchronously reported", "device-side-assert"),
    ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of "
     "79.10 GiB of which 1.23 GiB is free.", "cuda-out-of-memory"),
    ("RuntimeError: probability tensor contains either `inf`, `nan` or element < 0", "probability-nan"),
    ("ValueError: Token id 128256 is out of vocabulary", "token-out-of-vocabulary"),
    ("Assistant: !!!!!!!!!!!!!!!!!!!!!!!!!!!!!!", "exclamation-marks"),
    ("The answer is the answer is the answer is the answer is the answer is", "repeated-text"),
    ("The attention mask and the pad token id were not set. As a consequence, you may observe unexpected behavior. "
     "Please pass your input's `attention_mask` to obtain reliable results.", "attention-mask-pad-token"),
    # symptoms from the on-call pager
    ("latency creeps up for hours then OOM", "cuda-out-of-memory"),
    ("GPU shows 30% utilisation but it is slow", "low-utilisation-slow"),
    ("WARNING scheduler.py: Sequence group 17 is preempted by PreemptionMode.RECOMPUTE mode because there is not "
     "enough KV cache space.", "kv-cache-too-small"),
    ("RuntimeError: CUDA error: an illegal memory access was encountered", "illegal-memory-access"),
    ("safetensors_rust.SafetensorError: Error while deserializing header: MetadataIncompleteBuffer",
     "safetensors-corrupt"),
    ("RuntimeError: CUDA error: no kernel image is available for execution on the device", "no-kernel-image"),
    ("RuntimeError: The NVIDIA driver on your system is too old (found version 11040).", "driver-too-old"),
    ("size mismatch for model.embed_tokens.weight: copying a param with shape torch.Size([32004, 4096]) from "
     "checkpoint, the shape in current model is torch.Size([32000, 4096]).", "size-mismatch"),
    ("jinja2.exceptions.TemplateError: Conversation roles must alternate user/assistant/user/assistant/...",
     "chat-template-error"),
    ("NVRM: Xid (PCI:0000:3b:00): 79, pid=1234, GPU has fallen off the bus.", "gpu-hardware-fault"),
    ("The model never stops, it always hits max_new_tokens", "never-stops"),
]


@pytest.mark.parametrize("text, expected", REAL_TEXTS)
def test_real_error_text_matches(text, expected):
    ids = [s.id for s in match_signatures(text)]
    assert expected in ids
    assert ids[0] == expected or expected in ids[:2]  # the specific one leads


def test_every_signature_is_reachable_from_a_real_text():
    matched = {s.id for text, _ in REAL_TEXTS for s in match_signatures(text)}
    unmatched = {s.id for s in SIGNATURES} - matched - {"dtype-mismatch", "pickle-weights", "unknown-architecture",
                                                       "sequence-too-long", "mojibake-output"}
    assert not unmatched
    for text, sig_id in [
        ("RuntimeError: expected scalar type Half but found Float", "dtype-mismatch"),
        ("_pickle.UnpicklingError: Weights only load failed.", "pickle-weights"),
        ("The checkpoint you are trying to load has model type `qwen9` but Transformers does not recognize "
         "this architecture", "unknown-architecture"),
        ("Token indices sequence length is longer than the specified maximum sequence length for this model "
         "(9000 > 8192)", "sequence-too-long"),
        ("streamed output: caf\ufffd", "mojibake-output"),
    ]:
        assert sig_id in [s.id for s in match_signatures(text)]


def test_token_id_is_extracted():
    [m] = [m for m in match_details("Token id 151936 is out of vocabulary")
           if m.signature.id == "token-out-of-vocabulary"]
    assert m.values == {"token_id": "151936"}


def test_signature_table_is_well_formed():
    import checks
    registered = {spec.id for spec in checks.load_all()}
    ids = [s.id for s in every_signature()]
    assert len(ids) == len(set(ids))
    for sig in every_signature():
        assert sig.causes and sig.title and (sig.checks or sig.probes), sig.id
        for term in sig.checks:  # every --select term names a category, a family or a registered check id
            assert term in CATEGORIES or term in FAMILIES or term in registered, (sig.id, term)


def test_explanation_lists_causes_and_commands():
    text = render_explanation("RuntimeError: CUDA error: device-side assert triggered", model_dir="models/llama")
    assert "[device-side-assert]" in text and "CUDA_LAUNCH_BLOCKING=1" in text
    assert "$ llmdoctor check models/llama --select VOC002,VOC004,numerics" in text
    assert "1. an embedding lookup" in text


LONG_LOG = "\n".join(f"INFO step {i}: loss {1 / (i + 1):.6f}" for i in range(5000))  # ~150 kB, no signature


@pytest.mark.parametrize("text", ["", "   ", "hello world", "everything is fine", "\x00\xff", LONG_LOG],
                         ids=["empty", "blank", "hello", "fine", "bytes", "long-log"])
def test_unknown_text_degrades_gracefully(text):
    assert match_signatures(text) == []
    assert render_explanation(text).startswith("No known error signature matched this text.")


@settings(max_examples=150, deadline=None)
@given(st.text(max_size=400))
def test_never_raises_on_any_text(text):
    for sig in match_signatures(text):
        assert sig in every_signature()
    render_explanation(text)


def test_error_at_the_end_of_a_long_log_is_found():
    text = LONG_LOG + "\nTraceback (most recent call last):\ntorch.OutOfMemoryError: CUDA out of memory."
    assert [s.id for s in match_signatures(text)] == ["cuda-out-of-memory"]


def test_endpoint_checks_are_confirmed_by_probing_the_endpoint():
    """An EPT id never runs under `check`: the command to confirm it probes the server."""
    from llmdoctor.reporting.signature_types import Signature
    sig = Signature("s", "t", ("x",), ("c",), checks=("VOC002", "EPT043"))
    assert sig.confirm_commands("m") == ["llmdoctor check m --select VOC002",
                                         "llmdoctor probe endpoint URL --model m --select EPT043"]
