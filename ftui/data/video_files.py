"""A record's video files, opened safely with PyAV before training: the container's header (a
video stream, its size, frame count and duration), then, where the whole file must be good, a
decode that counts the frames and finds a truncated or broken file. Every failure is a
``MediaFileError`` naming the dataset, the record and the file, never an FFmpeg traceback or a
training step that fails on a frame count the text did not promise.

LLaMA-Factory 0.9.5 (``mm_plugin.py``) expands a ``<video>`` placeholder from the header alone
(``Qwen2VLPlugin._get_qwen_video_stream_metadata``: the sampled frame indices of
``_get_video_sample_indices``) and decodes the frames later; a file whose frames do not all
decode gives fewer frames than the text has tokens for, and the model refuses the batch. ftui
checks both up front. A stream whose header gives no frame count (LLaMA-Factory's "infinite
video": it samples frames 0..video_maxlen-1 whether they exist or not) or no duration (its
sampler fails on it) is refused by name.

PyAV (``av``) is imported when a video is first read: a dataset without videos never needs it.
No torch here: the launch form, preflight and the runner share this code.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from ftui.data.media_files import MediaError, MediaFileError, where
from ftui.data.records import DatasetSpec
from ftui.i18n import _

# LLaMA-Factory 0.9.5's defaults (hparams/model_args.py)
VIDEO_FPS, VIDEO_MAXLEN = 2.0, 128
VIDEO_MAX_PIXELS, VIDEO_MIN_PIXELS = 256 * 256, 16 * 16


class VideoDecoderMissing(MediaError):
    """PyAV is not installed: videos cannot be read at all."""


@dataclass(frozen=True)
class VideoInfo:
    """One checked video of a record, from its container's header: the absolute path, the
    frame size, the frame count, the duration in seconds and the average frame rate."""

    path: str
    width: int
    height: int
    frames: int
    duration: float
    average_fps: float

    def sample_indices(self, video_fps: float = VIDEO_FPS, video_maxlen: int = VIDEO_MAXLEN) -> list[int]:
        """The frames LLaMA-Factory samples (``_get_video_sample_indices``): ``video_fps`` per
        second of the duration, at least one, at most ``video_maxlen`` and the frame count,
        spread evenly from the first frame to the last (numpy's linspace, truncated)."""
        count = max(1, math.floor(self.duration * video_fps))
        count = min(self.frames, video_maxlen, count)
        if count == 1:
            return [0]
        step = (self.frames - 1) / (count - 1)
        return [int(i * step) if i < count - 1 else self.frames - 1 for i in range(count)]

    def sampled_frames(self, video_fps: float = VIDEO_FPS, video_maxlen: int = VIDEO_MAXLEN) -> int:
        """How many frames reach the video processor: the sampled ones, one repeated to make
        an odd count even (LLaMA-Factory's Qwen2-VL rule)."""
        count = len(self.sample_indices(video_fps, video_maxlen))
        return count + count % 2


def pyav() -> Any:
    """The ``av`` module, or VideoDecoderMissing saying how to install it."""
    try:
        import av
    except ImportError:
        raise VideoDecoderMissing(_("reading videos needs PyAV (the av package), which is not installed: "
                                    "pip install 'ftui[vision]'")) from None
    return av


class _Problem(Exception):
    """What is wrong with a file, before the caller says which record it belongs to."""


def _open(path: str) -> Any:
    av = pyav()
    if not os.path.isfile(path):
        raise _Problem(_("no such file; put the file there or correct the path in the record "
                         "(a relative path is read from dataset_dir)"))
    try:
        return av.open(path, "r")
    except (av.FFmpegError, OSError, ValueError, UnicodeDecodeError) as err:
        raise _Problem(_("not a video FFmpeg can read ({error}); give an MP4, AVI, MKV or WebM file").format(
            error=str(err)[:200])) from None


def _stream(container: Any) -> Any:
    stream = next((s for s in container.streams if s.type == "video"), None)
    if stream is None:
        kinds = ", ".join(sorted({s.type for s in container.streams})) or _("none")
        raise _Problem(_("the file has no video stream (its streams: {kinds}); an audio file belongs in the "
                         "audios column").format(kinds=kinds))
    return stream


def _header(path: str) -> VideoInfo:
    container = _open(path)
    try:
        stream = _stream(container)
        if not stream.width or not stream.height:
            raise _Problem(_("its video stream has no frame size in the header"))
        if not stream.frames:
            raise _Problem(_("its header does not say how many frames the video has (LLaMA-Factory 0.9.5 samples "
                             "such a stream wrongly); re-mux it to MP4: ffmpeg -i IN -c copy OUT.mp4"))
        if stream.duration is None or stream.time_base is None or stream.average_rate is None:
            raise _Problem(_("its header gives no duration or frame rate (LLaMA-Factory 0.9.5 cannot sample it); "
                             "re-mux it to MP4: ffmpeg -i IN -c copy OUT.mp4"))
        duration, fps = float(stream.duration * stream.time_base), float(stream.average_rate)
        if duration <= 0 or fps <= 0:
            raise _Problem(_("its header gives a duration of {duration} s at {fps} frames per second").format(
                duration=duration, fps=fps))
        return VideoInfo(path, int(stream.width), int(stream.height), int(stream.frames), duration, fps)
    finally:
        container.close()


def _named(path: str, spec: DatasetSpec, index: int, problem: str) -> MediaFileError:
    return MediaFileError(where(spec, index, path) + ": " + problem)


def video_header(path: str, spec: DatasetSpec, index: int) -> VideoInfo:
    """The video's header (no frame decoded): what the text's tokens are counted from."""
    try:
        return _header_cached(path, *_stamp(path))
    except _Problem as problem:
        raise _named(path, spec, index, str(problem)) from None


def _stamp(path: str) -> tuple[int, int]:
    try:
        st = os.stat(path)
    except OSError:
        return (0, 0)
    return (st.st_mtime_ns, st.st_size)


@lru_cache(maxsize=4096)
def _header_cached(path: str, _mtime: int, _size: int) -> VideoInfo:
    return _header(path)


def decoded_frames(path: str) -> int:
    """How many frames of the file's first video stream decode; _Problem where FFmpeg stops
    with an error."""
    av = pyav()
    container = _open(path)
    count = 0
    try:
        stream = _stream(container)
        for _frame in container.decode(stream):
            count += 1
    except (av.FFmpegError, OSError, ValueError) as err:
        raise _Problem(_("the video cannot be decoded after {count} frame(s) ({error}); the file is damaged: "
                         "re-encode or replace it").format(count=count, error=str(err)[:200])) from None
    finally:
        container.close()
    return count


def verify_video(path: str, spec: DatasetSpec, index: int, video_fps: float = VIDEO_FPS,
                 video_maxlen: int = VIDEO_MAXLEN) -> VideoInfo:
    """The header, then a whole decode: the frames the run samples must all be there."""
    info = video_header(path, spec, index)
    try:
        _check_frames(info, video_fps, video_maxlen)
    except _Problem as problem:
        raise _named(path, spec, index, str(problem)) from None
    return info


def _check_frames(info: VideoInfo, video_fps: float, video_maxlen: int) -> None:
    """_Problem unless every frame the run samples decodes."""
    count = _decoded_cached(info.path, *_stamp(info.path))
    if count == 0:
        raise _Problem(_("no frame of the video decodes; the file is empty or damaged: re-encode or replace it"))
    last = info.sample_indices(video_fps, video_maxlen)[-1]
    if count <= last:
        raise _Problem(_("its header says {frames} frames but only {count} decode (a truncated file?); "
                         "training samples frame {last}: re-encode or replace it").format(
            frames=info.frames, count=count, last=last))


def checked_video_file(path: str, video_fps: float = VIDEO_FPS, video_maxlen: int = VIDEO_MAXLEN,
                       decode: bool = True) -> VideoInfo:
    """A video named outside any dataset (chat's ``--video``, ``/video``, the chat screen's
    field): its header, and with ``decode`` every sampled frame, checked as a record's video
    is; the message names the file alone. ``decode=False``: the header only (the app's quick
    check before a message is sent; the chat worker decodes)."""
    try:
        if not os.path.isfile(path):
            raise _Problem(_("no such file"))
        info = _header_cached(path, *_stamp(path))
        if decode:
            _check_frames(info, video_fps, video_maxlen)
    except _Problem as problem:
        raise MediaFileError(_("video {path}: {problem}").format(path=path, problem=problem)) from None
    return info


@lru_cache(maxsize=1024)
def _decoded_cached(path: str, _mtime: int, _size: int) -> int:
    return decoded_frames(path)


VIDEO_SUFFIXES = frozenset({".mp4", ".m4v", ".mov", ".avi", ".mkv", ".webm", ".mpeg", ".mpg", ".flv", ".wmv", ".3gp", ".ts"})


def looks_like_video(path: str) -> bool:
    """Whether a file named outside any dataset (the chat screen's one field for images and
    videos) is a video: its extension, else (an unknown or missing one) whether FFmpeg finds a
    video stream in it and Pillow no image. Reads the file's header: call it off the UI thread."""
    if os.path.splitext(path)[1].lower() in VIDEO_SUFFIXES:
        return True
    from ftui.data.media_files import checked_image_file

    try:
        checked_image_file(path)
        return False
    except MediaError:
        pass
    try:
        _header_cached(path, *_stamp(path))
    except (_Problem, MediaError):
        return False
    return True


def first_frame(path: str, longest: int) -> Any:
    """The video's first frame as a PIL image no larger than ``longest`` on a side (the chat
    screen's preview), or None where it cannot be decoded. Call from a worker."""
    try:
        av = pyav()
        with av.open(path, "r") as container:
            stream = next(s for s in container.streams if s.type == "video")
            frame = next(container.decode(stream)).to_image()
        frame.thumbnail((longest, longest))
        return frame
    except Exception:  # unreadable here: the checks say why, the preview shows the lines
        return None
