"""attn_core.teach.plots: the static pictures (heatmap, attention_grid) and the input checks the explorers share."""

from __future__ import annotations

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402

from attn_core.ops.masks import causal_mask  # noqa: E402
from attn_core.teach import plots  # noqa: E402


def _weights(*shape, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.softmax(torch.randn(*shape, generator=g), dim=-1)


def test_heatmap_labels_colorbar_and_masked_cells():
    w = _weights(4, 4)
    ax = plots.heatmap(w, list("abcd"), mask=causal_mask(4))
    assert [t.get_text() for t in ax.get_yticklabels()] == list("abcd")
    assert len(ax.figure.axes) == 2, "a colorbar axis"
    image = ax.get_images()[0]
    assert image.get_array().mask.sum() == 6, "blocked cells are masked, not drawn as 0"
    assert len(ax.patches) == 6, "blocked cells are hatched"
    plt.close(ax.figure)


def test_heatmap_log_scale_and_bad_input():
    ax = plots.heatmap(_weights(3, 5), log=True, annotate=False)
    assert type(ax.get_images()[0].norm).__name__ == "LogNorm"
    plt.close(ax.figure)
    with pytest.raises(ValueError, match=r"shape \(T_q, T_k\), got \(2, 3, 3\)"):
        plots.heatmap(_weights(2, 3, 3))
    with pytest.raises(ValueError, match="q_tokens has 2 labels but the maps have 3"):
        plots.heatmap(_weights(3, 3), ["a", "b"])
    with pytest.raises(TypeError, match="weights must be a torch.Tensor or numpy array, got list"):
        plots.heatmap([[1.0]])
    with pytest.raises(TypeError, match="boolean tensor"):
        plots.heatmap(_weights(3, 3), mask=torch.ones(3, 3))


def test_attention_grid_is_layers_by_heads():
    fig = plots.attention_grid(_weights(2, 3, 5, 5), list("abcde"), suptitle="grid")
    assert len(fig.axes) == 2 * 3 + 1  # maps + colorbar
    plt.close(fig)
    with pytest.raises(ValueError, match="layer_names has 1 names for 2 layers"):
        plots.attention_grid(_weights(2, 1, 3, 3), layer_names=["x"])


def test_heatmap_writes_each_value_in_its_cell_and_titles_the_axes():
    w = torch.tensor([[1.0, 0.0], [0.25, 0.75]])
    ax = plots.heatmap(w, ["q0", "q1"], ["k0", "k1"], title="two tokens", colorbar=False)
    cells = {(t.get_position(), t.get_text()) for t in ax.texts}
    assert cells == {((0, 0), "1.00"), ((1, 0), "0.00"), ((0, 1), "0.25"), ((1, 1), "0.75")}  # (col, row)
    assert ax.get_xlabel() == "key (attended to)" and ax.get_ylabel() == "query (attending)"
    assert ax.get_title() == "two tokens"
    assert [t.get_text() for t in ax.get_xticklabels()] == ["k0", "k1"]
    assert len(ax.figure.axes) == 1, "no colorbar asked for"
    np.testing.assert_array_equal(ax.get_images()[0].get_array(), w.double().numpy())
    plt.close(ax.figure)


def test_heatmap_masked_cells_carry_no_number_and_large_maps_none_at_all():
    ax = plots.heatmap(torch.full((3, 3), 1 / 3), mask=causal_mask(3), xlabel="feature", ylabel="sample")
    assert len(ax.texts) == 6  # the 3 blocked cells above the diagonal are not annotated
    assert (ax.get_xlabel(), ax.get_ylabel()) == ("feature", "sample")
    assert [t.get_text() for t in ax.get_yticklabels()] == ["0", "1", "2"]  # positions by default
    plt.close(ax.figure)
    ax = plots.heatmap(_weights(9, 9))
    assert len(ax.texts) == 0, "maps larger than 8x8 are not annotated by default"
    plt.close(ax.figure)


def test_heatmap_into_a_given_axes_and_from_numpy():
    fig, ax = plt.subplots()
    assert plots.heatmap(np.eye(2), ax=ax, colorbar=False) is ax
    np.testing.assert_array_equal(ax.get_images()[0].get_array(), np.eye(2))
    plt.close(fig)


def test_attention_grid_titles_rows_and_columns():
    w = _weights(2, 2, 3, 3)
    fig = plots.attention_grid(w, list("abc"), layer_names=["first", "second"], suptitle="maps")
    assert fig._suptitle.get_text() == "maps"
    maps = [ax for ax in fig.axes if ax.get_images()]  # row-major: layer 0 heads 0, 1, then layer 1
    assert [ax.get_title() for ax in maps] == ["head 0", "head 1", "", ""]
    assert [ax.get_ylabel() for ax in maps] == ["first", "", "second", ""]
    assert [t.get_text() for t in maps[2].get_xticklabels()] == list("abc")  # keys on the last row only
    np.testing.assert_array_equal(maps[3].get_images()[0].get_array(), w[1, 1].double().numpy())
    plt.close(fig)


def test_shared_checks():
    assert plots.to_4d("w", torch.zeros(2, 3)).shape == (1, 1, 2, 3)
    assert plots.to_4d("w", torch.zeros(4, 2, 3)).shape == (1, 4, 2, 3)
    assert plots.to_4d("w", torch.zeros(5, 4, 2, 3)).shape == (5, 4, 2, 3)
    with pytest.raises(ValueError, match=r"w must have shape .* got \(3,\)"):
        plots.to_4d("w", torch.zeros(3))
    assert plots.check_labels("q_tokens", None, 3) == ["0", "1", "2"]
    assert plots.check_labels("q_tokens", [1, "b"], 2) == ["1", "b"]
    with pytest.raises(ValueError, match="q_tokens has 1 labels but the maps have 2"):
        plots.check_labels("q_tokens", ["a"], 2)
    assert plots.as_tensor("w", np.ones(2)).dtype == torch.float64
    x = torch.ones(2, requires_grad=True)
    assert not plots.as_tensor("w", x).requires_grad, "detached for drawing"
    assert plots.check_mask("mask", causal_mask(2), (2, 2)).tolist() == [[True, False], [True, True]]
    with pytest.raises(ValueError, match=r"mask must have shape \(T_q, T_k\)=\(3, 3\), got \(2, 2\)"):
        plots.check_mask("mask", causal_mask(2), (3, 3))


def test_heatmap_vrange_fixes_the_colour_scale():
    w = torch.tensor([[0.2, 0.3], [0.1, 0.4]])
    norm = plots.heatmap(w, vrange=(0.0, 1.0)).images[0].norm
    assert (norm.vmin, norm.vmax) == (0.0, 1.0)  # not the data's 0.1 to 0.4
    norm = plots.heatmap(w, log=True, vrange=(0.0, 1.0)).images[0].norm
    assert (norm.vmin, norm.vmax) == (plots.LOG_FLOOR, 1.0)  # a log scale cannot start at 0
    with pytest.raises(ValueError, match="vrange"):
        plots.heatmap(w, vrange=(1.0, 0.0))
    plt.close("all")
