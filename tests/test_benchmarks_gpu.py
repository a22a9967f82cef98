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
        ci_low=1.38, ci_high=1.52, rounds=100,
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
        "| 1.449 (1.30–2.13) | 1.380–1.520 (100 rounds) |  |" in md
    )
    # the targets follow the table: this run's core ratio is above 1.05 in its whole interval
    assert "| attention core ≤ 1.05× SDPA | (8, 16, 1024, 64) | 1.449 (1.380–1.520) | 1.05 | not met |" in md
    assert "| training step ≤ 1.05× HF's | (4, 512) |  | 1.05 | not measured |" in md
    assert "| 49 |" in md  # tokens/s of the decoding row
    assert "- training step: `OutOfMemoryError: CUDA out of memory`" in md
    assert "QUICK" not in md
    assert "QUICK" in gpu.markdown(dict(_result(), quick=True))


def test_markdown_shows_the_host_part_when_it_was_measured():
    host = dict(
        pipelined=[
            dict(shape="(2, 16, 4096, 128)", call="attention window", one_call_us=188.46, twenty_calls_us=119.3)
        ],
        host_per_call=[dict(shape="(1, 1, 128, 64)", call="sdpa causal", host_us=17.52)],
        kernels={"shape": "(8, 16, 1024, 64)", "sdpa causal": ["flash_fwd"], "attention causal": ["flash_fwd"]},
    )
    md = gpu.markdown(dict(_result(), **host))
    assert "At (2, 16, 4096, 128), µs per call: one call per timing, 20 back to back." in md
    assert "| attention window | 188.5 | 119.3 |" in md
    assert "| sdpa causal | 17.5 |" in md
    assert "- attention causal: `flash_fwd`" in md
    assert "back to back" not in gpu.markdown(_result())  # a run without the part
    no_profiler = dict(host, kernels={"shape": "(8, 16, 1024, 64)", "error": "RuntimeError: CUPTI"})
    assert "- not recorded: `RuntimeError: CUPTI`" in gpu.markdown(dict(_result(), **no_profiler))


def _fake_timer(monkeypatch, seconds_of=lambda fn: 1e-3):
    """Replace the CUDA-event timer: each call runs ``fn`` and takes ``seconds_of(fn)`` (1 ms)."""
    calls = []

    def timed(fn):
        fn()
        calls.append(fn)
        return seconds_of(fn)

    monkeypatch.setattr(gpu, "_cuda_seconds", timed)
    monkeypatch.setattr(torch.cuda, "synchronize", lambda: None)
    return calls


def test_side_by_side_gives_each_ratio_its_rounds_spread_and_interval(monkeypatch):
    base = lambda: None  # noqa: E731
    ours = lambda: None  # noqa: E731
    # 9 rounds: ours takes 1.1, 1.2, ..., 1.9 times the baseline's 1 ms
    seconds = {base: iter([1e-3] * 9), ours: iter([1e-3 * (1 + i / 10) for i in range(1, 10)])}
    calls = _fake_timer(monkeypatch, lambda fn: next(seconds[fn]))
    res = gpu.side_by_side({"sdpa": base, "ours": ours}, rounds=9, warmup=2, baseline="sdpa")
    assert len(calls) == 18  # the warm-up calls are not timed
    assert calls[:4] == [base, ours, ours, base]  # who goes first alternates
    r = res["ours"]
    assert r["ratio"] == pytest.approx(1.5) and r["median_s"] == pytest.approx(1.5e-3)
    assert (r["ratio_low"], r["ratio_high"]) == (pytest.approx(1.1), pytest.approx(1.9))
    assert 1.1 <= r["ci_low"] < 1.5 < r["ci_high"] <= 1.9 and r["rounds"] == 9
    assert res["sdpa"]["ratio"] == res["sdpa"]["ci_low"] == res["sdpa"]["ci_high"] == 1.0


@pytest.mark.parametrize(
    "ci, verdict",
    [((0.95, 1.04), "met"), ((1.06, 1.2), "not met"), ((1.0, 1.1), "within noise"), ((1.0, 1.05), "met")],
)
def test_a_target_is_met_only_when_its_whole_interval_is(ci, verdict):
    row = dict(_result()["rows"][0], ratio=sum(ci) / 2, ci_low=ci[0], ci_high=ci[1])
    (core,) = [t for t in gpu.target_verdicts([row]) if t["shape"] == "(8, 16, 1024, 64)"]
    assert core["verdict"] == verdict and core["bound"] == 1.05
    assert (core["ci_low"], core["ci_high"]) == ci


def test_every_target_finds_its_row_and_nothing_else():
    rows = [
        dict(entry=t[1] + "x", shape=t[2], ours=t[3], baseline="b", ratio=t[4] / 2, ci_low=0.1, ci_high=t[4])
        for t in gpu.TARGETS
    ]
    assert [t["verdict"] for t in gpu.target_verdicts(rows)] == ["met"] * len(gpu.TARGETS)
    # a row of another shape, another path or a failed entry does not stand in for the target
    other = [
        dict(rows[0], shape="(2, 4, 256, 64)"),
        dict(rows[0], ours="sdpa"),
        {"entry": rows[0]["entry"], "error": "x"},
    ]
    assert gpu.target_verdicts(other)[0]["verdict"] == "not measured"
    # a row of an older run, without an interval, is judged on its median
    old = {k: v for k, v in rows[0].items() if not k.startswith("ci_")}
    assert gpu.target_verdicts([dict(old, ratio=1.097)])[0]["verdict"] == "not met"


@pytest.mark.skipif(torch.cuda.is_available(), reason="the CPU stand-in for a GPU run")
def test_attention_entries_time_every_path_and_name_its_row(monkeypatch):
    """The attention rows' logic on the CPU, with tiny tensors and the CUDA timer replaced."""
    pytest.importorskip("triton")

    def small_qkv(B, H, T, D, H_kv=None, seed=0):
        g = torch.Generator().manual_seed(seed)
        return tuple(torch.randn(1, 2, 16, 16, generator=g, dtype=torch.bfloat16) for _ in range(3))

    _fake_timer(monkeypatch)  # every path takes 1 ms: each ratio is 1
    monkeypatch.setattr(gpu, "_qkv", small_qkv)
    rows = gpu.attention_entries(quick=True)
    assert [r["ours"] for r in rows] == ["attn_core", "window_auto", "window_flex", "window_dense", "sinks_auto",
                                         "sinks_flex_lse", "sinks_explicit"]  # fmt: skip
    assert rows[0]["shape"] == "(2, 4, 256, 64)" and rows[1]["entry"].startswith("window 128 (attention()")
    assert all(r["ratio"] == r["ci_low"] == r["ci_high"] == 1.0 and r["rounds"] == 5 for r in rows)
    # quick sizes are not the targets' sizes: none of them is judged from a smoke test
    assert {t["verdict"] for t in gpu.target_verdicts(rows)} == {"not measured"}


@pytest.mark.skipif(torch.cuda.is_available(), reason="the CPU stand-in for a GPU run")
def test_host_entries_runs_every_call_and_fills_its_tables(monkeypatch):
    """The host part's logic, on the CPU with its CUDA timers replaced: device time is scarce,
    and a typo found there costs a run."""
    pytest.importorskip("triton")
    ran = []

    def small_qkv(B, H, T, D, H_kv=None, seed=0):  # any shape: tiny CPU tensors, for the interpreter
        g = torch.Generator().manual_seed(seed)
        return tuple(torch.randn(1, 2, 16, 16, generator=g, dtype=torch.bfloat16) for _ in range(3))

    def per_call(fn, calls):
        fn()
        ran.append(calls)
        return 100.0 + calls

    monkeypatch.setattr(gpu, "_qkv", small_qkv)
    monkeypatch.setattr(gpu, "_per_call_us", per_call)
    monkeypatch.setattr(gpu, "_host_us", lambda fn, calls: fn() is not None and 7.0)
    monkeypatch.setattr(gpu, "_cuda_kernels", lambda fn: [type(fn()).__name__])
    monkeypatch.setattr(torch.cuda, "synchronize", lambda: None)
    out = gpu.host_entries(quick=True)
    calls = ["sdpa causal", "attention causal", "attention window", "flash_attention window",
             "flash_forward window", "attention sinks"]  # fmt: skip
    assert [p["call"] for p in out["pipelined"]] == calls
    assert {p["one_call_us"] for p in out["pipelined"]} == {101.0}
    assert {p["twenty_calls_us"] for p in out["pipelined"]} == {100.0 + gpu.PIPELINED}
    assert ran.count(1) == ran.count(gpu.PIPELINED) == 3 * len(calls)  # 3 rounds with quick
    assert [h["call"] for h in out["host_per_call"]] == calls and {h["host_us"] for h in out["host_per_call"]} == {7.0}
    assert out["kernels"]["sdpa causal"] == out["kernels"]["attention causal"] == ["Tensor"]

    def no_cupti(fn):
        raise RuntimeError("CUPTI is not available")

    monkeypatch.setattr(gpu, "_cuda_kernels", no_cupti)  # the timings are kept without the profiler
    out = gpu.host_entries(quick=True)
    assert out["kernels"]["error"] == "RuntimeError: CUPTI is not available" and len(out["pipelined"]) == len(calls)


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the behaviour without CUDA")
def test_without_cuda_the_gpu_suite_is_skipped_and_run_refuses(capsys):
    assert main(["--suite", "gpu", "--quick"]) == 0
    assert "the gpu suite needs CUDA" in capsys.readouterr().err
    with pytest.raises(RuntimeError, match="the gpu suite needs CUDA"):
        gpu.run(quick=True)


@pytest.mark.skipif(torch.cuda.is_available(), reason="the CPU stand-in for a GPU run")
def test_decoding_and_training_entries_run_and_fill_their_rows(monkeypatch):
    """The decoding and training rows' logic on the CPU: a tiny float32 LLaMA, the CUDA timer
    replaced, and generate's compile= dropped (compiling is tested in test_static_cache; here it would
    take a minute). A broken path costs a device session its minutes; here it costs seconds."""
    pytest.importorskip("transformers")
    import attn_core.model.generation

    eager = attn_core.model.generation.generate
    compiled = []

    def generate_uncompiled(*args, compile=False, **kwargs):
        compiled.append(compile)
        return eager(*args, **kwargs)

    monkeypatch.setattr(attn_core.model.generation, "generate", generate_uncompiled)
    monkeypatch.setattr(gpu, "DEVICE", "cpu")
    monkeypatch.setattr(gpu, "DTYPE", torch.float32)  # a CPU's bfloat16 products are slow
    _fake_timer(monkeypatch)  # every call takes 1 ms
    models = gpu._llama(quick=True)
    rows = gpu.decoding_entries(True, models)  # quick
    paths = ["ours_eager", "ours_static", "ours_static_compiled", "ours_static_cudagraphs", "hf_eager"]
    assert [r["ours"] for r in rows] == paths * 2  # batch 1, then batch 16
    assert [r["entry"].split(",")[0] for r in rows] == ["greedy decoding B=1"] * 5 + ["greedy decoding B=16"] * 5
    assert {True, "reduce-overhead"} <= set(compiled)  # each compiled path asked for its mode
    for r in rows:
        B = int(r["shape"].strip("()").split(",")[0])
        assert r["tokens_per_s"] == pytest.approx(B * 16 / 1e-3) and r["speedup_vs_hf"] == 1.0
        assert ("compile_warmup_s" in r) == (r["ours"] in ("ours_static_compiled", "ours_static_cudagraphs"))
    (train,) = gpu.training_entries(True, models)
    assert train["shape"] == "(2, 64)" and train["ratio"] == train["ci_low"] == train["ci_high"] == 1.0
    assert not any(p.grad is not None for m in models[:2] for p in m.parameters())  # gradients cleared
