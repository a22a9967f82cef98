"""benchmarks.gpu: its Markdown table and its behaviour without CUDA (the GPU run itself needs a device)."""

from __future__ import annotations

import pytest
import torch

from benchmarks import gpu
from benchmarks.__main__ import main


def _result():
    row = dict(
        entry="attention core vs SDPA (causal)", shape="(8, 16, 1024, 64)", ours="attn_core", baseline="sdpa",
        ours_ms=0.111, baseline_ms=0.078, ratio=1.449, ratio_low=1.30, ratio_high=2.13,
    )  # fmt: skip
    decode = dict(row, entry="greedy decoding B=1", ours="ours_eager", baseline="hf_eager", tokens_per_s=49.3)
    failed = {"entry": "training step", "error": "OutOfMemoryError: CUDA out of memory"}
    return dict(device="NVIDIA H100", torch="2.11", transformers="5.17", quick=False, seconds=183.0,
                rows=[row, decode, failed])  # fmt: skip


def test_markdown_has_one_line_per_pair_and_lists_the_errors():
    md = gpu.markdown(_result())
    assert "# attn_core on NVIDIA H100 (torch 2.11, transformers 5.17)" in md
    assert (
        "| attention core vs SDPA (causal) | (8, 16, 1024, 64) | attn_core | sdpa | 0.111 | 0.078 "
        "| 1.449 (1.30–2.13) |  |" in md
    )
    assert "| 49 |" in md  # tokens/s of the decoding row
    assert "- training step: `OutOfMemoryError: CUDA out of memory`" in md
    assert "QUICK" not in md
    assert "QUICK" in gpu.markdown(dict(_result(), quick=True))


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the behaviour without CUDA")
def test_without_cuda_the_gpu_suite_is_skipped_and_run_refuses(capsys):
    assert main(["--suite", "gpu", "--quick"]) == 0
    assert "the gpu suite needs CUDA" in capsys.readouterr().err
    with pytest.raises(RuntimeError, match="the gpu suite needs CUDA"):
        gpu.run(quick=True)
