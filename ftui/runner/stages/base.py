"""The seam between a training stage and the shared loop (``ftui.runner.loop``).

A stage implements its description (``ftui.stages``: its name, figures, whether it keeps a
reference model ...) and supplies three things and nothing else:

- its data: records -> examples (``encode``), and how train rows are packed (``pack``);
  loading, the eval split and batching are shared (``ftui.runner.data``); and where the
  loop's micro batches come from (``batches``): by default the training rows in the
  sampler's order (:class:`DatasetBatches`), or batches it generates as it trains
  (:class:`GeneratedBatches`: rollouts for GRPO and PPO);
- the loss of one micro batch (``loss``): a *sum* over the batch's loss units and, if the
  stage has them, extra figures (sums too, e.g. a preference stage's reward margins);
- its evaluation (``evaluate``): by default the same loss over the eval examples.

A stage that keeps state of its own across optimizer steps (ppo's KL coefficient and running
score moments) gives it to checkpoints (``checkpoint_state``) and takes it back on a resume
(``resume_state``), so a resumed run goes on as the uninterrupted one.

The loop divides every micro batch's sum by the step's global count of loss units
(``Batch.loss_tokens``, counted on the host), so the gradient is the exact mean over the
whole step, and writes ``figures`` divided by the same count into `step` and `eval` events
as extra fields, which the dashboard shows by name. A batch is anything with
``real_tokens``, ``trainable_tokens`` and ``loss_tokens`` counts and a ``to(device)``.
"""

from __future__ import annotations

import contextlib
import os
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator

import torch
from torch import nn

from ftui.config.schema import RunConfig
from ftui.i18n import _
from ftui.data.records import DatasetSpec
from ftui.runner.data import (Collator, Example, Progress, TokenizedData, has_tokenized, load_all, load_tokenized,
                              save_tokenized, split_eval, token_examples)
from ftui.runner.attention import lengths_given
from ftui.runner.feed import Prefetcher, host_batches
from ftui.runner.loss import install_chunked_loss, micro_batch_loss
from ftui.runner.media_batch import MediaCollation, media_collation
from ftui.stages import StageDescription, describe

# The loop's Training state (ftui.runner.loop.Training) is typed here as Any:
# the loop imports this module for Stage, and an import back, even a type-only one, is a circle.
Training = Any


@dataclass
class MicroLoss:
    """One micro batch's summed loss, and the stage's extra figures (also sums)."""

    total: torch.Tensor
    figures: dict[str, torch.Tensor] = field(default_factory=dict)


class BatchSource:
    """Where the loop's micro batches come from: ``next()`` gives the next one on the device.
    ``waited`` adds up the seconds the loop waited for them (the loop reads and resets it:
    the step event's ``data_wait_s``)."""

    waited: float = 0.0

    def __iter__(self) -> Iterator[Any]:
        return self

    def __next__(self) -> Any:
        raise NotImplementedError


class DatasetBatches(BatchSource):
    """The fixed training rows: this rank's share in the sampler's resumable order from the
    ``start``-th micro batch, collated ahead of time in a thread (``ftui.runner.feed``)."""

    def __init__(self, t: Training, start: int):
        self.prefetcher = Prefetcher(host_batches(t.data.train, t.sampler, t.collator, start=start), t.device,
                                     depth=2 * t.cfg.gradient_accumulation_steps)

    @property
    def waited(self) -> float:  # type: ignore[override]
        return self.prefetcher.waited

    @waited.setter
    def waited(self, value: float) -> None:
        self.prefetcher.waited = value

    def __next__(self) -> Any:
        return next(self.prefetcher)[1]


class GeneratedBatches(BatchSource):
    """Batches a stage makes as it trains instead of reading them (rollouts: the policy's own
    answers, scored): ``generate(index)`` makes the ``index``-th micro batch of the run (a
    resumed run goes on counting from where it stopped) on the loop's thread, where the model
    is; the time it takes counts as the step's data wait."""

    def __init__(self, generate: Callable[[int], Any], device: Any, start: int = 0):
        self.generate = generate
        self.device = device
        self.index = start

    def __next__(self) -> Any:
        began = time.perf_counter()
        batch = self.generate(self.index).to(self.device)
        self.index += 1
        self.waited += time.perf_counter() - began
        return batch


class Stage:
    """A training stage: subclasses set ``name`` (their description's, ftui.stages) and
    implement ``encode``."""

    name = ""
    layout: Any = None  # the run's BatchLayout (ftui.runner.batch_layout), set by the training job
    media: "MediaCollation | None" = None  # a vision-language model's: how its batches carry images (prepare_model)

    def __init__(self, cfg: RunConfig, tokenizer: Any):
        self.cfg = cfg
        self.tokenizer = tokenizer
        self.head: nn.Module | None = None  # the output projection when the loss is computed in chunks

    @property
    def description(self) -> StageDescription:
        return describe(self.name)

    @property
    def figures(self) -> tuple[str, ...]:
        """The names of MicroLoss.figures, in the order they are reported: the description's."""
        return self.description.figures

    def batches(self, t: Training, start: int) -> BatchSource:
        """The loop's micro batches from the ``start``-th of the run on: the training rows
        (``t.data.train``, ``t.sampler``, ``t.collator``) unless the stage generates its own."""
        return DatasetBatches(t, start)

    def window_figures(self) -> dict[str, float]:
        """Figures the stage measured itself since the last step event (a rollout's rewards and
        lengths: per completion, not per loss unit), the same on every rank; the loop adds them
        to the step event. Called by every rank at each step event."""
        return {}

    def checkpoint_state(self) -> dict[str, Any]:
        """What the stage itself keeps across optimizer steps (ppo's KL coefficient and running
        score moments), JSON-able: stored in a checkpoint's trainer state, handed back to
        :meth:`resume_state` when a run resumes from it. Called by every rank; rank 0's is kept."""
        return {}

    def resume_state(self, state: dict[str, Any]) -> None:
        """Takes back what :meth:`checkpoint_state` gave (before the first batch is made)."""

    def steps_per_epoch(self, examples: int, batches_per_epoch: int, accum: int, world: int) -> int:
        """Optimizer steps in one epoch over ``examples`` training examples: the sampler's
        micro batches per rank (``batches_per_epoch``) over ``accum``, unless the stage makes
        its own batches (grpo: every prompt once with its group of completions)."""
        return batches_per_epoch // accum

    # --- data
    def encode(self, loaded: list[tuple[DatasetSpec, list[dict[str, Any]]]], out: TokenizedData,
               report: Progress) -> list[Example]:
        """Every record of every dataset as examples; counts records, cut and dropped ones in ``out``."""
        raise NotImplementedError

    def parse_saved(self, table: Any, path: str) -> list[Any]:
        """Examples from a saved table (tokenized_path): input_ids and labels."""
        return token_examples(table, path)

    def pack(self, train: list[Example]) -> list[Example]:
        """The training rows from the training examples (identity unless the stage packs)."""
        return train

    def build_data(self, progress: Callable[[int, int], None] | None = None, pack: bool = True) -> TokenizedData:
        """Reads, checks, encodes, splits and packs every dataset of the config (``pack=False``:
        one row per example, as ``ftui data`` shows them), or reads the encoded examples from
        ``tokenized_path`` when an earlier run saved them there, as LLaMA-Factory does: the
        datasets are then not read at all.

        ``progress(done, total)`` is called with the records encoded so far: once at the
        start, every few seconds, and at the end (200,000 records take about a minute on one
        CPU core, which the dashboard shows rather than a silent wait)."""
        cfg = self.cfg
        out = TokenizedData(train=[], eval=[])
        if has_tokenized(cfg.tokenized_path):
            train, out.eval = load_tokenized(cfg.tokenized_path, self.parse_saved)
            out.records = len(train) + len(out.eval)
            out.warnings.append(_("read {train} train and {eval} eval examples encoded earlier from tokenized_path {path}; "
                                  "dataset, template and cutoff_len were not applied again").format(
                train=len(train), eval=len(out.eval), path=cfg.tokenized_path))
        else:
            loaded = load_all(cfg)
            held_out = load_all(cfg, cfg.eval_dataset) if cfg.eval_dataset else []
            report = Progress(progress, sum(len(records) for _spec, records in loaded + held_out))
            examples = self.encode(loaded, out, report)
            if held_out:  # eval_dataset: its own examples, counted and warned about apart
                eval_out = TokenizedData(train=[], eval=[])
                train, out.eval = examples, self.encode(held_out, eval_out, report)
                out.warnings += [f"eval_dataset: {w}" for w in eval_out.warnings]
                report.count = out.records + eval_out.records
            else:
                train, out.eval = split_eval(examples, cfg)
            report.done()
            if cfg.tokenized_path and int(os.environ.get("RANK", "0")) == 0:  # every rank encodes; one writes
                save_tokenized(cfg.tokenized_path, train, out.eval)
                out.warnings.append(_("saved the encoded examples to tokenized_path {path}; later runs with it read them "
                                      "instead of the datasets").format(path=cfg.tokenized_path))
        out.train_examples = sum(getattr(e, "sequences", 1) for e in train)
        out.train = self.pack(train) if pack else train
        return out

    @property
    def sequence_lengths(self) -> bool:
        """Whether batches carry their sequences' lengths: the attention (flash_attn fa2's
        kernel, SDPA per example) takes them instead of a mask (ftui.runner.attention)."""
        return self.layout.sequence_lengths if self.layout is not None else self.cfg.flash_attn == "fa2"

    @property
    def padding_free(self) -> bool:
        return bool(self.layout is not None and self.layout.padding_free)

    def collator(self, pad_to_multiple: int = 1, pin_memory: bool = False) -> Callable[[list[Example]], Any]:
        return Collator(self.tokenizer.pad_token_id, pad_to_multiple=pad_to_multiple, pin_memory=pin_memory,
                        sequence_lengths=self.sequence_lengths, padding_free=self.padding_free, loss_positions=True,
                        media=self.media)

    # --- model and loss
    def keep_start(self, model: nn.Module) -> None:
        """Called with the starting model, before the method (LoRA, freeze) is applied: a
        preference stage keeps a frozen copy as its reference model."""

    def attach(self, engine: Any) -> None:
        """Called once the engine has wrapped the model (a reference copy is placed by it)."""

    def final_extras(self, state_dict: dict[str, torch.Tensor]) -> tuple[dict[str, torch.Tensor], dict[str, dict[str, torch.Tensor]]]:
        """The weights final/ saves as the model (or adapter), and extra safetensors files
        (name -> tensors) beside it: a reward model's value head."""
        return state_dict, {}

    def prepare_model(self, model: nn.Module) -> None:
        """Called once the method is applied, before the engine wraps the model: the chunked
        loss on its output projection, and a vision-language model's batch collation."""
        self.media = media_collation(model)
        if self.cfg.chunked_loss:
            self.head = install_chunked_loss(model, liger=self.cfg.enable_liger_kernel)

    def loss(self, model: nn.Module, batch: Any, autocast: Callable[[], contextlib.AbstractContextManager]) -> MicroLoss:
        """Summed next-token cross-entropy over the batch's labelled tokens."""
        apart = lengths_given() if getattr(batch, "cu_seqlens", None) is not None else contextlib.nullcontext()
        with apart:  # the attention reads each example's span, so a model loaded with ftui_sdpa builds no mask
            return MicroLoss(micro_batch_loss(model, self.head, batch.model_inputs(), batch.labels, autocast,
                                              positions=getattr(batch, "loss_positions", None)))

    # --- evaluation
    @torch.no_grad()
    def evaluate(self, engine: Any, examples: list[Example], collator: Callable, beat: Callable[[], None]) -> dict[str, Any]:
        """The eval event's fields over this rank's share ``examples`` (collective: every rank
        calls it): the loss with the training loss path, and each figure, per loss unit."""
        device = engine.device
        width = 2 + len(self.figures)
        sums = torch.zeros(width, device=device, dtype=torch.float64)
        bs = self.cfg.per_device_eval_batch_size
        engine.model.eval()
        for i in range(0, len(examples), bs):
            batch = collator(examples[i : i + bs]).to(device)
            out = self.loss(engine.model, batch, engine.autocast)
            sums[0] += out.total.double()
            sums[1] += batch.loss_tokens
            for k, name in enumerate(self.figures):
                sums[2 + k] += out.figures[name].double()
            beat()
        engine.all_reduce_sum(sums)
        engine.model.train()
        values = sums.tolist()
        total_loss, n = values[0], values[1]
        if not n:
            return {}
        return {"eval_loss": total_loss / n, "eval_tokens": int(n),
                **{f"eval_{name}": values[2 + k] / n for k, name in enumerate(self.figures)}}
