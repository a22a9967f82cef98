"""attn_core.teach.heads: each score on hand-made maps, ablation = zeroed projection columns, bad input."""

from __future__ import annotations

import pytest
import torch

from attn_core import DecoderConfig, DecoderLM, causal_mask
from attn_core.teach import heads
from attn_core.teach.heads import ablate_heads, score_heads


def _tiny(seed: int = 0) -> DecoderLM:
    torch.manual_seed(seed)
    return DecoderLM(DecoderConfig.gpt2_like(vocab_size=256, n_layers=2, d_model=32, n_heads=4, max_len=64)).double()


def _uniform(T: int) -> torch.Tensor:
    m = causal_mask(T).double()
    return m / m.sum(-1, keepdim=True)  # (T, T): every visible key alike


def _one_hot_rows(T: int, key_of) -> torch.Tensor:
    w = torch.zeros(T, T, dtype=torch.float64)
    for t in range(T):
        w[t, key_of(t)] = 1.0
    return w


def test_previous_token_score():
    T = 10
    w = _one_hot_rows(T, lambda t: max(t - 1, 0))
    assert heads.previous_token_score(w).item() == 1.0
    assert heads.previous_token_score(_one_hot_rows(T, lambda t: t)).item() == 0.0
    # uniform causal attention: query t gives 1/(t+1) to its previous token
    expected = sum(1 / (t + 1) for t in range(1, T)) / (T - 1)
    assert heads.previous_token_score(_uniform(T)).item() == pytest.approx(expected)
    stacked = torch.stack([w, _uniform(T)])  # (2, T, T) -> (2,)
    assert heads.previous_token_score(stacked).shape == (2,)


def test_induction_score_on_a_repeated_passage():
    n = 6
    T = 2 * n
    ideal = _one_hot_rows(T, lambda t: t - n + 1 if t >= n else 0)
    assert heads.induction_score(ideal, n).item() == 1.0
    assert heads.induction_score(_one_hot_rows(T, lambda t: max(t - 1, 0)), n).item() == 0.0
    with pytest.raises(ValueError, match="period"):
        heads.induction_score(ideal, T)
    with pytest.raises(ValueError, match="period"):
        heads.induction_score(ideal, 0)


def test_first_token_score():
    T = 16
    assert heads.first_token_score(_one_hot_rows(T, lambda t: 0)).item() == 1.0
    assert heads.first_token_score(_one_hot_rows(T, lambda t: t)).item() == 0.0
    # min_query=8: queries 8..15 of uniform attention give 1/(t+1) to position 0
    expected = sum(1 / (t + 1) for t in range(8, T)) / (T - 8)
    assert heads.first_token_score(_uniform(T)).item() == pytest.approx(expected)
    with pytest.raises(ValueError, match="min_query"):
        heads.first_token_score(_uniform(T), min_query=T)


def test_punctuation_score():
    ids = torch.tensor(list(b"ab, cd. ef\ngh"))
    T = ids.numel()
    last_punct = [max([j for j in range(t + 1) if chr(ids[j]) in ",.\n"], default=0) for t in range(T)]
    w = _one_hot_rows(T, lambda t: last_punct[t])
    assert heads.punctuation_score(w, ids, min_query=2).item() == 1.0  # queries from 2 on all see a comma
    assert heads.punctuation_score(_one_hot_rows(T, lambda t: 0), ids, min_query=2).item() == 0.0
    batched = heads.punctuation_score(torch.stack([w, w])[:, None], torch.stack([ids, ids]), min_query=2)
    assert batched.shape == (2, 1) and torch.all(batched == 1.0)
    with pytest.raises(ValueError, match="ids"):
        heads.punctuation_score(w, ids[:-1])
    with pytest.raises(TypeError, match="ids"):
        heads.punctuation_score(w, ids.double())


def test_positional_score():
    T = 8
    prev = _one_hot_rows(T, lambda t: max(t - 1, 0))
    assert heads.positional_score(torch.stack([prev, prev, prev])).item() == pytest.approx(1.0)
    # two passages whose heads look at different keys: rows differ by total variation 1
    other = _one_hot_rows(T, lambda t: 0)
    score = heads.positional_score(torch.stack([prev, other]), min_query=2).item()
    assert score == pytest.approx(0.5)  # each row is at distance 1/2 from the mean row
    with pytest.raises(ValueError, match="N >= 2"):
        heads.positional_score(prev[None])


def test_scores_are_differentiable():
    w = torch.softmax(torch.randn(3, 6, 6, dtype=torch.float64).masked_fill(~causal_mask(6), float("-inf")), -1)
    w.requires_grad_(True)
    assert torch.autograd.gradcheck(lambda x: heads.positional_score(x), (w,))
    assert torch.autograd.gradcheck(lambda x: heads.previous_token_score(x), (w,))


def test_bad_weights():
    with pytest.raises(TypeError, match="weights"):
        heads.previous_token_score([[1.0]])
    with pytest.raises(TypeError, match="floating"):
        heads.previous_token_score(torch.ones(3, 3, dtype=torch.long))
    with pytest.raises(ValueError, match=r"\(\.\.\., T, T\)"):
        heads.previous_token_score(torch.ones(3, 4))


def test_passages():
    text = "abcdefghijklmnopqrstuvwxyz"
    p = heads.text_passages(text, 3, 4)
    assert p.shape == (3, 4)
    assert bytes(p[0].tolist()) == b"abcd" and bytes(p[-1].tolist()) == b"wxyz"
    r = heads.repeated_passages(text, 2, 5)
    assert r.shape == (2, 10) and torch.equal(r[:, :5], r[:, 5:])
    with pytest.raises(ValueError, match="fewer than length"):
        heads.text_passages("abc", 2, 4)
    with pytest.raises(ValueError, match="n_passages"):
        heads.text_passages(text, 0, 4)


def test_score_heads_shapes_and_ranges():
    model = _tiny()
    text = "To be, or not to be, that is the question:\n" * 6
    scores = score_heads(model, text, n_passages=3, length=32, period=16)
    assert list(scores) == list(heads.SCORE_NAMES)
    for name, s in scores.items():
        assert s.shape == (2, 4), name
        assert torch.all((s >= -1e-12) & (s <= 1 + 1e-12)), name
    with pytest.raises(ValueError, match="max_len"):
        score_heads(model, text, length=128)
    with pytest.raises(ValueError, match="max_len"):
        score_heads(model, text, period=40)
    with pytest.raises(TypeError, match="DecoderLM"):
        score_heads(torch.nn.Linear(2, 2), text)


def test_ablation_equals_zeroed_projection_columns():
    model = _tiny()
    ids = torch.randint(0, 256, (2, 20), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        before = model(ids)
        with ablate_heads(model, [(1, 2), (0, 0)]):
            ablated = model(ids)
        after = model(ids)
        reference = _tiny()
        D = reference.config.resolved_head_dim
        reference.blocks[1].attn.out_proj.weight[:, 2 * D : 3 * D] = 0.0
        reference.blocks[0].attn.out_proj.weight[:, 0:D] = 0.0
        expected = reference(ids)
    assert torch.equal(before, after)  # the hooks are gone after the block
    assert not torch.allclose(before, ablated)
    torch.testing.assert_close(ablated, expected, rtol=1e-12, atol=1e-12)


def test_ablation_bad_input():
    model = _tiny()
    with pytest.raises(ValueError, match="out of range"):
        with ablate_heads(model, [(2, 0)]):
            pass
    with pytest.raises(TypeError, match="pair"):
        with ablate_heads(model, [1]):
            pass
    with pytest.raises(TypeError, match="DecoderLM"):
        with ablate_heads(torch.nn.Linear(2, 2), []):
            pass


def test_repeat_loss():
    model = _tiny()
    r = heads.repeated_passages("hello there, general kenobi " * 3, 2, 8)
    first, second = heads.repeat_loss(model, r, 8)
    assert first > 0 and second > 0
    with pytest.raises(ValueError, match="2 \\* period"):
        heads.repeat_loss(model, r, 5)
