"""attn_core.caches.kv: KVCache and LatentKVCache on their own: appending, views, overflow, reset, detaching."""

from __future__ import annotations

import pytest
import torch

from attn_core import KVCache, LatentKVCache, RollingKVCache
from attn_core.caches.static import make_static_caches
from conftest import randn


def test_kv_cache_appends_and_returns_everything_stored():
    cache = KVCache(2, 3, 4, max_len=6, dtype=torch.float64)
    k1, v1 = randn(2, 3, 2, 4, seed=1), randn(2, 3, 2, 4, seed=2)
    k2, v2 = randn(2, 3, 3, 4, seed=3), randn(2, 3, 3, 4, seed=4)
    cache.update(k1, v1)
    k, v = cache.update(k2, v2)
    assert cache.size == 5 and k.shape == v.shape == (2, 3, 5, 4)
    torch.testing.assert_close(k, torch.cat((k1, k2), dim=2), rtol=0, atol=0)
    torch.testing.assert_close(v, torch.cat((v1, v2), dim=2), rtol=0, atol=0)


def test_kv_cache_returns_views_of_its_preallocated_storage():
    cache = KVCache(1, 1, 2, max_len=4)
    k, _ = cache.update(torch.ones(1, 1, 1, 2), torch.ones(1, 1, 1, 2))
    k_again, _ = cache.update(torch.zeros(1, 1, 1, 2), torch.zeros(1, 1, 1, 2))
    assert k.data_ptr() == k_again.data_ptr(), "appending copies into a slice; no reallocation"
    assert cache.nbytes() == 2 * 1 * 1 * 4 * 2 * 4  # k and v, max_len=4, float32
    assert cache.numel_per_token() == 2 * 2


def test_kv_cache_detaches():
    """No gradient flows through a cache: it stores values, and returns views of its storage."""
    cache = KVCache(1, 1, 2, max_len=3)
    k = torch.randn(1, 1, 2, 2, requires_grad=True)
    v = torch.randn(1, 1, 2, 2, requires_grad=True)
    k_all, v_all = cache.update(k * 2, v * 2)
    assert not k_all.requires_grad and not v_all.requires_grad
    assert k_all.grad_fn is None
    with torch.no_grad():
        k.add_(1.0)  # changing the source afterwards does not change what was cached
    torch.testing.assert_close(k_all, (k - 1.0) * 2)


def test_reset_forgets_positions_and_keeps_memory():
    cache = KVCache(1, 2, 2, max_len=3)
    cache.update(torch.ones(1, 2, 3, 2), torch.ones(1, 2, 3, 2))
    before = cache.nbytes()
    cache.reset()
    assert cache.size == 0 and cache.nbytes() == before
    k, _ = cache.update(torch.zeros(1, 2, 1, 2), torch.zeros(1, 2, 1, 2))
    assert k.shape == (1, 2, 1, 2) and (k == 0).all()


def test_overflow_and_shape_errors_name_the_values():
    cache = KVCache(1, 2, 4, max_len=2)
    with pytest.raises(ValueError, match=r"cache overflow: 0 stored \+ 3 new > max_len=2"):
        cache.update(torch.zeros(1, 2, 3, 4), torch.zeros(1, 2, 3, 4))
    with pytest.raises(ValueError, match=r"k must have shape \(1, 2, 'T_new', 4\), got \(1, 3, 1, 4\)"):
        cache.update(torch.zeros(1, 3, 1, 4), torch.zeros(1, 2, 1, 4))
    with pytest.raises(ValueError, match="the same T_new, got 1 and 2"):
        cache.update(torch.zeros(1, 2, 1, 4), torch.zeros(1, 2, 2, 4))
    with pytest.raises(TypeError, match="v must be a torch.Tensor, got list"):
        cache.update(torch.zeros(1, 2, 1, 4), [0.0])
    assert cache.size == 0, "a refused update stores nothing"


@pytest.mark.parametrize(
    "args, error, match",
    [
        ((0, 2, 4, 8), ValueError, "batch_size must be >= 1, got batch_size=0"),
        ((1, 2, 4, 0), ValueError, "max_len must be >= 1, got max_len=0"),
        ((1, 2.0, 4, 8), TypeError, "n_kv_heads must be an int"),
        ((1, 2, 4, True), TypeError, "max_len must be an int"),
    ],
)
def test_kv_cache_bad_sizes(args, error, match):
    with pytest.raises(error, match=match):
        KVCache(*args)


def test_latent_kv_cache_stores_latent_and_rope_key():
    cache = LatentKVCache(2, 6, 2, max_len=5, dtype=torch.float64)
    c1, r1 = randn(2, 3, 6, seed=1), randn(2, 3, 2, seed=2)
    c2, r2 = randn(2, 1, 6, seed=3), randn(2, 1, 2, seed=4)
    cache.update(c1, r1)
    c, r = cache.update(c2, r2)
    assert cache.size == 4 and c.shape == (2, 4, 6) and r.shape == (2, 4, 2)
    torch.testing.assert_close(c, torch.cat((c1, c2), dim=1), rtol=0, atol=0)
    torch.testing.assert_close(r, torch.cat((r1, r2), dim=1), rtol=0, atol=0)
    assert cache.numel_per_token() == 6 + 2  # d_c + d_r: DeepSeek-V2's cache per token and layer


def test_latent_kv_cache_without_rope_part_and_detaching():
    cache = LatentKVCache(1, 4, 0, max_len=2)
    c, r = cache.update(torch.randn(1, 1, 4, requires_grad=True), torch.zeros(1, 1, 0))
    assert r.shape == (1, 1, 0) and not c.requires_grad
    with pytest.raises(ValueError, match="d_rope must be >= 0, got d_rope=-1"):
        LatentKVCache(1, 4, -1, max_len=2)


# --------------------------------------------------------------------------- RollingKVCache (chapter 15)
def test_rolling_cache_returns_stored_then_new_in_time_order():
    cache = RollingKVCache(1, 1, 1, window=3, dtype=torch.float64)
    seen = []
    for t in range(8):  # position t carries the value t
        k, v = cache.update(torch.full((1, 1, 1, 1), float(t)), torch.full((1, 1, 1, 1), float(-t)))
        seen.append((k.flatten().tolist(), cache.key_positions.tolist()))
    assert seen[1] == ([0.0, 1.0], [0, 1])
    assert seen[7] == ([4.0, 5.0, 6.0, 7.0], [4, 5, 6, 7])  # 3 stored (oldest first) + the new one
    assert cache.size == 8


def test_rolling_cache_prefill_longer_than_the_window_and_sink_slots():
    cache = RollingKVCache(1, 1, 1, window=2, sink_tokens=1, dtype=torch.float64)
    x = torch.arange(6, dtype=torch.float64).view(1, 1, 6, 1)
    k, _ = cache.update(x, x)
    assert k.flatten().tolist() == [0, 1, 2, 3, 4, 5] and cache.key_positions.tolist() == list(range(6))
    k, _ = cache.update(torch.full((1, 1, 1, 1), 6.0), torch.full((1, 1, 1, 1), 6.0))
    assert cache.key_positions.tolist() == [0, 4, 5, 6]  # the sink, the last window, the new one
    assert k.flatten().tolist() == [0.0, 4.0, 5.0, 6.0]


def test_rolling_cache_memory_is_constant():
    cache = RollingKVCache(2, 3, 4, window=5, sink_tokens=2)
    before = cache.nbytes()
    for _ in range(40):
        cache.update(torch.randn(2, 3, 1, 4), torch.randn(2, 3, 1, 4))
    assert cache.nbytes() == before == 2 * 2 * 3 * (2 + 5) * 4 * 4
    assert cache.numel_per_token() == 2 * 3 * 4
    cache.reset()
    assert cache.size == 0 and cache.update(torch.ones(2, 3, 1, 4), torch.ones(2, 3, 1, 4))[0].shape[2] == 1


def test_rolling_cache_detaches_and_checks_shapes():
    cache = RollingKVCache(1, 2, 4, window=3)
    k = torch.randn(1, 2, 2, 4, requires_grad=True)
    out, _ = cache.update(k, k)
    assert not out.requires_grad
    with pytest.raises(ValueError, match=r"k must have shape \(1, 2, T_new, 4\), got \(1, 3, 1, 4\)"):
        cache.update(torch.randn(1, 3, 1, 4), torch.randn(1, 3, 1, 4))
    with pytest.raises(ValueError, match="window must be >= 1, got window=0"):
        RollingKVCache(1, 1, 1, window=0)
    with pytest.raises(ValueError, match="sink_tokens must be >= 0, got sink_tokens=-1"):
        RollingKVCache(1, 1, 1, window=2, sink_tokens=-1)


def test_rolling_cache_slots_are_in_ring_order():
    cache = RollingKVCache(1, 1, 1, window=3, dtype=torch.float64)
    for t in range(5):
        cache.update(torch.full((1, 1, 1, 1), float(t)), torch.zeros(1, 1, 1, 1))
    assert cache.slot_positions.tolist() == [3, 4, 2] and cache.slot_keys.flatten().tolist() == [3.0, 4.0, 2.0]
    assert cache.slot_values.flatten().tolist() == [0.0, 0.0, 0.0]
    assert [cache.slot(p) for p in range(6)] == [0, 1, 2, 0, 1, 2]


def test_positions_after_an_int_or_a_device_count():
    from attn_core.caches.kv import positions_after

    assert positions_after(3, 4).tolist() == [3, 4, 5, 6]
    assert torch.equal(positions_after(torch.tensor(3), 4), positions_after(3, 4))
    assert positions_after(-2, 3).tolist() == [-2, -1, 0]  # a static buffer's empty slots come first
    assert KVCache(1, 1, 2, 4).offset == 0


def test_truncate_forgets_the_positions_after_size():
    """Speculative decoding cuts its rejected tokens back; the next update writes after the kept ones."""
    cache = KVCache(1, 2, 3, max_len=6, dtype=torch.float64)
    k, v = randn(1, 2, 5, 3, seed=1), randn(1, 2, 5, 3, seed=2)
    cache.update(k, v)
    cache.truncate(2)
    assert cache.size == cache.offset == 2
    k_all, _ = cache.update(k[:, :, 4:], v[:, :, 4:])
    torch.testing.assert_close(k_all, torch.cat((k[:, :, :2], k[:, :, 4:]), dim=2), rtol=0, atol=0)
    latent = LatentKVCache(1, 4, 2, max_len=3)
    latent.update(torch.zeros(1, 3, 4), torch.zeros(1, 3, 2))
    latent.truncate(0)
    assert latent.size == 0


def test_truncate_refuses_a_size_past_the_stored_positions():
    cache = KVCache(1, 1, 2, max_len=4)
    cache.update(torch.zeros(1, 1, 2, 2), torch.zeros(1, 1, 2, 2))
    with pytest.raises(ValueError, match="cannot truncate a KVCache of 2 positions to size=3"):
        cache.truncate(3)
    with pytest.raises(ValueError, match="size must be >= 0"):
        cache.truncate(-1)
    static = make_static_caches([KVCache(1, 1, 2, max_len=4)], 4, dtype=torch.float32)[0]
    with pytest.raises(ValueError, match="cannot truncate a StaticKVCache"):
        static.truncate(0)
