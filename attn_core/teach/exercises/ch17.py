"""Checks for the exercises of chapter 17 (linear attention, the delta rule, Gated DeltaNet).

* 17.1 one step of causal linear attention with its normaliser;
* 17.2 one step of the gated delta rule;
* 17.3 the bytes of a :class:`~attn_core.caches.recurrent.GatedDeltaNetCache`, counted from the tensors.
"""

from __future__ import annotations

from typing import Callable

import torch

from ...layers.gated_deltanet import GatedDeltaNet
from ...ops.delta_rule import delta_rule_recurrent
from ...ops.linear_attention import l2_normalize, linear_attention_recurrent
from ._common import check_counts, report

__all__ = ["check_linear_attention_step", "check_delta_rule_step", "check_state_bytes"]

F64 = torch.float64


def _steps(name: str, fn: Callable, state: tuple, inputs: list[tuple]) -> tuple[bool, list]:
    """Run the learner's step over a sequence; a crash or a wrong return becomes a printed verdict."""
    outputs = []
    for step in inputs:
        try:
            result = fn(*state, *step)
        except Exception as e:  # a learner's bug should print, not stop the notebook
            return report(name, False, f"{type(e).__name__}: {e}"), []
        if not (isinstance(result, tuple) and len(result) == len(state) + 1):
            return report(
                name, False, f"return a tuple of {len(state) + 1} tensors (output, new state), got {result!r:.60}"
            ), []
        if not all(isinstance(r, torch.Tensor) for r in result):
            return report(name, False, "every returned value must be a tensor"), []
        outputs.append(result[0])
        state = tuple(result[1:])
    return True, [outputs, state]


def _close(name: str, what: str, got: torch.Tensor, want: torch.Tensor) -> bool:
    if got.shape != want.shape:
        return report(name, False, f"{what}: shape {tuple(got.shape)}, expected {tuple(want.shape)}")
    err = (got.double() - want).abs().max().item()
    if not err < 1e-9:
        return report(name, False, f"{what}: max |Δ| = {err:.2g} from attn_core's recurrent form")
    return True


def check_linear_attention_step(fn: Callable) -> bool:
    """Exercise 17.1: ``fn(S, z, phi_q, phi_k, v) -> (o, S, z)``, one token of causal linear attention.

    ``phi_q`` and ``phi_k`` are already through the feature map. The step adds the token to
    the state and the normaliser, then reads: ``S ← S + φ(k) vᵀ``, ``z ← z + φ(k)``,
    ``o = Sᵀ φ(q) / (φ(q)·z)`` (no ``eps``). Run over a sequence, the outputs must equal
    :func:`attn_core.ops.linear_attention.linear_attention_recurrent` with ``eps=0``.

    Shapes:
        S: ``(D_k, D_v)``; z, phi_q, phi_k: ``(D_k,)``; v, o: ``(D_v,)``
    """
    name = "17.1 linear attention, one step"
    g = torch.Generator().manual_seed(171)
    for T, D_k, D_v in ((6, 4, 3), (9, 5, 5)):
        fq, fk = (torch.rand(T, D_k, generator=g, dtype=F64) + 0.1 for _ in range(2))  # positive features
        v = torch.randn(T, D_v, generator=g, dtype=F64)
        want, (S, z) = linear_attention_recurrent(
            fq[None, None], fk[None, None], v[None, None], feature_map="identity", eps=0.0
        )
        ok, got = _steps(
            name, fn, (torch.zeros(D_k, D_v, dtype=F64), torch.zeros(D_k, dtype=F64)), list(zip(fq, fk, v))
        )
        if not ok:
            return False
        outputs, (S_got, z_got) = got
        for what, a, b in (
            ("outputs", torch.stack(outputs), want[0, 0]),
            ("state S", S_got, S[0, 0]),
            ("z", z_got, z[0, 0]),
        ):
            if not _close(name, what, a, b):
                return False
    return report(name, True, "outputs, state and normaliser equal the recurrent form over 2 sequences")


def check_delta_rule_step(fn: Callable) -> bool:
    """Exercise 17.2: ``fn(S, q, k, v, beta, alpha) -> (o, S)``, one token of the gated delta rule.

    Decay, then correct: ``S ← α S``, ``S ← S + β k (v − Sᵀ k)ᵀ``, then ``o = Sᵀ q`` (no
    scale). ``q`` and ``k`` come L2-normalised. Over a sequence the outputs and the final
    state must equal :func:`attn_core.ops.delta_rule.delta_rule_recurrent` with ``scale=1``.

    Shapes:
        S: ``(D_k, D_v)``; q, k: ``(D_k,)``; v, o: ``(D_v,)``; beta, alpha: 0-d tensors
    """
    name = "17.2 gated delta rule, one step"
    g = torch.Generator().manual_seed(172)
    for T, D_k, D_v in ((7, 4, 3), (10, 6, 5)):
        q, k = (l2_normalize(torch.randn(T, D_k, generator=g, dtype=F64)) for _ in range(2))
        v = torch.randn(T, D_v, generator=g, dtype=F64)
        beta = torch.rand(T, generator=g, dtype=F64)
        log_alpha = -torch.rand(T, generator=g, dtype=F64)  # α ∈ (e⁻¹, 1]: the decay matters
        want, S = delta_rule_recurrent(
            q[None, None], k[None, None], v[None, None], beta[None, None], log_alpha[None, None], scale=1.0
        )
        steps = list(zip(q, k, v, beta, log_alpha.exp()))
        ok, got = _steps(name, fn, (torch.zeros(D_k, D_v, dtype=F64),), steps)
        if not ok:
            return False
        outputs, (S_got,) = got
        for what, a, b in (("outputs", torch.stack(outputs), want[0, 0]), ("state S", S_got, S[0, 0])):
            if not _close(name, what, a, b):
                return False
    return report(name, True, "outputs and state equal the recurrent form (decay, then correct) over 2 sequences")


def check_state_bytes(fn: Callable[..., int]) -> bool:
    """Exercise 17.3: the bytes of a Gated DeltaNet cache, ``fn(**sizes) -> int``.

    ``fn(batch_size, d_model, n_heads, head_dim, n_value_heads, value_head_dim, conv_size, bytes_per_element)``.

    The bytes of the cache a :class:`~attn_core.GatedDeltaNet` of those sizes makes (its
    convolution history and its delta-rule state), compared with the bytes counted from
    the tensors of a real cache for several configurations and dtypes. The sequence length
    is not an argument: it does not change the answer.
    """
    cases = []
    for B, d, H_k, D_k, H_v, D_v, K, dtype in (
        (1, 16, 2, 8, 2, 8, 4, torch.float32),
        (3, 32, 2, 8, 4, 6, 4, torch.float64),
        (2, 24, 1, 4, 3, 5, 2, torch.bfloat16),
    ):
        with torch.random.fork_rng(devices=[]):  # building the layer must not move the notebook's RNG
            layer = GatedDeltaNet(d, H_k, D_k, n_value_heads=H_v, value_head_dim=D_v, conv_size=K)
        cache = layer.make_cache(B, dtype=dtype)
        measured = sum(t.numel() * t.element_size() for t in (cache.conv_state, cache.state))
        size = torch.empty((), dtype=dtype).element_size()
        kwargs = dict(batch_size=B, d_model=d, n_heads=H_k, head_dim=D_k, n_value_heads=H_v, value_head_dim=D_v)
        cases.append((kwargs | dict(conv_size=K, bytes_per_element=size), measured))
    return check_counts(
        "17.3 Gated DeltaNet cache bytes", fn, cases, "equals the bytes of real caches for 3 configurations"
    )
