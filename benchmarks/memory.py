"""Suite ``memory``: peak memory of the attention forward pass against the sequence length.

Measured with :func:`attn_core.teach.measure.peak_tensor_memory`: a ``TorchDispatchMode`` adds up the
storage of every tensor that PyTorch operators create during the call, subtracts it
when the last tensor using that storage is freed, and records the maximum. Inputs are
created beforehand and not counted; the forward pass runs under ``torch.no_grad()``.
Scratch memory inside one fused kernel is invisible to this method, so the fused path's
figure is what it hands back (its output), not its internal tile buffers. On CUDA the
caching allocator's peak (``torch.cuda.max_memory_allocated``) is recorded as well, which
does include kernel scratch memory.

Compared: the explicit path (materialises ``(B, H, T, T)`` scores and weights), the
tiled plain-PyTorch forward (one ``(B, H, block, block)`` tile at a time), and the fused
SDPA path, with the size of one score matrix for reference.
"""

from __future__ import annotations

import torch

from attn_core import attention
from attn_core.ops.efficient import tiled_attention
from attn_core.teach.measure import attention_score_bytes, peak_tensor_memory

FULL = dict(batch=1, n_heads=12, head_dim=64, Ts=[256, 512, 1024, 2048, 4096], block=256)
QUICK = dict(batch=1, n_heads=2, head_dim=16, Ts=[128], block=32)
TARGET_T = 4096


def _cuda_peak(fn) -> int:
    """Peak bytes the CUDA caching allocator handed out during ``fn()``, above what was allocated before."""
    torch.cuda.synchronize()
    before = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    fn()
    torch.cuda.synchronize()
    return torch.cuda.max_memory_allocated() - before


def run(device: str, *, quick: bool, log=print) -> dict:
    """Run the suite on ``device``; return ``{"rows": [...], "targets": [...]}``."""
    cfg = QUICK if quick else FULL
    B, H, D, blk = cfg["batch"], cfg["n_heads"], cfg["head_dim"], cfg["block"]
    rows, targets = [], []
    for T in cfg["Ts"]:
        log(f"  memory [{device}]: T={T}")
        g = torch.Generator().manual_seed(T)
        q, k, v = (torch.randn(B, H, T, D, generator=g).to(device) for _ in range(3))
        qkv = (q, k, v)  # bound now: the functions below are timed within this iteration
        fns = {
            "explicit": lambda qkv=qkv: attention(*qkv, is_causal=True, return_weights=True)[0],
            "tiled": lambda qkv=qkv: tiled_attention(*qkv, is_causal=True, block_size=blk),
            "fused (SDPA)": lambda qkv=qkv: attention(*qkv, is_causal=True),
        }
        with torch.no_grad():
            peaks = {name: peak_tensor_memory(fn) for name, fn in fns.items()}
            diff = (fns["tiled"]() - fns["explicit"]()).abs().max().item()
            allocator = {name: _cuda_peak(fn) for name, fn in fns.items()} if device == "cuda" else {}
        scores = attention_score_bytes(B, H, T)
        for name, peak in peaks.items():
            rows.append(
                dict(
                    suite="memory",
                    device=device,
                    batch=B,
                    n_heads=H,
                    head_dim=D,
                    T=T,
                    name=name,
                    block=blk,
                    peak_bytes=peak,
                    score_matrix_bytes=scores,
                    peak_over_scores=peak / scores,
                    baseline="explicit",
                    ratio_to_baseline=peak / peaks["explicit"],
                    max_abs_diff_tiled_vs_explicit=diff,
                    # On CUDA, the caching allocator's own peak as a second method (it also sees
                    # the scratch memory inside fused kernels).
                    **({"cuda_allocator_peak_bytes": allocator[name]} if allocator else {}),
                )
            )
        if T == max(cfg["Ts"]):
            targets.append(
                dict(
                    name=f"tiled / explicit peak memory at T={T} [{device}]",
                    value=peaks["tiled"] / peaks["explicit"],
                    threshold=1.0,
                    comparison="<",
                    passed=peaks["tiled"] < peaks["explicit"],
                )
            )
            targets.append(
                dict(
                    name=f"tiled equals explicit at T={T} [{device}] (max abs diff)",
                    value=diff,
                    threshold=1e-4,
                    comparison="<=",
                    passed=diff <= 1e-4,
                )
            )
        del q, k, v
    return {"rows": rows, "targets": targets}
