"""Mixture of experts: ``E`` expert MLPs behind a top-k router, and the model-level helpers.

A dense MLP applies all of its weights to every token. A mixture-of-experts layer holds
``E`` MLPs ("experts") and a *router* that picks ``k`` of them per token, so the layer
has ``E`` times the parameters of one expert but costs about ``k`` experts per token:
total and *active* parameters come apart (Mixtral: 46.7B total, 12.9B active). The router
(:class:`~attn_core.modules.router.TopKRouter`), its capacity rule and the balancing loss are in
:mod:`attn_core.modules.router`.

* :class:`MixtureOfExperts`: the router, ``E`` :class:`~attn_core.SwiGLU` experts, the
  weighted sum of the chosen experts' outputs, optional shared experts that every token
  goes through (DeepSeek), and an optional capacity: each expert takes at most
  ``ceil(capacity_factor · N · k / E)`` of the ``N·k`` assignments, the rest are dropped
  (the token keeps only its other experts and the residual) and counted. After each
  forward its :class:`MoEStats` (tokens per expert, dropped assignments, the balancing
  loss) are in ``.stats``, for a training loop to read.
  :meth:`MixtureOfExperts.update_selection_bias`: DeepSeek-V3's bias update by the sign of
  each expert's load error.
* Model-level helpers: :func:`moe_layers`, :func:`moe_aux_loss`,
  :func:`update_selection_biases` (:func:`attn_core.teach.training.moe_lm_loss` is the ``loss_fn`` for
  :func:`~attn_core.train`), :func:`load_imbalance`.

Shape legend:
    ...      leading dimensions of the input, typically ``(B, T)``
    N        tokens, the leading dimensions flattened
    d        ``d_model``; ``f`` an expert's hidden width
    E        routed experts; ``k`` experts per token
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from ..checks import check_bool, check_instance, check_int, check_number, check_tensor
from .mlp import ClampedSwiGLU, SwiGLU, swiglu_hidden_dim
from .router import TopKRouter, capacity_keep, expert_capacity, load_balancing_loss

__all__ = [
    "MoEStats",
    "MixtureOfExperts",
    "load_imbalance",
    "moe_layers",
    "moe_aux_loss",
    "update_selection_biases",
]


@dataclass
class MoEStats:
    """Router statistics of one :class:`MixtureOfExperts` forward, for a training loop to read.

    Attributes:
        tokens_per_expert: Assignments each expert received from the router (before the
            capacity drops them), ``(E,)`` int64; sums to ``N·k``.
        dropped: Assignments dropped because their expert was full (0 without a capacity).
        n_tokens: ``N``.
        aux_loss: :func:`load_balancing_loss` of this forward, a differentiable scalar.
        experts: The chosen experts per token, ``(..., k)`` (the input's leading dims).
        weights: Their weights, ``(..., k)`` (detached).
    """

    tokens_per_expert: torch.Tensor
    dropped: int
    n_tokens: int
    aux_loss: torch.Tensor
    experts: torch.Tensor
    weights: torch.Tensor

    @property
    def dropped_fraction(self) -> float:
        """Dropped assignments over all ``N·k``."""
        return self.dropped / max(1, int(self.tokens_per_expert.sum()))


class MixtureOfExperts(nn.Module):
    """A mixture-of-experts MLP: a :class:`TopKRouter`, ``E`` SwiGLU experts, optional shared experts.

    ``y = Σ_{e ∈ topk(x)} w_e(x) · expert_e(x)  +  shared(x)``: each token goes through its
    ``k`` chosen experts, their outputs weighted by the router, plus (DeepSeek) the shared
    experts that every token goes through. The experts are an ``nn.ModuleList`` of
    :class:`~attn_core.SwiGLU`, and the forward loops over them, gathering the tokens each
    expert got: the loop *is* the dispatch (fused kernels batch it; the result is the same).

    With ``capacity_factor`` set, expert ``e`` computes at most
    :func:`expert_capacity` assignments in training and inference alike; the ones past it
    (in token order, first choices before second ones) are dropped: that expert adds
    nothing to that token, and the count is in ``stats.dropped``.

    Args:
        d_model: Width of the tokens.
        n_experts: Routed experts ``E``.
        k: Experts per token.
        d_ff: Each expert's hidden width; default :func:`~attn_core.modules.mlp.swiglu_hidden_dim`.
        n_shared: Shared experts (DeepSeek: 1); they are one SwiGLU of width ``n_shared · d_ff``
            (what Hugging Face's DeepSeek-V3 builds; the same function as ``n_shared`` separate ones summed).
        capacity_factor: ``None`` (no capacity, nothing dropped) or a number > 0.
        bias: Biases in the experts' linear layers (gpt-oss).
        router_bias: A bias in the router (gpt-oss).
        scoring, topk_first, normalize, scale, n_groups, topk_groups: :class:`TopKRouter`'s.
        swiglu_limit: gpt-oss: the experts are :class:`~attn_core.modules.mlp.ClampedSwiGLU` s with this
            clamp (7.0) and ``swiglu_alpha`` (1.702); ``None``: plain SwiGLUs. The shared
            experts stay plain.
        swiglu_alpha: The clamped experts' gate slope; only with ``swiglu_limit``.
        shared_d_ff: The shared experts' hidden width (Qwen3-Next's ``shared_expert_intermediate_size``);
            ``None``: ``n_shared · d_ff``.
        shared_gate: Qwen3-Next: the shared experts' output times ``σ(x·w)``, one learned sigmoid
            gate per token (``shared_gate``, ``nn.Linear(d_model, 1)`` without bias); needs ``n_shared >= 1``.
        weight_inputs: Llama 4: each chosen expert reads its token *times* the router's weight,
            ``Σ_e expert_e(w_e·x)``, instead of weighting its output, ``Σ_e w_e·expert_e(x)``
            (the same for a linear expert, not for a SwiGLU: its gate and up paths both scale).

    Attributes:
        router: The :class:`TopKRouter`.
        experts: ``nn.ModuleList`` of ``E`` :class:`~attn_core.SwiGLU` (or ``ClampedSwiGLU``).
        shared: A :class:`~attn_core.SwiGLU` or None.
        shared_gate: ``nn.Linear(d_model, 1, bias=False)`` or None.
        stats: :class:`MoEStats` of the last forward (None before the first).

    Raises:
        ValueError: What :class:`TopKRouter` refuses; ``n_shared < 0``; ``capacity_factor <= 0``.

    Shapes:
        x: ``(..., d_model)``; output: ``(..., d_model)``
    """

    def __init__(
        self,
        d_model: int,
        n_experts: int,
        k: int,
        *,
        d_ff: int | None = None,
        n_shared: int = 0,
        capacity_factor: float | None = None,
        bias: bool = False,
        router_bias: bool = False,
        scoring: str = "softmax",
        topk_first: bool = False,
        normalize: bool = False,
        scale: float = 1.0,
        n_groups: int = 1,
        topk_groups: int = 1,
        swiglu_limit: float | None = None,
        swiglu_alpha: float = 1.702,
        shared_d_ff: int | None = None,
        shared_gate: bool = False,
        weight_inputs: bool = False,
    ) -> None:
        super().__init__()
        self.router = TopKRouter(
            d_model, n_experts, k, scoring=scoring, topk_first=topk_first, normalize=normalize, scale=scale,
            n_groups=n_groups, topk_groups=topk_groups, bias=router_bias,
        )  # fmt: skip
        self.d_ff = swiglu_hidden_dim(d_model) if d_ff is None else check_int("d_ff", d_ff)
        self.n_shared = check_int("n_shared", n_shared, minimum=0)
        if capacity_factor is not None:
            check_number("capacity_factor", capacity_factor, low=0.0, low_open=True)
        self.capacity_factor = capacity_factor
        self.d_model, self.n_experts, self.k = d_model, n_experts, k
        if swiglu_limit is None:
            if swiglu_alpha != 1.702:
                raise ValueError(f"swiglu_alpha={swiglu_alpha} shapes the clamped experts: set swiglu_limit too")
            self.experts = nn.ModuleList(SwiGLU(d_model, self.d_ff, bias=bias) for _ in range(n_experts))
        else:  # gpt-oss
            self.experts = nn.ModuleList(
                ClampedSwiGLU(d_model, self.d_ff, limit=swiglu_limit, alpha=swiglu_alpha, bias=bias)
                for _ in range(n_experts)
            )
        if shared_d_ff is not None and not n_shared:
            raise ValueError(f"shared_d_ff={shared_d_ff} is the shared experts' width, but n_shared=0")
        shared_width = n_shared * self.d_ff if shared_d_ff is None else check_int("shared_d_ff", shared_d_ff)
        self.shared = SwiGLU(d_model, shared_width, bias=bias) if n_shared else None
        if check_bool("shared_gate", shared_gate) and not n_shared:
            raise ValueError("shared_gate=True gates the shared experts, but n_shared=0")
        self.shared_gate = nn.Linear(d_model, 1, bias=False) if shared_gate else None
        self.weight_inputs = check_bool("weight_inputs", weight_inputs)
        self.stats: MoEStats | None = None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Route every token to its ``k`` experts and sum their weighted outputs (and the shared experts').

        Shapes:
            x: ``(..., d_model)``; output: ``(..., d_model)``
        """
        check_tensor("x", x, ("...", ("d_model", self.d_model)), like=self.router.proj.weight)
        lead = x.shape[:-1]
        flat = x.reshape(-1, self.d_model)  # (..., d) -> (N, d): routing is per token
        r = self.router(flat)
        keep = torch.ones_like(r.experts, dtype=torch.bool)
        if self.capacity_factor is not None:
            capacity = expert_capacity(self.capacity_factor, flat.shape[0], self.k, self.n_experts)
            keep = capacity_keep(r.experts, self.n_experts, capacity)  # (N, k)
        weights = r.weights.to(x.dtype)
        out = torch.zeros_like(flat)  # (N, d)
        for e, expert in enumerate(self.experts):
            token, slot = torch.where((r.experts == e) & keep)  # the assignments expert e computes
            if token.numel():
                w = weights[token, slot, None]  # (n_e, 1)
                y = expert(flat[token] * w) if self.weight_inputs else expert(flat[token]) * w  # (n_e, d)
                out = out.index_add(0, token, y)  # out of place: autograd needs `out` as it was
        if self.shared_gate is not None:  # Qwen3-Next: a sigmoid gate per token on the shared experts
            out = out + torch.sigmoid(self.shared_gate(flat)) * self.shared(flat)  # (N, 1) * (N, d)
        elif self.shared is not None:
            out = out + self.shared(flat)
        self.stats = MoEStats(
            tokens_per_expert=torch.bincount(r.experts.reshape(-1), minlength=self.n_experts),
            dropped=int((~keep).sum()),
            n_tokens=flat.shape[0],
            aux_loss=load_balancing_loss(r.probs, r.experts, self.n_experts),
            experts=r.experts.view(*lead, self.k),
            weights=r.weights.detach().view(*lead, self.k),
        )
        return out.view(*lead, self.d_model)

    @torch.no_grad()
    def update_selection_bias(self, rate: float) -> torch.Tensor:
        """DeepSeek-V3's auxiliary-loss-free balancing: ``b_e += rate · sign(mean load − load_e)``.

        After a batch, every overloaded expert's selection bias goes down by ``rate`` and
        every underloaded one's goes up (DeepSeek-V3 §2.1.2, ``γ = 0.001``). The bias only
        changes which experts are *chosen* (:class:`TopKRouter`), not the weights of their
        outputs, so it balances the load without a loss term pulling on the router.

        Args:
            rate: The update speed ``γ`` (> 0).

        Returns:
            The new ``selection_bias`` ``(E,)``.

        Raises:
            ValueError: No forward has run yet (no load to correct), or ``rate <= 0``.
        """
        check_number("rate", rate, low=0.0, low_open=True)
        if self.stats is None:
            raise ValueError("update_selection_bias needs a forward first: it corrects the last batch's load")
        load = self.stats.tokens_per_expert.to(self.router.selection_bias.dtype)
        self.router.selection_bias += rate * torch.sign(load.mean() - load)
        return self.router.selection_bias

    def extra_repr(self) -> str:
        cap = "" if self.capacity_factor is None else f", capacity_factor={self.capacity_factor}"
        return f"n_experts={self.n_experts}, k={self.k}, d_ff={self.d_ff}, n_shared={self.n_shared}{cap}"


def load_imbalance(tokens_per_expert: torch.Tensor) -> float:
    """The busiest expert's load over the mean load: 1 when balanced, ``E`` when one expert takes everything.

    Shapes:
        tokens_per_expert: ``(E,)``
    """
    check_tensor("tokens_per_expert", tokens_per_expert, ("E",))
    load = tokens_per_expert.double()
    if load.sum() <= 0:
        raise ValueError("tokens_per_expert sums to 0: no load to compare")
    return float(load.max() / load.mean())


def moe_layers(model: nn.Module) -> list[MixtureOfExperts]:
    """Every :class:`MixtureOfExperts` inside ``model``, in module order."""
    check_instance("model", model, nn.Module)
    return [m for m in model.modules() if isinstance(m, MixtureOfExperts)]


def moe_aux_loss(model: nn.Module) -> torch.Tensor:
    """The sum of the balancing losses of every MoE layer's last forward (0 when the model has none).

    Raises:
        ValueError: An MoE layer has not run a forward yet.
    """
    layers = moe_layers(model)
    if any(m.stats is None for m in layers):
        raise ValueError("moe_aux_loss reads each MoE layer's last forward: run the model first")
    return sum((m.stats.aux_loss for m in layers), torch.zeros(()))


def update_selection_biases(model: nn.Module, rate: float) -> None:
    """:meth:`MixtureOfExperts.update_selection_bias` on every MoE layer of ``model``."""
    for m in moe_layers(model):
        m.update_selection_bias(rate)
