"""Direct preference optimisation (``stage: dpo``) and its variants, as LLaMA-Factory 0.9.5
computes them (its CustomDPOTrainer over TRL's ``dpo_loss``; checked to 1e-5 against what it
computed on the same logits, tests/data/llamafactory_preference).

``pref_loss``: ``sigmoid`` (DPO, with ``dpo_label_smoothing``), ``hinge``, ``ipo`` against the
reference model; ``orpo`` and ``simpo`` without one. ipo, orpo and simpo use per-token
average log-probabilities, the others sums. ``pref_ftx`` adds an SFT term on the chosen
answer (its average negative log-probability). A micro batch's loss is the *sum* over its
pairs; the loop divides by the step's pairs. Figures (sums over pairs, reported as means):
the implicit rewards of the chosen and rejected answers (beta x the policy's log-ratio to
the reference; beta x the policy's log-probability for orpo and simpo), their margin, the
share of pairs where the chosen one wins, and the policy's log-probabilities.
"""

from __future__ import annotations

from typing import Any, Callable

import torch
import torch.nn.functional as F
from torch import nn

from ftui.runner.stages.base import MicroLoss
from ftui.runner.stages.preference import PreferenceStage, Reference, forward_logps
from ftui.stages.dpo import REFERENCE_FREE

AVERAGED = ("ipo", "orpo", "simpo")  # losses on per-token average log-probabilities


def preference_losses(cfg: Any, chosen: torch.Tensor, rejected: torch.Tensor, ref_chosen: torch.Tensor | None,
                      ref_rejected: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Per pair: (loss, chosen reward, rejected reward) from the policy's and the reference's
    log-probabilities (averages for ipo / orpo / simpo)."""
    beta, kind = cfg.pref_beta, cfg.pref_loss
    if kind == "orpo":
        log_odds = (chosen - rejected) - (torch.log1p(-torch.exp(chosen)) - torch.log1p(-torch.exp(rejected)))
        losses = -chosen - beta * F.logsigmoid(log_odds)
    elif kind == "simpo":
        losses = -F.logsigmoid(beta * ((chosen - rejected) - cfg.simpo_gamma / beta))
    else:
        logits = (chosen - rejected) - (ref_chosen - ref_rejected)
        if kind == "sigmoid":
            smooth = cfg.dpo_label_smoothing
            losses = -F.logsigmoid(beta * logits) * (1 - smooth) - F.logsigmoid(-beta * logits) * smooth
        elif kind == "hinge":
            losses = torch.relu(1 - beta * logits)
        elif kind == "ipo":
            losses = (logits - 1 / (2 * beta)) ** 2
        else:
            raise ValueError(f"unknown pref_loss {kind!r}")
    if kind in REFERENCE_FREE:
        return losses, beta * chosen.detach(), beta * rejected.detach()
    return losses, beta * (chosen - ref_chosen).detach(), beta * (rejected - ref_rejected).detach()


def pair_figures(chosen_rewards: torch.Tensor, rejected_rewards: torch.Tensor, chosen_logps: torch.Tensor,
                 rejected_logps: torch.Tensor) -> dict[str, torch.Tensor]:
    """The reward figures, summed over pairs (the loop reports them per pair)."""
    return {
        "rewards_chosen": chosen_rewards.sum(), "rewards_rejected": rejected_rewards.sum(),
        "rewards_margin": (chosen_rewards - rejected_rewards).sum(),
        "rewards_accuracy": (chosen_rewards > rejected_rewards).float().sum(),
        "logps_chosen": chosen_logps.detach().sum(), "logps_rejected": rejected_logps.detach().sum(),
    }


class DPOStage(PreferenceStage):
    name = "dpo"

    def __init__(self, cfg: Any, tokenizer: Any):
        super().__init__(cfg, tokenizer)
        self.reference = Reference(cfg) if self.description.needs_reference(cfg) else None

    def keep_start(self, model: nn.Module) -> None:
        if self.reference is not None:
            self.reference.keep(model)

    def attach(self, engine: Any) -> None:
        if self.reference is not None:
            self.reference.attach(engine)

    def pair_logps(self, sums: torch.Tensor, lengths: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """From the rows' summed log-probabilities and lengths: the chosen and rejected ones
        (averaged for ipo / orpo / simpo), and the chosen ones' average."""
        pairs = sums.size(0) // 2
        average = sums / lengths.clamp(min=1)
        logps = average if self.cfg.pref_loss in AVERAGED else sums
        return logps[:pairs], logps[pairs:], average[:pairs]

    def loss(self, model: nn.Module, batch: Any, autocast: Callable) -> MicroLoss:
        ref_chosen = ref_rejected = None
        if self.reference is not None:  # first, without gradients: the engines' hooks then see one training forward
            ref_chosen, ref_rejected, _ = self.pair_logps(*self.reference.logps(model, self.head, batch, autocast))
        chosen, rejected, chosen_average = self.pair_logps(*forward_logps(model, self.head, batch, autocast))
        losses, chosen_rewards, rejected_rewards = preference_losses(self.cfg, chosen, rejected, ref_chosen, ref_rejected)
        if self.cfg.pref_ftx > 1e-6:
            losses = losses - self.cfg.pref_ftx * chosen_average
        return MicroLoss(losses.sum(), pair_figures(chosen_rewards, rejected_rewards, chosen, rejected))
