"""DeepSeek Sparse Attention computes what Hugging Face's DeepSeek-V3.2 computes (chapter 18).

A tiny ``DeepseekV32Attention`` (multi-head latent attention with its lightning indexer)
is built from a config (nothing is downloaded), its random float64 weights are copied
into attn_core's :class:`~attn_core.SparseAttention` around a
:class:`~attn_core.MultiHeadLatentAttention`, and both run on the same input:

* the index scores (Hugging Face computes them in float32 whatever the input: compared at
  float32's precision, captured where they enter ``topk``), the selected tokens (the same
  sets), and the attention's output and weights (float64, equal to rounding);
* the cache path: a prompt, then one token at a time, ours from a
  :class:`~attn_core.SparseCache`, Hugging Face's from its ``DynamicCache`` (whose
  ``DynamicIndexedLayer`` caches the indexer keys).

Hugging Face rounds RMSNorm inputs, RoPE tables and the eager softmax to float32;
:func:`exact_hf` lifts those for a test (the same formulas in float64).
"""

from __future__ import annotations

import pytest
import torch

transformers = pytest.importorskip("transformers", minversion="5.0")

from transformers import DeepseekV32Config, DynamicCache  # noqa: E402
from transformers.models.deepseek_v32 import modeling_deepseek_v32 as hf_v32  # noqa: E402

from attn_core import LightningIndexer, MultiHeadLatentAttention, SparseAttention  # noqa: E402
from attn_core.hf.convert import copy_attention  # noqa: E402

F64 = torch.float64
EXACT = 1e-10  # float64 rounding in another summation order
FLOAT32 = 1e-6  # relative to the largest score: Hugging Face's index scores are float32
THETA = 50000.0


def _rmsnorm_float64(self, hidden_states):
    variance = hidden_states.pow(2).mean(-1, keepdim=True)
    return self.weight * (hidden_states * torch.rsqrt(variance + self.variance_epsilon))


def _rope_float64(self, x, position_ids):
    dim = 2 * self.inv_freq.numel()
    inv_freq = THETA ** (-torch.arange(0, dim, 2, dtype=F64) / dim)  # attn_core's RotaryEmbedding.inv_freq
    freqs = position_ids[..., None].to(F64) * inv_freq  # (B, T, D/2)
    emb = torch.cat((freqs, freqs), dim=-1)  # (B, T, D)
    return emb.cos().to(x.dtype), emb.sin().to(x.dtype)


def _eager_float64(module, query, key, value, attention_mask, scaling, dropout=0.0, **kwargs):
    """Hugging Face's eager attention with the softmax in the input's dtype (float64 here)."""
    w = torch.matmul(query, key.transpose(2, 3)) * scaling
    if attention_mask is not None:
        w = w + attention_mask
    w = torch.softmax(w, dim=-1)
    return torch.matmul(w, value).transpose(1, 2).contiguous(), w


@pytest.fixture
def exact_hf(monkeypatch):
    monkeypatch.setattr(hf_v32.DeepseekV32RMSNorm, "forward", _rmsnorm_float64)
    monkeypatch.setattr(hf_v32.DeepseekV32RotaryEmbedding, "forward", _rope_float64)
    monkeypatch.setattr(hf_v32, "eager_attention_forward", _eager_float64)


@pytest.fixture
def topk_inputs(monkeypatch):
    """Every tensor Hugging Face's indexer hands to ``topk``: its index scores."""
    seen = []
    original = torch.Tensor.topk

    def recording(self, *args, **kwargs):
        seen.append(self.detach().clone())
        return original(self, *args, **kwargs)

    monkeypatch.setattr(torch.Tensor, "topk", recording)
    return seen


def v32_config(**kw) -> DeepseekV32Config:
    base = dict(
        vocab_size=61, hidden_size=32, intermediate_size=48, num_hidden_layers=1, num_attention_heads=4,
        num_key_value_heads=4, q_lora_rank=12, kv_lora_rank=16, qk_nope_head_dim=8, qk_rope_head_dim=4,
        v_head_dim=6, index_topk=3, index_n_heads=8, index_head_dim=8, max_position_embeddings=64,
        rms_norm_eps=1e-6, rope_parameters={"rope_type": "default", "rope_theta": THETA},
        attn_implementation="eager", tie_word_embeddings=False, bos_token_id=None, eos_token_id=None,
        pad_token_id=None,
    )  # fmt: skip
    return DeepseekV32Config(**{**base, **kw})


def seeded(module: torch.nn.Module, seed: int = 0, std: float = 0.3) -> torch.nn.Module:
    """Random float64 weights everywhere (norm gains and biases too, so that a dropped one shows)."""
    torch.manual_seed(seed)
    module = module.to(F64)
    with torch.no_grad():
        for name, p in module.named_parameters():
            gain = p.dim() == 1 and "norm" in name and name.endswith("weight")
            p.copy_(torch.randn_like(p) * std + (1.0 if gain else 0.0))
    return module.eval()


def copy_indexer(ours: LightningIndexer, hf: torch.nn.Module) -> None:
    with torch.no_grad():
        ours.q_proj.weight.copy_(hf.wq_b.weight)
        ours.k_proj.weight.copy_(hf.wk.weight)
        ours.k_norm.weight.copy_(hf.k_norm.weight)
        ours.k_norm.bias.copy_(hf.k_norm.bias)
        ours.weights_proj.weight.copy_(hf.weights_proj.weight)


def pair(config: DeepseekV32Config, seed: int = 0):
    hf = seeded(hf_v32.DeepseekV32Attention(config, layer_idx=0), seed=seed)
    mla = MultiHeadLatentAttention(
        32, 4, d_latent=16, d_q_latent=12, head_dim=8, rope_dim=4, v_head_dim=6, rope_base=THETA,
        rope_layout="interleaved",
    )  # fmt: skip
    indexer = LightningIndexer(32, 8, 8, d_query=12, rope_dim=4, rope_base=THETA)
    ours = SparseAttention(mla, indexer, topk=config.index_topk).to(F64).eval()
    copy_attention(ours.attn, hf)
    copy_indexer(ours.indexer, hf.indexer)
    return hf, ours


def causal_bias(T: int, past: int = 0) -> torch.Tensor:
    """Hugging Face's additive causal mask ``(1, 1, T, past + T)``: -inf on future keys."""
    q = torch.arange(T)[:, None] + past
    k = torch.arange(past + T)[None, :]
    return torch.zeros(T, past + T, dtype=F64).masked_fill(k > q, float("-inf"))[None, None]


def inputs(T: int, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(2, T, 32, generator=g, dtype=F64), torch.arange(T)[None]


def selection_from_indices(indices: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
    """Hugging Face's top-k indices as a mask, restricted (as its attention mask does) to visible keys."""
    chosen = torch.zeros(scores.shape, dtype=torch.bool).scatter(-1, indices.long(), True)
    return chosen & (scores > float("-inf"))


def boundary_ties(scores: torch.Tensor, k: int) -> torch.Tensor:
    """Rows whose k-th and (k+1)-th highest visible scores are equal: there the top-k set is a choice.

    Shapes:
        scores: ``(B, T, T_k)``; returns ``(B, T)``
    """
    top = scores.sort(dim=-1, descending=True).values  # (B, T, T_k)
    if k >= scores.shape[-1]:
        return torch.zeros(scores.shape[:-1], dtype=torch.bool)
    return (top[..., k - 1] == top[..., k]) & (top[..., k] > float("-inf"))


@pytest.mark.parametrize("topk", [1, 3, 5, 9], ids=lambda k: f"k={k}")
def test_indexer_scores_and_selection(exact_hf, topk_inputs, topk):
    """The same index scores (to float32) and the same top-k sets, including rows with fewer than k tokens."""
    config = v32_config(index_topk=topk)
    hf, ours = pair(config)
    x, pos = inputs(9)
    cos_sin = hf_v32.DeepseekV32RotaryEmbedding(config)(x, pos)
    q_resid = hf.q_a_layernorm(hf.q_a_proj(x))
    indices = hf.indexer(x, q_resid, cos_sin, causal_bias(9)[:, 0], pos)  # (B, T, min(k, T))
    hf_scores = topk_inputs[-1]  # (B, T, T): float32
    scores, selected = ours.index(x)
    finite = hf_scores > float("-inf")
    assert torch.equal(finite, scores > float("-inf"))
    rel = ((scores[finite] - hf_scores[finite].double()).abs().max() / scores[finite].abs().max()).item()
    assert rel < FLOAT32
    theirs = selection_from_indices(indices, hf_scores)
    tied = boundary_ties(hf_scores, topk)  # (B, T): where Hugging Face's torch.topk makes a choice
    assert torch.equal(selected[~tied], theirs[~tied])
    for b, t in tied.nonzero().tolist():  # a tie: another set, with the same scores
        ours_top = hf_scores[b, t][selected[b, t]].sort().values
        assert torch.equal(ours_top, hf_scores[b, t][theirs[b, t]].sort().values)
    # Fewer than k visible tokens: every one of them is selected.
    counts = selected.sum(-1)  # (B, T)
    assert torch.equal(counts, torch.clamp(torch.arange(1, 10), max=topk).expand(2, 9))


@pytest.mark.parametrize("topk", [2, 4], ids=lambda k: f"k={k}")
def test_attention_output_and_weights(exact_hf, topk):
    config = v32_config(index_topk=topk)
    hf, ours = pair(config, seed=1)
    x, pos = inputs(9, seed=1)
    cos_sin = hf_v32.DeepseekV32RotaryEmbedding(config)(x, pos)
    expected, hf_weights = hf(x, position_embeddings=cos_sin, attention_mask=causal_bias(9), position_ids=pos)
    assert not boundary_ties(ours.index(x)[0], topk).any()  # one right top-k set per row: comparable
    got, weights = ours(x, return_weights=True)
    assert (got - expected).abs().max().item() < EXACT
    assert (weights - hf_weights).abs().max().item() < EXACT
    assert torch.equal(weights > 0, hf_weights > 0)  # the same keys attended
    assert ((weights > 0).sum(-1) <= topk).all()
    dense = ours.attn(x)  # the same weights without the indexer: a real difference
    assert (dense - expected).abs().max().item() > 1e-3


def test_attention_with_float32_eager_softmax():
    """Unpatched Hugging Face (float32 norms, RoPE, softmax): equal at float32's precision."""
    config = v32_config(index_topk=3)
    hf, ours = pair(config, seed=2)
    x, pos = inputs(9, seed=2)
    cos_sin = hf_v32.DeepseekV32RotaryEmbedding(config)(x, pos)
    expected, _ = hf(x, position_embeddings=cos_sin, attention_mask=causal_bias(9), position_ids=pos)
    assert (ours(x) - expected).abs().max().item() < 1e-5


def test_cache_decoding(exact_hf):
    """A prompt of 4, then one token at a time: indexer keys cached on both sides, same outputs."""
    config = v32_config(index_topk=3)
    hf, ours = pair(config, seed=3)
    x, pos = inputs(9, seed=3)
    rotary = hf_v32.DeepseekV32RotaryEmbedding(config)
    hf_cache, our_cache = DynamicCache(config=config), ours.make_cache(2, 9)
    assert not boundary_ties(ours.index(x)[0], 3).any()
    full = ours(x)
    for start, stop in ((0, 4), (4, 5), (5, 6), (6, 7), (7, 8), (8, 9)):
        chunk = x[:, start:stop]
        expected, _ = hf(
            chunk,
            position_embeddings=rotary(chunk, pos[:, start:stop]),
            attention_mask=causal_bias(stop - start, past=start),
            position_ids=pos[:, start:stop],
            past_key_values=hf_cache,
        )
        got = ours(chunk, kv_cache=our_cache)
        assert (got - expected).abs().max().item() < EXACT
        assert (got - full[:, start:stop]).abs().max().item() < EXACT
    assert our_cache.size == 9
    assert hf_cache.layers[0].indexer_keys.shape == (2, 9, 8)
    assert (our_cache.index.update(x.new_zeros(2, 0, 8)) - hf_cache.layers[0].indexer_keys).abs().max().item() < EXACT
