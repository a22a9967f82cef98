"""GLM-4.5 / 4.6 (``glm4_moe``): q/k/v biases, optional QK-norm, RoPE on part of each head, DeepSeek's experts.

``qkv_bias`` (no bias on the output projection), ``qk_norm`` (``use_qk_norm``), ``rotary_dim``
(``partial_rotary_factor`` 0.5: half of each head rotated). Its experts route as DeepSeek-V3's
(sigmoid, groups, selection bias, shared experts, dense first layers) and are read with
:func:`~attn_core.hf.families.deepseek.deepseek_moe`.
"""

from __future__ import annotations

from ..rope import partial_rotary
from .base import Family
from .deepseek import deepseek_moe

__all__ = ["GLM4_MOE", "glm4_moe_fields"]


def glm4_moe_fields(hf) -> dict:
    """Biases on q, k, v only, QK-norm if ``use_qk_norm``, partial RoPE."""
    return dict(
        bias=False, qkv_bias=bool(hf.attention_bias), qk_norm=bool(getattr(hf, "use_qk_norm", False)),
        **partial_rotary(hf),
    )  # fmt: skip


GLM4_MOE = Family("glm4_moe", fields=glm4_moe_fields, moe=deepseek_moe)
