"""attn_core.caches.paged: a block pool, and caches read through a block table equal to contiguous ones."""

from __future__ import annotations

import pytest
import torch

from attn_core import DecoderConfig, DecoderLM, KVCache
from attn_core.caches.paged import BlockPool, PagedKVCache, PagedLatentKVCache, PagedStorage, make_paged_storage
from attn_core.config import LayerPattern

F64 = torch.float64
_SMALL = dict(vocab_size=24, d_model=32, n_heads=4, max_len=64)
CONFIGS = {
    "mha": DecoderConfig.llama_like(**_SMALL),
    "gqa": DecoderConfig.llama_like(**_SMALL, n_kv_heads=2),
    "mqa": DecoderConfig.llama_like(**_SMALL, n_kv_heads=1),
    "learned": DecoderConfig.gpt2_like(**_SMALL),
    "window": DecoderConfig.llama_like(
        **_SMALL, n_kv_heads=2, pattern=LayerPattern(layer_types=("sliding", "full"), sliding_window=5)
    ),
    "mla": DecoderConfig.llama_like(**_SMALL, n_kv_heads=None, attention="mla", d_latent=16, d_q_latent=12),
}


def _model(config: DecoderConfig) -> DecoderLM:
    torch.manual_seed(0)
    return DecoderLM(config).to(F64).eval()


def _scattered_table(pool: BlockPool, n: int) -> list[int]:
    """``n`` blocks of ``pool`` that are not consecutive: every other one is taken by someone else."""
    table = []
    for _ in range(n):
        pool.allocate()
        table.append(pool.allocate())
    return table


def test_pool_allocates_shares_and_releases_with_counts():
    pool = BlockPool(3, 4)
    a, b = pool.allocate(), pool.allocate()
    assert (a, b, pool.num_used, pool.num_free) == (0, 1, 2, 1)
    assert pool.share(a) == a and pool.refcount(a) == 2
    assert pool.release(a) is False and pool.refcount(a) == 1
    assert pool.release(a) is True and pool.refcount(a) == 0 and pool.num_free == 2
    assert pool.blocks_for(0) == 0 and pool.blocks_for(4) == 1 and pool.blocks_for(5) == 2


def test_pool_reuses_plain_blocks_first_and_kept_blocks_least_recently_released_first():
    pool = BlockPool(4, 2)
    blocks = [pool.allocate() for _ in range(4)]
    pool.release(blocks[0], keep=True)
    pool.release(blocks[1], keep=True)
    pool.release(blocks[2])  # nothing worth keeping: reused first
    assert [pool.allocate() for _ in range(3)] == [blocks[2], blocks[0], blocks[1]]
    pool.release(blocks[0], keep=True)
    assert pool.take(blocks[0]) == blocks[0] and pool.num_free == 0


def test_pool_refuses_bad_use():
    pool = BlockPool(1, 4)
    block = pool.allocate()
    with pytest.raises(ValueError, match="pool exhausted: all num_blocks=1"):
        pool.allocate()
    with pytest.raises(ValueError, match="in use .* share it"):
        pool.take(block)
    pool.release(block)
    with pytest.raises(ValueError, match="block 0 is free"):
        pool.release(block)
    with pytest.raises(ValueError, match="block 0 is free"):
        pool.share(block)
    with pytest.raises(ValueError, match="block=5 is not in the pool"):
        pool.refcount(5)
    with pytest.raises(TypeError):
        BlockPool(2.0, 4)
    with pytest.raises(ValueError, match="block_size must be >= 1"):
        BlockPool(2, 0)


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_paged_caches_equal_contiguous_ones_prefill_and_decode(name):
    model = _model(CONFIGS[name])
    idx = torch.randint(0, 24, (1, 30), generator=torch.Generator().manual_seed(1))
    pool = BlockPool(24, 4)
    storage = make_paged_storage(model.make_caches(1), pool, dtype=F64)
    views = [s.view(_scattered_table(pool, 8)) for s in storage[:1]]
    table = views[0].table
    views += [s.view(table) for s in storage[1:]]  # one table for all layers
    kind = PagedLatentKVCache if name == "mla" else PagedKVCache
    assert all(isinstance(v, kind) for v in views)
    with torch.no_grad():
        contiguous = model.make_caches(1, 30)
        chunks = [(0, 7), (7, 8), (8, 13), *((t, t + 1) for t in range(13, 30))]  # prefill, then decode
        ref = torch.cat([model(idx[:, a:b], caches=contiguous) for a, b in chunks], dim=1)
        paged = torch.cat([model(idx[:, a:b], caches=views) for a, b in chunks], dim=1)
        full = model(idx)
    assert (paged - ref).abs().max() < 1e-10
    assert (paged - full).abs().max() < 1e-10
    assert views[0].size == 30 and views[0].max_len == 32


def test_sequences_of_different_lengths_interleaved_in_one_pool():
    model = _model(CONFIGS["gqa"])
    gen = torch.Generator().manual_seed(2)
    prompts = [torch.randint(0, 24, (1, n), generator=gen) for n in (3, 11, 6)]
    pool = BlockPool(30, 4)
    storage = make_paged_storage(model.make_caches(1), pool, dtype=F64)
    tables = [[] for _ in prompts]
    views = [[s.view(t) for s in storage] for t in tables]
    outs = [[] for _ in prompts]
    with torch.no_grad():
        for step in range(12):  # the sequences take turns: their blocks interleave in the pool
            for i, idx in enumerate(prompts):
                a, b = (0, 2) if step == 0 else (step + 1, step + 2)
                if b > idx.shape[1]:
                    continue
                while len(tables[i]) < pool.blocks_for(b):
                    tables[i].append(pool.allocate())
                outs[i].append(model(idx[:, a:b], caches=views[i]))
        for i, idx in enumerate(prompts):
            assert (torch.cat(outs[i], dim=1) - model(idx)).abs().max() < 1e-10
    assert tables[1] != list(range(tables[1][0], tables[1][0] + len(tables[1])))  # not consecutive


def test_window_reads_start_at_the_window():
    model = _model(CONFIGS["window"])
    pool = BlockPool(8, 4)
    storage = make_paged_storage(model.make_caches(1), pool, dtype=F64)
    assert [s.window for s in storage] == [5, None]
    view = storage[0].view([pool.allocate() for _ in range(4)])
    k = torch.randn(1, 2, 12, 8, dtype=F64)
    got, _ = view.update(k[:, :, :10], k[:, :, :10])
    assert got.shape[2] == 10  # a prefill reads every position it writes
    got, _ = view.update(k[:, :, 10:11], k[:, :, 10:11])
    assert torch.equal(got, k[:, :, 6:11])  # the query at 10 sees 6..10


def test_views_refuse_bad_input():
    pool = BlockPool(4, 2)
    storage = PagedStorage("kv", {"k": (2, 3), "v": (2, 3)}, pool, dtype=F64)
    table = [pool.allocate()]
    view = storage.view(table)
    x = torch.zeros(1, 2, 3, 3, dtype=F64)
    with pytest.raises(ValueError, match=r"sequence past its blocks: positions 0..2 need 2 blocks, its table holds 1"):
        view.update(x, x)
    with pytest.raises(ValueError, match=r"k must have shape \(1, 2, 'T_new', 3\)"):
        view.update(torch.zeros(2, 2, 1, 3, dtype=F64), torch.zeros(2, 2, 1, 3, dtype=F64))
    with pytest.raises(TypeError):
        view.update(x.long(), x.long())
    view.update(x[:, :, :1], x[:, :, :1])
    pool.release(table[0])
    with pytest.raises(ValueError, match="block 0 is free"):
        view.update(x[:, :, :1], x[:, :, :1])
    with pytest.raises(ValueError, match="size=5 positions do not fit"):
        storage.view([pool.allocate()], size=5)
    with pytest.raises(ValueError, match="kind must be"):
        PagedStorage("ring", {}, pool)
    with pytest.raises(TypeError, match="pool must be a BlockPool"):
        PagedStorage("kv", {}, 3)


def test_make_paged_storage_refuses_what_it_cannot_page():
    pool = BlockPool(4, 2)
    hybrid = _model(DecoderConfig.llama_like(**_SMALL, pattern=LayerPattern(layer_types=("linear", "full"))))
    with pytest.raises(ValueError, match="layer 0's cache is GatedDeltaNetCache"):
        make_paged_storage(hybrid.make_caches(1), pool, dtype=F64)
    shared = _model(DecoderConfig.llama_like(**_SMALL, pattern=LayerPattern(kv_share=(0, 0))))
    with pytest.raises(ValueError, match="layer 1's cache is None"):
        make_paged_storage(shared.make_caches(1), pool, dtype=F64)


def test_sizes_and_bytes():
    pool = BlockPool(5, 4)
    storage = PagedStorage("kv", {"k": (2, 3), "v": (2, 3)}, pool, dtype=F64)
    assert storage.nbytes() == 2 * 5 * 4 * 2 * 3 * 8 and storage.bytes_per_block() == 2 * 4 * 6 * 8
    view = storage.view([pool.allocate(), pool.allocate()])
    assert isinstance(view, KVCache) and view.made_for == {"batch_size": 1, "n_kv_heads": 2, "head_dim": 3}
    assert view.nbytes() == 2 * storage.bytes_per_block() and view.numel_per_token() == 12
    x = torch.ones(1, 2, 3, 3, dtype=F64)
    view.update(x, x)
    assert view.size == view.offset == 3
    view.truncate(1)  # speculative decoding's rejected tokens: written over by the next update
    assert view.size == 1
    view.reset()
    assert view.size == 0
