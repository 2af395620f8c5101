"""A footer that fits narrow terminals. Its own module, light to import: the launch form,
the first screen, uses it too."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.widget import Widget
from textual.widgets import Footer

from ftui.i18n import N_, _

N_("palette")  # Textual's own description of the command palette's key: translated here too


class FittingFooter(Footer):
    """A footer that keeps Quit and a screen's main keys in sight on a narrow terminal (80
    columns): when its keys do not fit, the keys of the actions in ``drop_first`` leave it, in
    that order, until the rest fit. Those keys still work, and the command palette lists them.

    The keys' descriptions (marked with N_ where the bindings are defined) are translated here,
    each time the footer is built: a language switch shows at once. Every screen uses it."""

    def __init__(self, drop_first: tuple[str, ...] = (), **kwargs) -> None:
        super().__init__(**kwargs)
        self.drop_first = drop_first
        self.hidden: frozenset[str] = frozenset()  # actions kept out of the footer for now (their keys still work)

    def hide(self, actions: frozenset[str]) -> None:
        """Keeps these actions' keys out of the footer (their keys still work), e.g. what only
        an ended run's dashboard offers; the others are fitted again."""
        if actions != self.hidden:
            self.hidden = actions
            self.fit()

    def compose(self) -> ComposeResult:
        for widget in super().compose():
            description = getattr(widget, "description", None)  # Textual's FooterKey (not exported by name)
            if isinstance(description, str) and description:
                widget.description = _(description)
            yield widget

    def retranslate(self) -> None:
        """Builds the keys again in the current language (a language switch). Queued to the
        footer itself: Textual binds its keys' settings while the footer is the one running."""
        self.call_later(self.recompose)

    async def recompose(self) -> None:
        await super().recompose()
        self.fit()

    def on_resize(self) -> None:
        self.fit()

    def fit(self) -> None:
        keys = list(self.query("FooterKey"))  # Textual's own key widgets (not exported by name)
        palette = [k for k in keys if k.has_class("-command-palette")]  # docked right: always shown
        hidden = [k for k in keys if k.action in self.hidden]
        keys = [k for k in keys if k not in palette and k not in hidden]
        room = self.size.width - sum(map(_key_width, palette))
        need = sum(map(_key_width, keys))
        dropped = set()
        for action in self.drop_first:
            for key in keys:
                if need > room and key.action == action:
                    dropped.add(key)
                    need -= _key_width(key)
        for key in keys:
            key.display = key not in dropped
        for key in hidden:
            key.display = False


def _key_width(key: Widget) -> int:
    """The columns a footer key takes: its text (with the key's own padding) and its gutter."""
    return key.render().cell_len + key.styles.gutter.width + key.styles.margin.width
