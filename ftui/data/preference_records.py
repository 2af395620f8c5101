"""Records of the preference stages, read as LLaMA-Factory's converters read them.

- Ranking datasets (``ranking: true`` in dataset_info.json, or a file given by path whose
  records have ``chosen`` and ``rejected``) for ``stage: dpo`` and ``stage: rm``: alpaca with
  text ``chosen`` / ``rejected`` columns, or sharegpt whose conversation ends with the user's
  turn and whose ``chosen`` / ``rejected`` columns are one assistant turn each.
- Feedback datasets for ``stage: kto``: an ordinary alpaca or sharegpt record (its last
  assistant turn is the answer) with a boolean ``kto_tag`` column (desirable or not).

Each record becomes a :class:`Comparison`: the prompt as a conversation ending with the user's
turn, and its answers. Like LLaMA-Factory, a record whose turns do not alternate is skipped
(None), a malformed one is an error that shows it. Torch-free: the launch form previews these.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ftui.i18n import N_, _
from ftui.data.conversation import ASSISTANT, FUNCTION, OBSERVATION, USER, Conversation
from ftui.data.records import DataFormatError, DatasetSpec, _fail, _text, data_kind, to_conversation
from ftui.stages import PAIRS, TAGGED_ANSWERS

# English (N_): translated where a message shows it
RANKING_EXPECTED = {
    "alpaca": N_("instruction (text), input (optional text), chosen (text), rejected (text); optional system, history"),
    "sharegpt": N_("conversations ending with the user's turn, chosen and rejected: one turn each (from: gpt, value: text)"),
}


@dataclass
class Comparison:
    """A prompt (turns ending with the user's) and its answers: (chosen, rejected) for ranking
    data; (answer,) with ``desirable`` for KTO's feedback data."""

    prompt: Conversation
    answers: list[dict[str, str]]
    desirable: bool | None = True  # None: a feedback record without a true/false tag (skipped, as LF does)


def is_ranking_record(record: Any) -> bool:
    """A record of a file given by path that holds a preference pair."""
    return isinstance(record, dict) and "chosen" in record and "rejected" in record


def kto_column(spec: DatasetSpec) -> str | None:
    return spec.columns.get("kto_tag") or (None if spec.explicit_format else "label")


def stage_fit_problem(spec: DatasetSpec, first: Any, stage: str) -> str | None:
    """Why the dataset does not fit ``stage`` (a ranking set for sft, a plain set for dpo, ...), else None."""
    ranking = spec.ranking or (not spec.explicit_format and is_ranking_record(first))
    if ranking:
        spec.ranking = True
    kind = data_kind(stage)
    if kind == PAIRS and not ranking:
        return _("dataset {name} has no chosen/rejected answers: stage {stage} trains on preference pairs (a dataset_info.json "
                 "entry with ranking: true and chosen/rejected columns, e.g. LLaMA-Factory's dpo_en_demo)").format(
            name=repr(spec.name), stage=stage)
    if kind != PAIRS and ranking:
        return _("dataset {name} is a preference (ranking) dataset with chosen/rejected answers; it fits stage dpo or rm, "
                 "not {stage}").format(name=repr(spec.name), stage=stage)
    if kind == TAGGED_ANSWERS:
        column = kto_column(spec)
        if not column or not isinstance(first, dict) or not isinstance(first.get(column), bool):
            return _("dataset {name} has no true/false kto_tag column: stage kto learns from answers tagged desirable "
                     "or not (columns: kto_tag: label in dataset_info.json, as LLaMA-Factory's kto_en_demo)").format(name=repr(spec.name))
    return None


def registry_fit_problem(spec: DatasetSpec, stage: str) -> str | None:
    """What a dataset_info.json entry alone says against ``stage`` (files given by path are
    judged by their first record, when the run reads them)."""
    kind = data_kind(stage)
    if not spec.explicit_format or not (spec.ranking or kind in (PAIRS, TAGGED_ANSWERS)):
        return None
    if kind == TAGGED_ANSWERS and not spec.ranking:
        if not spec.columns.get("kto_tag"):
            return _("dataset {name} has no kto_tag column in its dataset_info.json entry: stage kto learns from "
                     "answers tagged desirable or not (columns: kto_tag: label, as LLaMA-Factory's kto_en_demo)").format(name=repr(spec.name))
        return None
    return stage_fit_problem(spec, None, stage)


def to_comparison(record: Any, spec: DatasetSpec, index: int, stage: str) -> Comparison | None:
    """One record of a ranking (dpo, rm) or feedback (kto) dataset; None: LLaMA-Factory skips it."""
    if not isinstance(record, dict):
        raise _fail(spec, index, record, _("a record must be a JSON object"))
    if data_kind(stage) == TAGGED_ANSWERS:
        return _feedback(record, spec, index)
    return _ranking(record, spec, index)


def _answer_turn(value: Any, spec: DatasetSpec, index: int, record: dict[str, Any], column: str) -> dict[str, str] | None:
    """The answer as a turn; None where LLaMA-Factory's converter finds no answer (a chosen or
    rejected that is not text, or not a turn, e.g. null) and drops the record."""
    if spec.formatting == "alpaca":
        return {"role": ASSISTANT, "content": value} if _text(value) else None
    role_tag, content_tag = spec.tag("role_tag"), spec.tag("content_tag")
    if isinstance(value, dict) and role_tag not in value and "role" in value and not spec.tags:
        role_tag, content_tag = "role", "content"
    if not isinstance(value, dict):
        return None
    if not _text(value.get(content_tag)):
        raise _ranking_fail(spec, index, record, _("{column} must be one turn with text {content}").format(
            column=repr(column), content=repr(content_tag)))
    roles = {spec.tag("assistant_tag"): ASSISTANT, spec.tag("function_tag"): FUNCTION, "assistant": ASSISTANT}
    if value.get(role_tag) not in roles:
        return None  # LLaMA-Factory: "Invalid role tag", the example is dropped
    return {"role": roles[value[role_tag]], "content": value[content_tag]}


def _ranking_fail(spec: DatasetSpec, index: int, record: Any, problem: str) -> DataFormatError:
    return _fail(spec, index, record, problem, RANKING_EXPECTED[spec.formatting], kind=f"{spec.formatting} ranking")


def _prompt_of(record: dict[str, Any], spec: DatasetSpec, index: int, with_answer: bool) -> Conversation | None:
    """The record's conversation as to_conversation reads it; for ranking records (no answer
    in the conversation) a placeholder answer is added for the checks and taken off again."""
    if with_answer:
        conv = to_conversation(record, spec, index)
        return conv
    probe = dict(record)
    if spec.formatting == "alpaca":
        probe[spec.column("response")] = "-"
        conv = to_conversation(probe, spec, index)
        return None if conv is None else Conversation(conv.turns[:-1], conv.system, conv.tools)
    col = spec.column("messages")
    turns = record.get(col) if record.get(col) is not None else record.get("messages")
    if not isinstance(turns, list) or not turns:
        raise _ranking_fail(spec, index, record, _("missing or empty list {field}").format(field=repr(col)))
    first = turns[0] if isinstance(turns[0], dict) else {}
    role_tag = spec.tag("role_tag") if spec.tag("role_tag") in first or spec.tags else "role"
    content_tag = spec.tag("content_tag") if role_tag == spec.tag("role_tag") else "content"
    assistant = spec.tag("assistant_tag") if role_tag == spec.tag("role_tag") else "assistant"
    probe[col if record.get(col) is not None else "messages"] = turns + [{role_tag: assistant, content_tag: "-"}]
    conv = to_conversation(probe, spec, index)
    return None if conv is None else Conversation(conv.turns[:-1], conv.system, conv.tools)


def _ranking(record: dict[str, Any], spec: DatasetSpec, index: int) -> Comparison | None:
    chosen_col, rejected_col = spec.columns.get("chosen", "chosen"), spec.columns.get("rejected", "rejected")
    if chosen_col not in record or rejected_col not in record:
        raise _ranking_fail(spec, index, record, _("missing {chosen} or {rejected}").format(chosen=repr(chosen_col), rejected=repr(rejected_col)))
    prompt = _prompt_of(record, spec, index, with_answer=False)
    chosen = _answer_turn(record[chosen_col], spec, index, record, chosen_col)
    rejected = _answer_turn(record[rejected_col], spec, index, record, rejected_col)
    if prompt is None or chosen is None or rejected is None or not prompt.turns:
        return None
    return Comparison(prompt, [chosen, rejected])


def _feedback(record: dict[str, Any], spec: DatasetSpec, index: int) -> Comparison | None:
    column = kto_column(spec)
    tag = record.get(column) if column else None
    conv = _prompt_of(record, spec, index, with_answer=True)
    if conv is None:
        return None
    # A tag that is not true/false (null): LLaMA-Factory drops the example but still hands its
    # answer to the next one as the mismatched (KL) completion; so does desirable=None here.
    return Comparison(Conversation(conv.turns[:-1], conv.system, conv.tools), [conv.turns[-1]],
                      desirable=tag if isinstance(tag, bool) else None)


def comparison_preview(record: Any, spec: DatasetSpec, index: int, stage: str) -> tuple[str, str]:
    """(the last prompt turn, the answers) of one record, for the launch form's preview."""
    comp = to_comparison(record, spec, index, stage)
    if comp is None:
        return _("(skipped: its turns do not alternate user and assistant)"), ""
    user = comp.prompt.turns[-1]["content"] if comp.prompt.turns else ""
    if data_kind(stage) == TAGGED_ANSWERS:
        tag = {True: _("desirable"), False: _("undesirable"), None: _("untagged: skipped")}[comp.desirable]
        return user, f"[{tag}] {comp.answers[0]['content']}"
    return user, f"chosen: {comp.answers[0]['content']}\nrejected: {comp.answers[1]['content']}"


TURN_ROLES = {USER: "user", ASSISTANT: "assistant", OBSERVATION: "tool", FUNCTION: "assistant"}


def as_messages(conv: Conversation, answer: dict[str, str] | None = None) -> list[dict[str, str]]:
    """The prompt (and an answer) as chat messages for a tokenizer's own chat template."""
    out = [{"role": "system", "content": conv.system}] if conv.system else []
    turns = conv.turns + ([answer] if answer is not None else [])
    return out + [{"role": TURN_ROLES[t["role"]], "content": t["content"]} for t in turns]
