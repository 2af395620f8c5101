"""A serve job's events as its readers show them: ``serve_ready`` (where it listens) and
``serve_stats`` (its counters), read once here for ``ftui watch``, ``ftui serve`` / ``ftui
train``'s follower and the Serve screen.

The events come from a run directory, which is untrusted: every field is checked for its
type (a count is an int, a rate a finite number, the URL a short string of printable
characters) and anything else reads as unknown. Torch-free.
"""

from __future__ import annotations

import math
import re
from typing import Any

from ftui.i18n import _

# serve_stats' counters, in the order a stats line says them
COUNTERS = ("requests", "answered", "rejected", "errors", "disconnected", "active", "queued", "prompt_tokens",
            "generated_tokens")
MAX_URL = 300  # a URL longer than this is not one a serve job wrote
URL_RE = re.compile(r"https?://[A-Za-z0-9._:\[\]-]+(/[A-Za-z0-9._~/-]*)?")  # http://HOST:PORT/v1: nothing a shell or a quote would read


def count(event: dict[str, Any], name: str) -> int | None:
    """A counter of ``event``: a whole number of 0 or more, else None."""
    value = event.get(name)
    return value if type(value) is int and 0 <= value < 1 << 62 else None


def rate(event: dict[str, Any], name: str = "tokens_per_s") -> float | None:
    value = event.get(name)
    return float(value) if type(value) in (int, float) and math.isfinite(value) and value >= 0 else None


def ready_url(event: dict[str, Any]) -> str | None:
    """The base URL a serve_ready event gives (``http://HOST:PORT/v1``), or None when it is
    not a plausible one."""
    url = event.get("url")
    if isinstance(url, str) and len(url) <= MAX_URL and URL_RE.fullmatch(url):
        return url
    return None


def ready_port(event: dict[str, Any]) -> int | None:
    port = event.get("port")
    return port if type(port) is int and 0 < port < 65536 else None


def ready_models(event: dict[str, Any]) -> list[str]:
    """The model ids a serve_ready event lists (printable strings only)."""
    models = event.get("models")
    if not isinstance(models, list):
        return []
    return [m for m in models if isinstance(m, str) and m.isprintable() and 0 < len(m) <= 64][:32]


def fmt_serve_ready(event: dict[str, Any]) -> str:
    """``serving at http://127.0.0.1:8000/v1 (models: demo; an API key is required)``."""
    url = ready_url(event) or "?"
    models = ", ".join(ready_models(event)) or "?"
    key = _("an API key is required") if event.get("key") is True else _("no API key")
    return _("serving at {url} (models: {models}; {key})").format(url=url, models=models, key=key)


def fmt_serve_stats(event: dict[str, Any]) -> str:
    """``requests 12 answered 10 429s 1 errors 0 tok/s 35.2``: what a serve job has done so far
    (key names as the event spells them, the same in every language: scripts read them)."""
    def shown(name: str) -> str:
        value = count(event, name)
        return "?" if value is None else str(value)

    tps = rate(event)
    line = (f"requests {shown('requests')} answered {shown('answered')} 429s {shown('rejected')} errors {shown('errors')} "
            f"tok/s {'?' if tps is None else f'{tps:,.1f}'}")
    for name in ("active", "queued"):
        if count(event, name):
            line += f" {name} {count(event, name)}"
    return line
