"""attn_core.serving.prefix: full blocks found by their chained hash, shared with counts, evicted LRU."""

from __future__ import annotations

import pytest

from attn_core.caches.paged import BlockPool
from attn_core.serving.prefix import PrefixCache, block_hash


def _computed(cache: PrefixCache, tokens: list[int]) -> list[int]:
    """A table for ``tokens`` as if all were computed: admitted, grown, registered."""
    table = []
    cache.admit(table, tokens)
    cache.grow(table, len(tokens))
    cache.register(table, tokens, len(tokens))
    return table


def test_block_hash_chains_the_prefix():
    first = block_hash(None, (1, 2))
    assert block_hash(first, (3, 4)) == block_hash(block_hash(None, (1, 2)), (3, 4))
    assert block_hash(block_hash(None, (9, 9)), (3, 4)) != block_hash(first, (3, 4))  # same block, other prefix


def test_a_shared_prefix_is_found_and_shared_with_counts():
    pool = BlockPool(8, 2)
    cache = PrefixCache(pool)
    a = _computed(cache, [1, 2, 3, 4, 5])  # two full blocks and a partial one
    assert cache.cached_blocks() == 2
    assert cache.match([1, 2, 3, 4, 9, 9]) == a[:2]
    assert cache.match([1, 2, 3, 4]) == a[:1]  # the last token is always computed
    assert cache.match([1, 2, 7, 4, 5]) == a[:1] and cache.match([7, 2]) == []
    b = []
    assert cache.admit(b, [1, 2, 3, 4, 6]) == 4 and b == a[:2]
    assert [pool.refcount(x) for x in a] == [2, 2, 1]
    cache.release(a)
    cache.release(b)
    assert a == [] and b == [] and pool.num_used == 0


def test_released_blocks_are_found_again_and_evicted_least_recently_used_first():
    pool = BlockPool(3, 2)
    cache = PrefixCache(pool)
    old = _computed(cache, [1, 2, 3, 4, 5])  # blocks 0, 1 kept; 2 partial
    cache.release(old)
    new = _computed(cache, [7, 8, 9])  # the partial block first, then the prefix's last block
    assert cache.evicted == 1 and cache.match([1, 2, 3, 4, 5]) == [0]  # the prefix's first block survives
    assert pool.num_free == 1
    again = []
    assert cache.admit(again, [1, 2, 3]) == 2 and pool.refcount(0) == 1  # taken back from the free list
    assert cache.fresh_needed([7, 8, 9]) == 0  # its full block is held: sharing takes nothing from the pool
    cache.release(new)
    cache.release(again)
    assert pool.num_used == 0


def test_equal_hashes_with_other_tokens_are_not_shared(monkeypatch):
    pool = BlockPool(4, 2)
    cache = PrefixCache(pool)
    monkeypatch.setattr("attn_core.serving.prefix.block_hash", lambda previous, tokens: 0)  # every hash collides
    _computed(cache, [1, 2, 3])
    assert cache.match([5, 6, 7]) == []


def test_a_collision_of_the_chained_part_is_not_shared(monkeypatch):
    # The hash forgets the block before (a collision of the chained part, forced): block X
    # computed after B must not be shared by a query whose X follows A.
    pool = BlockPool(8, 2)
    cache = PrefixCache(pool)
    monkeypatch.setattr("attn_core.serving.prefix.block_hash", lambda previous, tokens: hash(tokens))
    a = _computed(cache, [1, 2, 7, 7, 0])  # blocks A, Y
    b = _computed(cache, [3, 4, 5, 6, 0])  # blocks B, X: X's hash is X's tokens' alone
    assert cache.match([1, 2, 5, 6, 0]) == a[:1]  # A found; X's parent is B, not A
    assert cache.match([3, 4, 5, 6, 9]) == b[:2]  # after B, X is found
    cache.release(a)
    cache.release(b)


def test_block_hash_is_the_same_in_every_process():
    import subprocess
    import sys

    code = "from attn_core.serving.prefix import block_hash; print(block_hash(block_hash(None, (1, 2)), (3,)))"
    runs = {subprocess.run([sys.executable, "-c", code], capture_output=True, text=True).stdout for _ in range(2)}
    assert len(runs) == 1 and runs != {""}


def test_disabled_shares_nothing():
    cache = PrefixCache(BlockPool(4, 2), enabled=False)
    _computed(cache, [1, 2, 3])
    assert cache.match([1, 2, 3]) == [] and cache.cached_blocks() == 0


def test_bad_use():
    pool = BlockPool(1, 2)
    cache = PrefixCache(pool)
    with pytest.raises(ValueError, match="admit starts an empty block table"):
        cache.admit([0], [1, 2])
    with pytest.raises(ValueError, match="pool exhausted"):
        cache.grow([], 3)
    with pytest.raises(TypeError):
        PrefixCache("pool")
    with pytest.raises(TypeError):
        PrefixCache(pool, enabled=1)
