"""The predict job's records with images and videos (a vision-language run's), prompted as LLaMA-Factory
0.9.5's unsupervised processor prompts them (``processor/unsupervised.py``): the family's plugin
expands each ``<image>`` of the prompt and the answer to the image's tokens
(``ftui.runner.vision``), and each ``<video>`` as training does (the Qwen families:
``ftui.runner.vision.videos``, the run's video keys), then the template's ``encode_oneturn`` and ``cutoff_len`` cut them as
for text. A prompt whose image tokens the cut would lose is refused by name (the model would
fail on it), as training refuses such an example.

The pixels are not kept for the whole dataset (a thousand images are gigabytes of tensors): a
prompt keeps its files, and its batch encodes them again when it is generated (``batch_media``).
"""

from __future__ import annotations

from typing import Any

from ftui.data.conversation import Conversation, ConversationError
from ftui.data.records import DataFormatError, DatasetSpec
from ftui.i18n import _
from ftui.runner.vision.encode import VisionEncoder, vision_encoder
from ftui.runner.vision.placeholders import expand_placeholders


class PromptImages:
    """The run's image encoder, made at the first record with images."""

    def __init__(self, cfg: Any, renderer: Any, template: str | None):
        self.cfg, self.renderer, self.template = cfg, renderer, template
        self._vision: VisionEncoder | None = None

    @property
    def vision(self) -> VisionEncoder:
        if self._vision is None:
            from ftui.runner.hub import model_source
            from ftui.runner.model import model_config

            model_type = model_config(self.cfg).get("model_type")
            self._vision = vision_encoder(self.renderer, self.template, model_type, model_source(self.cfg.model_name_or_path),
                                          self.cfg)
        return self._vision

    def media(self, paths: list[str], spec: DatasetSpec, index: int, videos: tuple[Any, ...] = ()) -> dict[str, Any]:
        """The processor's tensors for one record's images and videos (``videos``: their
        headers, ``expanded``'s, decoded now)."""
        vision = self.vision
        out = vision.plugin.image_inputs(vision.open_images(paths, spec, index), vision.image_processor, vision.settings) if paths else {}
        if videos:
            reader = vision.video_reader()
            out = {**out, **reader.tensors(videos, tuple(reader.grid(info) for info in videos))}
        return out

    def expanded(self, conv: Conversation, paths: list[str], spec: DatasetSpec, index: int,
                 videos: list[str] = ()) -> tuple[Conversation, int, int, tuple[Any, ...]]:
        """The conversation with its placeholders expanded, the image and video tokens it
        holds, and its videos' headers (each checked and decoded whole, as training checks it)."""
        from ftui.data.video_files import verify_video
        from ftui.runner.vision.encode import VIDEO_PLACEHOLDER

        vision = self.vision
        tokens = vision.plugin.media_tokens(self.media(paths, spec, index), vision.image_processor) if paths else []
        infos: tuple[Any, ...] = ()
        texts: list[str] = []
        if videos:
            reader = vision.video_reader()
            s = reader.settings
            infos = tuple(verify_video(path, spec, index, s.video_fps, s.video_maxlen) for path in videos)
            texts = [reader.text(info, vision.plugin.vision_bos, vision.plugin.vision_eos, vision.family.video_token) for info in infos]
        try:
            turns = vision.plugin.expand(conv.turns, tokens)
            turns = expand_placeholders(turns, texts, VIDEO_PLACEHOLDER)
        except ConversationError as err:
            raise DataFormatError(_("dataset {name} record {i}: {error}").format(name=repr(spec.name), i=index, error=err)) from None
        video_tokens = sum(text.count(vision.family.video_token) for text in texts)
        return Conversation(turns, conv.system, conv.tools), sum(tokens), video_tokens, infos

    def check_cut(self, prompt: list[int], tokens: int, spec: DatasetSpec, index: int, video_tokens: int = 0) -> None:
        """Refuses a prompt that ``cutoff_len`` cut inside its images' or videos' tokens."""
        kept = sum(1 for tid in prompt if tid == self.vision.image_token_id)
        if kept != tokens:
            raise DataFormatError(_("dataset {name} record {i}: its images take {tokens} tokens and cutoff_len={cutoff_len} cuts "
                                    "{missing} of them, which the model cannot read; raise cutoff_len or lower "
                                    "image_max_pixels (now {max_pixels})").format(
                name=repr(spec.name), i=index, tokens=tokens, cutoff_len=self.cfg.cutoff_len, missing=tokens - kept,
                max_pixels=self.vision.settings.max_pixels))
        kept = sum(1 for tid in prompt if tid == self.vision.video_token_id) if video_tokens else 0
        if kept != video_tokens:
            raise DataFormatError(_("dataset {name} record {i}: its videos take {tokens} tokens and cutoff_len={cutoff_len} cuts "
                                    "{missing} of them, which the model cannot read; raise cutoff_len, or lower video_max_pixels, "
                                    "video_fps or video_maxlen").format(
                name=repr(spec.name), i=index, tokens=video_tokens, cutoff_len=self.cfg.cutoff_len, missing=video_tokens - kept))


def batch_media(images: PromptImages | None, batch: list[dict[str, Any]]) -> list[dict[str, Any] | None] | None:
    """Each prompt's images' and videos' tensors for a batch (None where it has none; None for a batch of text)."""
    if images is None or not any(x.get("images") or x.get("videos") for x in batch):
        return None
    return [images.media(x.get("images", []), x["spec"], x["record"], x.get("video_infos", ()))
            if x.get("images") or x.get("videos") else None for x in batch]
