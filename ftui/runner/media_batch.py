"""A vision-language micro batch's images: their tensors over the batch, and the positions and
token types the model reads them with, collated as LLaMA-Factory's collator does
(``data/collator.py``, MultiModalDataCollatorForSeq2Seq).

Each example carries its images as files and grids (``Example.media``: an ``ExampleImages``,
``ftui.runner.vision.batch_images``), which the collator opens, regularises and processes here,
per micro batch and in the prefetch thread, as LLaMA-Factory's collator runs its plugin (what it
costs a step is measured there); a row may also carry ready tensors (a dict: the stand-in image
below, examples built by hand). Either way a row gives the processor's tensors for its images
(``pixel_values`` [patches, d], ``image_grid_thw`` [images, 3]; videos' keys later); the batch
concatenates each key over its rows along dim 0, in row order, and remembers each row's share,
so a slice of rows (``MediaInputs.inputs(rows)``) takes exactly those rows' images. The model
also needs ``mm_token_type_ids`` (1 at image tokens, 2 at video tokens: transformers 5's
Qwen2-VL forward refuses image_grid_thw without them) and M-RoPE position ids, computed here on
the host by the model's own ``get_rope_index`` over the padded rows and their attention mask,
with the text row LLaMA-Factory puts in front (4 x rows x width).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

import torch

from ftui.i18n import _
from ftui.runner.vision.batch_images import ExampleImages


@dataclass(frozen=True)
class MediaCollation:
    """What a vision-language model's batches need from the model: its M-RoPE function, its
    image and video token ids (``ftui.runner.vlm``), and a stand-in image for a micro batch
    without any (``stand_in``)."""

    rope_index: Any
    image_token_id: int | None  # the token typed 1 (the image token; Gemma 3: <start_of_image>, as LLaMA-Factory)
    video_token_id: int | None
    stand_in_ids: tuple[int, ...] = ()  # the tokens of the stand-in image
    stand_in_media: dict[str, torch.Tensor] | None = None  # its tensors
    token_types_key: str | None = "mm_token_type_ids"  # the family's (its plugin's): Gemma 3 token_type_ids, LLaVA none
    eager_attention: bool = False  # the model adds its attention mask to the scores (packed rows' mask: ftui.runner.media_packing)


def stand_in(config: Any) -> tuple[tuple[int, ...], dict[str, torch.Tensor] | None]:
    """A micro batch without images still runs the vision tower, on one stand-in image whose
    tokens the attention mask hides and which carries no label (LLaMA-Factory's collator adds a
    64 x 64 white image "to avoid process hanging in zero3/fsdp case"): under FSDP and ZeRO-3
    every rank must gather the tower's blocks at every forward, or the ranks with images wait
    for the one without forever; under DDP an unfrozen tower's parameters would have no
    gradient. Its pixels are zeros (hidden, they change no loss and no gradient): one merged
    token, a grid of merge_size x merge_size patches."""
    vision = getattr(config, "vision_config", None)
    image = getattr(config, "image_token_id", None)
    if vision is None or image is None:
        return (), None
    merge = int(getattr(vision, "spatial_merge_size", 2))
    channels = int(getattr(vision, "in_channels", None) or getattr(vision, "in_chans", 3))
    patch = channels * int(getattr(vision, "temporal_patch_size", 2)) * int(getattr(vision, "patch_size", 14)) ** 2
    ids = tuple(t for t in (getattr(config, "vision_start_token_id", None), image, getattr(config, "vision_end_token_id", None))
                if t is not None)
    return ids, {"pixel_values": torch.zeros(merge * merge, patch), "image_grid_thw": torch.tensor([[1, merge, merge]])}


def media_collation(model: Any) -> MediaCollation | None:
    """The collation a loaded model's batches need; None for a text model."""
    from ftui.runner.vlm import base_of, family_of, rope_index

    if family_of(model) is None:
        return None
    from ftui.runner.vision.plugins import plugin

    config = base_of(model).config
    family_plugin = plugin(family_of(model).plugin)
    ids, media = family_plugin.stand_in(config) if hasattr(family_plugin, "stand_in") else stand_in(config)
    typed = getattr(config, getattr(family_plugin, "typed_token", "image_token_id"), None)  # Gemma 3: <start_of_image>
    eager = getattr(getattr(config, "text_config", config), "_attn_implementation", None) == "eager"
    return MediaCollation(rope_index(model), typed, getattr(config, "video_token_id", None), ids, media,
                          family_plugin.token_types_key, eager)


@dataclass
class MediaInputs:
    tensors: dict[str, torch.Tensor]  # each key concatenated over the rows along dim 0
    row_sizes: dict[str, list[int]]  # each row's share of each key (dim-0 sizes), host side
    mm_token_type_ids: torch.Tensor  # rows x width: 0 text, 1 image, 2 video
    position_ids: torch.Tensor | None  # 4 x rows x width: text positions, then M-RoPE's temporal, height, width
    token_types_key: str | None = "mm_token_type_ids"  # the model's keyword for mm_token_type_ids (None: not passed)

    def to(self, device: torch.device) -> "MediaInputs":
        nb = device.type == "cuda"
        return dataclasses.replace(
            self, tensors={k: t.to(device, non_blocking=nb) for k, t in self.tensors.items()},
            mm_token_type_ids=self.mm_token_type_ids.to(device, non_blocking=nb),
            position_ids=None if self.position_ids is None else self.position_ids.to(device, non_blocking=nb))

    def inputs(self, rows: slice | None = None) -> dict[str, Any]:
        """The model's keyword arguments for all rows or the contiguous ``rows``: their images'
        tensors (a key no chosen row has is left out), token types and positions."""
        if rows is None:
            out: dict[str, Any] = dict(self.tensors)
            if self.token_types_key is not None:
                out[self.token_types_key] = self.mm_token_type_ids
            if self.position_ids is not None:
                out["position_ids"] = self.position_ids
            return out
        start, stop, step = rows.indices(self.mm_token_type_ids.size(0))
        if step != 1:
            raise ValueError("media batches slice contiguous rows only")
        out = {}
        for key, tensor in self.tensors.items():
            sizes = self.row_sizes[key]
            first, last = sum(sizes[:start]), sum(sizes[:stop])
            if last > first:
                out[key] = tensor[first:last]
        if self.token_types_key is not None:
            out[self.token_types_key] = self.mm_token_type_ids[rows]
        if self.position_ids is not None:
            out["position_ids"] = self.position_ids[:, rows]
        return out


def token_types(ids: torch.Tensor, collation: MediaCollation) -> torch.Tensor:
    """1 where a row holds an image token, 2 a video token, 0 elsewhere (LLaMA-Factory's)."""
    types = torch.zeros_like(ids)
    if collation.image_token_id is not None:
        types[ids == collation.image_token_id] = 1
    if collation.video_token_id is not None:
        types[ids == collation.video_token_id] = 2
    return types


RowMedia = dict[str, torch.Tensor] | ExampleImages | None


def row_tensors(media: RowMedia) -> dict[str, torch.Tensor] | None:
    """A row's image tensors: an example's files processed now, or the tensors it carries."""
    return media.tensors() if hasattr(media, "tensors") else media  # ExampleImages, ExampleAudios


def collate_media(rows: list[RowMedia], ids: torch.Tensor, mask: torch.Tensor,
                  collation: MediaCollation | None) -> MediaInputs:
    """The batch's images from each row's ``Example.media`` (None for a row without any), with
    its padded ``ids`` and attention ``mask`` (rows x width, right-padded)."""
    if collation is None:
        raise ValueError(_("these examples have images, but the model is not a vision-language model ftui trains; "
                           "use a model of a family in ftui.presets.vision_families, or a dataset without images"))
    media = [row_tensors(m) for m in rows]
    keys = sorted({k for m in media if m for k in m})
    tensors = {k: torch.cat([m[k] for m in media if m and k in m], dim=0) for k in keys}
    sizes = {k: [(m[k].size(0) if m and k in m else 0) for m in media] for k in keys}
    types = token_types(ids, collation)
    positions = None
    if collation.rope_index is not None:
        grids = {k: tensors.get(k) for k in ("image_grid_thw", "video_grid_thw")}
        seconds = {"second_per_grid_ts": tensors["second_per_grid_ts"]} if "second_per_grid_ts" in tensors else {}  # Qwen2.5-VL
        position_ids, _deltas = collation.rope_index(input_ids=ids, mm_token_type_ids=types, attention_mask=mask,
                                                     image_grid_thw=grids["image_grid_thw"],
                                                     video_grid_thw=grids["video_grid_thw"], **seconds)
        positions = torch.cat([position_ids[:1], position_ids], dim=0)  # LLaMA-Factory's text row in front
    return MediaInputs(tensors, sizes, types, positions, collation.token_types_key)


def pinned(media: MediaInputs) -> MediaInputs:
    """The same tensors in pinned host memory (a CUDA run's prefetched batches)."""
    return dataclasses.replace(
        media, tensors={k: t.pin_memory() for k, t in media.tensors.items()}, mm_token_type_ids=media.mm_token_type_ids.pin_memory(),
        position_ids=None if media.position_ids is None else media.position_ids.pin_memory())
