"""attn_core.serving.speculative: greedy output equals the target's own greedy decoding whatever the draft;
sampled tokens follow the target's exact distribution (and a wrong rule is caught); prompt lookup; bad input."""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn

from attn_core import DecoderConfig, generate
from attn_core.caches.quantized import WithQuantizedCache
from attn_core.config import LayerPattern
from attn_core.serving import speculative
from attn_core.serving.speculative import PromptLookup, SpeculativeStats, accept_drafts, speculative_generate
from conftest import decoder

V = 24


def _lm(seed: int, *, n_layers: int = 2, attention: str = "gqa", sharpen: float = 20.0):
    if attention == "mla":
        config = DecoderConfig.llama_like(
            vocab_size=V, d_model=32, n_heads=4, n_kv_heads=None, attention="mla", d_latent=16, n_layers=n_layers
        )
    else:
        config = DecoderConfig.llama_like(vocab_size=V, d_model=32, n_heads=4, n_kv_heads=2, n_layers=n_layers)
    model = decoder(config, seed=seed).double()
    with torch.no_grad():  # sharpen the logits so that greedy decoding has clear winners
        model.lm_head.weight.mul_(sharpen)
    return model.eval()


PROMPT = torch.tensor([[3, 7, 1, 9, 3, 7, 1, 2, 5, 3, 7]])


@pytest.mark.parametrize("draft_kind", ["random", "perfect", "lookup", "lookup_k1"])
@pytest.mark.parametrize("k", [1, 3, 5])
def test_greedy_output_equals_the_targets_greedy_decoding_whatever_the_draft(draft_kind, k):
    target = _lm(0)
    draft = {
        "random": _lm(1, n_layers=1),
        "perfect": target,
        "lookup": PromptLookup(max_ngram=3),
        "lookup_k1": PromptLookup(max_ngram=1),
    }[draft_kind]
    expected = generate(target, PROMPT, 17, temperature=0)
    ids, stats = speculative_generate(target, draft, PROMPT, 17, k=k)
    assert torch.equal(ids, expected)
    assert stats.new_tokens == 17 and 0 <= stats.accepted <= stats.proposed
    # every round ends in one token of the target: 17 tokens = rounds + accepted; rounds + the prefill = calls
    assert stats.target_calls == 1 + 17 - stats.accepted
    if draft_kind == "perfect":
        assert stats.accepted == stats.proposed and stats.acceptance_rate == 1.0
        assert stats.target_calls == 1 + math.ceil(17 / (k + 1))  # k proposals and a bonus per call
    if draft_kind == "random":
        assert stats.draft_calls == stats.proposed


def test_greedy_equality_holds_for_mla_caches_and_a_one_token_prompt():
    target, draft = _lm(0, attention="mla"), _lm(2, attention="mla", n_layers=1)
    for prompt in (PROMPT, PROMPT[:, :1]):
        ids, _ = speculative_generate(target, draft, prompt, 9, k=3)
        assert torch.equal(ids, generate(target, prompt, 9, temperature=0))


def test_prompt_lookup_proposes_what_followed_the_latest_earlier_match():
    lookup = PromptLookup(max_ngram=3)
    assert lookup.propose([3, 7, 1, 9, 3, 7, 1, 2, 5, 3, 7], k=3) == [1, 2, 5]  # "3 7" last seen before "1 2 5"
    assert lookup.propose([1, 2, 3, 4, 2, 3], k=5) == [4, 2, 3]  # cut at the sequence's end
    assert lookup.propose([1, 2, 3], k=2) == []  # no n-gram repeats
    assert PromptLookup(max_ngram=2, min_ngram=2).propose([5, 1, 9, 1], k=2) == []  # a 1-gram is too short
    assert lookup.propose([4], k=2) == []


def test_stats_derive_the_rates():
    stats = SpeculativeStats(proposed=8, accepted=6, target_calls=5, draft_calls=8, new_tokens=10)
    assert stats.acceptance_rate == 0.75 and stats.target_calls_per_token == 0.5
    assert SpeculativeStats().acceptance_rate == 0.0


class Bigram(nn.Module):
    """A model whose next-token logits depend on the last token only: its distributions are known exactly."""

    def __init__(self, table: torch.Tensor) -> None:
        super().__init__()
        self.table = nn.Parameter(table, requires_grad=False)  # (V, V) logits of the next token

    def make_caches(self, batch_size: int, max_len: int | None = None) -> list:
        return []  # nothing to cache: the last token is all it reads

    def forward(self, idx: torch.Tensor, caches=None) -> torch.Tensor:
        return self.table[idx]  # (B, T, V)


def _table(seed: int, v: int = 4, scale: float = 1.5) -> torch.Tensor:
    return torch.randn(v, v, generator=torch.Generator().manual_seed(seed), dtype=torch.float64) * scale


def _pairs_l1(target, draft, prompt, n, temperature, seed):
    """L1 distance between the empirical law of the first two new tokens and the target's exact one."""
    v = target.table.shape[0]
    p = torch.softmax(target.table / temperature, dim=-1)  # (v, v): row a is the law after token a
    exact = (p[prompt[0, -1]][:, None] * p).flatten()  # (v·v,) P(x1 = a, x2 = b)
    counts = torch.zeros(v * v, dtype=torch.float64)
    gen = torch.Generator().manual_seed(seed)
    for _ in range(n):
        ids, _ = speculative_generate(target, draft, prompt, 3, k=2, temperature=temperature, generator=gen)
        counts[ids[0, -3] * v + ids[0, -2]] += 1
    return float((counts / n - exact).abs().sum())


def _l1_bound(cells: int, n: int, false_alarm: float) -> float:
    """Bretagnolle-Huber-Carol: P(||p_hat - p||_1 >= t) <= 2^cells exp(-n t^2 / 2); the t of a false-alarm rate."""
    return math.sqrt(2 * (cells * math.log(2) + math.log(1 / false_alarm)) / n)


@pytest.mark.parametrize("draft_kind", ["model", "lookup"])
def test_sampled_tokens_follow_the_targets_exact_distribution(draft_kind):
    """The first and second new tokens, jointly (16 cells), within the L1 bound of a 1e-6 false alarm."""
    target = Bigram(_table(0))
    # a draft far from the target, so that both rejection branches run often
    draft = Bigram(-_table(0)) if draft_kind == "model" else PromptLookup(max_ngram=1)
    prompt = torch.tensor([[0, 1, 2, 3, 0]])  # lookup proposes from the repeats of the 4 tokens
    n = 3000
    l1 = _pairs_l1(target, draft, prompt, n, temperature=0.8, seed=1)
    bound = _l1_bound(16, n, 1e-6)
    assert l1 < bound, (l1, bound)


def _accept_always(drafts, target_logits, draft_probs, temperature, generator=None):
    """Wrong: every proposal kept, so the tokens follow the draft."""
    p = torch.softmax(target_logits[len(drafts)].float() / temperature, dim=-1)
    return len(drafts), int(torch.multinomial(p, 1, generator=generator))


def _resample_from_p(drafts, target_logits, draft_probs, temperature, generator=None):
    """Wrong, subtly: after a rejection draw from p rather than norm(max(0, p - q))."""
    p = torch.softmax(target_logits.float() / temperature, dim=-1)
    for i, d in enumerate(drafts):
        if float(torch.rand((), generator=generator)) >= float(p[i, d]) / float(draft_probs[i, d]):
            return i, int(torch.multinomial(p[i], 1, generator=generator))
    return len(drafts), int(torch.multinomial(p[len(drafts)], 1, generator=generator))


@pytest.mark.parametrize("rule,n", [(_accept_always, 600), (_resample_from_p, 3000)])
def test_a_wrong_rule_fails_the_same_check(monkeypatch, rule, n):
    """The check above must catch a rule that changes the distribution (here by 2x its bound or more)."""
    monkeypatch.setattr(speculative, "accept_drafts", rule)
    target, draft = Bigram(_table(0)), Bigram(-_table(0))
    l1 = _pairs_l1(target, draft, torch.tensor([[0, 1, 2, 3, 0]]), n, temperature=0.8, seed=3)
    assert l1 > _l1_bound(16, n, 1e-6), l1


def test_accept_drafts_rejection_draws_from_the_residual():
    """p = (0.5, 0.5, 0), q = (0, 1, 0) on token 1: kept with p/q = 1/2; when rejected only token 0 remains."""
    logits = torch.log(torch.tensor([[0.5, 0.5, 1e-30], [0.2, 0.3, 0.5]], dtype=torch.float64))
    q = torch.tensor([[0.0, 1.0, 0.0]], dtype=torch.float64)
    gen = torch.Generator().manual_seed(0)
    outcomes = [accept_drafts([1], logits, q, 1.0, gen) for _ in range(2000)]
    rejected = [token for n, token in outcomes if n == 0]
    assert set(rejected) == {0}
    assert abs(len(rejected) / 2000 - 0.5) < 0.05  # 4.5 sigma
    # greedy: the proposals are kept while they are the argmax
    assert accept_drafts([2, 2], logits[[1, 1, 0]], None, 0.0) == (2, 0)
    assert accept_drafts([2, 1], logits[[1, 1, 0]], None, 0.0) == (1, 2)


def test_speculative_generate_refuses_bad_input():
    target = _lm(0)
    lookup = PromptLookup()
    with pytest.raises(ValueError, match=r"idx must have shape \(1, T\)"):
        speculative_generate(target, lookup, PROMPT.repeat(2, 1), 4, k=2)
    with pytest.raises(ValueError, match="k must be >= 1"):
        speculative_generate(target, lookup, PROMPT, 4, k=0)
    with pytest.raises(TypeError, match="draft must be a model"):
        speculative_generate(target, "ngram", PROMPT, 4, k=2)
    with pytest.raises(ValueError, match="temperature must be"):
        speculative_generate(target, lookup, PROMPT, 4, k=2, temperature=-1.0)
    with pytest.raises(ValueError, match="min_ngram must be <= max_ngram"):
        PromptLookup(max_ngram=1, min_ngram=2)
    other = decoder(DecoderConfig.llama_like(vocab_size=V + 1, d_model=32, n_heads=4, n_kv_heads=2)).double()
    with pytest.raises(ValueError, match="draft vocabulary V=25 differs from the target's V=24"):
        speculative_generate(target, other, PROMPT, 4, k=2)
    with pytest.raises(ValueError, match="target's layer 0 keeps a QuantizedKVCache"):
        speculative_generate(WithQuantizedCache(target), lookup, PROMPT, 4, k=2)
    pattern = LayerPattern(layer_types=("sliding", "full"), sliding_window=4)
    window = DecoderConfig.llama_like(vocab_size=V, d_model=32, n_heads=4, n_kv_heads=2, pattern=pattern)
    with pytest.raises(ValueError, match="layer 0 keeps a RollingKVCache, which cannot be truncated"):
        speculative_generate(decoder(window), lookup, PROMPT, 4, k=2)
