"""Small synthetic sequence tasks, generated on the fly from a ``torch.Generator``.

Each task makes a batch for a next-token-prediction model: ``inputs`` are token ids and
``targets[b, t]`` is the token that should follow ``inputs[b, :t+1]``, or
:data:`IGNORE_INDEX` where the next token is not predictable (random content) and
should not be scored. ``torch.nn.functional.cross_entropy(..., ignore_index=IGNORE_INDEX)``
then scores only the positions that test the skill.

Decoder-only tasks (one sequence; data tokens ``x_1..x_n``, a separator, the answer):

* :func:`copy_task`    ``x SEP x``            the answer repeats the input
* :func:`reverse_task` ``x SEP reversed(x)``
* :func:`sort_task`    ``x SEP sorted(x)``
* :func:`induction_task` ``r r filler``: a random pattern of distinct tokens (of a
  random length), repeated. In the repeat every token has appeared before, and what
  followed it then is what follows it now: the skill of an *induction head*.
* :func:`associative_recall_task` ``k₁ v₁ k₂ v₂ ... k_q``: after key/value pairs, a
  key is repeated and its value must be recalled.
* :func:`seen_before_task` ``BOS x₁ x₂ ...``: at every position, has this token appeared
  before? A head that finds no earlier copy must put its attention somewhere: on the
  first token (an attention sink).
* :func:`needle_recall_task` ``f f N f … f QUERY`` -> ``N``: one "needle" token hidden at
  a random position among filler; at the query, name it. The distance to the needle is
  anything up to the sequence length: a test of long-context retrieval.

The encoder-decoder form of the reversal task is in :mod:`attn_core.teach.seq2seq_tasks`.

All functions share the call ``fn(batch_size, *, generator=None, **sizes)``, so that
``functools.partial(induction_task, n=16, vocab_size=32)`` is a ``batch_fn`` for
:func:`attn_core.train`.

Shape legend:
    B    batch size
    n    data tokens per example; sequence lengths are given per task
"""

from __future__ import annotations

import torch

from ..checks import check_bool, check_instance, check_int

__all__ = [
    "IGNORE_INDEX",
    "SEP",
    "data_tokens",
    "copy_task",
    "reverse_task",
    "sort_task",
    "induction_task",
    "associative_recall_task",
    "seen_before_task",
    "needle_recall_task",
    "QUERY",
    "NEW",
    "SEEN",
    "SEP_LABEL",
    "token_labels",
]

#: Target value of positions that are not scored (PyTorch's cross-entropy default).
IGNORE_INDEX = -100
#: Token 0 is the separator (and the decoder's start token); data tokens are 1..vocab_size-1.
SEP = 0
#: How plots print the separator: a glyph no data token can be mistaken for ("|" looks like "l").
SEP_LABEL = "#"


def data_tokens(batch_size: int, n: int, vocab_size: int, generator) -> torch.Tensor:
    """Random data tokens in ``1..vocab_size-1`` (0 is the separator): the content of every task.

    Shapes:
        output: ``(B, n)``

    Raises:
        TypeError / ValueError: ``batch_size`` or ``n`` below 1, ``vocab_size`` below 2, or a
            ``generator`` that is not a ``torch.Generator`` (the value named).
    """
    check_int("batch_size", batch_size, minimum=1)
    check_int("n", n, minimum=1)
    check_int("vocab_size", vocab_size, minimum=2)
    check_instance("generator", generator, torch.Generator, optional=True)
    return torch.randint(1, vocab_size, (batch_size, n), generator=generator)


def _answer_after_separator(x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Sequence ``x SEP y`` shifted into inputs and targets, scoring only the answer ``y``.

    Shapes:
        x, y: ``(B, n)``; returns inputs, targets ``(B, 2n)``
    """
    B, n = x.shape
    sep = torch.full((B, 1), SEP, dtype=torch.long)
    seq = torch.cat((x, sep, y), dim=1)  # (B, 2n + 1)
    inputs, targets = seq[:, :-1].clone(), seq[:, 1:].clone()  # (B, 2n) each
    # Targets before the separator's position are random data: not predictable.
    targets[:, :n] = IGNORE_INDEX
    return inputs, targets


def copy_task(
    batch_size: int, *, n: int = 8, vocab_size: int = 16, generator: torch.Generator | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """Copy: ``x₁..xₙ SEP x₁..xₙ``; the ``n`` answer tokens are scored.

    Returns:
        ``(inputs, targets)``, LongTensors; ``targets`` is :data:`IGNORE_INDEX` on the
        first ``n`` positions.

    Shapes:
        inputs, targets: ``(B, 2n)``
    """
    x = data_tokens(batch_size, n, vocab_size, generator)
    return _answer_after_separator(x, x)


def reverse_task(
    batch_size: int, *, n: int = 8, vocab_size: int = 16, generator: torch.Generator | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """Reverse: ``x₁..xₙ SEP xₙ..x₁``; the ``n`` answer tokens are scored.

    Shapes:
        inputs, targets: ``(B, 2n)``
    """
    x = data_tokens(batch_size, n, vocab_size, generator)
    return _answer_after_separator(x, x.flip(1))


def sort_task(
    batch_size: int, *, n: int = 8, vocab_size: int = 16, generator: torch.Generator | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """Sort: ``x₁..xₙ SEP sorted(x)`` (ascending, repeats kept); the answer is scored.

    Shapes:
        inputs, targets: ``(B, 2n)``
    """
    x = data_tokens(batch_size, n, vocab_size, generator)
    return _answer_after_separator(x, x.sort(dim=1).values)


def induction_task(
    batch_size: int,
    *,
    n: int = 16,
    vocab_size: int = 32,
    min_n: int | None = None,
    generator: torch.Generator | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Induction: a random pattern of ``p`` distinct tokens, then the same pattern again.

    Each row draws its own pattern length ``p`` in ``[min_n, n]``; the sequence is the
    pattern, the pattern again, then random filler up to the fixed length ``2n``. The
    pattern's tokens are distinct, so in the repeat each token has exactly one earlier
    occurrence and the token that followed it there is the unique right answer ("… A B
    … A → B"). Only those ``p - 1`` positions are scored.

    The varying ``p`` matters: with one fixed ``p`` a single attention layer can solve
    the task by position alone ("look ``p - 1`` tokens back"), and no induction head
    forms. With ``p`` varying, the only way is to find the earlier copy of the current
    token by content and read what followed it: a previous-token head in one layer plus
    an induction head in the next (Olsson et al., 2022, arXiv 2209.11895).

    Args:
        batch_size: ``B``.
        n: Longest pattern; the sequence has ``2n`` tokens.
        vocab_size: Tokens are drawn from ``0..vocab_size-1``.
        min_n: Shortest pattern; default ``max(2, n // 2)``. ``min_n = n`` fixes ``p``.
        generator: Source of randomness.

    Returns:
        ``(inputs, targets)``: the sequence shifted by one; ``targets`` is
        :data:`IGNORE_INDEX` except at the repeat.

    Shapes:
        inputs, targets: ``(B, 2n - 1)``

    Raises:
        ValueError: If ``n > vocab_size`` (not ``n`` distinct tokens) or not ``2 <= min_n <= n``.
    """
    check_int("batch_size", batch_size, minimum=1)
    check_int("n", n, minimum=2)
    check_int("vocab_size", vocab_size, minimum=2)
    check_instance("generator", generator, torch.Generator, optional=True)
    min_n = max(2, n // 2) if min_n is None else check_int("min_n", min_n, minimum=2)
    if min_n > n:
        raise ValueError(f"min_n must be <= n, got min_n={min_n}, n={n}")
    if n > vocab_size:
        raise ValueError(
            f"induction_task draws n distinct tokens: need n <= vocab_size, got n={n}, vocab_size={vocab_size}"
        )
    # A random permutation per row, cut to n: distinct tokens without a Python loop.
    pattern = torch.rand(batch_size, vocab_size, generator=generator).argsort(dim=1)[:, :n]  # (B, n)
    p = torch.randint(min_n, n + 1, (batch_size, 1), generator=generator)  # (B, 1) pattern length per row
    filler = torch.randint(0, vocab_size, (batch_size, 2 * n), generator=generator)  # (B, 2n)
    j = torch.arange(2 * n)[None, :]  # (1, 2n) positions
    # Position j < 2p reads pattern[j mod p]; later positions are filler.
    from_pattern = pattern.gather(1, (j % p).clamp_max(n - 1))  # (B, 2n)
    seq = torch.where(j < 2 * p, from_pattern, filler)  # (B, 2n)
    inputs, targets = seq[:, :-1].clone(), seq[:, 1:].clone()  # (B, 2n - 1) each
    t = j[:, :-1]  # (1, 2n - 1) input positions
    # Scored: the current token is in the repeat and so is the next one (p <= t <= 2p - 2).
    scored = (t >= p) & (t <= 2 * p - 2)  # (B, 2n - 1)
    targets[~scored] = IGNORE_INDEX
    return inputs, targets


#: Targets of :func:`seen_before_task`: the token is new (0) or has appeared before (1).
NEW, SEEN = 0, 1


def seen_before_task(
    batch_size: int,
    *,
    n: int = 15,
    vocab_size: int = 24,
    bos: bool = True,
    window: int | None = None,
    generator: torch.Generator | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Has this token appeared before? At every position the answer is :data:`SEEN` or :data:`NEW`.

    The data tokens are drawn from ``2..vocab_size-1`` (ids 0 and 1 are the answers, and
    0 is also the BOS token). One attention layer solves it: the query matches the keys
    of earlier copies of its token. When there is none, the softmax still has to put its
    mass somewhere; a model trained with a BOS token learns to put it there: the first
    token becomes an attention sink, and the answers come to depend on it.

    Args:
        batch_size: ``B``.
        n: Data tokens per sequence.
        vocab_size: Size of the vocabulary (answers, BOS and data tokens).
        bos: Start every sequence with the BOS token (its target is not scored).
        window: Count only the ``window - 1`` positions before as "before" (what a
            layer with that sliding window can see); None: the whole sequence.
        generator: Source of randomness.

    Returns:
        ``(inputs, targets)``.

    Shapes:
        inputs, targets: ``(B, n + 1)`` with ``bos``, else ``(B, n)``

    Raises:
        ValueError: ``vocab_size < 3`` or a bad size, naming the value.
    """
    check_int("batch_size", batch_size, minimum=1)
    check_int("n", n, minimum=1)
    check_int("vocab_size", vocab_size, minimum=3)
    check_instance("generator", generator, torch.Generator, optional=True)
    if window is not None:
        check_int("window", window, minimum=1)
    data = torch.randint(2, vocab_size, (batch_size, n), generator=generator)  # (B, n)
    t = torch.arange(n)
    earlier = t[None, :] < t[:, None]  # (n, n): key s is before query t
    if window is not None:
        earlier = earlier & (t[:, None] - t[None, :] < window)
    same = data[:, :, None] == data[:, None, :]  # (B, n, n)
    targets = (same & earlier).any(-1).long()  # (B, n): SEEN = 1, NEW = 0
    if not bos:
        return data, targets
    start = torch.zeros(batch_size, 1, dtype=torch.long)  # (B, 1): the BOS token, id 0
    ignore = torch.full((batch_size, 1), IGNORE_INDEX)
    return torch.cat([start, data], 1), torch.cat([ignore, targets], 1)  # (B, n + 1) each


def associative_recall_task(
    batch_size: int, *, n_pairs: int = 8, vocab_size: int = 32, generator: torch.Generator | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """Associative recall: ``k₁ v₁ … k_m v_m k_q`` -> ``v_q``; only the last position is scored.

    Keys are distinct ids from the lower half of the vocabulary, values random ids from
    the upper half, so a key is never mistaken for a value.

    Shapes:
        inputs, targets: ``(B, 2·n_pairs + 1)``

    Raises:
        ValueError: If ``n_pairs > vocab_size // 2`` (not enough distinct keys).
    """
    check_int("batch_size", batch_size, minimum=1)
    check_int("n_pairs", n_pairs, minimum=1)
    check_int("vocab_size", vocab_size, minimum=4)
    check_instance("generator", generator, torch.Generator, optional=True)
    half = vocab_size // 2
    if n_pairs > half:
        raise ValueError(
            f"associative_recall_task needs n_pairs <= vocab_size // 2 distinct keys, got n_pairs={n_pairs}, "
            f"vocab_size={vocab_size}"
        )
    keys = torch.rand(batch_size, half, generator=generator).argsort(dim=1)[:, :n_pairs]  # (B, m), ids 0..half-1
    values = torch.randint(half, vocab_size, (batch_size, n_pairs), generator=generator)  # (B, m)
    pairs = torch.stack((keys, values), dim=2).reshape(batch_size, 2 * n_pairs)  # (B, m, 2) -> (B, 2m)
    which = torch.randint(0, n_pairs, (batch_size, 1), generator=generator)  # (B, 1)
    query = keys.gather(1, which)  # (B, 1)
    inputs = torch.cat((pairs, query), dim=1)  # (B, 2m + 1)
    targets = torch.full_like(inputs, IGNORE_INDEX)
    targets[:, -1:] = values.gather(1, which)
    return inputs, targets


#: The query token of :func:`needle_recall_task` (id 0): "which needle came before?"
QUERY = 0


def needle_recall_task(
    batch_size: int,
    *,
    n: int = 16,
    n_filler: int = 12,
    n_needles: int = 8,
    score_all: bool = False,
    generator: torch.Generator | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Recall a needle: ``f … f N f … f QUERY`` -> ``N``, the needle anywhere before the query.

    Filler tokens are ids ``1..n_filler``, needles ``n_filler+1 .. n_filler+n_needles``, and
    the last input token is :data:`QUERY`. Exactly one needle sits at a position drawn
    uniformly from ``0..n-2``, so the distance from the query back to it is anything from
    1 to ``n - 1``: evaluated at ``n = 8L``, a model trained at ``n = L`` must retrieve
    from distances it never saw. One attention layer solves it by content (the query
    matches the needle keys, whatever their distance); RoPE rotates that match by the
    distance, which is what breaks past the training length.

    Args:
        batch_size: ``B``.
        n: Sequence length (the query included).
        n_filler: Number of distinct filler tokens.
        n_needles: Number of distinct needles (chance is ``1/n_needles``).
        score_all: Also score every position from the needle on (the target is the needle
            there too: "name the needle seen so far"). More signal per sequence for
            training; evaluate with ``False`` (the query only).
        generator: Source of randomness.

    Returns:
        ``(inputs, targets)``: ``targets`` is :data:`IGNORE_INDEX` except at the query
        (and, with ``score_all``, from the needle on), where it is the needle.

    Shapes:
        inputs, targets: ``(B, n)``

    Raises:
        ValueError: ``n < 2`` (no room for a needle before the query) or a bad size.
    """
    check_int("batch_size", batch_size, minimum=1)
    check_int("n", n, minimum=2)
    check_int("n_filler", n_filler, minimum=1)
    check_int("n_needles", n_needles, minimum=1)
    check_bool("score_all", score_all)
    check_instance("generator", generator, torch.Generator, optional=True)
    inputs = torch.randint(1, n_filler + 1, (batch_size, n), generator=generator)  # (B, n)
    needles = torch.randint(n_filler + 1, n_filler + n_needles + 1, (batch_size, 1), generator=generator)  # (B, 1)
    where = torch.randint(0, n - 1, (batch_size, 1), generator=generator)  # (B, 1): before the query
    t = torch.arange(n)[None, :]  # (1, n)
    inputs = torch.where(t == where, needles, inputs)
    inputs[:, -1] = QUERY
    scored = (t >= where) if score_all else (t == n - 1)  # (B, n) or (1, n)
    targets = torch.where(scored, needles, torch.full_like(inputs, IGNORE_INDEX))  # (B, n)
    return inputs, targets


def token_labels(ids: torch.Tensor) -> list[str]:
    """Readable labels for plots: data token ``i`` as the ``i``-th letter, :data:`SEP` as :data:`SEP_LABEL`.

    Letters ``a..z`` cover data tokens ``1..26``; larger ids are printed as numbers.

    Shapes:
        ids: ``(T,)`` integer token ids -> ``T`` strings
    """
    check_instance("ids", ids, torch.Tensor)
    if ids.dim() != 1 or ids.dtype.is_floating_point or ids.dtype == torch.bool:
        raise ValueError(f"ids must be a 1-D tensor of integer token ids, got shape {tuple(ids.shape)}, {ids.dtype}")
    labels = []
    for i in ids.tolist():
        if i < 0:
            raise ValueError(f"token ids are non-negative, got {i}")
        labels.append(SEP_LABEL if i == SEP else chr(ord("a") + i - 1) if i <= 26 else str(i))
    return labels
