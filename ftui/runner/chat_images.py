"""Images sent to a loaded model (the chat worker; the predict job's records go through the same
plugin): placed in the messages as LLaMA-Factory 0.9.5's chat engine places them, encoded by
the family's plugin (``ftui.runner.vision``), and handed to ``generate`` with the prompt.

Where the images go (LLaMA-Factory's ``HuggingfaceEngine._process_args``): each ``<image>`` in
the text is one image, in order; a message whose text has none gets its images' placeholders
at its start (LLaMA-Factory puts a request's images in front of its first message when no
message has a placeholder; ftui's chat keeps each image with the message it was sent with,
which is the same for a conversation's first message). The plugin then expands each
placeholder to the image's ``<|vision_start|><|image_pad|>...<|vision_end|>`` tokens, and the
run's template renders the turns as for text. Files are checked with ftui.data.media_files
(missing, not an image, huge, truncated: a message naming the file).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ftui.data.conversation import ConversationError
from ftui.data.media_files import MediaFileError, load_image_file
from ftui.data.records import DataFormatError
from ftui.i18n import _
from ftui.runner.vision.plugins import IMAGE_PLACEHOLDER, plugin
from ftui.runner.vision.processor import ImageSettings, image_settings, load_image_processor

TEXT_ONLY = "text-only"  # ChatImages.why for a model without a vision tower


class ImageRequestError(ValueError):
    """Images a request cannot have (bad files, placeholders that do not match, a text model)."""


def placed(messages: list[dict[str, Any]], request_images: list[str] | None, key: str = "images",
           mark: str = IMAGE_PLACEHOLDER) -> tuple[list[dict[str, Any]], list[str]]:
    """The messages with every image's placeholder in its text (``key`` dropped, any other key
    kept), and the image paths in placeholder order. Images come per message (``"images"``
    beside ``content``) or for the whole request (LLaMA-Factory's form: in front of the first
    message unless a message has placeholders), not both. ``key="videos"``, ``mark="<video>"``:
    the same for videos (placed after the images, so a request's videos go in front of its
    images, as in LLaMA-Factory's chat engine)."""
    per_message = any(m.get(key) for m in messages)
    if request_images and per_message:
        raise ImageRequestError(_("give {media} either with each message or with the request, not both").format(media=key))
    out, paths = [], []
    for m in messages:
        images = m.get(key) or []
        if not isinstance(images, list) or not all(isinstance(p, str) and p for p in images):
            raise ImageRequestError(_("a message's {media} must be a list of file paths").format(media=key))
        content = m["content"]
        if images and mark not in content:
            content = mark * len(images) + content
        out.append({**{k: v for k, v in m.items() if k != key}, "content": content})
        paths += images
    if request_images:
        if not isinstance(request_images, list) or not all(isinstance(p, str) and p for p in request_images):
            raise ImageRequestError(_("{media} must be a list of file paths").format(media=key))
        if out and not any(mark in m["content"] for m in out):
            out[0] = {**out[0], "content": mark * len(request_images) + out[0]["content"]}
        paths = list(request_images)
    return out, paths


@dataclass
class ChatImages:
    """A loaded vision-language model's image side: its plugin, image processor and settings."""

    plugin: Any  # the family's plugin (ftui.runner.vision: QwenVLPlugin or a fixed-tokens one)
    image_processor: Any
    settings: ImageSettings

    def encode(self, paths: list[str]) -> tuple[dict[str, Any], list[int]]:
        """The processor's tensors for the image files, and how many tokens each expands to."""
        try:
            images = [load_image_file(str(Path(p).expanduser())) for p in paths]
        except MediaFileError as err:
            raise ImageRequestError(str(err)) from None
        media = self.plugin.image_inputs(images, self.image_processor, self.settings)
        return media, self.plugin.media_tokens(media, self.image_processor)

    def expand(self, messages: list[dict[str, str]], tokens: list[int]) -> list[dict[str, str]]:
        """Each placeholder replaced by its image's tokens; a count that does not match is said."""
        try:
            return self.plugin.expand(messages, tokens)
        except ConversationError as err:
            raise ImageRequestError(_("the messages: {error}").format(error=err)) from None


def chat_images(family: Any, folders: list[Path], cfg: Any) -> tuple[ChatImages | None, str | None]:
    """The image side of a model of vision ``family`` (None: a text model), with the image
    processor of the first of ``folders`` that has one (final/ saves it; a checkpoint's is the
    base model's), and the run's image settings (LLaMA-Factory's defaults without a run).
    (None, why) where it has none."""
    if family is None:
        return None, TEXT_ONLY
    if "images" not in family.media:  # Qwen2-Audio
        return None, _("this {family} model reads audios, not images, and chat with audios is not supported yet: send the "
                       "message without images").format(family=family.name)
    problem = None
    for folder in dict.fromkeys(folders):
        if (folder / "preprocessor_config.json").is_file():
            try:
                processor = load_image_processor(str(folder))
            except DataFormatError as err:
                problem = str(err)
                continue
            return ChatImages(plugin(family.plugin), processor, image_settings(cfg)), None
    return None, problem or _("the model has no preprocessor_config.json (its image processor's settings) in {folders}; "
                              "copy it from the base model's folder").format(folders=", ".join(str(f) for f in folders))


def text_only_message(label: str) -> str:
    return _("{model} reads text only, so it cannot take images; chat with a vision-language model (Qwen2-VL, "
             "Qwen2.5-VL, Qwen3-VL, LLaVA-1.5, Gemma 3, InternVL 3) or send the message without images").format(model=label)
