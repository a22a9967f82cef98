"""attn_core.teach.exercises.ch10: the right and wrong answers of exercises 10.1-10.3 (ANSWERS, held to
the standard by tests/test_teach_exercises_standard.py)."""

from __future__ import annotations

import torch

from attn_core import DecoderConfig, DecoderLM
from attn_core.teach.exercises.ch10 import (
    check_attention_crossover,
    check_causality_test,
    check_parameter_shares,
)


def _logits(model, idx):
    with torch.no_grad():
        return model(idx)


def right_probe(model, T, vocab_size):
    g = torch.Generator().manual_seed(0)
    idx = torch.randint(0, vocab_size, (4, T), generator=g)
    base = _logits(model, idx)
    for t in range(T - 1):
        changed = idx.clone()
        changed[:, t + 1 :] = (changed[:, t + 1 :] + 1) % vocab_size  # every later token
        if not torch.allclose(_logits(model, changed)[:, : t + 1], base[:, : t + 1]):
            return False
    return True


def next_token_only(model, T, vocab_size):  # change t + 1, look at t only
    idx = torch.randint(0, vocab_size, (4, T), generator=torch.Generator().manual_seed(0))
    base = _logits(model, idx)
    for t in range(T - 1):
        changed = idx.clone()
        changed[:, t + 1] = (changed[:, t + 1] + 1) % vocab_size
        if not torch.allclose(_logits(model, changed)[:, t], base[:, t]):
            return False
    return True


def all_positions(model, T, vocab_size):  # compares the changed positions too
    idx = torch.randint(0, vocab_size, (4, T), generator=torch.Generator().manual_seed(0))
    changed = idx.clone()
    changed[:, T // 2 :] = (changed[:, T // 2 :] + 1) % vocab_size
    return bool(torch.allclose(_logits(model, changed), _logits(model, idx)))


def last_token_only(model, T, vocab_size):  # changes the last token only: a leak that skips it goes unseen
    idx = torch.randint(0, vocab_size, (4, T), generator=torch.Generator().manual_seed(0))
    changed = idx.clone()
    changed[:, -1] = (changed[:, -1] + 1) % vocab_size
    return bool(torch.allclose(_logits(model, changed)[:, :-1], _logits(model, idx)[:, :-1]))


def first_query_only(model, T, vocab_size):  # changes tokens 1..T-1, compares query 0 only
    idx = torch.randint(0, vocab_size, (4, T), generator=torch.Generator().manual_seed(0))
    changed = idx.clone()
    changed[:, 1:] = (changed[:, 1:] + 1) % vocab_size
    return bool(torch.allclose(_logits(model, changed)[:, 0], _logits(model, idx)[:, 0]))


def needs_every_key(model, T, vocab_size):  # "causal" = sees the past and not the future
    idx = torch.randint(0, vocab_size, (4, T), generator=torch.Generator().manual_seed(0))
    if not right_probe(model, T, vocab_size):
        return False
    changed = idx.clone()
    changed[:, 0] = (changed[:, 0] + 1) % vocab_size
    return not torch.allclose(_logits(model, changed)[:, -1], _logits(model, idx)[:, -1])


def _shares(preset, *, tied_twice=False, untied_once=False, of_blocks=False, digits=None):
    """The embedding and MLP shares of a preset's model, counted on the meta device, or a typical slip."""
    config = getattr(DecoderConfig, preset)()
    with torch.device("meta"):
        model = DecoderLM(config)
    emb = mlp = blocks = 0
    for name, p in model.named_parameters():
        if name.startswith(("tok_emb", "lm_head")):
            emb += p.numel()
        elif name.startswith("blocks."):
            blocks += p.numel()
            mlp += p.numel() if ".mlp." in name else 0
    total = model.num_parameters()
    vd = config.vocab_size * config.d_model
    if config.tie_weights and tied_twice:
        emb += vd
    if not config.tie_weights and untied_once:
        emb -= vd
    shares = {"embedding": emb / total, "mlp": mlp / (blocks if of_blocks else total)}
    return {k: v if digits is None else round(v, digits) for k, v in shares.items()}


def _predictions(**slip):
    return {preset: _shares(preset, **slip) for preset in ("qwen3_0_6b", "llama3_8b")}


def _crossover(c, *, causal_half=False, width=None, head=True, lookups=False):
    """T at which attention's two products (4·L·T·H·D FLOPs per token) cost the weights' 2·N."""
    D, H, Hkv, d, L = c.resolved_head_dim, c.n_heads, c.n_kv_heads or c.n_heads, c.d_model, c.n_layers
    f = c.resolved_d_ff
    attention = d * H * D + 2 * d * Hkv * D + H * D * d
    mlp = (3 if c.mlp == "swiglu" else 2) * d * f
    n = L * (attention + mlp) + (c.vocab_size * d if head else 0)
    if lookups:  # counts the table lookups as multiplies
        n += (0 if c.tie_weights else c.vocab_size * d) + (c.max_len * d if c.positions.positional == "learned" else 0)
    per_token = (2 if causal_half else 4) * L * (width or H * D)
    return 2 * n / per_token


def _crossover_from_module(c):  # counts the 2-D weights of the built model instead
    with torch.device("meta"):
        model = DecoderLM(c)
    n = sum(p.numel() for name, p in model.named_parameters() if p.dim() == 2 and "emb" not in name)
    n += c.vocab_size * c.d_model if c.tie_weights else 0  # the tied output layer is tok_emb
    return n / (2 * c.n_layers * c.n_heads * c.resolved_head_dim)


ANSWERS = {
    check_parameter_shares: (
        [_predictions(), _predictions(digits=2), _predictions(digits=1)],
        [
            (_predictions(tied_twice=True), "counted once"),
            (_predictions(untied_once=True), "two V × d matrices"),
            (_predictions(of_blocks=True), "share of the blocks"),
            ({"qwen3_0_6b": {"embedding": 0.1, "mlp": 0.6}, "llama3_8b": {}}, "too low"),
            # the vocabulary's share guessed to grow with the model: it falls
            (
                {"qwen3_0_6b": {"embedding": 0.13, "mlp": 0.44}, "llama3_8b": {"embedding": 0.26, "mlp": 0.7}},
                "qwen3_0_6b embedding = 0.130 is too low",
            ),
            ({"qwen3_0_6b": 0.26}, "give a dict"),
        ],
    ),
    check_causality_test: (
        [right_probe],
        [
            (next_token_only, "'sees t + 2': said causal"),
            (all_positions, "'causal': said not causal"),
            (needs_every_key, "'causal window': said not causal"),
            (lambda m, T, V: True, "'prefix LM': said causal"),
            (last_token_only, "'prefix LM': said causal"),
            (first_query_only, "'query 5 sees key 7': said causal"),
            (lambda m, T, V: 1, "bool"),
        ],
    ),
    check_attention_crossover: (
        [_crossover, _crossover_from_module],
        [
            (lambda c: _crossover(c, causal_half=True), "causal half"),
            (lambda c: _crossover(c, width=c.d_model), "n_heads × head_dim"),
            (lambda c: _crossover(c, head=False), "output layer left out"),
            (lambda c: _crossover(c, lookups=True), "lookup"),
            (lambda c: 1.1 * _crossover(c), "off by +10%"),
        ],
    ),
}


def test_causality_test_names_the_model_a_one_step_probe_misses(capsys):
    assert not check_causality_test(next_token_only)
    assert "'first sees last': said causal" in capsys.readouterr().out
