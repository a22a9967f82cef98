"""attn_core.teach.exercises.ch16: the right and wrong answers of exercises 16.1-16.3 (ANSWERS, held to
the standard by tests/test_teach_exercises_standard.py)."""

from __future__ import annotations

import math

from attn_core.teach.exercises.ch16 import check_gate_parameters, check_qk_norm_bound, check_whole_projection_bound


def _gate_parameters(d_model, n_heads, head_dim, n_layers, kind):
    width = n_heads * head_dim if kind == "elementwise" else n_heads  # one logit per channel or per head
    return n_layers * d_model * width


def _qk_bound(q_gain, k_gain):
    return math.sqrt(len(q_gain)) * (q_gain * k_gain).abs().max().item()


def _whole_bound(q_gain, k_gain, n_heads):
    D = len(q_gain) // n_heads
    return n_heads * math.sqrt(D) * (q_gain * k_gain).abs().max().item()


ANSWERS = {
    check_gate_parameters: (
        [_gate_parameters],
        [
            (lambda d, H, D, L, kind: _gate_parameters(d, H, D, 1, kind), "parameter counts differ by"),  # one layer
            # d_model² (right only when H·D = d_model)
            (lambda d, H, D, L, kind: L * d * (d if kind == "elementwise" else H), "parameter counts differ by"),
            (lambda d, H, D, L, kind: L * d * H * D, "parameter counts differ by"),  # headwise as elementwise
            # a bias per gate logit
            (lambda d, H, D, L, kind: _gate_parameters(d, H, D, L, kind) + L * H * D, "parameter counts differ by"),
            (lambda d, H, D, L, kind: float(_gate_parameters(d, H, D, L, kind)), "parameter counts differ by"),
        ],
    ),
    check_qk_norm_bound: (
        [_qk_bound],
        [
            (lambda q, k: (q * k).abs().max().item(), "the bound is"),  # the √D of unit RMS vectors forgotten
            (lambda q, k: len(q) * (q * k).abs().max().item(), "the bound is"),  # ‖u‖‖w‖ = D, then no 1/√D
            (lambda q, k: math.sqrt(len(q)) * q.abs().max().item() * k.abs().max().item(), "the bound is"),
            (lambda q, k: (q * k).abs().sum().item(), "the bound is"),  # every channel at once
        ],
    ),
    check_whole_projection_bound: (
        [_whole_bound],
        [
            # the per-head bound of exercise 16.3, which does not apply to OLMo 2
            (lambda q, k, H: math.sqrt(len(q) // H) * (q * k).abs().max().item(), "per-head bound"),
            # √H instead of H (a head's norm, not its squared norm, grows by √H)
            (lambda q, k, H: _whole_bound(q, k, H) / math.sqrt(H), "RMSNorm of width H·D"),
            # max|g_q| · max|g_k|: the two largest gains sit on different channels
            (
                lambda q, k, H: H * math.sqrt(len(q) // H) * q.abs().max().item() * k.abs().max().item(),
                "RMSNorm of width H·D",
            ),
            # forgot the 1/√D of the logit
            (lambda q, k, H: H * (len(q) // H) * (q * k).abs().max().item(), "RMSNorm of width H·D"),
            (lambda q, k, H: "big", "got 'big'"),
        ],
    ),
}
