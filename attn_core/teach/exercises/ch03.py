"""Checks for the exercises of chapter 3 (multi-head attention)."""

from __future__ import annotations

import copy
import math
from typing import Callable

import torch
from torch import nn

from ...layers.multihead import MultiHeadAttention
from ...ops.attention import attention as attn_core_attention
from ._ch03_heads import head_terms, random_layer, surgery
from ._ch03_pair import pair_models, pair_task_longer
from ._common import compare, report

__all__ = ["check_mha_test", "check_one_token_prediction", "pair_task_longer"]


def _inputs(seed: int, *shape: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=g, dtype=torch.float64)


#: The bugs of the candidate layers, in the words the check prints.
_BUGS = {
    "split": "heads split with view(B, H, T, D)",
    "scale": "scores scaled by 1/√d_model",
    "merge": "heads merged without the transpose",
}


class _Candidate(nn.Module):
    """A multi-head layer written out by hand, with one head-bookkeeping bug (``bug``) or none.

    Not an :class:`~attn_core.MultiHeadAttention`: its own ``forward`` is the code under
    test, so a test must build its reference from the weights (``q_proj``, ``k_proj``,
    ``v_proj``, ``out_proj``, no biases) or from ``torch.nn.MultiheadAttention``.

    Shapes:
        x: ``(B, T, d_model)``; output: ``(B, T, d_model)``
    """

    def __init__(self, d_model: int, n_heads: int, bug: str | None) -> None:
        super().__init__()
        self.d_model, self.n_heads, self._bug = d_model, n_heads, bug
        self.q_proj, self.k_proj, self.v_proj, self.out_proj = (
            nn.Linear(d_model, d_model, bias=False) for _ in range(4)
        )

    def forward(self, x: torch.Tensor, **kwargs) -> torch.Tensor:
        if kwargs:
            raise TypeError(f"these layers are called as layer(x) only, got {sorted(kwargs)}")
        B, T, width = x.shape
        H = self.n_heads
        D = width // H
        q, k, v = (p(x) for p in (self.q_proj, self.k_proj, self.v_proj))  # (B, T, H·D) each
        if self._bug == "split":  # right shape, heads and tokens mixed
            q, k, v = (t.view(B, H, T, D) for t in (q, k, v))
        else:
            q, k, v = (t.view(B, T, H, D).transpose(1, 2) for t in (q, k, v))  # (B, H, T, D)
        scale = 1 / math.sqrt(width if self._bug == "scale" else D)
        z = attn_core_attention(q, k, v, scale=scale)  # (B, H, T, D)
        if self._bug == "merge":  # (B, H, T, D) read as (B, T, H·D)
            z = z.contiguous().view(B, T, H * D)
        else:
            z = z.transpose(1, 2).reshape(B, T, H * D)
        return self.out_proj(z)  # (B, T, d_model)


def check_mha_test(fn: Callable[[nn.Module], bool]) -> bool:
    """Exercise 3.4: ``fn(layer)`` is a test: ``True`` when ``layer`` computes multi-head attention.

    The check hands ``fn`` two correct layers and three layers with one bug each (heads
    split with ``view(B, H, T, D)``, scores scaled by ``1/√d_model``, heads merged without
    the transpose), each float64, ``d_model = 12``, 3 heads, no biases, called as
    ``layer(x)``. They are not ``MultiHeadAttention``: their ``forward`` is what is tested.
    A good test accepts both correct layers and rejects every bug.

    Shapes:
        x: ``(B, T, d_model)``, chosen by the test; output ``(B, T, d_model)``
    """
    name = "3.4 a test for head bookkeeping"
    verdicts = {}
    for bug in (None, None, *_BUGS):
        with torch.random.fork_rng(devices=[]):  # neither the layers nor the test move the notebook's RNG
            torch.manual_seed(40 + len(verdicts))
            layer = _Candidate(12, 3, bug).double()
            try:
                verdict = fn(layer)
            except Exception as e:  # a learner's bug should print, not stop the notebook
                why = " (the layers are no MultiHeadAttention: build a reference)" * isinstance(e, AttributeError)
                return report(name, False, f"{type(e).__name__}: {e}{why}")
        if not isinstance(verdict, (bool, torch.Tensor)) or (
            isinstance(verdict, torch.Tensor) and verdict.numel() != 1
        ):
            return report(name, False, f"expected True or False, got {type(verdict).__name__}")
        verdicts[len(verdicts)] = (bug, bool(verdict))
    if not all(ok for bug, ok in verdicts.values() if bug is None):
        return report(name, False, "your test rejected a correct layer: check its reference")
    missed = [_BUGS[bug] for bug, ok in verdicts.values() if bug is not None and ok]
    if missed:
        hint = " (on one token, or by shape, all three look right)" if len(missed) == len(_BUGS) else ""
        return report(
            name, False, f"your test passed {len(missed)} of {len(_BUGS)} wrong layers: {'; '.join(missed)}{hint}"
        )
    return report(name, True, f"accepts 2 correct layers, rejects all {len(_BUGS)} bugs")


#: Why a test on one token cannot see each bug (the hint when a prediction says it can).
_ONE_TOKEN = {
    "split": "with T = 1, (B, 1, H·D) viewed as (B, H, 1, D) is the right split",
    "scale": "one key gets weight 1 whatever the scale",
    "merge": "(B, H, 1, D) and (B, 1, H, D) lie the same way in memory",
}


def check_one_token_prediction(prediction: dict) -> bool:
    """Exercise 3.4, first part: which bugs would a test on a one-token input see?

    ``prediction = {"split": bool, "scale": bool, "merge": bool}``, committed before the
    test is written: ``True`` where a comparison on one token (``T = 1``) with a right layer
    would tell the bug from it. Measured on the check's own candidate layers.

    Shapes:
        x: ``(B, 1, d_model)``
    """
    name = "3.4 one token, the prediction"
    why = _committed(prediction, tuple(_BUGS), (bool,) * len(_BUGS))
    if why:
        return report(name, False, why)
    x = _inputs(41, 2, 1, 12)  # (B, 1, d_model)
    with torch.random.fork_rng(devices=[]):  # the check must not move the notebook's RNG
        torch.manual_seed(40)
        right = _Candidate(12, 3, None).double()
    seen = {}
    for bug in _BUGS:
        buggy = copy.deepcopy(right)
        buggy._bug = bug
        with torch.no_grad():
            seen[bug] = not torch.allclose(buggy(x), right(x), atol=1e-12)
    wrong = [bug for bug in _BUGS if prediction[bug] != seen[bug]]
    if wrong:
        return report(
            name, False, "; ".join(f"{b}: " + ("one token shows it" if seen[b] else _ONE_TOKEN[b]) for b in wrong)
        )
    caught = [b for b in _BUGS if seen[b]]
    return report(name, True, f"one token shows {len(caught)} of {len(_BUGS)} bugs; test with T > 1")


# ---- issue 25: exercises on where a head lives in the weights ----

__all__ += ["check_ablate_head", "check_permute_heads", "check_qk_circuit", "check_qk_prediction"]
__all__ += ["check_wide_head_prediction", "check_ablate_prediction"]


_ABLATION_HINTS = {
    # With biases, zero query rows leave q = b_q for every query: every query gets the same
    # (not uniform) weights. Zero key rows leave k = b_k for every key: uniform weights.
    "q": "zero queries: every query is the query bias and looks the same way; the head still adds values",
    "k": "zero keys: every key is the key bias, so the weights are uniform; the head still adds values",
    "v": "the value bias is still there: every weighted average of it is that bias, times W_O^(h)",
    "out_rows": "that zeroes output features (rows of out_proj.weight), not head h's input columns",
    "out_cols_next": "that switched off the next head: head h owns columns h·D .. (h+1)·D - 1",
}


def check_ablate_head(fn: Callable[[MultiHeadAttention, int], MultiHeadAttention]) -> bool:
    """Exercise 3.1: ``fn(layer, h)`` returns a copy of ``layer`` with head ``h`` switched off.

    Switched off means: the copy's output is the layer's output minus head ``h``'s term
    ``z^(h) W_O^(h)`` of the sum over heads, and nothing else changes (the output bias,
    shared by all heads, stays). Only weights may change; ``layer`` itself must not. The
    layer has biases, all random.

    Shapes:
        x: ``(B, T, d_model)``; both outputs ``(B, T, d_model)``
    """
    name = "3.1 ablate a head"
    x = _inputs(34, 2, 6, 12)  # (B, T, d_model)
    for h in (0, 2):
        layer = random_layer(35 + h)
        before = {k: v.clone() for k, v in layer.state_dict().items()}
        try:
            got_layer = fn(layer, h)
            if not isinstance(got_layer, MultiHeadAttention):
                return report(name, False, f"expected an attn_core.MultiHeadAttention, got {type(got_layer).__name__}")
            with torch.no_grad():
                got = got_layer(x)
        except Exception as e:  # a learner's bug should print, not stop the notebook
            return report(name, False, f"{type(e).__name__}: {e}")
        if any(not torch.equal(v, layer.state_dict()[k]) for k, v in before.items()):
            return report(name, False, "the layer itself was modified: change a copy (copy.deepcopy)")
        with torch.no_grad():
            expected = layer(x) - head_terms(layer, x)[:, h]  # (B, T, d_model)
            if not ((got - expected).abs().max() <= 1e-10):
                for how, hint in _ABLATION_HINTS.items():
                    if torch.allclose(got, surgery(layer, h, how)(x), atol=1e-10):
                        return report(name, False, f"head {h}: {hint}")
                return compare(f"{name} (head {h})", got, expected, atol=1e-10)
    return report(name, True, "heads 0 and 2 removed exactly, output bias kept")


#: The ways of exercise 3.1's prediction: zero head h's rows of one projection (``surgery``).
_ABLATE_WAYS = {"q_proj": "q", "k_proj": "k", "v_proj": "v", "v_proj, no biases": "v"}


def check_ablate_prediction(prediction: dict) -> bool:
    """Exercise 3.1, first part: which zeroed rows would switch head ``h`` off?

    ``prediction = {"q_proj": bool, "k_proj": bool, "v_proj": bool, "v_proj, no biases": bool}``,
    committed before the function is written: ``True`` where zeroing head ``h``'s rows of that
    projection's weight (in a layer with biases; the last key: without) removes exactly the
    head's term ``z^(h) W_O^(h)``. Measured on a float64 layer of 3 heads, all weights random.

    Shapes:
        x: ``(B, T, d_model)``
    """
    name = "3.1 ablate a head, the prediction"
    why = _committed(prediction, tuple(_ABLATE_WAYS), (bool,) * len(_ABLATE_WAYS))
    if why:
        return report(name, False, why)
    x = _inputs(34, 2, 6, 12)  # (B, T, d_model)
    seen = {}
    for key, how in _ABLATE_WAYS.items():
        layer = random_layer(36, bias="no biases" not in key)
        with torch.no_grad():
            expected = layer(x) - head_terms(layer, x)[:, 1]  # (B, T, d_model)
            seen[key] = torch.allclose(surgery(layer, 1, how)(x), expected, atol=1e-10)
    wrong = [key for key in _ABLATE_WAYS if prediction[key] != seen[key]]
    if wrong:
        hints = {"v_proj, no biases": "without biases, zero values make z^(h) = 0: the term is gone"}
        why = "; ".join(f"{k}: " + (hints.get(k) or _ABLATION_HINTS[_ABLATE_WAYS[k]]) for k in wrong)
        return report(name, False, why)
    return report(name, True, "with biases: none of Q, K, V; without: V")


def check_permute_heads(fn: Callable[[MultiHeadAttention, list], MultiHeadAttention]) -> bool:
    """Exercise 3.2: ``fn(layer, order)`` returns a copy whose head ``i`` is ``layer``'s head ``order[i]``.

    The copy must compute the same output as ``layer`` (a reordering of heads is a
    symmetry of the layer), and its per-head attention maps must be the layer's maps in
    the new order. The layer has biases, all random.

    Shapes:
        x: ``(B, T, d_model)``; weights ``(B, H, T, T)``
    """
    name = "3.2 reorder the heads"
    x = _inputs(36, 2, 6, 16)  # (B, T, d_model)
    layer = random_layer(37, d_model=16, n_heads=4)
    with torch.no_grad():
        want_out, want_w = layer(x, return_weights=True)  # (B, T, d), (B, H, T, T)
    for order in ([2, 0, 3, 1], [1, 0, 2, 3]):
        try:
            got_layer = fn(layer, list(order))
            if not isinstance(got_layer, MultiHeadAttention):
                return report(name, False, f"expected an attn_core.MultiHeadAttention, got {type(got_layer).__name__}")
            with torch.no_grad():
                got_out, got_w = got_layer(x, return_weights=True)
        except Exception as e:  # a learner's bug should print, not stop the notebook
            return report(name, False, f"{type(e).__name__}: {e}")
        if not torch.allclose(got_w, want_w[:, order], atol=1e-10):
            if torch.allclose(got_w, want_w, atol=1e-10):
                return report(name, False, f"order {order}: the heads' maps did not move")
            inverse = torch.argsort(torch.tensor(order)).tolist()
            if torch.allclose(got_w, want_w[:, inverse], atol=1e-10):
                return report(name, False, f"order {order}: the inverse order (new head order[i] = old head i)")
            return report(name, False, f"order {order}: the maps are not the old heads' maps in the new order")
        if not torch.allclose(got_out, want_out, atol=1e-10):
            return report(
                name, False, f"order {order}: the maps moved but the output changed: W_O must follow its heads"
            )
    return report(name, True, "2 orders: same output, maps reordered")


def check_qk_circuit(fn: Callable[[MultiHeadAttention, int], torch.Tensor]) -> bool:
    """Exercise 3.3: ``fn(layer, h)`` returns head ``h``'s QK circuit, a ``(d_model, d_model)`` matrix ``M``.

    ``M`` is defined by ``weights_h = softmax(X M Xᵀ)`` for every input ``X`` (the layer has
    no biases): the scale is inside ``M``. The check compares ``softmax(X M Xᵀ)`` with the
    layer's own per-head weights, and ``M`` with the exact matrix.

    Shapes:
        X: ``(T, d_model)``; M: ``(d_model, d_model)``, of rank at most ``D``
    """
    name = "3.3 QK circuit"
    layer = random_layer(38, bias=False)
    H, d = layer.n_heads, 12
    D = d // H
    x = _inputs(39, 1, 7, d)  # (B, T, d_model)
    with torch.no_grad():
        _, weights = layer(x, return_weights=True)  # (B, H, T, T)
    for h in (1, 2):
        try:
            M = fn(layer, h)
        except Exception as e:  # a learner's bug should print, not stop the notebook
            return report(name, False, f"{type(e).__name__}: {e}")
        if not isinstance(M, torch.Tensor) or M.shape != (d, d):
            shape = tuple(M.shape) if isinstance(M, torch.Tensor) else type(M).__name__
            return report(name, False, f"head {h}: expected a ({d}, {d}) tensor, got {shape}")
        M = M.detach().double()
        rows = slice(h * D, (h + 1) * D)
        w_q, w_k = layer.q_proj.weight[rows].detach(), layer.k_proj.weight[rows].detach()  # (D, d) each
        exact = w_q.T @ w_k / math.sqrt(D)  # (d, d)
        if not torch.allclose(M, exact, atol=1e-10):
            if torch.allclose(M, exact.T, atol=1e-10):
                hint = "transposed: query side on the left, X M Xᵀ[i, j] = x_i M x_jᵀ"
            elif torch.allclose(M, (exact + exact.T) / 2, atol=1e-10):
                hint = "symmetrised: the query and key projections differ, so M need not equal Mᵀ"
            elif torch.allclose(M, exact * math.sqrt(D), atol=1e-10):
                hint = "the 1/√D scale is missing"
            elif torch.allclose(M, exact * math.sqrt(D / d), atol=1e-10):
                hint = "scaled by 1/√d_model instead of 1/√D"
            else:
                cols = slice(h * D, (h + 1) * D)
                wrong = layer.q_proj.weight[:, cols].detach() @ layer.k_proj.weight[:, cols].detach().T / math.sqrt(D)
                hint = (
                    "head h's slice is rows h·D..(h+1)·D-1 of nn.Linear's (out, in) weight"
                    if torch.allclose(M, wrong, atol=1e-10)
                    else "not the head's circuit"
                )
            return report(name, False, f"head {h}: {hint}")
        got_w = torch.softmax(x[0] @ M @ x[0].T, dim=-1)  # (T, T)
        if not torch.allclose(got_w, weights[0, h], atol=1e-10):  # pragma: no cover - follows from `exact`
            return report(name, False, f"head {h}: softmax(X M Xᵀ) is not the head's weights")
    return report(name, True, f"heads 1, 2: softmax(X M Xᵀ) is the head's map, M {d}x{d}")


def _committed(prediction: object, keys: tuple[str, ...], kinds: tuple[type, ...]) -> str | None:
    """Why ``prediction`` is not a filled-in dict of ``keys`` (values of ``kinds``), or None."""
    if not isinstance(prediction, dict) or set(prediction) != set(keys):
        return f"expected a dict with the keys {list(keys)}, got {prediction!r:.60}"
    for key, kind in zip(keys, kinds):
        if type(prediction[key]) is not kind:  # bool is not int here: True is no rank
            return f"{key!r}: expected a {kind.__name__}, got {prediction[key]!r}"
    return None


def check_qk_prediction(prediction: dict) -> bool:
    """Exercise 3.3, first part: the reader's prediction about the QK circuit, made before any check prints it.

    ``prediction = {"symmetric": bool, "rank": int}`` for head 1 of the layer
    :func:`check_qk_circuit` uses (``d_model = 12``, 3 heads, no biases). Compared with the
    exact matrix ``W_Q^(h)ᵀ W_K^(h) / √D``.
    """
    name = "3.3 QK circuit, the prediction"
    why = _committed(prediction, ("symmetric", "rank"), (bool, int))
    if why:
        return report(name, False, why)
    layer = random_layer(38, bias=False)
    D = layer.d_model // layer.n_heads
    rows = slice(D, 2 * D)  # head 1
    exact = layer.q_proj.weight[rows].detach().T @ layer.k_proj.weight[rows].detach() / math.sqrt(D)
    rank = int(torch.linalg.matrix_rank(exact).item())
    symmetric = bool(torch.allclose(exact, exact.T, atol=1e-10))
    if prediction["symmetric"] != symmetric:
        gap = (exact - exact.T).abs().max().item()
        return report(name, False, f"symmetric: M - Mᵀ reaches {gap:.2f}; W_Q and W_K differ")
    if prediction["rank"] != rank:
        return report(
            name, False, f"rank {prediction['rank']}: M is {layer.d_model}x{layer.d_model} but a product through D"
        )
    return report(name, True, f"not symmetric, rank {rank} = D of a 12x12 matrix")


def check_wide_head_prediction(prediction: dict) -> bool:
    """Exercise 3.5: predict what one head of width 32 does on the pair task with 4x the steps, then train it.

    ``prediction = {"splits its weight": bool, "nearer the four heads' 80-step loss": bool}``:
    after 320 steps instead of 80, does the head still split its weight between t-1 and t-2
    (its larger mean weight below 0.75), and is its test loss (mean of 2 seeds) nearer the
    four heads' 0.02 at 80 steps than its own 0.13 at 80 steps (below 0.075, the midpoint)? The check trains the model
    (2 seeds, once per session); :func:`pair_task_longer` has the numbers,
    and the four heads' for comparison.
    """
    name = "3.5 wide head, longer"
    keys = ("splits its weight", "nearer the four heads' 80-step loss")
    why = _committed(prediction, keys, (bool, bool))
    if why:
        return report(name, False, why)
    loss, largest = pair_models(1)["loss"], pair_models(1)["largest"]
    measured = {keys[0]: largest < 0.75, keys[1]: loss < 0.075}
    # categories, not digits: trained float32 weights differ in their last digits by CPU
    seen = f"weight {'<' if measured[keys[0]] else '>'} 0.75, loss {'<' if measured[keys[1]] else '>'} 0.075"
    wrong = [key for key in keys if prediction[key] != measured[key]]
    if wrong:
        return report(name, False, f"{', '.join(repr(k) for k in wrong)} wrong: {seen}")
    return report(name, True, f"{seen}: still splits, gets low")
