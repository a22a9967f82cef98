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
    check_ablate_prediction,
    check_mha_test,
    check_one_token_prediction,
    check_permute_heads,
    check_qk_circuit,
    check_qk_prediction,
    check_wide_head_prediction,
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


def _by_heads(layer, x, *, scale_width=None, project=True):
    # the list-of-heads reference: head h uses rows h·D..(h+1)·D-1 of each projection
    H = layer.n_heads
    D = x.shape[-1] // H
    heads = []
    for h in range(H):
        rows = slice(h * D, (h + 1) * D)
        q, k, v = (x @ p.weight[rows].T for p in (layer.q_proj, layer.k_proj, layer.v_proj))
        w = torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(scale_width or D), dim=-1)
        heads.append(w @ v)  # (B, T, D)
    concat = torch.cat(heads, dim=-1)  # (B, T, H·D)
    return layer.out_proj(concat) if project else concat  # (B, T, d_model)


def mha_test(layer, *, T=5, atol=1e-10, scale_width=None):
    x = torch.randn(2, T, layer.q_proj.weight.shape[1], dtype=torch.float64)
    with torch.no_grad():
        return torch.allclose(layer(x), _by_heads(layer, x, scale_width=scale_width), atol=atol)


def _forgets_w_o(layer):
    x = torch.randn(2, 5, 12, dtype=torch.float64)
    with torch.no_grad():  # the reference stops at the concatenation: W_O missing
        return torch.allclose(layer(x), _by_heads(layer, x, project=False), atol=1e-10)


_X = torch.randn(2, 5, 12, dtype=torch.float64)  # (B, T, d_model)


def _own_forward(layer):
    # the lazy reference: the layer's own code, or MultiHeadAttention's run on its weights
    x = torch.randn(2, 5, 12, dtype=torch.float64)
    with torch.no_grad():
        return torch.allclose(layer(x), MultiHeadAttention.forward(layer, x), atol=1e-10)


def _against_torch(layer):
    d, H = layer.q_proj.weight.shape[1], layer.n_heads
    ref = torch.nn.MultiheadAttention(d, H, bias=False, batch_first=True).double()
    with torch.no_grad():
        ref.in_proj_weight.copy_(torch.cat([layer.q_proj.weight, layer.k_proj.weight, layer.v_proj.weight]))
        ref.out_proj.weight.copy_(layer.out_proj.weight)
        x = torch.randn(2, 6, d, dtype=torch.float64)
        return torch.allclose(layer(x), ref(x, x, x, need_weights=False)[0], atol=1e-10)


_RIGHT_ABLATE = {"q_proj": False, "k_proj": False, "v_proj": False, "v_proj, no biases": True}

ANSWERS = {
    check_ablate_prediction: (
        [_RIGHT_ABLATE],
        [
            # "zero values, zero output": the value bias is still averaged and projected
            ({**_RIGHT_ABLATE, "v_proj": True}, "value bias"),
            # "zero queries: the head sees nothing": it still adds its values
            ({**_RIGHT_ABLATE, "q_proj": True}, "zero queries"),
            # "without biases it is the same": then zero values do remove the term
            ({**_RIGHT_ABLATE, "v_proj, no biases": False}, "z^(h) = 0"),
            ({"q_proj": False}, "expected a dict"),
        ],
    ),
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
    check_qk_prediction: (
        [{"symmetric": False, "rank": 4}],
        [
            ({"symmetric": True, "rank": 4}, "W_Q and W_K differ"),
            ({"symmetric": False, "rank": 12}, "a product through D"),
            ({"symmetric": False, "rank": 3}, "rank 3"),
            ({"symmetric": False, "rank": True}, "expected a int"),
            ({"symmetric": ..., "rank": ...}, "expected a bool"),
        ],
    ),
    check_wide_head_prediction: (
        [{"splits its weight": True, "nearer the four heads' 80-step loss": True}],
        [
            # "more steps make one head pick one position": it cannot, one average
            ({"splits its weight": False, "nearer the four heads' 80-step loss": True}, "'splits its weight'"),
            # "splitting caps the loss near 0.13": in 4x the steps it gets to 0.03
            ({"splits its weight": True, "nearer the four heads' 80-step loss": False}, '80-step loss"'),
            ({"splits its weight": True}, "expected a dict"),
        ],
    ),
    check_mha_test: (
        [mha_test, _against_torch],
        [
            (lambda layer: layer(torch.randn(2, 5, 12, dtype=torch.float64)).shape == (2, 5, 12), "passed 3 of 3"),
            (lambda layer: mha_test(layer, T=1), "passed 3 of 3"),
            (lambda layer: mha_test(layer, atol=0.3), "1/√d_model"),
            (lambda layer: mha_test(layer, scale_width=12), "rejected a correct layer"),
            (_forgets_w_o, "rejected a correct layer"),
            (_own_forward, "build a reference"),
            (lambda layer: torch.equal(layer(_X), layer.forward(_X)), "passed 3 of 3"),
        ],
    ),
    check_one_token_prediction: (
        [{"split": False, "scale": False, "merge": False}],
        [
            # "a mixed-up split must show on any input": not with one token
            ({"split": True, "scale": False, "merge": False}, "the right split"),
            # "a wrong scale changes the weights": one key gets weight 1 whatever the scale
            ({"split": False, "scale": True, "merge": False}, "weight 1"),
            ({"split": True, "scale": True, "merge": True}, "lie the same way"),
            ({"split": False, "scale": False}, "expected a dict"),
        ],
    ),
}


def test_qk_circuit_does_not_give_the_prediction_away(capsys):
    # the circuit's check runs after the prediction's: it must not print the answer
    assert check_qk_circuit(circuit)
    out = capsys.readouterr().out
    assert "rank" not in out and "symmetric" not in out
    assert check_qk_prediction({"symmetric": False, "rank": 4})
    assert "rank 4 = D" in capsys.readouterr().out


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
