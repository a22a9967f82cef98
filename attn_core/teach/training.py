"""A tiny, seeded trainer: enough to show *trained* attention maps within seconds on a CPU.

``train(model, batch_fn, steps=..., lr=...)`` runs AdamW with a linear learning-rate
warm-up (then constant, or a cosine decay), cross-entropy on the scored positions of
each batch, and gradient clipping. Everything random inside it (the batches, dropout)
is drawn from the given ``seed``, so the same model state and seed give the same loss
history, bit for bit, on the same machine.

The progress bar is off unless asked for (``progress=True``): notebooks compare their
committed outputs under nbval, and a bar's text changes from run to run. When asked
for, it is an ipywidgets bar in a notebook (replaced by one deterministic line at the
end) and a text bar on stderr elsewhere.

Shape legend:
    B    batch size
    T    sequence length
    V    vocabulary size
"""

from __future__ import annotations

import math
import sys
import time
from dataclasses import dataclass, field
from typing import Callable, NamedTuple

import torch
import torch.nn.functional as F
from torch import nn

from ..checks import check_callable, check_choice, check_instance, check_int, check_number, check_tensor
from ..modules.moe import moe_aux_loss, update_selection_biases
from .tasks import IGNORE_INDEX

__all__ = ["TrainResult", "train", "lm_loss", "moe_lm_loss", "accuracy", "Evaluation", "evaluate", "lr_at"]

SCHEDULES = ("constant", "cosine")


@dataclass
class TrainResult:
    """What :func:`train` returns.

    Attributes:
        losses: The training loss of every step, as Python floats.
        final_loss: Mean loss of the last ``min(20, steps)`` steps (less noisy than the last one).
        seconds: Wall time of the training loop.
        tokens_per_second: Input tokens processed per second (``B·T·steps / seconds``).
        steps: Number of steps run (fewer than asked if the loss diverged).
        lrs: The learning rate used at every step.
        diverged: The loss became inf/NaN; training stopped there (``final_loss`` is NaN).
    """

    losses: list[float]
    final_loss: float
    seconds: float
    tokens_per_second: float
    steps: int
    lrs: list[float] = field(default_factory=list)
    diverged: bool = False

    def __repr__(self) -> str:  # no timings: a printed result must reproduce under nbval
        return f"TrainResult(steps={self.steps}, final_loss={self.final_loss:.3f}, diverged={self.diverged})"


def _token_loss(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    # (B, T, V) -> (B*T, V) and (B, T) -> (B*T,): one prediction per row
    return F.cross_entropy(logits.flatten(0, 1), targets.flatten(), ignore_index=IGNORE_INDEX)


def lm_loss(model: nn.Module, batch) -> torch.Tensor:
    """Mean cross-entropy of ``model(inputs)`` against ``targets``, over the scored positions.

    Shapes:
        batch: ``(inputs (B, T), targets (B, T))``; ``model(inputs)``: ``(B, T, V)``
    """
    inputs, targets = batch[0], batch[-1]
    return _token_loss(model(inputs), targets)  # model(inputs): (B, T, V)


class Evaluation(NamedTuple):
    """What :func:`evaluate` returns (a tuple: ``acc, loss = evaluate(...)``).

    Attributes:
        accuracy: Fraction of scored positions where the most likely token is the target.
        loss: Mean cross-entropy over the scored positions (what :func:`lm_loss` computes).
    """

    accuracy: float
    loss: float


def _eval_logits(model: nn.Module, inputs: torch.Tensor, targets: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Check a held-out batch, run ``model`` on it in eval mode.

    Shapes:
        inputs, targets: ``(B, T)`` -> logits ``(B, T, V)``, scored positions ``(B, T)`` (bool)
    """
    check_tensor("inputs", inputs, ("B", "T"), integer=True)
    check_tensor("targets", targets, ("B", "T"), integer=True)
    if targets.shape != inputs.shape:
        raise ValueError(
            f"targets must have the shape of inputs, got targets {tuple(targets.shape)} "
            f"and inputs {tuple(inputs.shape)}"
        )
    scored = targets != IGNORE_INDEX  # (B, T)
    if not scored.any():
        raise ValueError("targets has no scored positions (all equal IGNORE_INDEX)")
    was_training = model.training
    model.eval()
    try:
        logits = model(inputs)  # (B, T, V)
    finally:
        model.train(was_training)
    return logits, scored


def _accuracy(logits: torch.Tensor, targets: torch.Tensor, scored: torch.Tensor) -> float:
    right = logits.argmax(dim=-1)[scored] == targets[scored]  # (number of scored positions,)
    return right.float().mean().item()


@torch.no_grad()
def evaluate(model: nn.Module, inputs: torch.Tensor, targets: torch.Tensor) -> Evaluation:
    """Accuracy and loss of ``model`` on held-out data, from one forward pass in eval mode.

    The same numbers as :func:`accuracy` and :func:`lm_loss`, which would each run the
    model; the model's train/eval mode is restored afterwards.

    Shapes:
        inputs, targets: ``(B, T)``; ``model(inputs)``: ``(B, T, V)``

    Raises:
        TypeError: ``inputs`` or ``targets`` is not an integer tensor.
        ValueError: ``targets`` is not the shape of ``inputs``, or has no scored position
            (every entry equals ``IGNORE_INDEX``).
    """
    logits, scored = _eval_logits(model, inputs, targets)
    return Evaluation(_accuracy(logits, targets, scored), _token_loss(logits, targets).item())


@torch.no_grad()
def accuracy(model: nn.Module, inputs: torch.Tensor, targets: torch.Tensor) -> float:
    """Fraction of scored positions where the model's most likely next token is the target.

    The model runs in eval mode; its mode is restored afterwards. :func:`evaluate` gives
    the loss of the same forward pass too.

    Shapes:
        inputs, targets: ``(B, T)``; ``model(inputs)``: ``(B, T, V)``

    Raises:
        TypeError: ``inputs`` or ``targets`` is not an integer tensor.
        ValueError: ``targets`` is not the shape of ``inputs``, or has no scored position.
    """
    logits, scored = _eval_logits(model, inputs, targets)
    return _accuracy(logits, targets, scored)


def moe_lm_loss(aux_weight: float = 0.0, bias_rate: float = 0.0) -> Callable[[nn.Module, tuple], torch.Tensor]:
    """A ``loss_fn`` for :func:`train` of a mixture-of-experts model: LM loss + ``aux_weight`` · balancing loss.

    With ``bias_rate > 0`` it also updates every layer's selection bias after each forward
    (auxiliary-loss-free balancing: the bias is a buffer, outside the gradient, so updating
    it before ``backward`` changes nothing in this step's gradient).

    Args:
        aux_weight: The weight ``α`` of :func:`~attn_core.modules.moe.moe_aux_loss` (Switch: 0.01; 0: none).
        bias_rate: DeepSeek-V3's ``γ`` (0: no bias update).
    """
    check_number("aux_weight", aux_weight, low=0.0)
    check_number("bias_rate", bias_rate, low=0.0)

    def loss_fn(model: nn.Module, batch) -> torch.Tensor:
        loss = lm_loss(model, batch)
        if aux_weight:
            loss = loss + aux_weight * moe_aux_loss(model)
        if bias_rate:
            update_selection_biases(model, bias_rate)
        return loss

    return loss_fn


def lr_at(
    step: int, *, steps: int, lr: float, warmup: int, schedule: str = "constant", min_lr_ratio: float = 0.1
) -> float:
    """Learning rate of step ``step`` (0-based): linear warm-up over ``warmup`` steps, then the schedule.

    Warm-up goes ``lr/warmup, 2·lr/warmup, ..., lr``; ``"cosine"`` then decays to
    ``min_lr_ratio·lr`` at the last step.
    """
    if warmup > 0 and step < warmup:
        return lr * (step + 1) / warmup
    if schedule == "constant":
        return lr
    span = max(1, steps - warmup - 1)
    progress = min(1.0, (step - warmup) / span)
    return lr * (min_lr_ratio + (1 - min_lr_ratio) * 0.5 * (1 + math.cos(math.pi * progress)))


class _Progress:
    """An ipywidgets bar in a notebook kernel, a text bar on stderr elsewhere."""

    def __init__(self, steps: int) -> None:
        self.steps, self.bar, self.handle = steps, None, None
        self.every = max(1, steps // 50)
        try:
            from IPython import get_ipython

            in_kernel = get_ipython() is not None and hasattr(get_ipython(), "kernel")
        except ImportError:  # pragma: no cover - IPython ships with Jupyter
            in_kernel = False
        if in_kernel:
            import ipywidgets as widgets
            from IPython.display import display

            self.bar = widgets.IntProgress(value=0, min=0, max=steps, description="training")
            self.handle = display(self.bar, display_id=True)

    def update(self, step: int, loss: float) -> None:
        if (step + 1) % self.every and step + 1 != self.steps:
            return
        if self.bar is not None:
            self.bar.value = step + 1
            self.bar.description = f"loss {loss:.3f}"
        else:
            done = int(30 * (step + 1) / self.steps)
            sys.stderr.write(f"\r[{'#' * done}{'.' * (30 - done)}] {step + 1}/{self.steps} loss {loss:.3f}")
            sys.stderr.flush()

    def close(self, final_loss: float) -> None:
        if self.bar is not None:
            self.bar.close()
            # Replace the bar by a line with no timing in it: the same text on every run.
            self.handle.update(f"trained {self.steps} steps, final loss {final_loss:.3f}")
        else:
            sys.stderr.write("\n")


def _check_train_args(model, batch_fn, steps, warmup, batch_size, seed, lr, weight_decay, grad_clip, schedule) -> None:
    """Check :func:`train`'s arguments up to ``schedule``; raise naming the first bad value."""
    check_instance("model", model, nn.Module)
    check_callable("batch_fn", batch_fn)
    check_int("steps", steps, minimum=1)
    check_int("warmup", warmup, minimum=0)
    check_int("batch_size", batch_size, minimum=1)
    check_int("seed", seed, minimum=0)
    check_number("lr", lr, low=0.0, low_open=True)
    check_number("weight_decay", weight_decay, low=0.0)
    if grad_clip is not None:
        check_number("grad_clip", grad_clip, low=0.0, low_open=True)
    check_choice("schedule", schedule, SCHEDULES)


def _adamw(
    model: nn.Module, *, lr: float, betas: tuple[float, float], weight_decay: float
) -> tuple[torch.optim.AdamW, list[nn.Parameter]]:
    """AdamW over the trainable parameters, decaying matrices only; and those parameters (to clip)."""
    params = [p for p in model.parameters() if p.requires_grad]
    if not params:
        raise ValueError("model has no trainable parameters")
    groups = [  # norm gains, biases and scalar gains (dim < 2) are not pulled towards zero
        {"params": [p for p in params if p.dim() >= 2], "weight_decay": weight_decay},
        {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0},
    ]
    return torch.optim.AdamW([g for g in groups if g["params"]], lr=lr, betas=betas), params


def _optimizer_step(
    optimizer,
    loss: torch.Tensor,
    params: list[nn.Parameter],
    grad_clip: float | None,
) -> None:
    """Backpropagate, clip the gradient norm (if ``grad_clip``), update."""
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    if grad_clip is not None:
        nn.utils.clip_grad_norm_(params, grad_clip)
    optimizer.step()


def _measure(callback: Callable[[int, nn.Module], object], step: int, model: nn.Module) -> None:
    """Call ``callback(step, model)`` without changing the training: no graph, the random state put back."""
    with torch.no_grad(), torch.random.fork_rng(devices=[]):
        callback(step, model)
    model.train()


def _result(losses: list[float], lrs: list[float], tokens: int, seconds: float) -> TrainResult:
    """The :class:`TrainResult` of a loop that recorded ``losses`` (the last one inf/NaN if it diverged)."""
    diverged = not math.isfinite(losses[-1])
    tail = losses[-min(20, len(losses)) :]
    final = math.nan if diverged else sum(tail) / len(tail)
    return TrainResult(
        losses=losses,
        final_loss=final,
        seconds=seconds,
        tokens_per_second=tokens / max(seconds, 1e-9),
        steps=len(losses),
        lrs=lrs,
        diverged=diverged,
    )


def train(
    model: nn.Module,
    batch_fn: Callable[..., tuple],
    *,
    steps: int = 500,
    lr: float = 3e-3,
    warmup: int = 50,
    batch_size: int = 32,
    seed: int = 0,
    weight_decay: float = 0.01,
    schedule: str = "constant",
    grad_clip: float | None = 1.0,
    betas: tuple[float, float] = (0.9, 0.98),
    loss_fn: Callable[[nn.Module, tuple], torch.Tensor] | None = None,
    progress: bool = False,
    callback: Callable[[int, nn.Module], object] | None = None,
    callback_every: int = 1,
) -> TrainResult:
    """Train ``model`` on batches from ``batch_fn`` with AdamW and a warm-up; return the loss history.

    Args:
        model: A module; with the default ``loss_fn``, ``model(inputs)`` returns logits.
        batch_fn: ``batch_fn(batch_size, generator=g)`` returns a batch, e.g.
            ``functools.partial(attn_core.teach.tasks.induction_task, n=16, vocab_size=32)``.
        steps: Optimisation steps.
        lr: Peak learning rate.
        warmup: Steps of linear warm-up from ``lr/warmup`` to ``lr`` (0: none).
        batch_size: ``B``.
        seed: Seeds the batches and everything else random during training (dropout).
            The global RNG state is restored afterwards.
        weight_decay: AdamW's decoupled weight decay, applied to matrices only (never to
            norm gains, biases or the simplified blocks' scalar gains).
        schedule: ``"constant"`` after warm-up, or ``"cosine"`` decay to ``0.1·lr``.
        grad_clip: Clip the global gradient norm to this value (None: no clipping).
        betas: AdamW's betas.
        loss_fn: ``loss_fn(model, batch)`` returns the scalar loss; default :func:`lm_loss`.
        progress: Show a progress bar (off by default, so that outputs reproduce).
        callback: ``callback(step, model)``, called after every ``callback_every``-th
            optimisation step (``step`` counts the steps done: ``callback_every, 2·callback_every, ...``)
            and after the last one, to measure the model *during* training (e.g. its head
            scores). Its return value is ignored. It runs under ``torch.no_grad()`` with the
            random state saved and restored, so that it does not change the training: the
            loss history is the same with or without it. The model is put back in training
            mode after it.
        callback_every: Steps between two calls of ``callback``.

    Returns:
        A :class:`TrainResult`. The model is left in training mode, trained in place. A
        loss that becomes inf/NaN stops training (``result.diverged``) instead of raising.

    Raises:
        TypeError, ValueError: Bad arguments, naming the value.
    """
    _check_train_args(model, batch_fn, steps, warmup, batch_size, seed, lr, weight_decay, grad_clip, schedule)
    if callback is not None:
        check_callable("callback", callback)
    check_int("callback_every", callback_every, minimum=1)
    loss_fn = lm_loss if loss_fn is None else loss_fn
    optimizer, params = _adamw(model, lr=lr, betas=betas, weight_decay=weight_decay)
    generator = torch.Generator().manual_seed(seed)
    bar = _Progress(steps) if progress else None
    losses, lrs, tokens = [], [], 0
    model.train()
    # fork_rng: seed dropout & co. here without changing the caller's random stream.
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        start = time.perf_counter()
        for step in range(steps):
            step_lr = lr_at(step, steps=steps, lr=lr, warmup=warmup, schedule=schedule)
            for group in optimizer.param_groups:
                group["lr"] = step_lr
            batch = batch_fn(batch_size, generator=generator)
            loss = loss_fn(model, batch)
            diverged = not torch.isfinite(loss)
            if not diverged:
                _optimizer_step(optimizer, loss, params, grad_clip)
            losses.append(loss.item())
            lrs.append(step_lr)
            if diverged:  # record it and stop (an experiment may be *about* divergence)
                break
            tokens += batch[0].numel()
            if bar is not None:
                bar.update(step, losses[-1])
            if callback is not None and ((step + 1) % callback_every == 0 or step + 1 == steps):
                _measure(callback, step + 1, model)
        seconds = time.perf_counter() - start
    result = _result(losses, lrs, tokens, seconds)
    if bar is not None:
        bar.close(result.final_loss)
    return result
