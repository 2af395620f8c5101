"""Training data: tokenized with the chat template, prompt masked, cut, optionally packed.

Records come from ``ftui.records`` (LLaMA-Factory's formats and registry). Each
conversation is rendered with the tokenizer's chat template (or a named built-in one);
everything but the assistant's turns is masked from the loss; examples are cut at
``cutoff_len``; short ones can be packed into full rows. The collator counts real
(non-padding) and loss-bearing tokens on the host, so the training loop needs no device
sync to know them.
"""

from __future__ import annotations

import random
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator

import torch

from ftui.config import RunConfig
from ftui.presets.templates import TEMPLATES
from ftui.records import DataFormatError, DatasetSpec, HubDataset, apply_detected_format, read_records, resolve_datasets, to_messages

__all__ = ["DataFormatError", "IGNORE", "Example", "build_datasets", "pack_examples", "Collator", "Batch", "EpochSampler"]

IGNORE = -100
PROGRESS_EVERY_S = 3.0  # how often build_datasets reports while it tokenizes


@dataclass
class Example:
    input_ids: list[int]
    labels: list[int]
    position_ids: list[int] | None = None  # set for packed rows: restarts at each example
    real_tokens: int = 0


def load_records(spec: DatasetSpec) -> list[dict[str, Any]]:
    """Every record of a dataset; hub names go through `datasets` (cached by it)."""
    try:
        return read_records(spec)
    except HubDataset:
        import datasets

        ds = datasets.load_dataset(spec.hf_hub_url, spec.subset, split=spec.split)
        return [dict(r) for r in ds]


def chat_template_for(cfg: RunConfig, tokenizer: Any) -> str:
    if cfg.template:
        return TEMPLATES[cfg.template]
    if getattr(tokenizer, "chat_template", None):
        return tokenizer.chat_template
    return TEMPLATES["default"]


class Encoder:
    """Renders messages with a chat template and labels only the assistant's tokens."""

    def __init__(self, tokenizer: Any, template: str):
        self.tokenizer = tokenizer
        self.template = template

    def render(self, messages: list[dict[str, str]], tools: Any = None, generation_prompt: bool = False) -> str:
        return self.tokenizer.apply_chat_template(
            messages, tools=tools, chat_template=self.template, tokenize=False,
            add_generation_prompt=generation_prompt,
        )

    def encode(self, messages: list[dict[str, str]], tools: Any = None) -> tuple[list[int], list[int]]:
        full = self.render(messages, tools)
        spans = []
        for i, m in enumerate(messages):
            if m["role"] != "assistant":
                continue
            prefix = self.render(messages[:i], tools, generation_prompt=True)
            upto = self.render(messages[: i + 1], tools)
            if not (upto.startswith(prefix) and full.startswith(upto)):
                raise DataFormatError(
                    "the chat template does not render conversations prefix by prefix, so prompt "
                    "tokens cannot be masked; choose a built-in template (template: chatml, llama3, ...)"
                )
            spans.append((len(prefix), len(upto)))
        enc = self.tokenizer(full, add_special_tokens=False, return_offsets_mapping=True)
        ids = enc["input_ids"]
        labels = [IGNORE] * len(ids)
        s = 0
        for k, (start, _end) in enumerate(enc["offset_mapping"]):
            while s < len(spans) and start >= spans[s][1]:
                s += 1
            if s < len(spans) and spans[s][0] <= start < spans[s][1]:
                labels[k] = ids[k]
        return ids, labels


@dataclass
class TokenizedData:
    train: list[Example]
    eval: list[Example]
    records: int = 0
    truncated: int = 0
    dropped: int = 0
    train_examples: int = 0  # examples in train before packing (a packed row holds several)
    warnings: list[str] = field(default_factory=list)


def build_datasets(cfg: RunConfig, tokenizer: Any, progress: Callable[[int, int], None] | None = None) -> TokenizedData:
    """Reads, checks, tokenizes, splits and (optionally) packs every dataset of the config.

    ``progress(done, total)`` is called with the records tokenized so far: once at the start,
    every few seconds, and at the end (200,000 records take about a minute on one CPU core,
    which the dashboard shows rather than a silent wait)."""
    encoder = Encoder(tokenizer, chat_template_for(cfg, tokenizer))
    examples: list[Example] = []
    out = TokenizedData(train=[], eval=[])
    loaded = []
    for spec in resolve_datasets(cfg.dataset, cfg.dataset_dir):
        records = load_records(spec)
        if cfg.max_samples:
            records = records[: cfg.max_samples]
        if not records:
            raise DataFormatError(f"dataset {spec.name!r} has no records")
        apply_detected_format(spec, records[0])
        loaded.append((spec, records))
    total = sum(len(records) for _, records in loaded)
    report = _Progress(progress, total)
    for spec, records in loaded:
        for i, record in enumerate(records):
            messages, tools = to_messages(record, spec, i)
            ids, labels = encoder.encode(messages, tools)
            out.records += 1
            report.tick(out.records)
            if len(ids) > cfg.cutoff_len:
                out.truncated += 1
                ids, labels = ids[: cfg.cutoff_len], labels[: cfg.cutoff_len]
            if all(label == IGNORE for label in labels[1:]):
                out.dropped += 1
                continue
            examples.append(Example(ids, labels, real_tokens=len(ids)))
    report.done()
    if out.truncated:
        out.warnings.append(f"{out.truncated} of {out.records} examples were longer than cutoff_len={cfg.cutoff_len} and were cut")
    if out.dropped:
        out.warnings.append(f"{out.dropped} examples had no answer tokens left within cutoff_len and were dropped")
    if not examples:
        raise DataFormatError(f"no usable examples: all {out.records} lost their answer to cutoff_len={cfg.cutoff_len}; raise cutoff_len")
    rng = random.Random(cfg.seed)
    order = list(range(len(examples)))
    rng.shuffle(order)
    n_eval = int(round(len(examples) * cfg.val_size)) if cfg.val_size else 0
    out.eval = [examples[i] for i in order[:n_eval]]
    train = [examples[i] for i in sorted(order[n_eval:])]
    out.train_examples = len(train)
    out.train = pack_examples(train, cfg.cutoff_len) if cfg.packing else train
    return out


class _Progress:
    """Calls ``progress(done, total)`` at the start, at most every PROGRESS_EVERY_S, and at the end."""

    def __init__(self, progress: Callable[[int, int], None] | None, total: int):
        self.progress, self.total = progress, total
        self.last = time.monotonic()
        self.count = 0
        if progress is not None:
            progress(0, total)

    def tick(self, done: int) -> None:
        self.count = done
        if self.progress is not None and done % 64 == 0 and time.monotonic() - self.last >= PROGRESS_EVERY_S:
            self.last = time.monotonic()
            self.progress(done, self.total)

    def done(self) -> None:
        if self.progress is not None:
            self.progress(self.count, self.total)


def pack_examples(examples: list[Example], row_len: int) -> list[Example]:
    """First-fit-decreasing packing into rows of at most ``row_len`` tokens.

    Each example keeps its own position ids (restarting at 0), which transformers turns
    into a block-diagonal causal mask, so packed examples never attend to each other.
    """
    rows: list[list[Example]] = []
    space: list[int] = []
    for ex in sorted(examples, key=lambda e: len(e.input_ids), reverse=True):
        n = len(ex.input_ids)
        for r, free in enumerate(space):
            if n <= free:
                rows[r].append(ex)
                space[r] -= n
                break
        else:
            rows.append([ex])
            space.append(row_len - n)
    packed = []
    for row in rows:
        ids, labels, pos = [], [], []
        for ex in row:
            ids += ex.input_ids
            # The first token of each example must not be predicted from the previous one.
            labels += [IGNORE] + ex.labels[1:]
            pos += list(range(len(ex.input_ids)))
        packed.append(Example(ids, labels, pos, real_tokens=len(ids)))
    return packed


@dataclass
class Batch:
    input_ids: torch.Tensor
    labels: torch.Tensor
    attention_mask: torch.Tensor | None
    position_ids: torch.Tensor | None
    real_tokens: int  # non-padding tokens
    trainable_tokens: int  # tokens that carry loss (after the shift by one)

    def to(self, device: torch.device) -> "Batch":
        nb = device.type == "cuda"

        def mv(t: torch.Tensor | None) -> torch.Tensor | None:
            return None if t is None else t.to(device, non_blocking=nb)

        return Batch(mv(self.input_ids), mv(self.labels), mv(self.attention_mask), mv(self.position_ids), self.real_tokens, self.trainable_tokens)

    def model_inputs(self) -> dict[str, torch.Tensor]:
        out = {"input_ids": self.input_ids}
        if self.attention_mask is not None:
            out["attention_mask"] = self.attention_mask
        if self.position_ids is not None:
            out["position_ids"] = self.position_ids
        return out


class Collator:
    """Pads a list of examples to the longest (rounded up to ``pad_to_multiple``)."""

    def __init__(self, pad_id: int, pad_to_multiple: int = 1, pin_memory: bool = False):
        self.pad_id = pad_id
        self.multiple = pad_to_multiple
        self.pin = pin_memory

    def __call__(self, examples: list[Example]) -> Batch:
        longest = max(len(e.input_ids) for e in examples)
        width = -(-longest // self.multiple) * self.multiple
        packed = examples[0].position_ids is not None
        ids = torch.full((len(examples), width), self.pad_id, dtype=torch.long)
        labels = torch.full((len(examples), width), IGNORE, dtype=torch.long)
        mask = torch.zeros((len(examples), width), dtype=torch.long)
        pos = torch.zeros((len(examples), width), dtype=torch.long)
        real = trainable = 0
        for r, ex in enumerate(examples):
            n = len(ex.input_ids)
            ids[r, :n] = torch.tensor(ex.input_ids)
            labels[r, :n] = torch.tensor(ex.labels)
            mask[r, :n] = 1
            pos[r, :n] = torch.tensor(ex.position_ids) if packed else torch.arange(n)
            # Padding after a packed row is one more "example" of its own, so it is masked out.
            if packed and n < width:
                pos[r, n:] = torch.arange(width - n)
            real += n
            trainable += sum(1 for x in ex.labels[1:] if x != IGNORE)
        tensors = [ids, labels, mask, pos]
        if self.pin:
            tensors = [t.pin_memory() for t in tensors]
        ids, labels, mask, pos = tensors
        if packed:
            return Batch(ids, labels, None, pos, real, trainable)
        return Batch(ids, labels, mask, None, real, trainable)


class EpochSampler:
    """This rank's share of a seeded permutation per epoch (as DistributedSampler, resumable).

    Kept by hand instead of torch's DistributedSampler because resuming needs to start in
    the middle of an epoch at an exact micro-batch, which that sampler cannot do.
    """

    def __init__(self, n: int, batch_size: int, rank: int, world: int, seed: int):
        self.n, self.bs, self.rank, self.world, self.seed = n, batch_size, rank, world, seed
        self.per_rank = -(-n // world)
        self.batches_per_epoch = -(-self.per_rank // batch_size)

    def batches(self, epoch: int, start: int = 0) -> Iterator[list[int]]:
        g = torch.Generator().manual_seed(self.seed + epoch)
        order = torch.randperm(self.n, generator=g).tolist()
        order += order[: self.per_rank * self.world - self.n]  # pad so every rank has as many
        mine = order[self.rank :: self.world]
        for b in range(start, self.batches_per_epoch):
            yield mine[b * self.bs : (b + 1) * self.bs]
