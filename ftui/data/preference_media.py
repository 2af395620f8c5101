"""The image files of a preference record (dpo and rm pairs, kto's tagged answers), checked as
LLaMA-Factory 0.9.5's pairwise and feedback processors check them.

LLaMA-Factory hands the record's images to its multimodal plugin once per sequence: the prompt
with the chosen answer, and the prompt with the rejected one (``processor/pairwise.py``), each
checked for as many ``<image>`` placeholders as images (``_validate_messages``). A ranking
record's conversation ends with the user's turn, so ``ftui.data.media.record_media`` (which
reads a record as a conversation with answers) is given the record with each answer put back
in its place, in the record's own layout: the files are resolved and checked once per answer,
and the placeholders counted over the prompt and that answer, as LLaMA-Factory counts them. A
feedback record (kto) is an ordinary conversation and is read as it is. No torch here: the
preflight and the runner's preference stages share this.
"""

from __future__ import annotations

from typing import Any

from ftui.data.media import media_columns, record_media
from ftui.data.records import DatasetSpec
from ftui.stages import PAIRS


def with_answer(record: dict[str, Any], spec: DatasetSpec, column: str) -> dict[str, Any]:
    """The ranking record with the answer in ``column`` (its chosen or rejected one) put where
    a conversation's answer goes: after the turns (sharegpt), or as the response (alpaca)."""
    answer = record.get(column)
    probe = dict(record)
    if spec.formatting == "alpaca":
        probe[spec.column("response")] = answer
        return probe
    messages = spec.column("messages")
    key = messages if record.get(messages) is not None else "messages"
    turns = record.get(key)
    probe[key] = (list(turns) if isinstance(turns, list) else []) + [answer]
    return probe


def preference_images(record: Any, spec: DatasetSpec, index: int, kind: str) -> list[str]:
    """The record's image files (absolute paths, checked: ftui.data.media.record_media) for a
    stage reading ``kind`` records (PAIRS or TAGGED_ANSWERS); [] for a dataset without media
    columns. Raises a MediaError naming the dataset, the record and the file."""
    if not isinstance(record, dict) or not media_columns(spec, record):
        return []
    if kind != PAIRS:
        return record_media(record, spec, index)["images"]
    columns = [spec.columns.get(side, side) for side in ("chosen", "rejected")]
    if not all(isinstance(record.get(c), str if spec.formatting == "alpaca" else dict) for c in columns):
        return []  # no answer to pair the images with: LLaMA-Factory drops the record, and so does the stage
    found = [record_media(with_answer(record, spec, column), spec, index)["images"] for column in columns]
    return found[0]
