"""The kernel explorer of attention maps: ipywidgets controls with Python callbacks.

``explorer(fn, text=...)`` (:func:`attn_core.teach.explorers.explorer`) builds a
:class:`KernelExplorer`: ``fn(text)`` returns the maps of a sentence and is called again
when the reader edits the sentence; layer, head and query are chosen with widgets and
each change redraws a :func:`~attn_core.teach.plots.heatmap`. It needs a running kernel (the
kernel-free explorer, which also works in the static book, is
:class:`~attn_core.teach.explorers.AttentionExplorer`). Works with ipywidgets 7.7 (Colab) and 8.x.

Shape legend:
    L    layers, H heads
    T_q  queries (rows), T_k keys (columns)
"""

from __future__ import annotations

import io
from typing import Callable

import torch

from .plots import as_tensor, check_labels, heatmap, to_4d

__all__ = ["KernelExplorer"]


class KernelExplorer:
    """An ipywidgets explorer whose callbacks run in Python (build it with :func:`~attn_core.teach.explorers.explorer`).

    ``fn(text)`` returns ``(weights, tokens)``; the widgets recompute when the reader edits
    the text or moves a control. Needs a running kernel (Jupyter, Colab); the static book
    shows its first picture. Uses only widgets that exist in ipywidgets 7.7 and 8.

    Shapes:
        fn(text) -> weights ``(L, H, T, T)`` (or ``(H, T, T)``, ``(T, T)``), tokens: ``T`` strings
    """

    def __init__(self, fn: Callable[[str], tuple], text: str, *, title: str = "", log: bool = False) -> None:
        import ipywidgets as widgets

        self.fn, self.title = fn, title
        self.text = widgets.Text(
            value=text, description="sentence", continuous_update=False, layout=widgets.Layout(width="420px")
        )
        self.layer = widgets.IntSlider(description="layer", min=0, max=0)
        self.head = widgets.IntSlider(description="head", min=0, max=0)
        self.query = widgets.IntSlider(description="query", min=0, max=0)
        self.temperature = widgets.FloatLogSlider(
            description="temperature",
            value=1.0,
            base=10,
            min=-1,
            max=1,
            step=0.05,
            style={"description_width": "initial"},
        )
        self.log = widgets.Checkbox(description="log scale", value=log)
        self.image = widgets.Image(format="png")
        note = widgets.HTML("<small>Python callbacks: these controls need a running kernel (Jupyter or Colab).</small>")
        self.widget = widgets.VBox(
            [
                note,
                self.text,
                widgets.HBox([self.layer, self.head]),
                widgets.HBox([self.query, self.temperature, self.log]),
                self.image,
            ]
        )
        self._recompute()
        self.text.observe(lambda _: self._recompute(), names="value")
        for control in (self.layer, self.head, self.query, self.temperature, self.log):
            control.observe(lambda _: self._draw(), names="value")

    def _recompute(self) -> None:
        weights, tokens = self.fn(self.text.value)
        self.weights = to_4d("weights", as_tensor("weights", weights)).double()
        self.tokens = check_labels("tokens", tokens, self.weights.shape[-1])
        L, H, T_q, _ = self.weights.shape
        self.layer.max, self.head.max, self.query.max = L - 1, H - 1, T_q - 1
        self._draw()

    def current(self) -> torch.Tensor:
        """The map shown: ``softmax(log w / τ)`` = ``w^(1/τ)`` renormalised, zeros kept.

        Shapes:
            output: ``(T_q, T_k)``
        """
        w = self.weights[self.layer.value, self.head.value]
        sharpened = w.clamp_min(0) ** (1.0 / self.temperature.value)
        total = sharpened.sum(-1, keepdim=True)
        return torch.where(total > 0, sharpened / total.clamp_min(1e-300), sharpened)

    def _draw(self) -> None:
        import matplotlib.pyplot as plt

        w = self.current()
        fig, (ax_map, ax_bar) = plt.subplots(1, 2, figsize=(10, 4), gridspec_kw={"width_ratios": [3, 2]})
        heatmap(
            w,
            self.tokens,
            self.tokens if w.shape[0] == w.shape[1] else None,
            ax=ax_map,
            log=self.log.value,
            annotate=False,
            title=self.title or None,
        )
        q = self.query.value
        ax_map.add_patch(plt.Rectangle((-0.5, q - 0.5), w.shape[1], 1, fill=False, ec="#e4572e", lw=2.5))
        ax_bar.barh(range(w.shape[1]), w[q].numpy(), color="#3b75af")
        ax_bar.set_yticks(range(w.shape[1]), self.tokens[: w.shape[1]])
        ax_bar.invert_yaxis()
        ax_bar.set_xlim(0, 1)
        ax_bar.set_title(f"query “{self.tokens[q]}” attends to")
        fig.tight_layout()
        buf = io.BytesIO()
        fig.savefig(buf, format="png", dpi=70)
        plt.close(fig)
        self.image.value = buf.getvalue()

    def _ipython_display_(self) -> None:
        from IPython.display import display

        display(self.widget)

    def __repr__(self) -> str:
        L, H, T_q, T_k = self.weights.shape
        return f"KernelExplorer(L={L}, H={H}, T_q={T_q}, T_k={T_k})"
