"""Check functions for the chapters' exercises: ``from attn_core.exercises import check_...``.

One module per chapter (``ch01.py``, ``ch02.py``, ...). Each check runs the learner's
function against the reference in ``attn_core`` on a few seeded inputs, prints a short
verdict and returns ``True``/``False`` (it never raises on a wrong answer, so a
notebook keeps running).
"""

from ._common import compare, report
from .ch01 import check_scaled_scores, check_self_attention, check_softmax_temperature

__all__ = ["report", "compare", "check_scaled_scores", "check_self_attention", "check_softmax_temperature"]

from .ch07 import check_absorbed_query, check_cache_elements, check_decoupled_scores, check_rope_matrix  # noqa: E402
from .ch08 import check_alibi_slopes, check_rope_rotation, check_sinusoidal  # noqa: E402

__all__ += ["check_absorbed_query", "check_decoupled_scores", "check_rope_matrix", "check_cache_elements"]
__all__ += ["check_sinusoidal", "check_rope_rotation", "check_alibi_slopes"]

from .ch02 import check_causal_mask, check_masked_softmax, check_padding_mask  # noqa: E402
from .ch03 import check_merge_heads, check_mha_from_torch, check_split_heads  # noqa: E402
from .ch04 import check_cross_attention, check_source_mask, check_teacher_forcing  # noqa: E402
from .ch05 import check_attend_shared_kv, check_broadcast_kv, check_decode_one_by_one  # noqa: E402
from .ch06 import check_kv_cache_bytes, check_mean_pool_kv, check_repeat_kv  # noqa: E402

__all__ += ["check_causal_mask", "check_padding_mask", "check_masked_softmax"]
__all__ += ["check_split_heads", "check_merge_heads", "check_mha_from_torch"]
__all__ += ["check_cross_attention", "check_source_mask", "check_teacher_forcing"]
__all__ += ["check_broadcast_kv", "check_decode_one_by_one", "check_attend_shared_kv"]
__all__ += ["check_repeat_kv", "check_mean_pool_kv", "check_kv_cache_bytes"]

from .ch09 import check_layer_norm, check_residual_wiring, check_rms_norm  # noqa: E402
from .ch10 import check_parameter_formula, check_swiglu, check_swiglu_hidden_dim  # noqa: E402
from .ch11 import check_causality_test, check_centring_matrix, check_shaped_attention  # noqa: E402

__all__ += ["check_layer_norm", "check_rms_norm", "check_residual_wiring"]
__all__ += ["check_swiglu", "check_swiglu_hidden_dim", "check_parameter_formula"]
__all__ += ["check_centring_matrix", "check_shaped_attention", "check_causality_test"]

from .ch12 import check_cache_bytes, check_greedy_decode, check_token_passes  # noqa: E402

__all__ += ["check_token_passes", "check_cache_bytes", "check_greedy_decode"]
from .ch13 import check_attention_flops, check_merge_stats, check_online_attention_row  # noqa: E402

__all__ += ["check_merge_stats", "check_online_attention_row", "check_attention_flops"]
from .ch14 import check_attention_parameters, check_equivalent_groups, check_kv_bytes_per_token  # noqa: E402

__all__ += ["check_kv_bytes_per_token", "check_attention_parameters", "check_equivalent_groups"]
from .ch16 import check_qk_norm_bound, check_softcap, check_split_fused_gate  # noqa: E402

__all__ += ["check_softcap", "check_split_fused_gate", "check_qk_norm_bound"]
from .ch15 import check_mixed_cache_bytes, check_ring_read, check_sink_attention, check_window_mask  # noqa: E402

__all__ += ["check_window_mask", "check_ring_read", "check_sink_attention", "check_mixed_cache_bytes"]

from .reading_an_llm import check_gqa_cache_bytes, check_logit_difference, check_sink_mass  # noqa: E402

__all__ += ["check_sink_mass", "check_logit_difference", "check_gqa_cache_bytes"]
