"""RunConfig: every setting a run needs, with LLaMA-Factory's key names where one exists.

A LLaMA-Factory SFT YAML loads as it is: the keys ftui knows are validated, the keys it does
not support are kept (so that saving the form writes them back) and listed in one warning.
Invalid values give one :class:`FieldProblem` per field, naming the field, the value and
what is allowed, so that the CLI can print them and the launch form can show each next to
its field. No torch here: the dashboard validates forms with these same rules.
"""

from __future__ import annotations

import difflib
import importlib.util
import math
import os
import re
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator, Literal, get_args

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator
from pydantic_core import PydanticCustomError

from ftui.safety.bounded_input import YAMLRefused, load_yaml, short_repr, yaml_reason
from ftui.i18n import N_, _, current_language
from ftui.presets.choices import ENGINES, PREF_LOSSES, SCHEDULERS
from ftui.presets.families import FA2_MODEL_TYPES, runs_sdpa
from ftui.presets.engine_presets import NEEDS_SEVERAL, EngineSpec, deepspeed_precision, engine_spec, read_user_deepspeed, spec_from
from ftui.data.conversation import TOOL_FORMATS
from ftui.presets.lf_keys import LF_DEFAULTS, NO_EFFECT, REFUSED, STAGE_REFUSED, classify
from ftui.presets.templates import MULTIMODAL_TEMPLATES, TEMPLATES
from ftui.stages import PACKING_NEVER, find as find_stage, option_keys as stage_option_keys, stage_names

from ftui.rundir.paths import DEMO_DATASET, DEMO_MODEL, default_runs_root, resolve_model_path  # noqa: F401 (re-exported)
from ftui.machine.gpu_picks import GPU_LIST, gpus_as_text


# optim values ftui builds (LLaMA-Factory / transformers' names); the bitsandbytes ones need it and a CUDA GPU
TORCH_OPTIMIZERS = ("adamw_torch", "adamw_torch_fused")
BNB_OPTIMIZERS = ("adamw_bnb_8bit", "adamw_8bit", "paged_adamw_8bit", "paged_adamw_32bit", "paged_adamw")
OPTIMIZERS = TORCH_OPTIMIZERS + BNB_OPTIMIZERS


def comma_text(value: Any) -> Any:
    """A YAML list of names (lora_target: [q_proj, v_proj]) as LLaMA-Factory's comma text."""
    if isinstance(value, (list, tuple)) and all(isinstance(v, (str, int, float)) and not isinstance(v, bool) for v in value):
        return ",".join(str(v).strip() for v in value)
    return value


def comma_items(text: str | None) -> list[str]:
    return [t.strip() for t in (text or "").split(",") if t.strip()]


def _numeric_field(annotation: Any) -> bool:
    """int, float or an Optional of one (not bool, which is a subclass of int)."""
    kinds = set(get_args(annotation)) or {annotation}
    return bool(kinds & {int, float}) and bool not in kinds


class RunConfig(BaseModel):
    """A fine-tuning run. Field names follow LLaMA-Factory / transformers' TrainingArguments."""

    # allow_inf_nan off: learning_rate: .nan would pass gt/le checks in no sensible way
    model_config = ConfigDict(extra="allow", protected_namespaces=(), allow_inf_nan=False)

    # --- Model
    model_name_or_path: str = Field(min_length=1, description=N_("a local model directory or a hub name"))
    model_init: Literal["pretrained", "random"] = Field(
        "pretrained", description=N_("'random' builds the model from its config with random weights")
    )
    trust_remote_code: bool = False
    template: str | None = Field(None, description=N_("a built-in chat template name (LLaMA-Factory's); empty: the tokenizer's own"))
    # --- How conversations are encoded (LLaMA-Factory's keys; ftui.data.conversation)
    tool_format: str | None = Field(None, description=N_("how tools and function calls are written (default, qwen, qwen3_5, llama3, mistral, glm4); empty: the template's"))
    train_on_prompt: bool = Field(False, description=N_("learn the prompts too, not only the answers"))
    mask_history: bool = Field(False, description=N_("learn only the last answer of a conversation (and keep the last turns first when cutting)"))
    default_system: str | None = Field(None, description=N_("the system prompt for records without one, instead of the template's"))
    enable_thinking: bool = Field(True, description=N_("reasoning templates (qwen3, deepseekr1, ...): learn the thinking blocks; false: strip them and put an empty one in the prompt"))
    # --- Method
    stage: str = Field("sft", description=N_("sft: supervised fine-tuning on conversations; pt: pre-training on raw text (every token carries loss); dpo, kto: preference training; rm: a reward model"))  # one of ftui.stages
    do_train: bool = True
    finetuning_type: Literal["full", "lora", "freeze"] = Field(
        "lora", description=N_("QLoRA is finetuning_type lora with quantization_bit 4")
    )
    quantization_bit: Literal[4, 8] | None = Field(None, description=N_("4 or 8 with finetuning_type lora: QLoRA"))
    lora_rank: int = Field(8, ge=1, le=4096)
    lora_alpha: int | None = Field(None, ge=1, description=N_("default: twice lora_rank"))
    lora_dropout: float = Field(0.0, ge=0.0, lt=1.0)
    lora_target: str = Field("all", description=N_("'all' linear layers, or module names separated by commas"))
    freeze_trainable_layers: int = Field(2, ge=1, description=N_("how many of the last decoder layers train"))
    gradient_checkpointing: bool = False
    # --- Speed
    torch_compile: bool = Field(False, description=N_("compile each decoder layer with torch.compile (the first steps are slower)"))
    chunked_loss: bool = Field(True, description=N_("compute the loss from the last hidden states in chunks, never the full logits (much less memory with large vocabularies); false: full logits"))
    tf32: bool = Field(True, description=N_("fp32 runs on CUDA use TF32 tensor cores for matrix products (Ampere and later); false: true fp32 arithmetic, several times slower"))
    enable_liger_kernel: bool = Field(False, description=N_("Liger's Triton kernels (RMSNorm, SwiGLU, RoPE, and its fused linear cross-entropy for the chunked loss); needs liger-kernel and a CUDA GPU"))
    flash_attn: Literal["auto", "sdpa", "fa2", "disabled", "fa3"] = Field(
        "auto", description=N_("attention kernel: auto: PyTorch's SDPA (with a mask over packed or padded rows), eager attention for a model "
                               "SDPA cannot compute (Gemma 2's soft-capping); sdpa: SDPA only; fa2: FlashAttention-2 "
                               "over each example alone (torch's built-in kernel, torch >= 2.10, an Ampere or newer GPU, bf16 or fp16); disabled: "
                               "plain eager attention"))
    # --- Data
    dataset: str = Field(min_length=1, description=N_("dataset names from dataset_info.json or file paths, comma separated"))
    dataset_dir: str = "data"
    cutoff_len: int = Field(2048, ge=8, le=1_048_576)
    packing: bool | None = Field(None, description=N_("pack examples into full rows; empty: the stage's default (pt packs raw text into cutoff_len blocks, sft does not)"))
    neat_packing: bool = Field(False, description=N_("LLaMA-Factory's packing without attention between examples, which is what ftui's packing "
                                                     "does: the same as packing: true (stage sft only)"))
    max_samples: int | None = Field(None, ge=1)
    val_size: float = Field(0.0, ge=0.0, lt=1.0)
    # --- Training
    per_device_train_batch_size: int = Field(1, ge=1, le=65536)
    per_device_eval_batch_size: int = Field(1, ge=1, le=65536)
    gradient_accumulation_steps: int = Field(1, ge=1, le=65536)
    learning_rate: float = Field(1e-4, gt=0.0, le=10.0)
    num_train_epochs: float = Field(3.0, gt=0.0)
    max_steps: int = Field(-1, ge=-1, description=N_("-1: as many as num_train_epochs gives"))
    lr_scheduler_type: Literal[SCHEDULERS] = "cosine"  # type: ignore[valid-type]
    warmup_ratio: float = Field(0.0, ge=0.0, le=1.0)
    warmup_steps: int = Field(0, ge=0)
    weight_decay: float = Field(0.0, ge=0.0)
    max_grad_norm: float = Field(1.0, ge=0.0, description=N_("0 turns clipping off"))
    adam_beta1: float = Field(0.9, ge=0.0, lt=1.0)
    adam_beta2: float = Field(0.999, ge=0.0, lt=1.0)
    adam_epsilon: float = Field(1e-8, gt=0.0)
    bf16: bool = False
    fp16: bool = False
    pure_bf16: bool = Field(False, description=N_("train the weights themselves in bf16, without autocast or fp32 master weights (LLaMA-Factory's "
                                                  "compute type pure_bf16): about half the memory of weights, gradients and optimizer states and faster "
                                                  "steps, but an update smaller than bf16 can hold is lost; LoRA's adapters stay fp32"))
    logging_steps: int = Field(10, ge=1)
    save_steps: int = Field(500, ge=1, description=N_("with save_strategy steps (the default): a resumable checkpoint every N steps and at the end"))
    save_strategy: Literal["steps", "epoch", "no"] = Field(
        "steps", description=N_("when resumable checkpoints are written: steps (every save_steps and at the end), epoch (every epoch's "
                                "worth of optimizer steps, as the epoch figure counts them, and at the end) or no (none while training: "
                                "a crash loses the run, though a stop still saves one); final/ is written either way"))
    save_total_limit: int | None = Field(None, ge=1, description=N_("keep only the newest N checkpoints; empty: keep all"))
    eval_steps: int | None = Field(None, ge=1, description=N_("default: logging_steps x 10"))
    seed: int = Field(42, ge=0)
    data_seed: int | None = Field(None, ge=0, description=N_("the seed of the data order (each epoch's shuffle); empty: seed"))
    dataloader_drop_last: bool = Field(False, description=N_("drop each epoch's last micro batch when it is smaller than the others"))
    # --- LLaMA-Factory's method, optimizer and data keys (issue 14): each changes the result and is done as it does
    use_dora: bool = Field(False, description=N_("DoRA: LoRA plus a trained magnitude vector per adapted layer (peft use_dora)"))
    use_rslora: bool = Field(False, description=N_("rank-stabilised LoRA: adapters scaled by lora_alpha / sqrt(lora_rank) instead of lora_alpha / lora_rank"))
    pissa_init: bool = Field(False, description=N_("PiSSA: adapters start from the principal singular vectors of each weight (the base keeps the rest); final/ holds the adapter converted to plain LoRA for the original base"))
    pissa_iter: int = Field(16, ge=-1, description=N_("PiSSA's fast-SVD iterations; -1: the exact SVD"))
    loraplus_lr_ratio: float | None = Field(None, gt=0.0, description=N_("LoRA+: the B matrices (and 1-D trainables) learn at learning_rate x this ratio"))
    loraplus_lr_embedding: float = Field(1e-6, gt=0.0, description=N_("LoRA+: the learning rate of LoRA embedding B matrices"))
    additional_target: str | None = Field(None, description=N_("with LoRA: modules (names, comma separated) trained whole and saved with the adapter, e.g. embed_tokens,lm_head"))
    neftune_noise_alpha: float | None = Field(None, ge=0.0, description=N_("NEFTune: uniform noise of size alpha / sqrt(tokens x hidden) added to the embeddings while training"))
    optim: str = Field("adamw_torch_fused", description=N_("the optimizer: adamw_torch, adamw_torch_fused, adamw_bnb_8bit, adamw_8bit, paged_adamw_8bit, "
                                                            "paged_adamw_32bit, paged_adamw"))
    double_quantization: bool = Field(True, description=N_("QLoRA 4-bit: quantize the quantization constants too (bnb_4bit_use_double_quant)"))
    quantization_type: Literal["nf4", "fp4"] = Field("nf4", description=N_("QLoRA 4-bit data type"))
    eval_dataset: str | None = Field(None, description=N_("datasets evaluated instead of a val_size share (names or files, comma separated)"))
    mix_strategy: Literal["concat", "interleave_under", "interleave_over", "interleave_once"] = Field(
        "concat", description=N_("how several datasets mix: concat, or interleaved until the first runs out (under), all ran out (over) or each was used once (once)"))
    interleave_probs: str | None = Field(None, description=N_("with interleave_*: one sampling probability per dataset, comma separated"))
    tokenized_path: str | None = Field(None, description=N_("a folder for the encoded data: written when missing, read (and the datasets skipped) when present"))
    resume_from_checkpoint: str | None = Field(None, description=N_("an ftui checkpoint (RUN/checkpoints/step-N) or run directory: that run continues from it (as ftui train --resume)"))
    # --- Preference stages (dpo, kto; LLaMA-Factory's keys)
    pref_beta: float = Field(0.1, gt=0.0, description=N_("dpo/kto: beta, how far the policy may move from the reference (higher: less)"))
    pref_loss: Literal[PREF_LOSSES] = Field("sigmoid", description=N_("dpo: sigmoid (DPO), hinge, ipo, orpo or simpo (the last two need no reference model)"))  # type: ignore[valid-type]
    pref_ftx: float = Field(0.0, ge=0.0, description=N_("dpo/kto: weight of an SFT term on the chosen answer added to the preference loss"))
    dpo_label_smoothing: float = Field(0.0, ge=0.0, le=0.5, description=N_("dpo sigmoid: robust DPO's label smoothing (0 to 0.5)"))
    simpo_gamma: float = Field(0.5, description=N_("dpo simpo: the target reward margin"))
    kto_chosen_weight: float = Field(1.0, gt=0.0, description=N_("kto: weight of the desirable examples' loss"))
    kto_rejected_weight: float = Field(1.0, gt=0.0, description=N_("kto: weight of the undesirable examples' loss"))
    # --- Output
    output_dir: str = Field(default_factory=default_runs_root, description=N_("the runs root: each run gets a directory in it"))
    run_name: str | None = None
    # --- Engine (ftui's own)
    engine: Literal[ENGINES] = "single"  # type: ignore[valid-type]
    deepspeed: str | None = Field(None, description=N_("path to your own DeepSpeed JSON (as in LLaMA-Factory); overrides the zero* preset's file"))
    nproc_per_node: int = Field(1, ge=1, le=1024)
    nnodes: int = Field(1, ge=1, le=4096)
    node_rank: int = Field(0, ge=0)
    rdzv_endpoint: str | None = Field(None, description=N_("host:port where the nodes meet (multi-node)"))
    device: Literal["auto", "cuda", "cpu"] = "auto"
    gpus: str | None = Field(None, description=N_("the GPUs the run uses, as nvidia-smi numbers them (0,1) or GPU-/MIG- UUID prefixes: "
                             "its processes' CUDA_VISIBLE_DEVICES; empty: those CUDA_VISIBLE_DEVICES leaves (unset: all)"))
    # --- Reporting
    report_to: str | list[str] | None = Field("none", description=N_("mirror the step and eval figures besides events.jsonl: none, "
                                             "tensorboard (event files in the run directory's tensorboard/), wandb (needs "
                                             "pip install wandb; WANDB_MODE=offline needs no network), all, or several separated by commas"))
    # --- Faults (ftui's own)
    nonfinite_loss_limit: int = Field(5, ge=1, description=N_("stop the run after this many steps in a row with a NaN/inf loss"))
    hang_timeout: int = Field(1800, ge=0, description=N_("end the job, naming the rank, when no rank finishes a step for this many seconds (0: never)"))
    stop_timeout: int = Field(600, ge=5, description=N_("seconds a graceful stop may take (finish the step, save) before the ranks are killed"))

    @model_validator(mode="before")
    @classmethod
    def _neat_packing_packs(cls, data: Any) -> Any:
        """LLaMA-Factory's neat_packing turns packing on with examples kept apart, which is how
        ftui packs an sft run; another stage keeps the key to be refused (stage_problems)."""
        stage = find_stage(data.get("stage", "sft")) if isinstance(data, dict) else None
        if stage is not None and stage.neat_packing and data.get("neat_packing") is True:
            data = {**data, "packing": True}
        return data

    @field_validator("*", mode="before")
    @classmethod
    def _no_bool_for_a_number(cls, value: Any, info: Any) -> Any:
        """pydantic's lax mode reads true as 1 for an int or float field (max_steps: true would
        train one step); a number field takes numbers only."""
        if isinstance(value, bool) and _numeric_field(cls.model_fields[info.field_name].annotation):
            raise PydanticCustomError("bool_for_number", "Input should be a number, not true or false")
        return value

    @field_validator("stage", mode="before")
    @classmethod
    def _stage_known(cls, value: Any) -> Any:
        """A stage some module of ftui.stages describes (read when validating: a stage a plugin
        added is one); LLaMA-Factory's stages ftui lacks are refused saying so."""
        if isinstance(value, str) and value in STAGE_REFUSED:
            raise ValueError(_("{reason}; ftui trains {stages}").format(reason=_(STAGE_REFUSED[value]), stages=", ".join(stage_names())))
        if find_stage(value) is None:  # pydantic's own wording for a value not among the choices
            names = [repr(n) for n in stage_names()]
            raise PydanticCustomError("literal_error", "Input should be {expected}",
                                      {"expected": " or ".join(filter(None, [", ".join(names[:-1]), names[-1]]))})
        return value

    @field_validator("lora_target", "additional_target", "eval_dataset", "interleave_probs", "dataset", mode="before")
    @classmethod
    def _comma_text(cls, value: Any) -> Any:
        return comma_text(value)

    @field_validator("resume_from_checkpoint", mode="before")
    @classmethod
    def _resume_off(cls, value: Any) -> Any:
        return None if value is False else value

    @field_validator("save_strategy", mode="before")
    @classmethod
    def _save_strategy_no(cls, value: Any) -> Any:
        """YAML reads an unquoted ``save_strategy: no`` as false: it means "no" (HF's value)."""
        return "no" if value is False else value

    @field_validator("gpus", mode="before")
    @classmethod
    def _gpus_as_text(cls, value: Any) -> Any:
        return gpus_as_text(value)

    @property
    def precision(self) -> str:
        """The compute type: bf16 (autocast, or pure with ``pure_bf16``), fp16 or fp32."""
        return "bf16" if self.bf16 or self.pure_bf16 else "fp16" if self.fp16 else "fp32"

    @property
    def precision_label(self) -> str:
        """The precision as events and listings show it (LLaMA-Factory's compute-type names)."""
        return "pure_bf16" if self.pure_bf16 else self.precision

    @property
    def method(self) -> str:
        if self.finetuning_type == "lora" and self.quantization_bit:
            return "qlora"
        return self.finetuning_type

    @property
    def engine_name(self) -> str:
        """The engine as events and listings show it: the preset, or the user's DeepSpeed file."""
        if self.deepspeed:
            return f"deepspeed:{Path(self.deepspeed).name}"
        return self.engine

    @property
    def engine_spec(self) -> EngineSpec:
        """What the engine is (backend, strategy, ZeRO stage, offload), from the preset's file
        or the user's DeepSpeed JSON; raises ValueError when that file cannot be read."""
        if self.deepspeed:
            return spec_from(self.engine_name, read_user_deepspeed(self.deepspeed))
        return engine_spec(self.engine)

    @property
    def uses_deepspeed(self) -> bool:
        return bool(self.deepspeed) or engine_spec(self.engine).deepspeed

    @property
    def world_size(self) -> int:
        return self.nproc_per_node * self.nnodes

    def to_dict(self, include_unsupported: bool = True) -> dict[str, Any]:
        data = self.model_dump(exclude=set(self.model_extra or {}))
        if include_unsupported:
            data.update(self.model_extra or {})
        return data

    def to_yaml(self, include_unsupported: bool = True) -> str:
        return yaml.safe_dump(self.to_dict(include_unsupported), sort_keys=False, allow_unicode=True)

    def save(self, path: str | os.PathLike[str], include_unsupported: bool = True) -> None:
        Path(path).write_text(self.to_yaml(include_unsupported), encoding="utf-8")


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


def unsupported_warning(extra: dict[str, Any]) -> str | None:
    """One line for the keys ftui has no field for that do not change what is trained
    (LLaMA-Factory's logging, worker and generation keys, or a refused key left at its no-op
    default): kept in the file, listed once. Keys nobody knows are not here: they are refused
    (``unknown_key_problems``)."""
    ignored = kept_without_effect(extra)
    if not ignored:
        return None
    return _("{n} key(s) kept in the file with no effect on what is trained: {keys}").format(
        n=len(ignored), keys=", ".join(ignored))


def kept_without_effect(extra: dict[str, Any]) -> list[str]:
    """The keys of ``extra`` (keys ftui has no field for) that are kept without effect, sorted."""
    return sorted(k for k, v in extra.items() if classify(k, v) == "no-effect")


def known_key_names() -> set[str]:
    """Every key a config may hold: ftui's fields and every key LLaMA-Factory 0.9.5 reads."""
    return set(RunConfig.model_fields) | set(LF_DEFAULTS) | NO_EFFECT | set(REFUSED)


def unknown_key_problems(cfg: RunConfig) -> list[FieldProblem]:
    """Keys neither ftui nor LLaMA-Factory knows: refused, as LLaMA-Factory's argument parser
    refuses them, because a misspelt key (``learnig_rate``) was meant to change the result and
    training without it would quietly train something else. The closest known name is offered."""
    out = []
    known: list[str] = []  # every known name, listed once the first unknown key needs them
    for key, value in sorted((cfg.model_extra or {}).items()):
        if classify(key, value) != "unknown" or key in stage_option_keys():  # a stage's own option (another stage's: kept)
            continue
        known = known or sorted(known_key_names())
        close = difflib.get_close_matches(key, known, n=1, cutoff=0.75)
        if close:
            message = _("unknown key: neither ftui nor LLaMA-Factory has it; did you mean {name}? "
                        "Correct the name or remove the key").format(name=close[0])
        else:
            message = _("unknown key: neither ftui nor LLaMA-Factory has it (another tool's key?); remove it "
                        "(the README's section \"The config\" says which keys ftui reads)")
        out.append(FieldProblem(key if key.strip() else short_repr(key), value, message))  # an empty key is named ''
    return out


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
_STAND_INS = {"model_name_or_path": DEMO_MODEL, "dataset": "-"}


def _pydantic_problems(err: ValidationError, data: dict[str, Any]) -> list[FieldProblem]:
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


def encoding_problems(cfg: RunConfig) -> list[FieldProblem]:
    """The encoding keys' rules, as LLaMA-Factory enforces them."""
    out = []
    if cfg.tool_format is not None:
        if cfg.tool_format not in TOOL_FORMATS:
            out.append(FieldProblem("tool_format", cfg.tool_format, _("unknown tool format; allowed: {formats}").format(formats=", ".join(TOOL_FORMATS))))
        elif not cfg.template:
            out.append(FieldProblem("tool_format", cfg.tool_format, _("needs a named template (template: qwen, llama3, ...); the tokenizer's own chat template writes tools its own way")))
    if cfg.train_on_prompt and cfg.mask_history:
        out.append(FieldProblem("mask_history", True, _("mask_history and train_on_prompt cannot be combined; choose one")))
    template = TEMPLATES.get(cfg.template or "")
    if cfg.train_on_prompt and template is not None and template.efficient_eos:
        out.append(FieldProblem("train_on_prompt", True, _("template {template} ends an example with one EOS, so it cannot learn prompts; set train_on_prompt false").format(template=cfg.template)))
    return out


# the first torch with torch.nn.attention.varlen (FlashAttention-2 over cumulative sequence lengths)
VARLEN_TORCH = (2, 10)


def flash_attn_problems(cfg: RunConfig) -> list[FieldProblem]:
    """flash_attn fa2 needs what torch's varlen FlashAttention-2 kernel needs: a CUDA GPU of
    compute capability 8.0 or newer, half-precision attention and torch >= 2.10 (read from its
    metadata: no torch import here); fa3 (the flash-attn 3 package in LLaMA-Factory) is not one
    ftui has. The model itself is checked by attention_model_problems, beside the other checks of its config."""
    if cfg.flash_attn == "fa3":
        return [FieldProblem("flash_attn", "fa3", _("ftui has no FlashAttention-3 kernel (LLaMA-Factory's fa3 needs the flash-attn 3 package); "
                                                    "use fa2 (torch's built-in FlashAttention-2) or sdpa"))]
    if cfg.flash_attn != "fa2":
        return []
    if runs_without_gpu(cfg):
        return [FieldProblem("flash_attn", "fa2", _("FlashAttention-2 runs on CUDA GPUs only and none is used here; use flash_attn: auto (SDPA) for a CPU run"))]
    if cfg.precision == "fp32":
        return [FieldProblem("flash_attn", "fa2", _("FlashAttention-2 computes in bf16 or fp16; turn on bf16 (or pure_bf16, fp16), or use flash_attn: auto for an fp32 run"))]
    if _THIS_MACHINE.get():
        from ftui.machine.gpu import first_pre_ampere  # NVML, not torch: this runs in the dashboard too

        old = first_pre_ampere(cfg.nproc_per_node, cfg.gpus)  # the GPUs this node's ranks use
        if old is not None:
            return [FieldProblem("flash_attn", "fa2", _("{gpu} has compute capability {major}.{minor}; FlashAttention-2 needs 8.0 (Ampere) "
                                                        "or newer; use flash_attn: auto (SDPA)").format(gpu=old[0], major=old[1], minor=old[2]))]
    installed = _installed_torch() if _THIS_MACHINE.get() else None
    if installed is not None and installed < VARLEN_TORCH:
        return [FieldProblem("flash_attn", "fa2", _("fa2 uses torch's varlen FlashAttention-2 kernel, which needs torch >= 2.10 (installed: {version}); "
                                                    "upgrade torch, or use flash_attn: auto").format(version=".".join(map(str, installed))))]
    return []


def runs_without_gpu(cfg: RunConfig) -> bool:
    """device cpu, or auto on a machine whose NVML sees no GPU (among ``gpus``)."""
    return cfg.device == "cpu" or (cfg.device == "auto" and not gpu_present(cfg.gpus))


def attention_model_problems(cfg: RunConfig) -> list[FieldProblem]:
    """flash_attn and the model, read from its config.json on disk or in the hub cache (a hub
    model not here yet is checked when it loads, ftui.runner.model): fa2 needs a model type
    whose attention it runs; sdpa, a model whose attention SDPA computes (auto loads the
    others with eager attention)."""
    if cfg.flash_attn not in ("fa2", "sdpa"):
        return []
    from ftui.plan.model_shape import read_model_config

    try:
        model = read_model_config(cfg.model_name_or_path)
    except ValueError:
        return []
    reason = fa2_model_problem(model) if cfg.flash_attn == "fa2" else None if runs_sdpa(model) else sdpa_refusal(model.get("model_type"))
    return [FieldProblem("flash_attn", cfg.flash_attn, reason)] if reason else []


def sdpa_refusal(model_type: str | None) -> str:
    """flash_attn sdpa for a model whose attention transformers runs without SDPA."""
    return _("flash_attn sdpa: transformers runs the attention of {model_type} models without SDPA (soft-capped logits, "
             "attention sinks or windows it does not compute); use flash_attn: auto (eager attention for this model) "
             "or disabled").format(model_type=model_type or "?")


def fa2_model_problem(model: dict[str, Any]) -> str | None:
    """Why flash_attn fa2 cannot run this model (its config.json as a dict), None when it can:
    its type must be one of FA2_MODEL_TYPES, and Qwen2-MoE's layers do not hand their sliding
    window to the attention function (transformers 5.24), so with one it would be lost."""
    model_type = model.get("model_type")
    if model_type == "qwen2_moe" and model.get("use_sliding_window"):
        return _("flash_attn fa2 cannot apply this Qwen2-MoE model's sliding window (use_sliding_window: its layers do not pass it "
                 "to the attention kernel); use flash_attn: auto")
    if model_type in FA2_MODEL_TYPES:
        return None
    return _("flash_attn fa2 runs the attention of {types} models; this one is {model_type} (its layers take the "
             "sequence lengths themselves or compute what torch's kernel does not); use flash_attn: auto").format(
        types=", ".join(FA2_MODEL_TYPES), model_type=model_type or "?")


def _installed_torch() -> tuple[int, int] | None:
    """torch's (major, minor) from its package metadata, None when it is not installed here."""
    import importlib.metadata

    try:
        version = importlib.metadata.version("torch")
    except importlib.metadata.PackageNotFoundError:
        return None
    match = re.match(r"(\d+)\.(\d+)", version)
    return (int(match.group(1)), int(match.group(2))) if match else None


def cross_field_problems(cfg: RunConfig, model_known: bool = True) -> list[FieldProblem]:
    """Rules that involve more than one field, or the machine (QLoRA needs CUDA). ``model_known``
    False: the model is a stand-in for a missing one, so nothing is checked against its config."""
    out: list[FieldProblem] = []
    if cfg.bf16 and cfg.fp16:
        out.append(FieldProblem("fp16", True, _("bf16 and fp16 are both on; choose one precision")))
    if cfg.pure_bf16 and cfg.fp16:
        out.append(FieldProblem("fp16", True, _("pure_bf16 trains in bf16 and fp16 is on too; choose one precision")))
    if cfg.template in MULTIMODAL_TEMPLATES:
        out.append(FieldProblem("template", cfg.template, _("LLaMA-Factory's template for a vision, video or audio model: "
                                                            "ftui trains text-only language models, multimodal ones are not supported")))
    elif cfg.template is not None and cfg.template not in TEMPLATES:
        out.append(FieldProblem("template", cfg.template, _("unknown template; allowed: {templates} or empty for the tokenizer's own").format(templates=", ".join(TEMPLATES))))
    out += encoding_problems(cfg)
    if cfg.lora_target != "all" and not re.fullmatch(r"[\w.]+(\s*,\s*[\w.]+)*", cfg.lora_target):
        out.append(FieldProblem("lora_target", cfg.lora_target, _("use 'all' or module names separated by commas, e.g. q_proj,v_proj")))
    if cfg.max_steps == 0:
        out.append(FieldProblem("max_steps", 0, _("use -1 (derive from num_train_epochs) or a positive number")))
    if cfg.quantization_bit is not None:
        if cfg.finetuning_type != "lora":
            out.append(FieldProblem("quantization_bit", cfg.quantization_bit, _("quantization (QLoRA) needs finetuning_type lora")))
        else:
            reason = qlora_unavailable_reason()
            if reason:
                out.append(FieldProblem("quantization_bit", cfg.quantization_bit, _("QLoRA is not possible here: {reason}; use finetuning_type lora without quantization_bit").format(reason=reason)))
    if engine_spec(cfg.engine).strategy == "single" and not cfg.deepspeed and cfg.world_size > 1:
        out.append(FieldProblem("nproc_per_node" if cfg.nproc_per_node > 1 else "nnodes", cfg.nproc_per_node if cfg.nproc_per_node > 1 else cfg.nnodes, _("the single engine runs one process; choose engine ddp for several")))
    out += engine_problems(cfg)
    out += gpu_pick_problems(cfg)
    if cfg.device == "cuda" and not gpu_present(cfg.gpus):
        out.append(FieldProblem("device", cfg.device, _("no CUDA GPU was found on this machine (NVML sees none); use device: auto "
                                                        "(the CPU when there is no GPU) or cpu")))
    elif cfg.precision == "fp16" and runs_without_gpu(cfg):
        out.append(FieldProblem("fp16", True, _("fp16 needs a CUDA GPU and none was found; for a CPU run use bf16 (CPU autocast "
                                                "supports it) or fp32") if cfg.device == "auto" else
                                _("fp16 needs a CUDA GPU; for a CPU run use bf16 (CPU autocast supports it) or fp32")))
    if cfg.precision == "bf16" and cfg.device != "cpu" and _THIS_MACHINE.get():  # no GPU seen: None (a CPU run does bf16 through autocast)
        from ftui.machine.gpu import bf16_unsupported_reason  # NVML, not torch: this runs in the dashboard too

        reason = bf16_unsupported_reason(cfg.nproc_per_node, cfg.gpus)  # the GPUs this node's ranks use
        if reason:
            out.append(FieldProblem("pure_bf16" if cfg.pure_bf16 and not cfg.bf16 else "bf16", True, _("{reason} (older GPUs only emulate it, many times slower); "
                                                    "use fp16 (with loss scaling) or fp32, or other GPUs (gpus)").format(reason=reason)))
    if cfg.enable_liger_kernel:
        if cfg.device == "cpu":
            out.append(FieldProblem("enable_liger_kernel", True, _("Liger's kernels are Triton GPU kernels; turn it off for a CPU run")))
        elif importlib.util.find_spec("liger_kernel") is None and _THIS_MACHINE.get():
            out.append(FieldProblem("enable_liger_kernel", True, _("liger-kernel is not installed: pip install liger-kernel, or turn it off")))
    out += flash_attn_problems(cfg)
    if cfg.torch_compile and cfg.uses_deepspeed:
        out.append(FieldProblem("torch_compile", True, _("ftui compiles the layers of the torch engines only (single, ddp, fsdp); turn it off for DeepSpeed")))
    if cfg.nnodes > 1 and not cfg.rdzv_endpoint:
        out.append(FieldProblem("rdzv_endpoint", cfg.rdzv_endpoint, _("several nodes need a rendezvous endpoint host:port")))
    if cfg.rdzv_endpoint and not re.fullmatch(r"[\w.\-\[\]:]+:\d{1,5}", cfg.rdzv_endpoint):
        out.append(FieldProblem("rdzv_endpoint", cfg.rdzv_endpoint, _("expected host:port, e.g. 10.0.0.1:29500")))
    if cfg.node_rank >= cfg.nnodes:
        out.append(FieldProblem("node_rank", cfg.node_rank, _("must be below nnodes ({nnodes})").format(nnodes=cfg.nnodes)))
    elif cfg.node_rank > 0:  # every node must write into one run directory (ftui.jobs.launch.join_target)
        out.append(FieldProblem("node_rank", cfg.node_rank, _("a config starts node 0 of a run; the other nodes join that run "
                                                              "with the command node 0 prints (ftui train RUN/config.yaml "
                                                              "--node-rank N), so that every node writes into one run directory")))
    if model_known:
        out += model_problems(cfg)
        out += model_size_problems(cfg)
        out += cutoff_problems(cfg)
        out += multimodal_model_problems(cfg)
        out += attention_model_problems(cfg)
    out += refused_key_problems(cfg)
    out += unknown_key_problems(cfg)
    out += output_dir_problems(cfg)
    out += method_option_problems(cfg)
    out += data_option_problems(cfg)
    out += stage_problems(cfg)
    out += report_to_problems(cfg)
    if cfg.run_name is not None and not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]{0,80}", cfg.run_name):
        out.append(FieldProblem("run_name", cfg.run_name, _("letters, digits, '.', '_' and '-' only, starting with a letter or digit, at most 81 characters")))
    return out


def output_dir_problems(cfg: RunConfig) -> list[FieldProblem]:
    """The runs root must be, or be able to become, a directory: a file there (or above it)
    would stop the start with the system's bare "File exists" / "Not a directory"."""
    path = Path(cfg.output_dir).expanduser()
    for above in (path, *path.parents):
        if os.path.isdir(above):
            break
        if os.path.lexists(above):
            return [FieldProblem("output_dir", cfg.output_dir, _("{path} is a file, not a directory: give a directory for the runs "
                                                                 "(it is made when missing)").format(path=above))]
    return []


def refused_key_problems(cfg: RunConfig) -> list[FieldProblem]:
    """LLaMA-Factory keys that would change the result and that ftui does not do: refused by
    name (ftui.presets.lf_keys), never trained without them."""
    return [FieldProblem(key, value, _("not supported: {reason}").format(reason=_(REFUSED[key])))
            for key, value in sorted((cfg.model_extra or {}).items()) if classify(key, value) == "refused"]


LORA_ONLY = ("use_dora", "use_rslora", "pissa_init", "loraplus_lr_ratio", "additional_target")


def method_option_problems(cfg: RunConfig) -> list[FieldProblem]:
    """The LoRA variants, the optimizer and QLoRA's options: where they apply, as LLaMA-Factory rules."""
    out: list[FieldProblem] = []
    if cfg.finetuning_type != "lora":
        for key in LORA_ONLY:
            value = getattr(cfg, key)
            if value not in (None, False):
                out.append(FieldProblem(key, value, _("{key} is only valid with finetuning_type lora (this run is {method})").format(key=key, method=cfg.finetuning_type)))
    if cfg.pissa_init and cfg.method == "qlora":
        out.append(FieldProblem("pissa_init", True, _("PiSSA decomposes full-precision weights; it cannot start from a 4/8-bit base (use lora without quantization_bit)")))
    if cfg.additional_target is not None and not re.fullmatch(r"[\w.]+(\s*,\s*[\w.]+)*", cfg.additional_target):
        out.append(FieldProblem("additional_target", cfg.additional_target, _("module names separated by commas, e.g. embed_tokens,lm_head")))
    if cfg.optim not in OPTIMIZERS:
        out.append(FieldProblem("optim", cfg.optim, _("ftui builds {torch} (and with bitsandbytes on a CUDA GPU {bnb}); other "
                                                      "optimizers are not supported").format(
                                    torch=", ".join(TORCH_OPTIMIZERS), bnb=", ".join(BNB_OPTIMIZERS))))
    elif cfg.optim in BNB_OPTIMIZERS:
        reason = (_("bitsandbytes' optimizers run on CUDA only; use adamw_torch for a CPU run") if cfg.device == "cpu"
                  else qlora_unavailable_reason())
        if reason is None and (cfg.deepspeed or engine_spec(cfg.engine).shards_parameters):
            reason = _("ftui's sharding engines (fsdp, zero*) build their own optimizer state; use single or ddp")
        if reason:
            out.append(FieldProblem("optim", cfg.optim, _("{optim} is not possible here: {reason}; or use adamw_torch / adamw_torch_fused").format(optim=cfg.optim, reason=reason)))
    return out


def data_option_problems(cfg: RunConfig) -> list[FieldProblem]:
    """eval_dataset, mixing, tokenized_path and resume_from_checkpoint, as LLaMA-Factory rules them."""
    out: list[FieldProblem] = []
    if cfg.eval_dataset is not None and cfg.val_size:
        out.append(FieldProblem("val_size", cfg.val_size, _("give either eval_dataset or val_size, not both")))
    if cfg.interleave_probs is not None:
        out += _interleave_problems(cfg)
    if cfg.tokenized_path:
        from ftui.data.registry import tokenized_data_problem

        problem = tokenized_data_problem(cfg.tokenized_path)
        if problem:
            out.append(FieldProblem("tokenized_path", cfg.tokenized_path, problem))
    if cfg.resume_from_checkpoint:
        from ftui.rundir.checkpoints import resume_target_problem

        problem = resume_target_problem(cfg.resume_from_checkpoint)
        if problem:
            out.append(FieldProblem("resume_from_checkpoint", cfg.resume_from_checkpoint, problem))
    return out


def stage_problems(cfg: RunConfig) -> list[FieldProblem]:
    """What the config's stage cannot do, from its description (ftui.stages), as LLaMA-Factory's
    processors rule it: neat_packing where the stage has none; packing, train_on_prompt and
    mask_history for a stage whose examples are a prompt with whole answers compared (the
    preference stages); its own options' values that RunConfig has no field for (a new
    stage's), by its options' sub-model; and the stage's own rules."""
    out: list[FieldProblem] = []
    stage = find_stage(cfg.stage)
    if stage is None:  # refused by the field's own validation
        return out
    if cfg.neat_packing and not stage.neat_packing:
        out.append(FieldProblem("neat_packing", True, _("neat_packing packs sft examples without attention between them (as "
                                                        "LLaMA-Factory allows it for stage sft only); remove it for stage {stage}").format(stage=cfg.stage)))
    if cfg.packing and stage.packing == PACKING_NEVER:
        out.append(FieldProblem("packing", True, _("stage {stage} compares whole answers, which packing would join; "
                                                   "set packing false (or empty)").format(stage=cfg.stage)))
    if stage.answers_only:
        for key in ("train_on_prompt", "mask_history"):
            if getattr(cfg, key):
                out.append(FieldProblem(key, True, _("stage {stage} learns from the last answer only, never the prompt or earlier "
                                                     "turns (as LLaMA-Factory's preference processors); remove the key").format(stage=cfg.stage)))
    own = {k: v for k, v in (cfg.model_extra or {}).items() if k in stage.option_keys}  # RunConfig validated the others
    if own:
        try:
            stage.options_model().model_validate(own)
        except ValidationError as err:
            out += [FieldProblem(str(e["loc"][0]), own.get(str(e["loc"][0])), pydantic_message(e)) for e in err.errors() if e["loc"]]
    out += [FieldProblem(key, value, message) for key, value, message in stage.problems(cfg)]
    return out


def _interleave_problems(cfg: RunConfig) -> list[FieldProblem]:
    text = cfg.interleave_probs or ""
    if cfg.mix_strategy == "concat":
        return [FieldProblem("interleave_probs", text, _("interleave_probs is only valid with mix_strategy interleave_under, interleave_over or interleave_once"))]
    try:
        probs = [float(p) for p in comma_items(text)]
    except ValueError:
        return [FieldProblem("interleave_probs", text, _("numbers separated by commas, one per dataset, e.g. 0.7,0.3"))]
    for key in ("dataset", "eval_dataset"):
        names = comma_items(getattr(cfg, key))
        if names and len(names) != len(probs):
            return [FieldProblem("interleave_probs", text, _("{n} probabilities for the {count} dataset(s) of {key}; give one per dataset").format(n=len(probs), count=len(names), key=key))]
    if any(p < 0 for p in probs) or not math.isclose(sum(probs), 1.0, abs_tol=1e-6):
        return [FieldProblem("interleave_probs", text, _("probabilities must be at least 0 and add up to 1 (these add up to {total})").format(total=f"{sum(probs):g}"))]
    return []


def model_problems(cfg: RunConfig) -> list[FieldProblem]:
    """What the run would load and cannot: a local folder without config.json, weights (unless
    model_init is random) or a tokenizer; a hub model missing from the cache under
    HF_HUB_OFFLINE; USE_MODELSCOPE_HUB=1 without the modelscope package. From file names only
    (no torch, no network): the form runs it per keystroke."""
    from ftui.plan.model_files import (cached_for_run, has_tokenizer, has_weights, hub_cache_dir, hub_offline, is_folder, looks_like_path,
                                  modelscope_missing, use_modelscope)

    name = cfg.model_name_or_path
    resolved = resolve_model_path(name)
    folder = Path(resolved).expanduser() if is_folder(resolved) else None
    problem = None
    if folder is not None:
        if not (folder / "config.json").is_file():
            problem = (_("this folder has no config.json (it holds a LoRA adapter: give its base model, base_model_name_or_path "
                         "in adapter_config.json); give the model's folder, the one with config.json")
                       if (folder / "adapter_config.json").is_file() else
                       _("this folder has no config.json; give the model's folder, the one with config.json"))
        elif cfg.model_init == "pretrained" and not has_weights(folder):
            problem = _("no weights found in this folder (no *.safetensors, *.bin or sharded *.index.json); put the "
                        "weights beside config.json, or set model_init: random to build the model from config.json "
                        "with random weights")
        elif not has_tokenizer(folder):
            problem = _("no tokenizer in this folder (tokenizer.json, tokenizer_config.json, tokenizer.model, "
                        "vocab.json...); copy the tokenizer files of the model this config.json belongs to")
    elif looks_like_path(name):
        problem = _("no such model directory; give a local directory with config.json or a hub name like Qwen/Qwen2.5-0.5B")
    elif use_modelscope():
        problem = modelscope_missing()  # its own cache: the run looks there (HF_HUB_OFFLINE: only there)
    elif hub_offline() and not cached_for_run(name, cfg.model_init == "random"):
        problem = _("HF_HUB_OFFLINE is set and this hub model is not (completely) in the hub cache ({cache}); "
                    "give a local folder, download it first, or unset HF_HUB_OFFLINE").format(cache=hub_cache_dir())
    return [FieldProblem("model_name_or_path", name, problem)] if problem else []


def model_size_problems(cfg: RunConfig) -> list[FieldProblem]:
    """The sizes in the model's config.json (on disk or in the hub cache) that are not positive
    whole numbers (ftui.plan.model_sizes): refused by name before the planner or a run computes with
    them. A hub model not here yet is checked by transformers as it loads."""
    from ftui.plan.model_sizes import size_problems
    from ftui.plan.model_shape import read_model_config

    try:
        model = read_model_config(cfg.model_name_or_path)
    except ValueError:
        return []
    return [FieldProblem("model_name_or_path", cfg.model_name_or_path, problem) for problem in size_problems(model)]


REPORTERS = ("tensorboard", "wandb")  # what report_to can name besides none and all


def reporter_names(report_to: str | list[str] | None) -> list[str]:
    """report_to as a list of names, as LLaMA-Factory (transformers) takes it: a name, names
    separated by commas, or a list; none (or empty) is no reporter, all is every one ftui has
    whose package is installed."""
    items = report_to if isinstance(report_to, list) else str(report_to or "").split(",")
    names = [str(n).strip().lower() for n in items if str(n).strip()]
    if "all" in names:
        names = [n for n in ("tensorboard", "wandb") if importlib.util.find_spec(n) is not None]
    return [n for n in dict.fromkeys(names) if n != "none"]


def report_to_problems(cfg: RunConfig) -> list[FieldProblem]:
    """report_to names that ftui cannot mirror to, each by name, and tensorboard or wandb without its package."""
    names = reporter_names(cfg.report_to)
    unknown = [n for n in names if n not in REPORTERS]
    if unknown:
        return [FieldProblem("report_to", cfg.report_to, _("ftui cannot report to {names}: it mirrors the figures to tensorboard and wandb "
                                                           "(or none; events.jsonl always has them)").format(names=", ".join(unknown)))]
    for name, other in (("tensorboard", "wandb"), ("wandb", "tensorboard")):  # each needs its package
        if name in names and importlib.util.find_spec(name) is None:
            return [FieldProblem("report_to", cfg.report_to, _("{name} is not installed: pip install {name} (or pip install "
                                                               "'ftui[{name}]'), or report to {other} or none").format(name=name, other=other))]
    return []


def cutoff_problems(cfg: RunConfig) -> list[FieldProblem]:
    """cutoff_len beyond the positions the model's config.json allows (max_position_embeddings,
    stretched by its rope_scaling where it has one). Past them a model with a table of
    positions fails, and a RoPE model meets positions it was never trained on; LLaMA-Factory
    goes further only where rope scaling is set, and so does ftui."""
    from ftui.plan.model_shape import read_model_config

    try:
        model = read_model_config(cfg.model_name_or_path)  # a local folder or the hub cache: no network
    except ValueError:
        return []  # not here yet (a hub model the run downloads): nothing to compare with
    limit = position_limit(model)
    if limit is None or cfg.cutoff_len <= limit[0]:
        return []
    most, why, scaled = limit
    stretch = (_("raise the factor of its rope_scaling in the model's config.json") if scaled else
               _("(for a RoPE model) set rope scaling in the model's config.json, e.g. {example}").format(
                   example=f'"rope_scaling": {{"rope_type": "linear", "factor": {float(math.ceil(cfg.cutoff_len / most))}}}'))
    return [FieldProblem("cutoff_len", cfg.cutoff_len,
                         _("cutoff_len {cutoff_len} is above {why}: lower cutoff_len to {most} or less, or {stretch}").format(
                             cutoff_len=cfg.cutoff_len, why=why, most=most, stretch=stretch))]


def fitting_cutoff_len(model_name_or_path: str, wanted: int) -> int:
    """``wanted``, lowered to the positions the model allows (cutoff_problems' limit): the
    cutoff_len for a model scored outside a run (ftui predict / eval --model), whose user set
    none, so that the default (2048) does not refuse a model made for fewer."""
    from ftui.plan.model_shape import read_model_config

    try:
        limit = position_limit(read_model_config(model_name_or_path))
    except ValueError:
        return wanted
    return min(wanted, limit[0]) if limit is not None else wanted


# config.json keys of vision / audio towers: a multimodal model, which ftui does not train
MULTIMODAL_CONFIG_KEYS = ("vision_config", "audio_config", "visual", "vision_tower", "mm_vision_tower", "speech_config")


def multimodal_model_problems(cfg: RunConfig) -> list[FieldProblem]:
    """A model with a vision or audio tower (Qwen-VL, LLaVA, Gemma 3 4B+ ...): ftui trains the
    text-only causal LMs; LLaMA-Factory's multimodal plug-ins (image/video/audio processing,
    frozen towers) are not part of it, so such a model is refused instead of half-trained."""
    from ftui.plan.model_shape import read_model_config

    try:
        model = read_model_config(cfg.model_name_or_path)
    except ValueError:
        return []
    quant = model.get("quantization_config")
    method = str(quant.get("quant_method", "")) if isinstance(quant, dict) else ""
    if method and method != "bitsandbytes":
        return [FieldProblem("model_name_or_path", cfg.model_name_or_path,
                             _("a model quantized with {method} (its config.json's quantization_config): not supported, ftui "
                               "trains LoRA over full-precision or bitsandbytes (quantization_bit) weights; use the unquantized "
                               "model").format(method=f"{method:.40}"))]
    found = next((k for k in MULTIMODAL_CONFIG_KEYS if k in model), None)
    if found is None:
        return []
    return [FieldProblem("model_name_or_path", cfg.model_name_or_path,
                         _("a multimodal model (model_type {model_type}; its config.json has {key}): not supported, ftui trains "
                           "text-only language models; use the text-only variant of the model").format(
                             model_type=f"{model.get('model_type', '?')!s:.40}", key=found))]


def position_limit(model: dict[str, Any]) -> tuple[int, str, bool] | None:
    """The longest sequence a model's config.json allows, how it says so, and whether rope
    scaling already stretches it; None when it sets no limit (no max_position_embeddings, or
    dynamic rope scaling, which stretches as far as needed)."""
    if "max_position_embeddings" not in model and isinstance(model.get("text_config"), dict):
        model = model["text_config"]  # a multimodal model's language part
    positions = model.get("max_position_embeddings") or model.get("n_positions")
    if not isinstance(positions, int) or isinstance(positions, bool) or positions <= 0:
        return None
    why = _("the model's max_position_embeddings {positions}").format(positions=positions)
    scaling = model.get("rope_scaling") or model.get("rope_parameters")  # transformers 5 names it rope_parameters
    kind = (scaling.get("rope_type") or scaling.get("type")) if isinstance(scaling, dict) else None
    if kind in (None, "default"):
        return positions, why, False
    factor, original = scaling.get("factor"), scaling.get("original_max_position_embeddings") or positions
    if (kind == "dynamic" or isinstance(factor, bool) or not isinstance(factor, (int, float)) or not math.isfinite(factor)
            or factor <= 0 or isinstance(original, bool) or not isinstance(original, int) or original <= 0):
        return None  # no limit to compare with (a factor of 1e999 reads as infinity: int() of it would raise)
    stretched = max(positions, int(factor * original))
    why = _("the {stretched} positions of the model's config.json ({kind} rope_scaling, factor {factor} x {original})").format(
        stretched=stretched, kind=kind, factor=f"{factor:g}", original=original)
    return stretched, why, True


def engine_problems(cfg: RunConfig) -> list[FieldProblem]:
    """Engine / method / precision / process-count combinations that cannot work, with an
    alternative in each message."""
    out: list[FieldProblem] = []
    if cfg.engine in NEEDS_SEVERAL and cfg.world_size == 1 and not cfg.deepspeed:
        offload = "fsdp_offload" if engine_spec(cfg.engine).strategy == "fsdp" else "zero3_offload"
        out.append(FieldProblem("engine", cfg.engine, _("{engine} shards over processes and needs nproc_per_node >= 2; with one GPU use single, or {offload} to fit a larger "
                                                            "model").format(engine=cfg.engine, offload=offload)))
    if cfg.method == "qlora" and (cfg.deepspeed or engine_spec(cfg.engine).shards_parameters):
        out.append(FieldProblem("engine", cfg.engine, _("QLoRA's 4/8-bit base cannot be sharded by ftui's engines; use single or ddp, or plain lora with fsdp/zero3")))
    if cfg.method == "qlora" and cfg.model_init == "random":
        out.append(FieldProblem("model_init", cfg.model_init, _("QLoRA quantizes pretrained weights as they load; a random model is never loaded from disk, so use lora (or save "
                                                                      "the random model and point model_name_or_path at it)")))
    if cfg.pure_bf16 and cfg.uses_deepspeed:
        out.append(FieldProblem("pure_bf16", True, _("DeepSpeed keeps fp32 master weights in its optimizer, so it cannot train purely in bf16; use bf16: true "
                                                      "with {engine}, or pure_bf16 with engine single, ddp, fsdp or fsdp_offload").format(engine=cfg.engine_name)))
    if cfg.deepspeed:
        preset = engine_spec(cfg.engine)
        if not preset.deepspeed and preset.strategy != "single":  # a torch engine that is not the default
            out.append(FieldProblem("deepspeed", cfg.deepspeed, _("a DeepSpeed config runs the DeepSpeed engine, but engine is {engine}; leave engine at single (the file decides) or "
                                                                    "pick a zero* preset").format(engine=cfg.engine)))
        try:
            fixed = deepspeed_precision(read_user_deepspeed(cfg.deepspeed))
        except ValueError as err:
            out.append(FieldProblem("deepspeed", cfg.deepspeed, _("{error}; give a readable DeepSpeed JSON, or use a zero* engine preset").format(error=err)))
        else:
            if fixed and fixed != cfg.precision:
                out.append(FieldProblem("deepspeed", cfg.deepspeed, _("the file turns {fixed} on but the run is {precision}; set {fixed}: true or set the file's value to \"auto\"").format(
                    fixed=fixed, precision=cfg.precision)))
    return out


def gpu_pick_problems(cfg: RunConfig) -> list[FieldProblem]:
    """``gpus``: written as CUDA_VISIBLE_DEVICES takes it (CUDA silently drops what follows a
    bad entry, and hides every GPU when one is named twice), each GPU on this machine when
    NVML can tell, and one GPU per process of this node."""
    if cfg.gpus is None:
        return []
    if cfg.device == "cpu":
        return [FieldProblem("gpus", cfg.gpus, _("a CPU run (device: cpu) uses no GPU; leave gpus empty or set device: auto"))]
    if not GPU_LIST.fullmatch(cfg.gpus):
        return [FieldProblem("gpus", cfg.gpus, _("expected nvidia-smi's GPU numbers separated by commas (0,1) or GPU-/MIG- UUID prefixes"))]
    entries = cfg.gpus.split(",")
    twice = sorted({e for e in entries if entries.count(e) > 1})
    if twice:
        return [FieldProblem("gpus", cfg.gpus, _("GPU {gpu} is named twice (CUDA would then show no GPU at all)").format(gpu=twice[0]))]
    from ftui.machine.gpu import gpus_named, visible_gpus  # NVML, not torch: this runs in the dashboard too

    out = []
    machine = gpus_named(None) if _THIS_MACHINE.get() else []
    found = len(visible_gpus(cfg.gpus)) if machine else 0
    if machine and found < len(entries):
        numbers = f"0-{len(machine) - 1}" if len(machine) > 1 else "0"
        out.append(FieldProblem("gpus", cfg.gpus, _("GPU {gpu} is not on this machine (nvidia-smi numbers its {n} GPU(s) {numbers})").format(
            gpu=entries[found], n=len(machine), numbers=numbers)))
    if cfg.nproc_per_node > len(entries):
        out.append(FieldProblem("nproc_per_node", cfg.nproc_per_node,
                                _("{n} processes need a GPU each, but gpus picks {picked} ({gpus}): lower nproc_per_node to "
                                  "{picked} or pick more GPUs").format(n=cfg.nproc_per_node, picked=len(entries), gpus=cfg.gpus)))
    return out


def gpu_present(picked: str | None = None) -> bool:
    if not _THIS_MACHINE.get():
        return True
    from ftui.machine.gpu import gpu_count  # NVML, not torch: this runs in the dashboard too

    return gpu_count(picked) > 0


# Whether the checks that ask about this machine (its GPUs, bitsandbytes, liger-kernel) apply:
# off while `ftui plan --gpu-memory` plans for GPUs elsewhere (from a login node or a laptop).
_THIS_MACHINE: ContextVar[bool] = ContextVar("ftui_checks_this_machine", default=True)


@contextmanager
def for_another_machine() -> Iterator[None]:
    """Validation within skips what only this machine's GPUs and packages decide."""
    token = _THIS_MACHINE.set(False)
    try:
        yield
    finally:
        _THIS_MACHINE.reset(token)


def qlora_unavailable_reason() -> str | None:
    """Why QLoRA cannot run on this machine (None when bitsandbytes and a CUDA GPU are there)."""
    if not _THIS_MACHINE.get():
        return None
    if importlib.util.find_spec("bitsandbytes") is None:
        return _("bitsandbytes is not installed (pip install 'ftui[qlora]')")
    from ftui.machine.gpu import gpu_count  # NVML, not torch: this runs in the dashboard too

    if gpu_count() == 0:
        return _("no CUDA GPU was found")
    return None


def validate_config(data: dict[str, Any]) -> tuple[RunConfig | None, list[FieldProblem]]:
    """Validates a mapping; returns the config (or None) and every problem found."""
    if not isinstance(data, dict):
        return None, [FieldProblem("config", data, _("expected a mapping of key: value"))]
    try:
        cfg = RunConfig.model_validate(data)
    except ValidationError as err:
        problems = _pydantic_problems(err, data)
        return None, problems + _cross_field_problems_of_the_rest(data, {p.field for p in problems})
    problems = cross_field_problems(cfg)
    return (None if problems else cfg), problems


def _cross_field_problems_of_the_rest(data: dict[str, Any], failed: set[str]) -> list[FieldProblem]:
    """The cross-field problems of the fields that passed, so that every problem shows at
    once (a bad model path is flagged while the dataset is still empty): the failed fields
    take their defaults (required ones a stand-in) and their own rules are not reported."""
    rest = {k: v for k, v in data.items() if k not in failed} | {k: v for k, v in _STAND_INS.items() if k in failed}
    try:
        cfg = RunConfig.model_validate(rest)
    except ValidationError:
        return []
    return [p for p in cross_field_problems(cfg, model_known="model_name_or_path" not in failed) if p.field not in failed]


def parse_config(data: dict[str, Any], source: str = "config") -> tuple[RunConfig, list[str]]:
    """Validates a mapping; returns (config, warnings) or raises ConfigError."""
    cfg, problems = validate_config(data)
    if cfg is None:
        raise ConfigError(problems, source)
    warning = unsupported_warning(cfg.model_extra or {})
    return cfg, [warning] if warning else []


def load_config(path: str | os.PathLike[str], overrides: dict[str, Any] | None = None) -> tuple[RunConfig, list[str]]:
    """Reads a YAML file (safe_load) into a RunConfig; returns (config, warnings)."""
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError([FieldProblem("config", str(p), _("no such file"))], str(p)) from None
    except IsADirectoryError:
        raise ConfigError([FieldProblem("config", str(p), _("a directory, not a YAML file"))], str(p)) from None
    except (OSError, UnicodeDecodeError) as err:
        raise ConfigError([FieldProblem("config", str(p), _("cannot read it: {error}").format(error=err))], str(p)) from None
    try:
        data = load_yaml(text)
    except YAMLRefused as err:  # an alias bomb, a value that contains itself, nesting past the stack
        raise ConfigError([FieldProblem("config", str(p), _("refused: {reason}").format(reason=err))], str(p)) from None
    except yaml.YAMLError as err:
        raise ConfigError([FieldProblem("config", str(p), _("not valid YAML: {error}").format(error=yaml_reason(err)))], str(p)) from None
    if data is None:
        data = {}
    if isinstance(data, dict) and overrides:
        data = {**data, **overrides}
    return parse_config(data, str(p))


def config_defaults() -> dict[str, Any]:
    """Every field's default (required fields left out): what an empty form starts from."""
    return {k: f.get_default(call_default_factory=True) for k, f in RunConfig.model_fields.items() if not f.is_required()}


def demo_config(**overrides: Any) -> RunConfig:
    """The built-in demo: a tiny random-weight Llama learns the shipped Q&A set on the CPU."""
    data: dict[str, Any] = dict(
        model_name_or_path=DEMO_MODEL,
        model_init="random",
        finetuning_type="full",
        dataset=DEMO_DATASET,
        cutoff_len=128,
        per_device_train_batch_size=8,
        gradient_accumulation_steps=1,
        learning_rate=3e-3,
        num_train_epochs=30,
        lr_scheduler_type="cosine",
        warmup_ratio=0.05,
        weight_decay=0.0,
        logging_steps=1,
        save_steps=100000,
        run_name="demo",
        device="cpu",
        seed=42,
    )
    data.update(overrides)
    cfg, _warnings = parse_config(data, "demo preset")
    return cfg
