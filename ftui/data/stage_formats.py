"""How a stage reads a dataset: the format it settles from the first record (``check_format``)
and the launch form's preview of a record as the stage reads it (``record_preview``). It sits
above ``ftui.data.records`` (the supervised formats) and ``ftui.data.preference_records`` (the
ranking and feedback formats), so neither imports the other's dispatch.
"""

from __future__ import annotations

from typing import Any

from ftui.i18n import _
from ftui.stages import PAIRS, RAW_TEXT, TAGGED_ANSWERS
from ftui.data.media import media_refusal
from ftui.data.records import DataFormatError, DatasetRefused, DatasetSpec, apply_detected_format, data_kind, to_messages, to_text


def check_format(spec: DatasetSpec, first: Any, stage: str) -> str:
    """Settles how ``stage`` reads the dataset (from its first record, for a file given by
    path) and names it: raw text for pt, else alpaca or sharegpt. Media the stage cannot train
    (ftui.data.media.media_refusal) are refused here too, in the run as before it."""
    refusal = media_refusal(spec, stage, first)
    if refusal:
        raise DatasetRefused(refusal)
    kind = data_kind(stage)
    if kind == RAW_TEXT:
        if spec.ranking:
            raise DataFormatError(_("dataset {name} is a preference (ranking) dataset; it fits stage dpo or rm, not pt").format(
                name=repr(spec.name)))
        return _("raw text")
    from ftui.data.preference_records import stage_fit_problem

    if not spec.explicit_format and isinstance(first, dict) and "chosen" in first and "rejected" in first:
        spec.formatting = "sharegpt" if ("conversations" in first or "messages" in first) else "alpaca"
    else:
        apply_detected_format(spec, first)
    problem = stage_fit_problem(spec, first, stage)
    if problem:
        raise DataFormatError(problem)
    named = {PAIRS: _("{formatting} ranking format"), TAGGED_ANSWERS: _("{formatting} feedback format")}.get(kind, _("{formatting} format"))
    return named.format(formatting=spec.formatting)


def record_preview(record: Any, spec: DatasetSpec, index: int, stage: str) -> tuple[str, str]:
    """(what the model reads, what it learns) of one record, as ``stage`` reads it: the launch
    form's preview. Raises DataFormatError showing the record, as training would."""
    kind = data_kind(stage)
    if kind == RAW_TEXT:
        return to_text(record, spec, index), ""
    if kind in (PAIRS, TAGGED_ANSWERS):
        from ftui.data.preference_records import comparison_preview

        return comparison_preview(record, spec, index, stage)
    messages, _tools = to_messages(record, spec, index)
    user = next((m["content"] for m in messages if m["role"] == "user"), "")
    answer = next((m["content"] for m in messages if m["role"] == "assistant"), "")
    return user, answer
