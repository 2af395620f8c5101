"""What every token stage shares: records in, examples, the split, packing, batches.

A stage (``ftui.runner.stages``) turns records into :class:`Example` rows (input ids and
labels, ``IGNORE`` where no loss is taken); this module loads the records
(``ftui.data.registry``, ``ftui.data.dataset_files``: LLaMA-Factory's registry and files; hub
names through ``datasets``), splits off the eval share, packs short rows and collates batches.
The collator counts real (non-padding), labelled and predicted tokens on the host, so the
training loop needs no device sync to know them.
"""

from __future__ import annotations

import dataclasses
import random
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator

import torch

from ftui.config.schema import RunConfig
from ftui.i18n import _
from ftui.data.dataset_files import HubDataset, read_records
from ftui.data.records import DataFormatError, DatasetSpec
from ftui.data.registry import resolve_datasets
from ftui.data.stage_formats import check_format
from ftui.runner.media_batch import MediaCollation, MediaInputs, collate_media, pinned
from ftui.runner.media_packing import PackedMedia, collate_packed_media, with_stand_in

__all__ = ["DataFormatError", "IGNORE", "Example", "TokenizedData", "load_all", "split_eval", "pack_examples", "Collator", "Batch", "EpochSampler", "run_sampler"]

IGNORE = -100
PROGRESS_EVERY_S = 3.0  # how often build_datasets reports while it tokenizes


@dataclass
class Example:
    input_ids: list[int]
    labels: list[int]
    position_ids: list[int] | None = None  # set for packed rows: restarts at each example
    real_tokens: int = 0
    media: dict[str, Any] | None = None  # the processor's tensors for this example's images (pixel_values, image_grid_thw)


def load_records(spec: DatasetSpec) -> list[dict[str, Any]]:
    """Every record of a dataset; hub names go through `datasets` (cached by it)."""
    try:
        return read_records(spec)
    except HubDataset:
        import datasets

        ds = datasets.load_dataset(spec.hf_hub_url, spec.subset, split=spec.split)
        return [dict(r) for r in ds]


@dataclass
class TokenizedData:
    train: list[Example]
    eval: list[Example]
    records: int = 0
    truncated: int = 0
    dropped: int = 0
    train_examples: int = 0  # sequences in train before packing (a packed row holds several; a preference example is two)
    warnings: list[str] = field(default_factory=list)


def load_all(cfg: RunConfig, names: str | None = None) -> list[tuple[DatasetSpec, list[dict[str, Any]]]]:
    """Every dataset of ``names`` (default: the config's ``dataset``) with its records (at most
    ``max_samples`` each), mixed as ``mix_strategy`` says."""
    loaded = []
    for spec in resolve_datasets(cfg.dataset if names is None else names, cfg.dataset_dir):
        records = load_records(spec)
        if cfg.max_samples:
            records = records[: cfg.max_samples]
        if not records:
            raise DataFormatError(_("dataset {name} has no records").format(name=repr(spec.name)))
        check_format(spec, records[0], cfg.stage)
        loaded.append((spec, records))
    return mix_datasets(loaded, cfg)


# mix_strategy -> the stopping strategy of `datasets.interleave_datasets` (as LLaMA-Factory maps them)
STOPPING = {"interleave_under": "first_exhausted", "interleave_over": "all_exhausted",
            "interleave_once": "all_exhausted_without_replacement"}


def mix_datasets(loaded: list[tuple[DatasetSpec, list[dict[str, Any]]]], cfg: RunConfig) -> list[tuple[DatasetSpec, list[dict[str, Any]]]]:
    """Several datasets in LLaMA-Factory's order: one after the other (concat), or interleaved
    by ``datasets.interleave_datasets`` with the run's seed and ``interleave_probs``. The
    interleaving is computed over the record indices only (its order depends on nothing else),
    so the records keep their own formats; the result is a list of runs of consecutive records
    from one dataset, which a stage encodes as it encodes whole datasets."""
    if cfg.mix_strategy == "concat" or len(loaded) < 2:
        return loaded
    import datasets

    parts = [datasets.Dataset.from_dict({"d": [k] * len(records), "i": list(range(len(records)))})
             for k, (_spec, records) in enumerate(loaded)]
    probs = [float(p) for p in (cfg.interleave_probs or "").split(",") if p.strip()] or None
    try:
        mixed = datasets.interleave_datasets(parts, probabilities=probs, seed=cfg.seed, stopping_strategy=STOPPING[cfg.mix_strategy])
    except ValueError as err:  # an older `datasets` without this stopping strategy
        raise DataFormatError(_("mix_strategy {strategy} is not possible with datasets {version}: {error}").format(
            strategy=cfg.mix_strategy, version=datasets.__version__, error=err)) from None
    runs: list[tuple[DatasetSpec, list[dict[str, Any]]]] = []
    for d, i in zip(mixed["d"], mixed["i"]):
        spec, records = loaded[d]
        if runs and runs[-1][0] is spec:
            runs[-1][1].append(records[i])
        else:
            runs.append((spec, [records[i]]))
    return runs


# --- tokenized_path: the encoded examples saved with `datasets` (save_to_disk), as LLaMA-Factory saves them

TOKENIZED_TRAIN, TOKENIZED_EVAL = "train", "validation"


def example_columns(example: Any) -> dict[str, Any]:
    """One example as a row of a saved table: input_ids and labels, or a preference example's own columns."""
    if hasattr(example, "columns"):
        return example.columns()
    return {"input_ids": example.input_ids, "labels": example.labels}


def token_examples(ds: Any, path: str) -> list[Example]:
    """Examples of a saved table with input_ids and labels (pre-training data without labels learns every token)."""
    if "input_ids" not in ds.column_names:
        raise DataFormatError(_("tokenized_path {path} has no input_ids column (columns: {columns})").format(
            path=path, columns=", ".join(ds.column_names)))
    ids = ds["input_ids"]
    labels = ds["labels"] if "labels" in ds.column_names else ids
    return [Example(list(i), list(l), real_tokens=len(i)) for i, l in zip(ids, labels)]


def save_tokenized(path: str, train: list[Any], eval_: list[Any]) -> None:
    """Writes the encoded (not yet packed) train and eval examples: a DatasetDict with
    input_ids and labels (a preference stage's pairs: chosen_/rejected_ columns; KTO's: kl_
    columns and kto_tags), the layout LLaMA-Factory's tokenized_path has, so either can read
    the other's. Written beside and renamed, so a crash never leaves half a folder."""
    import shutil
    from pathlib import Path

    import datasets

    def table(examples: list[Any]) -> datasets.Dataset:
        return datasets.Dataset.from_list([example_columns(e) for e in examples])

    parts = {TOKENIZED_TRAIN: table(train)}
    if eval_:
        parts[TOKENIZED_EVAL] = table(eval_)
    final = Path(path).expanduser()
    tmp = final.with_name(final.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    datasets.DatasetDict(parts).save_to_disk(str(tmp))
    if final.exists():
        final.rmdir()  # validation let only an empty folder through
    tmp.rename(final)


def load_tokenized(path: str, parse: Callable[[Any, str], list[Any]] = token_examples) -> tuple[list[Any], list[Any]]:
    """(train, eval) examples from a tokenized_path folder (ftui's or LLaMA-Factory's), each
    split's table read by ``parse`` (the stage's: token_examples, or a preference stage's)."""
    import datasets

    saved = datasets.load_from_disk(str(path))
    if not isinstance(saved, datasets.DatasetDict) or TOKENIZED_TRAIN not in saved:
        raise DataFormatError(_("tokenized_path {path} holds no train split; give a folder an earlier run wrote").format(path=path))

    evals = [parse(saved[k], path) for k in saved if k.startswith(TOKENIZED_EVAL)]
    return parse(saved[TOKENIZED_TRAIN], path), [e for part in evals for e in part]


def has_tokenized(path: str | None) -> bool:
    from pathlib import Path

    from ftui.data.registry import TOKENIZED_MARKER

    return bool(path) and (Path(path).expanduser() / TOKENIZED_MARKER).is_file()


def split_eval(examples: list[Example], cfg: RunConfig) -> tuple[list[Example], list[Example]]:
    """(train, eval): a seeded ``val_size`` share for eval; train keeps the data's order."""
    rng = random.Random(cfg.seed)
    order = list(range(len(examples)))
    rng.shuffle(order)
    n_eval = int(round(len(examples) * cfg.val_size)) if cfg.val_size else 0
    return [examples[i] for i in sorted(order[n_eval:])], [examples[i] for i in order[:n_eval]]


class Progress:
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


def pack_examples(examples: list[Example], row_len: int, join: Callable[[list[Example]], Example] | None = None) -> list[Example]:
    """First-fit-decreasing packing into rows of at most ``row_len`` tokens, each row made by
    ``join`` (default ``join_row``; examples with images: ``ftui.runner.media_packing``).

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
    return [(join or join_row)(row) for row in rows]


def join_row(examples: list[Example]) -> Example:
    """Examples laid end to end in one row, each kept apart: its own position ids (restarting
    at 0, or a packed row's own), and its first token not predicted from the previous
    example's last (that label is IGNORE). The per-example math is unchanged: a token's
    next-token target is the same as in the example's own row, and the attention that reads
    the positions (a block-diagonal causal mask, or each example's own span) sees only its
    example. What packing does to a row's examples, and padding-free batches to a micro
    batch's rows."""
    if any(ex.media for ex in examples):
        raise ValueError(media_rows_message())
    ids: list[int] = []
    labels: list[int] = []
    pos: list[int] = []
    for ex in examples:
        ids += ex.input_ids
        labels += [IGNORE] + ex.labels[1:]
        pos += ex.position_ids if ex.position_ids is not None else list(range(len(ex.input_ids)))
    return Example(ids, labels, pos, real_tokens=len(ids))


def join_media_row(examples: list[Example]) -> Example:
    """Examples with images laid end to end as ``join_row`` lays examples, their images kept
    in the row's order (``ftui.runner.media_packing.PackedMedia``): a packed row of a
    vision-language model."""
    row = join_row([dataclasses.replace(ex, media=None) for ex in examples])
    return dataclasses.replace(row, media=PackedMedia(tuple(ex.media for ex in examples)))


def media_rows_message() -> str:
    return _("examples with images are collated in padded rows only, packed ones included (M-RoPE positions are per "
             "row, ftui.runner.media_packing); set padding_free false")


@dataclass
class Batch:
    input_ids: torch.Tensor
    labels: torch.Tensor
    attention_mask: torch.Tensor | None
    position_ids: torch.Tensor | None
    real_tokens: int  # non-padding tokens
    trainable_tokens: int  # tokens labelled for training (pt: every token; sft: the answers)
    loss_tokens: int  # positions whose next token is predicted with loss (labels after the shift by one): the loss's normaliser
    # flash_attn fa2 (ftui.runner.attention): the cumulative lengths (int32) of the batch's
    # sequences, row after row (each example, and a row's trailing padding as one of its own);
    # how many of them each row holds; the longest of them (a bound for any rows' subset)
    cu_seqlens: torch.Tensor | None = None
    row_sequences: list[int] | None = None
    max_seqlen: int = 0
    # where the loss is taken: the flat indices (into labels[:, 1:], row after row) of the
    # positions with a next-token label, counted on the host so the output projection computes
    # logits there alone without a device sync (ftui.runner.loss)
    loss_positions: torch.Tensor | None = None
    # a vision-language batch: its images' tensors, token types and M-RoPE positions (ftui.runner.media_batch)
    media: MediaInputs | None = None

    def to(self, device: torch.device) -> "Batch":
        nb = device.type == "cuda"

        def mv(t: torch.Tensor | None) -> torch.Tensor | None:
            return None if t is None else t.to(device, non_blocking=nb)

        return dataclasses.replace(self, input_ids=mv(self.input_ids), labels=mv(self.labels), attention_mask=mv(self.attention_mask),
                                   position_ids=mv(self.position_ids), cu_seqlens=mv(self.cu_seqlens),
                                   loss_positions=mv(self.loss_positions),
                                   media=None if self.media is None else self.media.to(device))

    def model_inputs(self, rows: slice | None = None) -> dict[str, Any]:
        """The model's keyword arguments for all rows, or for the contiguous ``rows``; with the
        sequences' lengths when the batch carries them (fa2), sliced for those rows on the
        device (no host sync): the rows' tokens are contiguous in the flattened batch. A
        vision-language batch adds the rows' images, token types and M-RoPE positions."""
        pick = (lambda t: t) if rows is None else (lambda t: t[rows])  # noqa: E731
        out: dict[str, Any] = {"input_ids": pick(self.input_ids)}
        if self.attention_mask is not None:
            out["attention_mask"] = pick(self.attention_mask)
        if self.position_ids is not None:
            out["position_ids"] = pick(self.position_ids)
        if self.cu_seqlens is not None and self.row_sequences is not None:
            cu = self.cu_seqlens
            if rows is not None:
                start, stop, step = rows.indices(len(self.row_sequences))
                assert step == 1, "sequence lengths slice for contiguous rows only"
                first, last = sum(self.row_sequences[:start]), sum(self.row_sequences[:stop])
                cu = cu[first:last + 1] - cu[first]
            out.update(cu_seq_lens_q=cu, cu_seq_lens_k=cu, max_length_q=self.max_seqlen, max_length_k=self.max_seqlen)
        if self.media is not None:
            out.update(self.media.inputs(rows))
        return out


def row_sequence_lengths(example: Example, width: int) -> list[int]:
    """The sequences of one padded row: each packed example (its positions restart at 0), or
    the whole example, then the trailing padding as one more (never attended by the others)."""
    pos, n = example.position_ids, len(example.input_ids)
    if pos is None:
        lengths = [n]
    else:
        starts = [0] + [i for i in range(1, n) if pos[i] == 0]
        lengths = [b - a for a, b in zip(starts, starts[1:] + [n])]
    return lengths + ([width - n] if n < width else [])


class Collator:
    """Pads a list of examples to the longest (rounded up to ``pad_to_multiple``); with
    ``sequence_lengths`` (flash_attn fa2, or SDPA run per example) the batch also carries its
    sequences' cumulative lengths.

    ``padding_free``: the micro batch's examples (or packed rows) are laid end to end in one
    row instead (``join_row``), with nothing to pad but up to ``pad_to_multiple``: the same
    examples, positions and labels, the same counts, so the same losses, without computing
    padding (TRL's padding-free batches, transformers' DataCollatorWithFlattening).
    ``loss_positions``: the batch names the positions that carry loss (``Batch.loss_positions``).
    ``media``: a vision-language model's collation; examples with images then give a batch with
    them (``Batch.media``; padded rows only: their M-RoPE positions are per row); packed rows
    with images get their examples' positions and a 4-D mask between their examples
    (``ftui.runner.media_packing``)."""

    def __init__(self, pad_id: int, pad_to_multiple: int = 1, pin_memory: bool = False, sequence_lengths: bool = False,
                 padding_free: bool = False, loss_positions: bool = False, media: MediaCollation | None = None):
        self.pad_id = pad_id
        self.multiple = pad_to_multiple
        self.pin = pin_memory
        self.sequence_lengths = sequence_lengths
        self.padding_free = padding_free
        self.loss_positions = loss_positions
        self.media = media

    def __call__(self, examples: list[Example]) -> Batch:
        real = trainable = predicted = 0
        for ex in examples:  # counted on the examples as given: joining them changes no count
            real += len(ex.input_ids)
            labelled = sum(1 for x in ex.labels[1:] if x != IGNORE)
            predicted += labelled
            trainable += labelled + (ex.labels[0] != IGNORE if ex.labels else 0)
        rows = [join_row(examples)] if self.padding_free else examples
        hidden = 0  # a stand-in image's tokens at the end of row 0, masked out (ftui.runner.media_batch.stand_in)
        if (self.media is not None and self.media.stand_in_media is not None and not self.padding_free
                and not any(ex.media for ex in rows)):
            hidden = len(self.media.stand_in_ids)
            first = rows[0]
            media, pos = self.media.stand_in_media, first.position_ids
            if pos is not None:  # a packed row: the stand-in is one more example of it, kept apart by the block mask
                media, pos = with_stand_in(first.media, pos, media), pos + list(range(hidden))
            rows = [dataclasses.replace(first, input_ids=first.input_ids + list(self.media.stand_in_ids),
                                        labels=first.labels + [IGNORE] * hidden, position_ids=pos, media=media), *rows[1:]]
        longest = max(len(e.input_ids) for e in rows)
        width = -(-longest // self.multiple) * self.multiple
        packed = rows[0].position_ids is not None
        ids = torch.full((len(rows), width), self.pad_id, dtype=torch.long)
        labels = torch.full((len(rows), width), IGNORE, dtype=torch.long)
        mask = torch.zeros((len(rows), width), dtype=torch.long)
        pos = torch.zeros((len(rows), width), dtype=torch.long)
        for r, ex in enumerate(rows):
            n = len(ex.input_ids)
            ids[r, :n] = torch.tensor(ex.input_ids)
            labels[r, :n] = torch.tensor(ex.labels)
            mask[r, :n] = 1
            pos[r, :n] = torch.tensor(ex.position_ids) if packed else torch.arange(n)
            # Padding after a packed row is one more "example" of its own, so it is masked out.
            if packed and n < width:
                pos[r, n:] = torch.arange(width - n)
        if hidden:
            mask[0, len(rows[0].input_ids) - hidden:len(rows[0].input_ids)] = 0
        tensors = [ids, labels, mask, pos]
        cu, counts = None, None
        if self.sequence_lengths:
            per_row = [row_sequence_lengths(ex, width) for ex in rows]
            counts = [len(lengths) for lengths in per_row]
            longest_sequence = max(max(lengths) for lengths in per_row)  # FlashAttention sizes its grid by it
            cu = torch.tensor([0] + [length for lengths in per_row for length in lengths], dtype=torch.int32).cumsum(0, dtype=torch.int32)
            tensors.append(cu)
        if self.loss_positions:
            tensors.append((labels[:, 1:].reshape(-1) != IGNORE).nonzero().squeeze(1))
        if self.pin:
            tensors = [t.pin_memory() for t in tensors]
        ids, labels, mask, pos = tensors[:4]
        extra: dict[str, Any] = dict(cu_seqlens=tensors[4], row_sequences=counts, max_seqlen=longest_sequence) if cu is not None else {}
        if self.loss_positions:
            extra["loss_positions"] = tensors[-1]
        if packed and any(ex.media for ex in rows) and not self.padding_free and self.media is not None:
            lengths = [row_sequence_lengths(ex, width) for ex in rows]
            media, block = collate_packed_media([ex.media for ex in rows], lengths, ids, self.media, self.media.eager_attention)
            extra["media"] = pinned(media) if self.pin else media
            text_pos = pos if media.position_ids is None else None  # LLaVA, InternVL: each example's own 0, 1, 2, ...
            return Batch(ids, labels, block.pin_memory() if self.pin else block, text_pos, real, trainable, predicted, **extra)
        if any(ex.media for ex in rows):
            if packed:
                raise ValueError(media_rows_message())
            extra["media"] = collate_media([ex.media for ex in rows], ids, mask, self.media)
            if self.pin:
                extra["media"] = pinned(extra["media"])
        if packed:
            return Batch(ids, labels, None, pos, real, trainable, predicted, **extra)
        return Batch(ids, labels, mask, None, real, trainable, predicted, **extra)


class EpochSampler:
    """This rank's share of a seeded permutation per epoch (as DistributedSampler, resumable).

    Kept by hand instead of torch's DistributedSampler because resuming needs to start in
    the middle of an epoch at an exact micro-batch, which that sampler cannot do.
    """

    def __init__(self, n: int, batch_size: int, rank: int, world: int, seed: int, drop_last: bool = False):
        self.n, self.bs, self.rank, self.world, self.seed = n, batch_size, rank, world, seed
        self.per_rank = -(-n // world)
        # drop_last (transformers' dataloader_drop_last): a rank's short last micro batch is not trained on
        self.batches_per_epoch = self.per_rank // batch_size if drop_last else -(-self.per_rank // batch_size)

    def batches(self, epoch: int, start: int = 0) -> Iterator[list[int]]:
        g = torch.Generator().manual_seed(self.seed + epoch)
        order = torch.randperm(self.n, generator=g).tolist()
        order += order[: self.per_rank * self.world - self.n]  # pad so every rank has as many
        mine = order[self.rank :: self.world]
        for b in range(start, self.batches_per_epoch):
            yield mine[b * self.bs : (b + 1) * self.bs]


def run_sampler(cfg: Any, n: int, rank: int, world: int) -> EpochSampler:
    """The run's sampler: its micro batch, data_seed (else seed) and dataloader_drop_last."""
    seed = cfg.seed if cfg.data_seed is None else cfg.data_seed
    return EpochSampler(n, cfg.per_device_train_batch_size, rank, world, seed, drop_last=cfg.dataloader_drop_last)
