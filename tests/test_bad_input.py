"""Issue 24: every slip a learner makes with attn_core gets a TypeError/ValueError that names the argument.

One parametrised case per slip, grouped by module: each case is a call, the exception it
must raise, and a pattern the message must match (the argument's name, and what was
expected). The cases are the ones measured in the issue: an input dtype unlike the layer's
weights, a wrong width, masks of the wrong kind, conversion slips, caches made for another
layer, non-bool flags, positions, lengths, mixed dtypes, expert ids out of range.
"""

from __future__ import annotations

import pytest
import torch

import attn_core as ac
from attn_core.layers.indexer import IndexerKeyCache, LightningIndexer
from attn_core.layers.simplified import ShapedAttention, centring_matrix
from attn_core.layers.sparse_attention import SparseAttention
from attn_core.modules.moe import MixtureOfExperts
from attn_core.modules.router import TopKRouter, load_balancing_loss
from attn_core.ops import delta_rule as dr
from attn_core.ops import linear_attention as la

F64 = torch.float64
X = torch.randn(2, 5, 8)  # (B, T, d_model=8), float32 like the layers' weights
DTYPE = r"x has dtype float64 but the layer's weights are float32: call \.float\(\) on the input or \.double\(\)"
LONG = r"x has dtype int64 but the layer's weights are float32: .*token ids go through an embedding"


def _mha(**kw):
    return ac.MultiHeadAttention(8, 2, **kw)


def _mla():
    return ac.MultiHeadLatentAttention(8, 2, d_latent=4)


def _gdn(head_dim=4):
    return ac.GatedDeltaNet(8, 2, head_dim)


def _lm():
    return ac.DecoderLM(ac.DecoderConfig(vocab_size=11, d_model=8, n_layers=2, n_heads=2))


def _ids():
    return torch.randint(0, 11, (2, 4))


def _qkv(dtype=torch.float32):
    g = torch.Generator().manual_seed(0)
    return (torch.randn(1, 2, 4, 3, generator=g, dtype=dtype) for _ in range(3))


def _delta(form, **dtypes):
    q, k, v = _qkv()
    t = {"q": q, "k": k, "v": v, "beta": torch.rand(1, 2, 4), "g": -torch.rand(1, 2, 4)}
    for name, dtype in dtypes.items():
        t[name] = t[name].to(dtype)
    return form(t["q"], t["k"], t["v"], t["beta"], t["g"])


CASES = {
    # --- an input dtype unlike the layer's weights (a float64 tensor from NumPy, token ids)
    "mha_float64": (lambda: _mha()(X.double()), TypeError, DTYPE),
    "mha_long": (lambda: _mha()(X.long()), TypeError, LONG),
    "mha_context_float64": (lambda: _mha()(X, X.double()), TypeError, "context has dtype float64"),
    "self_attention_float64": (lambda: ac.SelfAttention(8, 4)(X.double()), TypeError, DTYPE),
    "mla_float64": (lambda: _mla()(X.double()), TypeError, DTYPE),
    "mla_long": (lambda: _mla()(X.long()), TypeError, LONG),
    "block_float64": (lambda: ac.TransformerBlock(8, 2)(X.double()), TypeError, DTYPE),
    "block_long": (lambda: ac.TransformerBlock(8, 2)(X.long()), TypeError, LONG),
    "gated_deltanet_float64": (lambda: _gdn()(X.double()), TypeError, DTYPE),
    "moe_float64": (lambda: MixtureOfExperts(8, 4, 2)(X.double()), TypeError, DTYPE),
    "router_float64": (lambda: TopKRouter(8, 4, 2)(X[0].double()), TypeError, DTYPE),
    "feedforward_float64": (lambda: ac.FeedForward(8)(X.double()), TypeError, DTYPE),
    "swiglu_long": (lambda: ac.SwiGLU(8)(X.long()), TypeError, LONG),
    "shaped_attention_float64": (lambda: ShapedAttention(8, 2)(X.double()), TypeError, DTYPE),
    "indexer_float64": (lambda: LightningIndexer(8, 2, 4)(X.double()), TypeError, DTYPE),
    # --- a wrong width
    "feedforward_width": (
        lambda: ac.FeedForward(8)(torch.randn(2, 6)),
        ValueError,
        r"x must have shape \(\.\.\., d_model=8\), got \(2, 6\)",
    ),
    "swiglu_width": (
        lambda: ac.SwiGLU(8)(torch.randn(2, 6)),
        ValueError,
        r"x must have shape \(\.\.\., d_model=8\), got \(2, 6\)",
    ),
    "mha_width": (lambda: _mha()(torch.randn(2, 5, 6)), ValueError, r"x must have shape \(B, T, d_model=8\)"),
    # --- masks (core and chapter 18)
    "attention_int_mask": (
        lambda: ac.attention(*_qkv(), mask=torch.ones(4, 4, dtype=torch.long)),
        TypeError,
        r"mask must be boolean .*int64: convert a 0/1 mask with \.bool\(\)",
    ),
    "attention_mask_shape": (
        lambda: ac.attention(*_qkv(), mask=torch.ones(3, 4, dtype=torch.bool)),
        ValueError,
        r"mask of shape \(3, 4\) does not broadcast",
    ),
    "sparse_int_mask": (
        lambda: SparseAttention(_mha(causal=True), LightningIndexer(8, 2, 4), 2)(
            X, mask=torch.ones(2, 5, 5, dtype=torch.long)
        ),
        TypeError,
        "mask must be boolean .*int64",
    ),
    "sparse_mask_shape": (
        lambda: SparseAttention(_mha(causal=True), LightningIndexer(8, 2, 4), 2)(
            X, mask=torch.ones(3, 3, dtype=torch.bool)
        ),
        ValueError,
        r"mask of shape \(3, 3\) does not broadcast to the scores' shape \(2, 2, 5, 5\)",
    ),
    "indexer_int_mask": (
        lambda: LightningIndexer(8, 2, 4)(X, mask=torch.ones(2, 5, 5, dtype=torch.long)),
        TypeError,
        "mask must be boolean, got dtype=torch.int64",
    ),
    "indexer_float_mask": (
        lambda: LightningIndexer(8, 2, 4)(X, mask=torch.ones(2, 5, 5)),
        TypeError,
        "mask must be boolean, got dtype=torch.float32",
    ),
    "indexer_mask_shape": (
        lambda: LightningIndexer(8, 2, 4)(X, mask=torch.ones(3, 3, dtype=torch.bool)),
        ValueError,
        r"mask of shape \(3, 3\) does not broadcast to the index scores' shape \(2, 5, 5\)",
    ),
    "indexer_key_cache_batch": (
        lambda: LightningIndexer(8, 2, 4)(X, key_cache=IndexerKeyCache(3, 4, 8)),
        ValueError,
        "key_cache was made for batch_size=3, but this call needs batch_size=2",
    ),
    # --- conversion (see also tests/test_hf_convert.py for the Hugging Face objects)
    "from_hf_not_a_model": (lambda: ac.from_hf({"config": None}), TypeError, "model must be a Hugging Face causal LM"),
    "copy_attention_not_a_layer": (
        lambda: ac.hf.convert.copy_attention(torch.nn.Linear(2, 2), _mha()),
        TypeError,
        "attn must be an attn_core.MultiHeadAttention",
    ),
    "copy_attention_decoder_layer": (
        lambda: ac.hf.convert.copy_attention(_mha(), ac.TransformerBlock(8, 2)),
        TypeError,
        "hf_attn must be a Hugging Face attention layer",
    ),
    # --- caches
    "lm_caches_none": (
        lambda: _lm()(_ids(), caches=[None, None]),
        ValueError,
        r"caches\[0\] is None, but layer 0 keeps its own keys and values",
    ),
    "lm_caches_batch": (
        lambda: (lambda m: m(_ids(), caches=m.make_caches(3, 8)))(_lm()),
        ValueError,
        "kv_cache was made for batch_size=3, but this call needs batch_size=2",
    ),
    "mha_cache_heads": (
        lambda: _mha()(X, kv_cache=ac.KVCache(2, 1, 4, 8)),
        ValueError,
        "kv_cache was made for n_kv_heads=1, but this call needs n_kv_heads=2",
    ),
    "mha_cache_head_dim": (
        lambda: _mha()(X, kv_cache=ac.KVCache(2, 2, 3, 8)),
        ValueError,
        "kv_cache was made for head_dim=3, but this call needs head_dim=4",
    ),
    "mla_cache_latent": (
        lambda: _mla()(X, kv_cache=ac.LatentKVCache(2, 6, 2, 8)),
        ValueError,
        "kv_cache was made for d_latent=6",
    ),
    "shaped_cache_batch": (
        lambda: ShapedAttention(8, 2)(X, kv_cache=ac.KVCache(1, 2, 4, 8)),
        ValueError,
        "kv_cache was made for batch_size=1",
    ),
    "gated_deltanet_cache_width": (
        lambda: _gdn()(X, kv_cache=_gdn(8).make_cache(2)),
        ValueError,
        "kv_cache was made for conv_channels=48, .*make_cache",
    ),
    "gated_deltanet_cache_kind": (
        lambda: _gdn()(X, kv_cache=ac.KVCache(2, 2, 4, 8)),
        TypeError,
        "kv_cache must be an attn_core.GatedDeltaNetCache",
    ),
    "kv_cache_integer_keys": (
        lambda: ac.KVCache(2, 2, 4, 8).update(torch.ones(2, 2, 1, 4, dtype=torch.long), torch.ones(2, 2, 1, 4)),
        TypeError,
        "k must be a floating-point tensor, got dtype=torch.int64",
    ),
    "rolling_cache_integer_values": (
        lambda: ac.RollingKVCache(1, 1, 1, window=2).update(
            torch.ones(1, 1, 1, 1), torch.ones(1, 1, 1, 1, dtype=torch.int32)
        ),
        TypeError,
        "v must be a floating-point tensor",
    ),
    "latent_cache_integer": (
        lambda: ac.LatentKVCache(1, 4, 2, 8).update(torch.ones(1, 1, 4, dtype=torch.long), torch.ones(1, 1, 2)),
        TypeError,
        "c_kv must be a floating-point tensor",
    ),
    # --- flags that must be bool
    "attention_is_causal_int": (
        lambda: ac.attention(*_qkv(), is_causal=1),
        TypeError,
        r"is_causal must be a bool, got int \(1\)",
    ),
    "attention_is_causal_str": (
        lambda: ac.attention(*_qkv(), return_weights=True, is_causal="no"),
        TypeError,
        "is_causal must be a bool, got str",
    ),
    "attention_return_weights_int": (
        lambda: ac.attention(*_qkv(), return_weights=1),
        TypeError,
        "return_weights must be a bool",
    ),
    "mha_causal_int": (lambda: _mha(causal=1), TypeError, r"causal must be a bool, got int \(1\)"),
    "self_attention_causal_str": (
        lambda: ac.SelfAttention(8, 4, causal="yes"),
        TypeError,
        "causal must be a bool, got str",
    ),
    "block_causal_int": (
        lambda: ac.TransformerBlock(8, 2, causal=0),
        TypeError,
        r"causal must be a bool, got int \(0\)",
    ),
    "block_sinks_int": (lambda: ac.TransformerBlock(8, 2, sinks=1), TypeError, "sinks must be a bool"),
    "shaped_causal_int": (lambda: ShapedAttention(8, 2, causal=1), TypeError, "causal must be a bool"),
    "mla_absorbed_int": (lambda: _mla()(X, absorbed=1), TypeError, "absorbed must be a bool"),
    # --- positions and lengths
    "position_mask_lists": (
        lambda: ac.ops.masks.position_mask([0, 1], [0, 1]),
        TypeError,
        "q_pos must be a torch.Tensor, got list",
    ),
    "position_mask_2d": (
        lambda: ac.ops.masks.position_mask(torch.zeros(2, 2, dtype=torch.long), torch.arange(2)),
        ValueError,
        r"q_pos must have shape \(T_q\), got \(2, 2\)",
    ),
    "position_mask_float": (
        lambda: ac.ops.masks.position_mask(torch.arange(2), torch.arange(2.0)),
        TypeError,
        "k_pos must be an integer tensor",
    ),
    "centring_matrix_zero": (lambda: centring_matrix(0), ValueError, "T_q must be >= 1, got T_q=0"),
    "centring_matrix_zero_keys": (
        lambda: centring_matrix(2, 0, causal=False),
        ValueError,
        "T_k must be >= 1, got T_k=0",
    ),
    "centring_matrix_causal_int": (lambda: centring_matrix(2, causal=1), TypeError, "causal must be a bool"),
    "centring_matrix_int_dtype": (
        lambda: centring_matrix(2, dtype=torch.long),
        TypeError,
        "dtype must be a floating-point dtype",
    ),
    # --- mixed dtypes in the delta rules and linear attention (every form must refuse alike)
    "delta_recurrent_k_float64": (
        lambda: _delta(dr.delta_rule_recurrent, k=F64),
        TypeError,
        "k has dtype float64 but q is float32",
    ),
    "delta_chunked_k_float64": (
        lambda: _delta(dr.delta_rule_chunked, k=F64),
        TypeError,
        "k has dtype float64 but q is float32",
    ),
    "delta_parallel_v_float64": (
        lambda: _delta(dr.delta_rule_parallel, v=F64),
        TypeError,
        "v has dtype float64 but q is float32",
    ),
    "delta_recurrent_beta_float64": (
        lambda: _delta(dr.delta_rule_recurrent, beta=F64),
        TypeError,
        "beta has dtype float64",
    ),
    "delta_chunked_g_float64": (lambda: _delta(dr.delta_rule_chunked, g=F64), TypeError, "g has dtype float64"),
    "linear_recurrent_v_float64": (
        lambda: (lambda q, k, v: la.linear_attention_recurrent(q, k, v.double()))(*_qkv()),
        TypeError,
        "v has dtype float64",
    ),
    "delta_state_float64": (
        lambda: (
            lambda q, k, v: dr.delta_rule_recurrent(
                q, k, v, torch.rand(1, 2, 4), initial_state=torch.zeros(1, 2, 3, 3, dtype=F64)
            )
        )(*_qkv()),
        TypeError,
        "initial_state has dtype float64",
    ),
    # --- mixture of experts
    "load_balancing_ids_too_large": (
        lambda: load_balancing_loss(torch.full((6, 4), 0.25), torch.full((6, 2), 7), 4),
        ValueError,
        r"every expert id in experts must be in \[0, n_experts=4\), got 7",
    ),
    "load_balancing_ids_negative": (
        lambda: load_balancing_loss(torch.full((6, 4), 0.25), torch.full((6, 2), -1), 4),
        ValueError,
        r"experts must be in \[0, n_experts=4\), got -1",
    ),
    "load_balancing_probs_long": (
        lambda: load_balancing_loss(torch.ones(6, 4, dtype=torch.long), torch.zeros(6, 2, dtype=torch.long), 4),
        TypeError,
        "probs must be a floating-point tensor",
    ),
    "load_balancing_ids_float": (
        lambda: load_balancing_loss(torch.full((6, 4), 0.25), torch.zeros(6, 2), 4),
        TypeError,
        "experts must be an integer tensor",
    ),
}


@pytest.mark.parametrize("call,error,message", CASES.values(), ids=CASES.keys())
def test_a_slip_raises_an_error_that_names_the_argument(call, error, message):
    with pytest.raises(error, match=message):
        call()


def test_the_checks_read_no_data_on_a_decoding_step(monkeypatch):
    """A decoding step's checks read shapes, dtypes and devices only: no ``.item()``/``bool()`` of a tensor.

    Measured on the CPU by making every data read raise: a CUDA tensor would synchronise there.
    """
    model = _lm().eval()
    caches = model.make_caches(2, 8)
    with torch.no_grad():
        model(_ids(), caches=caches)  # the prompt
        x = torch.randn(2, 1, 8)  # the next token's residual stream

        def refuse(*args, **kwargs):
            raise AssertionError("a check read a tensor's data")

        for name in ("item", "__bool__", "__int__", "__float__", "tolist"):
            monkeypatch.setattr(torch.Tensor, name, refuse)
        out = model.blocks[0](x, kv_cache=caches[0])  # one block's decoding step: projections, cache, attention, MLP
    assert out.shape == (2, 1, 8) and caches[0].size == 5
