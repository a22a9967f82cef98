"""attn_core.teach.serving: request mixes, measured cache bytes, static batching equal to
decoding alone, transformers' continuous batching driven with the same requests."""

from __future__ import annotations

import pytest
import torch

from attn_core import DecoderConfig
from attn_core.teach import serving
from conftest import decoder

F64 = torch.float64


def _lm():
    config = DecoderConfig.llama_like(vocab_size=40, d_model=32, n_heads=4, n_kv_heads=2, n_layers=2, max_len=64)
    model = decoder(config, seed=0).to(F64).eval()
    with torch.no_grad():
        model.lm_head.weight.mul_(20.0)  # clear winners for greedy decoding
    return model


REQUESTS = [
    serving.Request((3, 7, 1, 9), 5),
    serving.Request((4, 8), 1),
    serving.Request((11, 6, 10, 2, 5, 5), 3),
    serving.Request((1,), 4),
    serving.Request((2, 2, 2), 2),
]


class _ChatTokenizer:  # what request_mix needs of a transformers tokenizer
    def apply_chat_template(self, chat, add_generation_prompt, tokenize):
        assert add_generation_prompt and tokenize
        return [1] + [len(m["content"]) for m in chat] + [2]


def test_request_mix_applies_the_chat_template_and_counts_positions():
    mix = serving.request_mix(_ChatTokenizer(), "system", ["a", "bbb"], [3, 1])
    assert [r.prompt for r in mix] == [(1, 6, 1, 2), (1, 6, 3, 2)]
    assert [r.positions for r in mix] == [4 + 3 - 1, 4 + 1 - 1]  # the last new token is never fed back
    with pytest.raises(ValueError, match="2 questions, 1 counts"):
        serving.request_mix(_ChatTokenizer(), "s", ["a", "b"], [1])


def test_bad_requests_are_refused():
    with pytest.raises(ValueError, match="prompt=()"):
        serving.Request((), 3)
    with pytest.raises(ValueError, match="max_new_tokens"):
        serving.Request((1,), 0)


def test_cache_bytes_are_measured_from_the_caches():
    model = _lm()
    per_token = 2 * 2 * 2 * 8 * 8  # layers x (k, v) x heads x width x float64 bytes
    assert serving.cache_bytes_per_token(model) == per_token
    assert serving.preallocated_bytes(model, 3, 10) == 3 * 10 * per_token
    with pytest.raises(ValueError, match="max_len"):
        serving.preallocated_bytes(model, 3, 0)


def test_static_batching_gives_each_request_its_tokens_alone():
    model = _lm()
    alone, gap = serving.generate_alone(model, REQUESTS)
    assert gap > 0 and [len(alone[i]) for i in range(5)] == [5, 1, 3, 4, 2]
    out, counts = serving.static_batching(model, REQUESTS, batch_size=2)
    assert out == alone
    # groups (5, 1), (3, 4), (2): each runs as long as its longest request
    assert counts == {"steps": 5 + 4 + 2, "row_steps": 2 * 5 + 2 * 4 + 1 * 2, "useful_row_steps": 15}


def test_transformers_continuous_batching_equals_generate_alone():
    transformers = pytest.importorskip("transformers", minversion="5.0")
    from attn_core.hf.convert import from_hf

    config = transformers.LlamaConfig(
        vocab_size=40, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, max_position_embeddings=64,
    )  # fmt: skip
    torch.manual_seed(0)
    hf = transformers.LlamaForCausalLM(config).eval()
    with torch.no_grad():
        hf.lm_head.weight.mul_(20.0)
    alone, _ = serving.generate_alone(from_hf(hf).eval(), REQUESTS)
    with serving.HFContinuousBatching(hf, page_size=4, num_blocks=16, max_batch_tokens=32) as cb:
        assert cb.run(REQUESTS) == alone
