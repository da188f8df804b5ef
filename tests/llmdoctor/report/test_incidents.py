"""The incident table (llmdoctor/report/incidents.py) and docs/incidents.md: `llmdoctor explain` finds each incident
by the words its users wrote, and each row names the check that catches it."""
from __future__ import annotations

from pathlib import Path

from llmdoctor.report.incidents import CHAT
from llmdoctor.report.signatures import match_signatures, render_explanation

DOCS = Path(__file__).resolve().parents[3] / "docs" / "incidents.md"


def test_generation_config_override_is_found_by_its_symptoms():
    """vLLM's --generation-config auto (EPT032): the symptom as users wrote it in vllm#15241 and #15281."""
    signature = next(s for s in CHAT if s.id == "generation-config-overrides-request-defaults")
    for words in ("Temperature is ignored in vLLM 0.8.0", "my top_k seems to be ignored by the server",
                  "WARNING Default sampling parameters have been overridden by the model's huggingface "
                  "generation config"):
        assert signature in match_signatures(words), words
    assert "EPT032" in render_explanation("temperature is ignored")
    assert not match_signatures("the temperature in Paris is 20 degrees")
    row = next(line for line in DOCS.read_text().splitlines() if "vllm#15241" in line)
    assert "EPT032" in row and "--select EPT032" in row
