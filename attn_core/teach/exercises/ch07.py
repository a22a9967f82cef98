"""Checks for the exercises of chapter 7 (multi-head latent attention)."""

from __future__ import annotations

import operator
from typing import Callable

import torch

from ...layers.mla import MultiHeadLatentAttention
from ...layers.multihead import MultiHeadAttention
from ._common import compare, describe, report

__all__ = [
    "check_gqa_as_mla",
    "check_key_rank",
    "check_absorbed_output",
    "check_fold_prediction",
    "check_absorbed_chunk",
]


def _inputs(seed: int, *shape: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=g, dtype=torch.float64)


def _gqa_diagnosis(w_k, w_v, w_dkv, w_uk, H: int, D: int) -> str | None:
    """Which group's key each of the learner's heads reads, when it reads a wrong one (or None).

    Head ``i``'s key read-out, ``w_uk[i] @ w_dkv``, is compared with every group's key rows and
    value rows of the GQA layer: the typical slips are a head given another group, and the key
    read from the value projection.
    """
    n_g = w_k.shape[0] // D
    for i in range(H):
        read = w_uk[i].double() @ w_dkv.double()  # (D, d_model): head i's key read-out
        own = i // (H // n_g)
        for g in range(n_g):
            if g != own and torch.allclose(read, w_k[g * D : (g + 1) * D], atol=1e-10):
                return f"head {i} reads the key of group {g}; in the GQA layer it reads group {own}'s"
            if torch.allclose(read, w_v[g * D : (g + 1) * D], atol=1e-10):
                return f"head {i}'s key is read from the value projection"
    return None


def check_gqa_as_mla(fn: Callable[..., tuple]) -> bool:
    """Exercise 7.1: ``fn(w_k, w_v, n_heads, head_dim)`` writes a GQA layer's keys and values as MLA's.

    It returns ``(w_dkv, w_uk, w_uv)``: a down-projection and every head's up-projections
    (``k_i = w_uk[i] @ w_dkv @ h``, ``v_i = w_uv[i] @ w_dkv @ h``) with the smallest latent
    that reproduces the GQA layer exactly: the rank of ``[W_K; W_V]``, which for random
    weights is ``min(2·n_g·d_h, d_model)``. The check loads them into a real
    :class:`~attn_core.layers.mla.MultiHeadLatentAttention` (no RoPE path, no latent norm,
    the GQA layer's query and output projections) and compares its output with the GQA
    layer's, for two, three and one key/value groups (MQA) and for six (MHA, where
    ``2·n_g·d_h`` exceeds ``d_model``), then checks the latent's width.

    Shapes:
        w_k, w_v: ``(n_g·d_h, d_model)`` (``nn.Linear``'s layout); fn's output:
        ``w_dkv (d_c, d_model)``, ``w_uk (H, d_h, d_c)``, ``w_uv (H, d_h, d_c)``
    """
    name = "7.1 GQA as MLA"
    d, H, D = 24, 6, 4
    x = _inputs(710, 2, 7, d)  # (B, T, d_model)
    for n_g in (2, 3, 1, H):  # H groups: MHA, whose keys and values outnumber d_model
        with torch.random.fork_rng(devices=[]):  # building layers must not move the notebook's RNG
            torch.manual_seed(711 + n_g)
            gqa = MultiHeadAttention(d, H, n_kv_heads=n_g, head_dim=D, causal=True).double()
        w_k, w_v = gqa.k_proj.weight.detach().clone(), gqa.v_proj.weight.detach().clone()
        try:
            w_dkv, w_uk, w_uv = fn(w_k, w_v, H, D)
            d_c = w_dkv.shape[0]
            if w_dkv.shape != (d_c, d) or w_uk.shape != (H, D, d_c) or w_uv.shape != (H, D, d_c):
                shapes = tuple(tuple(w.shape) for w in (w_dkv, w_uk, w_uv))
                return report(name, False, f"n_g={n_g}: shapes {shapes}, expected ((d_c, {d}), ({H}, {D}, d_c) twice)")
            with torch.random.fork_rng(devices=[]):
                mla = MultiHeadLatentAttention(d, H, d_latent=d_c, head_dim=D, rope_dim=0, latent_norm=False)
            mla = mla.double()
            with torch.no_grad():
                mla.q_up.weight.copy_(gqa.q_proj.weight)
                mla.out_proj.weight.copy_(gqa.out_proj.weight)
                mla.kv_down.weight.copy_(w_dkv)
                mla.k_up.weight.copy_(w_uk.reshape(H * D, d_c))  # head-major rows, as the layer reads them
                mla.v_up.weight.copy_(w_uv.reshape(H * D, d_c))
                got, want = mla(x), gqa(x)
        except Exception as e:  # a learner's bug should print, not stop the notebook
            return report(name, False, f"n_g={n_g}: {type(e).__name__}: {e}")
        err = (got - want).abs().max().item()
        if not err <= 1e-10:
            why = _gqa_diagnosis(w_k, w_v, w_dkv, w_uk, H, D)
            return report(
                name, False, f"n_g={n_g}: " + (why or f"output max abs difference {err:.1e} (tolerance 1e-10)")
            )
        if d_c != min(2 * n_g * D, d):
            wider = f", wider than the {d}-wide input" if d_c > d else ""
            return report(
                name, False, f"n_g={n_g}: exact, but with a latent of width {d_c}{wider}; a narrower one is exact too"
            )
    return report(name, True, "1, 2, 3 and 6 groups: MLA's output equals GQA's within 1e-10")


def _content_keys(
    kind: str, d_model: int, n_heads: int, head_dim: int, n_kv_heads: int, d_latent: int, x
) -> torch.Tensor:
    """All heads' content keys of the tokens ``x`` side by side, from a freshly built layer.

    Shapes:
        x: ``(1, T, d_model)``; returns ``(T, n_heads·head_dim)``
    """
    if kind == "mla":
        layer = MultiHeadLatentAttention(d_model, n_heads, d_latent=d_latent, head_dim=head_dim).double()
        c_kv, _ = layer.latents(x)  # (1, T, d_c)
        return layer.k_up(c_kv)[0]  # (T, H*d_h)
    n_g = {"mha": n_heads, "gqa": n_kv_heads, "mqa": 1}[kind]
    layer = MultiHeadAttention(d_model, n_heads, n_kv_heads=n_g, head_dim=head_dim).double()
    k = layer.k_proj(x)[0].view(x.shape[1], n_g, head_dim)  # (T, n_g, d_h)
    # every query head sees its group's key: (T, n_g, d_h) -> (T, H, d_h) -> (T, H*d_h)
    return k.repeat_interleave(n_heads // n_g, dim=1).reshape(x.shape[1], -1)


def check_key_rank(fn: Callable[..., int]) -> bool:
    """Exercise 7.2: ``fn(kind, *, d_model, n_heads, head_dim, n_kv_heads, d_latent, n_tokens)``
    predicts the rank of the ``(n_tokens, n_heads·head_dim)`` matrix of every head's content
    keys, side by side, for ``kind`` in ``"mha"``, ``"gqa"``, ``"mqa"``, ``"mla"``.

    The reference is measured: a layer with random weights and random tokens, its keys
    computed by the layer's own projections, their rank by ``torch.linalg.matrix_rank`` in
    float64. The cases include fewer tokens than the latent, a model narrower than all its
    heads together, and a latent wider than all the heads' keys.
    """
    shapes = [
        dict(d_model=48, n_heads=4, head_dim=8, n_kv_heads=2, d_latent=12, n_tokens=64),
        dict(d_model=48, n_heads=4, head_dim=8, n_kv_heads=2, d_latent=12, n_tokens=10),
        dict(d_model=20, n_heads=4, head_dim=8, n_kv_heads=2, d_latent=24, n_tokens=64),
        dict(d_model=64, n_heads=2, head_dim=8, n_kv_heads=1, d_latent=40, n_tokens=64),
    ]
    cases = []
    with torch.random.fork_rng(devices=[]):  # building layers must not move the notebook's RNG
        torch.manual_seed(720)
        for args in shapes:
            x = torch.randn(1, args["n_tokens"], args["d_model"], dtype=torch.float64)
            layer_args = {k: v for k, v in args.items() if k != "n_tokens"}
            for kind in ("mha", "gqa", "mqa", "mla"):
                keys = _content_keys(kind, x=x, **layer_args)
                cases.append((dict(kind=kind, **args), int(torch.linalg.matrix_rank(keys.detach()))))
    name = "7.2 key rank"
    for kwargs, want in cases:
        try:
            got = fn(**kwargs)
        except Exception as e:  # a learner's bug should print, not stop the notebook
            return report(name, False, f"{kwargs['kind']}: {type(e).__name__}: {e}")
        if got != want:  # never the measured rank: it would answer by trial
            return report(name, False, f"{kwargs}: {_rank_hint(got, want, **kwargs)}")
    return report(name, True, f"all {len(cases)} layers match their measured ranks")


def _rank_hint(got, want: int, **kw) -> str:
    """Why a predicted rank is off, naming the limit it missed but not the measured rank."""
    try:
        got = operator.index(got)  # int, numpy or 0-d torch integer
    except TypeError:
        return f"predicted {describe(got)}, expected a whole number"
    if got == want:
        return "a whole number equal to the measured rank, but not an int"
    if got < want:
        return "predicted below the measured rank: one of your limits does not bind here"
    kind, heads = kw["kind"], kw["n_heads"]
    key_heads = {"mha": heads, "gqa": kw["n_kv_heads"], "mqa": 1, "mla": heads}[kind]
    limits = {
        "the number of tokens": kw["n_tokens"],
        "the input width d_model": kw["d_model"],
        "the width of the distinct key heads": key_heads * kw["head_dim"],
    }
    if kind == "mla":
        limits["the latent width"] = kw["d_latent"]
    missed = " and ".join(k for k, v in limits.items() if v == want)
    return f"predicted above the measured rank: a limit binds here that you missed, {missed}"


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


def _output_side_flops(d_c: int, batch: int, n_ctx: int, folded: bool) -> int:
    """FLOPs of one decoding step's output side at DeepSeek-V2's size.

    Counted by ``torch.utils.flop_counter`` on the ``meta`` device (shapes only, no memory):
    after the weighted sum of the cached latents (the same in both forms, not counted),
    either every head's ``W_UV`` then ``W_O``, or the folded ``W'``.
    """
    from torch.utils.flop_counter import FlopCounterMode

    H, d_v, d_model = 128, 128, 5120
    with torch.device("meta"):
        weights = torch.zeros(batch, H, 1, n_ctx)  # one new query per sequence
        cache = torch.zeros(batch, 1, n_ctx, d_c)  # the cached latents
        w_uv, w_o = torch.zeros(H, d_v, d_c), torch.zeros(d_model, H * d_v)
        w_folded = torch.zeros(d_model, H * d_c)
        o_lat = weights @ cache  # (batch, H, 1, d_c)
        with FlopCounterMode(display=False) as counter:
            if folded:  # (batch, H*d_c) @ (H*d_c, d_model)
                o_lat.transpose(1, 2).reshape(batch, H * d_c) @ w_folded.T
            else:  # (batch, H, 1, d_v), then (batch, H*d_v) @ (H*d_v, d_model)
                heads = torch.einsum("bhtc,hvc->bhtv", o_lat, w_uv)
                heads.transpose(1, 2).reshape(batch, H * d_v) @ w_o.T
    return counter.get_total_flops()


def check_fold_prediction(fn: Callable[[], tuple]) -> bool:
    """Exercise 7.3's prediction: ``fn()`` returns ``(ratio, ratio_large, largest_d_c)``.

    ``ratio``: the FLOPs per decoding step of the folded ``W'`` over those of ``W_UV`` then
    ``W_O`` at DeepSeek-V2's size (``d_model = 5120``, 128 heads, ``d_v = 128``,
    ``d_c = 512``), batch 8, context 4096 (above 1: folding costs more); ``ratio_large``:
    the same ratio at batch 64, context 32768; ``largest_d_c``: the largest latent width
    at which folding saves FLOPs (the other sizes kept). Every answer is measured with
    ``flop_counter`` on the ``meta`` device, not taken from a formula; the ratios are
    accepted within 1%. A wrong answer is named, never its value or the side it errs on:
    the numbers cannot be found by trial.
    """
    name = "7.3 fold prediction"
    try:
        answer = fn()
    except Exception as e:  # a learner's bug should print, not stop the notebook
        return report(name, False, f"{type(e).__name__}: {e}")
    if not (isinstance(answer, tuple) and len(answer) == 3):
        return report(name, False, f"fn() returned {describe(answer)}, expected three values")
    ratio, ratio_large, largest = answer
    counted = lambda b, n: _output_side_flops(512, b, n, True) / _output_side_flops(512, b, n, False)  # noqa: E731
    for got, (b, n), label, hint in (
        (ratio, (8, 4096), "ratio", "compare the multiply-adds per sequence of W' with those of W_UV then W_O"),
        (ratio_large, (64, 32768), "ratio_large", "on which of batch and context does each side's cost depend?"),
    ):
        if not isinstance(got, (int, float)) or isinstance(got, bool):
            return report(name, False, f"{label} is {describe(got)}, expected a number")
        want = counted(b, n)
        if not abs(got - want) <= 0.01 * want:
            return report(name, False, f"{label} is not the counted ratio (within 1%): {hint}")
    cheaper = lambda d_c: _output_side_flops(d_c, 8, 4096, True) < _output_side_flops(d_c, 8, 4096, False)  # noqa: E731
    # The difference folded - apart is affine in d_c: two counts place its root, two more confirm
    diff = lambda d_c: _output_side_flops(d_c, 8, 4096, True) - _output_side_flops(d_c, 8, 4096, False)  # noqa: E731
    d1, d512 = diff(1), diff(512)
    lo = int(1 - d1 * 511 / (d512 - d1) - 1e-9)  # the last whole d_c below the root
    while not cheaper(lo):  # (the root is exact: the loops only guard the algebra)
        lo -= 1
    while cheaper(lo + 1):
        lo += 1
    if largest != lo:
        return report(
            name,
            False,
            f"largest_d_c {largest!r} is wrong: set the two per-token costs equal and solve for d_c",
        )
    return report(name, True, f"ratio {counted(8, 4096):.2f} at both sizes; folding saves up to d_c = {lo}")


def check_absorbed_chunk(fn: Callable[..., torch.Tensor]) -> bool:
    """Exercise 7.4: ``fn(mla, x, cache)``, the learner's fix of a buggy chunk step.

    ``fn`` appends the chunk ``x`` to ``cache`` (a :class:`~attn_core.LatentKVCache` that may
    already hold earlier tokens) and returns the layer's absorbed output for it. The check feeds
    a sequence of 7 tokens in two chunks (4, then 3) to a fresh cache and compares both the
    outputs with the layer's one pass and the cache with the one the layer's own forward fills,
    for two shapes. A verdict says *where* it differs (which cached tensor, which chunk), never
    the fix.

    Shapes:
        x: ``(B, T, d_model)``; fn's output: ``(B, T, d_model)``
    """
    name = "7.4 absorbed chunk"
    for seed, (H, d_h, d_c, d_r) in enumerate(((2, 8, 6, 4), (3, 4, 10, 2)), start=740):
        with torch.random.fork_rng(devices=[]):  # building layers must not move the notebook's RNG
            torch.manual_seed(seed)
            mla = MultiHeadLatentAttention(H * d_h, H, d_latent=d_c, head_dim=d_h, rope_dim=d_r).double()
        x = _inputs(seed, 2, 7, H * d_h)  # (B, T, d_model)
        with torch.no_grad():
            ref_cache, cache = mla.make_cache(2, 7), mla.make_cache(2, 7)
            want = mla(x, kv_cache=ref_cache)  # (B, 7, d_model), one pass
            try:
                got = [fn(mla, x[:, :4], cache), fn(mla, x[:, 4:], cache)]
            except Exception as e:  # a learner's bug should print, not stop the notebook
                return report(name, False, f"{type(e).__name__}: {e}")
            if cache.size != 7:
                return report(name, False, f"the cache holds {cache.size} tokens after 7, not 7")
            empty = (x.new_zeros(2, 0, d_c), x.new_zeros(2, 0, d_r))
            stored, ref = cache.update(*empty), ref_cache.update(*empty)  # every cached token
        close = lambda a, b: torch.allclose(a.double(), b, atol=1e-10)
        if not close(stored[0], ref[0]):
            return report(name, False, "the cached latents c_KV differ from the layer's, in both chunks")
        if not close(stored[1], ref[1]):
            where = "from the second chunk on" if close(stored[1][:, :4], ref[1][:, :4]) else "everywhere"
            return report(name, False, f"the cached RoPE keys k_R differ from the layer's {where}")
        for chunk, (g, w) in enumerate(zip(got, (want[:, :4], want[:, 4:])), start=1):
            if not (isinstance(g, torch.Tensor) and g.shape == w.shape):
                return compare(name, g, w)
            if not close(g, w):
                return report(name, False, f"the cache is right; chunk {chunk}'s outputs are not")
    return report(name, True, "outputs and cache equal the layer's within 1e-10")
