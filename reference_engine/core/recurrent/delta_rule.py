"""The gated delta rule (Yang, Kautz, Hatamizadeh: "Gated Delta Networks", 2024), for one sequence at a time, in
two forms that compute the same thing: the recurrent one (a token per step: decode) and the chunked one (the
parallel form over chunks of 64 tokens: prefill), both carrying the state S [heads, k_dim, v_dim] in float32.

With S_t stored as [k_dim, v_dim] (keys index rows), per head and token t (paper eq. 10, transposed):
    S_t = exp(g_t) * S_{t-1}                                  decay: g_t <= 0, the gate alpha_t = exp(g_t)
    S_t = S_t + beta_t * k_t (v_t - S_t^T k_t)^T              delta rule: write the error of S_t's own read
    o_t = S_t^T q_t                                           read with the query
q and k arrive L2-normalised, q already scaled by k_dim ** -0.5 (the block does both).

The chunked form is transformers' `torch_chunk_gated_delta_rule` for a single sequence: inside a chunk the
delta-rule updates are condensed by the UT (WY) transform into triangular solves and matmuls, and the state is
carried from chunk to chunk. Both forms take and return the state, so a prefill may be split anywhere and
continued by either form.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

CHUNK_SIZE = 64


def recurrent_gated_delta_rule(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, g: torch.Tensor,
                               beta: torch.Tensor, state: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """q, k [T, H, dk]; v [T, H, dv]; g, beta [T, H]; state [H, dk, dv] -> (o [T, H, dv], new state), float32."""
    q, k, v, g, beta = (t.float() for t in (q, k, v, g, beta))
    s, out = state.float(), []
    for t in range(q.shape[0]):
        s = s * g[t].exp()[:, None, None]                                  # decay the whole memory
        read = (s * k[t][:, :, None]).sum(dim=1)                           # [H, dv]: S^T k, what S predicts
        delta = (v[t] - read) * beta[t][:, None]                           # [H, dv]: the correction, scaled
        s = s + k[t][:, :, None] * delta[:, None, :]                       # rank-one write k delta^T
        out.append((s * q[t][:, :, None]).sum(dim=1))                      # [H, dv]: S^T q
    return torch.stack(out), s


def chunked_gated_delta_rule(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, g: torch.Tensor,
                             beta: torch.Tensor, state: torch.Tensor,
                             chunk_size: int = CHUNK_SIZE) -> tuple[torch.Tensor, torch.Tensor]:
    """Same arguments and result as `recurrent_gated_delta_rule`, computed chunk by chunk (C = chunk_size)."""
    length = q.shape[0]
    q, k, v = (t.float().transpose(0, 1) for t in (q, k, v))              # [H, T, d]
    g, beta = g.float().T, beta.float().T                                  # [H, T]
    pad = (chunk_size - length % chunk_size) % chunk_size                  # zero tokens: g 0, beta 0 -> no-ops
    q, k, v = (F.pad(t, (0, 0, 0, pad)) for t in (q, k, v))
    g, beta = F.pad(g, (0, pad)), F.pad(beta, (0, pad))
    heads, n = q.shape[0], (length + pad) // chunk_size
    q, k = q.reshape(heads, n, chunk_size, -1), k.reshape(heads, n, chunk_size, -1)    # [H, N, C, dk]
    k_beta = k * beta.reshape(heads, n, chunk_size, 1)
    v_beta = (v * beta[..., None]).reshape(heads, n, chunk_size, -1)                   # [H, N, C, dv]
    cum = g.reshape(heads, n, chunk_size).cumsum(dim=-1)                   # log of the decay since chunk start
    later = torch.ones(chunk_size, chunk_size, dtype=torch.bool, device=q.device).triu(1)
    pair = (cum[..., :, None] - cum[..., None, :]).masked_fill(later, float("-inf")).exp()   # [H, N, C, C]
    # UT transform: (I + tril(diag(beta) K K^T * decay, -1)) turns the sequential updates into one solve
    system = (k_beta @ k.transpose(-1, -2)) * pair
    values = torch.linalg.solve_triangular(system, v_beta, upper=False, unitriangular=True)        # u
    k_decayed = torch.linalg.solve_triangular(system, k_beta * cum.exp()[..., None], upper=False,
                                              unitriangular=True)                                  # w
    intra = (q @ k.transpose(-1, -2)) * pair                               # causal attention inside a chunk
    q = q * cum.exp()[..., None]                                           # decay from the chunk start to t
    k = k * (cum[..., -1:] - cum).exp()[..., None]                         # decay from t to the chunk end
    chunk_decay = cum[..., -1].exp()[..., None, None]                      # [H, N, 1, 1]
    s, out = state.float(), []
    for i in range(n):
        v_new = values[:, i] - k_decayed[:, i] @ s                         # what the carried state misses
        out.append(q[:, i] @ s + intra[:, i] @ v_new)                      # [H, C, dv]: old state + this chunk
        s = s * chunk_decay[:, i] + k[:, i].transpose(-1, -2) @ v_new      # state at the chunk's end
    o = torch.cat(out, dim=1)[:, :length]                                  # [H, T, dv]
    return o.transpose(0, 1), s
