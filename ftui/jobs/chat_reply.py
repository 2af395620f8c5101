"""The chat worker's reply protocol, decoded once for every reader (the CLI's REPL and the
app's chat screen). ``python -m ftui.runner chat`` answers a ``generate`` request with JSON
lines: ``token`` replies (``text``), then ``done`` (``tokens``, ``tokens_per_s``, ``stopped``),
or ``error`` (``message``); ChatWorker adds ``exit`` when the worker's output closes. Replies
carry the request's ``id``: one of an earlier answer (a stop that crossed a new prompt) is
not this answer's."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Union

from ftui.i18n import _


@dataclass(frozen=True)
class Token:
    """A piece of the answer (untrusted text: the reader shows it safely)."""

    text: str


@dataclass(frozen=True)
class Done:
    """The answer is complete: ``tokens`` generated at ``rate`` tokens/s; ``stopped``: the
    user stopped it."""

    tokens: int
    rate: float
    stopped: bool


@dataclass(frozen=True)
class Failed:
    """The answer failed (``exited``: the worker itself ended; a reader may reload it)."""

    message: str
    exited: bool = False


AnswerPart = Union[Token, Done, Failed]


def decode_reply(reply: dict[str, Any], request_id: int | None) -> AnswerPart | None:
    """One reply of the answer to ``request_id``, decoded; None for a reply that is not part
    of it (another request's, or a kind an answer does not have)."""
    if reply.get("id") not in (None, request_id):
        return None
    kind = reply.get("type")
    if kind == "token":
        return Token(str(reply.get("text", "")))
    if kind == "done":
        tokens = reply.get("tokens")
        rate = reply.get("tokens_per_s")
        return Done(tokens if isinstance(tokens, int) else 0, float(rate) if isinstance(rate, (int, float)) else 0.0,
                    bool(reply.get("stopped")))
    if kind in ("error", "exit"):
        return Failed(str(reply.get("message") or _("the answer failed")), exited=kind == "exit")
    return None
