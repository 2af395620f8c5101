"""The launch form's media preview: the first record's images listed (file, size, the tokens
each expands to), its videos (frame size, duration, the frames the run samples, video tokens)
and audios (duration, sample rate, audio tokens), and the first image shown in the terminal itself, through textual-image:
Kitty's graphics protocol or Sixel where the terminal speaks it, coloured half cells
otherwise (tmux included).

textual-image asks the terminal what it can draw when it is first imported, which is no
longer possible once Textual owns the terminal: ``probe_terminal`` is called by ``ftui`` before
the app starts (ftui.cli.app). The picture is decoded and shrunk in the preview worker
(``thumbnail``), never on the UI thread; the widget only draws what it is handed.
"""

from __future__ import annotations

from typing import Any

from rich.text import Text
from textual.app import ComposeResult
from textual.containers import Vertical
from textual.widgets import Static

from ftui.i18n import _
from ftui.safety.text import visible

THUMBNAIL_PX = 384  # the longest side of the picture handed to the widget (a terminal shows far fewer pixels)


def probe_terminal() -> None:
    """Lets textual-image ask the terminal which graphics it draws, before Textual starts.
    Without the package (or off a terminal) the preview lists the images without showing them."""
    try:
        import textual_image.widget  # noqa: F401  (its import queries the terminal once)
    except Exception:  # not installed, or the terminal did not answer: the list is still shown
        pass


def thumbnail(path: str) -> Any:
    """The image at ``path`` decoded and shrunk for the preview (a PIL image), or None when it
    cannot be read. Call from a worker: it reads and decodes the file. The data checks refused
    huge images before (ftui.data.media), so the decode is bounded."""
    try:
        from PIL import Image

        with Image.open(path) as img:
            img.draft("RGB", (THUMBNAIL_PX, THUMBNAIL_PX))  # JPEG: decode at a reduced scale
            small = img.convert("RGB")
        small.thumbnail((THUMBNAIL_PX, THUMBNAIL_PX))
        return small
    except Exception:  # unreadable here: the data checks say why, the preview shows the list
        return None


MEDIA_RECORDS = 1  # the records of each dataset whose media the form lists (ftui data --show lists more)


def media_preview(cfg: Any) -> tuple[Text, Any]:
    """The first record's media of each dataset with media (images: file, size, the tokens each
    expands to for the config's model and image_max_pixels; videos and audios: ftui.data.
    media_listing), and the first picture shrunk; (empty, None) for a text dataset. Reads file
    headers (PyAV's for videos and audios): call it from a worker."""
    from ftui.data.media_listing import listing_text
    from ftui.jobs.examples import image_listings

    try:
        listings = image_listings(cfg, MEDIA_RECORDS)
    except (OSError, ValueError) as err:  # a dataset that cannot be read: the records preview says why
        return Text(visible(err), style="red"), None
    lines, first = Text(), None
    for listing in listings:
        lines.append_text(listing_text(listing))
        first = first or next((image.path for image in listing.images if image.path), None)
    return lines, (thumbnail(first) if first else None)


def _image_widget(picture: Any) -> Any:
    """textual-image's widget for the terminal's best protocol, or None without the package."""
    try:
        from textual_image.widget import Image
    except Exception:
        return None
    return Image(picture, classes="media-picture")


class MediaPreview(Vertical):
    """The first record's images: a line per file, then the first picture."""

    DEFAULT_CSS = """
    MediaPreview { height: auto; display: none; padding-left: 0; }
    MediaPreview.-shown { display: block; }
    MediaPreview .media-lines { height: auto; color: $text-muted; }
    MediaPreview .media-picture { width: 40; height: 12; }
    """

    def compose(self) -> ComposeResult:
        yield Static("", classes="media-lines")

    def show(self, lines: Text, picture: Any = None) -> None:
        """Shows ``lines`` (already escaped: built from untrusted names with Text) and the
        picture (a PIL image from ``thumbnail``, or None); an empty ``lines`` hides the preview."""
        self.set_class(bool(lines.plain), "-shown")
        self.query_one(".media-lines", Static).update(lines)
        for old in self.query(".media-picture"):
            old.remove()
        if picture is not None:
            widget = _image_widget(picture)
            if widget is None:
                self.query_one(".media-lines", Static).update(
                    lines + Text("\n" + _("(install textual-image to see the image here)"), style="dim"))
            else:
                self.mount(widget)
