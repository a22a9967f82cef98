"""Suite ``serving``: static batching vs the engine's continuous batching on the same requests.

    python -m benchmarks.serving            # the mix below (about a minute on a 2-core CPU)
    python -m benchmarks.serving --quick    # tiny sizes, seconds: checks that the script runs
    python -m benchmarks.serving --smollm2  # also: SmolLM2 in float32, engine vs generate alone

The requests: prompts of 8 to 64 tokens and 4 to 64 new tokens each (uniform), in
arrival order. **Static batching** takes them ``batch`` at a time, left-pads the prompts
and runs :func:`~attn_core.generate` on each batch until its longest request is done (a
short request keeps its row busy to the end, and the next batch waits for the whole
batch). **Continuous batching** is :class:`~attn_core.serving.Engine`, given the memory
the static batches reserve (``batch`` rows of the longest prompt plus the most new
tokens, in blocks), so neither side has more cache. Both must return the same tokens as
greedy ``generate`` alone (checked before the timing and reported); tokens/s counts the
tokens the requests asked for. The two are timed in interleaved rounds of one run
(:func:`~attn_core.teach.measure.timing.time_interleaved`), and the ratio is taken round
by round, with its quartiles and 95% interval.

``--smollm2`` runs SmolLM2-135M-Instruct in float32 (its own tokenizer's prompts) and
counts the requests whose engine tokens differ from ``generate`` alone: float32 sums in
another order (packed steps, prefill chunks) can flip a greedy near-tie. For each
difference it prints the gap between the two best logits where the tokens part.
"""

from __future__ import annotations

import argparse
import json
import random

import torch

from attn_core import DecoderConfig, DecoderLM, generate
from attn_core.caches.paged import BlockPool, make_paged_storage
from attn_core.serving import Engine
from attn_core.serving.batch import forward_packed

from .common import format_table, machine_info, ratio_summary, time_interleaved

FULL = dict(
    model=dict(vocab_size=256, n_layers=2, d_model=512, n_heads=8, n_kv_heads=2, max_len=256),
    requests=32,
    prompt=(8, 64),
    new=(4, 64),
    batch=8,
    block_size=16,
    max_batch_tokens=256,
    rounds=5,
)
QUICK = dict(
    model=dict(vocab_size=32, n_layers=2, d_model=32, n_heads=4, n_kv_heads=2, max_len=64),
    requests=6,
    prompt=(2, 8),
    new=(1, 8),
    batch=3,
    block_size=4,
    max_batch_tokens=16,
    rounds=2,
)


def make_model(cfg: dict, device: str = "cpu") -> DecoderLM:
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        return DecoderLM(DecoderConfig.llama_like(**cfg["model"])).to(device).eval()


def make_requests(cfg: dict, seed: int = 0) -> list[tuple[list[int], int]]:
    """``(prompt ids, new tokens)`` of each request, drawn uniformly within the mix's ranges."""
    rng = random.Random(seed)
    V = cfg["model"]["vocab_size"]
    return [
        ([rng.randrange(V) for _ in range(rng.randint(*cfg["prompt"]))], rng.randint(*cfg["new"]))
        for _ in range(cfg["requests"])
    ]


def static_batching(model, requests, batch: int) -> list[list[int]]:
    """Each ``batch`` of requests left-padded and generated until its longest request is done."""
    out = []
    for i in range(0, len(requests), batch):
        group = requests[i : i + batch]
        T = max(len(p) for p, _ in group)
        idx = torch.zeros(len(group), T, dtype=torch.long)
        mask = torch.zeros(len(group), T, dtype=torch.long)
        for row, (p, _) in enumerate(group):
            idx[row, T - len(p) :] = torch.tensor(p)
            mask[row, T - len(p) :] = 1
        tokens = generate(model, idx, max(n for _, n in group), temperature=0.0, attention_mask=mask)
        out += [tokens[row, T : T + n].tolist() for row, (_, n) in enumerate(group)]
    return out


def engine_blocks(cfg: dict, requests) -> int:
    """The blocks of the memory static batching reserves: ``batch`` rows of the longest request."""
    longest = max(len(p) for p, _ in requests) + max(n for _, n in requests)
    return -(-cfg["batch"] * longest // cfg["block_size"])


def continuous_batching(model, requests, cfg: dict, num_blocks: int) -> tuple[list[list[int]], Engine]:
    engine = Engine(
        model, block_size=cfg["block_size"], num_blocks=num_blocks, max_batch_tokens=cfg["max_batch_tokens"]
    )
    ids = [engine.add(p, n) for p, n in requests]
    out = engine.run()
    return [out[i] for i in ids], engine


def run(device: str = "cpu", *, quick: bool = False, log=print) -> dict:
    """Run the suite; return ``{"rows": [...], "targets": [...]}``."""
    cfg = QUICK if quick else FULL
    model = make_model(cfg, device)
    requests = make_requests(cfg)
    asked = sum(n for _, n in requests)
    num_blocks = engine_blocks(cfg, requests)
    alone = [generate(model, torch.tensor([p]), n, temperature=0.0)[0, len(p) :].tolist() for p, n in requests]
    static_out = static_batching(model, requests, cfg["batch"])
    engine_out, engine = continuous_batching(model, requests, cfg, num_blocks)
    s = engine.stats
    log(
        f"  serving [{device}]: {len(requests)} requests, {asked} new tokens; static batches of {cfg['batch']}, "
        f"engine with {num_blocks} blocks of {cfg['block_size']}, {cfg['max_batch_tokens']} tokens per step"
    )
    fns = {
        "static batching": lambda: static_batching(model, requests, cfg["batch"]),
        "continuous batching": lambda: continuous_batching(model, requests, cfg, num_blocks),
    }
    t = time_interleaved(fns, rounds=cfg["rounds"], warmup=0, device=device)
    base = t["static batching"]
    rows = []
    for name, timing in t.items():
        vs = ratio_summary(timing, base)
        rows.append(
            dict(
                suite="serving",
                device=device,
                name=name,
                requests=len(requests),
                new_tokens=asked,
                median_s=timing.median,
                spread=timing.spread,
                rounds=len(timing.seconds),
                tokens_per_s=asked / timing.median,
                baseline="static batching",
                time_ratio=vs.median,
                time_ratio_ci_low=vs.ci_low,
                time_ratio_ci_high=vs.ci_high,
                speedup=1 / vs.median,
            )
        )
    rows[-1].update(
        steps=s.steps,
        peak_blocks=s.peak_blocks,
        mean_sequences_per_step=sum(s.step_sequences) / s.steps,
        preemptions=s.preemptions,
    )
    targets = [
        dict(name="static batching tokens equal generate alone", value=float(static_out == alone), threshold=1,
             comparison="==", passed=static_out == alone),
        dict(name="engine tokens equal generate alone", value=float(engine_out == alone), threshold=1,
             comparison="==", passed=engine_out == alone),
    ]  # fmt: skip
    return {"rows": rows, "targets": targets}


def smollm2_agreement(n_requests: int = 24, new_tokens: int = 24, log=print) -> dict:
    """Float32 SmolLM2 through the engine vs ``generate`` alone: requests that differ, and the logit gaps."""
    from attn_core.hf.smollm2 import load_smollm2

    model, tokenizer = load_smollm2(torch.float32)
    rng = random.Random(0)
    words = "the of and to in is was for on that with as by at from his her they which one all".split()
    system = tokenizer.encode("You are a helpful assistant. Answer briefly and precisely.\n")
    prompts = [system + tokenizer.encode(" ".join(rng.choice(words) for _ in range(rng.randint(3, 30))))
               for _ in range(n_requests)]  # fmt: skip
    engine = Engine(model, block_size=16, num_blocks=256, max_batch_tokens=64)
    ids = [engine.add(p, new_tokens) for p in prompts]
    out = engine.run()
    differ, gaps, all_gaps = 0, [], []
    for i, p in zip(ids, prompts):
        ref, logits = generate(model, torch.tensor([p]), new_tokens, temperature=0.0, return_logits=True)
        ref = ref[0, len(p) :].tolist()
        top2 = logits[0, len(p) - 1 :].topk(2, dim=-1).values  # (new_tokens, 2): at each generated token
        all_gaps += (top2[:, 0] - top2[:, 1]).tolist()
        if out[i] != ref:
            differ += 1
            j = next(k for k, (a, b) in enumerate(zip(out[i], ref)) if a != b)
            gaps.append(all_gaps[-new_tokens + j])
    drift = packed_logit_drift(model, prompts[:8])
    near = sum(g <= 10 * drift for g in all_gaps)
    log(
        f"  smollm2 float32: {differ} of {n_requests} requests differ from generate alone (gaps there: {gaps}); "
        f"packed vs alone logits differ by {drift:.2e} at most; {near} of {len(all_gaps)} greedy steps have a "
        f"top-2 gap within 10x that (smallest gap {min(all_gaps):.2e})"
    )
    s = engine.stats
    return dict(requests=n_requests, new_tokens=new_tokens, differ=differ, gaps_at_first_difference=gaps,
                max_packed_logit_diff=drift, steps_with_gap_within_10x=near, steps=len(all_gaps),
                smallest_gap=min(all_gaps), prefill_tokens=s.prefill_tokens)  # fmt: skip


def packed_logit_drift(model, prompts: list[list[int]]) -> float:
    """Largest difference between the last-token logits of one packed prefill and of each prompt alone."""
    pool = BlockPool(sum(-(-len(p) // 16) for p in prompts), 16)
    storage = make_paged_storage(model.make_caches(1), pool, dtype=torch.float32)
    views = []
    for p in prompts:
        table = [pool.allocate() for _ in range(-(-len(p) // 16))]
        views.append([s.view(table) for s in storage])
    with torch.no_grad():
        packed = forward_packed(model, [(p, 0) for p in prompts], views)  # (len(prompts), V)
        alone = torch.stack([model(torch.tensor([p]))[0, -1] for p in prompts])
    return float((packed - alone).abs().max())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.serving", description=__doc__)
    parser.add_argument("--quick", action="store_true", help="tiny sizes and few rounds (for tests)")
    parser.add_argument("--smollm2", action="store_true", help="also compare float32 SmolLM2 with generate alone")
    parser.add_argument("--out", help="JSON file to write")
    args = parser.parse_args(argv)
    result = dict(machine=machine_info(), quick=args.quick, **run(quick=args.quick))
    print(
        format_table(
            result["rows"],
            [
                ("name", "", ""),
                ("median_s", "median s", ".3f"),
                ("tokens_per_s", "tokens/s", ".1f"),
                ("time_ratio", "time ratio", ".3f"),
                ("time_ratio_ci_low", "95% CI", ".3f"),
                ("time_ratio_ci_high", "", ".3f"),
                ("speedup", "speed-up", ".2f"),
            ],
        )
    )
    for t in result["targets"]:
        print(f"{t['name']}: {'PASS' if t['passed'] else 'FAIL'}")
    if args.smollm2:
        result["smollm2"] = smollm2_agreement()
    if args.out:
        with open(args.out, "w") as f:
            json.dump(result, f, indent=1)
    return 0 if all(t["passed"] for t in result["targets"]) else 1


if __name__ == "__main__":
    raise SystemExit(main())
