"""GRPO's maths as TRL 1.16 does it: rewards -> group advantages, and the clipped surrogate loss of one
micro batch, returned as a sum over loss units so that ftui's loop (total / (global units / dp ranks))
reproduces TRL's loss for each loss_type. Pure functions of tensors: no model, no distribution."""

from __future__ import annotations

import torch

LOSS_TYPES = ("grpo", "bnpo", "dr_grpo", "dapo")


def _nanstd(x: torch.Tensor, dim: int | None = None) -> torch.Tensor:
    """Unbiased std over the non-NaN values (NaN where fewer than two), as TRL's nanstd."""
    if dim is None:
        x, dim = x.reshape(-1), 0
    mean = torch.nanmean(x, dim=dim, keepdim=True)
    count = (~torch.isnan(x)).sum(dim=dim, keepdim=True)
    variance = torch.nanmean((x - mean) ** 2, dim=dim, keepdim=True) * count / (count - 1)
    variance = torch.where(count > 1, variance, torch.full_like(variance, float("nan")))
    return variance.sqrt().squeeze(dim)


def group_advantages(rewards_per_func: torch.Tensor, weights: torch.Tensor, group: int, scale_rewards: str
                     ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """rewards_per_func (N, F), NaN where a function returned None; each prompt's `group` completions
    consecutive. Returns (advantages, rewards = nansum(rewards_per_func * weights, 1), zero_std). A row
    whose every function returned None is left out of its group's mean and std and gets advantage 0."""
    if scale_rewards not in ("group", "batch", "none"):
        raise ValueError(f"scale_rewards must be group, batch or none, not {scale_rewards!r}")
    unscorable = torch.isnan(rewards_per_func).all(dim=1)
    rewards = (rewards_per_func * weights.to(rewards_per_func).unsqueeze(0)).nansum(dim=1)
    scored = rewards.masked_fill(unscorable, float("nan"))
    mean = torch.nanmean(scored.view(-1, group), dim=1).repeat_interleave(group)
    if scale_rewards == "batch":
        std = _nanstd(scored).expand_as(scored)
    else:
        std = _nanstd(scored.view(-1, group), dim=1).repeat_interleave(group)
    advantages = scored - mean
    if scale_rewards != "none":
        advantages = advantages / (std + 1e-4)
    zero_std = torch.isclose(std, torch.zeros_like(std))
    return torch.nan_to_num(advantages, nan=0.0), rewards, zero_std


def grpo_loss(logps: torch.Tensor, old_logps: torch.Tensor | None, ref_logps: torch.Tensor | None,
              advantages: torch.Tensor, mask: torch.Tensor, *, loss_type: str, beta: float, epsilon: float,
              epsilon_high: float, max_completion_length: int, delta: float | None = None
              ) -> tuple[torch.Tensor, torch.Tensor, dict[str, torch.Tensor]]:
    """One micro batch -> (total, units, figures); total / units is TRL's loss for one micro batch.
    figures are token means of the KL and clip ratios (TRL's metrics) times units, so the loop's division
    by units gives TRL's figure back."""
    if loss_type not in LOSS_TYPES:
        raise ValueError(f"loss_type must be one of {', '.join(LOSS_TYPES)}, not {loss_type!r}")
    old = logps.detach() if old_logps is None else old_logps
    ratio = torch.exp(logps - old)
    clipped = torch.clamp(ratio, 1 - epsilon, 1 + epsilon_high)
    if delta is not None:
        ratio = torch.clamp(ratio, max=delta)
    adv = advantages.unsqueeze(1)
    per_token = -torch.min(ratio * adv, clipped * adv)
    kl = None
    if beta != 0.0:
        if ref_logps is None:
            raise ValueError("beta != 0 needs the reference log-probabilities")
        kl = torch.exp(ref_logps - logps) - (ref_logps - logps) - 1
        per_token = per_token + beta * kl
    masked = per_token * mask
    rows, tokens = mask.shape[0], mask.sum()
    if loss_type == "dapo":
        total, units = masked.sum(), tokens
    elif loss_type == "grpo":
        total, units = (masked.sum(-1) / mask.sum(-1).clamp(min=1.0)).sum(), torch.tensor(float(rows))
    elif loss_type == "dr_grpo":
        total, units = masked.sum() / max_completion_length, torch.tensor(float(rows))
    else:
        total, units = masked.sum() / tokens.clamp(min=1.0), torch.tensor(1.0)
    units = units.to(logps)

    def figure(x: torch.Tensor) -> torch.Tensor:
        return ((x * mask).sum() / tokens.clamp(min=1.0) * units).detach()

    low = ((ratio < 1 - epsilon) & (adv < 0)).to(logps)
    high = ((ratio > 1 + epsilon_high) & (adv > 0)).to(logps)
    figures = {"clip_ratio": figure(torch.maximum(low, high)), "clip_ratio_low": figure(low),
               "clip_ratio_high": figure(high)}
    if kl is not None:
        figures["kl"] = figure(kl)
    return total, units, figures
