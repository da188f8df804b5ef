"""A model directory without a tokenizer: token-id prompts are answered with ids and empty text, as vLLM does
with skip_tokenizer_init; what needs text (string prompts, stop strings) is a clear error."""
import shutil

import pytest

from reference_engine.engine import Engine
from reference_engine.errors import ModelDirError
from tests.reference_engine.generate.generate_models import engine, model_dir

PROMPT = [5, 17, 42, 99, 7]


@pytest.fixture(scope="module")
def bare(tmp_path_factory):
    """The llama factory model with its config and weights only."""
    out = tmp_path_factory.mktemp("no-tokenizer")
    for name in ("config.json", "generation_config.json", "model.safetensors"):
        shutil.copy(model_dir("llama") / name, out / name)
    return Engine.from_pretrained(out)


def test_ids_in_ids_out_same_tokens_as_with_a_tokenizer(bare):
    assert not bare.has_tokenizer
    expected = engine("llama").generate(PROMPT, max_new_tokens=12, ignore_eos=True)[0]
    out = bare.generate(PROMPT, max_new_tokens=12, ignore_eos=True)[0]
    assert out.token_ids == expected.token_ids and len(out.token_ids) == 12
    assert out.text == "" and out.prompt_token_ids == PROMPT and out.finish_reason == "length"
    beam = bare.generate(PROMPT, max_new_tokens=4, num_beams=2)[0]
    assert beam.text == "" and len(beam.token_ids) > 0


def test_eos_from_the_configs_still_stops(bare):
    from reference_engine.generate.loop import eos_ids_of
    assert eos_ids_of(bare) == eos_ids_of(engine("llama")) == frozenset(bare.config.eos_token_ids)
    eos = next(iter(eos_ids_of(bare)))
    free = bare.generate(PROMPT, max_new_tokens=3, ignore_eos=True)[0].token_ids
    out = bare.generate(PROMPT, max_new_tokens=3, stop_token_ids=[free[1]], ignore_eos=True)[0]
    assert out.token_ids == free[:2] and out.finish_reason == "stop" and eos not in out.token_ids[:-1]


def test_stream_gives_ids_through_on_finish(bare):
    finished = []
    deltas = list(bare.stream(PROMPT, max_new_tokens=6, ignore_eos=True, on_finish=finished.append))
    assert "".join(deltas) == "" and len(finished[0].token_ids) == 6
    assert bare.cache.allocator.num_used == 0


def test_what_needs_text_is_a_clear_error(bare):
    with pytest.raises(ModelDirError, match="no tokenizer"):
        bare.generate("Hello", max_new_tokens=2)
    with pytest.raises(ValueError, match="stop strings need"):
        bare.generate(PROMPT, max_new_tokens=2, stop=["."])
