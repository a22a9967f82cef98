"""Check functions for the chapters' exercises: ``from attn_core.teach.exercises import check_...``.

One module per chapter (``ch01.py``, ``ch02.py``, ...). Each check runs the learner's
function against the reference in ``attn_core`` on a few seeded inputs, prints a short
verdict and returns ``True``/``False`` (it never raises on a wrong answer, so a
notebook keeps running).

The notebooks import a chapter's checks from its module (``from attn_core.teach.exercises.ch05
import check_mqa_test``); this package re-exports them for ``from attn_core.teach.exercises
import ...``. ``check_sinusoidal`` (``ch08``) is kept for its tests.
"""

from ._common import compare, report
from .ch01 import check_by_hand, check_jacobian_norm, check_scale_test, check_self_score
from .ch02 import (
    check_alignment_test,
    check_decode_step_test,
    check_dropout_variance,
    check_packed_documents,
)
from .ch03 import check_mha_test
from .ch04 import check_padding_test, check_prefix_lm_mask, check_score_entries
from .ch05 import (
    check_equal_size_d_ff,
    check_largest_step_ratio,
    check_limit_prediction,
    check_mqa_prediction,
    check_mqa_test,
)
from .ch06 import check_gqa_to_mha, check_kv_head_of, check_kv_heads_on_gpu
from .ch07 import check_absorbed_chunk, check_absorbed_output, check_gqa_as_mla, check_key_rank
from .ch08 import check_alibi_reach, check_alibi_slopes, check_rope_rotation, check_sinusoidal
from .ch09 import check_placement_probe
from .ch10 import check_attention_crossover, check_causality_test, check_parameter_shares
from .ch11 import check_padded_shaped, check_shaped_decode_step, check_uniform_stack_prediction
from .ch12 import check_cached_attention, check_copies_history, check_scores_computed
from .ch13 import check_backward_from_lse, check_fa1_traffic, check_tiled_peak_prediction
from .ch14 import check_order_test, check_paired_difference, check_seeds_needed
from .ch15 import check_mixed_cache_bytes, check_ring_read, check_sink_attention, check_streaming_positions
from .ch16 import check_gate_parameters, check_qk_norm_bound, check_whole_projection_bound
from .ch17 import check_delta_rule_step, check_linear_attention_step, check_state_bytes
from .ch18 import check_window_plus_topk
from .ch19 import check_router_logit_grad, check_router_z_loss, check_sequence_balance_loss
from .ch20 import check_ntk_base, check_partial_rope, check_yarn_logit_scale, check_yarn_ramp
from .ch21 import check_combine_with_sink, check_softcap_kernel, check_visited_tiles
from .ch22 import check_block_gather, check_prefix_hits, check_tokens_per_call
from .ch23 import check_balanced_layout, check_ring_backward_bytes, check_step_plan
from .reading_a_model import check_duplicate_token_score, check_uniform_sink_baseline
from .reading_an_llm import check_gqa_cache_bytes, check_logit_difference, check_sink_mass

__all__ = [
    "report",
    "compare",
    # ch01
    "check_self_score",
    "check_jacobian_norm",
    "check_scale_test",
    "check_by_hand",
    # ch02
    "check_packed_documents",
    "check_alignment_test",
    "check_decode_step_test",
    "check_dropout_variance",
    # ch03
    "check_mha_test",
    # ch04
    "check_padding_test",
    "check_prefix_lm_mask",
    "check_score_entries",
    # ch05
    "check_mqa_prediction",
    "check_mqa_test",
    "check_limit_prediction",
    "check_largest_step_ratio",
    "check_equal_size_d_ff",
    # ch06
    "check_gqa_to_mha",
    "check_kv_head_of",
    "check_kv_heads_on_gpu",
    # ch07
    "check_gqa_as_mla",
    "check_key_rank",
    "check_absorbed_output",
    "check_absorbed_chunk",
    # ch08
    "check_sinusoidal",
    "check_rope_rotation",
    "check_alibi_slopes",
    "check_alibi_reach",
    # ch09
    "check_placement_probe",
    # ch10
    "check_parameter_shares",
    "check_attention_crossover",
    "check_causality_test",
    # ch11
    "check_shaped_decode_step",
    "check_padded_shaped",
    "check_uniform_stack_prediction",
    # ch12
    "check_copies_history",
    "check_cached_attention",
    "check_scores_computed",
    # ch13
    "check_tiled_peak_prediction",
    "check_fa1_traffic",
    "check_backward_from_lse",
    # ch14
    "check_seeds_needed",
    "check_order_test",
    "check_paired_difference",
    # ch15
    "check_ring_read",
    "check_sink_attention",
    "check_mixed_cache_bytes",
    "check_streaming_positions",
    # ch16
    "check_qk_norm_bound",
    "check_gate_parameters",
    "check_whole_projection_bound",
    # ch17
    "check_linear_attention_step",
    "check_delta_rule_step",
    "check_state_bytes",
    # ch18
    "check_window_plus_topk",
    # ch19
    "check_router_logit_grad",
    "check_router_z_loss",
    "check_sequence_balance_loss",
    # ch20
    "check_yarn_ramp",
    "check_ntk_base",
    "check_partial_rope",
    "check_yarn_logit_scale",
    # ch21
    "check_visited_tiles",
    "check_softcap_kernel",
    "check_combine_with_sink",
    # ch22
    "check_prefix_hits",
    "check_block_gather",
    "check_tokens_per_call",
    # ch23
    "check_ring_backward_bytes",
    "check_balanced_layout",
    "check_step_plan",
    # reading_a_model
    "check_uniform_sink_baseline",
    "check_duplicate_token_score",
    # reading_an_llm
    "check_sink_mass",
    "check_logit_difference",
    "check_gqa_cache_bytes",
]
