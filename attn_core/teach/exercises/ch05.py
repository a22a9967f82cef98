"""Checks for the exercises of chapter 5 (multi-query attention)."""

from __future__ import annotations

import contextlib
import io
from typing import Callable

import torch
import torch.nn.functional as F

from ...layers.multihead import MultiHeadAttention
from ._common import report

__all__ = [
    "check_mqa_prediction",
    "check_mqa_test",
    "check_limit_prediction",
    "check_largest_step_ratio",
    "check_equal_size_d_ff",
]


# 5.1: a test of a multi-query attention function, run against right implementations (it
# must pass them all) and against implementations with one bug each (it must reject each).


def _broadcast(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """Right: the key and value keep a head axis of size 1 and broadcast over the heads."""
    w = torch.softmax(q @ k.transpose(-2, -1) / q.shape[-1] ** 0.5, dim=-1)  # (B, H, T, T)
    return w @ v  # (B, H, T, D)


def _expanded_sdpa(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """Right: PyTorch's attention with the shared head expanded to every query head."""
    H = q.shape[1]
    return F.scaled_dot_product_attention(q, k.expand(-1, H, -1, -1), v.expand(-1, H, -1, -1))


def _heads_as_rows(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """Right: every head's queries as rows of one matrix product (another rounding order)."""
    B, H, T, D = q.shape
    rows = q.reshape(B, 1, H * T, D)  # (B, 1, H·T, D)
    w = torch.softmax(rows @ k.transpose(-2, -1) * D**-0.5, dim=-1)  # (B, 1, H·T, T)
    return (w @ v).view(B, H, T, D)


def _dropped_head_axis(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """Bug: the key loses its head axis, so broadcasting meets the batch with the heads."""
    k, v = k.squeeze(1), v.squeeze(1)  # (B, T, D): right only when B = 1
    w = torch.softmax(q @ k.transpose(-2, -1) / q.shape[-1] ** 0.5, dim=-1)
    return w @ v


def _softmax_over_queries(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """Bug: the softmax normalises over the queries instead of the keys."""
    return torch.softmax(q @ k.transpose(-2, -1) / q.shape[-1] ** 0.5, dim=-2) @ v


def _first_head_only(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """Bug: every head uses head 0's queries, as if the queries were shared too."""
    return _broadcast(q[:, :1], k, v).expand_as(q)


def _keys_as_values(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """Bug: the weights mix the keys instead of the values."""
    return _broadcast(q, k, k)


_RIGHT = {
    "broadcast": _broadcast,  # a head axis of size 1
    "expanded SDPA": _expanded_sdpa,
    "heads as rows": _heads_as_rows,
}
_BUGS = {  # short name: (what it does, the implementation)
    "axis": ("drops the key's head axis (right at B = 1)", _dropped_head_axis),
    "softmax": ("takes the softmax over the queries", _softmax_over_queries),
    "head0": ("gives every head head 0's queries", _first_head_only),
    "values": ("mixes the keys, not the values", _keys_as_values),
}


def _missed_at(B: int, H: int) -> set[str]:
    """The bugs that a right float64 test with ``B`` sequences and ``H`` heads lets through."""
    g = torch.Generator().manual_seed(0)
    q = torch.randn(B, H, 5, 8, generator=g, dtype=torch.float64)  # (B, H, T, D)
    k, v = torch.randn(2, B, 1, 5, 8, generator=g, dtype=torch.float64)  # (B, 1, T, D)
    want = _expanded_sdpa(q, k, v)
    missed = set()
    for short, (_, attention) in _BUGS.items():
        try:
            torch.testing.assert_close(attention(q, k, v), want)
        except Exception:  # a wrong shape or wrong values: caught
            continue
        missed.add(short)
    return missed


def _verdict(test: Callable, attention: Callable) -> Exception | None:
    """Run the learner's test on one implementation: the exception it raised, or None."""
    with torch.random.fork_rng(devices=[]), contextlib.redirect_stdout(io.StringIO()):
        try:
            test(attention)
        except Exception as e:  # a rejection is an exception: AssertionError, or a failed op
            return e
    return None


def check_mqa_prediction(predicted: dict) -> bool:
    """Exercise 5.1, the prediction: which bugs a right test misses with one sequence or one head.

    ``predicted`` maps ``"B=1"`` (one sequence, several heads) and ``"H=1"`` (one head,
    several sequences) to sets of the bugs' short names (``"axis"``, ``"softmax"``,
    ``"head0"``, ``"values"``). The check runs a right float64 test at those
    shapes on each bug and compares what got through.
    """
    name = "5.1 prediction"
    if not isinstance(predicted, dict) or set(predicted) != {"B=1", "H=1"}:
        return report(name, False, f'give a dict with the keys "B=1" and "H=1", got {predicted!r}')
    for shape, bugs in predicted.items():
        if not isinstance(bugs, (set, frozenset)) or not set(bugs) <= set(_BUGS):
            return report(name, False, f"{shape}: a set of the bug names above, not {bugs!r}")
    found = {"B=1": _missed_at(1, 4), "H=1": _missed_at(3, 1)}
    for shape in ("B=1", "H=1"):
        if set(predicted[shape]) != found[shape]:
            return report(
                name, False, f"at {shape} a right test misses {sorted(found[shape])}, not {sorted(predicted[shape])}"
            )
    return report(name, True, f"at B=1 a right test misses {sorted(found['B=1'])}, at H=1 {sorted(found['H=1'])}")


def check_mqa_test(test: Callable[[Callable], object]) -> bool:
    """Exercise 5.1: ``test(attention)`` raises if ``attention(q, k, v)`` is wrong multi-query attention.

    ``attention`` takes queries ``(B, H, T, D)`` and one key and one value head ``(B, 1, T, D)``
    and returns ``(B, H, T, D)`` (no mask). The test must pass three right implementations
    (they round differently) and reject, by raising, each of four with one bug.
    """
    name = "5.1 test for MQA"
    for label, attention in _RIGHT.items():
        error = _verdict(test, attention)
        if error is not None:
            return report(name, False, f"rejects a right attention ({label}): {type(error).__name__}")
    for label, attention in _BUGS.values():
        if _verdict(test, attention) is None:
            return report(name, False, f"passes one that {label}")
    return report(name, True, f"passes {len(_RIGHT)} right implementations, rejects {len(_BUGS)} bugs")


# 5.2: the largest ratio of two decoding steps' bounds at the same batch, counted on meta
# tensors.


def _counted(B: int, P: int, L: int, H_kv: int, D: int, T: int) -> tuple[int, int, int]:
    """The weights' FLOPs and bytes, and the caches' bytes, of one step of ``B`` sequences.

    Counted by PyTorch on meta tensors (no memory, no arithmetic): ``P`` float16 weights
    that every sequence's new token multiplies, and every layer's float16 keys and values
    of ``T`` positions per sequence.
    """
    from torch.utils.flop_counter import FlopCounterMode

    with torch.device("meta"):
        w = torch.empty(P, 1, dtype=torch.float16)  # the weights: P elements, read once
        x = torch.empty(B, 1, dtype=torch.float16)  # (B, 1): one new token per sequence
        k = v = torch.empty(B, H_kv, T, D, dtype=torch.float16)  # (B, H_kv, T, D): a layer
        with FlopCounterMode(display=False) as counter:
            F.linear(x, w)  # (B, P): a multiply and an add per weight and sequence
    return counter.get_total_flops(), w.nbytes, L * (k.nbytes + v.nbytes)


def _first_batch(holds: Callable[[int], bool]) -> int:
    """The smallest batch in 1 .. 2**24 at which ``holds`` (true from there on) is true."""
    low, high = 1, 2**24
    while low < high:
        middle = (low + high) // 2
        low, high = (low, middle) if holds(middle) else (middle + 1, high)
    return low


def _step(B: int, P: int, L: int, H_kv: int, D: int, T: int, ridge: float) -> float:
    """Roofline bound on one step, in bytes at the chip's bandwidth, the parts in sequence.

    The weights take the longer of their reading and their arithmetic (FLOPs over
    ``ridge``); the caches are read (attention, at ``H / H_kv`` FLOPs per byte, stays
    below the ridge).
    """
    flops, weight_bytes, cache_bytes = _counted(B, P, L, H_kv, D, T)
    return max(weight_bytes, flops / ridge) + cache_bytes


def _largest(P: int, L: int, H: int, H_kv: int, D: int, T: int, ridge: float) -> tuple[int, float]:
    """Counted: the first batch of the largest same-batch ratio, ``H`` K/V heads over ``H_kv``."""
    # below the ridge the weights' time is fixed and the caches' grows: the ratio rises;
    # from the first compute-bound batch on, both parts grow in proportion to B
    batch = _first_batch(lambda B: _counted(B, P, L, H_kv, D, T)[0] >= ridge * 2 * P)
    return batch, _step(batch, P, L, H, D, T, ridge) / _step(batch, P, L, H_kv, D, T, ridge)


def _seven_b(n_kv_heads: int) -> int:
    """The weights a decoding step of a LLaMA-7B-shaped model reads: all but the embedding."""
    from ...config import DecoderConfig
    from ...model.params import parameter_breakdown

    shape = dict(vocab_size=32000, n_layers=32, d_model=4096, n_heads=32, max_len=4096)
    counts = parameter_breakdown(DecoderConfig.llama_like(**shape, n_kv_heads=n_kv_heads, d_ff=11008))
    return sum(counts.values()) - counts["embedding"]


_H100_RIDGE = 989e12 / 3.35e12  # dense bf16 FLOP/s over memory bytes/s


def check_limit_prediction(predicted: dict) -> bool:
    """Exercise 5.2, the prediction: the largest same-batch step ratio, MHA over MQA.

    ``predicted`` maps ``1024`` and ``32768`` (cached tokens per sequence) to a number: the
    largest ratio, over all batches, of the roofline bounds on one decoding step of the
    7B-shaped MHA model and of an MQA model that reads as many weights (the wide MLP), on
    an H100. Right within 5% of the value counted on meta tensors.
    """
    name = "5.2 prediction"
    if not isinstance(predicted, dict) or set(predicted) != {1024, 32768}:
        return report(name, False, f"give a dict with the keys 1024 and 32768, got {predicted!r}")
    counted = {}
    for context in (1024, 32768):
        answer = predicted[context]
        if isinstance(answer, bool) or not isinstance(answer, (int, float)):
            return report(name, False, f"{context}: a number, not {answer!r}")
        counted[context] = _largest(_seven_b(32), 32, 32, 1, 128, context, _H100_RIDGE)[1]
        if abs(answer - counted[context]) > 0.05 * counted[context]:
            return report(name, False, f"at {context} tokens: {answer!r} is not within 5%")
    values = ", ".join(f"{c} tokens {r:.1f}" for c, r in counted.items())
    return report(name, True, f"the largest ratios: {values}")


def check_largest_step_ratio(fn: Callable[..., tuple[int, float]]) -> bool:
    """Exercise 5.2: ``fn(n_params, n_layers, n_heads, n_kv_heads, head_dim, context, ridge)``.

    Returns the smallest batch at which the ratio of two decoding steps' roofline bounds at
    the same batch reaches its largest value, and that value: a model with ``n_heads``
    key/value heads over one with ``n_kv_heads``, both reading ``n_params`` float16 weights
    (a multiply and an add per weight and sequence) and float16 caches (keys and values of
    ``context`` positions per sequence, in every layer), on a chip of ``ridge`` FLOPs per
    byte; each step is the weights' longer time (reading or arithmetic) plus the caches'
    reading. Compared with the ratio found by counting FLOPs (``FlopCounterMode``) and
    bytes on meta tensors of those sizes (the value within a relative 1e-9).
    """
    name = "5.2 largest same-batch ratio"
    cases = (  # n_params, n_layers, n_heads, n_kv_heads, head_dim, context, ridge
        (640_000, 4, 8, 2, 16, 128, _H100_RIDGE),
        (320_000, 3, 8, 1, 16, 256, 100.0),  # a ridge that is a whole number
        (_seven_b(32), 32, 32, 1, 128, 4096, _H100_RIDGE),  # the page's wide MLP
    )
    for P, L, H, H_kv, D, T, ridge in cases:
        want = _largest(P, L, H, H_kv, D, T, ridge)
        try:
            got = tuple(fn(P, L, H, H_kv, D, T, ridge))
            same = got[0] == want[0] and isinstance(got[0], int)
            same = same and abs(got[1] - want[1]) <= 1e-9 * want[1]
        except Exception as e:  # a learner's bug should print, not stop the notebook
            return report(name, False, f"{type(e).__name__}: {e}")
        if same:
            continue
        near = lambda a, b: isinstance(a, (int, float)) and abs(a - b) <= 1e-6 * abs(b)  # noqa: E731
        cache = lambda n, L=L, T=T, D=D: 4 * L * n * T * D  # float16 K and V, every layer  # noqa: E731
        hints = (  # the typical slips, recognised by their values
            (near(got[1], H / H_kv), "the weights' arithmetic grows with the batch too"),
            (got[0] == int(ridge) and int(ridge) < ridge, "compute-bound from the ridge on, rounded up"),
            (near(got[1], (P / ridge + cache(H)) / (P / ridge + cache(H_kv))), "a multiply and an add"),
            (near(got[1], (4 * P / ridge + cache(H)) / (4 * P / ridge + cache(H_kv))), "keys and values"),
            (near(got[1], (2 * P / ridge + cache(H) / L) / (2 * P / ridge + cache(H_kv) / L)), "every layer"),
        )
        hint = next((f" ({why})" for slip, why in hints if slip), "")
        return report(
            name,
            False,
            f"n_params={P:,}, L={L}, H={H}, H_kv={H_kv}, D={D}, T={T}, ridge={ridge:g}: "
            f"got {got!r}, counted ({want[0]}, {want[1]:.4g}){hint}",
        )
    return report(name, True, f"equals the counted batch and ratio, {len(cases)} settings")


def check_equal_size_d_ff(fn: Callable[..., int]) -> bool:
    """Exercise 5.3: ``fn(d_model, n_heads, d_ff, n_encoder_layers, n_decoder_layers)``.

    The feed-forward width at which a Transformer whose attention layers are all multi-query
    has as many parameters as the same model with multi-head attention and width ``d_ff``,
    rounded to the nearest unit. An encoder layer has self-attention and an MLP; a decoder
    layer of an encoder-decoder also has cross-attention; with no encoder the decoder has no
    cross-attention. The MLPs have two bias-free matrices. The weights are counted from real
    layers on the ``meta`` device.
    """
    name = "5.3 feed-forward width at equal size"
    cases = (  # d_model, n_heads, d_ff, encoder layers, decoder layers
        (1024, 8, 4096, 6, 6),  # Shazeer's encoder-decoder
        (1024, 8, 4096, 0, 12),  # a decoder only: no cross-attention
        (48, 3, 192, 2, 5),  # rounding
        (64, 8, 256, 3, 1),
    )
    for case in cases:
        d, H, d_ff, n_enc, n_dec = case
        n_att = n_enc + n_dec * (2 if n_enc else 1)  # self-attention, and cross-attention
        n_mlp = n_enc + n_dec
        with torch.device("meta"):  # no memory: the shapes are enough to count
            mha, mqa = MultiHeadAttention(d, H), MultiHeadAttention(d, H, n_kv_heads=1)
            unit = torch.nn.Sequential(torch.nn.Linear(d, 1, bias=False), torch.nn.Linear(1, d, bias=False))
        count = lambda module: sum(p.numel() for p in module.parameters())  # noqa: E731
        per_layer = count(mha) - count(mqa)
        want = d_ff + round(n_att * per_layer / (n_mlp * count(unit)))
        try:
            got = fn(d, H, d_ff, n_enc, n_dec)
        except Exception as e:  # a learner's bug should print, not stop the notebook
            return report(name, False, f"{type(e).__name__}: {e}")
        if got == want and isinstance(got, int):
            continue
        D = d // H
        dropped = n_att * per_layer
        hints = (  # the typical slips, by their values (a list: two may coincide)
            (d_ff + round(n_mlp * per_layer / (n_mlp * 2 * d)), "the cross-attention layers lose theirs too"),
            (d_ff + round((n_enc + 2 * n_dec) * per_layer / (n_mlp * 2 * d)), "a decoder alone has no cross-attention"),
            (d_ff + round(dropped / 2 / (n_mlp * 2 * d)), "both the key and the value projections shrink"),
            (d_ff + round(dropped / (n_mlp * d)), "a hidden unit has weights in both matrices"),
            (d_ff + round(n_att * 2 * d * (d - H) / (n_mlp * 2 * d)), "the one K/V head keeps head_dim outputs"),
            (d_ff + round(dropped / (2 * d)), "the saved weights spread over every MLP layer"),
            (d_ff + dropped // (n_mlp * 2 * d), "round to the nearest unit"),
            (round(dropped / (n_mlp * 2 * d)), "the width is d_ff plus the added units"),
        )
        hint = next((f" ({why})" for value, why in hints if got == value and value != want), "")
        return report(
            name,
            False,
            f"d_model={d}, n_heads={H} (head_dim {D}), d_ff={d_ff}, {n_enc} encoder and "
            f"{n_dec} decoder layers: got {got!r}, counted {want:,}{hint}",
        )
    return report(name, True, f"equals the counted width in {len(cases)} settings")


def check_equal_size_prediction(predicted: dict) -> bool:
    """Exercise 5.3, the prediction: the attention layers and MLPs of Shazeer's 6 + 6 model.

    In his encoder-decoder of 6 + 6 layers: how many attention layers lose their key/value
    heads, and over how many MLPs their weights are spread. ``predicted`` maps
    ``"attention"`` and ``"mlp"`` to whole numbers. Counted: every layer's self-attention,
    and the cross-attention of each decoder layer; one MLP per layer.
    """
    name = "5.3 prediction"
    if not isinstance(predicted, dict) or set(predicted) != {"attention", "mlp"}:
        return report(name, False, f'give a dict with the keys "attention" and "mlp", got {predicted!r}')
    n_enc = n_dec = 6
    counted = {"attention": n_enc + 2 * n_dec, "mlp": n_enc + n_dec}
    for key, want in counted.items():
        answer = predicted[key]
        if isinstance(answer, bool) or not isinstance(answer, int):
            return report(name, False, f"{key}: a whole number, not {answer!r}")
        if answer != want:
            why = {
                "attention": "count the decoder's cross-attention too"
                if answer < want
                else "the encoder has no cross-attention",
                "mlp": "one MLP per layer, encoder and decoder",
            }[key]
            return report(name, False, f"{key}: {answer} is not the count ({why})")
    return report(name, True, f"{counted['attention']} attention layers for {counted['mlp']} MLPs")
