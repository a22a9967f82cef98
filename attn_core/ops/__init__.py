"""Attention as functions: no parameters, no state (floor 1; imports only :mod:`attn_core.checks`).

* :mod:`.attention`: :func:`attention`, the one scaled dot-product attention every layer
  calls; it checks its arguments and hands the call to :mod:`.backends`.
* :mod:`.backends`: the kernels that compute it (the explicit reference, PyTorch's SDPA,
  FlexAttention, a Triton FlashAttention) and the one place that chooses among them.
* :mod:`.masks`, :mod:`.shapes`: boolean masks (True = may attend) and the head split/merge
  every multi-head layer shares.
* :mod:`.efficient`: online softmax and tiled attention, the FlashAttention idea in PyTorch.
* :mod:`.partial`: one block of keys' output with its log-sum-exp, and the exact merge of
  such partial results (blocks computed apart, e.g. on other ranks).
* :mod:`.linear_attention`, :mod:`.delta_rule`: linear attention and the (gated) delta rule,
  each in several forms side by side, tested equal.

Modules here import each other and :mod:`attn_core.checks`, nothing else of the package.
"""
