"""Hugging Face models into :class:`~attn_core.DecoderLM`, exactly or not at all (floor 5).

* :mod:`.convert`: :func:`from_hf`, the driver: a config, then every weight copied.
* :mod:`.configs`: a Hugging Face config read into a :class:`~attn_core.DecoderConfig`, or
  refused with the reason.
* :mod:`.weights`: the weights of one attention layer, MLP or MoE copied across.
* :mod:`.families`: what each supported family adds to the LLaMA reading.
* :mod:`.rope`: Hugging Face's RoPE settings (``rope_parameters``) read into attn_core's scalings.
* :mod:`.smollm2`: SmolLM2-135M-Instruct offline, converted once and cached.

May import everything below it (the model, the config, layers, floor 1); never
:mod:`attn_core.teach`. ``transformers`` is imported only inside functions that need it.
"""
