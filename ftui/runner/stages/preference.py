"""What the preference stages (dpo, kto, rm) share: compared answers as examples, their
batches, per-answer log-probabilities and the reference model.

Encoding follows LLaMA-Factory 0.9.5's pairwise and feedback processors: each answer is
rendered after the whole prompt (``encode_oneturn``: earlier turns, answers included, are
prompt), the template's EOS added for efficient-EOS templates, and the budget split between
the prompt and the *longer* answer (``split_budget``, LF's ``infer_seqlen``), so a pair keeps
the same prompt. Labels mask the prompt; nothing is packed.

A batch of pairs is one padded batch of ``2 x pairs`` rows, the chosen answers first, so
chosen and rejected go through the model in one forward (as LF's collator concatenates
them); its ``loss_tokens`` is the number of pairs, so the loop's step mean is over pairs.
Each answer's log-probability is computed from the last hidden states a chunk of positions
at a time (``ftui.runner.loss.micro_batch_logps``; full logits with ``chunked_loss: false``
or a model whose output projection cannot take it), in the policy and the reference alike.

The reference model (DPO's and KTO's ``pi_ref``): for LoRA the policy itself with its
adapter switched off (no second copy, as TRL and LF do); for full and freeze a frozen copy of
the starting weights, which the engine places as it places the policy (sharded under FSDP
and ZeRO-3: ``Engine.prepare_frozen``). Dropout is off in both (TRL's ``disable_dropout``),
so the policy and the reference agree exactly at the first step.

Records with images (a vision-language model): each sequence's placeholders are expanded to
its images' tokens before the template renders it, and every example of the record carries
the images' tensors (``ftui.runner.stages.preference_vision``); batches collate them with the
rows (``ftui.runner.media_batch``), and the reference model reads the same batch.
"""

from __future__ import annotations

import contextlib
import copy
import json
from dataclasses import dataclass
from typing import Any, Callable

import torch
from torch import nn

from ftui.data.conversation import Conversation, ConversationError, Renderer, split_budget
from ftui.i18n import _
from ftui.data.preference_media import preference_images
from ftui.data.preference_records import Comparison, as_messages, to_comparison
from ftui.data.records import DataFormatError, DatasetSpec
from ftui.runner.data import IGNORE, Batch, Collator, Example, Progress, TokenizedData
from ftui.runner.engines.base import local_numel
from ftui.runner.faults import developer_note
from ftui.runner.loss import install_chunked_loss, micro_batch_logps
from ftui.runner.model import template_name_for
from ftui.runner.stages.base import Stage
from ftui.runner.stages.preference_vision import PreferenceVision, RecordImages
from ftui.runner.stages.sft import Encoder, encode_options
from ftui.stages import PAIRS

KL_ROTATION_BATCH = 1000  # LLaMA-Factory's preprocessing_batch_size: KTO's mismatched answers rotate within it


@dataclass
class PairExample:
    """A chosen and a rejected answer to the same prompt (dpo, rm)."""

    chosen: Example
    rejected: Example
    sequences = 2  # rows it puts through the model (the FLOP estimate averages tokens over them)

    @property
    def input_ids(self) -> list[int]:  # both rows' tokens
        return self.chosen.input_ids + self.rejected.input_ids

    def columns(self) -> dict[str, Any]:  # LLaMA-Factory's tokenized layout
        return {"chosen_input_ids": self.chosen.input_ids, "chosen_labels": self.chosen.labels,
                "rejected_input_ids": self.rejected.input_ids, "rejected_labels": self.rejected.labels}


@dataclass
class FeedbackExample:
    """KTO: an answer tagged desirable or not, and the same prompt with another record's
    answer (the mismatched completion KTO's KL estimate is taken on)."""

    target: Example
    kl: Example
    desirable: bool
    sequences = 2  # its answer's row and the mismatched one

    @property
    def input_ids(self) -> list[int]:
        return self.target.input_ids + self.kl.input_ids

    def columns(self) -> dict[str, Any]:  # LLaMA-Factory's tokenized layout
        return {"input_ids": self.target.input_ids, "labels": self.target.labels, "kl_input_ids": self.kl.input_ids,
                "kl_labels": self.kl.labels, "kto_tags": self.desirable}


def saved_columns(table: Any, path: str, names: tuple[str, ...], stage: str) -> list[list[Any]]:
    missing = [n for n in names if n not in table.column_names]
    if missing:
        raise DataFormatError(_("tokenized_path {path} holds no {missing} column(s) (it has {columns}): it was written for "
                                "another stage than {stage}; give another folder, or none to encode the datasets").format(
            path=path, missing=", ".join(missing), columns=", ".join(table.column_names), stage=stage))
    return [table[n] for n in names]


def example_of(ids: list[int], labels: list[int]) -> Example:
    return Example(list(ids), list(labels), real_tokens=len(ids))


def answer_example(prompt: list[int], answer: list[int], source: int, target: int) -> Example:
    ids = prompt[:source] + answer[:target]
    return Example(ids, [IGNORE] * min(source, len(prompt)) + answer[:target], real_tokens=len(ids))


class ComparisonEncoder:
    """(prompt ids, answer ids) for a prompt and one answer, with the run's template (or the
    tokenizer's own chat template), as LLaMA-Factory's ``encode_oneturn`` gives them."""

    def __init__(self, cfg: Any, tokenizer: Any):
        opts = encode_options(cfg)
        name = template_name_for(cfg, tokenizer)
        self.renderer = self.encoder = None
        self.eos: list[int] = []
        if name is not None:
            try:
                self.renderer = Renderer(name, tokenizer, opts)
            except ConversationError as err:
                raise DataFormatError(str(err)) from None
            if self.renderer.template.efficient_eos:
                self.eos = [tokenizer.eos_token_id]
        else:
            self.encoder = Encoder(tokenizer, tokenizer.chat_template, opts)

    def encode(self, prompt: Conversation, answer: dict[str, str]) -> tuple[list[int], list[int]]:
        if self.renderer is not None:
            p, a = self.renderer.encode_oneturn(Conversation(prompt.turns + [answer], prompt.system, prompt.tools))
        else:
            tools = prompt.tools
            if isinstance(tools, str):
                try:
                    tools = json.loads(tools) if tools.strip() else None
                except ValueError:
                    tools = [tools]
            p, a = self.encoder.encode_oneturn(as_messages(prompt, answer), tools or None)
        return p, a + self.eos


class PreferenceStage(Stage):
    """The ranking stages' data (dpo, rm): pairs; subclasses give the loss."""

    _vision: PreferenceVision | None = None  # made at the first record with images

    def vision(self, encoder: ComparisonEncoder) -> PreferenceVision:
        if self._vision is None:
            self._vision = PreferenceVision(self.cfg, self.tokenizer, encoder.renderer)
        return self._vision

    def record_images(self, paths: list[str], encoder: ComparisonEncoder, spec: DatasetSpec, i: int) -> RecordImages | None:
        return self.vision(encoder).images(paths, spec, i) if paths else None

    def encode_answer(self, encoder: ComparisonEncoder, prompt: Conversation, answer: dict[str, str],
                      images: RecordImages | None) -> tuple[list[int], list[int]]:
        """(prompt ids, answer ids) of one sequence, its placeholders expanded when it has images."""
        if images is not None:
            prompt, answer = self._vision.expand(prompt, answer, images)  # type: ignore[union-attr]
        return encoder.encode(prompt, answer)

    def with_images(self, example: Example, images: RecordImages | None, spec: DatasetSpec, i: int) -> Example:
        """The example carrying the record's image tensors, once its image tokens are known kept."""
        if images is None:
            return example
        self._vision.check_kept(example.input_ids, images, spec, i)  # type: ignore[union-attr]
        example.media = images.media
        return example

    def encode(self, loaded: list[tuple[DatasetSpec, list[dict[str, Any]]]], out: TokenizedData,
               report: Progress) -> list[Any]:
        encoder = ComparisonEncoder(self.cfg, self.tokenizer)
        examples: list[Any] = []
        skipped = 0
        for comp, spec, i, paths in self.comparisons(loaded, out, report):
            if comp is None:
                skipped += 1
                continue
            try:
                images = self.record_images(paths, encoder, spec, i)
                example = self.make_example(comp, encoder, out, images, spec, i)
            except ConversationError as err:
                raise DataFormatError(_("dataset {name} record {i}: {error}").format(name=repr(spec.name), i=i, error=err)) from None
            if example is not None:
                examples.append(example)
        self.report_counts(out, skipped, len(examples))
        return examples

    def comparisons(self, loaded: list[tuple[DatasetSpec, list[dict[str, Any]]]], out: TokenizedData, report: Progress):
        for spec, records in loaded:
            for i, record in enumerate(records):
                out.records += 1
                report.tick(out.records)
                comp = to_comparison(record, spec, i, self.name)
                paths = preference_images(record, spec, i, self.description.data) if comp is not None else []
                yield comp, spec, i, paths

    def make_example(self, comp: Comparison, encoder: ComparisonEncoder, out: TokenizedData,
                     images: RecordImages | None = None, spec: DatasetSpec | None = None, i: int = 0) -> PairExample | None:
        prompt, chosen = self.encode_answer(encoder, comp.prompt, comp.answers[0], images)
        _prompt, rejected = self.encode_answer(encoder, comp.prompt, comp.answers[1], images)
        source, target = split_budget(len(prompt), max(len(chosen), len(rejected)), self.cfg.cutoff_len)
        if source < len(prompt) or target < max(len(chosen), len(rejected)):
            out.truncated += 1
        if target == 0:
            out.dropped += 1
            return None
        return PairExample(self.with_images(answer_example(prompt, chosen, source, target), images, spec, i),
                           self.with_images(answer_example(prompt, rejected, source, target), images, spec, i))

    def report_counts(self, out: TokenizedData, skipped: int, kept: int) -> None:
        what = _("pairs") if self.description.data == PAIRS else _("examples")
        if skipped:
            out.warnings.append(_("{n} records were skipped: their turns do not alternate user and assistant, an answer is "
                                  "missing or not the assistant's, or (kto) the tag is not true/false (as LLaMA-Factory "
                                  "drops them)").format(n=skipped))
        if out.truncated:
            out.warnings.append(_("{n} of {total} {what} were longer than cutoff_len={cutoff_len} and were cut (the prompt "
                                  "and the longer answer share it as LLaMA-Factory does)").format(
                n=out.truncated, total=out.records, what=what, cutoff_len=self.cfg.cutoff_len))
        if out.dropped:
            out.warnings.append(_("{n} {what} had no answer tokens left within cutoff_len and were dropped").format(
                n=out.dropped, what=what))
        if not kept:
            raise DataFormatError(_("no usable {what} among {n} records (cutoff_len={cutoff_len})").format(
                what=what, n=out.records, cutoff_len=self.cfg.cutoff_len))

    def parse_saved(self, table: Any, path: str) -> list[PairExample]:
        cols = saved_columns(table, path, ("chosen_input_ids", "chosen_labels", "rejected_input_ids", "rejected_labels"), self.name)
        return [PairExample(example_of(ci, cl), example_of(ri, rl)) for ci, cl, ri, rl in zip(*cols)]

    def collator(self, pad_to_multiple: int = 1, pin_memory: bool = False) -> Callable[[list[Any]], Any]:
        return PairCollator(self.tokenizer.pad_token_id, pad_to_multiple=pad_to_multiple, pin_memory=pin_memory,
                            sequence_lengths=self.sequence_lengths, media=self.media)

    def prepare_model(self, model: nn.Module) -> None:
        """Dropout off (TRL's disable_dropout), and the output projection computes the answers'
        log-probabilities in chunks (``chunked_loss``)."""
        disable_dropout(model)
        super().prepare_model(model)


class PairCollator(Collator):
    """Pairs as one batch: the chosen rows, then the rejected rows; the loss unit is the pair."""

    def __call__(self, pairs: list[PairExample]) -> Batch:
        batch = super().__call__([p.chosen for p in pairs] + [p.rejected for p in pairs])
        batch.loss_tokens = len(pairs)
        return batch


def labelled_tokens(example: Example) -> int:
    """Tokens of an example that carry a label (its answer's tokens)."""
    return sum(1 for x in example.labels if x != IGNORE)


def disable_dropout(model: nn.Module) -> None:
    for module in model.modules():
        if isinstance(module, nn.Dropout):
            module.p = 0.0


def forward_logps(model: nn.Module, head: nn.Module | None, batch: Batch,
                  autocast: Callable[[], contextlib.AbstractContextManager],
                  rows: slice | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Per row of the batch (or of its ``rows``): the summed log-probability of its answer's
    tokens and how many there are; computed in chunks from the last hidden states when
    ``head`` (the output projection) takes them, else from full logits."""
    inputs, labels = batch.model_inputs(rows), batch.labels if rows is None else batch.labels[rows]
    return micro_batch_logps(model, head, inputs, labels, autocast)


class Reference:
    """The reference model: the policy with its LoRA adapter off, or a frozen copy of the
    starting weights placed by the engine (full, freeze)."""

    def __init__(self, cfg: Any):
        self.cfg = cfg
        self.copy: nn.Module | None = None
        self.head: nn.Module | None = None  # the copy's output projection when it computes log-probabilities in chunks
        self.engine: Any = None

    def keep(self, model: nn.Module) -> None:
        """Called with the starting model before the method is applied: full and freeze keep a copy."""
        if self.cfg.finetuning_type != "lora":
            self.copy = copy.deepcopy(model).requires_grad_(False).eval()
            disable_dropout(self.copy)

    def attach(self, engine: Any) -> None:
        self.engine = engine
        if self.copy is None:
            developer_note(f"[ftui] rank {engine.info.rank}: reference model = the policy with its LoRA adapter off")
            return
        if self.cfg.chunked_loss:  # before the engine places it (the hook is on the module, which stays)
            self.head = install_chunked_loss(self.copy)
        total = sum(p.numel() for p in self.copy.parameters())
        self.copy = engine.prepare_frozen(self.copy)
        held = sum(local_numel(p) for p in self.copy.parameters())
        # train.log says what each rank holds of the frozen copy (tests read it: proof of sharding)
        developer_note(f"[ftui] rank {engine.info.rank}: reference model = a frozen copy placed by {engine.name}: "
                       f"{held} of {total} parameter elements on this rank")

    @torch.no_grad()
    def logps(self, model: nn.Module, head: nn.Module | None, batch: Batch, autocast: Callable,
              rows: slice | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """forward_logps through the reference (``head``: the policy's output projection when
        it computes them in chunks, which the adapter-off policy shares)."""
        if self.copy is not None:
            return forward_logps(self.copy, self.head, batch, autocast, rows)
        with self.engine.unwrap().disable_adapter():
            return forward_logps(model, head, batch, autocast, rows)
