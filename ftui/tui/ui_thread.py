"""A thread worker's result to the UI thread, for a screen that may be gone by then.

``App.call_from_thread`` runs its callable on the UI thread whatever became of the screen
that asked: the user may have closed it, or the app may be shutting down, pruning the
screen's widgets one by one while the screen is still attached. A query then raises
NoMatches in the app's loop (an error at quit, and a flaky test). Every screen's workers hand
their results over through :func:`to_ui`, which drops them in those cases.
"""

from __future__ import annotations

from typing import Any, Callable

from textual.message_pump import MessagePump


def to_ui(node: MessagePump, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> None:
    """Runs ``fn(*args, **kwargs)`` on the UI thread if ``node`` is still in the running app."""
    app = node.app

    def run() -> None:
        if node.is_attached and app.is_running:
            fn(*args, **kwargs)

    app.call_from_thread(run)
