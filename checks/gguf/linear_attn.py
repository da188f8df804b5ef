"""GGUF checks (GGF030+): the Gated DeltaNet layers of a Qwen3-Next / Qwen3.5 GGUF as llama.cpp's loader sizes them."""
from __future__ import annotations

from checks.gguf.metadata import _gguf_or_skip
from checks.catalogue.registry import Problem, Skip, check

# the architectures whose loader (src/models/qwen3next.cpp, qwen35.cpp, qwen35moe.cpp of the pinned llama.cpp)
# sizes the DeltaNet tensors with head_v_dim = ssm.state_size
DELTA_NET_ARCHS = ("qwen3next", "qwen35", "qwen35moe")


@check("GGF030", category="config", severity="warning", needs=("gguf",),
       hint="llama.cpp cannot load this file; run the model from safetensors (transformers, llmdoctor's engine "
            "reads the GGUF as it is) or in a runtime that sizes value heads from ssm.inner_size / "
            "ssm.time_step_rank.")
def gguf_delta_net_value_head_dim(ctx):
    """The DeltaNet value head size equals the key head size, as llama.cpp's loader assumes.

    llama.cpp (qwen3next, qwen35, qwen35moe) takes both the key and the value head size of a Gated DeltaNet
    layer from ssm.state_size (head_v_dim = ssm_d_state), so a model whose linear_value_head_dim differs from
    linear_key_head_dim -- converted faithfully: ssm.inner_size = value heads x value head size, ssm_norm of the
    value head size -- stops llama.cpp at load ("tensor 'blk.0.ssm_norm.weight' has wrong shape"), while
    transformers and this engine run it. The released Qwen3-Next / Qwen3.5 models use 128 for both.
    """
    gguf = _gguf_or_skip(ctx)
    arch = gguf.get("general.architecture")
    if arch not in DELTA_NET_ARCHS:
        raise Skip("not a Qwen3-Next / Qwen3.5 GGUF")
    state = gguf.get(f"{arch}.ssm.state_size")
    norms = {name: t.shape for name, t in gguf.tensors.items() if name.endswith(".ssm_norm.weight")}
    if not isinstance(state, int) or not norms:
        raise Skip("no ssm.state_size or no DeltaNet layer")
    wrong = {name: shape[-1] for name, shape in norms.items() if shape[-1] != state}
    if wrong:
        first = next(iter(wrong))
        yield Problem(f"{len(wrong)} DeltaNet layer(s) have value heads of {wrong[first]} but ssm.state_size "
                      f"(the key head size) is {state}: llama.cpp sizes both from ssm.state_size and refuses "
                      f"{first}", evidence={"state_size": state, "value_head_dim": wrong[first],
                                            "layers": len(wrong), "inner_size": gguf.get(f"{arch}.ssm.inner_size")})
