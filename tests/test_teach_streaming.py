"""attn_core.teach.streaming.

StreamingLLM's cache with positions inside the cache, held to a decoder written by hand.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from attn_core import DecoderConfig, RollingKVCache, RotaryEmbedding
from attn_core.teach.streaming import (
    StreamingKVCache,
    make_streaming_caches,
    streaming_losses,
    unrotate,
)
from attn_core.teach.window import windowed
from conftest import decoder

F64 = torch.float64


def tiny(seed: int = 0, **overrides):
    config = DecoderConfig.llama_like(
        vocab_size=64, n_layers=2, d_model=32, n_heads=4, n_kv_heads=2, max_len=64, **overrides
    )
    return decoder(config, seed).to(F64).eval()


def ids_for(B: int = 2, T: int = 20, seed: int = 0) -> torch.Tensor:
    return torch.randint(0, 64, (B, T), generator=torch.Generator().manual_seed(seed))


def by_hand(model, ids, window: int, sinks: int) -> torch.Tensor:
    """StreamingLLM written out: each layer keeps every token's key before RoPE; at step t the
    visible keys (the first ``sinks`` tokens and the last ``window``, t included) are numbered
    0..n-1 in order and rotated at those positions, the query at n - 1."""
    B, T = ids.shape
    keys = [[] for _ in model.blocks]  # per layer: (B, H_kv, 1, D) before RoPE, one per token
    values = [[] for _ in model.blocks]
    logits = []
    for t in range(T):
        x = model.tok_emb(ids[:, t : t + 1])  # (B, 1, d)
        visible = [p for p in range(t + 1) if p < sinks or p > t - window]
        for layer, block in enumerate(model.blocks):
            a = block.attn
            H, H_kv, D = a.n_heads, a.n_kv_heads, a.head_dim
            h = block.attn_norm(x)
            q = a.q_proj(h).view(B, 1, H, D).transpose(1, 2)  # (B, H, 1, D)
            keys[layer].append(a.k_proj(h).view(B, 1, H_kv, D).transpose(1, 2))
            values[layer].append(a.v_proj(h).view(B, 1, H_kv, D).transpose(1, 2))
            k = torch.cat([keys[layer][p] for p in visible], dim=2)  # (B, H_kv, n, D)
            v = torch.cat([values[layer][p] for p in visible], dim=2)
            n = k.shape[2]
            k, q = a.rope(k), a.rope(q, offset=n - 1)  # positions in the cache
            k, v = k.repeat_interleave(H // H_kv, 1), v.repeat_interleave(H // H_kv, 1)  # (B, H, n, D)
            w = (q @ k.transpose(-2, -1) / D**0.5).softmax(-1)  # (B, H, 1, n)
            x = x + a.out_proj((w @ v).transpose(1, 2).reshape(B, 1, H * D))
            x = x + block.mlp(block.mlp_norm(x))
        logits.append(model.lm_head(model.final_norm(x)))
    lg = torch.cat(logits, 1)  # (B, T, V)
    return F.cross_entropy(lg[:, :-1].transpose(1, 2), ids[:, 1:], reduction="none")


@pytest.mark.parametrize("layout", ["half", "interleaved"])
@pytest.mark.parametrize("offset", [0, 3, 50])
def test_unrotate_inverts_rope(layout, offset):
    rope = RotaryEmbedding(8, layout=layout)
    x = torch.randn(2, 3, 5, 8, dtype=F64, generator=torch.Generator().manual_seed(1))
    rotated = rope(x, offset)
    if offset:
        assert (rotated - x).abs().max() > 1e-3  # the test means something
    torch.testing.assert_close(unrotate(rope, rotated, offset), x, atol=1e-12, rtol=0)
    torch.testing.assert_close(rope(unrotate(rope, x, offset), offset), x, atol=1e-12, rtol=0)


@pytest.mark.parametrize(("window", "sinks"), [(5, 2), (4, 0), (6, 1), (1, 3)])
def test_streaming_losses_equal_streamingllm_by_hand(window, sinks):
    model, ids = tiny(), ids_for(T=18)
    with torch.no_grad():
        want = by_hand(model, ids, window, sinks)
    got = streaming_losses(model, ids, window, sink_tokens=sinks, positions="cache")
    assert got.shape == (2, 17)
    torch.testing.assert_close(got, want, atol=1e-10, rtol=0)


def test_original_positions_equal_decoding_from_a_rolling_cache():
    model, ids = tiny(1), ids_for(T=16, seed=1)
    window, sinks = 4, 2
    with windowed(model, window, sink_tokens=sinks), torch.no_grad():
        caches = model.make_caches(2, 16)
        assert all(type(c) is RollingKVCache for c in caches)
        lg = torch.cat([model(ids[:, t : t + 1], caches=caches) for t in range(16)], 1)
    want = F.cross_entropy(lg[:, :-1].transpose(1, 2), ids[:, 1:], reduction="none")
    got = streaming_losses(model, ids, window, sink_tokens=sinks, positions="original")
    torch.testing.assert_close(got, want, atol=1e-10, rtol=0)


def test_positions_matter_only_through_the_sinks():
    model, ids = tiny(2), ids_for(T=16, seed=2)
    # No sinks: renumbering shifts every key and the query alike; RoPE sees the same distances.
    a = streaming_losses(model, ids, 4, positions="cache")
    b = streaming_losses(model, ids, 4, positions="original")
    torch.testing.assert_close(a, b, atol=1e-10, rtol=0)
    # With sinks: equal until the first eviction (sink_tokens + window tokens), different after.
    a = streaming_losses(model, ids, 4, sink_tokens=2, positions="cache")
    b = streaming_losses(model, ids, 4, sink_tokens=2, positions="original")
    torch.testing.assert_close(a[:, :6], b[:, :6], atol=1e-10, rtol=0)
    assert (a[:, 6:] - b[:, 6:]).abs().max() > 1e-4


def test_full_attention_and_long_windows_give_the_plain_loss():
    model, ids = tiny(3), ids_for(T=12, seed=3)
    with torch.no_grad():
        lg = model(ids)
    want = F.cross_entropy(lg[:, :-1].transpose(1, 2), ids[:, 1:], reduction="none")
    torch.testing.assert_close(streaming_losses(model, ids, None), want, atol=1e-10, rtol=0)
    long = streaming_losses(model, ids, 12, sink_tokens=2, positions="cache")
    torch.testing.assert_close(long, want, atol=1e-10, rtol=0)


def test_layers_get_their_settings_back():
    model, ids = tiny(), ids_for(T=10)
    streaming_losses(model, ids, 3, sink_tokens=1)
    assert all(b.attn.window is None and b.attn.sink_tokens == 0 for b in model.blocks)


def test_cache_holds_sinks_and_window_with_positions_inside():
    rope = RotaryEmbedding(4)
    cache = StreamingKVCache(1, 1, 4, 3, rope=rope, sink_tokens=2, dtype=F64)
    g = torch.Generator().manual_seed(0)
    plain = torch.randn(1, 1, 9, 4, dtype=F64, generator=g)  # keys before RoPE, one per token
    values = torch.randn(1, 1, 9, 4, dtype=F64, generator=g)
    k, v = cache.update(rope(plain[:, :, :4]), values[:, :, :4])  # a prompt of 4 at 0..3
    torch.testing.assert_close(k, rope(plain[:, :, :4]), atol=1e-12, rtol=0)
    assert cache.size == 4 and cache.seen == 4  # sinks 0, 1 and the last window - 1 = 2 tokens
    assert cache.slot_positions.tolist() == [0, 1, 2, 3, -1]
    for t in range(4, 9):
        n = cache.size
        k, v = cache.update(rope(plain[:, :, t : t + 1], n), values[:, :, t : t + 1])
        held = [0, 1, t - 2, t - 1, t]  # sinks, window - 1 earlier tokens, the new one
        torch.testing.assert_close(k, rope(plain[:, :, held]), atol=1e-12, rtol=0)  # at 0..4
        torch.testing.assert_close(v, values[:, :, held], atol=0, rtol=0)
        assert cache.key_positions.tolist() == [0, 1, 2, 3, 4]
        assert cache.slot_positions.tolist()[:4] == [0, 1, t - 1, t]
    assert cache.size == 4 and cache.seen == 9 and cache.slot(8) == 3
    with pytest.raises(ValueError, match="position=2 is not held"):
        cache.slot(2)
    cache.reset()
    assert cache.size == 0 and cache.seen == 0 and cache.slot_positions.tolist() == [-1] * 5


def test_make_streaming_caches_follows_the_model():
    model = tiny()
    caches = make_streaming_caches(model, 3, 4, sink_tokens=2)
    assert len(caches) == 2 and all(isinstance(c, RollingKVCache) for c in caches)
    assert caches[0].made_for == {"batch_size": 3, "n_kv_heads": 2, "head_dim": 8}
    assert caches[0].slot_keys.dtype == F64 and caches[0].rope is model.blocks[0].attn.rope


def test_bad_input():
    model, ids = tiny(), ids_for(T=10)
    rope = RotaryEmbedding(4)
    with pytest.raises(ValueError, match="positions"):
        streaming_losses(model, ids, 4, positions="text")
    with pytest.raises(ValueError, match="sink_tokens=2 keeps the first tokens"):
        streaming_losses(model, ids, None, sink_tokens=2)
    with pytest.raises(TypeError, match="ids"):
        streaming_losses(model, ids.double(), 4)
    with pytest.raises(ValueError, match="at least 2 tokens"):
        streaming_losses(model, ids[:, :1], 4)
    with pytest.raises(ValueError, match="window"):
        streaming_losses(model, ids, 0)
    with pytest.raises(TypeError, match="model"):
        streaming_losses(model.blocks[0], ids, 4)
    learned = decoder(DecoderConfig.gpt2_like(vocab_size=64, n_layers=1, d_model=16, n_heads=2, max_len=32))
    with pytest.raises(ValueError, match="positional='learned'"):
        streaming_losses(learned, ids, 4)
    with pytest.raises(ValueError, match="rope rotates heads of 4, but the cache holds head_dim=8"):
        StreamingKVCache(1, 1, 8, 3, rope=rope)
    with pytest.raises(TypeError, match="rope"):
        StreamingKVCache(1, 1, 4, 3, rope=None)
    with pytest.raises(TypeError, match="rope"):
        unrotate("rope", torch.zeros(1, 4))
    cache = StreamingKVCache(1, 1, 4, 3, rope=rope, sink_tokens=1, dtype=F64)
    with pytest.raises(ValueError, match="decode one token at a time"):
        cache.update(torch.zeros(1, 1, 5, 4, dtype=F64), torch.zeros(1, 1, 5, 4, dtype=F64))
    with pytest.raises(ValueError, match="k must have shape"):
        cache.update(torch.zeros(1, 2, 1, 4, dtype=F64), torch.zeros(1, 2, 1, 4, dtype=F64))
    with pytest.raises(ValueError, match="same shape"):
        cache.update(torch.zeros(1, 1, 1, 4, dtype=F64), torch.zeros(1, 1, 2, 4, dtype=F64))
