"""The kernels behind :func:`attn_core.attention`, and when each one runs.

* :mod:`.switch`: the process-wide mode of each optional fused kernel (auto, always, never)
  and the inputs a kernel failed to build for.
* :mod:`.flex`: FlexAttention for windows and sinks (CUDA; eager on the CPU for tests).
* :mod:`.flash`, :mod:`.flash_kernels`: FlashAttention-2 in Triton: the Python side and the
  kernels (compiled on CUDA, Triton's interpreter on the CPU).
* :mod:`.explicit`: the explicit path, every step written out (the reference).
* :mod:`.sdpa`: PyTorch's fused ``scaled_dot_product_attention``, with attn_core's masks.

:mod:`attn_core.ops.attention` calls them. Modules here import :mod:`attn_core.checks` and the
rest of :mod:`attn_core.ops`; Triton is imported only when a Triton kernel is first used.
"""
