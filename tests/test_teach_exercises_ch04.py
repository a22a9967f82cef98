"""attn_core.teach.exercises.ch04: the right and wrong answers of exercises 4.1-4.3 and bug 2's prediction
(ANSWERS, held to the standard by tests/test_teach_exercises_standard.py)."""

from __future__ import annotations

import torch

from attn_core.teach.exercises.ch04 import (
    check_causal_cross_prediction,
    check_entries_saved_prediction,
    check_padding_test,
    check_prefix_lm_mask,
    check_prefix_rows_prediction,
    check_score_entries,
)


def _prefix_lm(T_src, T_tgt):
    T = T_src + T_tgt
    pos = torch.arange(T)
    causal = pos[None, :] <= pos[:, None]  # (T, T)
    return causal | (pos[None, :] < T_src)  # every row also reads the whole source


def _plain_causal(T_src, T_tgt):
    return torch.ones(T_src + T_tgt, T_src + T_tgt, dtype=torch.bool).tril()


def _source_reads_all(T_src, T_tgt):  # the source rows see the target too
    m = _prefix_lm(T_src, T_tgt)
    m[:T_src] = True
    return m


def _target_bidirectional(T_src, T_tgt):
    m = _prefix_lm(T_src, T_tgt)
    m[T_src:, T_src:] = True
    return m


def _target_skips_itself(T_src, T_tgt):
    m = _prefix_lm(T_src, T_tgt)
    idx = torch.arange(T_src, T_src + T_tgt)
    m[idx, idx] = False
    return m


def _target_misses_source(T_src, T_tgt):
    m = _prefix_lm(T_src, T_tgt)
    m[T_src:, :T_src] = False
    return m


def _as_int(T_src, T_tgt):
    return _prefix_lm(T_src, T_tgt).int()


def _entries(T_src, T_tgt, design):
    causal = T_tgt * (T_tgt + 1) // 2
    if design == "decoder-only":
        T = T_src + T_tgt
        return T * (T + 1) // 2
    # encoder-decoder and prefix-lm keep the same entries: S², T_tgt·S and the causal target
    return T_src * T_src + T_tgt * T_src + causal


def _full_squares(T_src, T_tgt, design):  # forgets that causal masks halve the squares
    if design == "decoder-only":
        return (T_src + T_tgt) ** 2
    return T_src**2 + T_tgt**2 + T_tgt * T_src


def _no_cross(T_src, T_tgt, design):
    if design == "encoder-decoder":
        return T_src * T_src + T_tgt * (T_tgt + 1) // 2
    return _entries(T_src, T_tgt, design)


def _prefix_as_causal(T_src, T_tgt, design):
    return _entries(T_src, T_tgt, "decoder-only" if design == "prefix-lm" else design)


def _strict_causal(T_src, T_tgt, design):  # T(T-1)/2: forgets the diagonal
    if design == "decoder-only":
        T = T_src + T_tgt
        return T * (T - 1) // 2
    return _entries(T_src, T_tgt, design)


def _perturbation_test(positions, lengths=(5, 2, 8, 1), T=8):
    """A padding test that changes, one at a time, the positions ``positions(n, T)`` picks in each row.

    It passes when a changed real token moves that row's logits and a changed padded one
    does not.
    """

    def reads_only_real_tokens(model):
        g = torch.Generator().manual_seed(0)
        src = torch.randint(0, 16, (len(lengths), T), generator=g)
        out = model(src, list(lengths))
        for b, n in enumerate(lengths):
            for t in positions(n, T):
                changed = src.clone()
                changed[b, t] = (src[b, t] + 1) % 16
                moved = not torch.allclose(model(changed, list(lengths))[b], out[b])
                if moved != (t < n):
                    return False
        return True

    return reads_only_real_tokens


_every_position = _perturbation_test(lambda n, T: range(T))
_padding_only = _perturbation_test(lambda n, T: range(n, T))  # never checks that a real token counts
_padding_and_last = _perturbation_test(lambda n, T: range(n - 1, T))  # never the first real token
_last_position_only = _perturbation_test(lambda n, T: [T - 1])  # misses a leak at the first pad
_batch_of_one = _perturbation_test(lambda n, T: range(T), lengths=(5,))  # the same lengths in every row


def _vs_unpadded(model):  # each row against itself run alone: a mask wrong both times agrees with itself
    g = torch.Generator().manual_seed(0)
    lengths = [5, 2, 8, 1]
    src = torch.randint(0, 16, (4, 8), generator=g)
    noisy = src.clone()
    for b, n in enumerate(lengths):
        noisy[b, n:] = (src[b, n:] + 7) % 16
    out = model(noisy, lengths)
    alone = [model(src[b : b + 1, :n], [n])[0] for b, n in enumerate(lengths)]
    return all(torch.allclose(out[b], a) for b, a in enumerate(alone))


ANSWERS = {
    check_prefix_lm_mask: (
        [_prefix_lm],
        [
            (_plain_causal, "plain causal"),
            (_source_reads_all, "reads the target"),
            (_target_bidirectional, "must be causal"),
            (_target_skips_itself, "must be causal"),
            (_target_misses_source, "whole source"),
            (_as_int, "boolean"),
        ],
    ),
    check_score_entries: (
        [_entries],
        [
            (_full_squares, "counted"),
            (_no_cross, "counted"),
            (_prefix_as_causal, "counted"),
            (_strict_causal, "counted"),
        ],
    ),
    check_padding_test: (
        [_every_position],
        [
            (_padding_only, "last real token"),
            (_vs_unpadded, "last real token"),
            (_padding_and_last, "first real token"),
            (_last_position_only, "first padded position"),
            (_batch_of_one, "first sequence's lengths"),
            (lambda model: True, "accepts a wrong model"),
            (lambda model: False, "rejects a right model"),
            (
                lambda model: torch.equal(
                    model(torch.ones(1, 3, dtype=torch.long), [3]), model(torch.ones(1, 3, dtype=torch.long), [3])
                ),
                "accepts",
            ),
        ],
    ),
    check_causal_cross_prediction: (
        [{4, 5, 6, 7}, [7, 6, 5, 4]],
        [
            ({0, 1, 2, 3}, "output 0"),  # the outputs that read the early source
            ({5, 6, 7}, "output 4"),  # off by one: step 4 reads position 3
            (set(range(8)), "output 0"),
            (set(), "output 4"),
            ({4, 5, 6, 8}, "set of output positions"),
            (..., "set of output positions"),
        ],
    ),
    check_prefix_rows_prediction: (
        [{0, 1}, [0, 1]],
        [
            ({0, 1, 2}, "row 2"),  # the last source row already reads the whole source
            ({3, 4}, "row 0"),
            (set(range(5)), "row 2"),
            (set(), "row 0"),
            ("0, 1", "set of row indices"),
        ],
    ),
    check_entries_saved_prediction: (
        [15],
        [
            (21, "not it"),  # T_src (T_src + 1) / 2: the diagonal counted as saved
            (18, "not it"),  # half the source square
            (0, "not it"),  # "they all keep the same"
            (24, "not it"),  # T_src T_tgt
            ("15", "whole number"),
            (15.0, "whole number"),
        ],
    ),
}
