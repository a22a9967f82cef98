"""Checks for the exercises of chapter 7 (multi-head latent attention)."""

from __future__ import annotations

import math
from typing import Callable

import torch

from ...caches.size import kv_cache_elements_per_token
from ...layers.mla import MultiHeadLatentAttention
from ...layers.multihead import MultiHeadAttention
from ._common import compare, report

__all__ = [
    "check_absorbed_query",
    "check_decoupled_scores",
    "check_cache_elements",
    "check_absorbed_output",
]


def _inputs(seed: int, *shape: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=g, dtype=torch.float64)


def check_absorbed_query(fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor]) -> bool:
    """Exercise 7.1: ``fn(q_c, w_uk)`` moves every head's content query into latent space.

    The result ``q_lat`` must satisfy ``q_lat[h] · c = q_c[h] · (w_uk[h] @ c)`` for every
    latent ``c``, i.e. ``q_lat[h] = w_uk[h]ᵀ q_c[h]``.

    Shapes:
        q_c: ``(B, H, T, d_h)``; w_uk: ``(H, d_h, d_c)``; fn's output: ``(B, H, T, d_c)``
    """
    q_c, w_uk = _inputs(70, 2, 3, 4, 5), _inputs(71, 3, 5, 7)
    try:
        got = fn(q_c, w_uk)
    except Exception as e:  # a learner's bug should print, not stop the notebook
        return report("7.1 absorbed query", False, f"{type(e).__name__}: {e}")
    expected = torch.einsum("bhtd,hdc->bhtc", q_c, w_uk)  # (B, H, T, d_c)
    return compare("7.1 absorbed query", got, expected, atol=1e-10)


def check_decoupled_scores(fn: Callable[..., torch.Tensor]) -> bool:
    """Exercise 7.2: ``fn(q_c, q_r, k_c, k_r)`` returns MLA's scaled scores.

    ``scores = (q_c·k_c + q_r·k_r) / √(d_h + d_r)``, where ``k_r`` is one RoPE key
    shared by every head.

    Shapes:
        q_c: ``(B, H, T_q, d_h)``; q_r: ``(B, H, T_q, d_r)``; k_c: ``(B, H, T_k, d_h)``;
        k_r: ``(B, T_k, d_r)``; fn's output: ``(B, H, T_q, T_k)``
    """
    q_c, q_r = _inputs(72, 2, 3, 4, 8), _inputs(73, 2, 3, 4, 4)
    k_c, k_r = _inputs(74, 2, 3, 6, 8), _inputs(75, 2, 6, 4)
    try:
        got = fn(q_c, q_r, k_c, k_r)
    except Exception as e:
        return report("7.2 decoupled scores", False, f"{type(e).__name__}: {e}")
    content = q_c @ k_c.transpose(-2, -1)  # (B, H, T_q, T_k)
    positional = q_r @ k_r.unsqueeze(1).transpose(-2, -1)  # (B, H, T_q, d_r) @ (B, 1, d_r, T_k)
    expected = (content + positional) / math.sqrt(8 + 4)
    if isinstance(got, torch.Tensor) and got.shape == expected.shape:
        for wrong, why in (
            ((content + positional) / math.sqrt(8), "scaled by 1/√d_h; the pair has d_h + d_r dims"),
            (content / math.sqrt(12), "the RoPE part q_r·k_r is missing"),
        ):
            if torch.allclose(got, wrong, atol=1e-10):
                return report("7.2 decoupled scores", False, why)
    return compare("7.2 decoupled scores", got, expected, atol=1e-10)


def check_cache_elements(fn: Callable[..., int]) -> bool:
    """Exercise 7.3: ``fn(kind, n_heads=, head_dim=, n_kv_heads=, d_latent=, rope_dim=)``
    returns the KV-cache elements per token and layer for ``kind`` in
    ``"mha"``, ``"gqa"``, ``"mqa"``, ``"mla"`` (DeepSeek-V2's Table 1).

    The reference is measured from the cache tensors of real layers.
    """
    cases = [(8, 16, 2, 64, 8), (4, 8, 2, 20, 4), (6, 4, 3, 9, 2)]
    for H, d_h, n_kv, d_c, d_r in cases:
        d = H * d_h
        with torch.random.fork_rng(devices=[]):  # building layers must not move the notebook's RNG
            layers = {
                "mha": MultiHeadAttention(d, H),
                "gqa": MultiHeadAttention(d, H, n_kv_heads=n_kv),
                "mqa": MultiHeadAttention(d, H, n_kv_heads=1),
                "mla": MultiHeadLatentAttention(d, H, d_latent=d_c, rope_dim=d_r),
            }
        for kind, layer in layers.items():
            want = kv_cache_elements_per_token(layer)
            args = dict(n_heads=H, head_dim=d_h, n_kv_heads=n_kv, d_latent=d_c, rope_dim=d_r)
            try:
                got = fn(kind, **args)
            except Exception as e:
                return report("7.3 cache elements", False, f"{kind}: {type(e).__name__}: {e}")
            if got != want:
                return report("7.3 cache elements", False, f"{kind} with {args}: got {got!r}, measured {want}")
    return report("7.3 cache elements", True, f"all {4 * len(cases)} layers match their measured caches")


def check_absorbed_output(fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor]) -> bool:
    """Exercise 7.3: ``fn(w_uv, w_o)`` folds every head's ``W_UV`` into the output projection.

    The absorbed form returns each head's output in latent space, ``o_lat[h]`` of width
    ``d_c``; the layer then computes ``W_O · concat_h(W_UV[h] o_lat[h])``. Folded, that is
    one matrix ``W'`` of shape ``(d_model, H·d_c)`` applied to ``concat_h(o_lat[h])``
    (heads in order, each head's ``d_c`` latent coordinates together), with
    ``W'[:, h·d_c:(h+1)·d_c] = W_O[:, h·d_v:(h+1)·d_v] @ W_UV[h]``. ``w_o`` is in
    ``nn.Linear``'s layout ``(out, in)``. The check compares ``o_lat`` pushed through
    ``W'`` with the two-step computation, for value heads narrower than the latent.

    Shapes:
        w_uv: ``(H, d_v, d_c)``; w_o: ``(d_model, H·d_v)``; fn's output:
        ``(d_model, H·d_c)``
    """
    name = "7.3 absorbed output"
    for seed, (H, d_v, d_c, d_model) in enumerate(((3, 4, 6, 10), (2, 5, 3, 7)), start=76):
        w_uv, w_o = _inputs(seed, H, d_v, d_c), _inputs(seed + 10, d_model, H * d_v)
        o_lat = _inputs(seed + 20, 2, H, 5, d_c)  # (B, H, T, d_c)
        heads = torch.einsum("bhtc,hvc->bhtv", o_lat, w_uv)  # (B, H, T, d_v)
        # (B, H, T, d_v) -> (B, T, H*d_v) -> (B, T, d_model)
        expected = heads.transpose(1, 2).reshape(2, 5, H * d_v) @ w_o.T
        try:
            w_folded = fn(w_uv, w_o)
        except Exception as e:  # a learner's bug should print, not stop the notebook
            return report(name, False, f"{type(e).__name__}: {e}")
        if not (isinstance(w_folded, torch.Tensor) and w_folded.shape == (d_model, H * d_c)):
            return compare(name, w_folded, torch.zeros(d_model, H * d_c))
        flat = o_lat.transpose(1, 2).reshape(2, 5, H * d_c)  # (B, T, H*d_c): head-major
        got = flat @ w_folded.double().T  # (B, T, d_model)
        if not torch.allclose(got, expected, atol=1e-10):
            # Columns ordered latent-major (c, h) instead of head-major (h, c)?
            swapped = w_folded.double().view(d_model, d_c, H).transpose(1, 2).reshape(d_model, -1)
            if torch.allclose(flat @ swapped.T, expected, atol=1e-10):
                return report(
                    name, False, "the columns are ordered (latent, head); the layer's order is (head, latent)"
                )
            err = (got - expected).abs().max().item()
            return report(name, False, f"H={H}, d_v={d_v}, d_c={d_c}: max abs difference {err:.1e}")
    return report(name, True, "two layer shapes, equal to W_UV then W_O within 1e-10")
