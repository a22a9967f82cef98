"""Tests for attn_core.layers.multihead_checks: MultiHeadAttention's options filled in and checked before any
weight is built (its error messages are matched in tests/test_attention.py and tests/test_bad_input.py)."""

from __future__ import annotations

import pytest

from attn_core.layers.multihead_checks import check_mha_options

DEFAULTS = dict(
    n_kv_heads=None, causal=False, bias=False, dropout=0.0, rope=None, d_context=None, head_dim=None,
    qk_norm=False, gate=None, softcap=None, window=None, sinks=False, sink_tokens=0, qkv_bias=False,
    scale=None, chunk=None, temperature=None,
)  # fmt: skip


def test_defaults_are_filled_in_in_the_order_the_layer_sets_them():
    options = check_mha_options(16, 4, **DEFAULTS)
    assert list(options) == [
        "d_model", "n_heads", "n_kv_heads", "head_dim", "d_context", "causal", "qkv_bias", "scale", "dropout",
        "rope", "gate", "softcap", "window", "sink_tokens", "chunk", "temperature",
    ]  # fmt: skip
    assert (options["n_kv_heads"], options["head_dim"], options["d_context"]) == (4, 4, 16)
    got = check_mha_options(16, 4, **{**DEFAULTS, "head_dim": 8, "d_context": 6, "temperature": [2, 0.5]})
    assert (got["head_dim"], got["d_context"], got["temperature"]) == (8, 6, (2.0, 0.5))


@pytest.mark.parametrize(
    "change, message",
    [
        (dict(n_kv_heads=3), "n_heads=4 is not divisible by n_kv_heads=3"),
        (dict(window=4, chunk=2, causal=True), "pass window or chunk, not both"),
        (dict(sinks=True), "sinks=True is for causal self-attention"),
        (dict(sink_tokens=2, causal=True), "sink_tokens=2 keeps the first tokens inside a window"),
        (dict(qkv_bias=True, bias=True), "qkv_bias=True adds biases to q/k/v only"),
        (dict(qk_norm="per_token"), "qk_norm must be one of"),
    ],
)
def test_options_that_do_not_go_together_are_refused(change, message):
    with pytest.raises(ValueError, match=message):
        check_mha_options(16, 4, **{**DEFAULTS, **change})
