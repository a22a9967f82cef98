"""The parts of a block that are not attention (floor 1; imports only :mod:`attn_core.checks`).

* :mod:`.norms`: LayerNorm, RMSNorm (fp32 inside), the QK-norm choices.
* :mod:`.mlp`: FeedForward, SwiGLU and GeGLU.
* :mod:`.dropout`: a dropout that costs nothing when it drops nothing.
* :mod:`.router`, :mod:`.moe`: the top-k router with its balancing, and the mixture of experts.

Modules here import each other and :mod:`attn_core.checks`, nothing else of the package.
"""
