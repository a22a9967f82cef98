"""Exercise 15.5 (StreamingLLM's positions): the check passes a right answer and fails plausible wrong ones."""

from __future__ import annotations

from attn_core.exercises.ch15 import check_streaming_positions


def right(t, sink_tokens, window):
    held = sorted(set(range(min(sink_tokens, t + 1))) | set(range(max(0, t - window + 1), t + 1)))
    return held, len(held) - 1


def test_right_answer_passes(capsys):
    assert check_streaming_positions(right)
    assert "correct" in capsys.readouterr().out


def test_text_position_for_the_query_fails(capsys):
    assert not check_streaming_positions(lambda t, s, w: (right(t, s, w)[0], t))
    assert "not in the cache" in capsys.readouterr().out


def test_window_off_by_one_fails(capsys):
    def wrong(t, s, w):
        held = sorted(set(range(min(s, t + 1))) | set(range(max(0, t - w), t + 1)))
        return held, len(held) - 1

    assert not check_streaming_positions(wrong)
    assert "counts the query itself" in capsys.readouterr().out


def test_forgotten_sinks_fail():
    assert not check_streaming_positions(lambda t, s, w: right(t, 0, w))


def test_sinks_counted_twice_fail():
    # A window that does not skip the sinks: held positions listed twice early in the stream.
    def wrong(t, s, w):
        held = list(range(min(s, t + 1))) + list(range(max(0, t - w + 1), t + 1))
        return held, len(held) - 1

    assert not check_streaming_positions(wrong)


def test_an_exception_is_reported_not_raised(capsys):
    def broken(t, s, w):
        raise NotImplementedError

    assert not check_streaming_positions(broken)
    assert "NotImplementedError" in capsys.readouterr().out
