"""attn_core.train: determinism, the schedule, weight decay groups, divergence, progress, bad input."""

from __future__ import annotations

import functools
import math
import re

import pytest
import torch
from torch import nn

from attn_core import DecoderConfig, DecoderLM, train
from attn_core.teach.tasks import IGNORE_INDEX, copy_task
from attn_core.teach.training import Evaluation, TrainResult, accuracy, evaluate, lm_loss, lr_at

BATCHES = functools.partial(copy_task, n=4, vocab_size=10)


def _tiny(seed: int = 0, dropout: float = 0.0) -> DecoderLM:
    torch.manual_seed(seed)
    return DecoderLM(
        DecoderConfig.gpt2_like(vocab_size=10, n_layers=1, d_model=16, n_heads=2, max_len=8, dropout=dropout)
    )


def test_same_seed_same_loss_history():
    a = train(_tiny(dropout=0.1), BATCHES, steps=12, lr=1e-2, warmup=3, batch_size=8, seed=3)
    b = train(_tiny(dropout=0.1), BATCHES, steps=12, lr=1e-2, warmup=3, batch_size=8, seed=3)
    assert a.losses == b.losses  # bit for bit, dropout included
    c = train(_tiny(dropout=0.1), BATCHES, steps=12, lr=1e-2, warmup=3, batch_size=8, seed=4)
    assert a.losses != c.losses
    assert isinstance(a, TrainResult) and a.steps == 12 and len(a.lrs) == 12
    assert a.tokens_per_second == pytest.approx(12 * 8 * 8 / a.seconds)  # steps · B · T tokens
    assert a.final_loss == pytest.approx(sum(a.losses[-12:]) / 12)


def test_global_rng_untouched():
    model = _tiny(dropout=0.1)
    torch.manual_seed(123)
    expected = torch.rand(3)
    torch.manual_seed(123)
    train(model, BATCHES, steps=2, batch_size=4, seed=0)
    assert torch.equal(torch.rand(3), expected)


def test_loss_decreases_on_copy():
    result = train(_tiny(), BATCHES, steps=80, lr=1e-2, warmup=10, batch_size=16, seed=0)
    assert sum(result.losses[-10:]) / 10 < 0.8 * sum(result.losses[:10]) / 10


def test_schedule():
    lrs = [lr_at(s, steps=100, lr=1.0, warmup=10) for s in range(100)]
    assert lrs[:10] == pytest.approx([(s + 1) / 10 for s in range(10)])
    assert all(v == 1.0 for v in lrs[10:])
    cos = [lr_at(s, steps=100, lr=1.0, warmup=10, schedule="cosine") for s in range(100)]
    assert cos[10] == pytest.approx(1.0) and cos[-1] == pytest.approx(0.1)
    assert all(x >= y for x, y in zip(cos[10:], cos[11:]))  # monotone decay
    result = train(_tiny(), BATCHES, steps=6, lr=0.01, warmup=3, batch_size=4, schedule="cosine")
    assert result.lrs[:3] == pytest.approx([0.01 / 3, 0.02 / 3, 0.01])


class _Unused(nn.Module):
    """A model with parameters the loss ignores: only weight decay can move them."""

    def __init__(self) -> None:
        super().__init__()
        self.emb = nn.Embedding(10, 10)
        self.matrix = nn.Parameter(torch.ones(3, 3))
        self.vector = nn.Parameter(torch.ones(3))

    def forward(self, idx):
        return self.emb(idx) + 0 * (self.matrix.sum() + self.vector.sum())


def test_weight_decay_only_on_matrices():
    model = _Unused()
    train(model, BATCHES, steps=5, lr=0.1, warmup=0, weight_decay=0.5, batch_size=4, grad_clip=None)
    assert (model.matrix < 1).all()  # decayed
    assert torch.equal(model.vector, torch.ones(3))  # not decayed


def test_divergence_stops_and_is_reported():
    calls = []

    def exploding(model, batch):
        calls.append(1)
        loss = lm_loss(model, batch)
        return loss if len(calls) < 3 else loss * float("nan")

    result = train(_tiny(), BATCHES, steps=10, batch_size=4, loss_fn=exploding)
    assert result.diverged and result.steps == 3 and math.isnan(result.final_loss)
    assert "diverged=True" in repr(result)


def test_progress_off_by_default_and_on_request(capsys):
    result = train(_tiny(), BATCHES, steps=3, batch_size=4)
    captured = capsys.readouterr()
    assert captured.out == "" and captured.err == ""
    # no timing in the repr: a printed result reproduces under nbval
    assert re.fullmatch(r"TrainResult\(steps=3, final_loss=\d+\.\d{3}, diverged=False\)", repr(result))
    train(_tiny(), BATCHES, steps=3, batch_size=4, progress=True)
    captured = capsys.readouterr()
    assert captured.out == "" and "3/3" in captured.err


def test_accuracy():
    model = _tiny().eval()
    inputs, targets = BATCHES(8, generator=torch.Generator().manual_seed(0))
    predictions = model(inputs).argmax(-1)
    scored = targets != IGNORE_INDEX
    expected = (predictions[scored] == targets[scored]).float().mean().item()
    assert accuracy(model, inputs, targets) == pytest.approx(expected)
    forced = torch.where(scored, predictions, targets)
    assert accuracy(model, inputs, forced) == 1.0
    with pytest.raises(ValueError, match="no scored positions"):
        accuracy(model, inputs, torch.full_like(targets, IGNORE_INDEX))


def test_evaluate_is_accuracy_and_lm_loss_of_one_forward_pass():
    model = _tiny(dropout=0.1)  # in train mode: evaluate must switch dropout off
    inputs, targets = BATCHES(8, generator=torch.Generator().manual_seed(1))
    calls = []
    handle = model.register_forward_hook(lambda *_: calls.append(1))
    result = evaluate(model, inputs, targets)
    handle.remove()
    assert len(calls) == 1 and model.training  # one forward pass; the mode restored
    assert isinstance(result, Evaluation) and isinstance(result.loss, float)
    acc, loss = result  # a tuple
    assert acc == accuracy(model, inputs, targets)
    with torch.no_grad():
        assert loss == lm_loss(model.eval(), (inputs, targets)).item()
    assert model.training is False  # lm_loss leaves the mode alone: set above
    assert 0.0 <= acc <= 1.0 and loss > 0
    # a model right everywhere but in row 0: accuracy 1 and a loss near 0 once row 0 is
    # not scored (IGNORE_INDEX), less than 1 while it is
    wrong_row = torch.zeros_like(targets)
    wrong_row[0] = 1

    class Oracle(nn.Module):
        def forward(self, idx):
            predicted = (targets.clamp(min=0) + wrong_row) % 10  # (B, T)
            return 50.0 * nn.functional.one_hot(predicted, 10).float()  # (B, T, 10)

    assert evaluate(Oracle(), inputs, targets).accuracy < 1.0
    row_0_ignored = targets.masked_fill(wrong_row.bool(), IGNORE_INDEX)
    acc, loss = evaluate(Oracle(), inputs, row_0_ignored)
    assert acc == 1.0 and loss < 1e-6


@pytest.mark.parametrize("score", [accuracy, evaluate])
@pytest.mark.parametrize(
    "inputs,targets,error,message",
    [
        (torch.zeros(2, 4), torch.zeros(2, 4, dtype=torch.long), TypeError, "inputs must be an integer tensor"),
        (torch.zeros(2, 4, dtype=torch.long), [0, 1], TypeError, "targets must be a torch.Tensor"),
        (
            torch.zeros(8, dtype=torch.long),
            torch.zeros(8, dtype=torch.long),
            ValueError,
            r"inputs must have shape \(B, T\), got \(8,\)",
        ),
        (
            torch.zeros(2, 4, dtype=torch.long),
            torch.zeros(2, 5, dtype=torch.long),
            ValueError,
            r"targets must have the shape of inputs, got targets \(2, 5\) and inputs \(2, 4\)",
        ),
        (torch.zeros(2, 4, dtype=torch.long), torch.full((2, 4), IGNORE_INDEX), ValueError, "no scored positions"),
    ],
)
def test_scores_refuse_bad_input(score, inputs, targets, error, message):
    with pytest.raises(error, match=message):
        score(_tiny(), inputs, targets)


@pytest.mark.parametrize(
    "kwargs,error,message",
    [
        (dict(steps=0), ValueError, "steps=0"),
        (dict(lr=0.0), ValueError, "lr=0.0"),
        (dict(lr=-1), ValueError, "lr=-1"),
        (dict(warmup=-1), ValueError, "warmup=-1"),
        (dict(batch_size=2.0), TypeError, "batch_size must be an int"),
        (dict(schedule="linear"), ValueError, "schedule='linear'"),
        (dict(weight_decay=-0.1), ValueError, "weight_decay=-0.1"),
        (dict(grad_clip=0), ValueError, "grad_clip=0"),
    ],
)
def test_bad_input(kwargs, error, message):
    with pytest.raises(error, match=message):
        train(_tiny(), BATCHES, **kwargs)


def test_bad_model_and_batch_fn():
    with pytest.raises(TypeError, match="model must be an nn.Module"):
        train(lambda x: x, BATCHES)
    with pytest.raises(TypeError, match="batch_fn must be callable"):
        train(_tiny(), [1, 2])


def test_callback_every_k_steps_and_training_unchanged():
    calls = []

    def callback(step, model):
        # It may draw random numbers and switch to eval mode: neither changes the training.
        calls.append((step, model.training, torch.is_grad_enabled()))
        model.eval()
        torch.rand(5)
        return "ignored"

    plain = train(_tiny(dropout=0.1), BATCHES, steps=10, lr=1e-2, warmup=2, batch_size=8, seed=1)
    watched = train(
        _tiny(dropout=0.1),
        BATCHES,
        steps=10,
        lr=1e-2,
        warmup=2,
        batch_size=8,
        seed=1,
        callback=callback,
        callback_every=4,
    )
    assert [c[0] for c in calls] == [4, 8, 10]  # every 4th step, and the last one
    assert all(training and not grad for _, training, grad in calls)  # train mode in, no graph
    assert watched.losses == plain.losses  # bit for bit: measuring does not perturb training


def test_callback_sees_the_model_being_trained():
    model, seen = _tiny(), []
    train(model, BATCHES, steps=6, batch_size=4, seed=0, callback=lambda step, m: seen.append(m), callback_every=3)
    assert len(seen) == 2 and all(m is model for m in seen)


@pytest.mark.parametrize(
    "kwargs,error,message",
    [
        (dict(callback=3), TypeError, "callback must be callable"),
        (dict(callback=print, callback_every=0), ValueError, "callback_every=0"),
        (dict(callback_every=1.5), TypeError, "callback_every must be an int"),
    ],
)
def test_callback_bad_input(kwargs, error, message):
    with pytest.raises(error, match=message):
        train(_tiny(), BATCHES, steps=2, **kwargs)
