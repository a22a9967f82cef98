"""attn_core: the tested implementations behind "Attention, from scratch".

Every chapter of the book imports from this package's top level. One module per
concept; see each module's docstring for its shape legend:

    core        the one scaled dot-product attention every layer calls
    masks       causal and padding masks (True = may attend)
    shapes      split_heads / merge_heads / head_mask: the wiring every multi-head layer shares
    self_attention  SelfAttention, the single head of chapter 1
    attention   MultiHeadAttention (MHA, GQA, MQA, cross-attention)
    mla         multi-head latent attention (DeepSeek-V2)
    positional  sinusoidal, learned, rotary (RoPE) and ALiBi positions
    cache       KVCache, LatentKVCache (every attention layer builds its own: make_cache)
    norms       LayerNorm, RMSNorm, make_norm
    mlp         FeedForward, SwiGLU, make_mlp
    blocks      TransformerBlock
    simplified  shaped attention and the simplified blocks (He & Hofmann, 2023)
    config      DecoderConfig and its presets
    params      the parameter count by formula
    model       DecoderLM
    generate    autoregressive decoding, with or without caches
    efficient   online softmax and tiled (FlashAttention-style) attention
    tasks       synthetic tasks; train: a tiny seeded trainer
    measure     timing, peak memory, operator lists, FLOP counts (chapters 12-14)
    mistakes    deliberately wrong versions that chapters demonstrate
    checks      the argument checks every module uses
    compare     assert_close & co.: comparisons printed as the tolerance they are held to
    pretrained  the shipped byte-level model of Shakespeare (load_shakespeare)
    smollm2     a real LLM offline: SmolLM2-135M-Instruct fetched, converted, cached (load_smollm2)
    heads       finding heads by what they do (score_heads, ablate_heads)
    window      sliding windows in a stack: receptive field, layer patterns, cache bytes (chapter 15)
    gating      the output gate of gated attention (chapter 16)
    outliers    attention logits, first-token mass, largest activations (chapter 16)
    linear_attention  linear attention and the (gated) delta rule in three forms (chapter 17)
    gated_deltanet    GatedDeltaNet, Qwen3-Next's linear-attention layer, and its cache (chapter 17)
    sparse_attention  DeepSeek Sparse Attention: the lightning indexer, top-k selection, its loss (chapter 18)
    moe         mixture of experts: top-k router, experts, balancing (chapter 19)
    viz         heatmaps and the explorer widgets (plots + explorers)
    exercises   check functions for the chapters' exercises
"""

import os as _os

import torch as _torch

# Triton decides between compiling and interpreting its kernels when they are defined, and
# its own library functions (tl.cdiv, tl.sigmoid, ...) are defined when triton is first
# imported. torch imports triton lazily (torch.utils.flop_counter does, and the measure and
# exercise modules import it), so the choice is made here, before any submodule: on a
# machine without CUDA, attn_core.flash's kernels can only run in the interpreter.
if not _torch.cuda.is_available():
    _os.environ.setdefault("TRITON_INTERPRET", "1")

# --- norms / mlp / blocks / config / model / simplified / tasks / train / generate (chapters 9-12) ---
# --- efficient, measure (and its old name timing) (chapters 12-14) ---
from . import convert, heads, linear_attention, measure, tasks, timing
from .attention import GroupedQueryAttention, MultiHeadAttention, MultiQueryAttention
from .blocks import TransformerBlock
from .cache import ContextKVCache, KVCache, LatentKVCache, RollingKVCache
from .compare import assert_above, assert_below, assert_between, assert_close, assert_differ, format_value, max_abs_diff
from .config import DecoderConfig
from .convert import from_hf
from .core import attention
from .delta_rule import delta_rule_chunked, delta_rule_matrix, delta_rule_parallel, delta_rule_recurrent
from .efficient import online_softmax, tiled_attention
from .gated_deltanet import GatedDeltaNet, GatedDeltaNetCache
from .generate import generate
from .heads import ablate_heads, score_heads
from .linear_attention import (
    linear_attention_chunked,
    linear_attention_matrix,
    linear_attention_parallel,
    linear_attention_recurrent,
)
from .masks import causal_mask, padding_mask, position_mask
from .measure import peak_tensor_memory

# --- mla.py / positional.py (chapters 7-8) ---
from .mla import MultiHeadLatentAttention, kv_cache_elements_per_token
from .mlp import FeedForward, SwiGLU, swiglu_hidden_dim
from .model import DecoderLM
from .norms import LayerNorm, RMSNorm
from .params import parameter_breakdown, parameter_count
from .positional import ALiBi, LearnedPositionalEmbedding, SinusoidalPositionalEncoding
from .pretrained import ByteCodec, attention_maps, bits_per_char, load_shakespeare, shakespeare_info, shakespeare_text
from .rope import RotaryEmbedding, convert_rope_layout, rope_permutation
from .self_attention import SelfAttention
from .simplified import ShapedAttention, SimplifiedBlock, centring_matrix
from .smollm2 import load_smollm2
from .train import TrainResult, accuracy, train
from .window import kv_cache_bytes, layer_pattern, published_attention, receptive_field, receptive_field_width, windowed

__version__ = "0.1.0"

__all__ = [
    "assert_close",
    "assert_differ",
    "assert_above",
    "assert_below",
    "assert_between",
    "format_value",
    "max_abs_diff",
    "attention",
    "causal_mask",
    "padding_mask",
    "SelfAttention",
    "MultiHeadAttention",
    "GroupedQueryAttention",
    "MultiQueryAttention",
    "KVCache",
    "ContextKVCache",
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
    "convert",
    "from_hf",
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
    "measure",
    "online_softmax",
    "tiled_attention",
    "peak_tensor_memory",
    # --- the Shakespeare model and reading its heads (appendix) ---
    "ByteCodec",
    "load_shakespeare",
    "load_smollm2",
    "shakespeare_info",
    "shakespeare_text",
    "attention_maps",
    "bits_per_char",
    "heads",
    "score_heads",
    "ablate_heads",
    # --- chapter 15 names ---
    "RollingKVCache",
    "position_mask",
    "receptive_field",
    "receptive_field_width",
    "layer_pattern",
    "kv_cache_bytes",
    "published_attention",
    "windowed",
    # --- chapter 16 names ---
    "gating",
    "outliers",
    "output_gate",
    "max_attention_logit",
    "first_token_mass",
    "max_activation",
    # --- chapter 17 names ---
    "linear_attention",
    "GatedDeltaNet",
    "GatedDeltaNetCache",
    "linear_attention_matrix",
    "linear_attention_parallel",
    "linear_attention_recurrent",
    "linear_attention_chunked",
    "delta_rule_matrix",
    "delta_rule_parallel",
    "delta_rule_recurrent",
    "delta_rule_chunked",
]

# --- chapter 16: gated attention, QK-norm, soft-capping; chapter 19: mixture of experts ---
from . import gating, moe, outliers  # noqa: E402
from .gating import output_gate  # noqa: E402
from .moe import MixtureOfExperts, TopKRouter, load_balancing_loss, moe_aux_loss, moe_lm_loss  # noqa: E402
from .outliers import first_token_mass, max_activation, max_attention_logit  # noqa: E402

__all__ += ["moe", "MixtureOfExperts", "TopKRouter", "load_balancing_loss", "moe_aux_loss", "moe_lm_loss"]

# --- chapter 18: learned sparse attention (DeepSeek Sparse Attention) ---
from . import sparse_attention  # noqa: E402
from .sparse_attention import (  # noqa: E402
    IndexerKeyCache,
    LightningIndexer,
    SparseAttention,
    SparseCache,
    indexer_loss,
    indexer_losses,
    sparse_attention_flops,
    sparsify,
    topk_selection,
)

__all__ += [
    "sparse_attention",
    "LightningIndexer",
    "IndexerKeyCache",
    "SparseCache",
    "SparseAttention",
    "topk_selection",
    "indexer_loss",
    "indexer_losses",
    "sparsify",
    "sparse_attention_flops",
]
