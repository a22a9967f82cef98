"""attn_core.teach.exercises.ch16 (new checks 16.1, 16.2): each passes a correct answer and fails wrong ones."""

from __future__ import annotations

import math

from attn_core.teach.exercises.ch16 import check_gate_parameters, check_whole_projection_bound


def _gate_parameters(d_model, n_heads, head_dim, n_layers, kind):
    width = n_heads * head_dim if kind == "elementwise" else n_heads  # one logit per channel or per head
    return n_layers * d_model * width


def test_gate_parameters(capsys):
    assert check_gate_parameters(_gate_parameters)
    assert "correct" in capsys.readouterr().out
    # one layer only
    assert not check_gate_parameters(lambda d, H, D, L, kind: _gate_parameters(d, H, D, 1, kind))
    assert "parameter counts differ by" in capsys.readouterr().out
    # d_model² (right only when H·D = d_model)
    assert not check_gate_parameters(lambda d, H, D, L, kind: L * d * (d if kind == "elementwise" else H))
    # headwise counted as elementwise
    assert not check_gate_parameters(lambda d, H, D, L, kind: L * d * H * D)
    # a bias per gate logit
    assert not check_gate_parameters(lambda d, H, D, L, kind: _gate_parameters(d, H, D, L, kind) + L * H * D)
    assert not check_gate_parameters(lambda d, H, D, L, kind: float(_gate_parameters(d, H, D, L, kind)))
    assert not check_gate_parameters(lambda d, H, D, L, kind: 1 / 0)
    assert "ZeroDivisionError" in capsys.readouterr().out


def _whole_bound(q_gain, k_gain, n_heads):
    D = len(q_gain) // n_heads
    return n_heads * math.sqrt(D) * (q_gain * k_gain).abs().max().item()


def test_whole_projection_bound(capsys):
    assert check_whole_projection_bound(_whole_bound)
    assert "correct" in capsys.readouterr().out
    # the per-head bound of exercise 16.3, which does not apply to OLMo 2
    per_head = lambda q, k, H: math.sqrt(len(q) // H) * (q * k).abs().max().item()  # noqa: E731
    assert not check_whole_projection_bound(per_head)
    assert "per-head bound" in capsys.readouterr().out
    # √H instead of H (a head's norm, not its squared norm, grows by √H)
    assert not check_whole_projection_bound(lambda q, k, H: _whole_bound(q, k, H) / math.sqrt(H))
    # max|g_q| · max|g_k|: the two largest gains sit on different channels
    assert not check_whole_projection_bound(
        lambda q, k, H: H * math.sqrt(len(q) // H) * q.abs().max().item() * k.abs().max().item()
    )
    # forgot the 1/√D of the logit
    assert not check_whole_projection_bound(lambda q, k, H: H * (len(q) // H) * (q * k).abs().max().item())
    assert not check_whole_projection_bound(lambda q, k, H: "big")
    assert not check_whole_projection_bound(lambda q, k, H: 1 / 0)
    assert "ZeroDivisionError" in capsys.readouterr().out
