"""attn_core.caches.recurrent.

GatedDeltaNetCache holds a constant-size state, counts positions, resets, refuses bad sizes.
"""

from __future__ import annotations

import pytest
import torch

from attn_core import GatedDeltaNet
from attn_core.caches.recurrent import GatedDeltaNetCache


def _cache(**kw):
    sizes = dict(batch_size=2, conv_channels=40, conv_size=4, n_heads=2, head_dim=8, value_head_dim=4)
    return GatedDeltaNetCache(**{**sizes, **kw}, dtype=torch.float64, device="cpu")


def test_shapes_and_bytes_do_not_depend_on_length():
    cache = _cache()
    assert cache.conv_state.shape == (2, 40, 3)
    assert cache.state.shape == (2, 2, 8, 4)
    assert cache.nbytes() == (2 * 40 * 3 + 2 * 2 * 8 * 4) * 8
    before = cache.nbytes()
    cache.advance(1000)
    assert cache.size == 1000 and cache.nbytes() == before


def test_reset_empties_state_and_count():
    cache = _cache()
    cache.state.fill_(1.0)
    cache.conv_state.fill_(2.0)
    cache.size = 5
    cache.reset()
    assert cache.size == 0
    assert cache.state.abs().sum() == 0 and cache.conv_state.abs().sum() == 0


def test_made_for_names_the_sizes_the_layer_compares():
    layer = GatedDeltaNet(16, 2, head_dim=8)
    cache = layer.make_cache(3)
    assert cache.made_for["batch_size"] == 3
    assert cache.made_for["head_dim"] == 8 and cache.made_for["n_heads"] == 2


def test_decoding_one_token_advances_the_count_by_one():
    torch.manual_seed(0)
    layer = GatedDeltaNet(16, 2, head_dim=8).double()
    cache = layer.make_cache(1)
    with torch.no_grad():
        layer(torch.randn(1, 3, 16, dtype=torch.float64), kv_cache=cache)
        layer(torch.randn(1, 1, 16, dtype=torch.float64), kv_cache=cache)
    assert cache.size == 4
    assert cache.state.abs().sum() > 0  # the rule wrote into the state


@pytest.mark.parametrize("bad", [0, -1, 2.5])
def test_bad_batch_size(bad):
    with pytest.raises((ValueError, TypeError), match="batch_size"):
        _cache(batch_size=bad)
