"""Reward modelling (``stage: rm``): a value head on the language model, trained on
chosen/rejected pairs with the pairwise loss ``-log sigmoid(score(chosen) - score(rejected))``,
as LLaMA-Factory 0.9.5's PairwiseTrainer (checked against it on the same values).

The value head (``ftui.runner.reward``: TRL's layout, a dropout of 0.1 and a linear layer to
one number) takes the last hidden states in place of the output projection, so no logits are
computed; an answer's score is the value at its last token. final/ holds the model (or the
adapter) as for SFT, plus ``value_head.safetensors`` with TRL's / LLaMA-Factory's key names;
``ftui.runner.weights.load_reward_model`` loads both and scores. Figures (means per pair): the
chosen and rejected scores, their margin, and the share of pairs scored the right way round.
"""

from __future__ import annotations

from typing import Any, Callable

import torch
import torch.nn.functional as F
from torch import nn

from ftui.runner.media_batch import media_collation
from ftui.runner.model import trained_dtype
from ftui.runner.reward import VALUE_HEAD_FILE, install_value_head, pair_scores, split_value_head
from ftui.runner.stages.base import MicroLoss
from ftui.runner.stages.dpo import pair_figures
from ftui.runner.stages.preference import PreferenceStage


class RewardStage(PreferenceStage):
    name = "rm"

    def prepare_model(self, model: nn.Module) -> None:
        """The value head replaces the output projection's work (the model's dropout stays as
        configured: LLaMA-Factory's reward trainer keeps it). In the trained weights' dtype
        (bf16 for pure_bf16's full and freeze, else fp32): FSDP2 shards them in one dtype."""
        self.media = media_collation(model)  # a vision-language model's batches carry their images
        install_value_head(model, dtype=trained_dtype(model))

    def loss(self, model: nn.Module, batch: Any, autocast: Callable) -> MicroLoss:
        with autocast():
            values = model(**batch.model_inputs(), use_cache=False).logits
        chosen, rejected = pair_scores(values, batch.attention_mask)
        losses = -F.logsigmoid(chosen - rejected)
        figures = pair_figures(chosen.detach(), rejected.detach(), chosen, rejected)
        return MicroLoss(losses.sum(), {k: figures[k] for k in self.figures})

    def final_extras(self, state_dict: dict[str, torch.Tensor]) -> tuple[dict[str, torch.Tensor], dict[str, dict[str, torch.Tensor]]]:
        model, head = split_value_head(state_dict)
        return model, {VALUE_HEAD_FILE: head}
