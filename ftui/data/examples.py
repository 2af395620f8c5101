"""What a config trains on, for ``ftui data`` and the launch form: one encoded example (as
ftui.jobs.examples gets them from ``python -m ftui.runner data``) shown with the masked part
dimmed, and the row columns both sides name. No torch here.
"""

from __future__ import annotations

from typing import Any

from rich.text import Text

from ftui.i18n import N_, _
from ftui.safety.text import visible  # control characters as escapes; newlines and tabs are the text's layout

IGNORE = -100  # a label with no loss (ftui.runner.data.IGNORE)
ROW_PREFIXES = ("", "chosen_", "rejected_", "kl_")
PART_NAMES = {"chosen_": "chosen", "rejected_": "rejected", "kl_": N_("mismatched answer (KTO's KL term)")}  # column names stay


def example_text(index: int, row: dict[str, Any]) -> Text:
    """One example as ``ftui data --show`` prints it: a header with its token counts, then its
    text with the masked part (no loss) dimmed; each part of a preference example (chosen,
    rejected; KTO's answer, tagged, and its mismatched answer) so. A Text, so dataset text is
    never markup, and control characters show as escapes."""
    text = Text()
    for prefix in ROW_PREFIXES:
        if f"{prefix}input_ids" not in row:
            continue
        labelled = sum(1 for label in row[f"{prefix}labels"] if label != IGNORE)
        part = _(PART_NAMES[prefix]) if prefix in PART_NAMES else ""
        if not prefix and "kto_tags" in row:
            part = _("desirable") if row["kto_tags"] else _("undesirable")
        head = _("example {index} ({part})").format(index=index, part=part) if part else _("example {index}").format(index=index)
        counts = _("{tokens} tokens, {labelled} with loss (masked: dimmed)").format(tokens=len(row[f"{prefix}input_ids"]), labelled=labelled)
        text.append(f"{head}: {counts}\n", style="bold")
        for piece, masked in row.get(f"{prefix}segments", []):
            text.append(visible(piece), style="dim" if masked else "")
        if not text.plain.endswith("\n"):
            text.append("\n")
    return text
