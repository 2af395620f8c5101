"""What a training stage is, said once and without torch: the type every module of
``ftui.stages`` fills in (one module per stage, its ``DESCRIPTION``).

The app side reads it: the config's rules (``ftui.config.rules.stage_problems``), the
launch form's stage fields, the data checks (which records the stage reads), the planner's
terms, the eval and export jobs and the dashboard's figures. The runner implements it: the
module of the same name in ``ftui/runner/stages/`` (or the one ``runner`` names).

Nothing here imports pydantic at import time: the launch form draws the stages' names and
their fields' labels before its first frame, which builds no pydantic model; a stage's
options sub-model (:meth:`StageDescription.options_model`) is built when first asked for.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Any, Callable, Literal, Mapping

# The kinds of records a stage reads (ftui.data.records and ftui.data.preference_records read them).
CONVERSATIONS = "conversations"  # alpaca / sharegpt records: prompts and answers (records.to_conversation, to_messages)
RAW_TEXT = "raw text"  # documents (records.to_text)
PAIRS = "pairs"  # ranking records: a prompt, a chosen and a rejected answer (preference_records)
TAGGED_ANSWERS = "tagged answers"  # feedback records: one answer tagged desirable or not (kto_tag; preference_records)
DATA_KINDS = (CONVERSATIONS, RAW_TEXT, PAIRS, TAGGED_ANSWERS)

# Whether a stage packs examples into full rows (the config's packing key)
PACKING_NEVER = "never"  # packing: true is refused (whole answers are compared)
PACKING_OFF = "off"  # packing allowed; unset means off (sft)
PACKING_ON = "on"  # packing allowed; unset means on (pt's blocks of raw text)

# A problem a stage's own rule finds: (the config key, its value, the message in the current language)
Problem = tuple[str, Any, str]


class UnknownStage(KeyError):
    """A stage name no module of ftui.stages describes."""


@dataclass(frozen=True)
class StageOption:
    """One of a stage's own config keys. ``key`` is the key as LLaMA-Factory (and RunConfig)
    name it, never renamed; ``label`` and ``help`` are English, marked with ``N_`` and
    translated where shown (the launch form's label; the sub-model's title and description).
    ``choices``: (value, what it is) for a select, the form showing "value: what it is"."""

    key: str
    label: str
    help: str
    default: Any
    type: type = float
    choices: tuple[tuple[str, str], ...] = ()
    gt: float | None = None
    ge: float | None = None
    lt: float | None = None
    le: float | None = None

    @property
    def form_kind(self) -> str:
        """How the launch form shows it: a select for choices, a switch for a bool, else text."""
        return "select" if self.choices else "bool" if self.type is bool else "text"

    @property
    def bounds(self) -> dict[str, float]:
        return {k: v for k, v in (("gt", self.gt), ("ge", self.ge), ("lt", self.lt), ("le", self.le)) if v is not None}


@dataclass(frozen=True)
class PlannerTerms:
    """What the memory planner (ftui.plan.planner.estimate) counts differently for a stage.

    ``rows_with_gradients``: rows of one example whose activations are kept for backward (a
    pair's two answers; kto's mismatched row runs without gradients, so 1). ``output``: how
    the loss reads the last hidden states: ``logits`` (the token loss, in chunks, Liger's
    fused one included), ``logps`` (the answers' log-probabilities in ftui's own chunks, which
    Liger does not bound) or ``value`` (a value head: one number a position, no logits).
    ``running_text``: each row is one sequence of running text (pt), so flash_attn fa2 has no
    mask to save. ``generation``: it samples its own completions with the policy between steps
    (grpo, ppo): the planner adds the rollout's KV cache and buffer (ftui.plan.generation), reading
    the stage's ``max_completion_length`` and, where it has them, ``num_generations`` and
    ``steps_per_generation``; its rows are the prompt (cutoff_len) plus the completion; with
    ``value_head`` too (ppo) the head trains beside the policy's logits."""

    rows_with_gradients: int = 1
    output: Literal["logits", "logps", "value"] = "logits"
    running_text: bool = False
    generation: bool = False


def never(options: Mapping[str, Any]) -> bool:
    return False


def always(options: Mapping[str, Any]) -> bool:
    return True


@dataclass(frozen=True)
class StageDescription:
    """A training stage, as the app side needs to know it.

    - ``name``: LLaMA-Factory's stage name (the config's ``stage``); ``short``: a few words
      (the form's choice, "sft: supervised fine-tuning"); ``help``: one line. English, N_.
    - ``order``: where it is listed (the form, messages): LLaMA-Factory's order.
    - ``data``: the kind of records it reads (one of DATA_KINDS).
    - ``packing``: PACKING_NEVER, PACKING_OFF or PACKING_ON (what unset means).
    - ``neat_packing``: LLaMA-Factory's neat_packing applies (it turns packing on), else it is refused.
    - ``padding_free``: its rows are independent token sequences whose loss is a sum over
      tokens, so a micro batch's rows can be laid end to end in one (the config's
      padding_free); a stage that reads each row as a whole (a pair's answers, a value per
      row) cannot.
    - ``answers_only``: it learns from the last answer only: train_on_prompt and mask_history are refused.
    - ``options``: its own config keys (the form's fields while it is chosen; the sub-model).
    - ``rules``: its own rules over a validated config, beyond each option's bounds.
    - ``reference_model``: whether, with these option values, it keeps a frozen reference model
      (a copy for full and freeze, the adapter switched off for LoRA).
    - ``rows_per_example``: rows one example puts through the model (a pair: 2).
    - ``value_head``: it trains a value head (saved as value_head.safetensors beside final/).
    - ``figures``: its own numbers on `step` events (eval events carry them as eval_NAME);
      ``plotted_first``: which of them the dashboard plots first.
    - ``perplexity``: its loss is a mean token cross-entropy, so ``ftui eval`` reports exp(loss).
    - ``planner``: the planner's terms.
    - ``runner``: "module:Class" of its torch half; empty: the Stage subclass of this name
      in ``ftui.runner.stages.NAME``.
    """

    name: str
    short: str
    help: str
    order: int
    data: str
    packing: str = PACKING_OFF
    neat_packing: bool = False
    padding_free: bool = False
    answers_only: bool = False
    options: tuple[StageOption, ...] = ()
    rules: Callable[[Any], list[Problem]] | None = None
    reference_model: Callable[[Mapping[str, Any]], bool] = never
    rows_per_example: int = 1
    value_head: bool = False
    figures: tuple[str, ...] = ()
    plotted_first: tuple[str, ...] = ()
    perplexity: bool = False
    planner: PlannerTerms = field(default_factory=PlannerTerms)
    runner: str = ""

    def __post_init__(self) -> None:
        if self.data not in DATA_KINDS:
            raise ValueError(f"stage {self.name}: data {self.data!r} is none of {DATA_KINDS}")
        if self.packing not in (PACKING_NEVER, PACKING_OFF, PACKING_ON):
            raise ValueError(f"stage {self.name}: packing {self.packing!r}")
        if not set(self.plotted_first) <= set(self.figures):
            raise ValueError(f"stage {self.name}: plotted_first names figures it does not have")

    @property
    def eval_figures(self) -> tuple[str, ...]:
        """The numbers of its evaluation (the eval event's fields): the loss, its figures, and
        (the eval job's) perplexity."""
        return ("eval_loss", *(f"eval_{f}" for f in self.figures)) + (("eval_perplexity",) if self.perplexity else ())

    @property
    def option_keys(self) -> tuple[str, ...]:
        return tuple(o.key for o in self.options)

    def option_values(self, cfg: Any) -> dict[str, Any]:
        """Its options' values in a config (a RunConfig, whose extra keys are attributes too,
        or a mapping); a key the config lacks takes the option's default."""
        get = cfg.get if isinstance(cfg, Mapping) else lambda key, default: getattr(cfg, key, default)
        return {o.key: get(o.key, o.default) for o in self.options}

    def needs_reference(self, cfg: Any) -> bool:
        """Whether a run of this stage with ``cfg``'s option values keeps a frozen reference model."""
        return self.reference_model(self.option_values(cfg))

    def problems(self, cfg: Any) -> list[Problem]:
        """Its own rules' problems for a validated config (empty: none)."""
        return self.rules(cfg) if self.rules is not None else []

    def options_model(self) -> Any:
        """Its options as a pydantic model (built once, when first asked for): each key with its
        type, default, bounds and choices, its label as the title and its help as the
        description. It validates the values of keys RunConfig has no field for (a new
        stage's own), and the runner reads a stage's options through it."""
        with _MODELS_LOCK:
            model = _MODELS.get(self)
            if model is None:
                model = _MODELS[self] = _build_options_model(self)
        return model

    def read_options(self, cfg: Any) -> Any:
        """Its options of ``cfg``, validated and typed by the sub-model (pydantic's
        ValidationError names a bad key)."""
        return self.options_model().model_validate(self.option_values(cfg))


_MODELS: dict[StageDescription, Any] = {}
_MODELS_LOCK = threading.Lock()


def _build_options_model(description: StageDescription) -> Any:
    from pydantic import BaseModel, ConfigDict, Field, create_model, field_validator
    from pydantic_core import PydanticCustomError

    class StageOptions(BaseModel):
        """A stage's options: numbers take numbers only (pydantic's lax mode would read true as 1)."""

        model_config = ConfigDict(extra="ignore", allow_inf_nan=False, frozen=True)

        @field_validator("*", mode="before")
        @classmethod
        def _no_bool_for_a_number(cls, value: Any, info: Any) -> Any:
            annotation = cls.model_fields[info.field_name].annotation
            if isinstance(value, bool) and annotation in (int, float):
                raise PydanticCustomError("bool_for_number", "Input should be a number, not true or false")
            if annotation is str and isinstance(value, (list, tuple)) and all(
                    isinstance(v, (str, int, float)) and not isinstance(v, bool) for v in value):
                return ",".join(str(v).strip() for v in value)  # a YAML list as comma text (RunConfig's comma_text)
            return value

    fields: dict[str, Any] = {}
    for o in description.options:
        annotation: Any = Literal[tuple(v for v, _what in o.choices)] if o.choices else o.type  # type: ignore[misc]
        fields[o.key] = (annotation, Field(o.default, title=o.label, description=o.help, **o.bounds))
    return create_model(f"{description.name.capitalize()}Options", __base__=StageOptions, **fields)
