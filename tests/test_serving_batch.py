"""attn_core.serving.batch: one packed step equals each sequence run alone; the model is left as it was."""

from __future__ import annotations

import pytest
import torch

from attn_core import DecoderConfig, DecoderLM
from attn_core.caches.paged import BlockPool, make_paged_storage
from attn_core.config import LayerPattern, Positions
from attn_core.serving.batch import PackedCaches, SequenceSplit, check_packable, forward_packed, split_attention

F64 = torch.float64
_SMALL = dict(vocab_size=24, d_model=32, n_heads=4, max_len=64)
CONFIGS = {
    "gqa": DecoderConfig.llama_like(**_SMALL, n_kv_heads=2),
    "learned": DecoderConfig.gpt2_like(**_SMALL),
    "sinusoidal": DecoderConfig.gpt2_like(**_SMALL, positions=Positions(positional="sinusoidal")),
    "window": DecoderConfig.llama_like(
        **_SMALL, n_kv_heads=2, pattern=LayerPattern(layer_types=("sliding", "full"), sliding_window=4)
    ),
    "mla": DecoderConfig.llama_like(**_SMALL, n_kv_heads=None, attention="mla", d_latent=16, d_q_latent=12),
}


def _model(config: DecoderConfig) -> DecoderLM:
    torch.manual_seed(0)
    return DecoderLM(config).to(F64).eval()


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_packed_steps_equal_each_sequence_alone(name):
    model = _model(CONFIGS[name])
    gen = torch.Generator().manual_seed(3)
    seqs = [torch.randint(0, 24, (n,), generator=gen).tolist() for n in (9, 2, 14)]
    pool = BlockPool(40, 4)
    storage = make_paged_storage(model.make_caches(1), pool, dtype=F64)
    tables = [[pool.allocate() for _ in range(4)] for _ in seqs]
    views = [[s.view(t) for s in storage] for t in tables]
    done = [0, 0, 0]
    got, ends = [[] for _ in seqs], [[] for _ in seqs]
    with torch.no_grad():
        for cut in ((5, 2, 3), (1, 0, 6), (1, 0, 5), (2, 0, 0)):  # prefill chunks and decode steps, mixed
            live = [i for i, n in enumerate(cut) if n]
            chunks = [(seqs[i][done[i] : done[i] + cut[i]], done[i]) for i in live]
            logits = forward_packed(model, chunks, [views[i] for i in live])  # (len(live), V)
            for row, i in enumerate(live):
                done[i] += cut[i]
                got[i].append(logits[row])
                ends[i].append(done[i] - 1)
        for i, tokens in enumerate(seqs):
            alone = model(torch.tensor([tokens]))[0]  # (T, V)
            assert (torch.stack(got[i]) - alone[ends[i]]).abs().max() < 1e-10


def test_split_attention_puts_the_modules_back_even_after_an_error():
    model = _model(CONFIGS["gqa"])
    originals = [b.attn for b in model.blocks]
    with pytest.raises(RuntimeError, match="inside"):
        with split_attention(model):
            assert all(isinstance(b.attn, SequenceSplit) for b in model.blocks)
            raise RuntimeError("inside")
    assert [b.attn for b in model.blocks] == originals


def test_sequence_split_refuses_other_caches_masks_and_weights():
    split = SequenceSplit(_model(CONFIGS["gqa"]).blocks[0].attn)
    x = torch.zeros(1, 2, 32, dtype=F64)
    with pytest.raises(TypeError, match="needs PackedCaches"):
        split(x, kv_cache=None)
    with pytest.raises(ValueError, match="no mask"):
        split(x, mask=torch.ones(2, 2, dtype=torch.bool), kv_cache=PackedCaches([], [], 0))
    with pytest.raises(ValueError, match="one view per span"):
        PackedCaches([(0, 1)], [], 0)


def test_check_packable_refuses_what_a_packed_step_cannot_run():
    with pytest.raises(ValueError, match="ALiBi"):
        check_packable(_model(DecoderConfig.llama_like(**_SMALL, positions=Positions(positional="alibi"))))
    with pytest.raises(ValueError, match="share keys"):
        check_packable(_model(DecoderConfig.llama_like(**_SMALL, pattern=LayerPattern(kv_share=(0, 0)))))
    with pytest.raises(ValueError, match="standard blocks"):
        check_packable(_model(DecoderConfig.gpt2_like(**_SMALL, block="sas", positions=Positions("rope"))))
