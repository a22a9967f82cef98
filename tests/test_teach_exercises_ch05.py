"""attn_core.teach.exercises.ch05 (the exercises of issue 25): each check passes a right answer and
fails the plausible wrong ones, printing why and never raising."""

from __future__ import annotations

from attn_core.teach.exercises.ch05 import check_decode_intensity, check_max_batch


def test_decode_intensity(capsys):
    # 4·H·n·T·D FLOPs over 2·H_kv·T·D·2 bytes
    assert check_decode_intensity(lambda H, H_kv, n_new: H * n_new / H_kv)
    assert "correct" in capsys.readouterr().out
    assert not check_decode_intensity(lambda H, H_kv, n_new: H / H_kv)  # forgets the new tokens
    assert not check_decode_intensity(lambda H, H_kv, n_new: 2 * H * n_new / H_kv)  # keys only
    assert "keys *and* values" in capsys.readouterr().out
    assert not check_decode_intensity(lambda H, H_kv, n_new: H_kv * n_new / H)  # inverted
    assert "which of H and H_kv" in capsys.readouterr().out
    assert not check_decode_intensity(lambda H, H_kv, n_new: 1.0)  # "always memory-bound at 1"
    assert not check_decode_intensity(lambda H, H_kv, n_new: H * n_new / H_kv / 2)  # float32 bytes
    assert not check_decode_intensity(lambda *a: 1 / 0)
    assert "ZeroDivisionError" in capsys.readouterr().out


def _max_batch(free_bytes, n_layers, n_kv_heads, head_dim, context, bytes_per_element):
    per_sequence = 2 * n_layers * n_kv_heads * head_dim * context * bytes_per_element
    return free_bytes // per_sequence


def test_max_batch(capsys):
    assert check_max_batch(_max_batch)
    assert "correct" in capsys.readouterr().out

    def keys_only(free_bytes, n_layers, n_kv_heads, head_dim, context, bytes_per_element):
        return free_bytes // (n_layers * n_kv_heads * head_dim * context * bytes_per_element)

    def one_layer(free_bytes, n_layers, n_kv_heads, head_dim, context, bytes_per_element):
        return free_bytes // (2 * n_kv_heads * head_dim * context * bytes_per_element)

    def rounded_up(free_bytes, n_layers, n_kv_heads, head_dim, context, bytes_per_element):
        per_sequence = 2 * n_layers * n_kv_heads * head_dim * context * bytes_per_element
        return -(-free_bytes // per_sequence)

    def as_float(free_bytes, n_layers, n_kv_heads, head_dim, context, bytes_per_element):
        return free_bytes / (2 * n_layers * n_kv_heads * head_dim * context * bytes_per_element)

    for wrong in (keys_only, one_layer, rounded_up, as_float):
        assert not check_max_batch(wrong), wrong.__name__
        assert "not yet" in capsys.readouterr().out
