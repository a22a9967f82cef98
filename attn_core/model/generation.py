"""Autoregressive generation, with or without a key/value cache.

Without a cache, every step runs the model on the whole sequence so far and keeps the
last position's logits: step ``t`` costs ``O(t)`` token-passes, ``O(T²)`` in all. With a
cache, the prompt is *prefilled* in one causal pass that stores every layer's keys and
values, and each later step feeds only the newest token, which attends to the cache.
Both paths give the same tokens and (to float rounding) the same logits; a test holds it.

Shape legend:
    B        batch size
    T        prompt length; ``N`` new tokens
    V        vocabulary size
"""

from __future__ import annotations

import torch
from torch import nn

from ..checks import check_bool, check_instance, check_int, check_number, check_tensor

__all__ = ["generate", "sample_next"]


def sample_next(
    logits: torch.Tensor,
    *,
    temperature: float = 1.0,
    top_k: int | None = None,
    generator: torch.Generator | None = None,
) -> torch.Tensor:
    """Pick the next token from the last position's logits.

    ``temperature = 0`` is greedy (argmax); otherwise the logits are divided by the
    temperature, optionally cut to the ``top_k`` largest, and a token is sampled.

    Shapes:
        logits: ``(B, V)``; output: ``(B, 1)`` token ids
    """
    if temperature == 0:
        return logits.argmax(dim=-1, keepdim=True)
    scaled = logits.float() / temperature  # (B, V)
    if top_k is not None and top_k < scaled.shape[-1]:
        kth = scaled.topk(top_k, dim=-1).values[:, -1:]  # (B, 1) the k-th largest
        scaled = scaled.masked_fill(scaled < kth, float("-inf"))
    probs = torch.softmax(scaled, dim=-1)
    return torch.multinomial(probs, 1, generator=generator)  # (B, 1)


def _check_args(
    model, idx, max_new_tokens, use_cache, temperature, top_k, generator, static, compile, attention_mask
) -> None:
    """Check :func:`generate`'s arguments; raise naming the first bad value."""
    check_instance("model", model, nn.Module)
    check_tensor("idx", idx, ("B", "T"), integer=True)
    if idx.shape[1] == 0:
        raise ValueError(f"idx must have shape (B, T) with T >= 1, got {tuple(idx.shape)}")
    check_int("max_new_tokens", max_new_tokens)
    check_number("temperature", temperature, low=0.0)
    if top_k is not None:
        check_int("top_k", top_k)
    check_instance("generator", generator, torch.Generator, optional=True)
    max_len = getattr(getattr(model, "config", None), "max_len", None)
    if max_len is not None and idx.shape[1] + max_new_tokens - 1 > max_len:
        raise ValueError(
            f"prompt length {idx.shape[1]} + max_new_tokens {max_new_tokens} - 1 = "
            f"{idx.shape[1] + max_new_tokens - 1} positions exceed the model's max_len={max_len}"
        )
    check_bool("static", static)
    if not isinstance(compile, (bool, str)):
        raise TypeError(f"compile must be a bool or a torch.compile mode (str), got {type(compile).__name__}")
    if (static or compile) and not use_cache:
        raise ValueError(f"static={static}, compile={compile!r} decode with caches: pass use_cache=True")
    if attention_mask is not None:
        check_tensor("attention_mask", attention_mask, ("B", "T"))
        if attention_mask.shape != idx.shape:
            raise ValueError(
                f"attention_mask must have the prompt's shape {tuple(idx.shape)}, got {tuple(attention_mask.shape)}"
            )
        if static or compile:
            raise ValueError("attention_mask (a padded batch) is not supported with static caches or compile")


def _padded(mask: torch.Tensor | None) -> dict:
    """The ``attention_mask`` keyword only when there is a mask: a model without padding support still works."""
    return {} if mask is None else {"attention_mask": mask}


def _grow(mask: torch.Tensor | None) -> torch.Tensor | None:
    """The mask with one more column of tokens.

    Shapes:
        mask: ``(B, T_k)``; output: ``(B, T_k + 1)``
    """
    return None if mask is None else torch.cat((mask, mask.new_ones(mask.shape[0], 1)), dim=1)


@torch.no_grad()
def generate(
    model: nn.Module,
    idx: torch.Tensor,
    max_new_tokens: int,
    *,
    use_cache: bool = True,
    temperature: float = 1.0,
    top_k: int | None = None,
    generator: torch.Generator | None = None,
    return_logits: bool = False,
    static: bool = False,
    compile: bool | str = False,
    attention_mask: torch.Tensor | None = None,
) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
    """Extend ``idx`` by ``max_new_tokens`` tokens, one at a time.

    Args:
        model: A causal LM: ``model(idx)`` returns logits ``(B, T, V)``; with
            ``use_cache`` it must also accept ``caches=`` and have ``make_caches(B, max_len)``
            (as :class:`~attn_core.DecoderLM` does).
        idx: The prompt.
        max_new_tokens: ``N``.
        use_cache: Prefill the prompt into per-layer caches, then feed one token per step.
        temperature: ``0`` for greedy decoding; otherwise sampling temperature.
        top_k: Sample only among the ``top_k`` most likely tokens.
        generator: Source of randomness for sampling.
        return_logits: Also return the logits of every position fed to the model.
        static: Decode with static-shape caches (``model.make_caches(..., static=True)``,
            :mod:`attn_core.caches.static`): every step attends over the same ``T + N - 1``
            key slots, the empty ones masked. The same tokens and logits (to rounding).
        compile: Run the decoding steps through ``torch.compile(model)`` (implies
            ``static``); a string is its ``mode`` (``"reduce-overhead"``: CUDA graphs;
            ``"max-autotune-no-cudagraphs"``, ...). Every step has the same shapes and
            reads its positions from the caches' device tensors, so it is compiled once,
            and on a GPU captured once. The prefill runs eagerly (its length differs from
            a step's). The recipe by hand: ``caches = model.make_caches(B, T + N - 1,
            static=True)``, prefill with ``model(idx, caches=caches)``, then call ``step =
            torch.compile(model)`` as ``step(token, caches=caches)`` once per token under
            ``torch.no_grad()``, and clone what you keep of its output (a captured step
            writes its next output where the last one was).
        attention_mask: A left-padded batch's mask over the prompt (1 = token, 0 =
            padding; :mod:`attn_core.model.padding`): the padding is hidden and each row's
            positions start at its first token, so every row gets the tokens it would get
            alone. Grown by one column of ones per new token.

    Returns:
        The prompt followed by the new tokens, and with ``return_logits`` the logits:
        row ``t`` is the model's prediction for token ``t + 1`` (the last new token is
        never fed back, so there are ``T + N - 1`` rows). The model's train/eval mode is
        restored afterwards; generation itself runs in eval mode.

    Shapes:
        idx: ``(B, T)``
        output: ``(B, T + N)``; logits: ``(B, T + N - 1, V)``

    Raises:
        TypeError, ValueError: Bad arguments, naming the value; a sequence longer than
            the model's ``config.max_len``.
    """
    _check_args(model, idx, max_new_tokens, use_cache, temperature, top_k, generator, static, compile, attention_mask)
    step_model = model
    if compile:
        step_model = torch.compile(model) if compile is True else torch.compile(model, mode=compile)
    mask = attention_mask
    was_training = model.training
    model.eval()
    try:
        idx = idx.long()
        B, T = idx.shape
        cached = {}  # without a cache, every step runs the model on the whole sequence again
        if use_cache:
            static_kw = {"static": True} if static or compile else {}
            cached = {"caches": model.make_caches(B, T + max_new_tokens - 1, **static_kw)}
        logits = model(idx, **cached, **_padded(mask))
        collected = [logits]  # (B, T, V): the prompt in one causal pass (with a cache: prefilled into it)
        for step in range(max_new_tokens):
            nxt = sample_next(logits[:, -1], temperature=temperature, top_k=top_k, generator=generator)
            idx = torch.cat((idx, nxt), dim=1)  # (B, T + step + 1)
            mask = _grow(mask)
            if step + 1 < max_new_tokens:  # the last new token is never fed back
                # With a cache only the new token, (B, 1, V); without, everything again, (B, T + step + 1, V).
                logits = step_model(nxt if use_cache else idx, **cached, **_padded(mask))
                if compile:  # CUDA graphs replay into the same output memory: keep a copy
                    logits = logits.clone()
                collected.append(logits[:, -1:])
    finally:
        model.train(was_training)
    if return_logits:
        return idx, torch.cat(collected, dim=1)  # (B, T + N - 1, V)
    return idx
