"""attn_core.modules.dropout.Dropout: torch.nn.Dropout, with nothing to pay when it drops nothing."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from attn_core import DecoderConfig, DecoderLM
from attn_core.modules.dropout import Dropout


def test_dropout_is_torch_dropout_in_every_mode():
    x = torch.randn(64, 32)
    for p in (0.0, 0.3):
        ours, theirs = Dropout(p), nn.Dropout(p)
        assert repr(ours) == repr(theirs) and isinstance(ours, nn.Dropout)
        for training in (True, False):
            ours.train(training), theirs.train(training)
            torch.manual_seed(0)
            expected = theirs(x)
            torch.manual_seed(0)
            got = ours(x)
            assert torch.equal(got, expected), (p, training)
            # Where torch's returns its input itself (nothing dropped), so does ours.
            assert (got is x) == (expected is x), (p, training)
    assert ours.train()(x).ne(x).any()  # p = 0.3 in training mode drops


def test_dropout_in_eval_mode_skips_the_module_call():
    calls = []
    drop = Dropout(0.5)
    drop.register_forward_hook(lambda *args: calls.append(args))
    x = torch.randn(4, 4)
    drop.eval()
    assert drop(x) is x and calls == []  # no module call, so no hook
    drop.train()
    drop(x)
    assert len(calls) == 1  # training mode: the full nn.Module call, hooks included


def test_dropout_gradcheck_and_models_use_it():
    drop = Dropout(0.0)
    x = torch.randn(3, 5, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(drop, (x,))
    model = DecoderLM(DecoderConfig.llama_like(vocab_size=16, n_layers=1, d_model=16, n_heads=2, dropout=0.1))
    kinds = {type(m) for m in model.modules() if isinstance(m, nn.Dropout)}
    assert kinds == {Dropout}


def test_dropout_bad_input():
    with pytest.raises(ValueError, match="dropout probability"):
        Dropout(1.5)
