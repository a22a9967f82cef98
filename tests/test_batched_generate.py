"""Batched, left-padded generation: each row gets what it gets alone, and what Hugging Face's batched generate gives."""

from __future__ import annotations

import pytest
import test_parity_hf
import torch

from attn_core import DecoderConfig, DecoderLM
from attn_core.model.generation import generate
from attn_core.model.padding import positions_from_mask

transformers = pytest.importorskip("transformers", minversion="5.0")

from attn_core.config import LayerPattern  # noqa: E402
from attn_core.hf.convert import from_hf  # noqa: E402

exact_hf = test_parity_hf.exact_hf  # the fixture that lifts HF's float32 round trips
llama_config, seeded = test_parity_hf.llama_config, test_parity_hf.seeded

F64 = torch.float64
PROMPTS = [[5, 9, 2, 7, 1, 3], [4, 8], [11, 6, 10, 2]]  # lengths 6, 2, 4


def left_padded(prompts: list[list[int]], pad: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """Token ids ``(B, T_max)`` padded on the left with ``pad``, and the mask (1 = token)."""
    T = max(len(p) for p in prompts)
    idx = torch.tensor([[pad] * (T - len(p)) + p for p in prompts])
    mask = torch.tensor([[0] * (T - len(p)) + [1] * len(p) for p in prompts])
    return idx, mask


def _gpt2() -> DecoderLM:
    torch.manual_seed(0)
    model = DecoderLM(DecoderConfig.gpt2_like(vocab_size=24, d_model=32, n_heads=4, max_len=32)).to(F64).eval()
    with torch.no_grad():
        model.lm_head.weight.mul_(30.0)
        model.pos_emb.embedding.weight.mul_(30.0)  # positions that matter: the classic bug must show
    return model


def test_left_padded_llama_equals_hf_batched_generate(exact_hf):
    hf = seeded(transformers.LlamaForCausalLM(llama_config()), seed=1)
    ours = from_hf(hf)
    idx, mask = left_padded(PROMPTS)
    expected = hf.generate(idx, attention_mask=mask, max_new_tokens=8, do_sample=False, pad_token_id=0)
    tokens, logits = generate(ours, idx, 8, temperature=0.0, attention_mask=mask, return_logits=True)
    assert torch.equal(tokens, expected)
    # HF's logits of the same padded sequence, at the real positions, equal ours
    full_mask = torch.cat([mask, torch.ones(3, 8, dtype=mask.dtype)], dim=1)  # (3, 14): prompt + new
    hf_logits = hf(tokens[:, :-1], attention_mask=full_mask[:, :-1]).logits
    real = full_mask[:, :-1].bool()
    assert (logits[real] - hf_logits[real]).abs().max() < 1e-10


@pytest.mark.parametrize("use_cache", [True, False])
def test_each_padded_row_equals_its_own_generation(exact_hf, use_cache):
    ours = from_hf(seeded(transformers.LlamaForCausalLM(llama_config()), seed=1))
    idx, mask = left_padded(PROMPTS)
    tokens, logits = generate(
        ours, idx, 6, temperature=0.0, attention_mask=mask, return_logits=True, use_cache=use_cache
    )
    for b, prompt in enumerate(PROMPTS):
        alone, alone_logits = generate(ours, torch.tensor([prompt]), 6, temperature=0.0, return_logits=True)
        pads = idx.shape[1] - len(prompt)
        assert torch.equal(tokens[b, pads:], alone[0])
        assert (logits[b, pads:] - alone_logits[0]).abs().max() < 1e-10


def test_learned_positions_are_counted_from_each_rows_first_token():
    model = _gpt2()
    idx, mask = left_padded(PROMPTS)
    tokens, logits = generate(model, idx, 5, temperature=0.0, attention_mask=mask, return_logits=True)
    for b, prompt in enumerate(PROMPTS):
        alone, alone_logits = generate(model, torch.tensor([prompt]), 5, temperature=0.0, return_logits=True)
        pads = idx.shape[1] - len(prompt)
        assert torch.equal(tokens[b, pads:], alone[0])
        assert (logits[b, pads:] - alone_logits[0]).abs().max() < 1e-10


def test_the_classic_bug_positions_counted_from_the_pad():
    """Padding hidden but positions counted from column 0: the padded rows' logits change."""
    model = _gpt2()
    idx, mask = left_padded(PROMPTS)
    right = model(idx, attention_mask=mask)
    wrong = model(idx, attention_mask=mask, position_ids=torch.arange(idx.shape[1]).expand_as(idx))
    assert (right[0] - wrong[0]).abs().max() < 1e-12  # the unpadded row: the same positions either way
    for b in (1, 2):  # the padded rows: shifted positions, other logits
        assert (right[b, -1] - wrong[b, -1]).abs().max() > 0.1


def test_rope_positions_may_only_shift_a_row():
    """RoPE depends on q - k: a whole-row shift changes nothing, anything else is refused."""
    ours = from_hf(seeded(transformers.LlamaForCausalLM(llama_config()), seed=1))
    idx, mask = left_padded(PROMPTS)
    base = ours(idx, attention_mask=mask)
    shifted = ours(idx, attention_mask=mask, position_ids=positions_from_mask(mask.bool(), idx.shape[1]))
    real = mask.bool()
    assert (base[real] - shifted[real]).abs().max() < 1e-10
    with pytest.raises(ValueError, match="shifted as a whole"):
        ours(idx, position_ids=torch.tensor([[0, 1, 2, 3, 5, 6]] * 3))


def test_padding_bad_input():
    model = _gpt2()
    idx, mask = left_padded(PROMPTS)
    with pytest.raises(ValueError, match=r"attention_mask must have shape \(B, past \+ T\) = \(3, 6\), got \(3, 5\)"):
        model(idx, attention_mask=mask[:, 1:])
    with pytest.raises(TypeError, match="attention_mask must be boolean or integer"):
        model(idx, attention_mask=mask.double())
    with pytest.raises(ValueError, match="attention_mask must hold 0 \\(padding\\) and 1 \\(token\\)"):
        model(idx, attention_mask=mask * 2)
    with pytest.raises(ValueError, match=r"position_ids must be in \[0, past \+ T = 6\), got min=0, max=9"):
        model(idx, position_ids=torch.full_like(idx, 9).index_fill(1, torch.tensor([0]), 0))
    with pytest.raises(ValueError, match="attention_mask must have the prompt's shape"):
        generate(model, idx, 2, attention_mask=mask[:1])
    with pytest.raises(ValueError, match="not supported with static caches"):
        generate(model, idx, 2, attention_mask=mask, static=True)
    sliding = DecoderLM(
        DecoderConfig.llama_like(
            vocab_size=24,
            d_model=32,
            n_heads=4,
            pattern=LayerPattern(layer_types=("sliding", "full"), sliding_window=3),
        )
    )
    with pytest.raises(ValueError, match="a sliding window's rolling cache takes no mask"):
        sliding(idx, attention_mask=mask)
