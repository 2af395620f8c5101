"""The chat screen's image field: a path typed with file-name completion, checked and previewed
off the UI thread, and sent with the next message (a vision-language model's chat). It takes
videos too (the Qwen families'): a file's kind is its extension's, else its header's
(ftui.data.video_files.looks_like_video); a video's line gives its size, frames and duration,
its preview its first frame.

Completion is Textual's suggester (the rest of the name shown dimmed; Right takes it),
its directory listed in a thread (``asyncio.to_thread``: a path on a hung network mount never
freezes the app). Enter checks the file (ftui.data.media_files: missing, not an image, too
large: said in the field's line) and shrinks it for the preview
(ftui.tui.screens.launch_media: ``thumbnail`` in a worker, ``MediaPreview``), then attaches
it; several may be attached. The screen takes them with ``take`` when it sends a message.
"""

from __future__ import annotations

import asyncio
import os
from typing import Any

from rich.text import Text
from textual import work
from textual.app import ComposeResult
from textual.containers import Vertical
from textual.suggester import Suggester
from textual.widgets import Input

from ftui.i18n import N_, _
from ftui.safety.text import visible
from ftui.tui.screens.launch_media import MediaPreview, thumbnail
from ftui.tui.ui_thread import to_ui

IMAGE_PLACEHOLDER = N_("image or video file to send (Enter attaches it, Right completes the name)")
LISTED_MAX = 2000  # the entries of a directory read for completion (a huge folder is cut, never walked)


def complete_path(value: str) -> str | None:
    """``value`` completed to the first file or directory name it starts (a directory with its
    ``/``), or None. Reads the directory: call it off the UI thread."""
    expanded = os.path.expanduser(value)
    folder, stem = os.path.split(expanded)
    try:
        with os.scandir(folder or ".") as entries:
            names = []
            for k, entry in enumerate(entries):
                if k >= LISTED_MAX:
                    break
                if entry.name.startswith(stem) and (stem.startswith(".") or not entry.name.startswith(".")):
                    names.append(entry.name + ("/" if entry.is_dir() else ""))
    except OSError:
        return None
    names = sorted(n for n in names if n != stem)
    if not names:
        return None
    return value + names[0][len(stem):]


class PathSuggester(Suggester):
    """File-name completion for the image field, its directory read in a thread."""

    def __init__(self) -> None:
        super().__init__(use_cache=False, case_sensitive=True)

    async def get_suggestion(self, value: str) -> str | None:
        return await asyncio.to_thread(complete_path, value)


Attached = tuple[str, str, str]  # (absolute path, "images" or "videos", what its line says after the name)


def attached_lines(files: list[Attached]) -> Text:
    """One line per attached file (untrusted names, shown as plain text)."""
    if not files:
        return Text("")
    out = Text(_("sent with the next message:"), style="bold")
    for path, _kind, about in files:
        out.append("\n  " + visible(os.path.basename(path) or path, one_line=True) + "  " + about)
    return out


def checked_file(path: str) -> tuple[Attached, Any]:
    """The file's entry and its preview picture (a video's first frame); MediaError saying
    what is wrong with it. Reads and decodes: call it off the UI thread."""
    from ftui.data.media_files import checked_image_file
    from ftui.data.video_files import checked_video_file, first_frame, looks_like_video
    from ftui.tui.screens.launch_media import THUMBNAIL_PX

    if looks_like_video(path):
        info = checked_video_file(path, decode=False)  # the worker decodes it with the run's video keys
        about = _("{width} x {height}, {frames} frames, {seconds:.1f} s (video)").format(
            width=info.width, height=info.height, frames=info.frames, seconds=info.duration)
        return (info.path, "videos", about), first_frame(info.path, THUMBNAIL_PX)
    image = checked_image_file(path)
    return (image.path, "images", f"{image.width} x {image.height}"), thumbnail(image.path)


class ImageField(Vertical):
    """The path field, its problem line and the preview of the attached images."""

    DEFAULT_CSS = """
    ImageField { height: auto; }
    ImageField #chat-image-path { width: 1fr; }
    """

    def __init__(self, **kwargs: Any):
        super().__init__(**kwargs)
        self.attached: list[Attached] = []

    def compose(self) -> ComposeResult:
        yield Input(placeholder=_(IMAGE_PLACEHOLDER), suggester=PathSuggester(), id="chat-image-path")
        yield MediaPreview(id="chat-image-preview")

    def on_input_submitted(self, event: Input.Submitted) -> None:
        if event.input.id != "chat-image-path":
            return
        event.stop()  # the screen's prompt handler is not for this field
        given = event.value.strip()
        if given:
            self.check(given)

    @work(thread=True, group="chat-image")
    def check(self, given: str) -> None:
        """The file checked and shrunk off the UI thread, then attached (or its problem said)."""
        from ftui.data.media_files import MediaError

        path = os.path.abspath(os.path.expanduser(given))
        try:
            entry, picture = checked_file(path)
        except MediaError as err:
            to_ui(self, self._refuse_image, str(err).replace(path, given, 1))
            return
        to_ui(self, self._attach_image, entry, picture)

    def _attach_image(self, image: Attached, picture: Any) -> None:
        self.attached.append(image)
        self.query_one("#chat-image-path", Input).value = ""
        self.query_one(MediaPreview).show(attached_lines(self.attached), picture)

    def _refuse_image(self, message: str) -> None:
        lines = attached_lines(self.attached)
        self.query_one(MediaPreview).show(lines + Text(("\n" if lines.plain else "") + visible(message), style="red"))

    def take(self) -> dict[str, list[str]]:
        """The attached files' paths by kind (``{"images": [...], "videos": [...]}``), given up
        to the message being sent (the field empties)."""
        media: dict[str, list[str]] = {"images": [], "videos": []}
        for path, kind, _about in self.attached:
            media[kind].append(path)
        self.clear()
        return media

    def clear(self) -> None:
        self.attached = []
        self.query_one(MediaPreview).show(Text(""))

    def retranslate(self) -> None:
        self.query_one("#chat-image-path", Input).placeholder = _(IMAGE_PLACEHOLDER)
