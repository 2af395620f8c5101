"""A thread worker's result reaches its screen only while the screen is in the running app."""

import asyncio

from textual.app import App
from textual.screen import Screen

from ftui.tui.ui_thread import to_ui


async def test_a_result_for_a_closed_screen_is_dropped():
    """A worker's result that arrives after its screen was closed (or while the app shuts down
    and prunes the screen's widgets) is not run: its queries would raise NoMatches."""
    calls: list[str] = []
    app = App()
    async with app.run_test() as pilot:
        screen = Screen()
        await app.push_screen(screen)
        await asyncio.to_thread(to_ui, screen, calls.append, "open")  # from a thread, as a worker calls it
        assert calls == ["open"]
        await app.pop_screen()
        await pilot.pause()
        await asyncio.to_thread(to_ui, screen, calls.append, "closed")
        assert calls == ["open"]
        await asyncio.to_thread(to_ui, app.screen, calls.append, "the current one")
        assert calls == ["open", "the current one"]
