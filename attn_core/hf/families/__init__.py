"""The Hugging Face families :func:`~attn_core.hf.convert.from_hf` converts: one record each, one file per family.

A family is a :class:`~attn_core.hf.families.base.Family`: the hooks the shared readers call
(:func:`~attn_core.hf.configs.config_from_hf` for the config; :func:`~attn_core.hf.convert.from_hf`,
:func:`~attn_core.hf.convert.copy_attention` and :mod:`~attn_core.hf.weights` for the weights),
each LLaMA's unless the family gives its own. :mod:`.base` holds the record, the LLaMA reading
and the readers several families share; each other module is one family, or a few that
Hugging Face derives from one another (:mod:`.mistral`: Mistral and Mixtral; :mod:`.qwen`:
Qwen2, Qwen3, Qwen3-MoE; :mod:`.deepseek`; :mod:`.gemma`; :mod:`.olmo`), and says what its
family adds. :data:`FAMILIES` is the registry, by ``model_type``; :data:`SUPPORTED_MODEL_TYPES`
its keys, in the order they were added. The family files may import :mod:`attn_core.hf.rope`,
:mod:`.base`, each other (GLM-4-MoE routes as DeepSeek) and what is below ``hf``; never the
shared readers (:mod:`~attn_core.hf.configs`, :mod:`~attn_core.hf.convert`,
:mod:`~attn_core.hf.weights`), which import this package, nor ``transformers``: the hooks read
the attributes of the objects they are given.

To add a family:

1. ``hf/families/<family>.py``: its hooks and ``<FAMILY> = Family("<model_type>", ...)``,
   naming only what differs from LLaMA (e.g. ``GRANITE = Family("granite", fields=granite_fields)``);
   what attn_core cannot compute exactly is refused with :func:`~.base.refuse`.
2. One line here: its record at the end of ``_RECORDS`` (the supported list keeps its order).
3. Its test: ``tests/test_hf_families_<family>.py`` (or in ``tests/test_hf_families.py``), with
   the logits and greedy generation of a tiny random model equal to Hugging Face's, and each refusal;
   and how the book's prose names it, in ``NAMES`` of ``tests/test_book_facts.py`` (which checks
   every page's claims about converting against this registry).
4. Re-run ``book/appendix_explorer.ipynb``, which prints the supported list.
"""

from __future__ import annotations

from .base import Family
from .cohere2 import COHERE2
from .deepseek import DEEPSEEK_V3, DEEPSEEK_V32
from .gemma import GEMMA2, GEMMA3
from .glm4_moe import GLM4_MOE
from .gpt_oss import GPT_OSS
from .granite import GRANITE
from .llama import LLAMA
from .llama4 import LLAMA4
from .mistral import MISTRAL, MIXTRAL
from .olmo import OLMO2, OLMO3
from .phi3 import PHI3
from .qwen import QWEN2, QWEN3, QWEN3_MOE
from .qwen3_next import QWEN3_NEXT
from .smollm3 import SMOLLM3

__all__ = ["FAMILIES", "NOT_CONVERTED", "SUPPORTED_MODEL_TYPES", "Family", "experts_family", "family_of"]

_RECORDS = (
    LLAMA, MISTRAL, QWEN3, DEEPSEEK_V3, DEEPSEEK_V32, GEMMA2, GEMMA3, MIXTRAL, QWEN3_MOE, QWEN2, GRANITE, PHI3,
    COHERE2, GLM4_MOE, SMOLLM3, OLMO2, OLMO3, QWEN3_NEXT, GPT_OSS, LLAMA4,
)  # fmt: skip

#: The families by Hugging Face ``config.model_type``.
FAMILIES: dict[str, Family] = {family.model_type: family for family in _RECORDS}

#: The Hugging Face ``config.model_type`` values :func:`~attn_core.hf.convert.from_hf` converts.
SUPPORTED_MODEL_TYPES = tuple(FAMILIES)

#: Model types the chapters discuss that :func:`~attn_core.hf.convert.from_hf` refuses, and why: what
#: each adds that a :class:`~attn_core.DecoderLM` does not compute. Their attention layers alone
#: convert with :func:`~attn_core.hf.convert.copy_attention` where it says so.
NOT_CONVERTED = {
    "kimi_linear": "its Kimi Delta Attention layers (KDA: a delta rule whose forget gate has one decay per "
    "channel, from a low-rank f_a_proj/f_b_proj) are not attn_core's GatedDeltaNet (one decay per head), and "
    "its full layers are MLA without RoPE",
    "deepseek_v4": "its attention compresses past keys (the HCA and CSA compressors, with their own caches), "
    "its residual stream is split into hyper-connections and some MoE layers route by a token hash; "
    "DecoderLM has none of these",
    "minimax": "its linear layers are lightning attention (a linear attention with one exponential decay per "
    "head, computed block by block), interleaved with softmax layers and MoE; attn_core has no such layer",
    "gemma3n_text": "its layers add AltUp (several predicted copies of the residual stream), LAuReL's low-rank "
    "residual, per-layer token embeddings, activation sparsity in the first MLPs and KV sharing between "
    "its last layers in another pattern; DecoderLM has none of the first four",
}


def family_of(module: object) -> Family:
    """The family of a Hugging Face module, by the ``model_type`` of the config it keeps (LLaMA's if none)."""
    return FAMILIES.get(getattr(getattr(module, "config", None), "model_type", None), LLAMA)


def experts_family(experts: object) -> Family:
    """The family whose layout a Hugging Face experts module has (experts keep no config: each family that
    lays them out its own way recognises its own); LLaMA's, which reads the shared layouts, if none does."""
    return next((family for family in _RECORDS if family.owns_experts(experts)), LLAMA)
