"""The router of a mixture of experts: scores, the top-k choice, capacity and the balancing loss.

A mixture-of-experts layer (:class:`~attn_core.modules.moe.MixtureOfExperts`) sends each token to
``k`` of its ``E`` experts; this module decides which, and with what weights.

* :class:`TopKRouter`: scores (``"softmax"``: Switch, Mixtral, Qwen3-MoE; ``"sigmoid"``:
  DeepSeek-V3), the top-k choice, and the weights of the kept experts, in either order:
  score all experts then keep the top k (Qwen3-MoE, DeepSeek; optionally renormalising the
  kept weights to sum to 1) or keep the top-k *logits* then softmax over them (Mixtral,
  gpt-oss). Softmax-then-top-k renormalised *equals* top-k-then-softmax (a test holds it);
  without renormalisation the kept weights sum to less than 1. DeepSeek-V3's
  group-limited choice (``n_groups``, ``topk_groups``) and its scale on the weights
  (``routed_scaling_factor``) are options. A per-expert ``selection_bias`` buffer
  (DeepSeek-V3's auxiliary-loss-free balancing) shifts which experts are *chosen*, never
  the weights they get. It returns a :class:`RouterOutput`.
* :func:`load_balancing_loss`: Switch/GShard's auxiliary loss ``E · Σ_e f_e · P_e``
  (1 when the load is uniform).
* :func:`expert_capacity` and :func:`capacity_keep`: each expert takes at most
  ``ceil(capacity_factor · N · k / E)`` of the ``N·k`` assignments; which ones are kept.

Shape legend:
    N        tokens, the leading dimensions of the input flattened
    d        ``d_model``
    E        routed experts; ``k`` experts per token
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from ..checks import check_bool, check_choice, check_index_range, check_int, check_number, check_tensor

__all__ = [
    "check_router_rules",
    "ROUTER_SCORINGS",
    "RouterOutput",
    "TopKRouter",
    "load_balancing_loss",
    "expert_capacity",
    "capacity_keep",
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


def check_router_rules(
    n_experts: int,
    k: int,
    scoring: str,
    topk_first: bool,
    normalize: bool,
    n_groups: int,
    topk_groups: int,
    *,
    names: dict[str, str] | None = None,
) -> None:
    """The rules that tie a router's options together, in one place for every caller.

    :class:`TopKRouter` checks its own arguments with them, and the config's ``MoE`` part
    its fields, before any router is built; ``names`` maps ``k``, ``scoring``,
    ``topk_first``, ``normalize``, ``n_groups`` and ``topk_groups`` to the caller's names so
    that a message names what the reader wrote.

    Raises:
        ValueError: ``topk_first`` with a non-softmax scoring or with ``normalize``;
            ``n_experts`` not divisible by ``n_groups``; more kept groups than groups;
            fewer than two experts per group; more experts asked than the kept groups hold.
    """
    n = {key: key for key in ("k", "scoring", "topk_first", "normalize", "n_groups", "topk_groups")}
    n.update(names or {})
    if topk_first and scoring != "softmax":
        raise ValueError(f"{n['topk_first']}=True takes a softmax over the kept logits; got {n['scoring']}={scoring!r}")
    if topk_first and normalize:
        raise ValueError(f"{n['topk_first']}=True already sums the kept weights to 1; leave {n['normalize']}=False")
    if n_experts % n_groups != 0:
        raise ValueError(f"n_experts={n_experts} is not divisible by {n['n_groups']}={n_groups}")
    if topk_groups > n_groups:
        raise ValueError(f"{n['topk_groups']}={topk_groups} must be <= {n['n_groups']}={n_groups}")
    if n_groups > 1 and n_experts // n_groups < 2:
        raise ValueError(
            f"a group is scored by its best two experts: n_experts={n_experts} / {n['n_groups']}={n_groups} "
            "must be >= 2"
        )
    if k > topk_groups * (n_experts // n_groups):
        raise ValueError(
            f"{n['k']}={k} exceeds the experts in the {n['topk_groups']}={topk_groups} allowed groups "
            f"({topk_groups} x {n_experts // n_groups})"
        )


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
        check_router_rules(n_experts, k, scoring, topk_first, normalize, n_groups, topk_groups)
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
