"""Words of a screen put in the current language again, in place: a language switch
(``FtuiApp.switch_language``) recomposes every screen, and a screen that holds state no
rebuild should lose (a form's fields, a conversation, a followed job) relabels its widgets
instead. Each screen lists its words by selector, marked with N_; compose shows them with _()."""

from __future__ import annotations

from typing import Mapping

from textual.screen import Screen
from textual.widgets import Button, Input, Label, Select, Static

from ftui.i18n import _


def relabel(screen: Screen, words: Mapping[str, str], titles: Mapping[str, str] | None = None) -> None:
    """``words``: each selector's widgets show their word in the current language (a button's
    label, an input's placeholder, a label's text); ``titles``: their border titles."""
    for selector, word in words.items():
        for widget in screen.query(selector):
            if isinstance(widget, Button):
                widget.label = _(word)
            elif isinstance(widget, Input):
                widget.placeholder = _(word)
            elif isinstance(widget, (Label, Static)):
                widget.update(_(word))
    for selector, word in (titles or {}).items():
        for widget in screen.query(selector):
            widget.border_title = _(word)


def word(words: Mapping[str, str], selector: str) -> str:
    """A screen's word (of its WORDS) in the current language, for compose. (Not written as
    ``_(WORDS["#id"])``: extraction would take the selector for a message.)"""
    return _(words[selector])


def offer(select: Select, options: list[tuple[str, str]]) -> None:
    """A select's options replaced (a worker has read them), the first chosen."""
    select.set_options(options)
    select.value = options[0][1]


def relabel_options(select: Select, options: list[tuple[str, str]]) -> None:
    """A select's options in the current language, the chosen one kept (a handler of its
    Changed may see the first option go by first, then the chosen one again)."""
    chosen = select.value
    select.set_options(options)
    if any(value == chosen for _label, value in options):
        select.value = chosen
