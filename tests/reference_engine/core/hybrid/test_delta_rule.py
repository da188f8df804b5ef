"""The gated delta rule's two forms: the recurrent one against the paper's update written with matrices, and the
chunked one against the recurrent one at several chunk sizes, split anywhere with the state carried."""
import pytest
import torch

from reference_engine.core.recurrent.delta_rule import chunked_gated_delta_rule, recurrent_gated_delta_rule


def inputs(t: int, heads: int = 3, dk: int = 5, dv: int = 4, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    q, k = (torch.nn.functional.normalize(torch.randn(t, heads, dk, generator=g), dim=-1) for _ in range(2))
    v = torch.randn(t, heads, dv, generator=g)
    decay = -torch.rand(t, heads, generator=g) * 1.2                     # exp(g) in ~0.3..1
    beta = torch.rand(t, heads, generator=g)
    return q, k, v, decay, beta, torch.randn(heads, dk, dv, generator=g) * 0.1


def test_recurrent_form_is_the_papers_update():
    """S_t = S_{t-1} alpha_t (I - beta_t k_t k_t^T) + beta_t v_t k_t^T, o_t = S_t q_t (S as [dv, dk])."""
    q, k, v, decay, beta, s0 = inputs(9)
    out, s = recurrent_gated_delta_rule(q, k, v, decay, beta, s0)
    for h in range(q.shape[1]):
        S = s0[h].T.double()                                           # [dv, dk]
        for t in range(q.shape[0]):
            kt, vt, qt = k[t, h].double(), v[t, h].double(), q[t, h].double()
            eye = torch.eye(kt.shape[0], dtype=torch.float64)
            S = S * decay[t, h].double().exp() @ (eye - beta[t, h].double() * torch.outer(kt, kt)) \
                + beta[t, h].double() * torch.outer(vt, kt)
            torch.testing.assert_close(out[t, h].double(), S @ qt, atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(s[h].T.double(), S, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("chunk", [1, 4, 7, 64])
def test_chunked_form_equals_the_recurrent_one_split_anywhere(chunk):
    q, k, v, decay, beta, s0 = inputs(30, seed=1)
    want, want_state = recurrent_gated_delta_rule(q, k, v, decay, beta, s0)
    got, state = chunked_gated_delta_rule(q, k, v, decay, beta, s0, chunk_size=chunk)
    torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(state, want_state, atol=1e-5, rtol=1e-5)
    first, mid = chunked_gated_delta_rule(q[:11], k[:11], v[:11], decay[:11], beta[:11], s0, chunk_size=chunk)
    rest, end = chunked_gated_delta_rule(q[11:], k[11:], v[11:], decay[11:], beta[11:], mid, chunk_size=chunk)
    torch.testing.assert_close(torch.cat([first, rest]), want, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(end, want_state, atol=1e-5, rtol=1e-5)
