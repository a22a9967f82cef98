"""attn_core.generate: the cached path equals the uncached one (tokens and logits), sampling, bad input."""

from __future__ import annotations

import pytest
import torch

from attn_core import DecoderConfig, DecoderLM, generate
from attn_core.model.generation import sample_next
from conftest import decoder

CONFIGS = {
    "gpt2_like": DecoderConfig.gpt2_like(vocab_size=20, d_model=32, n_heads=4, max_len=24),
    "llama_like": DecoderConfig.llama_like(vocab_size=20, d_model=32, n_heads=4, max_len=24),
    "mla": DecoderConfig.llama_like(
        vocab_size=20, d_model=32, n_heads=4, n_kv_heads=None, attention="mla", d_latent=16
    ),
    "sas": DecoderConfig.gpt2_like(vocab_size=20, d_model=32, n_heads=4, max_len=24, block="sas"),
}


def _model(name: str) -> DecoderLM:
    model = decoder(CONFIGS[name])
    with torch.no_grad():  # sharpen the logits so that greedy decoding has clear winners
        model.lm_head.weight.mul_(20.0)
    return model


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_cached_equals_uncached_greedy(name):
    model = _model(name)
    prompt = torch.randint(0, 20, (3, 5), generator=torch.Generator().manual_seed(1))
    fast, fast_logits = generate(model, prompt, 8, temperature=0, use_cache=True, return_logits=True)
    slow, slow_logits = generate(model, prompt, 8, temperature=0, use_cache=False, return_logits=True)
    assert fast.shape == (3, 13) and torch.equal(fast[:, :5], prompt)
    assert torch.equal(fast, slow)
    assert fast_logits.shape == slow_logits.shape == (3, 12, 20)
    assert torch.allclose(fast_logits, slow_logits, atol=1e-4)
    # the logits cover the prompt too: they are the full-sequence forward pass
    model.eval()
    with torch.no_grad():
        assert torch.allclose(fast_logits, model(fast[:, :-1]), atol=1e-4)
    # greedy: each new token is the argmax of the previous position's logits
    assert torch.equal(fast[:, 5:], fast_logits[:, 4:].argmax(-1))


def test_sampling_is_reproducible_and_respects_top_k():
    model = _model("gpt2_like")
    prompt = torch.zeros(4, 2, dtype=torch.long)
    a = generate(model, prompt, 6, temperature=1.0, generator=torch.Generator().manual_seed(5))
    b = generate(model, prompt, 6, temperature=1.0, generator=torch.Generator().manual_seed(5), use_cache=False)
    assert torch.equal(a, b)  # same draws, with and without the cache
    logits = torch.tensor([[0.0, 1.0, 5.0, 4.0], [3.0, 0.0, 0.0, 2.0]])
    g = torch.Generator().manual_seed(0)
    draws = torch.cat([sample_next(logits, top_k=2, generator=g) for _ in range(200)], 1)
    assert set(draws[0].tolist()) <= {2, 3} and set(draws[1].tolist()) <= {0, 3}
    assert torch.equal(sample_next(logits, temperature=0), torch.tensor([[2], [0]]))


def test_restores_training_mode():
    model = _model("gpt2_like").train()
    generate(model, torch.zeros(1, 2, dtype=torch.long), 2)
    assert model.training


def test_bad_input():
    model = _model("gpt2_like")
    prompt = torch.zeros(1, 3, dtype=torch.long)
    with pytest.raises(ValueError, match="max_new_tokens=0"):
        generate(model, prompt, 0)
    with pytest.raises(ValueError, match="temperature=-1"):
        generate(model, prompt, 2, temperature=-1)
    with pytest.raises(ValueError, match="top_k=0"):
        generate(model, prompt, 2, top_k=0)
    with pytest.raises(TypeError, match="integer tensor"):
        generate(model, prompt.float(), 2)
    with pytest.raises(ValueError, match=r"shape \(B, T\)"):
        generate(model, torch.zeros(3, dtype=torch.long), 2)
    with pytest.raises(ValueError, match="exceed the model's max_len=24"):
        generate(model, prompt, 30)
    with pytest.raises(TypeError, match="generator must be a torch.Generator"):
        generate(model, prompt, 2, generator=1)
