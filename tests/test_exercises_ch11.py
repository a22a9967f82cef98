"""attn_core.exercises.ch11: exercise 11.3's check accepts a real causality test and refuses
the answers that pass without testing causality (a name test, a constant, a comparison with
a reference output, inputs at which the leaky version hides)."""

from __future__ import annotations

import torch

from attn_core import attention, centring_matrix
from attn_core.exercises import check_causality_test
from attn_core.exercises.ch11 import _causality_candidates


def _inputs(zero_queries=False, equal_gains=False):
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(1, 2, 6, 4, generator=g, dtype=torch.float64) for _ in range(3))  # (B, H, T, D)
    gains = tuple(1 + 0.3 * torch.randn(2, generator=g, dtype=torch.float64) for _ in range(3))
    if zero_queries:
        q = torch.zeros_like(q)
    if equal_gains:
        gains = (torch.ones(2, dtype=torch.float64),) * 3
    return q, k, v, gains


def _leaks(fn, **kwargs):
    """A genuine causality test: perturb every position after t, compare outputs up to t."""
    q, k, v, gains = _inputs(**kwargs)
    out = fn(q, k, v, *gains)
    for t in range(q.shape[-2] - 1):
        moved = [x.clone() for x in (q, k, v)]
        for x in moved:
            x[..., t + 1 :, :] += 1.0
        if not torch.allclose(out[..., : t + 1, :], fn(*moved, *gains)[..., : t + 1, :], atol=1e-10):
            return True
    return False


def _reference(q, k, v, alpha, beta, gamma):
    a, b, g = (t.view(-1, 1, 1) for t in (alpha, beta, gamma))
    return a * v + b * attention(q, k, v, is_causal=True) - g * (centring_matrix(q.shape[-2], dtype=v.dtype) @ v)


def _differs_from_reference(fn):
    """Not a causality test: flags anything whose output differs from the reference."""
    q, k, v, gains = _inputs()
    return not torch.allclose(fn(q, k, v, *gains), _reference(q, k, v, *gains), atol=1e-8)


def test_a_genuine_causality_test_passes(capsys):
    assert check_causality_test(_leaks)
    assert "correct: right on all 7 candidates" in capsys.readouterr().out


def test_the_name_loophole_fails(capsys):
    assert not check_causality_test(lambda fn: fn.__name__ == "leaky")
    assert "not yet" in capsys.readouterr().out


def test_candidates_look_alike_from_outside():
    candidates = [fn for fn, _, _ in _causality_candidates()]
    assert len({fn.__name__ for fn in candidates}) == 1
    assert len({fn.__qualname__ for fn in candidates}) == 1
    assert len({fn.__code__ for fn in candidates}) == 1
    kinds = [leaks for _, leaks, _ in _causality_candidates()]
    assert kinds.count(True) == 4 and kinds.count(False) == 3


def test_the_candidates_are_what_they_claim():
    for fn, leaks, what in _causality_candidates():
        assert _leaks(fn) == leaks, what


def test_answers_that_do_not_test_causality_fail(capsys):
    for wrong in (lambda fn: True, lambda fn: False, _differs_from_reference):
        assert not check_causality_test(wrong)
        assert "not yet" in capsys.readouterr().out
    # The inputs at which the leaky version hides (q = 0, β = γ): some leaks go unseen.
    assert not check_causality_test(lambda fn: _leaks(fn, zero_queries=True, equal_gains=True))
    assert "expected True" in capsys.readouterr().out


def test_a_stub_prints_not_yet(capsys):
    def stub(fn):
        raise NotImplementedError

    assert not check_causality_test(stub)
    assert "not yet: NotImplementedError" in capsys.readouterr().out
