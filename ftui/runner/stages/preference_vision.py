"""The images of the preference stages' records (dpo, rm pairs; kto's answers and their
mismatched completions), encoded as LLaMA-Factory 0.9.5's pairwise and feedback processors
encode them (``processor/pairwise.py``, ``feedback.py``).

The record's images go through the family's plugin once (``ftui.runner.vision``: regularised,
the image processor's tensors, each image's token count); every sequence made from the record
(the prompt with the chosen answer, with the rejected one; kto's answer and the mismatched one)
has its ``<image>`` placeholders expanded over the prompt and that answer, and is rendered by the
template's ``encode_oneturn`` exactly as a text pair. Each of the record's examples carries the
same tensors (``Example.media``): a batch of pairs then holds the images once per row, the
chosen rows' first, as LLaMA-Factory's pairwise collator hands them to the model, and the
reference model reads the same batch. An example whose image tokens ``cutoff_len`` cut
(LLaMA-Factory keeps it and its model fails at the first step) is refused by name.
"""

from __future__ import annotations

from typing import Any

from ftui.data.conversation import Conversation
from ftui.data.records import DataFormatError, DatasetSpec
from ftui.i18n import _
from ftui.runner.hub import model_source
from ftui.runner.model import model_config, template_name_for
from ftui.runner.vision.encode import VisionEncoder, vision_encoder


class RecordImages:
    """One record's images: the processor's tensors and each image's token count."""

    def __init__(self, media: dict[str, Any], tokens: list[int]):
        self.media = media
        self.tokens = tokens

    @property
    def total(self) -> int:
        return sum(self.tokens)


class PreferenceVision:
    """The run's image side for a preference stage, made at the first record with images."""

    def __init__(self, cfg: Any, tokenizer: Any, renderer: Any):
        self.cfg = cfg
        self.tokenizer = tokenizer
        self.renderer = renderer  # the ComparisonEncoder's (None: the tokenizer's own chat template)
        self._encoder: VisionEncoder | None = None

    @property
    def encoder(self) -> VisionEncoder:
        if self._encoder is None:
            template = template_name_for(self.cfg, self.tokenizer) if self.renderer is not None else None
            model_type = model_config(self.cfg).get("model_type")
            self._encoder = vision_encoder(self.renderer, template, model_type, model_source(self.cfg.model_name_or_path), self.cfg)
        return self._encoder

    def images(self, paths: list[str], spec: DatasetSpec, index: int) -> RecordImages:
        """The record's image files, opened, regularised and processed."""
        enc = self.encoder
        media = enc.plugin.image_inputs(enc.open_images(paths, spec, index), enc.image_processor, enc.settings)
        return RecordImages(media, enc.plugin.media_tokens(media, enc.image_processor))

    def expand(self, prompt: Conversation, answer: dict[str, str], images: RecordImages) -> tuple[Conversation, dict[str, str]]:
        """The prompt and the answer with each ``<image>`` expanded to its image's tokens, counted
        over both (LLaMA-Factory's ``process_messages`` on the prompt plus that answer)."""
        turns = self.encoder.plugin.expand(prompt.turns + [answer], images.tokens)
        return Conversation(turns[:-1], prompt.system, prompt.tools), turns[-1]

    def check_kept(self, ids: list[int], images: RecordImages, spec: DatasetSpec, index: int) -> None:
        """Refuses an example whose image tokens ``cutoff_len`` cut (module doc)."""
        kept = sum(1 for tid in ids if tid == self.encoder.image_token_id)
        if kept != images.total:
            raise DataFormatError(_("dataset {name} record {i}: its images take {tokens} tokens and cutoff_len={cutoff_len} cuts "
                                    "{missing} of them, which the model cannot train on; raise cutoff_len or lower "
                                    "image_max_pixels (now {max_pixels})").format(
                name=repr(spec.name), i=index, tokens=images.total, cutoff_len=self.cfg.cutoff_len,
                missing=images.total - kept, max_pixels=self.encoder.settings.max_pixels))
