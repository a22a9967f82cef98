"""attn_core: the tested implementations behind "Attention, from scratch".

The top level holds the names a model-builder uses (``__all__``); everything else is
imported from its module. One module per concept; see each module's docstring for its
shape legend:

    core              the one scaled dot-product attention every layer calls
    masks             causal, padding and position masks (True = may attend)
    shapes            split_heads / merge_heads / head_mask: the wiring every multi-head layer shares
    self_attention    SelfAttention, a single head
    multihead         MultiHeadAttention (MHA, GQA, MQA, cross-attention): one forward, one tail
    multihead_checks  MultiHeadAttention's option and call checks
    context_kv        cross-attention to a context projected once (cache_context)
    kv_sharing        cross-layer KV sharing: SharedKV, KVSharing, borrows_kv
    mla, cache_size   multi-head latent attention (DeepSeek-V2); cache elements per token
    positional        sinusoidal, learned and ALiBi positions, NoPE temperature
    rope              rotary embeddings (RoPE), its layouts and permutation
    rope_freqs        RoPE's frequencies: default, PI, NTK, YaRN, Llama 3.1, LongRoPE
    rope_scaling      one frozen dataclass per context-extension method; scaling_from_hf
    cache             KVCache, LatentKVCache, RollingKVCache, ContextKVCache, SlotCache
    static_cache      static-shape caches for compiled decoding
    padding           left-padded batches: positions from the attention mask
    norms, mlp        LayerNorm, RMSNorm; FeedForward, SwiGLU
    dropout           Dropout that costs nothing when it drops nothing (eval mode)
    blocks            TransformerBlock, SandwichBlock, ParallelBlock, make_block
    simplified        shaped attention and the simplified blocks (He & Hofmann, 2023)
    config            DecoderConfig and its parts (Positions, LayerPattern, LinearLayers, MoE, Indexer)
    layers            make_layer(config, i): layer i built from the config
    params            the parameter count by formula
    model             DecoderLM
    generation        autoregressive decoding, with or without caches (generate)
    training          a tiny seeded trainer (train) and its losses and schedule
    tasks, seq2seq_tasks  synthetic tasks; the encoder-decoder reversal task
    efficient         online softmax and tiled (FlashAttention-style) attention
    flash, flash_kernels  FlashAttention-2 in Triton: the Python side; the kernels
    flex              FlexAttention for windows and sinks on CUDA
    kernel_switch     which fused kernel takes a window or sinks (Triton's, then Flex)
    position_count    a cache's count on the host and on the device (for CUDA graphs)
    measure           timing, peak memory, operator lists, FLOP counts
    window, streaming sliding windows in a stack; StreamingLLM's cache
    gating, outliers  the output gate of gated attention; logits, sinks, large activations
    linear_attention  linear attention in three forms
    delta_rule        the (gated) delta rule in three forms
    gated_deltanet    GatedDeltaNet, Qwen3-Next's linear-attention layer, and its cache
    indexer           DeepSeek Sparse Attention's lightning indexer, top-k selection, its loss
    sparse_attention  the sparse attention layer and its cache
    router, moe       the top-k router and balancing; the mixture of experts
    convert           Hugging Face models into DecoderLM (from_hf; convert_config, convert_modules,
                      convert_families)
    reporting         the book's skip messages (transformers_names)
    pretrained        the shipped byte-level model of Shakespeare (load_shakespeare)
    smollm2           a real LLM offline: SmolLM2-135M-Instruct, converted and cached (load_smollm2)
    heads             finding heads by what they do (score_heads, ablate_heads)
    mistakes          deliberately wrong versions, to show what a bug does
    checks            the argument checks every module uses
    compare           assert_close & co.: comparisons printed as the tolerance they are held to
    plots, explorers  heatmaps and the explorer widgets (viz gathers both; kernel_explorer)
    exercises         check functions for the exercises
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

from .blocks import TransformerBlock, make_block
from .cache import KVCache, LatentKVCache, RollingKVCache
from .compare import assert_close
from .config import DecoderConfig
from .context_kv import ContextKVCache
from .convert import from_hf
from .core import attention
from .gated_deltanet import GatedDeltaNet
from .generation import generate
from .indexer import LightningIndexer
from .masks import causal_mask, padding_mask
from .mla import MultiHeadLatentAttention
from .mlp import FeedForward, SwiGLU
from .model import DecoderLM
from .moe import MixtureOfExperts
from .multihead import GroupedQueryAttention, MultiHeadAttention, MultiQueryAttention
from .norms import LayerNorm, RMSNorm
from .params import parameter_count
from .positional import ALiBi, LearnedPositionalEmbedding, SinusoidalPositionalEncoding
from .pretrained import load_shakespeare
from .rope import RotaryEmbedding
from .router import TopKRouter
from .self_attention import SelfAttention
from .simplified import ShapedAttention, SimplifiedBlock
from .smollm2 import load_smollm2
from .sparse_attention import SparseAttention
from .training import train

__version__ = "0.1.0"

__all__ = [
    # attention and its masks
    "attention",
    "causal_mask",
    "padding_mask",
    # attention layers
    "SelfAttention",
    "MultiHeadAttention",
    "GroupedQueryAttention",
    "MultiQueryAttention",
    "MultiHeadLatentAttention",
    "GatedDeltaNet",
    "SparseAttention",
    "LightningIndexer",
    "ShapedAttention",
    # caches
    "KVCache",
    "LatentKVCache",
    "RollingKVCache",
    "ContextKVCache",
    # positions
    "RotaryEmbedding",
    "ALiBi",
    "SinusoidalPositionalEncoding",
    "LearnedPositionalEmbedding",
    # norms, MLPs, blocks
    "LayerNorm",
    "RMSNorm",
    "FeedForward",
    "SwiGLU",
    "MixtureOfExperts",
    "TopKRouter",
    "TransformerBlock",
    "make_block",
    "SimplifiedBlock",
    # the model
    "DecoderConfig",
    "DecoderLM",
    "parameter_count",
    "generate",
    "train",
    # loading models
    "from_hf",
    "load_shakespeare",
    "load_smollm2",
    # checking
    "assert_close",
]
