"""The host's work in one cached decoding step: kernel launches and Python calls, ours vs Hugging Face.

At batch 1 a decoding step on a GPU does little arithmetic per kernel: its time is what
the host spends issuing the kernels (Python, the dispatcher, the launches). On an H200 an
earlier ``attn_core`` decoded at 0.73× Hugging Face's speed while computing the same thing;
after the work counted here was cut, 1.11× (``attn_core/data/gpu``). That work does not
depend on the device, so the CPU can count it exactly, with no timing noise:

* **kernel launches**: the ATen operators a step dispatches that compute a tensor
  (:func:`attn_core.teach.measure.launched_ops`: views such as ``transpose`` launch nothing);
* **Python calls**: every function call ``cProfile`` sees during the step (Python
  functions and builtins), a proxy for the interpreter's share.

Both models are the same tiny LLaMA (4 layers, GQA), ours converted from Hugging Face's
with :func:`attn_core.hf.convert.from_hf`, in float32 and bfloat16, after a 16-token prefill.
The token-id check of a CPU step reads two values (``min``, ``max``); on a GPU it is an
asynchronous device assert instead.

``python -m benchmarks.host_work`` prints the table.
"""

from __future__ import annotations

import cProfile
import pstats
from collections import Counter

import torch

from attn_core.teach.measure import launched_ops


def count_step(step) -> dict:
    """Kernel launches (total and by operator) and Python calls of one call of ``step()``."""
    ops = Counter(launched_ops(step))
    profile = cProfile.Profile()
    profile.enable()
    step()
    profile.disable()
    return dict(launches=sum(ops.values()), by_op=dict(ops), python_calls=pstats.Stats(profile).total_calls)


def _models(dtype: torch.dtype, n_layers: int = 4):
    from transformers import LlamaConfig, LlamaForCausalLM

    from attn_core.hf.convert import from_hf

    config = LlamaConfig(
        vocab_size=256, hidden_size=64, intermediate_size=128, num_hidden_layers=n_layers,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512,
    )  # fmt: skip
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        hf = LlamaForCausalLM(config).to(dtype).eval()
    return hf, from_hf(hf).eval()


@torch.no_grad()
def run(dtypes=(torch.float32, torch.bfloat16)) -> list[dict]:
    """One row per dtype: ours and Hugging Face's launches and Python calls per decoding step."""
    rows = []
    prompt = torch.randint(0, 256, (1, 16), generator=torch.Generator().manual_seed(0))
    token = prompt[:, -1:]
    for dtype in dtypes:
        hf, ours = _models(dtype)
        caches = ours.make_caches(1, 64)
        ours(prompt, caches=caches)
        past = hf(prompt, use_cache=True).past_key_values
        # Each step appends to the caches: every count is of a step like the others (no first-call work).
        ours(token, caches=caches)
        hf(token, past_key_values=past, use_cache=True)
        mine = count_step(lambda ours=ours, caches=caches: ours(token, caches=caches))
        theirs = count_step(lambda hf=hf, past=past: hf(token, past_key_values=past, use_cache=True))
        rows.append(
            dict(
                dtype=str(dtype).removeprefix("torch."),
                layers=len(ours.blocks),
                ours_launches=mine["launches"],
                hf_launches=theirs["launches"],
                ours_python_calls=mine["python_calls"],
                hf_python_calls=theirs["python_calls"],
                ours_by_op=mine["by_op"],
                hf_by_op=theirs["by_op"],
            )
        )
    return rows


def markdown(rows: list[dict]) -> str:
    """The table: per step, ours and Hugging Face's counts and their ratio."""
    lines = [
        "| dtype | kernel launches, ours | HF | ratio | Python calls, ours | HF | ratio |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        launches, calls = (r["ours_launches"], r["hf_launches"]), (r["ours_python_calls"], r["hf_python_calls"])
        lines.append(
            f"| {r['dtype']} | {launches[0]} | {launches[1]} | {launches[0] / launches[1]:.2f} "
            f"| {calls[0]} | {calls[1]} | {calls[0] / calls[1]:.2f} |"
        )
    return "\n".join(lines)


if __name__ == "__main__":
    print(markdown(run()))
