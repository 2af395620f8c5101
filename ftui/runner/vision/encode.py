"""A supervised record with images, encoded as LLaMA-Factory 0.9.5's supervised processor
encodes it (``processor/supervised.py``): the plugin expands each ``<image>`` placeholder to
the image's tokens (``ftui.runner.vision.plugins``), then the template renders the turns and
``cutoff_len`` is shared out pair by pair exactly as for text (``ftui.data.conversation``).

LLaMA-Factory cuts the expanded ids like any text, so a small ``cutoff_len`` can cut an image's
tokens (or drop a later image's entirely) while its pixels stay: the model then fails in the
first step ("Image features and image tokens do not match"). ftui makes the same ids, then
refuses such a record by name before training (``missing_image_tokens``).

An example keeps its images as files and grids (``ftui.runner.vision.batch_images``), not as
pixels: each image is opened and decoded whole here (a truncated or corrupt file is named with
its record before training), its grid computed from its size, and the pixels dropped; the
collator processes them per micro batch, as LLaMA-Factory's does. Videos likewise
(Qwen2-VL, Qwen2.5-VL, Qwen3-VL: ``ftui.runner.vision.videos``): each file's header read and
its frames all decoded once here, its grid and text from the header, its frames decoded again
per micro batch. The video processor is loaded at the first record with videos (it needs
torchvision: a run without videos never does).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ftui.i18n import _
from ftui.data.conversation import Conversation, Encoded, Renderer
from ftui.data.records import DataFormatError, DatasetSpec
from ftui.presets.vision_families import FAMILY_NAMES, IMAGE_TEMPLATES, VisionFamily, template_fits, vision_family
from ftui.runner.vision.batch_images import ExampleImages, ImageReader
from ftui.runner.vision.images import open_image
from ftui.runner.vision.plugins import plugin
from ftui.runner.vision.placeholders import expand_placeholders
from ftui.runner.vision.processor import ImageSettings, image_settings, load_image_processor

VIDEO_PLACEHOLDER = "<video>"  # LLaMA-Factory's


@dataclass
class MediaEncoded(Encoded):
    media: ExampleImages | None = None  # its image files and their grids, processed when collated
    image_tokens: int = 0  # the tokens its images expand to, before cutoff_len
    video_tokens: int = 0  # the tokens its videos expand to, before cutoff_len


class VisionEncoder:
    """Records with images -> ids, labels and the processor's tensors, for one family."""

    def __init__(self, renderer: Renderer, family: VisionFamily, image_processor: Any, settings: ImageSettings,
                 model_dir: str = "", cfg: Any = None):
        self.renderer = renderer
        self.family = family
        self.plugin = plugin(family.plugin)
        self.image_processor = image_processor
        self.settings = settings
        self.image_token_id = renderer.tokenizer.convert_tokens_to_ids(self.plugin.image_token)
        self.reader = ImageReader(self.plugin, image_processor, settings)
        self.model_dir, self.cfg = model_dir, cfg
        self._videos: Any = None  # the VideoReader, made at the first record with videos
        self.video_token_id = renderer.tokenizer.convert_tokens_to_ids(family.video_token) if family.video_token else None

    def video_reader(self) -> Any:
        """The run's VideoReader; a DataFormatError for a family ftui trains on images only."""
        if self._videos is None:
            from ftui.runner.vision.videos import VideoReader, load_video_processor, video_settings

            if not self.family.video_token:
                raise DataFormatError(_("the dataset has videos, but ftui trains {family} on images only; videos train with "
                                        "Qwen2-VL, Qwen2.5-VL and Qwen3-VL").format(family=self.family.name))
            self._videos = VideoReader(load_video_processor(self.model_dir), video_settings(self.cfg),
                                       qwen3=self.family.plugin == "qwen3_vl", seconds=self.family.name == "qwen2_5_vl")
        return self._videos

    def open_images(self, paths: list[str], spec: DatasetSpec, index: int) -> list[Any]:
        from PIL import Image

        images = []
        for path in paths:
            try:
                images.append(open_image(path))
            except (OSError, ValueError, SyntaxError, Image.DecompressionBombError) as err:
                raise DataFormatError(_("dataset {name} record {i}: the image {path} cannot be read ({error}); replace the file "
                                        "or drop the record").format(name=repr(spec.name), i=index, path=path,
                                                                     error=f"{type(err).__name__}: {err}")) from None
        return images

    def encode(self, conv: Conversation, paths: list[str], spec: DatasetSpec, index: int, videos: list[str] = ()) -> MediaEncoded:
        from ftui.data.video_files import verify_video

        grids = tuple(self.reader.grid(image) for image in self.open_images(paths, spec, index))  # the pixels dropped
        tokens = self.plugin.grid_tokens(grids, self.image_processor)
        turns = self.plugin.expand(conv.turns, tokens)
        infos, video_grids, video_tokens = (), (), 0
        if videos:
            reader = self.video_reader()
            s = reader.settings
            infos = tuple(verify_video(path, spec, index, s.video_fps, s.video_maxlen) for path in videos)
            video_grids = tuple(reader.grid(info) for info in infos)
            texts = [reader.text(info, self.plugin.vision_bos, self.plugin.vision_eos, self.family.video_token) for info in infos]
            video_tokens = sum(text.count(self.family.video_token) for text in texts)
            turns = expand_placeholders(turns, texts, VIDEO_PLACEHOLDER)
        enc = self.renderer.encode(Conversation(turns, conv.system, conv.tools))
        media = ExampleImages(tuple(paths), grids, self.reader, infos, video_grids, self._videos if videos else None)
        return MediaEncoded(enc.input_ids, enc.labels, enc.truncated, media=media, image_tokens=sum(tokens), video_tokens=video_tokens)

    def missing_image_tokens(self, enc: MediaEncoded) -> int:
        """How many of the example's image tokens ``cutoff_len`` cut (0: all there)."""
        return enc.image_tokens - sum(1 for tid in enc.input_ids if tid == self.image_token_id)

    def missing_video_tokens(self, enc: MediaEncoded) -> int:
        """How many of the example's video tokens ``cutoff_len`` cut (0: all there)."""
        return enc.video_tokens - sum(1 for tid in enc.input_ids if tid == self.video_token_id)


def vision_encoder(renderer: Renderer, template: str | None, model_type: str | None, model_dir: str, cfg: Any) -> VisionEncoder:
    """The encoder of a run whose records have images, or a DataFormatError saying why it
    cannot have one (a text model, a template without an image encoding)."""
    family = vision_family(model_type)
    if family is None:
        raise DataFormatError(_("the dataset has images, but the model {model} (model_type {model_type}) reads text only; use a "
                                "vision-language model of a family ftui trains ({families})").format(
            model=cfg.model_name_or_path, model_type=model_type, families=FAMILY_NAMES))
    if template not in IMAGE_TEMPLATES:
        raise DataFormatError(_("the dataset has images, but template {template} has no image encoding; use template: "
                                "{family_template} (LLaMA-Factory's for this model)").format(
            template=template or _("(the tokenizer's own)"), family_template=family.template))
    if not template_fits(template, family):
        raise DataFormatError(_("the dataset has images, but template {template} encodes them for another family than this "
                                "{family} model; use template: {family_template} (LLaMA-Factory's for this model)").format(
            template=template, family=family.name, family_template=family.template))
    return VisionEncoder(renderer, family, load_image_processor(model_dir), image_settings(cfg), model_dir, cfg)
