"""``ftui data`` and the launch form's rendered example: the training examples as the runner
encodes them, got from a child process (``python -m ftui.runner data``, the stage's own
encoding: tokenizers need transformers, which the app never imports). Starting and reading
that process is a job's work, hence here; the rows are rendered by ftui.data.examples. Beside
them, the images of the first records, listed in this process from the files' headers
(``image_listings``: sizes and image tokens, nothing decoded). No torch here.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterator

from ftui.i18n import _

if TYPE_CHECKING:
    from ftui.config.schema import RunConfig
    from ftui.data.media_listing import RecordListing

OWN_PREFIXES = ("ftui data:", "hint:", "warning:", "note:")  # the child's messages, among its libraries' output


class ExamplesFailed(RuntimeError):
    """The child could not encode the data; ``code`` 2: a config or dataset to fix."""

    def __init__(self, code: int, message: str):
        super().__init__(message)
        self.code = code


class EncodedExamples:
    """Iterating yields ``{"input_ids", "labels"[, "segments"]}`` rows in dataset order, as
    the child writes them; then ``notes`` has its warnings (examples cut, held out for eval).
    Raises :class:`ExamplesFailed` with the child's message when it fails. ``stop`` ends the
    child early (the form asks for a newer preview)."""

    def __init__(self, cfg: "RunConfig", limit: int | None = None, text: bool = False, offline: bool = False):
        self.cfg, self.limit, self.text = cfg, limit, text
        self.offline = offline  # the hub's caches only: a preview never downloads a model or dataset
        self.notes: list[str] = []
        self.proc: subprocess.Popen[str] | None = None

    def command(self, config: Path) -> list[str]:
        return [sys.executable, "-m", "ftui.runner", "data", str(config), *(["--limit", str(self.limit)] if self.limit else []),
                *(["--text"] if self.text else [])]

    def __iter__(self) -> Iterator[dict[str, Any]]:
        with tempfile.TemporaryDirectory(prefix="ftui-data-") as tmp:
            config = Path(tmp) / "config.yaml"
            self.readonly_config().save(config)
            with open(Path(tmp) / "stderr.txt", "w+", encoding="utf-8", errors="replace") as errors:
                self.proc = subprocess.Popen(self.command(config), stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=errors,
                                             text=True, encoding="utf-8", env=self.environment())
                try:
                    for line in self.proc.stdout or ():
                        yield json.loads(line)
                    code = self.proc.wait()
                finally:
                    self.stop()
                    if self.proc.stdout is not None:
                        self.proc.stdout.close()
                errors.seek(0)
                said = errors.read().splitlines()
        own = [line for line in said if line.startswith(OWN_PREFIXES)]
        if code:
            raise ExamplesFailed(code, "\n".join(own).removeprefix("ftui data: ") if own else failure_line(said, code))
        self.notes = [line.partition(": ")[2] for line in own if line.startswith(("warning:", "note:"))]

    def readonly_config(self) -> "RunConfig":
        """The config as the child gets it: a tokenized_path that holds no encoded data yet is
        left out, so that showing the examples (ftui data, the form's preview) never writes it:
        the first training run does (and a later one with another template or cutoff must not
        find ids a preview saved). One that holds data is read, as the run would read it."""
        from ftui.data.registry import TOKENIZED_MARKER

        path = self.cfg.tokenized_path
        if path and not (Path(path).expanduser() / TOKENIZED_MARKER).is_file():
            return self.cfg.model_copy(update={"tokenized_path": None})
        return self.cfg

    def environment(self) -> dict[str, str]:
        env = dict(os.environ, TOKENIZERS_PARALLELISM="false")
        if self.offline:
            env.update(HF_HUB_OFFLINE="1", HF_DATASETS_OFFLINE="1")
        return env

    def stop(self) -> None:
        """Ends the child (safe from another thread: the reading thread then sees the end)."""
        proc = self.proc
        if proc is not None and proc.poll() is None:
            proc.kill()
            proc.wait()


def image_listings(cfg: "RunConfig", limit: int) -> list["RecordListing"]:
    """The images, videos and audios of the first ``limit`` records of each of the config's
    datasets that has media (a hub dataset is left to the run), with their sizes and the tokens
    each expands to for the config's model and its image and video keys; a record's problem in
    its place. Empty for a text-only config."""
    from ftui.config.media_checks import read_processor
    from ftui.data.dataset_files import HubDataset, read_records
    from ftui.data.media import dataset_media
    from ftui.data.media_listing import list_record
    from ftui.data.records import DataFormatError, apply_detected_format
    from ftui.data.registry import resolve_datasets
    from ftui.plan.media_load import model_video_numbers, video_settings

    out: list[RecordListing] = []
    video: list[Any] = []  # the model's video processor numbers and the run's video keys, read once
    processor: list[Any] = []  # the model's image processor (None: it has none here), read once, for the first dataset with images
    for spec in resolve_datasets(cfg.dataset, cfg.dataset_dir):
        try:
            records = read_records(spec, limit=limit)
            if records:
                apply_detected_format(spec, records[0])  # a file given by path: alpaca or sharegpt
        except (HubDataset, DataFormatError, OSError, ValueError):  # the examples' child says what is wrong with the file
            continue
        media = dataset_media(spec, records[0]) if records else ()
        if not {"images", "videos", "audios"} & set(media):
            continue
        if not processor and "images" in media:
            try:
                processor.append(read_processor(cfg.model_name_or_path))
            except ValueError:  # listed without token counts; preflight names the missing file
                processor.append(None)
        if not video and "videos" in media:
            video.append((model_video_numbers(cfg.model_name_or_path), video_settings(cfg)))
        out += [list_record(record, spec, i, processor[0] if processor else None, cfg.image_max_pixels, cfg.image_min_pixels,
                            video[0] if video else None) for i, record in enumerate(records)]
    return out


def failure_line(said: list[str], code: int) -> str:
    """One line for a child that failed without saying why in its own words (a traceback, a
    library's message): its last line, which names the error (``RecursionError: ...``); the
    caller prints it as the command's one error line, never the traceback itself."""
    last = next((line.strip() for line in reversed(said) if line.strip()), "")
    if not last:
        return _("the encoding process exited with {code}").format(code=code)
    return _("the encoding process failed: {error}").format(error=last[:500])


# The parts an example row may have: an SFT / pt example's, a pair's chosen and rejected
# answers, a KTO example's mismatched (KL) completion.
