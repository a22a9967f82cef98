"""attn_core.teach.viz: the namespace that gathers plots (pictures) and explorers."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

from attn_core.teach import viz  # noqa: E402


def test_viz_gathers_the_pictures_and_the_explorers():
    from attn_core.teach import explorers, kernel_explorer, plots

    assert viz.heatmap is plots.heatmap and viz.attention_grid is plots.attention_grid
    assert viz.explorer is explorers.explorer and viz.KernelExplorer is kernel_explorer.KernelExplorer
    assert viz.AttentionExplorer is explorers.AttentionExplorer
    assert sorted(viz.__all__) == sorted(
        ["heatmap", "attention_grid", "explorer", "AttentionExplorer", "KernelExplorer", "MAX_EMBED_BYTES"]
    )
    assert all(hasattr(viz, name) for name in viz.__all__)
