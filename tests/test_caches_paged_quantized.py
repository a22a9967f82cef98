"""attn_core.caches.paged_quantized: int8 blocks hold what the contiguous int8 cache holds."""

from __future__ import annotations

import pytest
import torch

from attn_core import DecoderConfig, DecoderLM
from attn_core.caches.paged import BlockPool, make_paged_storage
from attn_core.caches.paged_quantized import PagedQuantizedKVCache, PagedQuantizedStorage
from attn_core.caches.quantized import make_quantized_caches
from attn_core.config import LayerPattern

F64 = torch.float64
_SMALL = dict(vocab_size=24, d_model=32, n_heads=4, max_len=64)


def _model(config: DecoderConfig) -> DecoderLM:
    torch.manual_seed(0)
    return DecoderLM(config).to(F64).eval()


def _int8_views(model: DecoderLM, pool: BlockPool, n_blocks: int) -> list:
    storage = make_paged_storage(model.make_caches(1), pool, dtype=F64, kv_storage=PagedQuantizedStorage)
    table = []
    for _ in range(n_blocks):  # every other block: the table is scattered
        pool.allocate()
        table.append(pool.allocate())
    return [s.view(table) for s in storage]


def test_int8_blocks_equal_the_contiguous_int8_cache_and_differ_from_float():
    model = _model(DecoderConfig.llama_like(**_SMALL, n_kv_heads=2))
    idx = torch.randint(0, 24, (1, 23), generator=torch.Generator().manual_seed(1))
    views = _int8_views(model, BlockPool(16, 4), 6)
    assert all(isinstance(v, PagedQuantizedKVCache) for v in views)
    chunks = [(0, 8), (8, 13), *((t, t + 1) for t in range(13, 23))]  # prefill chunks end anywhere, then decode
    with torch.no_grad():
        contiguous = make_quantized_caches(model.make_caches(1, 1), 23, group=4, dtype=F64)
        ref = torch.cat([model(idx[:, a:b], caches=contiguous) for a, b in chunks], dim=1)
        paged = torch.cat([model(idx[:, a:b], caches=views) for a, b in chunks], dim=1)
        full_precision = model(idx)
    assert (paged - ref).abs().max() < 1e-10
    assert (paged - full_precision).abs().max() > 1e-6  # the codes are int8: not the float cache


def test_int8_window_reads_start_at_the_window():
    config = DecoderConfig.llama_like(
        **_SMALL, n_kv_heads=2, pattern=LayerPattern(layer_types=("sliding", "full"), sliding_window=5)
    )
    model = _model(config)
    pool = BlockPool(8, 4)
    views = _int8_views(model, pool, 4)
    assert views[0].storage.window == 5
    k = torch.randn(1, 2, 11, 8, dtype=F64)
    views[0].update(k[:, :, :10], k[:, :, :10])
    got, _ = views[0].update(k[:, :, 10:11], k[:, :, 10:11])
    assert got.shape[2] == 5  # positions 6..10: 6, 7 dequantized from block 1, 8..10 the residual
    assert torch.equal(got[:, :, 2:], k[:, :, 8:11])
    assert (got[:, :, :2] - k[:, :, 6:8]).abs().max() < 0.05


def test_int8_refuses_bad_input_and_counts_bytes():
    pool = BlockPool(4, 4)
    storage = PagedQuantizedStorage(2, 3, pool, dtype=F64)
    with pytest.raises(ValueError, match="size=2 is not a multiple of block_size=4"):
        storage.view([pool.allocate()], size=2)
    view = storage.view([pool.allocate(), pool.allocate()])
    x = torch.randn(1, 2, 9, 3, dtype=F64)
    with pytest.raises(ValueError, match="sequence past its blocks"):
        view.update(x, x)
    k, _ = view.update(x[:, :, :6], x[:, :, :6])
    view.truncate(5)  # a rejected draft token of the residual
    with pytest.raises(ValueError, match=r"size must be in \[4, 5\], got size=3"):
        view.truncate(3)
    again, _ = view.update(x[:, :, 5:6], x[:, :, 5:6])
    assert torch.equal(again, k)
    mla = _model(DecoderConfig.llama_like(**_SMALL, n_kv_heads=None, attention="mla", d_latent=16, d_q_latent=12))
    with pytest.raises(ValueError, match="LatentKVCache: this paged storage holds KVCache and RollingKVCache"):
        make_paged_storage(mla.make_caches(1), pool, dtype=F64, kv_storage=PagedQuantizedStorage)
    # per block: 2·4·2·3 int8 codes, key scale+zero per channel (2·2·3 float64), value scale+zero per position
    assert storage.bytes_per_block() == 2 * 4 * 6 + 2 * 6 * 8 + 2 * 4 * 2 * 8
