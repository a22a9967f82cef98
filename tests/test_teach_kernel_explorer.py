"""attn_core.teach.kernel_explorer: the ipywidgets explorer recomputes in Python.

Runs under ipywidgets 8 and 7.7 (make colab).
"""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

import ipywidgets  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402

from attn_core.teach import explorers  # noqa: E402
from attn_core.teach.kernel_explorer import KernelExplorer  # noqa: E402


def _weights(*shape, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.softmax(torch.randn(*shape, generator=g), dim=-1)


def _fn(text):
    words = text.split()
    T = len(words)
    return _weights(2, 2, T, T, seed=T), words


def test_kernel_explorer_recomputes_in_python():
    k = explorers.explorer(_fn, text="the cat sat")
    assert isinstance(k, KernelExplorer)
    assert isinstance(k.widget, ipywidgets.VBox)
    assert k.image.value[:4] == b"\x89PNG"
    assert (k.layer.max, k.head.max, k.query.max) == (1, 1, 2)
    first = k.image.value
    k.text.value = "a much longer sentence here"  # the callback re-runs fn
    assert k.query.max == 4 and k.tokens[0] == "a" and k.image.value != first
    k.temperature.value = 0.1
    sharp = k.current()
    assert torch.allclose(sharp.sum(-1), torch.ones(5, dtype=sharp.dtype))
    assert sharp.max(-1).values.min() > k.weights[0, 0].max(-1).values.min()
    assert repr(k) == "KernelExplorer(L=2, H=2, T_q=5, T_k=5)"


def test_kernel_explorer_bad_input():
    with pytest.raises(ValueError, match="needs the starting sentence"):
        explorers.explorer(_fn)
