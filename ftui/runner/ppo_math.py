"""PPO's maths as LLaMA-Factory 0.9.5 runs it: its CustomPPOTrainer calls TRL 0.9.6's
``PPOTrainer.step``, so these are TRL 0.9.6's per-token rewards with a KL penalty, whitening,
GAE, the clipped policy and value losses, the adaptive KL controller and the running score
normalisation (ppo_score_norm). Pure functions of tensors (and two small stateful helpers), so the
stage can be checked number for number against TRL (tests/data/trl096_ppo).

Shapes: (B, T) over response tokens; ``mask`` is float 0/1, each row's ones first (right padding).
Defaults are LLaMA-Factory's (TRL 0.9.6's PPOConfig defaults, which LF does not override).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ftui.i18n import _

GAMMA, LAM = 1.0, 0.95
CLIPRANGE, CLIPRANGE_VALUE, VF_COEF, RATIO_THRESHOLD = 0.2, 0.2, 0.1, 10.0
INIT_KL_COEF, KL_HORIZON = 0.2, 10000


def masked_mean(values: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    return (values * mask).sum() / mask.sum()


def masked_var(values: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Unbiased variance over the masked values (fewer than two tokens: a ValueError, not a NaN)."""
    count = mask.sum()
    if count < 2:
        raise ValueError(_("PPO whitens advantages over the batch's response tokens and this batch has fewer "
                           "than two: raise per_device_train_batch_size or max_new_tokens"))
    return masked_mean((values - masked_mean(values, mask)) ** 2, mask) * count / (count - 1)


def whiten(values: torch.Tensor, mask: torch.Tensor, shift_mean: bool = True) -> torch.Tensor:
    """(x - mean) / sqrt(var + 1e-8) over the masked values; shift_mean False adds the mean back."""
    mean = masked_mean(values, mask)
    whitened = (values - mean) * torch.rsqrt(masked_var(values, mask) + 1e-8)
    return whitened if shift_mean else whitened + mean


def token_rewards(scores: torch.Tensor, logps: torch.Tensor, ref_logps: torch.Tensor, mask: torch.Tensor,
                  kl_coef: float) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Per-token rewards: -kl_coef x (logp - ref_logp) (the k1 estimate) at every position, plus the
    reward model's score at each row's last response token. Returns (rewards, non_score_rewards, kls);
    like TRL, positions past the mask carry the KL term too (GAE masks them)."""
    kls = logps - ref_logps
    non_score = -kl_coef * kls
    last = (mask.cumsum(1) == mask.sum(1, keepdim=True)) & (mask > 0)  # each row's last masked position
    rewards = non_score + last.to(non_score) * scores.to(non_score).unsqueeze(1)
    return rewards, non_score, kls


def sequence_kl(kls: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """The batch's KL as TRL logs it (objective/kl) and the controller reads it: mean over rows of each
    row's summed KL."""
    return (kls * mask).sum(-1).mean()


def gae(values: torch.Tensor, rewards: torch.Tensor, mask: torch.Tensor, *, gamma: float = GAMMA,
        lam: float = LAM, whiten_rewards: bool = False) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Generalised advantage estimation over the masked values and rewards. Returns (values x mask,
    whitened advantages (detached), returns = advantages before whitening + values)."""
    values, rewards = values * mask, rewards * mask
    if whiten_rewards:
        rewards = whiten(rewards, mask, shift_mean=False)
    steps = rewards.shape[-1]
    running = torch.zeros_like(rewards[:, 0])
    reversed_advantages = []
    for t in reversed(range(steps)):
        next_values = values[:, t + 1] if t < steps - 1 else torch.zeros_like(values[:, t])
        delta = rewards[:, t] + gamma * next_values - values[:, t]
        running = delta + gamma * lam * running
        reversed_advantages.append(running)
    advantages = torch.stack(reversed_advantages[::-1], dim=1)
    returns = advantages + values
    return values, whiten(advantages, mask).detach(), returns


def ppo_losses(old_logps: torch.Tensor, values: torch.Tensor, vpreds: torch.Tensor, logps: torch.Tensor,
               mask: torch.Tensor, advantages: torch.Tensor, returns: torch.Tensor, *,
               cliprange: float = CLIPRANGE, cliprange_value: float = CLIPRANGE_VALUE, vf_coef: float = VF_COEF,
               ratio_threshold: float = RATIO_THRESHOLD) -> tuple[torch.Tensor, torch.Tensor, dict[str, float]]:
    """(policy loss, vf_coef x value loss, figures). Policy: masked mean of max(-A r, -A clip(r, 1 +- cliprange));
    value: 0.5 x masked mean of max((v - R)^2, (clip(v, v_old +- cliprange_value) - R)^2). A minibatch whose
    mean ratio exceeds ratio_threshold is skipped: both losses times 0 (figures' "skipped" is 1)."""
    vclipped = torch.max(torch.min(vpreds, values + cliprange_value), values - cliprange_value)
    vf_losses1, vf_losses2 = (vpreds - returns) ** 2, (vclipped - returns) ** 2
    vf_loss = 0.5 * masked_mean(torch.max(vf_losses1, vf_losses2), mask)
    ratio = torch.exp(logps - old_logps)
    pg_losses1 = -advantages * ratio
    pg_losses2 = -advantages * torch.clamp(ratio, 1.0 - cliprange, 1.0 + cliprange)
    pg_loss = masked_mean(torch.max(pg_losses1, pg_losses2), mask)
    mean_ratio = masked_mean(ratio, mask).item()
    skipped = mean_ratio > ratio_threshold
    if skipped:
        pg_loss, vf_loss = pg_loss * 0.0, vf_loss * 0.0
    figures = {
        "clipfrac": masked_mean((pg_losses2 > pg_losses1).to(ratio), mask).item(),
        "vf_clipfrac": masked_mean((vf_losses2 > vf_losses1).to(ratio), mask).item(),
        "approxkl": (0.5 * masked_mean((logps - old_logps) ** 2, mask)).item(),
        "policykl": masked_mean(old_logps - logps, mask).item(),
        "ratio": mean_ratio,
        "skipped": float(skipped),
    }
    return pg_loss, vf_coef * vf_loss, figures


@dataclass
class AdaptiveKLController:
    """The KL coefficient (Ziegler et al. 2019): moved toward the target KL by at most 20 % x n / horizon."""

    value: float = INIT_KL_COEF
    target: float = 6.0
    horizon: float = KL_HORIZON

    def update(self, current: float, n_steps: int) -> None:
        """current: the batch's sequence KL (sequence_kl); n_steps: the rollouts in it, over all ranks."""
        error = min(max(current / self.target - 1.0, -0.2), 0.2)
        self.value *= 1.0 + error * n_steps / self.horizon


@dataclass
class RunningMoments:
    """Running mean and std of the reward scores over the run (ppo_score_norm), merged batch by batch
    (Chan et al.'s parallel variance), in float32 as TRL keeps them."""

    mean: float | torch.Tensor = 0.0
    var: float | torch.Tensor = 1.0
    std: float | torch.Tensor = 1.0
    count: float = 1e-24

    @torch.no_grad()
    def update(self, scores: torch.Tensor) -> tuple[float, float]:
        """scores: every rank's scores of this batch (gathered). Returns the batch's (mean, unbiased std)."""
        n = scores.numel()
        var, mean = torch.var_mean(scores, unbiased=False)
        mean, var = mean.float(), var.float()
        delta = mean - self.mean
        total = self.count + n
        old_sum = self.var * self.count + delta**2 * self.count * n / total
        self.mean = self.mean + delta * n / total
        self.var = (old_sum + var * n) / total
        self.std = (self.var * total / (total - 1)).float().sqrt()
        self.count = total
        return mean.item(), (var * n / (n - 1)).float().sqrt().item()

    def normalise(self, scores: torch.Tensor) -> torch.Tensor:
        """Update with this batch, then (score - running mean) / (running std + eps), eps of the scores' dtype."""
        self.update(scores)
        mean = torch.as_tensor(self.mean).to(scores)
        std = torch.as_tensor(self.std).to(scores)
        return (scores - mean) / (std + torch.finfo(scores.dtype).eps)
