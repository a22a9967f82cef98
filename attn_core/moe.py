"""Mixture of experts: a top-k router sends each token to ``k`` of ``E`` expert MLPs (chapter 19).

A dense MLP applies all of its weights to every token. A mixture-of-experts layer holds
``E`` MLPs ("experts") and a *router* that picks ``k`` of them per token, so the layer
has ``E`` times the parameters of one expert but costs about ``k`` experts per token:
total and *active* parameters come apart (Mixtral: 46.7B total, 12.9B active).

* :class:`TopKRouter`: scores (``"softmax"``: Switch, Mixtral, Qwen3-MoE; ``"sigmoid"``:
  DeepSeek-V3), the top-k choice, and the weights of the kept experts, in either order:
  score all experts then keep the top k (Qwen3-MoE, DeepSeek; optionally renormalising the
  kept weights to sum to 1) or keep the top-k *logits* then softmax over them (Mixtral,
  gpt-oss). Softmax-then-top-k renormalised *equals* top-k-then-softmax (a test holds it);
  without renormalisation the kept weights sum to less than 1. DeepSeek-V3's
  group-limited choice (``n_groups``, ``topk_groups``) and its scale on the weights
  (``routed_scaling_factor``) are options. A per-expert ``selection_bias`` buffer
  (DeepSeek-V3's auxiliary-loss-free balancing) shifts which experts are *chosen*, never
  the weights they get.
* :class:`MixtureOfExperts`: the router, ``E`` :class:`~attn_core.SwiGLU` experts, the
  weighted sum of the chosen experts' outputs, optional shared experts that every token
  goes through (DeepSeek), and an optional capacity: each expert takes at most
  ``ceil(capacity_factor · N · k / E)`` of the ``N·k`` assignments, the rest are dropped
  (the token keeps only its other experts and the residual) and counted. After each
  forward its :class:`MoEStats` (tokens per expert, dropped assignments, the balancing
  loss) are in ``.stats``, for a training loop to read.
* :func:`load_balancing_loss`: Switch/GShard's auxiliary loss ``E · Σ_e f_e · P_e``
  (1 when the load is uniform); :meth:`MixtureOfExperts.update_selection_bias`: DeepSeek-V3's
  bias update by the sign of each expert's load error.
* Model-level helpers: :func:`moe_layers`, :func:`moe_aux_loss`,
  :func:`update_selection_biases`, :func:`moe_lm_loss` (a ``loss_fn`` for
  :func:`~attn_core.train`), :func:`load_imbalance`.

Shape legend:
    ...      leading dimensions of the input, typically ``(B, T)``
    N        tokens, the leading dimensions flattened
    d        ``d_model``; ``f`` an expert's hidden width
    E        routed experts; ``k`` experts per token
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

import torch
import torch.nn.functional as F
from torch import nn

from .checks import (
    check_bool,
    check_choice,
    check_index_range,
    check_instance,
    check_int,
    check_number,
    check_tensor,
)
from .mlp import ClampedSwiGLU, SwiGLU, swiglu_hidden_dim

__all__ = [
    "ROUTER_SCORINGS",
    "RouterOutput",
    "TopKRouter",
    "MoEStats",
    "MixtureOfExperts",
    "load_balancing_loss",
    "expert_capacity",
    "capacity_keep",
    "load_imbalance",
    "moe_layers",
    "moe_aux_loss",
    "update_selection_biases",
    "moe_lm_loss",
]

#: How the router turns logits into scores: ``"softmax"`` over the experts (Switch, Mixtral,
#: Qwen3-MoE, gpt-oss) or an independent ``"sigmoid"`` per expert (DeepSeek-V3).
ROUTER_SCORINGS = ("softmax", "sigmoid")


@dataclass
class RouterOutput:
    """What :class:`TopKRouter` returns for ``N`` tokens.

    Attributes:
        logits: The router's raw scores, ``(N, E)``.
        probs: A distribution over all ``E`` experts per token (the softmax of the logits,
            or the sigmoid scores divided by their sum), ``(N, E)``: what the balancing loss
            pushes towards uniform.
        experts: The chosen experts, ``(N, k)`` (int64).
        weights: The weight of each chosen expert's output, ``(N, k)``.
    """

    logits: torch.Tensor
    probs: torch.Tensor
    experts: torch.Tensor
    weights: torch.Tensor


class TopKRouter(nn.Module):
    """Score the experts for each token, keep the top ``k``, and weight the kept ones.

    Two orders of the same two steps:

    * ``topk_first=False`` (Switch, Qwen3-MoE, DeepSeek-V3): scores for all ``E`` experts
      (softmax or sigmoid), the ``k`` highest kept with their scores as weights; with
      ``normalize=True`` (Qwen3-MoE's ``norm_topk_prob``, DeepSeek-V3) the kept weights are
      divided by their sum. Unnormalised softmax weights sum to less than 1.
    * ``topk_first=True`` (Mixtral, gpt-oss): the ``k`` highest *logits*, then a softmax
      over those ``k`` only: the weights always sum to 1. For softmax scoring this equals
      the first order with ``normalize=True`` (``e^{z_i}/Σ_{top k} e^{z_j}`` either way).

    DeepSeek-V3's extras: ``n_groups``/``topk_groups`` restrict the choice to the
    ``topk_groups`` groups of experts whose best two scores sum highest (its experts are
    spread over 8 groups of devices; a token reaches at most 4); ``scale`` multiplies the
    weights (``routed_scaling_factor``, 2.5). The buffer ``selection_bias`` ``(E,)`` is
    added to the scores *for the choice only* (auxiliary-loss-free balancing; zeros unless
    updated, see :meth:`MixtureOfExperts.update_selection_bias`).

    The logits are computed in at least float32 (a half-precision router can flip close
    choices), as DeepSeek-V3 and Mixtral do.

    Args:
        d_model: Width of the tokens.
        n_experts: ``E``.
        k: Experts per token, ``1 <= k <= E``.
        scoring: ``"softmax"`` or ``"sigmoid"``.
        topk_first: Keep the top-k logits, then softmax over them (softmax scoring only).
        normalize: Divide the kept weights by their sum (``topk_first=False`` only; the
            other order is normalised by construction).
        scale: Multiplies the weights.
        n_groups: Groups of experts (``E`` divisible by it; each group at least 2 experts when > 1).
        topk_groups: Groups a token may choose from, ``1 <= topk_groups <= n_groups``.
        bias: A bias in the router's linear layer (gpt-oss).

    Attributes:
        proj: ``nn.Linear(d_model, E)``: the router logits.
        selection_bias: Buffer ``(E,)`` added to the scores when choosing.

    Raises:
        ValueError: ``k <= 0`` or ``k > n_experts``, ``E`` not divisible by ``n_groups``,
            ``topk_groups`` outside ``1..n_groups``, fewer than ``k`` experts in the allowed
            groups, ``topk_first`` with sigmoid scoring or with ``normalize``.

    Shapes:
        x: ``(N, d_model)``; output: :class:`RouterOutput` with ``(N, E)`` and ``(N, k)`` tensors
    """

    def __init__(
        self,
        d_model: int,
        n_experts: int,
        k: int,
        *,
        scoring: str = "softmax",
        topk_first: bool = False,
        normalize: bool = False,
        scale: float = 1.0,
        n_groups: int = 1,
        topk_groups: int = 1,
        bias: bool = False,
    ) -> None:
        super().__init__()
        check_int("d_model", d_model)
        check_int("n_experts", n_experts)
        if isinstance(k, bool) or not isinstance(k, int):
            raise TypeError(f"k must be an int, got {type(k).__name__} ({k!r})")
        if not 1 <= k <= n_experts:
            raise ValueError(f"k must be in 1..n_experts={n_experts} (experts per token), got k={k}")
        self.scoring = check_choice("scoring", scoring, ROUTER_SCORINGS)
        self.topk_first = check_bool("topk_first", topk_first)
        self.normalize = check_bool("normalize", normalize)
        self.scale = check_number("scale", scale, low=0.0, low_open=True)
        check_int("n_groups", n_groups)
        check_int("topk_groups", topk_groups)
        check_bool("bias", bias)
        if topk_first and scoring != "softmax":
            raise ValueError(f"topk_first=True takes a softmax over the kept logits; got scoring={scoring!r}")
        if topk_first and normalize:
            raise ValueError("topk_first=True already sums the kept weights to 1; leave normalize=False")
        if n_experts % n_groups != 0:
            raise ValueError(f"n_experts={n_experts} is not divisible by n_groups={n_groups}")
        if topk_groups > n_groups:
            raise ValueError(f"topk_groups={topk_groups} must be <= n_groups={n_groups}")
        if n_groups > 1 and n_experts // n_groups < 2:
            raise ValueError(
                f"a group is scored by its best two experts: n_experts={n_experts} / n_groups={n_groups} must be >= 2"
            )
        if k > topk_groups * (n_experts // n_groups):
            raise ValueError(
                f"k={k} exceeds the experts in the topk_groups={topk_groups} allowed groups "
                f"({topk_groups} x {n_experts // n_groups})"
            )
        self.d_model, self.n_experts, self.k = d_model, n_experts, k
        self.n_groups, self.topk_groups = n_groups, topk_groups
        self.proj = nn.Linear(d_model, n_experts, bias=bias)
        self.register_buffer("selection_bias", torch.zeros(n_experts))

    def forward(self, x: torch.Tensor) -> RouterOutput:
        """Route ``N`` tokens.

        Shapes:
            x: ``(N, d_model)``; logits, probs: ``(N, E)``; experts, weights: ``(N, k)``
        """
        check_tensor("x", x, ("N", ("d_model", self.d_model)), like=self.proj.weight)
        dtype = torch.promote_types(x.dtype, torch.float32)  # fp32 at least: close choices stay stable
        logits = F.linear(
            x.to(dtype), self.proj.weight.to(dtype), None if self.proj.bias is None else self.proj.bias.to(dtype)
        )  # (N, E)
        bias = self.selection_bias.to(dtype)
        if self.topk_first:  # Mixtral, gpt-oss: the k largest logits, then a softmax over them
            experts = torch.topk(logits + bias, self.k, dim=-1).indices  # (N, k)
            weights = torch.softmax(logits.gather(-1, experts), dim=-1)  # (N, k), sums to 1
            probs = torch.softmax(logits, dim=-1)
        else:
            scores = torch.softmax(logits, dim=-1) if self.scoring == "softmax" else torch.sigmoid(logits)  # (N, E)
            choice = self._group_limited(scores + bias)  # the bias moves the choice, not the weights
            experts = torch.topk(choice, self.k, dim=-1).indices  # (N, k)
            weights = scores.gather(-1, experts)  # (N, k)
            if self.normalize:
                weights = weights / (weights.sum(-1, keepdim=True) + 1e-20)  # DeepSeek's guard against 0/0
            probs = scores if self.scoring == "softmax" else scores / scores.sum(-1, keepdim=True)
        return RouterOutput(logits=logits, probs=probs, experts=experts, weights=weights * self.scale)

    def _group_limited(self, choice: torch.Tensor) -> torch.Tensor:
        """DeepSeek-V3: ``-inf`` for every expert outside the ``topk_groups`` best groups (``(N, E)`` -> ``(N, E)``)."""
        if self.n_groups == 1:
            return choice
        N, G = choice.shape[0], self.n_groups
        grouped = choice.view(N, G, self.n_experts // G)  # (N, G, E/G)
        group_scores = grouped.topk(2, dim=-1).values.sum(-1)  # (N, G): each group's best two
        keep = torch.zeros_like(group_scores, dtype=torch.bool)
        keep.scatter_(1, torch.topk(group_scores, self.topk_groups, dim=-1).indices, True)
        keep = keep[:, :, None].expand_as(grouped).reshape(N, self.n_experts)  # (N, E)
        return choice.masked_fill(~keep, float("-inf"))

    def extra_repr(self) -> str:
        extra = ", topk_first=True" if self.topk_first else (", normalize=True" if self.normalize else "")
        if self.n_groups > 1:
            extra += f", n_groups={self.n_groups}, topk_groups={self.topk_groups}"
        if self.scale != 1.0:
            extra += f", scale={self.scale}"
        return f"d_model={self.d_model}, n_experts={self.n_experts}, k={self.k}, scoring={self.scoring!r}{extra}"


def load_balancing_loss(probs: torch.Tensor, experts: torch.Tensor, n_experts: int) -> torch.Tensor:
    """Switch Transformer's auxiliary loss (Fedus et al. 2021, eq. 4; GShard's with top-k): ``E · Σ_e f_e · P_e``.

    ``f_e``: the fraction of the ``N·k`` assignments that went to expert ``e`` (counted, no
    gradient); ``P_e``: the mean router probability of ``e`` over the tokens (differentiable).
    Both sum to 1 over the experts, so the loss is 1 when both are uniform and up to
    ``E`` when every token goes to one expert with probability 1; its gradient lowers the
    probability of the experts that got the most tokens. Hugging Face's
    ``load_balancing_loss_func`` is ``k`` times this (its ``f`` sums to ``k``).

    Args:
        probs: The router's distribution over all experts.
        experts: The chosen experts.
        n_experts: ``E``.

    Shapes:
        probs: ``(N, E)``; experts: ``(N, k)``; output: a scalar
    """
    check_int("n_experts", n_experts)
    check_tensor("probs", probs, ("N", ("E", n_experts)), floating=True)
    check_tensor("experts", experts, (("N", probs.shape[0]), "k"), integer=True)
    # bincount would fail on a negative id and grow past E on a large one: name the id instead.
    check_index_range("experts", experts, n_experts, what="expert id", high_name="n_experts")
    counts = torch.bincount(experts.reshape(-1), minlength=n_experts).to(probs.dtype)  # (E,)
    f = counts / experts.numel()
    return n_experts * (f * probs.mean(0)).sum()


def expert_capacity(capacity_factor: float, n_tokens: int, k: int, n_experts: int) -> int:
    """Assignments one expert may take: ``ceil(capacity_factor · N · k / E)`` (Switch, GShard).

    ``capacity_factor=1`` is exactly the uniform share; Switch trains with 1.25.
    """
    check_number("capacity_factor", capacity_factor, low=0.0, low_open=True)
    for name, v in (("n_tokens", n_tokens), ("k", k), ("n_experts", n_experts)):
        check_int(name, v)
    return math.ceil(capacity_factor * n_tokens * k / n_experts)


def capacity_keep(experts: torch.Tensor, n_experts: int, capacity: int) -> torch.Tensor:
    """Which assignments fit: each expert keeps its first ``capacity``, first choices before second ones (GShard).

    Every token's first choice is served before any second choice, and within one choice
    earlier tokens first; an expert's assignments past ``capacity`` are dropped.

    Args:
        experts: The chosen experts of each token.
        n_experts: ``E``.
        capacity: Assignments one expert computes (:func:`expert_capacity`), >= 0.

    Raises:
        ValueError: ``experts`` not ``(N, k)`` integers in ``[0, E)``, or ``capacity < 0``.

    Shapes:
        experts: ``(N, k)``; output: ``(N, k)`` bool
    """
    check_int("n_experts", n_experts)
    check_int("capacity", capacity, minimum=0)
    check_tensor("experts", experts, ("N", "k"), integer=True)
    if experts.numel() and (int(experts.min()) < 0 or int(experts.max()) >= n_experts):
        raise ValueError(f"experts must be in [0, n_experts={n_experts}), got {experts.min()}..{experts.max()}")
    N, k = experts.shape
    one_hot = F.one_hot(experts.t().reshape(-1), n_experts)  # (k·N, E): slot-major, so all first choices come first
    position = (one_hot.cumsum(0) * one_hot).sum(-1) - 1  # (k·N,): place of each assignment in its expert's queue
    return (position < capacity).view(k, N).t()  # (N, k)


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
        d_ff: Each expert's hidden width; default :func:`~attn_core.mlp.swiglu_hidden_dim`.
        n_shared: Shared experts (DeepSeek: 1); they are one SwiGLU of width ``n_shared · d_ff``
            (what Hugging Face's DeepSeek-V3 builds; the same function as ``n_shared`` separate ones summed).
        capacity_factor: ``None`` (no capacity, nothing dropped) or a number > 0.
        bias: Biases in the experts' linear layers (gpt-oss).
        router_bias: A bias in the router (gpt-oss).
        scoring, topk_first, normalize, scale, n_groups, topk_groups: :class:`TopKRouter`'s.
        swiglu_limit: gpt-oss: the experts are :class:`~attn_core.mlp.ClampedSwiGLU` s with this
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


def moe_lm_loss(aux_weight: float = 0.0, bias_rate: float = 0.0) -> Callable[[nn.Module, tuple], torch.Tensor]:
    """A ``loss_fn`` for :func:`~attn_core.train`: the LM loss, ``+ aux_weight ·`` the balancing loss.

    With ``bias_rate > 0`` it also updates every layer's selection bias after each forward
    (auxiliary-loss-free balancing: the bias is a buffer, outside the gradient, so updating
    it before ``backward`` changes nothing in this step's gradient).

    Args:
        aux_weight: The weight ``α`` of :func:`moe_aux_loss` (Switch: 0.01; 0: none).
        bias_rate: DeepSeek-V3's ``γ`` (0: no bias update).
    """
    check_number("aux_weight", aux_weight, low=0.0)
    check_number("bias_rate", bias_rate, low=0.0)
    from .training import lm_loss  # here: train imports tasks, which need not load for the module

    def loss_fn(model: nn.Module, batch) -> torch.Tensor:
        loss = lm_loss(model, batch)
        if aux_weight:
            loss = loss + aux_weight * moe_aux_loss(model)
        if bias_rate:
            update_selection_biases(model, bias_rate)
        return loss

    return loss_fn
