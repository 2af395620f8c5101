"""A record's image files, opened safely: the header first (what the file is and how large it
says it is, refused above a pixel limit before anything is decoded), then, where the whole
file must be good, a bounded load that finds truncated or corrupt data. Every failure is a
``MediaFileError`` naming the dataset, the record and the file, never a PIL traceback, a
``DecompressionBombError`` or a decode that runs out of memory.

PIL is the only image library here (the app side may import it; no torch). Videos and audios
are not decoded in this slice of issue 42: ftui.data.media refuses them by name.
"""

from __future__ import annotations

import os
import warnings
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from ftui.data.records import DataFormatError, DatasetSpec, _clip
from ftui.i18n import _

# The most pixels an image may have: PIL's own MAX_IMAGE_PIXELS (about 9,459 x 9,459), above
# which PIL warns of a decompression bomb (and refuses at twice as many). LLaMA-Factory scales
# every image down to image_max_pixels (768 x 768 by default) after decoding it whole, so a
# larger file only costs memory: 89 M pixels decode to about 270 MB of RGB.
IMAGE_PIXEL_LIMIT = 89_478_485


class MediaError(DataFormatError):
    """A record's media that cannot be used; the message names the dataset, record and file."""


class MediaFileError(MediaError):
    """An image file that is missing, unreadable, not an image, truncated, corrupt or too large."""


@dataclass(frozen=True)
class ImageInfo:
    """One checked image of a record: its absolute path and its size from the file's header."""

    path: str
    width: int
    height: int


def where(spec: DatasetSpec, index: int, path: str) -> str:
    """The start of every media message: dataset, record, file."""
    return _("dataset {name} record {index}: file {path}").format(name=repr(spec.name), index=index, path=_clip(str(path), 300))


class _Problem(Exception):
    """What is wrong with a file, before the caller says which record it belongs to."""


def _open_header(path: str) -> Any:
    """PIL's lazily opened image (its header read, no pixel decoded), or _Problem."""
    from PIL import Image, UnidentifiedImageError

    if not os.path.isfile(path):
        raise _Problem(_("no such file; put the file there or correct the path in the record "
                         "(a relative path is read from dataset_dir)"))
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", Image.DecompressionBombWarning)  # the size is judged below, by ftui's own limit
            return Image.open(path)
    except Image.DecompressionBombError as err:
        raise _Problem(_("the image is larger than ftui decodes ({error}); scale it down to at most "
                         "{limit} pixels").format(error=err, limit=f"{IMAGE_PIXEL_LIMIT:,}")) from None
    except UnidentifiedImageError:
        raise _Problem(_("not an image PIL can read (JPEG, PNG, WebP, GIF, BMP, TIFF ...); convert it, or "
                         "remove it and its <image> placeholder from the record")) from None
    except (OSError, ValueError, SyntaxError) as err:  # unreadable (permissions, a directory race), a broken header
        raise _Problem(_("cannot read it ({error}); check the file and its permissions").format(
            error=f"{type(err).__name__}: {err}")) from None


def _header_size(image: Any) -> tuple[int, int]:
    width, height = image.size
    if width < 1 or height < 1:
        raise _Problem(_("its header says {width} x {height} pixels; the file is broken").format(width=width, height=height))
    if width * height > IMAGE_PIXEL_LIMIT:
        raise _Problem(_("the image is {width} x {height} ({pixels} pixels), above the {limit} pixels ftui decodes (a "
                         "decompression bomb, or a scan far larger than the model reads: it is scaled to image_max_pixels "
                         "anyway); scale it down first").format(
            width=width, height=height, pixels=f"{width * height:,}", limit=f"{IMAGE_PIXEL_LIMIT:,}"))
    return width, height


def _header_dimensions(path: str) -> tuple[int, int]:
    """(width, height) from the file's header, the file closed again, or _Problem: the check
    of a record's image (image_header) and of one named alone (checked_image_file)."""
    image = _open_header(path)
    try:
        return _header_size(image)
    finally:
        image.close()


def _decoded(path: str) -> Any:
    """The image with its pixels loaded (file closed), or _Problem."""
    from PIL import Image

    image = _open_header(path)
    try:
        _header_size(image)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", Image.DecompressionBombWarning)
            image.load()
    except _Problem:
        image.close()
        raise
    except (OSError, ValueError, SyntaxError, EOFError, Image.DecompressionBombError) as err:
        image.close()
        raise _Problem(_("the image data is truncated or corrupt ({error}); replace the file, or remove it and its "
                         "<image> placeholder from the record").format(error=f"{type(err).__name__}: {err}")) from None
    except MemoryError:
        image.close()
        raise _Problem(_("ran out of memory decoding it; scale the image down")) from None
    return image


def image_header(path: str, spec: DatasetSpec, index: int) -> ImageInfo:
    """The image's size from its header alone (cheap: no pixel is decoded), refused when the
    file is missing, not an image or larger than IMAGE_PIXEL_LIMIT."""
    try:
        width, height = _header_dimensions(path)
    except _Problem as problem:
        raise MediaFileError(where(spec, index, path) + ": " + str(problem)) from None
    return ImageInfo(path, width, height)


def load_image(path: str, spec: DatasetSpec, index: int) -> Any:
    """The image decoded whole (a PIL image, pixels loaded, file closed), after its header
    passed ``image_header``'s checks: truncated or corrupt data is a MediaFileError naming the
    record, where it would otherwise fail inside a training step's encoding."""
    try:
        return _decoded(path)
    except _Problem as problem:
        raise MediaFileError(where(spec, index, path) + ": " + str(problem)) from None


def verify_image(path: str, spec: DatasetSpec, index: int) -> ImageInfo:
    """``load_image``'s verdict without keeping the pixels: the check before a start. The
    verdict on a file is remembered while its size and modification time stay the same (the
    launch form checks the same first records on every change)."""
    try:
        stat = os.stat(path)
    except OSError:
        return image_header(path, spec, index)  # raises, naming what is wrong
    problem, size = _verified((path, stat.st_size, stat.st_mtime_ns))
    if problem is not None:
        raise MediaFileError(where(spec, index, path) + ": " + problem)
    return ImageInfo(path, *size)


@lru_cache(maxsize=512)
def _verified(key: tuple[Any, ...]) -> tuple[str | None, tuple[int, int]]:
    """(None, size) for a good image, else (the problem, (0, 0)); keyed by path, size and mtime."""
    try:
        image = _decoded(key[0])
    except _Problem as problem:
        return str(problem), (0, 0)
    size = image.size
    image.close()
    return None, size


def _named(path: str, problem: str) -> MediaFileError:
    return MediaFileError(_("image {path}: {problem}").format(path=_clip(str(path), 300), problem=problem))


def checked_image_file(path: str) -> ImageInfo:
    """An image named outside any dataset (chat's ``--image``, ``/image``, the chat screen's
    field): its header read and within IMAGE_PIXEL_LIMIT, as for a record's images, the
    message naming the file alone."""
    if not os.path.isfile(path):
        raise _named(path, _("no such file"))
    try:
        width, height = _header_dimensions(path)
    except _Problem as problem:
        raise _named(path, str(problem)) from None
    return ImageInfo(os.path.abspath(path), width, height)


def load_image_file(path: str) -> Any:
    """``checked_image_file``'s image decoded whole (truncated or corrupt data refused by name)."""
    checked_image_file(path)
    try:
        return _decoded(path)
    except _Problem as problem:
        raise _named(path, str(problem)) from None
