"""The pair task's longer training, for exercise 3.5 (private to :mod:`.ch03`)."""

from __future__ import annotations

import functools

import torch
import torch.nn.functional as F

from ...config import DecoderConfig
from ...model.decoder import DecoderLM
from ..tasks import IGNORE_INDEX
from ..training import train

__all__ = ["pair_models", "pair_task_longer"]

#: The pair task of the chapter: position t names (x_{t-1}, x_{t-2}) as one of 64 classes.
_PAIR_V, _PAIR_T = 8, 8


def _pair_batch(batch_size: int, generator: torch.Generator | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    x = torch.randint(0, _PAIR_V, (batch_size, _PAIR_T), generator=generator)  # (B, T)
    y = torch.full_like(x, IGNORE_INDEX)  # positions 0 and 1 are not scored
    y[:, 2:] = x[:, 1:-1] * _PAIR_V + x[:, :-2]
    return x, y


@functools.lru_cache(maxsize=2)
def pair_models(n_heads: int, steps: int = 320, seeds: tuple[int, ...] = (0, 1)) -> dict[str, float]:
    """``n_heads`` heads of width ``32 // n_heads`` trained on the pair task: see :func:`pair_task_longer`."""
    x, y = _pair_batch(1024, torch.Generator().manual_seed(99))
    t = torch.arange(2, _PAIR_T)  # the scored queries
    losses, weights = [], []
    with torch.random.fork_rng():  # the reader's global random state is left as it was
        for seed in seeds:
            torch.manual_seed(seed)
            config = DecoderConfig(vocab_size=_PAIR_V**2, n_layers=1, d_model=32, n_heads=n_heads, max_len=_PAIR_T)
            model = DecoderLM(config)
            train(model, _pair_batch, steps=steps, lr=1e-2, warmup=10, seed=seed)
            model.eval()
            with torch.no_grad():
                logits, (w,) = model(x, return_weights=True)  # (B, T, 64), (B, H, T, T)
            losses.append(F.cross_entropy(logits.flatten(0, 1), y.flatten(), ignore_index=IGNORE_INDEX).item())
            weights.append(torch.stack([w[:, :, t, t - k].mean(dim=(0, 2)) for k in (1, 2)]))  # (2, H)
    return {
        "loss": sum(losses) / len(losses),
        "largest": max(on.max().item() for on in weights),
        "split": min(on.max(dim=1).values.min().item() for on in weights),
    }


def pair_task_longer() -> dict[str, dict[str, float]]:
    """What 320 steps on the pair task give one head of width 32 and four of width 8 (2 seeds each).

    For each (``"1 head, D=32"``, ``"4 heads, D=8"``): ``"loss"``, the mean test loss in nats;
    ``"largest"``, the largest mean weight any head puts on t-1 or on t-2 on any seed; and
    ``"split"``, on the worst seed, the lower of the best head's weight on t-1 and the best
    head's weight on t-2 (high when one head takes each position). Trained once per session.
    """
    return {"1 head, D=32": pair_models(1), "4 heads, D=8": pair_models(4)}
