"""Where a token is: position encodings (floor 1; imports only :mod:`attn_core.checks`).

* :mod:`.positional`: sinusoidal and learned positions, ALiBi, NoPE's query temperature.
* :mod:`.rope`: rotary embeddings, their two layouts and the permutation between them.
* :mod:`.rope_freqs`: RoPE's frequencies: default, PI, NTK, YaRN, Llama 3.1, LongRoPE.
* :mod:`.rope_scaling`: one frozen dataclass per context-extension method.

Modules here import each other and :mod:`attn_core.checks`, nothing else of the package.
"""
