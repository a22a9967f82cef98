"""Chapter 20's Triton kernel against PyTorch's fused attention, on a CUDA GPU.

``python -m benchmarks.flash_gpu [--out DIR]`` times, in bfloat16 and in one process:

- ``attn_core.ops.backends.flash.flash_attention`` (the FlashAttention-2 kernel the reader writes),
  PyTorch's ``scaled_dot_product_attention`` (the baseline) and ``attn_core.attention``,
  forward and forward + backward, causal and not, at three shapes;
- a sliding window of 512 keys and gpt-oss-style sinks at T = 4096, where
  ``attn_core.attention`` falls back to its explicit path and the kernel skips the
  blocks outside the window; each checked against the float64 explicit path;
- chapter 13's explicit path (every score written out) against the fused kernels at
  T = 1024, 4096 and 8192.

Each time is the median of CUDA-event timings after warm-up; ratios compare two
implementations measured side by side. The results are written to
``flash_gpu_<device>.json`` and ``.md``. Without CUDA the script says so and exits 0.
"""

from __future__ import annotations

import argparse
import json
import sys
from functools import partial
from pathlib import Path

import torch
import torch.nn.functional as F

import attn_core  # noqa: F401  (chooses Triton's mode before triton is imported)
from attn_core import attention

RESULTS = Path(__file__).resolve().parent / "results"
SHAPES = [(8, 16, 1024, 64), (4, 16, 4096, 128), (2, 16, 8192, 64)]  # (B, H, T, D)


def cuda_ms(fn, reps: int = 20, warmup: int = 5) -> float:
    """Median milliseconds of ``fn()`` measured with CUDA events."""
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end))
    return sorted(times)[len(times) // 2]


def _qkv(B: int, H: int, T: int, D: int, seed: int) -> list[torch.Tensor]:
    g = torch.Generator(device="cuda").manual_seed(seed)
    return [torch.randn(B, H, T, D, device="cuda", dtype=torch.bfloat16, generator=g) for _ in range(3)]


def _backward(fn, q, k, v, d_out, **kw) -> None:
    fn(q, k, v, **kw).backward(d_out)


def dense_rows(flash_attention) -> list[dict]:
    """Forward and forward + backward, causal and not, at each of ``SHAPES``."""
    sdpa = F.scaled_dot_product_attention
    rows = []
    for B, H, T, D in SHAPES:
        for causal in (True, False):
            q, k, v = _qkv(B, H, T, D, seed=0)
            kernel_out = flash_attention(q, k, v, is_causal=causal).float()
            err = (kernel_out - sdpa(q, k, v, is_causal=causal).float()).abs().max().item()
            t_kernel = cuda_ms(partial(flash_attention, q, k, v, is_causal=causal))
            t_sdpa = cuda_ms(partial(sdpa, q, k, v, is_causal=causal))
            t_core = cuda_ms(partial(attention, q, k, v, is_causal=causal))
            flops = 4 * B * H * T * T * D * (0.5 if causal else 1.0)
            grads = [x.detach().requires_grad_() for x in (q, k, v)] + [torch.randn_like(q)]
            t_kernel_b = cuda_ms(partial(_backward, flash_attention, *grads, is_causal=causal), reps=10)
            t_sdpa_b = cuda_ms(partial(_backward, sdpa, *grads, is_causal=causal), reps=10)
            row = dict(B=B, H=H, T=T, D=D, causal=causal, max_abs_err_vs_sdpa=err)
            row.update(triton_fwd_ms=t_kernel, sdpa_fwd_ms=t_sdpa, attn_core_fwd_ms=t_core)
            row.update(triton_over_sdpa=t_kernel / t_sdpa, attn_core_over_sdpa=t_core / t_sdpa)
            row.update(triton_tflops=flops / t_kernel / 1e9, sdpa_tflops=flops / t_sdpa / 1e9)
            row.update(triton_fwdbwd_ms=t_kernel_b, sdpa_fwdbwd_ms=t_sdpa_b, fwdbwd_ratio=t_kernel_b / t_sdpa_b)
            rows.append(row)
            print(json.dumps(row), flush=True)
    return rows


def window_sink_rows(flash_attention) -> list[dict]:
    """A window of 512 and sinks at T = 4096, against full causal SDPA."""
    B, H, T, D = 4, 16, 4096, 128
    q, k, v = _qkv(B, H, T, D, seed=1)
    sinks = torch.randn(H, device="cuda", dtype=torch.bfloat16)
    cases = {
        "window 512": dict(window=512),
        "sinks": dict(sinks=sinks),
        "window 512 + sinks": dict(window=512, sinks=sinks),
    }
    rows = []
    for case, kw in cases.items():
        kw64 = {name: x.double() if torch.is_tensor(x) else x for name, x in kw.items()}
        exact = attention(q.double(), k.double(), v.double(), is_causal=True, **kw64)
        err = (flash_attention(q, k, v, is_causal=True, **kw).double() - exact).abs().max().item()
        t_kernel = cuda_ms(partial(flash_attention, q, k, v, is_causal=True, **kw))
        t_full = cuda_ms(partial(F.scaled_dot_product_attention, q, k, v, is_causal=True))
        t_core = cuda_ms(partial(attention, q, k, v, is_causal=True, **kw), reps=5, warmup=2)
        row = dict(case=case, B=B, H=H, T=T, D=D, max_abs_err_vs_f64=err)
        row.update(triton_ms=t_kernel, full_causal_sdpa_ms=t_full, attn_core_ms=t_core)
        row.update(triton_over_full_sdpa=t_kernel / t_full, attn_core_over_full_sdpa=t_core / t_full)
        rows.append(row)
        print(json.dumps(row), flush=True)
    return rows


def explicit_rows(flash_attention) -> list[dict]:
    """Chapter 13's comparison on a GPU: the explicit path (every score written out) vs fused
    kernels, B=8, H=12, D=64, causal, float16, at growing T."""
    rows = []
    for T in (1024, 4096, 8192):
        g = torch.Generator(device="cuda").manual_seed(2)
        q, k, v = (torch.randn(8, 12, T, 64, device="cuda", dtype=torch.float16, generator=g) for _ in range(3))
        explicit = partial(attention, q, k, v, is_causal=True, return_weights=True)
        t_explicit = cuda_ms(explicit, reps=5, warmup=2)
        t_sdpa = cuda_ms(partial(F.scaled_dot_product_attention, q, k, v, is_causal=True))
        t_kernel = cuda_ms(partial(flash_attention, q, k, v, is_causal=True))
        row = dict(T=T, explicit_ms=t_explicit, sdpa_ms=t_sdpa, triton_ms=t_kernel)
        row.update(explicit_over_sdpa=t_explicit / t_sdpa, explicit_over_triton=t_explicit / t_kernel)
        rows.append(row)
        print(json.dumps(row), flush=True)
        del q, k, v
        torch.cuda.empty_cache()
    return rows


def _row(cells: list) -> str:
    return "| " + " | ".join(str(c) for c in cells) + " |"


def markdown(result: dict) -> str:
    """The two tables of ``result`` in Markdown."""
    lines = [
        f"Measured on {result['device']} (torch {result['torch']}, Triton {result['triton']}), bfloat16.",
        "",
        _row(["B, H, T, D", "causal", "kernel / SDPA fwd", "kernel TFLOP/s", "SDPA TFLOP/s"]
             + ["kernel / SDPA fwd+bwd", "attn_core / SDPA fwd"]),
        _row(["---", "---"] + ["---:"] * 5),
    ]  # fmt: skip
    for r in result["dense"]:
        shape = f"{r['B']}, {r['H']}, {r['T']}, {r['D']}"
        ratios = [f"{r['triton_over_sdpa']:.2f}", f"{r['triton_tflops']:.0f}", f"{r['sdpa_tflops']:.0f}"]
        lines.append(_row([shape, r["causal"], *ratios, f"{r['fwdbwd_ratio']:.2f}", f"{r['attn_core_over_sdpa']:.2f}"]))
    lines += [
        "",
        _row(["case at (4, 16, 4096, 128), causal", "kernel / full causal SDPA"]
             + ["attn_core / full causal SDPA", "kernel max abs error vs float64"]),
        _row(["---"] + ["---:"] * 3),
    ]  # fmt: skip
    for r in result["window_sinks"]:
        cells = [f"{r['triton_over_full_sdpa']:.2f}", f"{r['attn_core_over_full_sdpa']:.1f}"]
        lines.append(_row([r["case"], *cells, f"{r['max_abs_err_vs_f64']:.1e}"]))
    if not result.get("explicit"):  # results measured before this table was added
        return "\n".join(lines) + "\n"
    lines += [
        "",
        _row(["T (B=8, H=12, D=64, causal, float16)", "explicit / SDPA", "explicit / kernel"]),
        _row(["---", "---:", "---:"]),
    ]
    for r in result["explicit"]:
        lines.append(_row([r["T"], f"{r['explicit_over_sdpa']:.1f}", f"{r['explicit_over_triton']:.1f}"]))
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=RESULTS, help="folder for the JSON and Markdown")
    args = parser.parse_args(argv)
    if not torch.cuda.is_available():
        print("no CUDA device: the Triton kernel only runs compiled on a GPU; nothing measured")
        return 0
    import triton

    from attn_core.ops.backends.flash import flash_attention

    result = dict(device=torch.cuda.get_device_name(), torch=torch.__version__, triton=triton.__version__)
    result["dense"] = dense_rows(flash_attention)
    result["window_sinks"] = window_sink_rows(flash_attention)
    result["explicit"] = explicit_rows(flash_attention)
    stem = "flash_gpu_" + result["device"].replace("NVIDIA ", "").replace(" ", "_").lower()
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / f"{stem}.json").write_text(json.dumps(result, indent=1) + "\n")
    (args.out / f"{stem}.md").write_text(markdown(result))
    print(markdown(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
