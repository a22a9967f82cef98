"""The serving measurements of the book: request mixes, reserved against used cache memory,
static batching, and transformers' own continuous batching driven with the same requests.

Nothing here serves: the engine is :mod:`attn_core.serving`. These helpers set up what
the book compares it with, so that a notebook cell stays a few lines:

* :class:`Request` and :func:`request_mix`: prompts (a shared system prompt and a
  question each) with their numbers of new tokens.
* :func:`cache_bytes_per_token` and :func:`preallocated_bytes`: the bytes of a model's
  caches, measured from the caches it builds (``model.make_caches``), not from a formula.
* :func:`static_batching`: requests run in fixed groups, each group left-padded and
  decoded with :func:`~attn_core.generate` until its longest request is done (what a
  server without iteration-level scheduling does).
* :func:`generate_alone`: each request through plain :func:`~attn_core.generate`, the
  reference every batched result is compared with, token for token.
* :func:`first_layers`: a draft for speculative decoding made of a model's first layers
  and its own head (no training: the model exits early).
* :class:`CallTimes`: the CPU seconds and token count of every call of a model, to
  split a schedule's time into its prefill and decoding steps.
* :class:`HFContinuousBatching`: transformers' continuous batching
  (``model.init_continuous_batching``), kept running between calls so that a timing
  measures generation, not the start of its thread.

Shape legend:
    B    requests in one static group; T the longest prompt of the group
"""

from __future__ import annotations

import copy
import time
from dataclasses import dataclass, replace

import torch
from torch import nn

from ..checks import check_int
from ..model.generation import generate

__all__ = [
    "Request",
    "request_mix",
    "cache_bytes_per_token",
    "preallocated_bytes",
    "static_batching",
    "generate_alone",
    "HFContinuousBatching",
    "first_layers",
    "CallTimes",
]


@dataclass(frozen=True)
class Request:
    """One request: its prompt's token ids and how many tokens to generate.

    Attributes:
        prompt: Token ids of the prompt.
        max_new_tokens: Tokens to generate (no end-of-sequence stop: every request
            generates exactly this many, so that runs compare token for token).
    """

    prompt: tuple[int, ...]
    max_new_tokens: int

    def __post_init__(self) -> None:
        if not self.prompt:
            raise ValueError("a request needs a prompt of at least one token, got prompt=()")
        check_int("max_new_tokens", self.max_new_tokens)

    @property
    def positions(self) -> int:
        """Positions its cache holds at the end: the prompt and every new token but the last.

        The last new token is returned, never fed back (as in :func:`~attn_core.generate`).
        """
        return len(self.prompt) + self.max_new_tokens - 1


def request_mix(tokenizer, system: str, questions: list[str], new_tokens: list[int]) -> list[Request]:
    """Chat requests that share the system prompt ``system``, one per question.

    Each prompt is the tokenizer's chat template applied to a system message and a user
    message, ready for the assistant's answer (``add_generation_prompt=True``): every prompt
    starts with the same tokens, the template's and the system prompt's.

    Args:
        tokenizer: A transformers tokenizer with a chat template.
        system: The system prompt every request shares.
        questions: The user's message of each request.
        new_tokens: Tokens to generate, one per question.

    Raises:
        ValueError: ``questions`` and ``new_tokens`` differ in length.
    """
    if len(questions) != len(new_tokens):
        raise ValueError(f"one new_tokens per question: {len(questions)} questions, {len(new_tokens)} counts")
    out = []
    for q, n in zip(questions, new_tokens):
        chat = [{"role": "system", "content": system}, {"role": "user", "content": q}]
        ids = tokenizer.apply_chat_template(chat, add_generation_prompt=True, tokenize=True)
        ids = ids["input_ids"] if hasattr(ids, "keys") else ids  # a BatchEncoding in some versions
        out.append(Request(tuple(int(i) for i in ids), n))
    return out


def cache_bytes_per_token(model: nn.Module) -> int:
    """Bytes the model's caches store per position of one sequence, measured from the caches it builds.

    Sums ``numel_per_token() * element_size`` over the per-layer caches of
    ``model.make_caches(1, 1)``: every layer's keys and values (or latents).
    """
    caches = model.make_caches(1, 1)
    return sum(c.nbytes() for c in caches)  # one position of one sequence: the bytes per token


def preallocated_bytes(model: nn.Module, n_sequences: int, max_len: int) -> int:
    """Bytes a contiguous cache reserves for ``n_sequences`` sequences of up to ``max_len`` positions.

    Measured: the caches of ``model.make_caches(n_sequences, max_len)`` are built and their
    bytes counted (each layer preallocates ``max_len`` positions for every sequence).
    """
    check_int("n_sequences", n_sequences)
    check_int("max_len", max_len)
    return sum(c.nbytes() for c in model.make_caches(n_sequences, max_len))


def _left_padded(prompts: list[tuple[int, ...]], pad: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """Token ids ``(B, T)`` padded on the left with ``pad``, and the mask (1 = token)."""
    T = max(len(p) for p in prompts)
    idx = torch.tensor([[pad] * (T - len(p)) + list(p) for p in prompts])  # (B, T)
    mask = torch.tensor([[0] * (T - len(p)) + [1] * len(p) for p in prompts])  # (B, T)
    return idx, mask


def static_batching(model: nn.Module, requests: list[Request], batch_size: int) -> tuple[dict[int, list[int]], dict]:
    """Run ``requests`` in groups of ``batch_size`` in arrival order, each group until its longest is done.

    A group is left-padded (:mod:`attn_core.model.padding`) and decoded greedily in lock
    step with :func:`~attn_core.generate`; a request that needs fewer tokens keeps its row
    busy, producing tokens nobody asked for, until the group ends.

    Returns:
        ``(outputs, stats)``: the new token ids by request index, and the counts
        ``steps`` (decoding steps, summed over groups), ``row_steps`` (rows times steps:
        the work done) and ``useful_row_steps`` (the tokens the requests asked for).
    """
    check_int("batch_size", batch_size)
    outputs, steps, row_steps = {}, 0, 0
    for start in range(0, len(requests), batch_size):
        group = requests[start : start + batch_size]
        idx, mask = _left_padded([r.prompt for r in group])  # (B, T)
        n = max(r.max_new_tokens for r in group)
        ids = generate(model, idx, n, temperature=0.0, attention_mask=mask)  # (B, T + n)
        for i, r in enumerate(group):
            outputs[start + i] = ids[i, idx.shape[1] : idx.shape[1] + r.max_new_tokens].tolist()
        steps += n
        row_steps += n * len(group)
    useful = sum(r.max_new_tokens for r in requests)
    return outputs, {"steps": steps, "row_steps": row_steps, "useful_row_steps": useful}


def generate_alone(model: nn.Module, requests: list[Request]) -> tuple[dict[int, list[int]], float]:
    """Each request's new tokens from plain greedy :func:`~attn_core.generate`, one request at a time.

    Returns:
        ``(outputs, gap)``: the new token ids by request index, and the smallest gap between
        the two largest logits over every token chosen: how far each choice was from a tie
        (a gap far above float32 rounding means another order of summation picks the same).
    """
    out, gap = {}, float("inf")
    for i, r in enumerate(requests):
        idx = torch.tensor([r.prompt])  # (1, T)
        ids, logits = generate(model, idx, r.max_new_tokens, temperature=0.0, return_logits=True)
        out[i] = ids[0, len(r.prompt) :].tolist()
        chosen = logits[0, len(r.prompt) - 1 :]  # (N, V): the rows that chose the new tokens
        top2 = chosen.topk(2, dim=-1).values  # (N, 2)
        gap = min(gap, (top2[:, 0] - top2[:, 1]).min().item())
    return out, gap


class HFContinuousBatching:
    """transformers' continuous batching on a Hugging Face model, started once, closed by :meth:`close`.

    The manager's sizes are given, not inferred: left to itself on a CPU, transformers
    sizes its cache from the machine's RAM (``psutil``: most of the memory not used by the
    process), which takes many seconds to allocate and is nothing like a request mix's need.

    Args:
        model: A transformers causal LM (``LlamaForCausalLM``).
        page_size: Tokens per page (the block size).
        num_blocks: Blocks of ``page_size`` tokens (for every layer) in the cache.
        max_batch_tokens: Tokens per forward pass at most.

    Use as a context manager, or call :meth:`close`: the manager runs a thread.
    """

    def __init__(self, model: nn.Module, *, page_size: int, num_blocks: int, max_batch_tokens: int) -> None:
        from transformers import GenerationConfig
        from transformers.generation.configuration_utils import ContinuousBatchingConfig

        greedy = GenerationConfig(do_sample=False, eos_token_id=-1, pad_token_id=0)  # -1: never stop early
        config = ContinuousBatchingConfig(page_size=page_size, num_blocks=num_blocks, max_batch_tokens=max_batch_tokens)
        self.manager = model.init_continuous_batching(generation_config=greedy, continuous_batching_config=config)
        self.manager.start()

    def run(self, requests: list[Request], timeout: float = 60.0) -> dict[int, list[int]]:
        """The new token ids of every request, by index, once all are finished.

        Raises:
            RuntimeError: A request failed (transformers' error message), or none finished
                within ``timeout`` seconds.
        """
        ids = [self.manager.add_request(list(r.prompt), max_new_tokens=r.max_new_tokens) for r in requests]
        done = {}
        while len(done) < len(ids):
            result = self.manager.get_result(timeout=timeout)
            if result is None:
                raise RuntimeError(f"transformers' continuous batching finished {len(done)} of {len(ids)} requests")
            if result.error is not None:
                raise RuntimeError(f"request {result.request_id} failed: {result.error}")
            if result.is_finished():
                done[result.request_id] = list(result.generated_tokens)
        return {i: done[rid] for i, rid in enumerate(ids)}

    def close(self) -> None:
        """Stop the manager's thread."""
        self.manager.destroy()  # stops the thread and releases what it holds

    def __enter__(self) -> HFContinuousBatching:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def first_layers(model: nn.Module, n_layers: int) -> nn.Module:
    """The model's first ``n_layers`` blocks under its own embedding, final norm and head, as a model.

    A draft for speculative decoding that needs no training and no download: it shares
    every weight with ``model`` (nothing is copied), and its config says ``n_layers``, so
    that ``make_caches`` and ``forward`` see only those blocks. Its predictions are the
    full model's read early, good where the next token is easy.

    Raises:
        ValueError: ``n_layers`` is not between 1 and the model's number of layers.
    """
    check_int("n_layers", n_layers)
    if n_layers > model.config.n_layers:
        raise ValueError(f"n_layers={n_layers} exceeds the model's n_layers={model.config.n_layers}")
    draft = copy.copy(model)  # a shallow copy: the same parameters
    draft._modules = dict(model._modules)  # its own module table, so that the next line leaves model alone
    draft.blocks = nn.ModuleList(list(model.blocks)[:n_layers])
    draft.config = replace(model.config, n_layers=n_layers)
    return draft


class CallTimes:
    """Records ``(tokens, cpu seconds)`` for every call of ``model`` while entered.

    ``tokens`` is the size of the call's token ids (rows times positions; a packed engine
    step is one row). CPU time of this process, as the book's timings count it.

    Example:
        with CallTimes(model) as t:
            run()
        t.calls  # [(377, 1.5), (7, 0.2), ...]
    """

    def __init__(self, model: nn.Module) -> None:
        self.model, self.calls, self._hooks = model, [], []

    def __enter__(self) -> CallTimes:
        def start(module, args, kwargs):
            self._start = time.process_time()

        def stop(module, args, kwargs, output):
            ids = args[0] if args else kwargs["idx"]
            self.calls.append((ids.numel(), time.process_time() - self._start))

        self._hooks = [
            self.model.register_forward_pre_hook(start, with_kwargs=True),
            self.model.register_forward_hook(stop, with_kwargs=True),
        ]
        return self

    def __exit__(self, *exc) -> None:
        for hook in self._hooks:
            hook.remove()
