"""attn_core.teach.explorers: the kernel-free explorer's embedded page and the kernel explorer's callbacks.

Runs under ipywidgets 8 and 7.7 (make colab). The browser side of the kernel-free explorer is
tested in tests/browser; here we test what Python embeds and the kernel explorer's callbacks.
"""

from __future__ import annotations

import json
import re

import matplotlib.pyplot as plt  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402

from attn_core.ops.masks import causal_mask  # noqa: E402
from attn_core.teach import explorers  # noqa: E402
from attn_core.teach.explorers import MAX_TICK_LABELS  # noqa: E402


def _weights(*shape, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.softmax(torch.randn(*shape, generator=g), dim=-1)


def _embedded(explorer) -> dict:
    html = explorer.html()
    data = re.search(r'<script type="application/json" class="attnx-data">(.*?)</script>', html, re.S).group(1)
    return json.loads(data.replace("<\\/", "</"))


def test_explorer_embeds_scores_masks_and_a_fallback_picture():
    s = torch.randn(2, 3, 5, 5, generator=torch.Generator().manual_seed(1))
    e = explorers.explorer(None, list("abcde"), scores=s, masks={"causal": causal_mask(5)}, title="t")
    data = _embedded(e)
    assert data["shape"] == [2, 3, 5, 5] and len(data["scores"]) == 150
    assert data["masks"]["causal"][:5] == [1, 0, 0, 0, 0]
    assert 'class="attnx-fallback"' in e.html() and "data:image/png;base64," in e.html()
    assert repr(e).startswith("AttentionExplorer(L=2, H=3, T_q=5, T_k=5")
    # The page's arithmetic, done in Python: masked softmax of scores / tau.
    expected = torch.softmax((s[1, 2].double() / 0.5).masked_fill(~causal_mask(5), float("-inf")), -1)
    # The explorer works from scores rounded to 3 decimals: weights agree to about 1e-3.
    assert torch.allclose(e.weights(1, 2, temperature=0.5), expected, atol=2e-3)


def test_explorer_from_weights_uses_log_weights_and_keeps_zeros():
    w = _weights(4, 4).masked_fill(~causal_mask(4), 0.0)
    w = w / w.sum(-1, keepdim=True)
    e = explorers.explorer(w, list("abcd"))
    assert _embedded(e)["scores"][1] is None, "a zero weight is embedded as a blocked score"
    fig = e.fallback_figure()  # ... and hatched in the static picture, as on the page: 6 cells
    assert sum(p.get_hatch() == "///" for p in fig.axes[0].patches) == 6
    plt.close(fig)
    assert torch.allclose(e.weights(), w.double(), atol=2e-3)


def test_explorer_html_is_deterministic_and_bounded():
    w = _weights(1, 2, 6, 6)
    a, b = explorers.explorer(w, list("abcdef")), explorers.explorer(w, list("abcdef"))
    assert a.html() == b.html(), "nbval compares it: no random ids"
    assert a.nbytes < 60_000
    # Size grows with L*H*T_q*T_k and is capped.
    with pytest.raises(ValueError, match=r"would embed .* bytes \(limit 1,000,000\)"):
        explorers.explorer(_weights(4, 8, 80, 80))


def test_explorer_page_does_not_depend_on_rounding_level_noise():
    # Another CPU computes the same scores up to float32 rounding: the page must not change.
    s = torch.randn(1, 2, 6, 6, generator=torch.Generator().manual_seed(3)).round(decimals=3) + 2e-4
    noisy = s * (1 + 1e-6 * torch.randn(s.shape, generator=torch.Generator().manual_seed(4)))
    a, b = explorers.explorer(None, list("abcdef"), scores=s), explorers.explorer(None, list("abcdef"), scores=noisy)
    assert not torch.equal(s, noisy)
    assert a.html() == b.html()
    assert set(_embedded(a)) >= {"logFloor", "charPx"}, "the page's constants come from Python"


def test_explorer_script_is_the_shipped_js_file():
    from importlib.resources import files

    js = files("attn_core.teach").joinpath("explorer.js").read_text(encoding="utf-8")
    e = explorers.explorer(_weights(3, 3), list("abc"))
    assert js.replace("__UID__", e._uid) in e.html()


def test_explorer_escapes_script_closing_tokens():
    e = explorers.explorer(_weights(2, 2), ["</script>", "b"])
    html = e.html()
    assert html.count("</script>") == 2, "only the two real closing tags"


def test_explorer_bad_input():
    with pytest.raises(ValueError, match="either attention weights .* or scores="):
        explorers.explorer(None)
    with pytest.raises(ValueError, match="rows summing to 1"):
        explorers.explorer(torch.ones(3, 3))
    with pytest.raises(ValueError, match=r"masks\['pad'\] must have shape \(T_q, T_k\)=\(3, 3\), got \(2, 2\)"):
        explorers.explorer(_weights(3, 3), masks={"pad": torch.ones(2, 2, dtype=torch.bool)})
    with pytest.raises(ValueError, match=r"query must be an int in \[0, 3\), got query=3"):
        explorers.explorer(_weights(3, 3), query=3)
    with pytest.raises(
        ValueError, match=r"shape \(T_q, T_k\), \(H, T_q, T_k\) or \(L, H, T_q, T_k\), got \(1, 1, 1, 2, 2\)"
    ):
        explorers.explorer(_weights(1, 1, 1, 2, 2))
    with pytest.raises(ValueError, match="needs the starting sentence"):
        explorers.explorer(lambda text: None)


def test_explorer_axis_labels_default_to_attention():
    e = explorers.explorer(_weights(3, 3), list("abc"))
    data = _embedded(e)
    assert (data["rowLabel"], data["colLabel"]) == ("query", "key")
    assert (data["rowTitle"], data["colTitle"]) == ("query (attending)", "key (attended to)")
    assert data["barTitle"] == ["query \u201c", "\u201d attends to"]
    fig = e.fallback_figure()
    assert (fig.axes[0].get_ylabel(), fig.axes[0].get_xlabel()) == ("query (attending)", "key (attended to)")
    plt.close(fig)


def test_explorer_axis_labels_for_a_map_that_is_not_attention():
    """A router's characters x experts: the slider, the axes and the bar chart say so."""
    probs = _weights(2, 1, 5, 4)
    e = explorers.explorer(
        probs, list("hello"), [f"expert {i}" for i in range(4)], row_label="character", col_label="expert"
    )
    data = _embedded(e)
    assert (data["rowLabel"], data["colLabel"]) == ("character", "expert")
    assert (data["rowTitle"], data["colTitle"]) == ("character", "expert")
    assert data["barTitle"] == ["character \u201c", "\u201d: weight per expert"]
    assert "query" not in json.dumps([data["rowTitle"], data["colTitle"], data["barTitle"]])
    fig = e.fallback_figure()
    assert (fig.axes[0].get_ylabel(), fig.axes[0].get_xlabel()) == ("character", "expert")
    plt.close(fig)
    # The page-side script reads these fields (and names the query slider by rowLabel).
    js = e.html()
    for field in ("d.rowLabel", "d.rowTitle", "d.colTitle", "d.barTitle"):
        assert field in js, field


def test_explorer_axis_labels_bad_input():
    with pytest.raises(TypeError, match="row_label must be a str, got int"):
        explorers.explorer(_weights(3, 3), row_label=3)
    with pytest.raises(ValueError, match="col_label must be a non-empty string, got col_label=' '"):
        explorers.explorer(_weights(3, 3), col_label=" ")


def test_explorer_fallback_picture_thins_long_axes():
    """82 bytes: at most MAX_TICK_LABELS labels per axis, evenly spaced, the first included."""
    T = 82
    tokens = [chr(ord("a") + i % 26) for i in range(T)]
    e = explorers.explorer(_weights(T, T), tokens)
    fig = e.fallback_figure()
    ax = fig.axes[0]
    for ticks, labels in ((ax.get_xticks(), ax.get_xticklabels()), (ax.get_yticks(), ax.get_yticklabels())):
        assert 20 <= len(ticks) <= MAX_TICK_LABELS
        assert ticks[0] == 0 and len(set(ticks[1:] - ticks[:-1])) == 1  # evenly spaced
        assert [t.get_text() for t in labels] == [tokens[int(i)] for i in ticks]
    plt.close(fig)
    # A short axis keeps every label.
    small = explorers.explorer(_weights(12, 12), list("abcdefghijkl")).fallback_figure()
    assert len(small.axes[0].get_xticks()) == 12
    plt.close(small)


def test_explorer_embeds_tokens_layer_names_and_the_given_scores():
    s = torch.tensor([[[[0.5, -1.25], [2.0, 0.0]]]])  # (L, H, T_q, T_k) = (1, 1, 2, 2)
    e = explorers.explorer(None, ["the", "cat"], ["k<0>", "k1"], scores=s, layer_names=["only"], title="tiny")
    data = _embedded(e)
    assert (data["q"], data["k"]) == (["the", "cat"], ["k<0>", "k1"])
    assert data["layers"] == ["only"] and data["title"] == "tiny"
    assert data["scores"] == [0.5, -1.25, 2.0, 0.0]  # row-major, exact at 3 decimals
    assert data["shape"] == [1, 1, 2, 2]
    assert "<0>" not in e.html().split('class="attnx-data">')[0], "labels are escaped outside the JSON"


def _png_size(explorer) -> tuple[int, int, int]:
    """The fallback picture's width and height in pixels and its size in bytes."""
    import base64

    png = base64.b64decode(explorer._fallback)
    assert png[:8] == b"\x89PNG\r\n\x1a\n"
    return int.from_bytes(png[16:20], "big"), int.from_bytes(png[20:24], "big"), len(png)


def _smallest_text_px(fig) -> float:
    """The smallest visible text of a figure, in pixels at FALLBACK_DPI."""
    sizes = [t.get_fontsize() for t in fig.findobj(plt.Text) if t.get_visible() and t.get_text().strip()]
    return min(sizes) * explorers.FALLBACK_DPI / 72


@pytest.mark.parametrize("T", [6, 32, 82])
def test_fallback_picture_is_legible_at_column_width_and_small(T):
    """Shown at its own size in a ~800 px column: at most 760 px wide, text of 10 px or more, tens of KB."""
    tokens = [f"t{i}" for i in range(T)]
    e = explorers.explorer(_weights(T, T), tokens)
    width, height, nbytes = _png_size(e)
    assert 450 <= width <= 760 and 350 <= height <= 760, (width, height)
    assert nbytes < 30_000, nbytes
    fig = e.fallback_figure()
    assert _smallest_text_px(fig) >= 10
    plt.close(fig)
    assert "max-width:100%" in e.html().split('class="attnx-fallback"')[1].split(">")[0]


def test_fallback_picture_labels_its_colour_bar_and_names_only_what_is_needed():
    one = explorers.explorer(_weights(4, 4), list("abcd"), title="one map")
    fig = one.fallback_figure()
    assert len(fig.axes) == 2 and fig.axes[1].get_ylabel() == "attention weight"
    assert fig.axes[0].get_title() == "", "the page writes the explorer's title above the picture"
    plt.close(fig)
    logged = explorers.explorer(_weights(2, 3, 4, 4), list("abcd"), log=True).fallback_figure()
    assert logged.axes[1].get_ylabel() == "attention weight (log scale)"
    assert logged.axes[0].get_title() == "layer 0, head 0", "several maps: the picture says which it shows"
    plt.close(logged)
    models = explorers.explorer(_weights(2, 1, 4, 4), list("abcd"), layer_names=["trained", "random"])
    fig = models.fallback_figure()
    assert fig.axes[0].get_title() == "trained"
    plt.close(fig)
    router = explorers.explorer(_weights(4, 3), list("abcd"), list("xyz"), row_label="character", col_label="expert")
    fig = router.fallback_figure()
    assert fig.axes[1].get_ylabel() == "weight"
    plt.close(fig)


def test_live_view_draws_a_colour_scale_and_hatches_blocked_cells():
    """What the page's script needs for its legend comes from Python; the script draws it."""
    e = explorers.explorer(None, list("abcd"), scores=torch.randn(1, 1, 4, 4), masks={"causal": causal_mask(4)})
    data, page = _embedded(e), e.html()
    assert data["scaleTitle"] == "attention weight" and data["logFloor"] == explorers.LOG_FLOOR
    for piece in ('class="attnx-legend"', "attnx-scale-title", "(log scale)", "blocked (masked)", "<pattern"):
        assert piece in page, piece
    assert '"#d9d9d9" : color(v)' not in page, "blocked cells are hatched, not flat grey"


def test_layer_label_names_the_first_axis():
    e = explorers.explorer(_weights(2, 1, 3, 3), list("abc"), layer_label="model")
    data = _embedded(e)
    assert data["layerLabel"] == "model" and data["layers"] == ["model 0", "model 1"]
    named = explorers.explorer(
        _weights(2, 1, 3, 3), list("abc"), layer_names=["trained", "random"], layer_label="model"
    )
    assert _embedded(named)["layers"] == ["trained", "random"]
    assert _embedded(explorers.explorer(_weights(2, 1, 3, 3), list("abc")))["layerLabel"] == "layer"
    assert "d.layerLabel" in e.html()
    with pytest.raises(TypeError, match="layer_label must be a str, got int"):
        explorers.explorer(_weights(3, 3), layer_label=1)
    with pytest.raises(ValueError, match="layer_label must be a non-empty string, got layer_label=''"):
        explorers.explorer(_weights(3, 3), layer_label="")
