"""A decoding step makes the host wait for nothing: no value read from a device tensor, no graph break.

``int(t)``, ``t.item()`` or ``bool(t)`` on a GPU tensor stalls the host until the device
catches up (a synchronisation), and stops ``torch.compile``'s graph there (a graph break).
``torch._dynamo.explain`` counts the breaks of a decoding step on the CPU; on a GPU,
``torch.cuda.set_sync_debug_mode("error")`` turns any synchronisation into an error.
"""

from __future__ import annotations

import pytest
import torch

from attn_core import DecoderConfig, DecoderLM
from attn_core.config import LayerPattern

_SMALL = dict(vocab_size=24, d_model=32, n_heads=4, max_len=32)

#: The main kinds of model a decoding step must compile without a break.
NO_BREAK = {
    "llama_gqa": DecoderConfig.llama_like(**_SMALL, n_kv_heads=2),
    "gpt2_learned": DecoderConfig.gpt2_like(**_SMALL),
    "gated_qk_norm_softcap": DecoderConfig.llama_like(
        **_SMALL, n_kv_heads=2, qk_norm=True, attention_gate="headwise", attention_softcap=30.0
    ),
    "sliding_window": DecoderConfig.llama_like(
        **_SMALL, n_kv_heads=2, pattern=LayerPattern(layer_types=("sliding", "full"), sliding_window=3)
    ),
    "hybrid_linear": DecoderConfig.llama_like(
        **_SMALL, n_kv_heads=2, pattern=LayerPattern(layer_types=("linear", "full"))
    ),
}


def _decode_step(config: DecoderConfig, device: str = "cpu"):
    torch.manual_seed(0)
    model = DecoderLM(config).eval().to(device)
    caches = model.make_caches(1, 16)
    with torch.no_grad():
        model(torch.randint(0, config.vocab_size, (1, 5), device=device), caches=caches)  # prefill
    token = torch.randint(0, config.vocab_size, (1, 1), device=device)
    return model, caches, token


@pytest.mark.parametrize("name", sorted(NO_BREAK))
def test_decoding_step_has_no_graph_break(name):
    model, caches, token = _decode_step(NO_BREAK[name])
    torch._dynamo.reset()
    with torch.no_grad():
        report = torch._dynamo.explain(lambda t: model(t, caches=caches))(token)
    reasons = [str(b.reason).splitlines()[0] for b in report.break_reasons]
    assert report.graph_break_count == 0, reasons
    assert report.graph_count == 1


def test_explain_sees_a_host_read_as_a_break():
    """The probe itself: the check that read ``int(idx.max())`` on every call broke the graph."""

    def step(t):
        return t * int(t.max())

    torch._dynamo.reset()
    report = torch._dynamo.explain(step)(torch.ones(3))
    assert report.graph_break_count >= 1


def test_token_ids_still_checked_on_cpu():
    model, caches, _ = _decode_step(NO_BREAK["llama_gqa"])
    with pytest.raises(ValueError, match=r"token ids must be in \[0, vocab_size=24\), got min=24, max=24"):
        model(torch.tensor([[24]]), caches=caches)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device on this machine")
def test_cuda_decoding_step_never_synchronises():
    model, caches, token = _decode_step(NO_BREAK["llama_gqa"], device="cuda")
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        with torch.no_grad():
            model(token, caches=caches)
    finally:
        torch.cuda.set_sync_debug_mode("default")


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device on this machine")
def test_cuda_static_decoding_step_never_synchronises():
    """Static caches keep their count on the device: a step reads no value back (eager here)."""
    torch.manual_seed(0)
    model = DecoderLM(NO_BREAK["llama_gqa"]).eval().cuda()
    caches = model.make_caches(1, 16, static=True)
    token = torch.ones(1, 1, dtype=torch.long, device="cuda")
    with torch.no_grad():
        model(torch.ones(1, 5, dtype=torch.long, device="cuda"), caches=caches)  # prefill
        torch.cuda.synchronize()
        torch.cuda.set_sync_debug_mode("error")
        try:
            for _ in range(3):
                model(token, caches=caches)
        finally:
            torch.cuda.set_sync_debug_mode("default")


@pytest.mark.parametrize("name", sorted(NO_BREAK))
def test_compiled_static_decoding_is_traced_once(name):
    """A compiled step with static caches is traced once, for every position: the positions
    come from the caches' device tensors, not from a Python int that would be part of the
    graph (traced anew, or made symbolic, at every step: CUDA graphs could not replay it),
    and the rotary tables are reserved for every slot. ``dynamic=False``: no symbolic shapes."""
    from torch._dynamo.utils import counters

    torch.manual_seed(0)
    config = NO_BREAK[name]
    model = DecoderLM(config).eval()
    caches, growing = model.make_caches(1, 32, static=True), model.make_caches(1, 32)
    torch._dynamo.reset()
    counters.clear()
    step = torch.compile(model, backend="eager", dynamic=False)  # dynamo's tracing and guards, no C++ build
    prompt = torch.randint(0, config.vocab_size, (1, 5))
    worst = 0.0
    with torch.no_grad():
        model(prompt, caches=caches)  # prefill, eager
        token = model(prompt, caches=growing)[:, -1:].argmax(-1)
        for _ in range(26):  # positions 5..30
            expected = model(token, caches=growing)
            worst = max(worst, (step(token, caches=caches) - expected).abs().max().item())
            token = expected[:, -1:].argmax(-1)
    traced = counters["stats"]["unique_graphs"]
    print(f"{name}: {traced} traced graph for 26 steps; largest difference {worst:.1e}")
    assert traced == 1
    assert worst < 1e-5  # float32, another order of operations (the masked empty slots)
    assert [c.size for c in caches] == [31, 31]  # the host count, read back from the device
