"""Check functions for the chapters' exercises: ``from attn_core.exercises import check_...``.

One module per chapter (``ch01.py``, ``ch02.py``, ...). Each check runs the learner's
function against the reference in ``attn_core`` on a few seeded inputs, prints a short
verdict and returns ``True``/``False`` (it never raises on a wrong answer, so a
notebook keeps running).
"""

from ._common import compare, report
from .ch01 import check_scaled_scores, check_self_attention, check_softmax_temperature

__all__ = ["report", "compare", "check_scaled_scores", "check_self_attention", "check_softmax_temperature"]

from .ch07 import check_absorbed_query, check_cache_elements, check_decoupled_scores  # noqa: E402
from .ch08 import check_alibi_slopes, check_rope_rotation, check_sinusoidal  # noqa: E402

__all__ += ["check_absorbed_query", "check_decoupled_scores", "check_cache_elements"]
__all__ += ["check_sinusoidal", "check_rope_rotation", "check_alibi_slopes"]
