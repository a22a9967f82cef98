"""attn_core.teach.exercises.ch03 (the exercises of issue 25): each check passes a right answer and
fails the plausible wrong ones, printing why and never raising."""

from __future__ import annotations

import copy
import math

import torch

from attn_core import MultiHeadAttention
from attn_core.teach.exercises.ch03 import check_ablate_head, check_permute_heads, check_qk_circuit


def _head_width(layer):
    return layer.q_proj.weight.shape[0] // layer.n_heads


def ablate(layer, h, *, how="out_cols"):
    out = copy.deepcopy(layer)
    D = _head_width(layer)
    block = slice(h * D, (h + 1) * D)
    with torch.no_grad():
        if how == "out_cols":  # the right answer: W_O^(h) is columns h·D.. of out_proj.weight
            out.out_proj.weight[:, block] = 0.0
        elif how == "v_and_bias":  # also right: z^(h) = 0
            out.v_proj.weight[block] = 0.0
            out.v_proj.bias[block] = 0.0
        elif how in ("q", "k", "v"):
            getattr(out, how + "_proj").weight[block] = 0.0
        elif how == "out_rows":
            out.out_proj.weight[block] = 0.0
        elif how == "next":
            nxt = ((h + 1) % layer.n_heads) * D
            out.out_proj.weight[:, nxt : nxt + D] = 0.0
        elif how == "out_cols_and_bias":  # drops the shared output bias too
            out.out_proj.weight[:, block] = 0.0
            out.out_proj.bias.zero_()
    return out


def test_ablate_head(capsys):
    assert check_ablate_head(ablate)
    assert "correct" in capsys.readouterr().out
    assert check_ablate_head(lambda layer, h: ablate(layer, h, how="v_and_bias"))
    assert "correct" in capsys.readouterr().out
    expected = {
        "q": "zero queries",
        "k": "zero keys",
        "v": "value bias",
        "out_rows": "output features",
        "next": "next head",
        "out_cols_and_bias": "max abs difference",
    }
    for how, words in expected.items():
        assert not check_ablate_head(lambda layer, h, how=how: ablate(layer, h, how=how))
        assert words in capsys.readouterr().out, how


def test_ablate_head_in_place_and_errors(capsys):
    def in_place(layer, h):
        D = _head_width(layer)
        with torch.no_grad():
            layer.out_proj.weight[:, h * D : (h + 1) * D] = 0.0
        return layer

    assert not check_ablate_head(in_place)
    assert "modified" in capsys.readouterr().out
    assert not check_ablate_head(lambda layer, h: 1 / 0)
    assert "ZeroDivisionError" in capsys.readouterr().out
    assert not check_ablate_head(lambda layer, h: torch.nn.Linear(2, 2))
    assert "expected an attn_core.MultiHeadAttention" in capsys.readouterr().out


def permute(layer, order, *, out="cols", inverse=False):
    if inverse:
        order = torch.argsort(torch.tensor(order)).tolist()
    new = copy.deepcopy(layer)
    D = _head_width(layer)
    idx = torch.cat([torch.arange(o * D, (o + 1) * D) for o in order])  # new feature -> old feature
    with torch.no_grad():
        for name in ("q_proj", "k_proj", "v_proj"):
            getattr(new, name).weight.copy_(getattr(layer, name).weight[idx])
            getattr(new, name).bias.copy_(getattr(layer, name).bias[idx])
        if out == "cols":
            new.out_proj.weight.copy_(layer.out_proj.weight[:, idx])
        elif out == "rows":
            new.out_proj.weight.copy_(layer.out_proj.weight[idx])
    return new


def test_permute_heads(capsys):
    assert check_permute_heads(permute)
    assert "correct" in capsys.readouterr().out
    expected = {
        (lambda layer, order: permute(layer, order, out="none")): "W_O must follow",
        (lambda layer, order: permute(layer, order, out="rows")): "W_O must follow",
        (lambda layer, order: permute(layer, order, inverse=True)): "inverse order",
        (lambda layer, order: copy.deepcopy(layer)): "did not move",
        (lambda layer, order: 1 / 0): "ZeroDivisionError",
    }
    for wrong, words in expected.items():
        assert not check_permute_heads(wrong)
        assert words in capsys.readouterr().out


def circuit(layer, h, *, variant="right"):
    D = _head_width(layer)
    rows = slice(h * D, (h + 1) * D)
    w_q, w_k = layer.q_proj.weight[rows].detach(), layer.k_proj.weight[rows].detach()
    d = w_q.shape[1]
    return {
        "right": w_q.T @ w_k / math.sqrt(D),
        "transposed": w_k.T @ w_q / math.sqrt(D),
        "unscaled": w_q.T @ w_k,
        "d_model": w_q.T @ w_k / math.sqrt(d),
        "columns": layer.q_proj.weight[:, rows].detach() @ layer.k_proj.weight[:, rows].detach().T / math.sqrt(D),
        "whole": layer.q_proj.weight.detach().T @ layer.k_proj.weight.detach() / math.sqrt(D),
        "small": w_q @ w_k.T,
    }[variant]


def test_qk_circuit(capsys):
    assert check_qk_circuit(circuit)
    out = capsys.readouterr().out
    assert "correct" in out and "rank 4 = D" in out
    expected = {
        "transposed": "transposed",
        "unscaled": "1/√D scale is missing",
        "d_model": "1/√d_model",
        "columns": "rows h·D",
        "whole": "not the head's circuit",
        "small": "expected a (12, 12) tensor",
    }
    for variant, words in expected.items():
        assert not check_qk_circuit(lambda layer, h, v=variant: circuit(layer, h, variant=v))
        assert words in capsys.readouterr().out, variant
    assert not check_qk_circuit(lambda layer, h: 1 / 0)
    assert "ZeroDivisionError" in capsys.readouterr().out


def test_checks_keep_the_rng():
    torch.manual_seed(0)
    want = torch.rand(3)
    torch.manual_seed(0)
    check_ablate_head(ablate)
    check_permute_heads(permute)
    check_qk_circuit(circuit)
    assert torch.equal(torch.rand(3), want)


def test_right_answers_match_the_sum_over_heads():
    # The reference the checks use: the output minus head h's term equals a layer whose
    # W_O columns of head h are zero (checked against MultiHeadAttention itself).
    torch.manual_seed(1)
    layer = MultiHeadAttention(8, 2, bias=True).double()
    x = torch.randn(1, 5, 8, dtype=torch.float64)
    with torch.no_grad():
        both = layer(x) - layer.out_proj.bias
        only0 = ablate(layer, 1)(x) - layer.out_proj.bias
        only1 = ablate(layer, 0)(x) - layer.out_proj.bias
    assert torch.allclose(only0 + only1, both, atol=1e-12)
