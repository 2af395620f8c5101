"""Videos sent to a loaded model (the chat worker): placed in the messages as LLaMA-Factory
0.9.5's chat engine places them (``HuggingfaceEngine._process_args``: each ``<video>`` is one
video, in order; without any, a request's videos go in front of its first message, ahead of
its images), expanded and decoded as in training (``ftui.runner.vision.videos``: the run's
video_fps, video_maxlen, video_max_pixels and video_min_pixels; Qwen3-VL's timestamps), and
handed to ``generate`` with the prompt: ``pixel_values_videos``, ``video_grid_thw`` and, for
Qwen2.5-VL, ``second_per_grid_ts``, from which the model's ``generate`` computes the M-RoPE
positions (with ``mm_token_type_ids``: 2 at video tokens).

Only the Qwen families read videos (their family's ``video_token``); an image-only family
(LLaVA-1.5, Gemma 3, InternVL 3), a text model, or a machine without torchvision is refused by
name, and a file that is missing or not a video is named (``ftui.data.video_files``). The video
processor is loaded at the first video (it needs torchvision: a chat with images never does).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ftui.data.conversation import ConversationError
from ftui.data.media_files import MediaError
from ftui.data.records import DataFormatError
from ftui.i18n import _
from ftui.runner.chat_images import TEXT_ONLY, ImageRequestError
from ftui.runner.vision.placeholders import expand_placeholders

VIDEO_PLACEHOLDER = "<video>"  # LLaMA-Factory's
VIDEO_FAMILIES = "Qwen2-VL, Qwen2.5-VL, Qwen3-VL"


class ChatVideos:
    """A Qwen vision-language model's video side: its family, where its video processor is,
    and the run's video settings; the VideoReader is made at the first video."""

    def __init__(self, family: Any, folders: list[Path], cfg: Any):
        from ftui.runner.vision.plugins import plugin

        self.family, self.folders, self.cfg = family, folders, cfg
        self.plugin = plugin(family.plugin)  # its vision_bos / vision_eos around a video's tokens
        self._reader: Any = None

    def reader(self) -> Any:
        """The VideoReader (ftui.runner.vision.videos) of the first folder with a video
        processor's settings; ImageRequestError saying to install torchvision, or what is missing."""
        if self._reader is None:
            from ftui.runner.vision.videos import VideoReader, load_video_processor, video_settings

            found = [f for f in self.folders
                     if (f / "video_preprocessor_config.json").is_file() or (f / "preprocessor_config.json").is_file()]
            if not found:
                raise ImageRequestError(_("the model has no video_preprocessor_config.json or preprocessor_config.json (its video "
                                          "processor's settings) in {folders}; copy it from the base model's folder").format(
                    folders=", ".join(str(f) for f in self.folders)))
            try:
                processor = load_video_processor(str(found[0]))
            except DataFormatError as err:
                raise ImageRequestError(str(err)) from None
            self._reader = VideoReader(processor, video_settings(self.cfg), qwen3=self.family.plugin == "qwen3_vl",
                                       seconds=self.family.name == "qwen2_5_vl")
        return self._reader

    def expand(self, messages: list[dict[str, Any]], paths: list[str]) -> tuple[list[dict[str, Any]], dict[str, Any]]:
        """The messages with each ``<video>`` replaced by its video's tokens (as training
        expands it), and the videos' tensors; ImageRequestError naming a bad file or a count
        of placeholders that does not match."""
        from ftui.data.video_files import checked_video_file

        reader = self.reader()
        s = reader.settings
        try:
            infos = tuple(checked_video_file(str(Path(p).expanduser().absolute()), s.video_fps, s.video_maxlen) for p in paths)
        except MediaError as err:
            raise ImageRequestError(str(err)) from None
        texts = [reader.text(info, self.plugin.vision_bos, self.plugin.vision_eos, self.family.video_token) for info in infos]
        try:
            messages = expand_placeholders(messages, texts, VIDEO_PLACEHOLDER)
        except ConversationError as err:
            raise ImageRequestError(_("the messages: {error}").format(error=err)) from None
        try:
            tensors = reader.tensors(infos, tuple(reader.grid(info) for info in infos))
        except DataFormatError as err:
            raise ImageRequestError(str(err)) from None
        return messages, tensors


def chat_videos(family: Any, folders: list[Path], cfg: Any) -> tuple[ChatVideos | None, str | None]:
    """The video side of a model of vision ``family``, or (None, why) where it has none."""
    if family is None:
        return None, TEXT_ONLY
    if "videos" not in family.media or not family.video_token:
        return None, _("this {family} model reads {media}, not videos: ftui chats with videos with {families}; send the "
                       "message without videos").format(family=family.name, media=", ".join(family.media), families=VIDEO_FAMILIES)
    return ChatVideos(family, list(dict.fromkeys(folders)), cfg), None


def text_only_videos(label: str) -> str:
    return _("{model} reads text only, so it cannot take videos; chat with a vision-language model that reads videos ({families}) "
             "or send the message without videos").format(model=label, families=VIDEO_FAMILIES)
