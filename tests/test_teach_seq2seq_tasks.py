"""attn_core.teach.seq2seq_tasks: the encoder-decoder reversal task and its ideal alignment."""

from __future__ import annotations

import pytest
import torch

from attn_core.teach.seq2seq_tasks import reverse_alignment, reverse_seq2seq
from attn_core.teach.tasks import SEP


def _g(seed: int = 0) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def test_seq2seq_reverse_and_alignment():
    batch = reverse_seq2seq(3, n=5, vocab_size=9, generator=_g(2))
    assert batch.src.shape == batch.tgt_in.shape == batch.tgt_out.shape == (3, 5)
    assert torch.equal(batch.tgt_out, batch.src.flip(1))
    assert (batch.tgt_in[:, 0] == SEP).all() and torch.equal(batch.tgt_in[:, 1:], batch.tgt_out[:, :-1])
    A = reverse_alignment(5)
    # output i reads source n-1-i: applying the alignment to the source gives the target
    assert torch.equal((A @ batch.src.T.float()).T.long(), batch.tgt_out)


def test_same_seed_same_batch_and_bad_input():
    a, b = reverse_seq2seq(4, generator=_g(7)), reverse_seq2seq(4, generator=_g(7))
    assert all(torch.equal(x, y) for x, y in zip(a, b))
    assert reverse_alignment(3).tolist() == [[0.0, 0.0, 1.0], [0.0, 1.0, 0.0], [1.0, 0.0, 0.0]]
    with pytest.raises(ValueError, match="n"):
        reverse_alignment(0)
    with pytest.raises(ValueError, match="batch_size=0"):
        reverse_seq2seq(0)
    with pytest.raises(TypeError, match="generator must be a torch.Generator"):
        reverse_seq2seq(2, generator=0)
