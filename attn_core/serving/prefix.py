"""Block tables with prefix caching: a full block's tokens, hashed, find a block already computed.

Requests often begin with the same tokens (a system prompt, a few-shot preamble). Their
keys and values at those positions are the same, so a block computed for one request can
be *shared* by the next instead of computed again (vLLM's automatic prefix caching;
SGLang's RadixAttention keeps a tree of the same information). A full block is known by
a hash of its tokens *chained with the previous block's hash*, so that equal hashes mean
equal tokens at every earlier position too (up to collisions), which is what makes the
keys and values equal. A hash only finds a candidate: a block is matched when its own
tokens equal the query's *and* its parent (the block before it when it was computed) is
the block matched just before, so by induction every earlier token was compared and a
collision, of the block's own hash or of the chained part, cannot share a wrong block.

A shared block is held by every sequence that uses it (the pool's reference count). When
the last one releases it, it stays in the pool with its contents and its hash, at the
back of the free list: a later request with the same prefix takes it back; a request
that needs a fresh block takes the least recently released one first, and that block's
hash is forgotten (eviction, least recently used first).

Only full blocks are shared: a partial block is still being written by its sequence.
"""

from __future__ import annotations

from ..caches.paged import BlockPool
from ..checks import check_bool, check_instance

__all__ = ["block_hash", "PrefixCache"]


def block_hash(previous: int | None, tokens: tuple[int, ...]) -> int:
    """The hash of a full block: its tokens chained with the hash of the block before it (``None`` for the first).

    Only ints are hashed (the first block chains from -1, a value Python's ``hash`` never
    returns), so the value is the same in every process: ``hash(None)`` is not before
    Python 3.12, and strings' hashes are salted per process. The hash only proposes a
    block; :meth:`PrefixCache.match` checks the block's tokens and its parent, so a
    collision is not trusted.
    """
    return hash((-1 if previous is None else previous, tuple(tokens)))


class PrefixCache:
    """Allocates sequences' blocks from a :class:`~attn_core.caches.paged.BlockPool`, sharing full blocks by hash.

    A sequence's block table is a list of block ids that this object appends to; the
    sequence's tokens are a list of ints. With ``enabled=False`` nothing is shared and
    released blocks keep nothing.

    Args:
        pool: The pool of blocks.
        enabled: Share full blocks by their chained hash.

    Attributes:
        evicted: Blocks whose kept contents were overwritten because the pool needed them.
    """

    def __init__(self, pool: BlockPool, *, enabled: bool = True) -> None:
        self.pool = check_instance("pool", pool, BlockPool)
        self.enabled = check_bool("enabled", enabled)
        self._by_hash: dict[int, int] = {}  # hash -> block
        # block -> (hash, its tokens, its parent: the block before it, None for the first)
        self._of_block: dict[int, tuple[int, tuple[int, ...], int | None]] = {}
        self.evicted = 0

    @property
    def block_size(self) -> int:
        return self.pool.block_size

    def cached_blocks(self) -> int:
        """Blocks whose contents can be found by hash (held or free)."""
        return len(self._of_block)

    def _hashes(self, tokens: list[int], n_blocks: int):
        """``(hash, block tokens)`` of the first ``n_blocks`` full blocks of ``tokens``."""
        S, previous = self.block_size, None
        for i in range(n_blocks):
            chunk = tuple(tokens[i * S : (i + 1) * S])
            previous = block_hash(previous, chunk)
            yield previous, chunk

    def match(self, tokens: list[int]) -> list[int]:
        """The cached blocks that hold a prefix of ``tokens`` (at most all but its last token), in order.

        The last token is always left to compute: its logits are the next token's. A block
        found by hash is used only if its tokens are the query's and its parent is the
        block matched before it: the hash is not trusted alone (collisions).
        """
        if not self.enabled:
            return []
        found = []
        for h, chunk in self._hashes(tokens, (len(tokens) - 1) // self.block_size):
            block = self._by_hash.get(h)
            if block is None:
                break
            _, held, parent = self._of_block[block]
            if held != chunk or parent != (found[-1] if found else None):
                break
            found.append(block)
        return found

    def admit(self, table: list[int], tokens: list[int]) -> int:
        """Start an empty ``table`` with the cached blocks of ``tokens``' prefix; return the positions they hold."""
        if table:
            raise ValueError(f"admit starts an empty block table, got one with {len(table)} blocks")
        for block in self.match(tokens):
            table.append(self.pool.share(block) if self.pool.refcount(block) else self.pool.take(block))
        return len(table) * self.block_size

    def fresh_needed(self, tokens: list[int]) -> int:
        """Blocks that admitting ``tokens`` would take from the free list: 0 if all are cached and held."""
        return sum(1 for block in self.match(tokens) if self.pool.refcount(block) == 0)

    def grow(self, table: list[int], positions: int) -> None:
        """Append fresh blocks to ``table`` until it holds ``positions`` positions.

        Raises:
            ValueError: The pool is exhausted (check :meth:`blocks_to_grow` against ``pool.num_free`` first).
        """
        for _ in range(self.blocks_to_grow(table, positions)):
            block = self.pool.allocate()
            if block in self._of_block:  # the least recently used kept block: forget what it held
                h, _, _ = self._of_block.pop(block)
                del self._by_hash[h]
                self.evicted += 1
            table.append(block)

    def blocks_to_grow(self, table: list[int], positions: int) -> int:
        """Blocks :meth:`grow` would append to hold ``positions`` positions."""
        return max(0, self.pool.blocks_for(positions) - len(table))

    def register(self, table: list[int], tokens: list[int], computed: int) -> None:
        """Make the full blocks among the first ``computed`` positions findable by their hash.

        A block whose hash already names another block (two sequences computed the same
        prefix at once) stays private to its sequence. Each block records its parent,
        ``table[i - 1]``: a parent is released after its children (a table releases last
        first, and whoever holds a child holds its parent), so it is evicted after them.
        """
        if not self.enabled:
            return
        for i, (h, chunk) in enumerate(self._hashes(tokens, computed // self.block_size)):
            block = table[i]
            if block in self._of_block or h in self._by_hash:
                continue
            self._by_hash[h] = block
            self._of_block[block] = (h, chunk, table[i - 1] if i else None)

    def release(self, table: list[int]) -> None:
        """Release every block of ``table`` and empty it; kept blocks are released last-first.

        The last block of a prefix is evicted before the first, which more requests share.
        """
        for block in reversed(table):
            self.pool.release(block, keep=block in self._of_block)
        table.clear()
