"""A serving engine: many requests decoded together over a paged cache.

:class:`Engine` puts the pieces of :mod:`attn_core.serving` together. ``add`` queues a
request; each :meth:`~Engine.step` asks the :class:`~attn_core.serving.scheduler.Scheduler`
which requests run and how many of their tokens (continuous batching, chunked prefill,
preemption), runs them in one packed model step (:func:`~attn_core.serving.batch.forward_packed`)
whose attention reads each sequence's blocks through its table
(:mod:`attn_core.caches.paged`), and appends the greedy next token of every request whose
tokens are all computed. Full blocks are shared between requests with the same prefix
(:class:`~attn_core.serving.prefix.PrefixCache`). ``run`` steps until every request is
done and returns their tokens, each equal to what greedy
:func:`~attn_core.generate` gives for that prompt alone.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
from torch import nn

from ..caches.paged import BlockPool, make_paged_storage
from ..caches.paged_quantized import PagedQuantizedStorage
from ..checks import check_bool, check_instance, check_int
from ..model.decoder import DecoderLM
from ..model.generation import sample_next
from .batch import check_packable, forward_packed
from .prefix import PrefixCache
from .scheduler import Scheduler, Sequence

__all__ = ["Engine", "EngineStats"]


@dataclass
class EngineStats:
    """What an :class:`Engine` did, summed over its steps.

    Attributes:
        steps: Model steps run.
        prefill_tokens: Tokens computed while some of a request's known tokens were
            not yet in the cache (prompts, and a preempted request's recomputation).
        decode_tokens: Tokens computed one per request per step, each after a generated token.
        cached_prefix_tokens: Tokens not computed because their blocks were found in the
            prefix cache (a shared prompt prefix, or a preempted request's own blocks).
        generated_tokens: Tokens generated (returned by ``run``).
        preemptions: Times a running request was preempted to free blocks.
        evicted_blocks: Kept prefix blocks overwritten because the pool needed them.
        blocks_in_use: Blocks held by some request now.
        peak_blocks: The most blocks held at once (after a step's allocation).
        step_sequences: Requests run at each step.
        step_tokens: Tokens run at each step.
        step_blocks: Blocks held at each step (after its allocation).
        step_positions: Positions whose keys and values are stored or being written at each
            step, summed over the running requests (a shared block counted once per request).
    """

    steps: int = 0
    prefill_tokens: int = 0
    decode_tokens: int = 0
    cached_prefix_tokens: int = 0
    generated_tokens: int = 0
    preemptions: int = 0
    evicted_blocks: int = 0
    blocks_in_use: int = 0
    peak_blocks: int = 0
    step_sequences: list[int] = field(default_factory=list)
    step_tokens: list[int] = field(default_factory=list)
    step_blocks: list[int] = field(default_factory=list)
    step_positions: list[int] = field(default_factory=list)


class Engine:
    """Greedy decoding of many requests with continuous batching over a paged KV cache.

    Args:
        model: A :class:`~attn_core.DecoderLM` with standard blocks whose layers cache keys
            and values (MHA/GQA/MQA, sliding windows, MLA); not ALiBi, linear layers or
            layers sharing keys. Run in eval mode, without gradients.
        block_size: Positions per block of the cache.
        num_blocks: Blocks in the pool (each holds ``block_size`` positions of every layer).
        max_batch_tokens: Most tokens one step runs (decode tokens plus prefill chunks).
        prefix_caching: Share full blocks of equal prefixes between requests.
        kv_dtype: ``None`` (the model's dtype) or ``torch.int8``: full blocks stored in int8,
            keys per channel and values per token, each sequence's newest block in the
            model's dtype (:mod:`attn_core.caches.paged_quantized`); key/value layers only.
            The tokens then equal greedy decoding with a
            :class:`~attn_core.caches.quantized.QuantizedKVCache` of ``group = block_size``
            as long as every prefill chunk ends on a block boundary (the scheduler cuts
            them there when the budget reaches one): a chunk ending inside a block
            attends over positions that one whole prefill would have quantized.

    While a step runs, each block's attention module is wrapped to run once per sequence
    (:func:`~attn_core.serving.batch.split_attention`); it is put back after the step.

    Raises:
        TypeError, ValueError: Bad arguments, naming the value; a model the engine cannot
            run, naming why.
    """

    def __init__(
        self,
        model: nn.Module,
        *,
        block_size: int = 16,
        num_blocks: int,
        max_batch_tokens: int,
        prefix_caching: bool = True,
        kv_dtype: torch.dtype | None = None,
    ) -> None:
        self.model = check_instance("model", model, DecoderLM)
        check_packable(model)
        check_int("block_size", block_size)
        check_int("num_blocks", num_blocks)
        self.max_batch_tokens = check_int("max_batch_tokens", max_batch_tokens)
        check_bool("prefix_caching", prefix_caching)
        c = model.config
        if c.positions.positional == "learned" and max_batch_tokens > c.max_len:
            raise ValueError(
                f"max_batch_tokens={max_batch_tokens} exceeds the learned position table (max_len={c.max_len}): "
                f"a packed step embeds positions up to its token count"
            )
        if kv_dtype is not None and kv_dtype != torch.int8:
            raise ValueError(f"kv_dtype must be None (the model's dtype) or torch.int8, got {kv_dtype!r}")
        self.kv_dtype = kv_dtype
        weight = model.tok_emb.weight
        self.pool = BlockPool(num_blocks, block_size)
        int8 = {"kv_storage": PagedQuantizedStorage} if kv_dtype == torch.int8 else {}
        self.storage = make_paged_storage(
            model.make_caches(1), self.pool, dtype=weight.dtype, device=weight.device, **int8
        )
        self.blocks = PrefixCache(self.pool, enabled=prefix_caching)
        self.scheduler = Scheduler(self.blocks, max_batch_tokens)
        self.stats = EngineStats()
        self._sequences: dict[int, Sequence] = {}
        self._views: dict[int, list] = {}  # request id -> its cache view of every layer

    def add(self, prompt_ids, max_new_tokens: int) -> int:
        """Queue a request; return its id.

        Args:
            prompt_ids: The prompt's token ids: a list of ints or a 1-D integer tensor.
            max_new_tokens: Tokens to generate (at least 1).

        Raises:
            TypeError, ValueError: A bad prompt (empty, ids outside the vocabulary) or
                count; a request longer than the model's ``max_len``; a request that can
                never fit in the pool, even alone.
        """
        tokens = _token_list(prompt_ids, self.model.config.vocab_size)
        check_int("max_new_tokens", max_new_tokens)
        seq = Sequence(len(self._sequences), tokens, len(tokens), max_new_tokens)
        max_len, need = self.model.config.max_len, seq.positions_needed()
        if need > max_len:
            raise ValueError(
                f"prompt length {len(tokens)} + max_new_tokens {max_new_tokens} - 1 = {need} positions "
                f"exceed the model's max_len={max_len}"
            )
        blocks = self.pool.blocks_for(need)
        if blocks > self.pool.num_blocks:
            raise ValueError(
                f"the request can never fit: {need} positions need {blocks} blocks of block_size="
                f"{self.pool.block_size}, the pool has num_blocks={self.pool.num_blocks}"
            )
        self._sequences[seq.rid] = seq
        self.scheduler.add(seq)
        return seq.rid

    @torch.no_grad()
    def step(self) -> list[int]:
        """Run one model step; return the ids of the requests it ran (empty when none is left)."""
        chosen = self.scheduler.schedule()
        if not chosen:
            if self.scheduler.has_work():  # cannot happen: each request fits in the pool alone
                raise RuntimeError("no request could be scheduled, yet some are left")
            return []
        for seq in self.scheduler.waiting:  # preempted: its views are rebuilt when it is readmitted
            self._views.pop(seq.rid, None)
        chunks, views = [], []
        for seq, n in chosen:
            admitted, layer_views = self._views.get(seq.rid, (None, None))
            if admitted != seq.admissions:  # admitted this step (perhaps again): views of its table
                layer_views = [s.view(seq.table, seq.computed) for s in self.storage]
                self._views[seq.rid] = (seq.admissions, layer_views)
                self.stats.cached_prefix_tokens += seq.cached
            chunks.append((seq.tokens[seq.computed : seq.computed + n], seq.computed))
            views.append(layer_views)
        self._record(chosen)
        was_training = self.model.training
        self.model.eval()
        try:
            logits = forward_packed(self.model, chunks, views)  # (len(chosen), V)
        finally:
            self.model.train(was_training)
        for i, (seq, n) in enumerate(chosen):
            seq.computed += n
            self.blocks.register(seq.table, seq.tokens, seq.computed)
            if seq.computed < len(seq.tokens):
                continue  # a prompt chunk: its next token comes after the last chunk
            seq.tokens.append(int(sample_next(logits[i : i + 1], temperature=0.0)))
            self.stats.generated_tokens += 1
            if seq.finished:
                self.scheduler.finish(seq)
                del self._views[seq.rid]
        self.stats.blocks_in_use = self.pool.num_used
        self.stats.preemptions = self.scheduler.preemptions
        self.stats.evicted_blocks = self.blocks.evicted
        return [seq.rid for seq, _ in chosen]

    def _record(self, chosen: list) -> None:
        s = self.stats
        s.steps += 1
        for seq, n in chosen:
            decode = seq.pending == 1 and len(seq.tokens) > seq.prompt_len  # after a generated token
            s.decode_tokens += n if decode else 0
            s.prefill_tokens += 0 if decode else n
        s.peak_blocks = max(s.peak_blocks, self.pool.num_used)
        s.step_sequences.append(len(chosen))
        s.step_tokens.append(sum(n for _, n in chosen))
        s.step_blocks.append(self.pool.num_used)
        s.step_positions.append(sum(seq.computed + n for seq, n in chosen))

    def run(self) -> dict[int, list[int]]:
        """Step until every request is done; return each request's generated tokens, by id.

        Every block is free afterwards (prefix blocks keep their contents for later requests).
        """
        while self.step():
            pass
        return {rid: seq.generated for rid, seq in self._sequences.items() if seq.finished}


def _token_list(prompt_ids, vocab_size: int) -> list[int]:
    """``prompt_ids`` as a list of ints in ``[0, vocab_size)``, checked."""
    if isinstance(prompt_ids, torch.Tensor):
        if prompt_ids.dim() != 1 or prompt_ids.dtype.is_floating_point or prompt_ids.dtype == torch.bool:
            raise ValueError(
                f"prompt_ids must be a 1-D integer tensor or a list of ints, got a {prompt_ids.dim()}-D "
                f"{prompt_ids.dtype} tensor of shape {tuple(prompt_ids.shape)}"
            )
        tokens = prompt_ids.tolist()
    elif isinstance(prompt_ids, (list, tuple)):
        tokens = list(prompt_ids)
        bad = [t for t in tokens if isinstance(t, bool) or not isinstance(t, int)]
        if bad:
            raise TypeError(f"prompt_ids must hold ints, got {type(bad[0]).__name__} ({bad[0]!r})")
    else:
        raise TypeError(f"prompt_ids must be a list of ints or a 1-D integer tensor, got {type(prompt_ids).__name__}")
    if not tokens:
        raise ValueError("prompt_ids must hold at least one token, got an empty prompt")
    lo, hi = min(tokens), max(tokens)
    if lo < 0 or hi >= vocab_size:
        raise ValueError(f"token ids must be in [0, vocab_size={vocab_size}), got min={lo}, max={hi}")
    return tokens
