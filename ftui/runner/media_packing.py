"""Examples with images packed into rows, as LLaMA-Factory 0.9.5 packs them with
``neat_packing`` (``data/processor/supervised.py``, PackedSupervisedDatasetProcessor;
``data/collator.py``, ``_compute_rope_position_ids_with_packing``), which is what ftui's
``packing`` does for text too: the examples of a row never attend to each other.

A packed row carries the images of all its examples, in the row's order (``PackedMedia``: each
example's own ``Example.media``), so the batch's ``pixel_values`` and ``image_grid_thw`` are
the row's examples' concatenated, as LLaMA-Factory concatenates a packed row's images. Its
M-RoPE positions are computed per example: the model's ``get_rope_index`` over each example's
tokens alone with that example's grids (LLaMA-Factory's ``sequence_boundaries`` and
``image_subseq_ids``), so every example's positions start at 0 and equal those of the
example in a row of its own; the row's padding takes 0, 1, 2, ... on the three axes, as
LLaMA-Factory's padding sub-sequence (whose attention mask is all 0) does. The text row in
front is the temporal row, as LLaMA-Factory puts it there.

The attention is kept inside each example by a 4-D mask (rows x 1 x width x width): causal
within an example, nothing across (LLaMA-Factory's ``prepare_4d_attention_mask`` over its
segment ids, which its ``neat_packing`` passes with SDPA or eager attention). The mask is
what keeps examples apart here, not the position ids: transformers finds packed sequences
where the position ids restart, but M-RoPE's text row stands still across an image's tokens,
so it cannot be read that way. The row's padding is one more segment of its own (it attends
to itself; no real token attends to it), so no query row is masked whole. Boolean for SDPA
(True: attend, whatever the compute dtype); for eager attention, which adds the mask to its
scores, 0 and float32's lowest.

LLaMA-Factory's plain ``packing`` (without ``neat_packing``) lets a row's examples attend to
each other and runs M-RoPE over the row as one sequence; ftui packs every row as neat_packing
does (README, ``neat_packing``), with images as with text.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from ftui.runner.media_batch import MediaCollation, MediaInputs, row_tensors, token_types


@dataclass(frozen=True, eq=False)
class PackedMedia:
    """A packed row's images: each of its examples' ``Example.media`` (None: an example without
    images), in the row's order."""

    parts: tuple[Any, ...]  # each an ExampleImages, the tensors of a hand-made example, or None

    def __bool__(self) -> bool:
        """Whether the row has images at all (a row of text examples has none, as ``None``)."""
        return any(self.parts)


def with_stand_in(media: Any, position_ids: list[int], stand_in: dict[str, torch.Tensor]) -> PackedMedia:
    """A packed row's media (``Example.media``, its ``position_ids``) with the stand-in image
    (``ftui.runner.media_batch.stand_in``) as one more example after its examples: a micro
    batch of packed rows without images still runs the vision tower, and the block mask keeps
    the stand-in's tokens and the examples apart."""
    examples = 1 + sum(1 for p in position_ids[1:] if p == 0)
    parts = media.parts if isinstance(media, PackedMedia) else (None,) * examples
    return PackedMedia(parts + (stand_in,))


def parts_of(media: Any) -> tuple[Any, ...]:
    """The examples' media of a packed row's ``Example.media`` (a row that packing left with
    one example is one part)."""
    return media.parts if isinstance(media, PackedMedia) else (media,)


def segment_ids(lengths: list[list[int]], width: int) -> torch.Tensor:
    """rows x width: 1, 2, ... for each example of a row, the row's padding one more
    (``lengths``: each row's sequences, ``ftui.runner.data.row_sequence_lengths``)."""
    out = torch.zeros((len(lengths), width), dtype=torch.long)
    for r, row in enumerate(lengths):
        start = 0
        for s, length in enumerate(row, start=1):
            out[r, start:start + length] = s
            start += length
    return out


def block_mask(segments: torch.Tensor, eager: bool) -> torch.Tensor:
    """The 4-D attention mask of packed rows (module doc): a token attends to the tokens of its
    own segment up to itself."""
    width = segments.size(1)
    causal = torch.tril(torch.ones((width, width), dtype=torch.bool))
    allowed = (segments.unsqueeze(2) == segments.unsqueeze(1)) & causal  # rows x query x key
    allowed = allowed.unsqueeze(1)
    if not eager:
        return allowed
    return torch.where(allowed, torch.tensor(0.0), torch.tensor(torch.finfo(torch.float32).min))


def segment_positions(ids: torch.Tensor, grids: torch.Tensor | None, real: bool, collation: MediaCollation) -> torch.Tensor:
    """3 x 1 x length: one example's M-RoPE positions (the model's get_rope_index over its tokens
    alone, with its own images' grids), or a padding segment's 0, 1, 2, ... on each axis."""
    length = ids.size(1)
    if not real:
        return torch.arange(length).view(1, 1, length).expand(3, 1, length).clone()
    positions, _deltas = collation.rope_index(input_ids=ids, mm_token_type_ids=token_types(ids, collation),
                                              attention_mask=torch.ones_like(ids), image_grid_thw=grids,
                                              video_grid_thw=None)
    return positions


def collate_packed_media(media: list[Any], lengths: list[list[int]], ids: torch.Tensor, collation: MediaCollation,
                         eager: bool = False) -> tuple[MediaInputs, torch.Tensor]:
    """The images, token types and M-RoPE positions of packed rows (each row's
    ``Example.media``, its sequences' ``lengths``; ``ids``: rows x width, right-padded), and
    their 4-D attention mask (module doc)."""
    width = ids.size(1)
    row_media = [[row_tensors(p) or {} for p in parts_of(m)] for m in media]
    keys = sorted({k for parts in row_media for m in parts for k in m})
    flat = [m for parts in row_media for m in parts]
    tensors = {k: torch.cat([m[k] for m in flat if k in m], dim=0) for k in keys}
    sizes = {k: [sum(m[k].size(0) for m in parts if k in m) for parts in row_media] for k in keys}
    positions = None
    if collation.rope_index is not None:
        per_row = []
        for r in range(len(media)):
            start, pieces = 0, []
            for s, length in enumerate(lengths[r]):
                real = s < len(row_media[r])  # the segments after the examples: the row's padding
                grids = row_media[r][s].get("image_grid_thw") if real else None
                pieces.append(segment_positions(ids[r:r + 1, start:start + length], grids, real, collation))
                start += length
            per_row.append(torch.cat(pieces, dim=-1))
        mrope = torch.cat(per_row, dim=1)
        positions = torch.cat([mrope[:1], mrope], dim=0)  # LLaMA-Factory's text row in front
    inputs = MediaInputs(tensors, sizes, token_types(ids, collation), positions, collation.token_types_key)
    return inputs, block_mask(segment_ids(lengths, width), eager)
