"""attn_core.teach.exercises.ch09: the right and wrong answers of exercises 9.1 to 9.3 (ANSWERS, held to
the standard by tests/test_teach_exercises_standard.py)."""

from __future__ import annotations

import torch

from attn_core.teach.exercises.ch09 import check_placement_probe, check_rms_norm_backward, check_spread_at_rms


def _probe_parts(step, d):
    x = torch.randn(4, 8, d, generator=torch.Generator().manual_seed(0), dtype=torch.float64) * 3
    out = step(x)
    rms = lambda t: t.pow(2).mean(-1).sqrt()  # noqa: E731 - per token
    out_is_normed = torch.allclose(rms(out), torch.ones_like(rms(out)), atol=1e-4)
    inc = out - x
    inc_is_normed = torch.allclose(rms(inc), torch.ones_like(rms(inc)), atol=1e-4)
    # x + g(norm(x)): the increment does not change when x is scaled
    scale_free = torch.allclose(step(2 * x) - 2 * x, inc, atol=1e-5)
    return out_is_normed, inc_is_normed, scale_free


def right(step, d):
    out_is_normed, inc_is_normed, scale_free = _probe_parts(step, d)
    if out_is_normed:
        return "post"
    if inc_is_normed:
        return "sandwich" if scale_free else "olmo2"
    return "pre"


def no_scale_test(step, d):  # cannot tell sandwich from OLMo 2
    out_is_normed, inc_is_normed, _ = _probe_parts(step, d)
    return "post" if out_is_normed else "olmo2" if inc_is_normed else "pre"


def no_increment_test(step, d):  # cannot tell sandwich from pre, nor OLMo 2 from pre
    out_is_normed, _, scale_free = _probe_parts(step, d)
    return "post" if out_is_normed else "pre"


def scale_only(step, d):  # "the output is normalised" read from the mean, not the RMS
    x = torch.randn(4, 8, d, generator=torch.Generator().manual_seed(0), dtype=torch.float64) * 3
    out = step(x)
    if out.mean(-1).abs().max() < 1e-6:
        return "post"
    _, inc_is_normed, scale_free = _probe_parts(step, d)
    if inc_is_normed:
        return "sandwich" if scale_free else "olmo2"
    return "pre"


# ---- 9.2: RMSNorm's backward pass by hand ----


def rms_backward(x, w, g, eps, *, variant="right"):
    d = x.shape[-1]
    r = torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps)  # (..., 1)
    gw = g * w
    if variant == "right":
        return r * gw - r**3 * x * (gw * x).sum(-1, keepdim=True) / d
    if variant == "rms constant":
        return r * gw
    if variant == "no 1/d":
        return r * gw - r**3 * x * (gw * x).sum(-1, keepdim=True)
    if variant == "no gain":
        return r * g - r**3 * x * (g * x).sum(-1, keepdim=True) / d
    if variant == "eps outside":  # 1/(rms + eps) instead of 1/sqrt(ms + eps)
        rr = 1 / (x.pow(2).mean(-1, keepdim=True).sqrt() + eps)
        return rr * gw - rr**3 * x * (gw * x).sum(-1, keepdim=True) / d
    if variant == "float32":  # loses digits: not within 1e-8
        return rms_backward(x.float(), w.float(), g.float(), eps)
    raise ValueError(variant)


def _rms(variant):
    return lambda x, w, g, eps: rms_backward(x, w, g, eps, variant=variant)


ANSWERS = {
    check_placement_probe: (
        [right],
        [
            (no_scale_test, "sandwich (d=16) called 'olmo2'"),
            (no_increment_test, "olmo2 (d=16) called 'pre'"),
            (scale_only, "post (d=16) called 'pre'"),
            (lambda step, d: "pre", "post (d=16) called 'pre'"),
        ],
    ),
    check_rms_norm_backward: (
        [rms_backward],
        [
            (_rms("rms constant"), "term along x"),
            (_rms("no 1/d"), "is a mean"),
            (_rms("no gain"), "gain w"),
            (_rms("eps outside"), "max abs difference"),
            (_rms("float32"), "max abs difference"),
            (lambda x, w, g, eps: rms_backward(x, w, g, eps)[..., :4], "shape"),
        ],
    ),
    check_spread_at_rms: (
        [lambda t, eps: t * (eps / (1 - t * t)) ** 0.5, lambda t, eps: torch.tensor(t * (eps / (1 - t**2)) ** 0.5)],
        [
            (lambda t, eps: t * eps**0.5, "output RMS is 0.0995"),  # σ² dropped beside ε
            (lambda t, eps: eps**0.5, "output RMS is 0.7071"),  # σ = √ε: RMS 1/√2, any target
            (lambda t, eps: t * t * eps / (1 - t * t), "output RMS is"),  # σ² returned, not σ
            (lambda t, eps: t / (eps / (1 - t * t)) ** 0.5, "output RMS is"),  # inverted
            (lambda t, eps: -t * (eps / (1 - t * t)) ** 0.5, "positive number"),
        ],
    ),
}


def test_rms_norm_backward_says_when_the_gradient_is_scale_invariant(capsys):
    assert check_rms_norm_backward(rms_backward)
    assert "< 1e-10 at eps=1e-12" in capsys.readouterr().out
