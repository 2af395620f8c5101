"""A record's media: the image, video and audio files LLaMA-Factory's ``images`` / ``videos`` /
``audios`` columns name, resolved and checked as LLaMA-Factory 0.9.5 resolves them, and the
rule that ties them to the ``<image>`` / ``<video>`` / ``<audio>`` placeholders in the text.

Resolving (LLaMA-Factory's ``DatasetConverter._find_medias``): a column holds one path or a
list of them (an empty list is no media); a relative path is joined to ``media_dir``, which
is dataset_dir (LLaMA-Factory's default; ftui refuses another ``media_dir``), and where no file
is there, taken as written (from the current directory, which a run keeps); an absolute path
stays as it is. A URL is refused by name: ftui reads local files only.

Placeholders (LLaMA-Factory's ``MMPluginMixin._validate_messages``): over the record's
messages (its system prompt aside), the number of ``<image>`` must equal the number of
images, and so for videos and audios. A record with images and no placeholder is refused:
LLaMA-Factory 0.9.5's training raises for it ("The number of images does not match the
number of <image> tokens"); only its chat engines put the placeholders in front of the first
message, which ftui's chat may do, never its training.

ftui trains on images (stages sft and dpo; a preference record's images:
ftui.data.preference_media) and videos (each one's header read: ftui.data.video_files); a
record with audios is refused by name.
No torch here: the launch form, preflight and the runner's encoding share this code.
"""

from __future__ import annotations

import os
import re
from typing import Any

from ftui.data.media_files import ImageInfo, MediaError, MediaFileError, image_header, where
from ftui.data.records import MEDIA_COLUMNS, DatasetSpec, _clip, to_messages
from ftui.data.video_files import video_header
from ftui.i18n import _

__all__ = ["MEDIA_COLUMNS", "PLACEHOLDERS", "MediaError", "MediaFileError", "MediaPathError", "MediaNotSupported",
           "PlaceholderMismatch", "media_columns", "dataset_media", "media_refusal", "record_media", "record_images",
           "placeholder_counts"]

# LLaMA-Factory's IMAGE_PLACEHOLDER, VIDEO_PLACEHOLDER, AUDIO_PLACEHOLDER (extras/constants.py; its
# environment variables of the same names can change them there, not in ftui)
PLACEHOLDERS = {"images": "<image>", "videos": "<video>", "audios": "<audio>"}
URL = re.compile(r"^[A-Za-z][A-Za-z0-9+.\-]*://")  # http://, https://, s3://, gs://, hf://, file:// ...
SUPPORTED_MEDIA = ("images", "videos", "audios")  # what ftui decodes
# The stages that train on images as LLaMA-Factory 0.9.5 trains them (with transformers 5.24,
# the tests' version). Refused by name: pt (its pretrain processor never calls the plugin: the
# images are dropped and "<image>" stays as text); kto (its trainer's forward passes neither
# mm_token_type_ids nor the M-RoPE positions, which Qwen2-VL / Qwen3-VL refuse in their first
# step); rm (TRL's value head reads config.hidden_size, which these configs keep in
# text_config: the model fails to load). ftui's kto and rm encode images already
# (tests/test_vl_dpo.py checks kto's against LLaMA-Factory's feedback processor).
MEDIA_STAGES = ("sft", "dpo")


class MediaPathError(MediaError):
    """A media entry that is not a local file path: a URL, a number, embedded data."""


class MediaNotSupported(MediaError):
    """Videos or audios: refused by name until ftui decodes them."""


class PlaceholderMismatch(MediaError):
    """The placeholders in a record's text do not match its files (LLaMA-Factory's rule)."""


def media_columns(spec: DatasetSpec, record: Any = None) -> dict[str, str]:
    """The media a dataset's records carry, medium -> column: the columns its dataset_info.json
    entry maps (``columns: {images: images}``); for a file given by path (no entry), the media
    keys the record has, under their own names (as LLaMA-Factory's entries usually name them)."""
    if spec.explicit_format:
        return {m: str(spec.columns[m]) for m in MEDIA_COLUMNS if spec.columns.get(m)}
    return {m: m for m in MEDIA_COLUMNS if isinstance(record, dict) and record.get(m)}


def dataset_media(spec: DatasetSpec, first: Any = None) -> tuple[str, ...]:
    """The media of a dataset, from its entry's columns, or for a file given by path from its
    first record: what preflight, the stage and the model are checked against."""
    return tuple(media_columns(spec, first))


def media_refusal(spec: DatasetSpec, stage: str, first: Any = None) -> str | None:
    """Why a dataset's media cannot be trained by ``stage`` in this slice, else None: videos
    and audios are not decoded yet, and images train with stage sft only."""
    media = dataset_media(spec, first)
    unsupported = [m for m in media if m not in SUPPORTED_MEDIA]
    if unsupported:
        return not_supported_message(spec, unsupported[0])
    if "audios" in media and stage != "sft":  # Qwen2-Audio trains with sft only in this slice
        return _("dataset {name} has audios: stage {stage} with audios is not supported yet; ftui trains Qwen2-Audio with "
                 "stage sft").format(name=repr(spec.name), stage=stage)
    if "videos" in media and stage != "sft":  # the preference stages read images only
        return _("dataset {name} has videos: stage {stage} with videos is not supported yet; ftui trains on videos with "
                 "stage sft").format(name=repr(spec.name), stage=stage)
    if media and stage not in MEDIA_STAGES:
        return _("dataset {name} has images: stage {stage} with images is not supported yet; ftui trains vision-language "
                 "models with stage {stages}").format(name=repr(spec.name), stage=stage, stages=", ".join(MEDIA_STAGES))
    return None


def _entries(value: Any) -> list[Any]:
    """A column's value as LLaMA-Factory's ``_find_medias`` takes it: None or [] is none, one
    value a list of one."""
    if value is None:
        return []
    return list(value) if isinstance(value, list) else [value]


def _resolved(entry: Any, medium: str, spec: DatasetSpec, index: int) -> str:
    """One entry as an absolute path of a file that exists."""
    if not isinstance(entry, str) or not entry:
        kind = _("a list (video frames)") if isinstance(entry, list) else _("embedded data") if isinstance(entry, (dict, bytes)) else type(entry).__name__
        raise MediaPathError(_("dataset {name} record {index}: its {column} column holds {kind}, not a file path; ftui reads "
                               "{medium} from files named by path (relative to dataset_dir, or absolute)").format(
            name=repr(spec.name), index=index, column=medium, kind=kind, medium=medium))
    if URL.match(entry):
        raise MediaPathError(where(spec, index, entry) + ": " + _(
            "a URL; ftui reads local files only (it never downloads while training): download the file into dataset_dir "
            "and name its path in the record"))
    candidates = [os.path.abspath(os.path.join(os.path.expanduser(spec.media_dir), entry))] if spec.media_dir else []
    candidates.append(os.path.abspath(entry))  # LLaMA-Factory's fallback: "Use original path" (the current directory's)
    for path in dict.fromkeys(candidates):
        if os.path.isfile(path):
            return path
    looked = _("looked for {path}").format(path=", ".join(_clip(c, 300) for c in dict.fromkeys(candidates)))
    raise MediaFileError(where(spec, index, entry) + ": " + _(
        "no such file ({looked}); put the file there or correct the path in the record (a relative path is read "
        "from dataset_dir)").format(looked=looked))


def placeholder_counts(record: Any, spec: DatasetSpec, index: int) -> dict[str, int]:
    """How many ``<image>``, ``<video>`` and ``<audio>`` placeholders the record's messages
    hold (the system prompt aside, as LLaMA-Factory counts its prompt and response turns)."""
    messages, _tools = to_messages(record, spec, index)
    text = [m["content"] for m in messages if m["role"] != "system"]
    return {medium: sum(t.count(mark) for t in text) for medium, mark in PLACEHOLDERS.items()}


def record_media(record: Any, spec: DatasetSpec, index: int) -> dict[str, list[str]]:
    """The record's media files per medium ("images", "videos", "audios"; an empty list where
    it has none): absolute paths of files that exist, each image's header read and within the
    pixel limit (ftui.data.media_files), the placeholders counted. Raises a MediaError (a
    DataFormatError) naming the dataset, the record and the file."""
    found: dict[str, list[str]] = {m: [] for m in MEDIA_COLUMNS}
    columns = media_columns(spec, record)
    if not columns or not isinstance(record, dict):
        return found
    entries = {medium: _entries(record.get(column)) for medium, column in columns.items()}
    for medium, items in entries.items():
        if items and medium not in SUPPORTED_MEDIA:
            raise MediaNotSupported(not_supported_message(spec, medium, index))
    counts = placeholder_counts(record, spec, index)
    for medium in MEDIA_COLUMNS:
        have, marked = len(entries.get(medium, ())), counts[medium]
        if have != marked:
            raise PlaceholderMismatch(mismatch_message(spec, index, medium, have, marked))
    for medium, items in entries.items():
        found[medium] = [_resolved(item, medium, spec, index) for item in items]
    for path in found["images"]:
        image_header(path, spec, index)
    for path in found["audios"]:  # opened with PyAV, its first frame decoded (ftui.data.audio_files)
        from ftui.data.audio_files import audio_info
        audio_info(path, spec, index)
    for path in found["videos"]:
        video_header(path, spec, index)
    return found


def record_images(record: Any, spec: DatasetSpec, index: int) -> list[ImageInfo]:
    """The record's images with their sizes (from the headers): the preview's listing."""
    return [image_header(path, spec, index) for path in record_media(record, spec, index)["images"]]


def mismatch_message(spec: DatasetSpec, index: int, medium: str, have: int, marked: int) -> str:
    mark = PLACEHOLDERS[medium]
    if have and not marked:
        fix = _("put one {mark} in the text where each file goes (LLaMA-Factory 0.9.5 refuses such a record in training "
                "too; it adds the placeholders only when chatting)").format(mark=mark)
    elif marked and not have:
        fix = _("the record names no {medium} file: add the files to its {medium} column, or remove the {mark} "
                "placeholders").format(medium=medium, mark=mark)
    else:
        fix = _("give one {mark} in the text per file, in the files' order").format(mark=mark)
    return _("dataset {name} record {index}: {have} file(s) in its {medium} column but {marked} {mark} placeholder(s) in its "
             "messages; {fix}").format(name=repr(spec.name), index=index, have=have, medium=medium, marked=marked, mark=mark, fix=fix)


def not_supported_message(spec: DatasetSpec, medium: str, index: int | None = None) -> str:
    """Videos or audios, which this slice does not decode yet."""
    what = _("dataset {name} record {index}").format(name=repr(spec.name), index=index) if index is not None else \
        _("dataset {name}").format(name=repr(spec.name))
    return _("{what} has {medium}: {medium} are not supported yet: ftui trains on images with Qwen2-VL, Qwen2.5-VL and "
             "Qwen3-VL; drop the {medium} column from the dataset's entry (and the {mark} placeholders from its "
             "text), or use an image dataset such as mllm_demo").format(what=what, medium=medium, mark=PLACEHOLDERS[medium])
