"""Hugging Face models into :class:`~attn_core.DecoderLM`, exactly or not at all (floor 5).

* :mod:`.convert`: :func:`from_hf`, the driver: a config, then every weight copied
  (:func:`~.convert.copy_attention` for one attention layer).
* :mod:`.configs`: a Hugging Face config read into a :class:`~attn_core.DecoderConfig`, or
  refused with the reason.
* :mod:`.weights`: the weights of one MLP, mixture of experts, Gated DeltaNet layer or indexer copied across.
* :mod:`.families`: one file per supported family, each a :class:`~.families.base.Family`
  record of what it adds to the LLaMA reading; the registry, the supported and the refused lists.
* :mod:`.rope`: Hugging Face's RoPE settings (``rope_parameters``) read into attn_core's scalings.
* :mod:`.smollm2`: SmolLM2-135M-Instruct offline, converted once and cached.

The reading and the copy are written once, for LLaMA, in :mod:`.configs`, :mod:`.convert` and
:mod:`.weights`; they name no family, and ask the family's record wherever a family differs
(its positions, windows, block, attention, experts, fields, weight layouts). A new family is a
new file in :mod:`.families` and a line in its registry (the steps are in its docstring); the
shared readers do not change. Modules here may import everything below (the model, the config,
layers, floor 1); never :mod:`attn_core.teach`. :mod:`.families` and :mod:`.rope` never import
the shared readers, which import them. ``transformers`` is imported only inside functions that
need it (by :mod:`.smollm2`): the readers use the attributes of the objects they are given.
"""
