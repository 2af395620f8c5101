"""GRPO's maths as TRL 1.16 computes it, as pure functions: group advantages from the reward
functions' scores, and the clipped policy-gradient loss of one micro batch.

The loss is returned as a *sum over loss units* with the units' count, the form the shared
loop takes (it divides every micro batch's sum by the step's global units / dp ranks), chosen
per ``loss_type`` so that the quotient is TRL's loss (TRL 1.16 grpo_trainer ``_compute_loss``,
with steps_per_generation == gradient_accumulation_steps):

- dapo: units = completion tokens of the step (TRL's num_items_in_batch / processes);
- grpo: units = completions, each contributing its own token mean;
- dr_grpo: units = completions, each its token sum / max_completion_length;
- bnpo: one unit per micro batch, contributing the micro batch's token mean.

(When steps_per_generation differs from gradient_accumulation_steps TRL's dapo divides by the
generation's tokens per optimizer step on average; ftui by the step's own tokens.) Figures (kl,
entropy, clip ratios) are token means times the units (``figure_sums``), so that the loop's
division gives TRL's logged token mean.
"""

from __future__ import annotations

import torch

STD_EPS = 1e-4  # TRL: advantages / (std + 1e-4)


def group_advantages(rewards_per_func: torch.Tensor, weights: torch.Tensor, group: int, scale_rewards: str
                     ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """rewards_per_func: (N, F) global, NaN where a function returned None; N = prompts x group,
    each prompt's completions consecutive. Returns (advantages (N,), rewards (N,), zero_std (N,)
    bool: the std that scales them, the group's or the batch's, is 0). A row whose every function returned None gets advantage 0 and is left out of its
    group's mean and std (TRL 1.16's nanmean / nanstd)."""
    if scale_rewards not in ("group", "batch", "none"):
        raise ValueError(f"scale_rewards {scale_rewards!r}")
    per_func = rewards_per_func.double()
    valid = ~torch.isnan(per_func).all(dim=1)  # some function scored it
    rewards = torch.nansum(per_func * weights.double().to(per_func.device), dim=1)
    by_group = torch.where(valid, rewards, torch.nan).view(-1, group)
    mean = _nanmean(by_group).repeat_interleave(group)
    group_std = _nanstd(by_group).repeat_interleave(group)
    std = _nanstd(torch.where(valid, rewards, torch.nan).view(1, -1)).expand(rewards.numel()) \
        if scale_rewards == "batch" else group_std
    advantages = rewards - mean
    if scale_rewards != "none":
        advantages = advantages / (std + STD_EPS)
    advantages = torch.where(valid, torch.nan_to_num(advantages, nan=0.0), torch.zeros_like(advantages))
    zero_std = torch.isclose(std, torch.zeros_like(std))  # TRL's is_std_zero: the std the advantages use
    return advantages.float(), rewards.float(), zero_std


def _nanmean(x: torch.Tensor) -> torch.Tensor:
    """Per row, the mean of its non-NaN values (NaN when none)."""
    return torch.nanmean(x, dim=1)


def _nanstd(x: torch.Tensor) -> torch.Tensor:
    """Per row, the unbiased standard deviation of its non-NaN values (as torch.std: NaN for
    fewer than two)."""
    n = (~torch.isnan(x)).sum(dim=1)
    mean = torch.nanmean(x, dim=1, keepdim=True)
    squares = torch.nansum((x - mean) ** 2, dim=1)
    return torch.where(n > 1, (squares / (n - 1).clamp(min=1)).sqrt(), torch.full_like(squares, torch.nan))


def unit_sums(per_token: torch.Tensor, mask: torch.Tensor, *, loss_type: str, max_completion_length: int
              ) -> tuple[torch.Tensor, torch.Tensor]:
    """(the sum over loss units, the units' count) of a per-token quantity under ``loss_type``
    (the loss, or a figure reported in the loss's units)."""
    masked = per_token * mask
    rows = per_token.size(0)
    if loss_type == "dapo":
        return masked.sum(), mask.sum()
    if loss_type == "grpo":
        return (masked.sum(-1) / mask.sum(-1).clamp(min=1.0)).sum(), torch.tensor(float(rows))
    if loss_type == "dr_grpo":
        return masked.sum() / max_completion_length, torch.tensor(float(rows))
    if loss_type == "bnpo":
        return masked.sum() / mask.sum().clamp(min=1.0), torch.tensor(1.0)
    raise ValueError(f"loss_type {loss_type!r}")


def figure_sums(per_token: torch.Tensor, mask: torch.Tensor, *, loss_type: str, max_completion_length: int) -> torch.Tensor:
    """A per-token figure (kl, entropy, clip ratios) as a sum the loop's division by the loss
    units turns back into a mean: TRL logs each as the micro batch's masked token mean,
    whatever the loss type, so it is that mean times the micro batch's units (over several
    micro batches, their means weighted by units; dapo's: the step's token mean exactly)."""
    units = unit_sums(per_token, mask, loss_type=loss_type, max_completion_length=max_completion_length)[1]
    return (per_token * mask).sum() / mask.sum().clamp(min=1.0) * units.to(per_token.device)


def grpo_loss(logps: torch.Tensor, old_logps: torch.Tensor | None, ref_logps: torch.Tensor | None,
              advantages: torch.Tensor, mask: torch.Tensor, *, loss_type: str, beta: float, epsilon: float,
              epsilon_high: float, max_completion_length: int, delta: float | None = None,
              bias_correction_kl: bool = False) -> tuple[torch.Tensor, torch.Tensor, dict[str, torch.Tensor]]:
    """One micro batch: (total, units, figures). logps/old/ref: (B, T) per completion token
    (old None: logps.detach(); ref None: no KL term); mask (B, T) float 0/1. Token loss
    ``-min(r A, clip(r, 1-eps, 1+eps_high) A) + beta k3`` with r = exp(logp - old);
    ``delta`` caps r above (two-sided clipping); ``bias_correction_kl`` multiplies k3 by r (before
    the delta cap: TRL 1.16's default use_bias_correction_kl, the unbiased reverse-KL gradient,
    which differs from the plain k3 gradient even on-policy, where r is 1 but not its gradient).
    figures: "kl" (beta != 0; the corrected term, as TRL logs it), "clip_ratio"
    (the region's), "clip_ratio_low", "clip_ratio_high", sums in the loss's units."""
    mask = mask.to(logps.dtype)
    old = logps.detach() if old_logps is None else old_logps
    ratio = torch.exp(logps - old)
    clipped = torch.clamp(ratio, 1 - epsilon, 1 + epsilon_high)
    if delta is not None:
        ratio = torch.clamp(ratio, max=delta)
    adv = advantages.to(logps.dtype)[:, None]
    per_token = -torch.min(ratio * adv, clipped * adv)
    figures: dict[str, torch.Tensor] = {}
    if beta != 0.0 and ref_logps is not None:
        diff = ref_logps - logps
        kl = torch.exp(diff) - diff - 1
        if bias_correction_kl:
            kl = kl * torch.exp(logps - old)  # the ratio before the delta cap, as TRL
        per_token = per_token + beta * kl
        figures["kl"] = figure_sums(kl.detach(), mask, loss_type=loss_type, max_completion_length=max_completion_length)
    total, units = unit_sums(per_token, mask, loss_type=loss_type, max_completion_length=max_completion_length)
    r = ratio.detach()
    low = ((r < 1 - epsilon) & (adv < 0)).to(logps.dtype)
    high = ((r > 1 + epsilon_high) & (adv > 0)).to(logps.dtype)
    for name, value in (("clip_ratio_low", low), ("clip_ratio_high", high), ("clip_ratio", low + high)):
        figures[name] = figure_sums(value, mask, loss_type=loss_type, max_completion_length=max_completion_length)
    return total, units.to(logps.device), figures
