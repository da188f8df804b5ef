"""Mamba2's selective state space (SSD, Dao & Gu 2024, "Transformers are SSMs") for one sequence, in its two
equivalent forms. Per head h, with a scalar decay a_t = dt_t * A_h (A_h < 0, so exp(a_t) is in (0, 1)):

    S_t = exp(a_t) * S_{t-1} + dt_t * x_t B_t^T        S [head_dim, d_state]  (paper eq. (1), discretised)
    y_t = S_t C_t                                       y [head_dim]

`ssd_recurrent` runs that loop token by token (decode). `ssd_chunked` is the paper's block decomposition
(section 6, "SSD algorithm"): inside a chunk of L tokens the outputs are a masked matrix product
    y_i = sum_{j <= i} exp(cum_i - cum_j) (C_i . B_j) dt_j x_j        (cum = running sum of a within the chunk)
plus what the state carried into the chunk contributes, exp(cum_i) S_prev C_i; the state leaving the chunk is
    S_L = exp(cum_L) S_prev + sum_j exp(cum_L - cum_j) dt_j x_j B_j^T.
Both run in float32 and agree to rounding (tests/reference_engine/core/hybrid/test_ssd.py).
"""
from __future__ import annotations

import torch


def ssd_recurrent(x: torch.Tensor, dt: torch.Tensor, A: torch.Tensor, B: torch.Tensor, C: torch.Tensor,
                  state: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """x [T, heads, head_dim], dt [T, heads] (after softplus), A [heads] (negative), B, C [T, heads, d_state],
    state [heads, head_dim, d_state] -> (y [T, heads, head_dim], state after the last token)."""
    ys = []
    for t in range(x.shape[0]):
        decay = torch.exp(dt[t] * A)[:, None, None]                                   # [heads, 1, 1]
        state = decay * state + (dt[t, :, None] * x[t])[:, :, None] * B[t][:, None, :]
        ys.append(torch.einsum("hpn,hn->hp", state, C[t]))
    return torch.stack(ys), state


def ssd_chunked(x: torch.Tensor, dt: torch.Tensor, A: torch.Tensor, B: torch.Tensor, C: torch.Tensor,
                state: torch.Tensor, chunk: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The same recurrence, computed chunk by chunk (shapes as ssd_recurrent)."""
    ys = []
    for s in range(0, x.shape[0], chunk):
        xc, dtc, Bc, Cc = x[s:s + chunk], dt[s:s + chunk], B[s:s + chunk], C[s:s + chunk]
        L = xc.shape[0]
        cum = torch.cumsum(dtc * A, dim=0)                                            # [L, heads]
        causal = torch.ones(L, L, dtype=torch.bool, device=x.device).tril()
        seg = (cum[:, None, :] - cum[None, :, :]).masked_fill(~causal[:, :, None], float("-inf"))
        decay = torch.exp(seg)                                                        # [L(i), L(j), heads]
        scores = torch.einsum("ihn,jhn->ijh", Cc, Bc) * decay                         # [L, L, heads]
        u = dtc[:, :, None] * xc                                                      # [L, heads, head_dim]
        y = torch.einsum("ijh,jhp->ihp", scores, u)                                   # within the chunk
        y = y + torch.exp(cum)[:, :, None] * torch.einsum("hpn,ihn->ihp", state, Cc)  # from the carried state
        tail = torch.exp(cum[-1][None, :] - cum)                                      # [L, heads]
        state = torch.exp(cum[-1])[:, None, None] * state + torch.einsum("jh,jhp,jhn->hpn", tail, u, Bc)
        ys.append(y)
    return torch.cat(ys), state
