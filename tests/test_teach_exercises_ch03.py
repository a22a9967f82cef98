"""attn_core.teach.exercises.ch03: the right and wrong answers of its exercises (ANSWERS, held to the
standard by tests/test_teach_exercises_standard.py), and that the reference of 3.1 is the sum over
heads."""

from __future__ import annotations

import copy
import math

import torch

from attn_core import MultiHeadAttention
from attn_core.teach.exercises.ch03 import (
    check_ablate_head,
    check_mha_from_torch,
    check_permute_heads,
    check_qk_circuit,
)


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


def _ablate_in_place(layer, h):
    D = _head_width(layer)
    with torch.no_grad():
        layer.out_proj.weight[:, h * D : (h + 1) * D] = 0.0
    return layer


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
        "symmetrised": (w_q.T @ w_k + w_k.T @ w_q) / (2 * math.sqrt(D)),
    }[variant]


def _mha_from_torch(ref, swap_qk=False):
    layer = MultiHeadAttention(ref.embed_dim, ref.num_heads, bias=True).double()
    w_q, w_k, w_v = ref.in_proj_weight.chunk(3)  # each (d, d)
    b_q, b_k, b_v = ref.in_proj_bias.chunk(3)
    if swap_qk:
        w_q, w_k = w_k, w_q
    with torch.no_grad():
        for proj, w, b in [
            (layer.q_proj, w_q, b_q),
            (layer.k_proj, w_k, b_k),
            (layer.v_proj, w_v, b_v),
            (layer.out_proj, ref.out_proj.weight, ref.out_proj.bias),
        ]:
            proj.weight.copy_(w)
            proj.bias.copy_(b)
    return layer


def _modifies_the_reference(ref):
    with torch.no_grad():
        ref.out_proj.bias.zero_()
    return _mha_from_torch(ref)


ANSWERS = {
    check_ablate_head: (
        [ablate, lambda layer, h: ablate(layer, h, how="v_and_bias")],
        [
            *(
                (lambda layer, h, how=how: ablate(layer, h, how=how), words)
                for how, words in {
                    "q": "zero queries",
                    "k": "zero keys",
                    "v": "value bias",
                    "out_rows": "output features",
                    "next": "next head",
                    "out_cols_and_bias": "max abs difference",
                }.items()
            ),
            (_ablate_in_place, "modified"),
            (lambda layer, h: torch.nn.Linear(2, 2), "expected an attn_core.MultiHeadAttention"),
        ],
    ),
    check_permute_heads: (
        [permute],
        [
            (lambda layer, order: permute(layer, order, out="none"), "W_O must follow"),
            (lambda layer, order: permute(layer, order, out="rows"), "W_O must follow"),
            (lambda layer, order: permute(layer, order, inverse=True), "inverse order"),
            (lambda layer, order: copy.deepcopy(layer), "did not move"),
        ],
    ),
    check_qk_circuit: (
        [circuit],
        [
            (lambda layer, h, v=variant: circuit(layer, h, variant=v), words)
            for variant, words in {
                "transposed": "transposed",
                "unscaled": "1/√D scale is missing",
                "d_model": "1/√d_model",
                "columns": "rows h·D",
                "whole": "not the head's circuit",
                "small": "expected a (12, 12) tensor",
                "symmetrised": "need not equal Mᵀ",
            }.items()
        ],
    ),
    check_mha_from_torch: (
        [_mha_from_torch],
        [
            (lambda ref: _mha_from_torch(ref, swap_qk=True), "max abs difference"),
            (lambda ref: _mha_from_torch(ref).float(), "build the layer in float64"),
            (lambda ref: MultiHeadAttention(12, 3).double(), "bias=True"),
            (_modifies_the_reference, "reference layer was modified"),
        ],
    ),
}


def test_qk_circuit_names_the_rank(capsys):
    assert check_qk_circuit(circuit)
    out = capsys.readouterr().out
    assert "rank 4 = D" in out and "not symmetric" in out


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
