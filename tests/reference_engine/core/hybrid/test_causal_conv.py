"""The carried-window convolution: split runs equal one run, and one run equals a padded nn.Conv1d (transformers'
prefill form)."""
import torch

from reference_engine.core.recurrent.causal_conv import causal_conv


def test_chunks_equal_one_run_and_the_padded_conv():
    g = torch.Generator().manual_seed(0)
    x, w, b = torch.randn(11, 6, generator=g), torch.randn(6, 4, generator=g), torch.randn(6, generator=g)
    whole, _ = causal_conv(x, w, b, torch.zeros(6, 3))
    conv = torch.nn.functional.conv1d(x.T[None], w[:, None], b, padding=3, groups=6)[0, :, :11].T
    torch.testing.assert_close(whole, conv, atol=1e-6, rtol=1e-6)
    window, parts = torch.zeros(6, 3), []
    for chunk in (x[:2], x[2:3], x[3:9], x[9:]):
        y, window = causal_conv(chunk, w, b, window)
        parts.append(y)
    torch.testing.assert_close(torch.cat(parts), whole, atol=1e-6, rtol=1e-6)
    torch.testing.assert_close(window, x[-3:].T)
