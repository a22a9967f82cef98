"""``python -m benchmarks [--quick] [--suite NAME ...] [--device cpu|cuda|all] [--out FILE] [--check]``.

With CUDA and no ``--suite``, it runs the GPU table (:mod:`benchmarks.gpu`: attention core,
windows, sinks, decoding and a training step against SDPA and Hugging Face), written to
``benchmarks/results/gpu-<device>-<time>.json`` and ``.md``; without CUDA, the CPU suites.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import sys
import time
from pathlib import Path

import torch

from . import attention, decoding, distributed, gpu, memory
from .common import format_table, machine_info, matmul_throughput

SUITES = ("attention", "memory", "decoding", "distributed", "gpu")
CPU_SUITES = ("attention", "memory", "decoding", "distributed")
RESULTS = Path(__file__).resolve().parent / "results"


def _tables(result: dict) -> str:
    out = []
    att = [r for r in result["rows"] if r["suite"] == "attention"]
    for device in sorted({r["device"] for r in att}):
        main = [r for r in att if r["device"] == device and r["part"] == "main"]
        if main:
            r0 = main[0]
            out.append(
                f"\nAttention layer forward [{device}], B={r0['batch']}, T={r0['T']}, d={r0['d_model']}, "
                f"H={r0['n_heads']}, causal (baseline: {r0['baseline']})"
            )
            out.append(
                format_table(
                    [dict(r, median_ms=1e3 * r["median_s"]) for r in main],
                    [
                        ("name", "implementation", ""),
                        ("median_ms", "median ms", ".1f"),
                        ("spread", "IQR/median", ".2f"),
                        ("ratio_to_baseline", "ratio", ".3f"),
                        ("paired_ratio_to_baseline", "paired ratio", ".3f"),
                        ("paired_ratio_low", "q1", ".3f"),
                        ("paired_ratio_high", "q3", ".3f"),
                        ("verdict", "verdict (q1-q3 vs 1)", ""),
                        ("gflops", "GFLOP/s", ".1f"),
                        ("fraction_of_matmul", "of matmul", ".2f"),
                        ("max_abs_diff", "max |diff|", ".1e"),
                    ],
                )
            )
        tgt = [r for r in att if r["device"] == device and r["part"] == "target"]
        if tgt:
            out.append(f"\nThe same setting, the three implementations of the targets alone, {tgt[0]['rounds']} rounds")
            out.append(
                format_table(
                    [dict(r, median_ms=1e3 * r["median_s"]) for r in tgt],
                    [
                        ("name", "implementation", ""),
                        ("median_ms", "median ms", ".1f"),
                        ("spread", "IQR/median", ".2f"),
                        ("ratio_to_baseline", "ratio", ".3f"),
                        ("paired_ratio_to_baseline", "paired ratio", ".3f"),
                        ("fraction_of_matmul", "of matmul", ".2f"),
                    ],
                )
            )
        sweep = [r for r in att if r["device"] == device and r["part"] == "sweep"]
        if sweep:
            out.append(
                f"\nSweep over T [{device}], B={sweep[0]['batch']}, d={sweep[0]['d_model']}, H={sweep[0]['n_heads']}"
            )
            out.append(
                format_table(
                    sweep,
                    [
                        ("T", "T", "d"),
                        ("name", "implementation", ""),
                        ("median_s", "median s", ".4f"),
                        ("ratio_to_baseline", "ratio", ".3f"),
                        ("fraction_of_matmul", "of matmul", ".2f"),
                    ],
                )
            )
    mem = [r for r in result["rows"] if r["suite"] == "memory"]
    if mem:
        out.append("\nPeak tensor memory of the attention forward (MiB), causal")
        out.append(
            format_table(
                [dict(r, peak_mib=r["peak_bytes"] / 2**20, scores_mib=r["score_matrix_bytes"] / 2**20) for r in mem],
                [
                    ("device", "device", ""),
                    ("T", "T", "d"),
                    ("name", "path", ""),
                    ("peak_mib", "peak MiB", ".2f"),
                    ("scores_mib", "one T×T MiB", ".2f"),
                    ("ratio_to_baseline", "vs explicit", ".4f"),
                ],
            )
        )
    dec = [r for r in result["rows"] if r["suite"] == "decoding" and r.get("part") not in ("cache", "host")]
    if dec:
        out.append(f"\nGreedy decoding, {dec[0]['parameters']:,}-parameter LLaMA-like model, prompt {dec[0]['prompt']}")
        out.append(
            format_table(
                dec,
                [
                    ("device", "device", ""),
                    ("new_tokens", "new tokens", "d"),
                    ("name", "", ""),
                    ("median_s", "median s", ".3f"),
                    ("tokens_per_s", "tokens/s", ".1f"),
                    ("speedup", "speed-up", ".2f"),
                ],
            )
        )
    host = [r for r in result["rows"] if r.get("part") == "host"]
    if host:
        out.append("\nThe host's work in one cached decoding step, 4-layer LLaMA, ours vs Hugging Face (counts)")
        out.append(
            format_table(
                host,
                [
                    ("dtype", "dtype", ""),
                    ("ours_launches", "launches", "d"),
                    ("hf_launches", "HF", "d"),
                    ("ours_python_calls", "Python calls", "d"),
                    ("hf_python_calls", "HF", "d"),
                ],
            )
        )
    dist_rows = [r for r in result["rows"] if r["suite"] == "distributed"]
    for device in sorted({r["device"] for r in dist_rows}):
        rows = [r for r in dist_rows if r["device"] == device]
        r0 = rows[0]
        out.append(
            f"\nCausal attention, forward + backward, in {r0['world_size']} processes [{device}], B={r0['batch']}, "
            f"T={r0['T']}, H={r0['n_heads']}, H_kv={r0['n_kv_heads']}, D={r0['head_dim']} (baseline: {r0['baseline']})"
        )
        out.append(
            format_table(
                [dict(r, median_ms=1e3 * r["median_s"], kib=r.get("bytes_sent", 0) / 2**10) for r in rows],
                [
                    ("name", "scheme", ""),
                    ("median_ms", "median ms", ".1f"),
                    ("ratio_to_baseline", "ratio", ".2f"),
                    ("ci_low", "95% CI", ".2f"),
                    ("ci_high", "", ".2f"),
                    ("verdict", "verdict", ""),
                    ("kib", "KiB sent/rank", ".0f"),
                    ("scores_max", "scores, busiest", "d"),
                    ("scores_min", "idlest", "d"),
                ],
            )
        )
    cache = [r for r in result["rows"] if r.get("part") == "cache"]
    if cache:
        out.append("\nKV-cache bytes per token (all layers, float32), measured from the cache tensors")
        out.append(
            format_table(
                cache,
                [
                    ("name", "attention", ""),
                    ("cache_bytes_per_token", "bytes/token", "d"),
                    ("ratio_to_baseline", "vs MHA", ".3f"),
                ],
            )
        )
    if result["targets"]:
        out.append(
            "\nTargets"
            + (
                " (quick mode: sizes far too small for the performance targets to mean anything)"
                if result["quick"]
                else ""
            )
        )
        out.append(
            format_table(
                [
                    dict(t, verdict="PASS" if t["passed"] else "FAIL", limit=f"{t['comparison']} {t['threshold']:g}")
                    for t in result["targets"]
                ],
                [("name", "target", ""), ("value", "value", ".4g"), ("limit", "limit", ""), ("verdict", "", "")],
            )
        )
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks", description=__doc__)
    parser.add_argument("--quick", action="store_true", help="tiny sizes and few rounds (for tests)")
    parser.add_argument("--suite", action="append", choices=SUITES, help="run only these suites (repeatable)")
    parser.add_argument(
        "--device",
        choices=("cpu", "cuda", "all"),
        default="all",
        help="'all' (default) = the CPU, and the GPU when CUDA is available",
    )
    parser.add_argument("--out", type=Path, help="JSON file to write (default: benchmarks/results/<time>.json)")
    parser.add_argument("--threads", type=int, help="torch.set_num_threads (default: PyTorch's choice)")
    parser.add_argument("--check", action="store_true", help="exit with status 1 if a target fails")
    args = parser.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    cuda = torch.cuda.is_available() and args.device != "cpu"
    suites = args.suite or (["gpu"] if cuda else list(CPU_SUITES))
    if "gpu" in suites:
        if not cuda:
            print("the gpu suite needs CUDA (and --device cuda or all); skipped", file=sys.stderr)
        else:
            gpu.run(quick=args.quick, log=lambda msg: print(msg, flush=True))
        suites = [s for s in suites if s != "gpu"]
        if not suites:
            return 0
    devices = ["cpu"] if args.device == "cpu" else []
    if args.device in ("cuda", "all") and torch.cuda.is_available():
        devices = (["cpu"] if args.device == "all" else []) + ["cuda"]
    elif args.device == "cuda":
        print("CUDA is not available; nothing to run", file=sys.stderr)
        return 2
    if args.device == "all" and not torch.cuda.is_available():
        devices = ["cpu"]

    start = time.perf_counter()
    log = lambda msg: print(msg, flush=True)  # noqa: E731
    info = machine_info()
    log(
        f"benchmarks ({'quick' if args.quick else 'full'}): torch {info['torch']}, {info['processor']}, "
        f"{info['torch_threads']} threads, devices {devices}"
    )
    result = {
        "schema": 1,
        "created": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "quick": args.quick,
        "machine": info,
        "torch": torch.__version__,
        "devices": devices,
        "matmul_gflops": {},
        "rows": [],
        "targets": [],
    }
    for device in devices:
        n = 512 if args.quick else (4096 if device == "cuda" else 2048)
        result["matmul_gflops"][device] = gf = matmul_throughput(n=n, device=device, rounds=3 if args.quick else 9)
        log(f"  matmul throughput [{device}]: {gf:.1f} GFLOP/s ({n}×{n} float32)")
        for suite in suites:
            if suite == "attention":
                part = attention.run(device, quick=args.quick, matmul_gflops=gf, log=log)
            elif suite == "memory":
                part = memory.run(device, quick=args.quick, log=log)
            elif suite == "distributed":
                part = distributed.run(device, quick=args.quick, log=log)
            else:
                part = decoding.run(device, quick=args.quick, log=log)
            result["rows"] += part["rows"]
            result["targets"] += part["targets"]
    result["seconds"] = time.perf_counter() - start
    print(_tables(result))
    out = args.out
    if out is None:
        RESULTS.mkdir(exist_ok=True)
        stamp = _dt.datetime.now().strftime("%Y%m%d-%H%M%S")
        out = RESULTS / f"{'quick' if args.quick else 'full'}-{stamp}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=1))
    print(f"\nwrote {out} ({result['seconds']:.0f} s)")
    failed = [t["name"] for t in result["targets"] if not t["passed"]]
    if failed:
        print(f"{len(failed)} target(s) not met: " + "; ".join(failed))
    return 1 if (args.check and failed) else 0


if __name__ == "__main__":
    sys.exit(main())
