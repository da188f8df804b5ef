"""SmolLM2-135M-Instruct (the real asset) quantized by the independent quantizers in every family: the engine
loads each directory and answers a factual question as the float model does, with next-token distributions
close to the float model's (a packing or formula error would not be close: random weights or "!!!!")."""
from __future__ import annotations

import pytest
import torch

from reference_engine.engine import Engine
from reference_engine.generate import SamplingParams
from tests.quant_builders import awq, bnb_4bit, compressed_tensors, fp8_block, gptq

pytestmark = [pytest.mark.assets, pytest.mark.slow]

# SmolLM2: hidden 576 (576 / 128 leaves a partial GPTQ group), intermediate 1536, 3 KV heads of 64
FAMILIES = {
    "gptq": lambda src, out: gptq(src, out, bits=4, group_size=128, desc_act=True, sym=False),
    "awq": lambda src, out: awq(src, out, group_size=64),
    "ct_w4a16": lambda src, out: compressed_tensors(src, out, scheme="W4A16", group_size=64),
    "ct_fp8": lambda src, out: compressed_tensors(src, out, scheme="FP8", strategy="channel"),
    "ct_nvfp4": lambda src, out: compressed_tensors(src, out, scheme="NVFP4A16"),
    "fp8_block": lambda src, out: fp8_block(src, out, block=(128, 128)),
    "bnb_nf4": lambda src, out: bnb_4bit(src, out, quant_type="nf4", double_quant=True),
}
QUESTION = [{"role": "user", "content": "What is the capital of France?"}]
# mean KL(float || quantized) over the prompt's positions, nats. Measured (round-to-nearest quantization of a
# 135M model, so 4 bits cost a lot): gptq 0.82, awq 0.65, W4A16 0.93, NVFP4 0.49, NF4 1.41; FP8 0.04-0.06.
# Garbage weights (a packing or formula error) give several nats and no "Paris".
MAX_MEAN_KL = {"ct_fp8": 0.2, "fp8_block": 0.2}
MAX_MEAN_KL_4BIT = 2.0


@pytest.fixture(scope="module")
def reference(smollm2_dir):
    eng = Engine.from_pretrained(smollm2_dir)
    text = eng.tokenizer.apply_chat_template(QUESTION, add_generation_prompt=True)
    ids = eng.tokenizer.encode(text, add_special_tokens=False)
    answer = eng.generate([ids], SamplingParams(max_new_tokens=8))[0].text
    assert "Paris" in answer
    return ids, eng.logits(ids)


@pytest.mark.parametrize("family", list(FAMILIES))
def test_quantized_smollm2_answers_like_the_float_model(family, smollm2_dir, reference, tmp_path):
    ids, float_logits = reference
    build = FAMILIES[family](smollm2_dir, tmp_path / family)
    del build.dequantized                                     # 0.5 GB of oracle weights not needed here
    eng = Engine.from_pretrained(build.path)
    logits = eng.logits(ids)
    kl = torch.nn.functional.kl_div(logits.log_softmax(-1), float_logits.log_softmax(-1), log_target=True,
                                    reduction="none").sum(-1).mean().item()
    assert kl < MAX_MEAN_KL.get(family, MAX_MEAN_KL_4BIT), f"{family}: mean KL {kl:.4f}"
    assert (logits.argmax(-1) == float_logits.argmax(-1)).float().mean() > 0.5
    answer = eng.generate([ids], SamplingParams(max_new_tokens=8))[0].text
    assert "Paris" in answer, f"{family}: {answer!r}"
