"""The images, videos and audios a dataset's first records carry, listed for ``ftui data`` (and
the launch form's preview): each image with its size from its header and the number of image
tokens it expands to for the run's model (ftui.data.media_tokens), or what is wrong with it; a
video with its frame size, duration, the frames the run samples and its video tokens
(ftui.data.video_tokens, from its header and the run's video keys); an audio with its length,
rate and its tokens (ftui.data.audio_files: from the header's duration, so "about"). Nothing is
decoded but an audio's first frame, so a listing of a huge or broken file is as quick as of a
good one. No torch here.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

from rich.text import Text

from ftui.data.media import record_media
from ftui.data.media_tokens import IMAGE_MAX_PIXELS, IMAGE_MIN_PIXELS, VisionProcessor, image_tokens
from ftui.data.records import DataFormatError, DatasetSpec
from ftui.i18n import _
from ftui.safety.text import visible


@dataclass(frozen=True)
class ListedImage:
    """One image of a record: its path as the record names it (relative to dataset_dir when
    inside), its size and its tokens."""

    shown: str
    width: int
    height: int
    tokens: int | None  # None: no model processor to count with, or a size it refuses
    path: str = ""  # the file itself (absolute): the launch form shows the picture


@dataclass(frozen=True)
class ListedAudio:
    """One audio of a record: its path as shown, its length and rate from the file's header,
    and its <|AUDIO|> tokens at 16 kHz (Qwen2-Audio's; ftui.data.audio_files.audio_tokens)."""

    shown: str
    seconds: float
    sample_rate: int
    tokens: int


@dataclass(frozen=True)
class ListedVideo:
    """One video of a record: its path as shown, its frame size, duration and frame rate from
    the header, the frames the run samples (video_fps, video_maxlen) and its video tokens."""

    shown: str
    width: int
    height: int
    seconds: float
    fps: float
    frames: int  # sampled, as LLaMA-Factory samples them (an odd count made even)
    tokens: int | None  # None: no video processor numbers for this model, or a clip it refuses


@dataclass(frozen=True)
class RecordListing:
    """A record's images and videos, or its audios, or the problem that stops them (named as preflight names it)."""

    dataset: str
    index: int
    images: tuple[ListedImage, ...] = ()
    problem: str | None = None
    audios: tuple[ListedAudio, ...] = ()
    videos: tuple[ListedVideo, ...] = ()


def list_record(record: Any, spec: DatasetSpec, index: int, processor: VisionProcessor | None,
                max_pixels: int = IMAGE_MAX_PIXELS, min_pixels: int = IMAGE_MIN_PIXELS, video: tuple[Any, Any] | None = None) -> RecordListing:
    """One record's images and videos with sizes and tokens (``processor``: the model's, None
    when the model has none here; ``video``: the model's video processor numbers and the run's
    video settings, ftui.data.video_tokens, numbers None when it has none), or its audios."""
    from ftui.data.media_files import image_header

    try:
        if spec.ranking:  # a preference pair: its images checked with each answer (ftui.data.preference_media)
            from ftui.data.preference_media import preference_images
            from ftui.stages import PAIRS

            paths, video_paths = preference_images(record, spec, index, PAIRS), []
        else:
            media = record_media(record, spec, index)
            paths, video_paths = media["images"], media["videos"]
            if media["audios"]:
                return _audio_listing(media["audios"], spec, index)
        infos = [image_header(path, spec, index) for path in paths]
        videos = _video_listing(video_paths, spec, index, video)
    except DataFormatError as err:  # a MediaError, or a record that does not convert
        return RecordListing(spec.name, index, problem=str(err))
    listed = []
    for info in infos:
        tokens = None
        if processor is not None:
            try:
                tokens = image_tokens(info.width, info.height, processor, max_pixels, min_pixels)
            except ValueError:
                tokens = None
        listed.append(ListedImage(_shown(info.path, spec), info.width, info.height, tokens, info.path))
    return RecordListing(spec.name, index, tuple(listed), videos=videos)


def _video_listing(paths: list[str], spec: DatasetSpec, index: int, video: tuple[Any, Any] | None) -> tuple[ListedVideo, ...]:
    """A record's videos (record_media has read each header): sampled frames and tokens."""
    if not paths:
        return ()
    from ftui.data.video_files import video_header
    from ftui.data.video_tokens import VideoSettings, video_tokens

    numbers, settings = video or (None, VideoSettings())
    listed = []
    for path in paths:
        info = video_header(path, spec, index)
        try:
            tokens = video_tokens(info, numbers, settings) if numbers is not None else None
        except ValueError:  # a clip the processor refuses: preflight says why
            tokens = None
        listed.append(ListedVideo(_shown(path, spec), info.width, info.height, info.duration, info.average_fps,
                                  info.sampled_frames(settings.video_fps, settings.video_maxlen), tokens))
    return tuple(listed)


def _audio_listing(paths: list[str], spec: DatasetSpec, index: int) -> RecordListing:
    """A record's audios (record_media has probed each one: rate, duration)."""
    from ftui.data.audio_files import audio_info, audio_tokens

    listed = []
    for path in paths:
        info = audio_info(path, spec, index)
        listed.append(ListedAudio(_shown(path, spec), info.duration_s, info.sample_rate, audio_tokens(info.samples_at(16000))))
    return RecordListing(spec.name, index, audios=tuple(listed))


def _shown(path: str, spec: DatasetSpec) -> str:
    root = os.path.abspath(os.path.expanduser(spec.media_dir)) if spec.media_dir else None
    if root and os.path.commonpath([root, path]) == root:
        return os.path.relpath(path, root)
    return path


def listing_text(listing: RecordListing) -> Text:
    """A record's images as ``ftui data --show`` prints them: one line each. A Text, so file
    names are never markup; control characters show as escapes."""
    text = Text()
    head = _("dataset {name} record {index}").format(name=repr(listing.dataset), index=listing.index)
    if listing.problem is not None:
        text.append(visible(listing.problem) + "\n", style="red")
        return text
    for n, image in enumerate(listing.images, 1):
        tokens = (_("{tokens} image tokens").format(tokens=image.tokens) if image.tokens is not None
                  else _("image tokens unknown (no image processor for this model)"))
        text.append(_("{head}, image {n}: ").format(head=head, n=n), style="bold")
        text.append(visible(image.shown))
        text.append("  " + _("{width} x {height}, {tokens}").format(width=image.width, height=image.height, tokens=tokens) + "\n")
    for n, video in enumerate(listing.videos, 1):
        tokens = (_("{tokens} video tokens").format(tokens=video.tokens) if video.tokens is not None
                  else _("video tokens unknown (no video processor for this model)"))
        text.append(_("{head}, video {n}: ").format(head=head, n=n), style="bold")
        text.append(visible(video.shown))
        text.append("  " + _("{width} x {height}, {seconds:.2f} s at {fps:.3g} fps, {frames} frames sampled, {tokens}").format(
            width=video.width, height=video.height, seconds=video.seconds, fps=video.fps, frames=video.frames, tokens=tokens) + "\n")
    for n, audio in enumerate(listing.audios, 1):
        text.append(_("{head}, audio {n}: ").format(head=head, n=n), style="bold")
        text.append(visible(audio.shown))
        text.append("  " + _("{seconds:.2f} s at {rate} Hz, about {tokens} audio tokens").format(
            seconds=audio.seconds, rate=audio.sample_rate, tokens=audio.tokens) + "\n")
    return text
