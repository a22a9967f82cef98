"""Checks for the exercises of chapter 4 (cross-attention)."""

from __future__ import annotations

from typing import Callable

import torch
from torch import nn

from ...layers.multihead import MultiHeadAttention
from ...ops.masks import causal_mask, padding_mask
from ._common import report

__all__ = ["check_padding_test", "padding_candidates"]


# Exercise 4.3's models: an encoder of one self-attention layer and one cross-attention layer
# read by three fixed decoder queries. Small, float64 (rounding never blurs a verdict).
VOCAB, MAX_LEN, T_QUERIES, WIDTH = 16, 8, 3, 16


class _TinyReader(nn.Module):
    """Source ids -> logits of three fixed queries, with the key masks passed in.

    Shapes:
        src: (B, T) ids; masks: (B, 1, T) or None; output: (B, T_QUERIES, VOCAB)
    """

    def __init__(self) -> None:
        super().__init__()
        self.emb = nn.Embedding(VOCAB, WIDTH)
        self.pos = nn.Parameter(torch.randn(MAX_LEN, WIDTH))
        self.encoder = MultiHeadAttention(WIDTH, 2)
        self.cross = MultiHeadAttention(WIDTH, 2)
        self.queries = nn.Parameter(torch.randn(T_QUERIES, WIDTH))
        self.readout = nn.Linear(WIDTH, VOCAB)

    def forward(self, src, enc_mask, cross_mask):
        h = self.emb(src) + self.pos[: src.shape[1]]  # (B, T, WIDTH)
        memory = h + self.encoder(h, mask=enc_mask)  # (B, T, WIDTH)
        q = self.queries.expand(src.shape[0], -1, -1)  # (B, T_QUERIES, WIDTH)
        return self.readout(q + self.cross(q, memory, mask=cross_mask))


def _key_mask(lengths: list[int], T: int, shift: int) -> torch.Tensor:
    """``padding_mask`` with every length moved by ``shift`` (kept in ``[0, T]``). (B, 1, T)"""
    return padding_mask([min(max(n + shift, 0), T) for n in lengths], T)


def padding_candidates() -> list[tuple[Callable[[torch.Tensor, list], torch.Tensor], bool, str]]:
    """The models exercise 4.3's test is run on: ``(model, reads only the real tokens, what it is)``.

    Every model is called ``model(src, lengths)`` and looks the same from outside (one name,
    one signature); they share one set of seeded weights and differ only in their masks.
    """
    with torch.random.fork_rng(devices=[]):  # building the model must not move the notebook's RNG
        torch.manual_seed(43)
        net = _TinyReader().double().eval()

    def masked(enc_shift, cross_shift, first_row=False, hide_first=False):
        def impl(src, lengths):
            lengths = [int(n) for n in lengths]
            if first_row:  # the first sequence's lengths, for every row
                lengths = [lengths[0]] * len(lengths)
            T = src.shape[1]
            enc = None if enc_shift is None else _key_mask(lengths, T, enc_shift)
            cross = None if cross_shift is None else _key_mask(lengths, T, cross_shift)
            if hide_first:  # key 0 hidden too, in every row with another real token to read
                first = (torch.arange(T) == 0) & torch.tensor([n > 1 for n in lengths])[:, None]
                enc, cross = enc & ~first[:, None], cross & ~first[:, None]  # (B, 1, T)
            return net(src, enc, cross)

        return impl

    def alone(src, lengths):  # each sequence on its real tokens only: no padding, no mask
        return torch.cat([net(src[b : b + 1, : int(n)], None, None) for b, n in enumerate(lengths)])

    cases = [
        (masked(0, 0), True, "masks the padding in the encoder and in the cross-attention"),
        (masked(None, 0), False, "masks the padding in the cross-attention only: it leaks through the encoder"),
        (masked(1, 1), False, "masks from one past each length: the first padded position leaks"),
        (alone, True, "runs each sequence alone on its real tokens (no padding to mask)"),
        (masked(-1, -1), False, "masks each sequence's last real token too: the model never reads it"),
        (masked(0, 0, hide_first=True), False, "masks each sequence's first real token too: the model never reads it"),
        (masked(None, None), False, "passes no mask: the padding leaks everywhere"),
        (masked(0, 0, first_row=True), False, "uses the first sequence's lengths for every row of the batch"),
        (masked(0, None), False, "masks the padding in the encoder only: the cross-attention reads it"),
    ]

    def neutral(impl):
        def model(src, lengths):
            with torch.no_grad():
                return impl(src, lengths)

        return model

    return [(neutral(impl), right, what) for impl, right, what in cases]


def check_padding_test(reads_only_real_tokens: Callable[[Callable[..., torch.Tensor]], bool]) -> bool:
    """Exercise 4.3: ``reads_only_real_tokens(model)`` says whether a model's output depends on
    every real source token and on nothing in the padding.

    ``model(src, lengths)`` takes a right-padded batch of source ids (0 to 15; positions at
    and after ``lengths[b]`` are padding and may hold any id) and returns the logits of three
    fixed decoder queries. The test is run on nine models with the same weights, name and
    signature (two right, seven wrong: the padding leaks through the encoder only, through
    the cross-attention only, or everywhere; the first padded position leaks; the last or
    the first real token is masked; the first row's lengths are used for every row). A test
    that only changes the padding accepts the model that also hides the last real token, and
    so does one that compares a padded batch with each sequence run alone (that model hides
    it both times); one that changes the padding and only the last real token accepts the
    model that hides the first; one that changes only the last position misses the first
    padded position; a batch of one sequence cannot see the first row's lengths used for
    the others.

    Shapes:
        the inputs the test passes to ``model``: src ``(B, T)`` ids with ``T <= 8``,
        lengths ``B`` ints in ``[1, T]``; the model's output: ``(B, 3, 16)``
    """
    name = "4.3 a test for the padding"
    candidates = padding_candidates()
    for fn, right, what in candidates:
        try:
            with torch.random.fork_rng(devices=[]):  # the learner's draws must not move the notebook's RNG
                verdict = reads_only_real_tokens(fn)
        except Exception as e:  # a learner's bug should print, not stop the notebook
            return report(name, False, f"{type(e).__name__}: {e}")
        if not isinstance(verdict, bool):
            return report(name, False, f"return True or False, got {verdict!r:.40}")
        if verdict != right:
            if right:
                return report(name, False, f"rejects a right model (it {what})")
            return report(name, False, f"accepts a wrong model: it {what}")
    n_right = sum(right for _, right, _ in candidates)
    return report(
        name, True, f"right on all {len(candidates)} models ({n_right} right, {len(candidates) - n_right} wrong)"
    )


# The exercises of the revised chapter (issue 25): what a decoder-only model does instead of
# cross-attention, as a mask, and what each design costs, counted.
__all__ += ["check_prefix_lm_mask", "check_score_entries"]


def _prefix_lm(T_src: int, T_tgt: int) -> torch.Tensor:
    T = T_src + T_tgt
    allowed = causal_mask(T)  # (T, T)
    allowed[:, :T_src] = True  # every position reads the whole source
    allowed[:T_src, T_src:] = False  # the source never reads the target
    return allowed


def check_prefix_lm_mask(fn: Callable[[int, int], torch.Tensor]) -> bool:
    """Exercise 4.1: ``fn(T_src, T_tgt)``: the mask that makes one self-attention over ``[source; target]``
    see what an encoder (bidirectional) and a decoder (causal, reading the whole source) see.

    Shapes:
        fn's output: ``(T_src + T_tgt, T_src + T_tgt)``, boolean, ``True`` = may attend
    """
    name = "4.1 prefix-LM mask"
    for T_src, T_tgt in ((3, 2), (5, 4), (1, 3), (4, 1)):
        T = T_src + T_tgt
        where = f"T_src={T_src}, T_tgt={T_tgt}"
        try:
            got = fn(T_src, T_tgt)
        except Exception as e:  # a learner's bug should print, not stop the notebook
            return report(name, False, f"fn({T_src}, {T_tgt}) raised {type(e).__name__}: {e}")
        if not isinstance(got, torch.Tensor) or got.dtype != torch.bool or tuple(got.shape) != (T, T):
            what = f"{type(got).__name__}" if not isinstance(got, torch.Tensor) else f"{got.dtype}, {tuple(got.shape)}"
            return report(name, False, f"{where}: expected a boolean ({T}, {T}) tensor, got {what}")
        want = _prefix_lm(T_src, T_tgt)
        if torch.equal(got, want):
            continue
        if torch.equal(got, causal_mask(T)):
            return report(name, False, f"{where}: a plain causal mask: the source cannot read its own later tokens")
        if bool(got[:T_src, T_src:].any()):
            return report(name, False, f"{where}: a source token reads the target (the encoder never sees it)")
        if not bool(got[T_src:, :T_src].all()):
            return report(name, False, f"{where}: a target token cannot read the whole source")
        if not torch.equal(got[T_src:, T_src:], causal_mask(T_tgt)):
            return report(name, False, f"{where}: the target part must be causal (each token itself included)")
        return report(name, False, f"{where}: {int((got != want).sum())} entries differ")
    return report(name, True, "4 shapes match, one-token source and target included")


def _allowed(*masks: torch.Tensor) -> int:
    return sum(int(m.sum()) for m in masks)


def check_score_entries(fn: Callable[[int, int, str], int]) -> bool:
    """Exercise 4.2: ``fn(T_src, T_tgt, design)``: the score entries one layer keeps.

    ``design`` is ``"encoder-decoder"`` (a bidirectional encoder self-attention over the
    source, a causal decoder self-attention over the target, a cross-attention from the
    target to the source), ``"decoder-only"`` (one causal self-attention over
    ``[source; target]``) or ``"prefix-lm"`` (the same with exercise 4.1's mask). The
    answer counts the allowed (unmasked) entries; the check counts them in the masks.
    """
    cases = []
    for T_src, T_tgt in ((6, 4), (100, 20), (3, 9)):
        full = torch.ones(T_src, T_src, dtype=torch.bool)
        cross = torch.ones(T_tgt, T_src, dtype=torch.bool)
        measured = {
            "encoder-decoder": _allowed(full, causal_mask(T_tgt), cross),
            "decoder-only": _allowed(causal_mask(T_src + T_tgt)),
            "prefix-lm": _allowed(_prefix_lm(T_src, T_tgt)),
        }
        cases += [(dict(T_src=T_src, T_tgt=T_tgt, design=d), n) for d, n in measured.items()]
    # check_counts hints at "keys and values" for half the answer; these are plain counts.
    for kwargs, want in cases:
        try:  # positional: a learner may name the parameters differently
            got = fn(*kwargs.values())
        except Exception as e:
            hint = " (expected fn(T_src, T_tgt, design))" if isinstance(e, TypeError) else ""
            return report("4.2 score entries", False, f"{type(e).__name__}: {e}{hint}")
        if got != want:
            return report("4.2 score entries", False, f"{kwargs}: got {got!r}, counted {want}")
    return report("4.2 score entries", True, "3 designs × 3 shapes equal the entries counted in the masks")


# Two predictions, committed before the cell that shows the answer runs; both answers are read
# off the masks, not typed in.
__all__ += ["check_causal_cross_prediction", "check_prefix_rows_prediction"]


def _as_positions(predicted: object, n: int) -> set[int] | None:
    """``predicted`` as a set of ints in ``[0, n)``, or None when it is not one."""
    if not isinstance(predicted, (set, frozenset, list, tuple)):
        return None
    if not all(isinstance(i, int) and not isinstance(i, bool) and 0 <= i < n for i in predicted):
        return None
    return set(predicted)


def check_causal_cross_prediction(predicted: object) -> bool:
    """Bug 2's prediction: which outputs of the reversal model (``n = 8``) can still be right
    when its cross-attention gets a causal mask.

    ``predicted`` is a set (or list) of output positions ``i`` in ``0..7``. Output ``i`` needs
    source position ``n - 1 - i``; the causal mask lets step ``i`` read positions ``0..i``.
    """
    name = "bug 2 prediction"
    n = 8
    needed = torch.arange(n - 1, -1, -1)  # (n,): output i copies source position n-1-i
    visible = causal_mask(n)[torch.arange(n), needed]  # (n,): may step i read it?
    want = {i for i in range(n) if bool(visible[i])}
    return _check_position_set(
        name,
        predicted,
        want,
        n,
        what="output positions",
        hint=lambda i: f"look again at output {i}: it needs source position {n - 1 - i}, and step {i} reads 0..{i}",
        right=f"outputs {sorted(want)}: step i sees n-1-i once n-1-i <= i",
    )


def _check_position_set(name, predicted, want: set, size: int, *, what: str, hint, right: str) -> bool:
    """A predicted set of indices in ``0..size-1`` against ``want``.

    ``hint(i)`` is the message for the first index wrongly in or out of the prediction.
    """
    got = _as_positions(predicted, size)
    if got is None:
        return report(name, False, f"give a set of {what} 0 to {size - 1}, got {predicted!r:.40}")
    if got != want:
        return report(name, False, hint(min(got ^ want)))
    return report(name, True, right)


def check_prefix_rows_prediction(predicted: object) -> bool:
    """Exercise 4.1's prediction: which rows of the prefix-LM mask for ``T_src = 3``,
    ``T_tgt = 2`` differ from a plain causal mask of 5 positions.

    ``predicted`` is a set (or list) of row indices in ``0..4`` (rows 0-2 are the source's,
    rows 3-4 the target's).
    """
    name = "4.1 prediction"
    T_src, T_tgt = 3, 2
    T = T_src + T_tgt
    differs = (_prefix_lm(T_src, T_tgt) != causal_mask(T)).any(dim=1)  # (T,)
    want = {r for r in range(T) if bool(differs[r])}
    return _check_position_set(
        name,
        predicted,
        want,
        T,
        what="row indices",
        hint=lambda r: (
            f"look again at row {r} (a {'source' if r < T_src else 'target'} token): "
            "what does causal already let it read?"
        ),
        right=f"rows {sorted(want)}: the last source row already reads all the source",
    )


__all__ += ["check_entries_saved_prediction"]


def check_entries_saved_prediction(predicted: object) -> bool:
    """Exercise 4.2's prediction: at ``T_src = 6``, ``T_tgt = 4``, how many fewer score
    entries the design that keeps fewest keeps than the other two (an int).

    The answer is read off the masks (decoder-only against encoder-decoder).
    """
    name = "4.2 prediction"
    T_src, T_tgt = 6, 4
    full = torch.ones(T_src, T_src, dtype=torch.bool)
    cross = torch.ones(T_tgt, T_src, dtype=torch.bool)
    enc_dec = _allowed(full, causal_mask(T_tgt), cross)
    want = enc_dec - _allowed(causal_mask(T_src + T_tgt))
    if isinstance(predicted, bool) or not isinstance(predicted, int):
        return report(name, False, f"give a whole number of entries, got {predicted!r:.40}")
    if predicted != want:
        return report(name, False, f"{predicted} is not it: which source rows lose keys under a causal mask?")
    return report(name, True, f"{want} = T_src (T_src - 1) / 2: the source's upper triangle")
