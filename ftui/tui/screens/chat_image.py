"""The chat screen's image field: a path typed with file-name completion, checked and previewed
off the UI thread, and sent with the next message (a vision-language model's chat).

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

IMAGE_PLACEHOLDER = N_("image file to send (Enter attaches it, Right completes the name)")
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


def attached_lines(images: list[tuple[str, int, int]]) -> Text:
    """One line per attached image (untrusted names, shown as plain text)."""
    if not images:
        return Text("")
    out = Text(_("sent with the next message:"), style="bold")
    for path, width, height in images:
        out.append("\n  " + visible(os.path.basename(path) or path, one_line=True) + f"  {width} x {height}")
    return out


class ImageField(Vertical):
    """The path field, its problem line and the preview of the attached images."""

    DEFAULT_CSS = """
    ImageField { height: auto; }
    ImageField #chat-image-path { width: 1fr; }
    """

    def __init__(self, **kwargs: Any):
        super().__init__(**kwargs)
        self.attached: list[tuple[str, int, int]] = []  # (absolute path, width, height)

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
        from ftui.data.media_files import MediaError, checked_image_file

        path = os.path.abspath(os.path.expanduser(given))
        try:
            info = checked_image_file(path)
        except MediaError as err:
            to_ui(self, self._refuse_image, str(err).replace(path, given, 1))
            return
        to_ui(self, self._attach_image, (info.path, info.width, info.height), thumbnail(info.path))

    def _attach_image(self, image: tuple[str, int, int], picture: Any) -> None:
        self.attached.append(image)
        self.query_one("#chat-image-path", Input).value = ""
        self.query_one(MediaPreview).show(attached_lines(self.attached), picture)

    def _refuse_image(self, message: str) -> None:
        lines = attached_lines(self.attached)
        self.query_one(MediaPreview).show(lines + Text(("\n" if lines.plain else "") + visible(message), style="red"))

    def take(self) -> list[str]:
        """The attached images' paths, given up to the message being sent (the field empties)."""
        paths = [path for path, _w, _h in self.attached]
        self.clear()
        return paths

    def clear(self) -> None:
        self.attached = []
        self.query_one(MediaPreview).show(Text(""))

    def retranslate(self) -> None:
        self.query_one("#chat-image-path", Input).placeholder = _(IMAGE_PLACEHOLDER)
