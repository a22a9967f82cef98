"""attn_core: the tested implementations behind "Attention, from scratch".

Every chapter of the book imports from this package's top level. One module per
concept; see each module's docstring for its shape legend.
"""

from .attention import GroupedQueryAttention, MultiHeadAttention, MultiQueryAttention, SelfAttention
from .cache import KVCache, LatentKVCache
from .compare import assert_above, assert_below, assert_close, assert_differ, max_abs_diff
from .core import attention
from .masks import causal_mask, padding_mask

# --- mla.py / positional.py (chapters 7-8) ---
from .mla import MultiHeadLatentAttention, kv_cache_elements_per_token
from .positional import (
    ALiBi,
    LearnedPositionalEmbedding,
    RotaryEmbedding,
    SinusoidalPositionalEncoding,
    convert_rope_layout,
    rope_permutation,
)

# --- norms.py / blocks.py / simplified.py / tasks.py / train.py / generate.py (chapters 9-12) ---
from . import tasks
from .blocks import (
    DecoderConfig,
    DecoderLM,
    FeedForward,
    SwiGLU,
    TransformerBlock,
    parameter_breakdown,
    parameter_count,
    swiglu_hidden_dim,
)
from .generate import generate
from .norms import LayerNorm, RMSNorm
from .simplified import ShapedAttention, SimplifiedBlock, centring_matrix
from .train import TrainResult, accuracy, train

# --- efficient.py, timing.py (chapters 12-14) ---
from . import timing
from .efficient import online_softmax, peak_tensor_memory, tiled_attention

__version__ = "0.1.0"

__all__ = [
    "assert_close",
    "assert_differ",
    "assert_above",
    "assert_below",
    "max_abs_diff",
    "attention",
    "causal_mask",
    "padding_mask",
    "SelfAttention",
    "MultiHeadAttention",
    "GroupedQueryAttention",
    "MultiQueryAttention",
    "KVCache",
    "LatentKVCache",
    # --- chapters 7-8 names ---
    "MultiHeadLatentAttention",
    "kv_cache_elements_per_token",
    "SinusoidalPositionalEncoding",
    "LearnedPositionalEmbedding",
    "RotaryEmbedding",
    "ALiBi",
    "rope_permutation",
    "convert_rope_layout",
    # --- chapters 9-12 names ---
    "LayerNorm",
    "RMSNorm",
    "FeedForward",
    "SwiGLU",
    "swiglu_hidden_dim",
    "TransformerBlock",
    "DecoderConfig",
    "DecoderLM",
    "parameter_count",
    "parameter_breakdown",
    "ShapedAttention",
    "SimplifiedBlock",
    "centring_matrix",
    "tasks",
    "train",
    "TrainResult",
    "accuracy",
    "generate",
    # --- chapters 12-14 names ---
    "timing",
    "online_softmax",
    "tiled_attention",
    "peak_tensor_memory",
]

# --- pretrained.py (the Shakespeare model, the "Reading a trained model" appendix) ---
from .pretrained import ByteCodec, attention_maps, bits_per_char, load_shakespeare, shakespeare_info, shakespeare_text

__all__ += ["ByteCodec", "load_shakespeare", "shakespeare_info", "shakespeare_text", "attention_maps", "bits_per_char"]

# --- heads.py (finding heads by what they do) ---
from . import heads
from .heads import ablate_heads, score_heads

__all__ += ["heads", "score_heads", "ablate_heads"]
