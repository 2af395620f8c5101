"""The ``<image>`` placeholders of a record's turns, replaced by each image's tokens in order
over the turns, as every LLaMA-Factory 0.9.5 plugin does (``mm_plugin.py``: the placeholder
count checked by ``_validate_messages``, then each ``process_messages``)."""

from __future__ import annotations

from ftui.i18n import _
from ftui.data.conversation import ConversationError

IMAGE_PLACEHOLDER = "<image>"  # LLaMA-Factory's (its IMAGE_PLACEHOLDER environment variable is not read)


def expand_placeholders(turns: list[dict[str, str]], texts: list[str], mark: str = IMAGE_PLACEHOLDER) -> list[dict[str, str]]:
    """The turns with each ``<image>`` placeholder replaced by its image's text, in order over
    the turns; the number of placeholders must equal the number of images (LLaMA-Factory's
    rule, ``_validate_messages``); ``mark``: ``<video>`` for videos."""
    found = sum(turn["content"].count(mark) for turn in turns)
    if found != len(texts):
        raise ConversationError(_("it has {images} images but {placeholders} {placeholder} placeholders in its messages; "
                                  "each image needs one placeholder where it goes").format(
            images=len(texts), placeholders=found, placeholder=mark))
    out, k = [], 0
    for turn in turns:  # split, not replaced in a loop: LLaVA's image token is "<image>" itself
        parts = turn["content"].split(mark)
        content = parts[0]
        for part in parts[1:]:
            content += texts[k] + part
            k += 1
        out.append({**turn, "content": content})
    return out
