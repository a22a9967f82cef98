"""Which requests run at each step, and how many of their tokens: continuous batching.

A static batch runs until its longest request finishes, and a request that arrives
meanwhile waits for the whole batch. Iteration-level scheduling (Orca, Yu et al. 2022)
decides again at *every* step: a finished request leaves at once and a waiting one
takes its place. Each step runs at most ``max_batch_tokens`` tokens: one for each
decoding request, and chunks of the prompts being prefilled with what is left, so that
a long prompt is split over several steps (chunked prefill) rather than stalling the
requests that decode.

Memory is the other limit. Each step first gives the running requests the blocks their
tokens need, oldest first; when the pool is exhausted the *newest* running request is
preempted: its blocks are released and it goes back to the front of the queue, to be
recomputed from its tokens later (vLLM's recompute preemption). The oldest request
therefore always progresses, and since every request fits in the pool alone (checked
when it is added), the engine never deadlocks. Waiting requests are admitted in arrival
order while blocks and tokens are left; none is skipped for a later one, so none starves.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

from .prefix import PrefixCache

__all__ = ["Sequence", "Scheduler"]


@dataclass(eq=False)
class Sequence:
    """One request's state: its tokens, how many have keys and values stored, its block table.

    Attributes:
        rid: The request id.
        tokens: The prompt followed by the tokens generated so far.
        prompt_len: Tokens of the prompt.
        max_new_tokens: Tokens to generate.
        computed: Leading tokens whose keys and values are in the blocks.
        table: Block ids, in order of position.
        cached: Prompt tokens found in the prefix cache at the last admission.
        admissions: Times the sequence was admitted (more than once after a preemption).
    """

    rid: int
    tokens: list[int]
    prompt_len: int
    max_new_tokens: int
    computed: int = 0
    table: list[int] = field(default_factory=list)
    cached: int = 0
    admissions: int = 0

    @property
    def generated(self) -> list[int]:
        """The tokens generated so far."""
        return self.tokens[self.prompt_len :]

    @property
    def finished(self) -> bool:
        return len(self.tokens) - self.prompt_len >= self.max_new_tokens

    @property
    def pending(self) -> int:
        """Tokens not yet fed to the model (1 while decoding; the rest of the prompt while prefilling)."""
        return len(self.tokens) - self.computed

    def positions_needed(self) -> int:
        """Positions whose keys and values the request stores in all: the last generated token is never fed."""
        return self.prompt_len + self.max_new_tokens - 1


class Scheduler:
    """Queues of waiting and running sequences, and the choice of each step's tokens.

    Args:
        blocks: The :class:`~attn_core.serving.prefix.PrefixCache` that holds the blocks.
        max_batch_tokens: Most tokens one step runs.

    Attributes:
        waiting: Sequences not admitted (or preempted), first to be admitted first.
        running: Admitted sequences, oldest first.
        preemptions: How many times a running sequence was preempted.
    """

    def __init__(self, blocks: PrefixCache, max_batch_tokens: int) -> None:
        self.blocks, self.max_batch_tokens = blocks, max_batch_tokens
        self.waiting: deque[Sequence] = deque()
        self.running: list[Sequence] = []
        self.preemptions = 0

    def add(self, seq: Sequence) -> None:
        """Queue a new sequence."""
        self.waiting.append(seq)

    def has_work(self) -> bool:
        return bool(self.waiting or self.running)

    def schedule(self) -> list[tuple[Sequence, int]]:
        """The ``(sequence, tokens)`` to run this step, oldest first; their blocks are allocated.

        Running sequences first (each gets ``min(pending, budget)`` tokens, preempting the
        newest running ones when blocks run out), then waiting ones in order.
        """
        budget, chosen = self.max_batch_tokens, []
        for seq in list(self.running):
            if seq not in self.running:  # preempted below to make room for an older one
                continue
            n = self._chunk(seq, budget)
            if n == 0:
                break
            if not self._make_room(seq, seq.computed + n):
                continue  # the sequence preempted itself: it was the newest
            chosen.append((seq, n))
            budget -= n
        while self.waiting and budget > 0 and self._admit(self.waiting[0], budget, chosen):
            budget -= chosen[-1][1]
        return chosen

    def _chunk(self, seq: Sequence, budget: int, computed: int | None = None) -> int:
        """Tokens of ``seq`` to run with ``budget`` left: all pending, or a chunk ending on a block boundary.

        A chunk that fills its last block quantizes it (an int8 cache) before its queries
        attend, as one prefill of the whole prompt would: so chunks end on block boundaries
        whenever the budget reaches one.
        """
        computed = seq.computed if computed is None else computed
        n = min(len(seq.tokens) - computed, budget)
        if n < len(seq.tokens) - computed:
            S = self.blocks.block_size
            aligned = (computed + n) // S * S - computed
            n = aligned if aligned > 0 else n
        return n

    def _make_room(self, seq: Sequence, positions: int) -> bool:
        """Give ``seq`` blocks for ``positions``, preempting the newest running sequences; False if ``seq`` went."""
        pool = self.blocks.pool
        while self.blocks.blocks_to_grow(seq.table, positions) > pool.num_free:
            victim = self.running[-1]
            self.preempt(victim)
            if victim is seq:
                return False
        self.blocks.grow(seq.table, positions)
        return True

    def _admit(self, seq: Sequence, budget: int, chosen: list) -> bool:
        """Admit the first waiting sequence if its first chunk's blocks are free; False to stop admitting."""
        pool = self.blocks.pool
        cached = self.blocks.match(seq.tokens)
        fresh = self.blocks.fresh_needed(seq.tokens)
        n = self._chunk(seq, budget, computed=len(cached) * pool.block_size)
        grow = pool.blocks_for(len(cached) * pool.block_size + n) - len(cached)
        if fresh + grow > pool.num_free:
            return False  # wait for blocks: running sequences will release theirs
        self.waiting.popleft()
        seq.computed = seq.cached = self.blocks.admit(seq.table, seq.tokens)
        seq.admissions += 1
        self.blocks.grow(seq.table, seq.computed + n)
        self.running.append(seq)
        chosen.append((seq, n))
        return True

    def preempt(self, seq: Sequence) -> None:
        """Release ``seq``'s blocks and queue it first: it is recomputed from its tokens when readmitted."""
        self.running.remove(seq)
        self.blocks.release(seq.table)
        seq.computed = 0
        self.waiting.appendleft(seq)
        self.preemptions += 1

    def finish(self, seq: Sequence) -> None:
        """Release a finished sequence's blocks."""
        self.running.remove(seq)
        self.blocks.release(seq.table)
