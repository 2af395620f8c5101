"""One conversation of the chat screen (a pane per model when comparing): the user's turns
and the model's answers, the last growing as it streams. A model's text is shown as plain
``Text`` with its control characters as escapes (ftui.safety.text), never as markup."""

from __future__ import annotations

from typing import Any

from rich.text import Text
from textual.containers import VerticalScroll
from textual.widgets import Static

from ftui.i18n import _
from ftui.safety.text import visible


class ChatPane(VerticalScroll):
    """One conversation: user turns and the model's answers, the last one growing as it streams."""

    def __init__(self, title: str, **kwargs: Any):
        """``title``: marked with N_, shown translated until a model's own label replaces it."""
        super().__init__(**kwargs)
        self.default_title = title
        self.model_label: str | None = None  # the loaded model's label is the title (never translated)
        self.border_title = _(title)
        self._answer: Static | None = None
        self._text = ""

    def add_user(self, text: str, waiting: bool = False, media: dict[str, list[str]] | None = None) -> None:
        """The user's turn (with its images' and videos' names) and a place for the answer
        (``waiting``: the model is still loading)."""
        turn = Text.assemble((_("you") + ": ", "bold cyan"), visible(text))
        for kind, label in (("images", _("image")), ("videos", _("video"))):
            for path in (media or {}).get(kind, ()):
                turn.append("\n  [" + label + "] " + visible(path, one_line=True), style="dim")
        self.mount(Static(turn, classes="turn"))
        self._answer = Static(Text("… " + _("(sent when the model has loaded)") if waiting else "…", style="dim"),
                              classes="turn answer")
        self._text = ""
        self.mount(self._answer)
        self.scroll_end(animate=False)

    def add_tokens(self, text: str) -> None:
        self._text += text
        if self._answer is not None:
            self._answer.update(Text(visible(self._text)))  # plain Text: model output is never markup, its controls escaped
            self.scroll_end(animate=False)

    def finish(self, note: str) -> str:
        if self._answer is not None:
            self._answer.update(Text.assemble(visible(self._text), ("\n" + note, "dim")))
        text, self._answer = self._text, None
        return text

    def show_error(self, message: str) -> None:
        self.mount(Static(Text(visible(message), style="red"), classes="turn"))
        self._answer = None
        self.scroll_end(animate=False)

    def clear_turns(self) -> None:
        self.remove_children()
        self._answer = None
