"""Small modal dialogs: confirm, ask for a path, show a text."""

from __future__ import annotations

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.screen import ModalScreen
from textual.widgets import Button, Input, Label, Static

from ftui.i18n import N_, _
from ftui.safety.text import visible


class Confirm(ModalScreen[bool]):
    """Yes / no. Focus starts on the yes button, so Enter does what the highlighted button
    says (the user pressed a key asking for exactly that); `y` and `n` answer from anywhere,
    Escape means no. The buttons and a hint line say so."""

    BINDINGS = [Binding("escape", "dismiss(False)", N_("cancel")), Binding("y", "dismiss(True)", N_("yes")),
                Binding("n", "dismiss(False)", N_("no"))]

    def __init__(self, question: str, yes: str | None = None, danger: bool = False):
        """``question`` and ``yes`` (the yes button's word, "Yes" when not given) come translated."""
        super().__init__()
        self.question, self.yes, self.danger = question, yes, danger

    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog"):
            yield Label(Text(visible(self.question)))  # it may name a run, a path: untrusted
            with Horizontal(classes="buttons"):
                yield Button(Text(f"[y] {self.yes_word}"), id="yes", variant="error" if self.danger else "primary")
                yield Button(Text("[n] " + _("No")), id="no")
            yield Label(Text(_("Enter: {yes}   Esc: cancel").format(yes=self.yes_word), style="dim"), classes="hint")

    @property
    def yes_word(self) -> str:
        return self.yes or _("Yes")

    def on_mount(self) -> None:
        self.query_one("#yes", Button).focus()

    async def recompose(self) -> None:
        await super().recompose()
        self.query_one("#yes", Button).focus()  # Enter still answers yes after a language switch

    def on_button_pressed(self, event: Button.Pressed) -> None:
        self.dismiss(event.button.id == "yes")


class AskPath(ModalScreen[str | None]):
    """One line of input (a file path). Enter accepts, Escape cancels."""

    BINDINGS = [Binding("escape", "dismiss(None)", N_("cancel"))]

    def __init__(self, title: str, value: str = ""):
        super().__init__()
        self.title_text, self.value = title, value

    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog"):
            yield Label(Text(visible(self.title_text)))
            yield Input(value=self.value, id="path")
            with Horizontal(classes="buttons"):
                yield Button(_("OK"), id="ok", variant="primary")
                yield Button(_("Cancel"), id="cancel")

    async def recompose(self) -> None:
        self.value = self.query_one(Input).value  # what was typed stays across a language switch
        await super().recompose()

    def on_input_submitted(self, event: Input.Submitted) -> None:
        self.dismiss(event.value.strip() or None)

    def on_button_pressed(self, event: Button.Pressed) -> None:
        self.dismiss(self.query_one(Input).value.strip() or None if event.button.id == "ok" else None)


class ShowText(ModalScreen[None]):
    """A block of text (the launch command) that the user can read and copy."""

    BINDINGS = [Binding("escape", "dismiss(None)", N_("close"))]

    def __init__(self, title: str, text: str):
        super().__init__()
        self.title_text, self.text = title, text

    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog wide"):
            yield Label(Text(visible(self.title_text), style="bold"))
            yield Static(Text(visible(self.text)), classes="code")
            with Horizontal(classes="buttons"):
                yield Button(_("Close"), id="close", variant="primary")

    def on_button_pressed(self, _event: Button.Pressed) -> None:
        self.dismiss(None)
