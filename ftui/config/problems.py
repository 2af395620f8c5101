"""How a config's problems are told: one FieldProblem per field, ConfigError for a config that
cannot be used, pydantic's messages in the user's language, and the line about kept keys."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

from ftui.config.schema import RunConfig
from ftui.i18n import N_, _, current_language
from ftui.presets.lf_keys import classify
from ftui.rundir.paths import DEMO_MODEL
from ftui.safety.bounded_input import short_repr



@dataclass(frozen=True)
class FieldProblem:
    """One invalid field: shown next to the field in the form, one line on the CLI."""

    field: str
    value: Any
    message: str

    def __str__(self) -> str:
        field = self.field if len(self.field) <= 120 else self.field[:120] + "..."  # a key pasted by mistake can be long
        return f"{field} = {short_repr(self.value)}: {self.message}"  # capped: a value may be huge once written out


class ConfigError(ValueError):
    """A config that cannot run; ``problems`` has one entry per offending field."""

    def __init__(self, problems: list[FieldProblem], source: str = "config"):
        self.problems = problems
        if len(problems) == 1 and problems[0].field == "config":  # the file itself (missing, unreadable, not YAML)
            value = problems[0].value
            super().__init__(f"{value if isinstance(value, str) else short_repr(value)}: {problems[0].message}")
            return
        lines = "\n".join(f"  - {p}" for p in problems)
        super().__init__(_("{source} has {n} invalid setting(s):").format(source=source, n=len(problems)) + f"\n{lines}")


def unsupported_warning(extra: dict[str, Any], stage: str | None = None) -> str | None:
    """One line for the keys ftui has no field for that do not change what is trained
    (LLaMA-Factory's logging, worker and generation keys, or a refused key left at its no-op
    default): kept in the file, listed once. Keys nobody knows are not here: they are refused
    (``unknown_key_problems``)."""
    ignored = kept_without_effect(extra, stage)
    if not ignored:
        return None
    return _("{n} key(s) kept in the file with no effect on what is trained: {keys}").format(
        n=len(ignored), keys=", ".join(ignored))


def kept_without_effect(extra: dict[str, Any], stage: str | None = None) -> list[str]:
    """The keys of ``extra`` (keys ftui has no field for) that are kept without effect, sorted;
    ``stage``'s own options are not among them (grpo's temperature, top_p, top_k: LLaMA-Factory's
    generation keys, which change what grpo trains)."""
    from ftui.stages import find

    described = find(stage)
    own = set(described.option_keys) if described is not None else set()
    return sorted(k for k, v in extra.items() if classify(k, v) == "no-effect" and k not in own)



# What an empty required field says (a new form opens with both empty), instead of
# pydantic's "String should have at least 1 character".
REQUIRED_WORDING = {
    "model_name_or_path": N_("required: a model directory or hub name"),
    "dataset": N_("required: a dataset name or file"),
}
# pydantic's own messages by error type (its English templates), translated for the other
# languages; a type not listed keeps pydantic's English.
PYDANTIC_MESSAGES = {
    "greater_than": N_("Input should be greater than {gt}"),
    "greater_than_equal": N_("Input should be greater than or equal to {ge}"),
    "less_than": N_("Input should be less than {lt}"),
    "less_than_equal": N_("Input should be less than or equal to {le}"),
    "literal_error": N_("Input should be {expected}"),
    "string_too_short": N_("String should have at least {min_length} character(s)"),
    "int_parsing": N_("Input should be a valid integer, unable to parse string as an integer"),
    "int_from_float": N_("Input should be a valid integer, got a number with a fractional part"),
    "float_parsing": N_("Input should be a valid number, unable to parse string as a number"),
    "bool_parsing": N_("Input should be a valid boolean, unable to interpret input"),
    "int_type": N_("Input should be a valid integer"),
    "float_type": N_("Input should be a valid number"),
    "bool_type": N_("Input should be a valid boolean"),
    "string_type": N_("Input should be a valid string"),
    "finite_number": N_("Input should be a finite number"),
    "bool_for_number": N_("Input should be a number, not true or false"),
}


def pydantic_message(error: dict[str, Any]) -> str:
    """One pydantic error's message in the current language (English: pydantic's own). A
    ValueError of ftui's own validators is its text alone (pydantic prefixes "Value error, ")."""
    raised = (error.get("ctx") or {}).get("error")
    if error["type"] == "value_error" and raised is not None:
        return str(raised)
    template = PYDANTIC_MESSAGES.get(error["type"])
    if template is None or current_language() == "en":
        return error["msg"]
    ctx = {k: f"{v:g}" if isinstance(v, float) else v for k, v in (error.get("ctx") or {}).items()}
    try:
        return _(template).format(**ctx)
    except (KeyError, IndexError, ValueError):
        return error["msg"]


# Stand-ins for a required field that failed, so the other fields' cross-field rules still run.
STAND_INS = {"model_name_or_path": DEMO_MODEL, "dataset": "-"}


def pydantic_problems(err: ValidationError, data: dict[str, Any]) -> list[FieldProblem]:
    """One problem per field pydantic refused, in the current language, with the field's help."""
    problems = []
    for e in err.errors():
        field = ".".join(str(p) for p in e["loc"]) or "config"
        value = data.get(field, e.get("input")) if e["type"] != "missing" else None
        if field in REQUIRED_WORDING and (e["type"] == "missing" or not str(value or "").strip()):
            problems.append(FieldProblem(field, value, _(REQUIRED_WORDING[field])))
            continue
        msg = _("is required") if e["type"] == "missing" else pydantic_message(e)
        desc = RunConfig.model_fields.get(field)
        if desc is not None and desc.description and e["type"] != "missing":
            msg += f" ({_(desc.description)})"
        problems.append(FieldProblem(field, value, msg))
    return problems
