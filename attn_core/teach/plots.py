"""Static pictures of attention maps (matplotlib): one map, or a layer × head grid.

    :func:`heatmap` one map with token labels, a colorbar and masked cells shown as masked;
    :func:`attention_grid` a layer × head grid for a whole model.

The argument checks here (:func:`as_tensor`, :func:`to_4d`, :func:`check_labels`,
:func:`check_mask`) are shared with the explorers (:mod:`attn_core.teach.explorers`).

Shape legend:
    L    layers, H heads
    T_q  queries (rows), T_k keys (columns)
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from ..checks import check_number

__all__ = ["heatmap", "attention_grid", "as_tensor", "to_4d", "check_labels", "check_mask", "LOG_FLOOR"]

LOG_FLOOR = 1e-3  # smallest weight resolved on the log scale (the explorer page uses it too)


# --------------------------------------------------------------------------- helpers
def as_tensor(name: str, x: object) -> torch.Tensor:
    if not isinstance(x, torch.Tensor):
        try:
            import numpy as np

            if isinstance(x, np.ndarray):
                return torch.from_numpy(x)
        except ImportError:  # pragma: no cover - numpy ships with torch
            pass
        raise TypeError(f"{name} must be a torch.Tensor or numpy array, got {type(x).__name__}")
    return x.detach().cpu()


def to_4d(name: str, x: torch.Tensor) -> torch.Tensor:
    """Accept ``(T_q, T_k)``, ``(H, T_q, T_k)`` or ``(L, H, T_q, T_k)``; return 4-D."""
    if x.dim() == 2:
        return x[None, None]  # (1, 1, T_q, T_k)
    if x.dim() == 3:
        return x[None]  # (1, H, T_q, T_k)
    if x.dim() == 4:
        return x
    raise ValueError(f"{name} must have shape (T_q, T_k), (H, T_q, T_k) or (L, H, T_q, T_k), got {tuple(x.shape)}")


def check_labels(name: str, tokens: Sequence[str] | None, n: int) -> list[str]:
    if tokens is None:
        return [str(i) for i in range(n)]
    tokens = [str(t) for t in tokens]
    if len(tokens) != n:
        raise ValueError(f"{name} has {len(tokens)} labels but the maps have {n} along that axis")
    return tokens


def check_mask(name: str, mask: object, shape: tuple[int, int]) -> torch.Tensor:
    mask = as_tensor(name, mask)
    if mask.dtype != torch.bool:
        raise TypeError(f"{name} must be a boolean tensor (True = may attend), got dtype={mask.dtype}")
    if tuple(mask.shape) != shape:
        raise ValueError(f"{name} must have shape (T_q, T_k)={shape}, got {tuple(mask.shape)}")
    return mask


# --------------------------------------------------------------------------- static pictures
def heatmap(
    weights,
    q_tokens: Sequence[str] | None = None,
    k_tokens: Sequence[str] | None = None,
    *,
    mask=None,
    ax=None,
    log: bool = False,
    title: str | None = None,
    annotate: bool | None = None,
    colorbar: bool = True,
    cmap: str = "viridis",
    xlabel: str = "key (attended to)",
    ylabel: str = "query (attending)",
    vrange: tuple[float, float] | None = None,
):
    """Draw one attention map: rows are queries, columns are keys.

    Args:
        weights: The attention weights (or any scores) to draw.
        q_tokens: Row labels (queries). Default: positions.
        k_tokens: Column labels (keys). Default: ``q_tokens`` if the map is square.
        mask: Boolean, ``True`` = may attend. Blocked cells are drawn hatched grey, as
            *masked*, rather than as a dark zero that looks like a learned value.
        ax: A matplotlib Axes to draw into (a new figure otherwise).
        log: Logarithmic colour scale, for maps where one key dominates.
        title: Axes title.
        annotate: Write the values in the cells (default: when the map is at most 8×8).
        colorbar: Add a colorbar.
        cmap: Matplotlib colormap name.
        xlabel: Title of the columns' axis (another one for maps that are not attention).
        ylabel: Title of the rows' axis.
        vrange: The colour scale's ``(low, high)`` (e.g. ``(0, 1)`` for weights, to match
            another view); default: from the data (a log scale's low end stays above 0).

    Returns:
        The matplotlib Axes.

    Shapes:
        weights: ``(T_q, T_k)``; mask: ``(T_q, T_k)``
    """
    import matplotlib.pyplot as plt
    import numpy as np
    from matplotlib.colors import LogNorm, Normalize

    w = as_tensor("weights", weights)
    if w.dim() != 2:
        raise ValueError(f"weights must have shape (T_q, T_k), got {tuple(w.shape)}; use attention_grid for more")
    T_q, T_k = w.shape
    q_labels = check_labels("q_tokens", q_tokens, T_q)
    if k_tokens is None and T_q == T_k:
        k_tokens = q_tokens
    k_labels = check_labels("k_tokens", k_tokens, T_k)
    data = w.double().numpy()
    blocked = np.zeros_like(data, dtype=bool)
    if mask is not None:
        blocked = ~check_mask("mask", mask, (T_q, T_k)).numpy()
    shown = np.ma.masked_array(data, mask=blocked)
    if ax is None:
        size = max(3.0, min(9.0, 0.45 * max(T_q, T_k) + 1.5))
        _, ax = plt.subplots(figsize=(size + (1.0 if colorbar else 0.0), size))
    if vrange is not None and not (len(vrange) == 2 and float(vrange[0]) < float(vrange[1])):
        raise ValueError(f"vrange must be (low, high) with low < high, got {vrange!r}")
    if log:
        positive = data[(data > 0) & ~blocked]
        vmin = max(LOG_FLOOR, float(positive.min())) if positive.size else LOG_FLOOR
        vmax = max(vmin * 10, float(data.max()))
        if vrange is not None:
            vmin, vmax = max(LOG_FLOOR, float(vrange[0])), float(vrange[1])
        norm = LogNorm(vmin=vmin, vmax=vmax, clip=True)
    elif vrange is not None:
        norm = Normalize(vmin=float(vrange[0]), vmax=float(vrange[1]))
    else:
        norm = Normalize(vmin=min(0.0, float(shown.min())), vmax=float(shown.max()) if shown.count() else 1.0)
    colormap = plt.get_cmap(cmap).with_extremes(bad="#d9d9d9")  # masked cells: light grey
    image = ax.imshow(shown, cmap=colormap, norm=norm, aspect="auto", interpolation="nearest")
    if blocked.any():
        rows, cols = np.nonzero(blocked)
        for r, c in zip(rows, cols):
            ax.add_patch(plt.Rectangle((c - 0.5, r - 0.5), 1, 1, fill=False, hatch="///", lw=0, color="#9a9a9a"))
    ax.set_xticks(range(T_k), k_labels, rotation=90 if max(map(len, k_labels)) > 2 else 0)
    ax.set_yticks(range(T_q), q_labels)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    if title:
        ax.set_title(title)
    if annotate is None:
        annotate = T_q <= 8 and T_k <= 8
    if annotate:
        for r in range(T_q):
            for c in range(T_k):
                if not blocked[r, c]:
                    value = data[r, c]
                    light = norm(value) < 0.6
                    ax.text(
                        c, r, f"{value:.2f}", ha="center", va="center", fontsize=8, color="white" if light else "black"
                    )
    if colorbar:
        ax.figure.colorbar(image, ax=ax, fraction=0.046, pad=0.04)
    return ax


def attention_grid(
    weights,
    q_tokens: Sequence[str] | None = None,
    k_tokens: Sequence[str] | None = None,
    *,
    layer_names: Sequence[str] | None = None,
    log: bool = False,
    suptitle: str | None = None,
    cell_size: float = 2.2,
    label_size: float = 9.0,
):
    """Draw every head of every layer: a grid with one row per layer, one column per head.

    The defaults keep a 2-layer × 4-head grid of 16 tokens within a book page's width
    (about 9.6 inches), so that the page shows it close to its own size and 9-point token
    labels stay readable; a wider grid is shrunk by the page, its labels with it.

    Args:
        weights: Attention weights of a whole model.
        q_tokens: Row labels of each map (shown on the first column only).
        k_tokens: Column labels (shown on the last row only).
        layer_names: One name per layer (default ``layer 0``, ``layer 1``, ...).
        log: Logarithmic colour scale.
        suptitle: Figure title.
        cell_size: Inches per map.
        label_size: Font size (points) of the token labels; labels are drawn for up to
            24 tokens per axis.

    Returns:
        The matplotlib Figure.

    Shapes:
        weights: ``(L, H, T_q, T_k)`` (or ``(H, T_q, T_k)`` for one layer)
    """
    import matplotlib.pyplot as plt
    from matplotlib.colors import LogNorm, Normalize

    w = to_4d("weights", as_tensor("weights", weights))
    L, H, T_q, T_k = w.shape
    q_labels = check_labels("q_tokens", q_tokens, T_q)
    k_labels = check_labels("k_tokens", k_tokens if k_tokens is not None or T_q != T_k else q_tokens, T_k)
    names = list(layer_names) if layer_names is not None else [f"layer {i}" for i in range(L)]
    if len(names) != L:
        raise ValueError(f"layer_names has {len(names)} names for {L} layers")
    check_number("cell_size", cell_size, low=0.0, low_open=True)
    check_number("label_size", label_size, low=0.0, low_open=True)
    # Constrained layout: the maps take the space that fixed margins would waste.
    fig, axes = plt.subplots(
        L, H, figsize=(cell_size * H + 0.8, cell_size * L + 0.5), squeeze=False, layout="constrained"
    )
    data = w.double()
    norm = LogNorm(vmin=LOG_FLOOR, vmax=1.0, clip=True) if log else Normalize(vmin=0.0, vmax=float(data.max()))
    image = None
    for layer in range(L):
        for head in range(H):
            ax = axes[layer][head]
            image = ax.imshow(data[layer, head].numpy(), cmap="viridis", norm=norm, interpolation="nearest")
            ax.set_xticks([])
            ax.set_yticks([])
            if layer == 0:
                ax.set_title(f"head {head}", fontsize=label_size + 1)
            if head == 0:
                ax.set_ylabel(names[layer], fontsize=label_size + 1)
                if T_q <= 24:
                    ax.set_yticks(range(T_q), q_labels, fontsize=label_size)
            if layer == L - 1 and T_k <= 24:
                long_labels = max(map(len, k_labels)) > 2  # single letters stand upright
                ax.set_xticks(range(T_k), k_labels, fontsize=label_size, rotation=90 if long_labels else 0)
            ax.tick_params(length=0, pad=1.5)
    fig.colorbar(image, ax=axes, fraction=0.025, pad=0.01)
    if suptitle:
        fig.suptitle(suptitle)
    return fig
