"""attn_core: the tested implementations behind "Attention, from scratch".

The top level holds the names a model-builder uses (``__all__``); everything else is
imported from its module. The subpackages are floors: a module imports only from its own
subpackage and from lower floors (``tests/test_layout.py`` holds every import to this),
and each subpackage's docstring says what lives there.

    checks        floor 0  the argument checks every module uses
    ops           floor 1  attention as functions: attention() and its backends (explicit,
                           SDPA, Flex, Triton flash), masks, head shapes, tiled attention,
                           partial results and their log-sum-exp merge, linear attention
                           and the delta rule
    positions     floor 1  sinusoidal, learned, ALiBi, RoPE, its frequencies and scalings
    caches        floor 1  KV, latent, rolling, static and recurrent caches
    modules       floor 1  norms, MLPs, dropout, the router and the mixture of experts
    layers        floor 2  attention layers: SelfAttention, MultiHeadAttention (MHA, GQA,
                           MQA, cross), MLA, shaped attention, Gated DeltaNet, the indexer
                           and sparse attention, gating, KV sharing
    parallel      floor 2  attention across processes with torch.distributed: ring (contiguous
                           or zig-zag), Ulysses and all-gather attention, sequence shards, a
                           launcher of local ranks, bytes and work counted per rank
    config        floor 3  DecoderConfig and its parts
    model         floor 4  make_layer, blocks, DecoderLM, padding, parameter counts, generate
    hf            floor 5  Hugging Face models converted exactly (from_hf), SmolLM2 offline
    teach         floor 6  the book's helpers: comparisons, training, tasks, plots and
                           explorers, measurement, head finding, the exercises' checks
    data                   the shipped Shakespeare model and the GPU measurements
"""

import os as _os

import torch as _torch

# Triton decides between compiling and interpreting its kernels when they are defined, and
# its own library functions (tl.cdiv, tl.sigmoid, ...) are defined when triton is first
# imported. torch imports triton lazily (torch.utils.flop_counter does, and the measure and
# exercise modules import it), so the choice is made here, before any submodule: on a
# machine without CUDA, attn_core.ops.backends.flash's kernels can only run in the interpreter.
if not _torch.cuda.is_available():
    _os.environ.setdefault("TRITON_INTERPRET", "1")

from .caches.kv import KVCache, LatentKVCache, RollingKVCache
from .config import DecoderConfig
from .hf.convert import from_hf
from .hf.smollm2 import load_smollm2
from .layers.context_kv import ContextKVCache
from .layers.gated_deltanet import GatedDeltaNet
from .layers.indexer import LightningIndexer
from .layers.mla import MultiHeadLatentAttention
from .layers.multihead import GroupedQueryAttention, MultiHeadAttention, MultiQueryAttention
from .layers.self_attention import SelfAttention
from .layers.simplified import ShapedAttention, SimplifiedBlock
from .layers.sparse_attention import SparseAttention
from .model.blocks import TransformerBlock, make_block
from .model.decoder import DecoderLM
from .model.generation import generate
from .model.params import parameter_count
from .modules.mlp import FeedForward, SwiGLU
from .modules.moe import MixtureOfExperts
from .modules.norms import LayerNorm, RMSNorm
from .modules.router import TopKRouter
from .ops.attention import attention
from .ops.masks import causal_mask, padding_mask
from .parallel.ring import ring_attention
from .parallel.ulysses import ulysses_attention
from .positions.positional import ALiBi, LearnedPositionalEmbedding, SinusoidalPositionalEncoding
from .positions.rope import RotaryEmbedding
from .teach.compare import assert_close
from .teach.pretrained import load_shakespeare
from .teach.training import train

__version__ = "0.1.0"

__all__ = [
    # attention and its masks
    "attention",
    "causal_mask",
    "padding_mask",
    # attention across processes (torch.distributed)
    "ring_attention",
    "ulysses_attention",
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
