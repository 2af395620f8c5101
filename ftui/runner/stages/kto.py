"""Kahneman-Tversky optimisation (``stage: kto``), as LLaMA-Factory 0.9.5 computes it (its
CustomKTOTrainer over TRL's ``kto_loss``; checked against it on the same logits).

Data: answers tagged desirable or not (``kto_tag``). Each example also carries a mismatched
completion, the same prompt with the previous record's answer (LLaMA-Factory rotates the
answers by one within each preprocessing batch of 1,000 records), on which KTO's KL term
is estimated: ``kl = mean(policy - reference log-probability)`` over the micro batch's
mismatched rows, at least 0, without gradient. Per example, with ``r = policy -
reference`` log-probability of its answer: ``kto_chosen_weight x (1 - sigmoid(beta (r - kl)))``
for a desirable answer, ``kto_rejected_weight x (1 - sigmoid(beta (kl - r)))`` for an
undesirable one. ``pref_ftx`` adds LLaMA-Factory's rescaled SFT term on the desirable answers.

In training the KL is averaged over the ranks, as TRL's gather does; in eval each rank uses
its own batch's (eval batches differ in number between ranks, so no collective there).

Figures (means over examples): ``rewards_accuracy``, the share of examples whose implicit
reward (beta x r) has the tag's sign; ``rewards_margin``, the reward signed by the tag (up for
desirable, down for undesirable answers); ``kl``.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Callable

import torch
from torch import nn

from ftui.data.conversation import ConversationError, split_budget
from ftui.i18n import _
from ftui.data.records import DataFormatError, DatasetSpec
from ftui.runner.data import Batch, Collator, Progress, TokenizedData
from ftui.runner.distributed import mean_over_ranks
from ftui.runner.stages.base import MicroLoss
from ftui.runner.stages.preference import (KL_ROTATION_BATCH, ComparisonEncoder, FeedbackExample, PreferenceStage,
                                           Reference, answer_example, example_of, forward_logps, labelled_tokens,
                                           saved_columns)
from ftui.runner.stages.preference_vision import RecordImages


@dataclass
class FeedbackBatch(Batch):
    desirable: torch.Tensor | None = None  # per example: the answer is desirable

    def to(self, device: torch.device) -> "FeedbackBatch":
        return dataclasses.replace(super().to(device), desirable=self.desirable.to(device))


class FeedbackCollator(Collator):
    """The examples' rows, then their mismatched rows, as one padded batch; the unit is the example."""

    def __call__(self, examples: list[FeedbackExample]) -> FeedbackBatch:
        batch = super().__call__([e.target for e in examples] + [e.kl for e in examples])
        return FeedbackBatch(**vars(batch) | {"loss_tokens": len(examples),
                                             "trainable_tokens": sum(labelled_tokens(e.target) for e in examples)},
                             desirable=torch.tensor([e.desirable for e in examples]))


class KTOStage(PreferenceStage):
    name = "kto"

    def __init__(self, cfg: Any, tokenizer: Any):
        super().__init__(cfg, tokenizer)
        self.reference = Reference(cfg)

    def encode(self, loaded: list[tuple[DatasetSpec, list[dict[str, Any]]]], out: TokenizedData,
               report: Progress) -> list[Any]:
        encoder = ComparisonEncoder(self.cfg, self.tokenizer)
        items = list(self.comparisons(loaded, out, report))
        examples: list[FeedbackExample] = []
        skipped = 0
        for start in range(0, len(items), KL_ROTATION_BATCH):
            block = items[start:start + KL_ROTATION_BATCH]
            for j, (comp, spec, i, paths) in enumerate(block):
                if comp is None or comp.desirable is None:
                    skipped += 1
                    continue
                previous = block[j - 1][0]  # j = 0: the block's last record, as LF's rotation (skipped ones too)
                kl_answer = previous.answers[0] if previous is not None else comp.answers[0]
                try:
                    images = self.record_images(paths, encoder, spec, i)
                    example = self.feedback_example(comp.prompt, comp.answers[0], kl_answer, comp.desirable, encoder, out,
                                                    images, spec, i)
                except ConversationError as err:
                    raise DataFormatError(_("dataset {name} record {i}: {error}").format(name=repr(spec.name), i=i, error=err)) from None
                if example is not None:
                    examples.append(example)
        self.report_counts(out, skipped, len(examples))
        tags = {e.desirable for e in examples}
        if len(tags) == 1:
            out.warnings.append(_("every example is desirable: KTO learns best from both kinds") if True in tags
                                else _("every example is undesirable: KTO learns best from both kinds"))
        return examples

    def feedback_example(self, prompt: Any, answer: dict[str, str], kl_answer: dict[str, str], desirable: bool,
                         encoder: ComparisonEncoder, out: TokenizedData, images: RecordImages | None = None,
                         spec: DatasetSpec | None = None, i: int = 0) -> FeedbackExample | None:
        """The answer's example and the mismatched one; both read the record's images (as
        LLaMA-Factory's feedback processor gives them to the plugin)."""
        cutoff = self.cfg.cutoff_len
        p, a = self.encode_answer(encoder, prompt, answer, images)
        kp, ka = self.encode_answer(encoder, prompt, kl_answer, images)
        source, target = split_budget(len(p), len(a), cutoff)
        kl_source, kl_target = split_budget(len(kp), len(ka), cutoff)
        if source < len(p) or target < len(a):
            out.truncated += 1
        if target == 0:
            out.dropped += 1
            return None
        return FeedbackExample(self.with_images(answer_example(p, a, source, target), images, spec, i),
                               self.with_images(answer_example(kp, ka, kl_source, kl_target), images, spec, i), desirable)

    def parse_saved(self, table: Any, path: str) -> list[FeedbackExample]:
        cols = saved_columns(table, path, ("input_ids", "labels", "kl_input_ids", "kl_labels", "kto_tags"), self.name)
        return [FeedbackExample(example_of(i, l), example_of(ki, kl), bool(tag)) for i, l, ki, kl, tag in zip(*cols)]

    def collator(self, pad_to_multiple: int = 1, pin_memory: bool = False) -> Callable[[list[Any]], Any]:
        return FeedbackCollator(self.tokenizer.pad_token_id, pad_to_multiple=pad_to_multiple, pin_memory=pin_memory,
                                sequence_lengths=self.sequence_lengths, media=self.media)

    def keep_start(self, model: nn.Module) -> None:
        self.reference.keep(model)

    def attach(self, engine: Any) -> None:
        self.reference.attach(engine)

    def loss(self, model: nn.Module, batch: FeedbackBatch, autocast: Callable) -> MicroLoss:
        n, cfg = batch.loss_tokens, self.cfg
        targets, mismatched = slice(0, n), slice(n, 2 * n)
        ref, _ref_tokens = self.reference.logps(model, self.head, batch, autocast)
        with torch.no_grad():
            policy_kl, _kl_tokens = forward_logps(model, self.head, batch, autocast, mismatched)
        policy, lengths = forward_logps(model, self.head, batch, autocast, targets)
        kl = (policy_kl - ref[mismatched]).mean()
        kl = (mean_over_ranks(kl) if model.training else kl).clamp(min=0)
        ratio = policy - ref[targets]
        desirable = batch.desirable
        losses = torch.where(desirable, cfg.kto_chosen_weight * (1 - torch.sigmoid(cfg.pref_beta * (ratio - kl))),
                             cfg.kto_rejected_weight * (1 - torch.sigmoid(cfg.pref_beta * (kl - ratio))))
        total = losses.sum()
        chosen = int(desirable.sum().item()) if cfg.pref_ftx > 1e-6 else 0
        if chosen:  # LLaMA-Factory's rescaled SFT term: ftx x mean(-avg logp of desirable) / chosen x examples
            sft = -(policy / lengths.clamp(min=1))[desirable].sum()
            total = total + cfg.pref_ftx * sft * n * n / (chosen * chosen)
        rewards = cfg.pref_beta * ratio.detach()
        signed = torch.where(desirable, rewards, -rewards)
        return MicroLoss(total, {"rewards_accuracy": (signed > 0).float().sum(), "rewards_margin": signed.sum(),
                                 "kl": kl.detach() * n})
