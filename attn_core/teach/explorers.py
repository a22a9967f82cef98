"""Explorers of attention maps: one entry point, :func:`explorer`, two modes.

* **kernel-free** (``explorer(weights, tokens)``): the maps are embedded in the page as
  data and redrawn by JavaScript (``attn_core/explorer.js``), so the controls (layer,
  head, query, temperature, mask toggles, log scale) respond in Jupyter, in Colab *and* in
  the static HTML book, which has no kernel. Temperature and masks are recomputed in the
  browser from the scores. Where scripts cannot run, a static picture is shown instead.
* **kernel** (``explorer(fn, text=...)``, :class:`~attn_core.teach.kernel_explorer.KernelExplorer`):
  ipywidgets controls with Python callbacks;
  ``fn(text)`` is called again when the reader edits the sentence. Works with
  ipywidgets 7.7 (Colab) and 8.x.

Shape legend:
    L    layers, H heads
    T_q  queries (rows), T_k keys (columns)
"""

from __future__ import annotations

import base64
import hashlib
import html
import io
import json
import math
from collections.abc import Sequence

import torch

from ..checks import check_instance
from .kernel_explorer import KernelExplorer
from .plots import LOG_FLOOR, as_tensor, check_labels, check_mask, heatmap, to_4d

__all__ = ["explorer", "AttentionExplorer", "MAX_EMBED_BYTES", "FALLBACK_DPI"]

#: Upper bound on the bytes one kernel-free explorer embeds in a page.
MAX_EMBED_BYTES = 1_000_000
_CHAR_PX = 8  # width of a label character at 12 px, where the page cannot measure its labels
# Scores are embedded with this many decimals, and the explorer works from the rounded
# scores only (the page, weights() and the fallback picture). Rounding to a fixed grid
# keeps the page identical on every CPU (float32 kernels differ in the last bits) and
# small; 1e-3 in a score is a 0.1% change of a weight, invisible in a colour map.
_SCORE_DECIMALS = 3
#: Resolution of the static picture. It is shown at its own size (never wider than the column,
#: ~800 px), so at 100 dpi its smallest text (8 pt tick labels) is 11 px tall.
FALLBACK_DPI = 100
_FALLBACK_MAX_WIDTH_IN = 7.6  # the picture's widest figure: 760 px at FALLBACK_DPI


def _explorer_js() -> str:
    """The page-side code (``attn_core/teach/explorer.js``, shipped as package data)."""
    from importlib.resources import files

    return files("attn_core.teach").joinpath("explorer.js").read_text(encoding="utf-8")


# --------------------------------------------------------------------------- kernel-free explorer
def _colormap_lut(name: str = "viridis", n: int = 64) -> list[str]:
    import matplotlib.pyplot as plt

    cm = plt.get_cmap(name)
    out = []
    for i in range(n):
        r, g, b, _ = cm(i / (n - 1))
        out.append(f"#{int(r * 255):02x}{int(g * 255):02x}{int(b * 255):02x}")
    return out


def _round_list(values: torch.Tensor, digits: int) -> list:
    """Round for embedding; ``-inf`` (a blocked score) becomes ``None`` (JSON null)."""
    out = []
    for v in values.reshape(-1).tolist():
        out.append(None if v == -math.inf else round(v, digits))
    return out


def _quantize(values: torch.Tensor, digits: int) -> torch.Tensor:
    """Round to ``digits`` decimals in float64, keeping ``-inf`` (a blocked score)."""
    v = values.double()
    return torch.where(torch.isinf(v), v, torch.round(v, decimals=digits))


def _axis_titles(row_label: str, col_label: str) -> tuple[str, str, list[str], str]:
    """The rows' and columns' axis titles, the bar chart's title (before, after the token), the colour scale's.

    The defaults describe attention (``"query (attending)"``, ``"key (attended to)"``,
    ``query “x” attends to``, ``attention weight``); other labels describe any row-stochastic
    map, e.g. a router's characters × experts: ``character “x”: weight per expert``, ``weight``.
    """
    if (row_label, col_label) == ("query", "key"):
        return "query (attending)", "key (attended to)", ["query \u201c", "\u201d attends to"], "attention weight"
    return row_label, col_label, [f"{row_label} \u201c", f"\u201d: weight per {col_label}"], "weight"


#: Most tick labels a fallback picture writes per axis; longer axes show every n-th.
MAX_TICK_LABELS = 40


def _thin_ticks(ax, q_labels: list[str], k_labels: list[str]) -> None:
    """Keep at most :data:`MAX_TICK_LABELS` labels per axis, so that they stay legible."""
    upright = max(map(len, k_labels)) <= 2  # single letters stand upright, as in heatmap
    for labels, set_ticks, rotation in ((k_labels, ax.set_xticks, 0 if upright else 90), (q_labels, ax.set_yticks, 0)):
        n = len(labels)
        if n > MAX_TICK_LABELS:
            step = math.ceil(n / MAX_TICK_LABELS)
            kept = list(range(0, n, step))
            set_ticks(kept, [labels[i] for i in kept], rotation=rotation, fontsize=8)


class AttentionExplorer:
    """A self-contained, kernel-free attention explorer (build it with :func:`explorer`).

    Displaying it (the last expression of a cell) renders HTML and JavaScript that
    redraw the map in the browser. ``nbytes`` is the size it embeds in a page; it grows
    as ``L·H·T_q·T_k`` (about 6 bytes per score) plus one fallback PNG.

    Shapes:
        scores: ``(L, H, T_q, T_k)``; each mask: ``(T_q, T_k)``
    """

    def __init__(
        self,
        scores: torch.Tensor,
        q_tokens: list[str],
        k_tokens: list[str],
        *,
        masks: dict[str, torch.Tensor],
        layer_names: list[str],
        title: str,
        temperature: bool,
        log: bool,
        query: int,
        row_label: str = "query",
        col_label: str = "key",
        layer_label: str = "layer",
        fallback_png: bool = True,
    ) -> None:
        scores = _quantize(scores, _SCORE_DECIMALS)  # (L, H, T_q, T_k), on the embedded grid
        self.scores, self.q_tokens, self.k_tokens = scores, q_tokens, k_tokens
        self.masks, self.layer_names, self.title = masks, layer_names, title
        self.temperature, self.log, self.query = temperature, log, query
        self.row_label, self.col_label, self.layer_label = row_label, col_label, layer_label
        self.row_title, self.col_title, bar_title, self.scale_title = _axis_titles(row_label, col_label)
        self._payload = {
            "shape": list(scores.shape),
            "scores": _round_list(scores, _SCORE_DECIMALS),
            "q": q_tokens,
            "k": k_tokens,
            "masks": {name: [int(b) for b in m.reshape(-1).tolist()] for name, m in masks.items()},
            "layers": layer_names,
            "lut": _colormap_lut(),
            "temperature": temperature,
            "log": log,
            "query": query,
            "title": title,
            "logFloor": LOG_FLOOR,
            "charPx": _CHAR_PX,
            "rowLabel": row_label,
            "colLabel": col_label,
            "rowTitle": self.row_title,
            "colTitle": self.col_title,
            "barTitle": bar_title,
            "scaleTitle": self.scale_title,
            "layerLabel": layer_label,
        }
        self._data = json.dumps(self._payload, separators=(",", ":"), ensure_ascii=False)
        self._uid = "attnx-" + hashlib.sha1(self._data.encode()).hexdigest()[:12]
        self._fallback = self._fallback_png() if fallback_png else ""
        self.nbytes = len(self._data.encode()) + len(self._fallback)
        if self.nbytes > MAX_EMBED_BYTES:
            raise ValueError(
                f"this explorer would embed {self.nbytes:,} bytes (limit {MAX_EMBED_BYTES:,}); "
                f"shape (L, H, T_q, T_k)={tuple(scores.shape)}: pass fewer layers, heads or tokens"
            )

    def weights(self, layer: int = 0, head: int = 0, temperature: float = 1.0) -> torch.Tensor:
        """The map the page shows for these controls (all masks on), computed in Python.

        Shapes:
            output: ``(T_q, T_k)``
        """
        s = self.scores[layer, head].double() / temperature
        for m in self.masks.values():
            s = s.masked_fill(~m, -math.inf)
        blocked_row = torch.isinf(s).all(-1, keepdim=True)
        w = torch.softmax(s.masked_fill(blocked_row, 0.0), -1)
        return w.masked_fill(blocked_row, 0.0)

    def fallback_figure(self):
        """The static picture shown where scripts cannot run: the first map, all masks on.

        Its axes are titled with the explorer's row and column labels, its colour bar with
        :attr:`scale_title` (``"(log scale)"`` added when ``log``), blocked cells are hatched,
        and an axis of more than :data:`MAX_TICK_LABELS` tokens labels every n-th, so that the
        labels stay legible. The page writes the explorer's title above the picture; the
        figure's own title names the map it shows only when there are several.

        Returns:
            The matplotlib Figure (close it when done). At :data:`FALLBACK_DPI` it is at most
            760 px wide, so that the page shows it at its own size.
        """
        import matplotlib.pyplot as plt

        # Blocked as the page draws them: by a mask, or by a score of -inf (a weight of zero).
        combined = ~torch.isinf(self.scores[0, 0])
        for m in self.masks.values():
            combined = combined & m
        L, H, T_q, T_k = self.scores.shape
        # Square-ish cells, about 0.28 in (28 px) each, within 3.6 in and the column's width.
        side = max(3.6, min(_FALLBACK_MAX_WIDTH_IN - 1.4, 0.28 * max(T_q, T_k) + 2.4))
        fig, ax = plt.subplots(figsize=(side + 1.4, side))
        shown = ([self.layer_names[0]] if L > 1 else []) + (["head 0"] if H > 1 else [])
        heatmap(
            self.weights(0, 0),
            self.q_tokens,
            self.k_tokens,
            mask=combined,
            ax=ax,
            log=self.log,
            title=", ".join(shown) or None,
            annotate=False,
            colorbar=False,
            xlabel=self.col_title,
            ylabel=self.row_title,
            vrange=(0.0, 1.0),  # the live view's scale, so that both pictures read alike
        )
        if max(T_q, T_k) > 24:  # 10 pt labels would touch on cells of under ~20 px
            ax.tick_params(labelsize=8)
        label = self.scale_title + (" (log scale)" if self.log else "")
        fig.colorbar(ax.images[0], ax=ax, fraction=0.046, pad=0.04, label=label)
        _thin_ticks(ax, self.q_tokens, self.k_tokens)
        return fig

    def _fallback_png(self) -> str:
        import matplotlib.pyplot as plt
        from PIL import Image

        fig = self.fallback_figure()
        buf = io.BytesIO()
        fig.savefig(buf, format="png", dpi=FALLBACK_DPI, bbox_inches="tight")
        plt.close(fig)
        # A palette of 256 colours (the colour map, grey, the anti-aliasing of text) keeps the
        # embedded picture small; without dithering, flat cells stay flat.
        img = Image.open(buf).convert("RGB").quantize(colors=256, dither=Image.Dither.NONE)
        out = io.BytesIO()
        img.save(out, format="PNG", optimize=True)
        return base64.b64encode(out.getvalue()).decode()

    def __repr__(self) -> str:
        L, H, T_q, T_k = self.scores.shape
        return f"AttentionExplorer(L={L}, H={H}, T_q={T_q}, T_k={T_k}, masks={list(self.masks)}, nbytes={self.nbytes})"

    def _repr_html_(self) -> str:
        return self.html()

    def html(self) -> str:
        """The HTML (with its script) that renders the explorer."""
        uid = self._uid
        data = self._data.replace("</", "<\\/")  # keep "</script>" in a token from closing the tag
        fallback = (
            f'<img class="attnx-fallback" alt="attention map (static picture)" '
            f'src="data:image/png;base64,{self._fallback}" style="max-width:100%;height:auto">'
            if self._fallback
            else ""
        )
        return (
            f'<div class="attn-explorer" id="{uid}" data-state="static">'
            f'<div class="attnx-title" style="font-weight:600;margin:4px 0">{html.escape(self.title)}</div>'
            f'<div class="attnx-controls" style="display:none;font:13px sans-serif;margin:4px 0"></div>'
            f'<div class="attnx-view" style="display:none"></div>{fallback}'
            f'<script type="application/json" class="attnx-data">{data}</script>'
            f"<script>{_explorer_js().replace('__UID__', uid)}</script></div>"
        )


# --------------------------------------------------------------------------- entry point
def explorer(
    source,
    q_tokens: Sequence[str] | None = None,
    k_tokens: Sequence[str] | None = None,
    *,
    scores=None,
    masks: dict | None = None,
    layer_names: Sequence[str] | None = None,
    title: str = "",
    temperature: bool = True,
    log: bool = False,
    query: int = 0,
    text: str | None = None,
    row_label: str = "query",
    col_label: str = "key",
    layer_label: str = "layer",
) -> AttentionExplorer | KernelExplorer:
    """Explore attention maps: one call, kernel-free or with Python callbacks.

    Args:
        source: Either attention **weights** (kernel-free explorer; ``None`` if ``scores``
            is given) or a **callable** ``fn(text) -> (weights, tokens)`` (kernel explorer,
            needs ``text``).
        q_tokens: Labels of the queries (rows).
        k_tokens: Labels of the keys (columns); default ``q_tokens`` for square maps.
        scores: Pre-softmax, *unmasked* scores instead of weights. Needed for mask
            toggles: the page recomputes ``softmax(scores / τ)`` with the masks that are on.
            From weights alone the page uses ``log w`` as the scores (the same softmax).
        masks: Named boolean masks (``True`` = may attend), each toggled by a checkbox.
        layer_names: Names for the layer slider's positions (default ``"<layer_label> i"``).
        title: A title above the explorer.
        temperature: Show a temperature slider (τ from 0.1 to 10).
        log: Start with a logarithmic colour scale.
        query: The query row highlighted first.
        text: The starting sentence of a kernel explorer.
        row_label: What a row is (the query slider's name and the rows' axis title), for
            maps that are not attention: ``row_label="character"``.
        col_label: What a column is (the columns' axis title and the bar chart's title),
            e.g. ``col_label="expert"`` for a router's probabilities.
        layer_label: The name of the slider that steps through the first axis of
            ``(L, H, T_q, T_k)``, when that axis is not layers: ``layer_label="model"``
            with ``layer_names=["trained", "random init"]`` compares two models.

    Returns:
        An :class:`AttentionExplorer` (display it) or a :class:`KernelExplorer`.

    Shapes:
        source / scores: ``(T_q, T_k)``, ``(H, T_q, T_k)`` or ``(L, H, T_q, T_k)``
        each mask: ``(T_q, T_k)``

    Raises:
        TypeError: Wrong argument types.
        ValueError: Wrong shapes, labels that do not match, or more than
            :data:`MAX_EMBED_BYTES` to embed.
    """
    if callable(source) and not isinstance(source, torch.Tensor):
        if text is None:
            raise ValueError("a kernel explorer needs the starting sentence: explorer(fn, text=...)")
        return KernelExplorer(source, text, title=title, log=log)
    if (source is None) == (scores is None):
        raise ValueError("pass either attention weights (source) or scores=, not both or neither")
    if scores is not None:
        s = to_4d("scores", as_tensor("scores", scores)).double()
    else:
        w = to_4d("weights", as_tensor("source", source)).double()
        row_sums = w.sum(-1)
        if (w < 0).any() or (((row_sums - 1).abs() > 1e-3) & (row_sums.abs() > 1e-6)).any():
            raise ValueError("weights must be non-negative with rows summing to 1 (or 0); pass raw scores as scores=")
        s = torch.log(w)  # softmax(log w) = w; zeros become -inf (masked)
    L, H, T_q, T_k = s.shape
    if s.numel() * 4 > MAX_EMBED_BYTES:  # every score takes at least 4 bytes of JSON: fail fast
        raise ValueError(
            f"this explorer would embed over {s.numel() * 4:,} bytes (limit {MAX_EMBED_BYTES:,}); "
            f"shape (L, H, T_q, T_k)={tuple(s.shape)}: pass fewer layers, heads or tokens"
        )
    q_labels = check_labels("q_tokens", q_tokens, T_q)
    k_labels = check_labels("k_tokens", k_tokens if k_tokens is not None or T_q != T_k else q_tokens, T_k)
    for name, value in (("row_label", row_label), ("col_label", col_label), ("layer_label", layer_label)):
        check_instance(name, value, str)
        if not value.strip():
            raise ValueError(f"{name} must be a non-empty string, got {name}={value!r}")
    names = list(layer_names) if layer_names is not None else [f"{layer_label} {i}" for i in range(L)]
    if len(names) != L:
        raise ValueError(f"layer_names has {len(names)} names for {L} layers")
    checked = {str(k): check_mask(f"masks[{k!r}]", m, (T_q, T_k)) for k, m in (masks or {}).items()}
    if isinstance(query, bool) or not isinstance(query, int) or not 0 <= query < T_q:
        raise ValueError(f"query must be an int in [0, {T_q}), got query={query!r}")
    return AttentionExplorer(
        s,
        q_labels,
        k_labels,
        masks=checked,
        layer_names=names,
        title=title,
        temperature=temperature,
        log=log,
        query=query,
        row_label=row_label,
        col_label=col_label,
        layer_label=layer_label,
    )
