"""The launch form's fields: the groups and their fields (F), the stage options from the
stage descriptions, and the conversions between a config mapping and the form's values."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any


from ftui.i18n import N_, _
from ftui.presets.choices import ENGINES, SCHEDULERS
from ftui.presets.templates import TEMPLATES
from ftui.stages import StageOption, descriptions as stage_descriptions, find as find_stage




METHODS = ("full", "lora", "qlora", "freeze")
# Defaults of the form before the RunConfig model is loaded (it is imported after the first
# frame): they must equal RunConfig's own, which tests/test_tui_pilot.py checks.
FORM_DEFAULTS: dict[str, Any] = {
    "model_name_or_path": "", "model_init": "pretrained", "template": None, "trust_remote_code": False,
    "dataset": "", "dataset_dir": "data", "cutoff_len": 2048, "packing": None, "max_samples": None, "val_size": 0.0,
    "stage": "sft", **{o.key: o.default for d in stage_descriptions().values() for o in d.options},  # each stage's own options
    "finetuning_type": "lora", "quantization_bit": None, "lora_rank": 8, "lora_alpha": None, "lora_dropout": 0.0,
    "lora_target": "all", "freeze_trainable_layers": 2,
    "image_max_pixels": 768 * 768, "image_min_pixels": 32 * 32,
    "freeze_vision_tower": True, "freeze_multi_modal_projector": True, "freeze_language_model": False, "gradient_checkpointing": False,
    "torch_compile": False, "enable_liger_kernel": False, "flash_attn": "auto",
    "engine": "single", "deepspeed": None, "gpus": None, "nproc_per_node": 1, "nnodes": 1, "node_rank": 0, "rdzv_endpoint": None,
    "launcher": "local", "slurm_partition": None, "slurm_account": None, "slurm_qos": None, "slurm_time": None,
    "slurm_gpus_per_node": None, "slurm_cpus_per_task": None, "slurm_mem_per_task": None, "slurm_constraint": None,
    "slurm_sbatch_lines": [], "slurm_warn_s": 120, "slurm_requeue": True,
    "bf16": False, "fp16": False, "per_device_train_batch_size": 1, "gradient_accumulation_steps": 1,
    "learning_rate": 1e-4, "num_train_epochs": 3.0, "max_steps": -1, "lr_scheduler_type": "cosine",
    "warmup_ratio": 0.0, "weight_decay": 0.0, "max_grad_norm": 1.0, "logging_steps": 10, "save_steps": 500,
    "save_total_limit": None,
    "seed": 42, "run_name": None, "report_to": "none",
}
# flash_attn's values, LLaMA-Factory's all: a loaded fa3 shows as it is, with validation's refusal beside it
ATTENTION_KERNELS = ("auto", "sdpa", "fa2", "disabled", "fa3")
PRECISIONS = ("bf16", "pure_bf16", "fp16", "fp32")  # LLaMA-Factory's compute types; the last is the default
# packing: unset means the stage's default (pt packs, sft does not), as in LLaMA-Factory
PACKING = {N_("stage default (pt: on, sft: off)"): "default", N_("on"): "on", N_("off"): "off"}
PACKING_VALUES = {"default": None, "on": True, "off": False}


@dataclass(frozen=True)
class F:
    """A form field; ``label``, ``placeholder`` and the options' labels are English (marked
    with N_), translated where the field is built, so a language switch rebuilds them."""

    key: str
    label: str
    kind: str = "text"  # text | bool | select
    options: tuple = ()
    optional: bool = False  # empty text means "not set"
    only_for: tuple[str, ...] = ()  # methods this field belongs to
    stages: tuple[str, ...] = ()  # stages this field belongs to (shown, and in the config, only for them)
    vision: bool = False  # shown, and in the config, only for a vision-language model (ftui.presets.vision_families)
    launchers: tuple[str, ...] = ()  # launchers this field belongs to (slurm's options; local's GPUs and rendezvous)
    placeholder: str = ""


def stage_option_fields() -> list[F]:
    """The stages' own options (ftui.stages), each a field shown (and in the config) while a
    stage that has it is chosen; an option several stages share (pref_beta) is one field."""
    fields: dict[str, tuple[StageOption, list[str]]] = {}
    for name, d in stage_descriptions().items():
        for o in d.options:
            fields.setdefault(o.key, (o, []))[1].append(name)
    return [F(o.key, o.label, o.form_kind, tuple((f"{v}: {what}", v) for v, what in o.choices), stages=tuple(stages))
            for o, stages in fields.values()]


# Slurm's options (issue 45), shown only with launcher slurm; their descriptions (tooltips) are RunConfig's
SLURM_FIELDS = [F(key, label, kind, optional=kind == "text" and key != "slurm_warn_s", placeholder=placeholder, launchers=("slurm",))
                for key, label, kind, placeholder in (
    ("slurm_partition", N_("partition"), "text", N_("the cluster's default")),
    ("slurm_account", N_("account"), "text", N_("your default")),
    ("slurm_qos", N_("QoS"), "text", N_("the default")),
    ("slurm_time", N_("time limit"), "text", N_("e.g. 4:00:00; empty: the partition's")),
    ("slurm_gpus_per_node", N_("GPUs per node"), "text", N_("processes per node")),
    ("slurm_cpus_per_task", N_("CPUs per task"), "text", N_("Slurm's default")),
    ("slurm_mem_per_task", N_("memory per task"), "text", N_("e.g. 64G")),
    ("slurm_constraint", N_("constraint"), "text", N_("node features, e.g. a100")),
    ("slurm_sbatch_lines", N_("more #SBATCH lines"), "text", N_("separated by ; e.g. --exclusive; --mail-type=END")),
    ("slurm_warn_s", N_("checkpoint + requeue before the limit (s)"), "text", ""),
    ("slurm_requeue", N_("requeue after a time limit or preemption"), "bool", ""),
)]
SBATCH_SEPARATORS = re.compile(r"[;\n]")


def sbatch_lines(text: str) -> list[str]:
    """The extra #SBATCH lines as the one-line field holds them (separated by ';' or newlines:
    an Input has one line) -> slurm_sbatch_lines' list, empty parts left out."""
    return [part.strip() for part in SBATCH_SEPARATORS.split(text) if part.strip()]


GROUPS: list[tuple[str, list[F]]] = [
    (N_("Model"), [
        F("model_name_or_path", N_("model (path or hub name)"), placeholder=N_("Qwen/Qwen2.5-0.5B-Instruct or /models/llama")),
        F("model_init", N_("weights"), "select", (("pretrained", "pretrained"), (N_("random (from config)"), "random"))),
        F("template", N_("chat template"), "select", ((N_("the tokenizer's own"), ""),) + tuple((t, t) for t in TEMPLATES)),
        F("trust_remote_code", N_("trust remote code"), "bool"),
    ]),
    (N_("Data"), [
        F("dataset", N_("dataset (names or files)"), placeholder=N_("alpaca_en_demo or data/my.jsonl")),
        F("dataset_dir", N_("dataset_info.json folder")),
        F("cutoff_len", N_("cutoff length")),
        F("packing", N_("packing"), "select", tuple(PACKING.items())),
        F("max_samples", N_("max samples"), optional=True, placeholder=N_("all")),
        F("val_size", N_("validation share")),
        F("image_max_pixels", N_("image max pixels"), vision=True),
        F("image_min_pixels", N_("image min pixels"), vision=True),
    ]),
    (N_("Method"), [
        F("stage", N_("stage"), "select", tuple((f"{s}: {d.short}", s) for s, d in stage_descriptions().items())),
        *stage_option_fields(),
        F("method", N_("method"), "select", tuple((m, m) for m in METHODS)),
        F("lora_rank", N_("LoRA rank"), only_for=("lora", "qlora")),
        F("lora_alpha", N_("LoRA alpha"), optional=True, only_for=("lora", "qlora"), placeholder=N_("2 x rank")),
        F("lora_dropout", N_("LoRA dropout"), only_for=("lora", "qlora")),
        F("lora_target", N_("LoRA targets"), only_for=("lora", "qlora")),
        F("freeze_trainable_layers", N_("trainable last layers"), only_for=("freeze",)),
        F("freeze_vision_tower", N_("freeze vision tower"), "bool", vision=True),
        F("freeze_multi_modal_projector", N_("freeze projector"), "bool", vision=True),
        F("freeze_language_model", N_("freeze language model"), "bool", vision=True),
        F("gradient_checkpointing", N_("gradient checkpointing"), "bool"),
        F("torch_compile", N_("torch.compile layers"), "bool"),
        F("enable_liger_kernel", N_("Liger kernels (CUDA)"), "bool"),
        F("flash_attn", N_("attention kernel"), "select", tuple((k, k) for k in ATTENTION_KERNELS)),
    ]),
    (N_("Engine"), [
        F("engine", N_("engine"), "select", tuple((e, e) for e in ENGINES)),
        F("deepspeed", N_("own DeepSpeed JSON"), optional=True, placeholder=N_("optional: replaces the zero* preset file")),
        F("gpus", N_("GPUs (nvidia-smi numbers)"), optional=True, placeholder=N_("all"), launchers=("local",)),
        F("nproc_per_node", N_("processes per node")),
        F("nnodes", N_("nodes")),
        F("rdzv_endpoint", N_("rendezvous host:port"), optional=True, placeholder=N_("only for several nodes"), launchers=("local",)),
        F("launcher", N_("launcher"), "select", ((N_("local: this machine"), "local"), (N_("slurm: submit with sbatch"), "slurm"))),
        *SLURM_FIELDS,
    ]),
    (N_("Precision"), [F("precision", N_("precision"), "radio", PRECISIONS)]),
    (N_("Training"), [
        F("per_device_train_batch_size", N_("micro batch per device")),
        F("gradient_accumulation_steps", N_("gradient accumulation")),
        F("learning_rate", N_("learning rate")),
        F("num_train_epochs", N_("epochs")),
        F("max_steps", N_("max steps (-1: epochs)")),
        F("lr_scheduler_type", N_("scheduler"), "select", tuple((s, s) for s in SCHEDULERS)),
        F("warmup_ratio", N_("warmup ratio")),
        F("weight_decay", N_("weight decay")),
        F("max_grad_norm", N_("clip grad norm (0: off)")),
        F("logging_steps", N_("log every N steps")),
        F("save_steps", N_("checkpoint every N steps")),
        F("save_total_limit", N_("keep newest N checkpoints"), optional=True, placeholder=N_("all")),
        F("seed", N_("seed")),
    ]),
    (N_("Output"), [
        F("run_name", N_("run name"), optional=True, placeholder=N_("derived from the model")),
        F("output_dir", N_("runs root")),
        F("report_to", N_("report to"), optional=True, placeholder=N_("none, tensorboard, wandb (comma separated)")),
    ]),
]
FIELDS = {f.key: f for _group, fields in GROUPS for f in fields}
FORM_DERIVED = {"finetuning_type", "quantization_bit", "bf16", "fp16", "pure_bf16"}  # set by the method and precision choices
# Which form field shows a RunConfig field's problem.
FIRST_FRAME_GROUPS = 2  # Model and Data fill an 80x24 screen; the rest mounts after the first frame
NOTES = {"Model": "family", "Data": "preview", "Engine": "engine-help", "Precision": "precision-help", "Output": "kept-keys"}
PROBLEM_FIELD = {"bf16": "precision", "fp16": "precision", "pure_bf16": "precision", "finetuning_type": "method", "quantization_bit": "method"}


def option_labels(f: F) -> list[tuple[str, Any]]:
    """A select's options in the current language: the English labels translated, and the
    stage's and pref_loss's "name: what it is" with the name kept as LLaMA-Factory writes it."""
    if f.key == "stage":  # every stage described now (one a plugin added too)
        return [(f"{s}: {_(d.short)}", s) for s, d in stage_descriptions().items()]
    if f.stages and f.kind == "select":  # a stage's option: "value: what it is"
        return [(f"{value}: {_(label.partition(': ')[2])}", value) for label, value in f.options]
    # A label that is the value itself (a method, template, engine or scheduler name) is a
    # name users search for: never looked up (another area's msgid could equal it).
    return [(_(label) if label and (label != value or f.key == "packing") else label, value) for label, value in f.options]


def stage_default_updates(values: dict[str, Any], stage: str) -> dict[str, Any]:
    """The fields to refill when ``stage`` is chosen: an option several stages share with
    different defaults (temperature, top_p, top_k: grpo's are TRL's, ppo's LLaMA-Factory's)
    whose value is still another stage's default takes the chosen stage's; a value the user
    typed stays."""
    chosen = find_stage(stage)
    if chosen is None:
        return {}
    out = {}
    for o in chosen.options:
        others = {str(p.default) for d in stage_descriptions().values() if d.name != stage for p in d.options if p.key == o.key}
        now = str(values.get(o.key))
        if now in others and now != str(o.default):
            out[o.key] = o.default
    return out


def config_to_form(cfg: dict[str, Any]) -> dict[str, Any]:
    """RunConfig keys -> form values (method and precision are one choice each in the form)."""
    values = {k: cfg[k] for k in FIELDS if k in cfg}
    ft = cfg.get("finetuning_type", "lora")
    values["method"] = "qlora" if ft == "lora" and cfg.get("quantization_bit") else ft
    values["precision"] = ("pure_bf16" if cfg.get("pure_bf16") else "bf16" if cfg.get("bf16") else "fp16" if cfg.get("fp16")
                           else "fp32")
    if "packing" in cfg:
        values["packing"] = {v: k for k, v in PACKING_VALUES.items()}.get(cfg["packing"], "default")
    if neat_packing_of_sft(cfg):  # LLaMA-Factory's neat_packing: ftui's packing (examples kept apart)
        values["packing"] = "on"
    for key in ("gpus", "report_to"):
        if isinstance(cfg.get(key), (list, tuple)):  # YAML's gpus: [2, 3], report_to: [tensorboard, wandb]
            values[key] = ",".join(str(g) for g in cfg[key])
    if isinstance(cfg.get("slurm_sbatch_lines"), (list, tuple)):  # one field: the lines joined by "; "
        values["slurm_sbatch_lines"] = "; ".join(str(line) for line in cfg["slurm_sbatch_lines"])
    return values


def neat_packing_of_sft(cfg: dict[str, Any]) -> bool:
    """A loaded sft config with LLaMA-Factory's neat_packing: the form shows it as packing on
    (another stage keeps the key, to be refused by name)."""
    stage = find_stage(cfg.get("stage", "sft"))
    return cfg.get("neat_packing") is True and stage is not None and stage.neat_packing


def shown_for(f: F, values: dict[str, Any], vision: bool = False) -> bool:
    """Whether a field belongs to the method and the stage chosen, and to the model (``vision``:
    a vision-language model); else it is hidden and left out of the config."""
    return ((not f.only_for or values.get("method") in f.only_for) and (not f.stages or values.get("stage") in f.stages)
            and (not f.vision or vision) and (not f.launchers or values.get("launcher", "local") in f.launchers))


def form_to_config(values: dict[str, Any], vision: bool = False) -> dict[str, Any]:
    """Form values -> the mapping RunConfig validates (strings are coerced by pydantic);
    ``vision``: the model is a vision-language model (its image keys are kept)."""
    data: dict[str, Any] = {}
    for key, value in values.items():
        f = FIELDS[key]
        if key in ("method", "precision"):
            continue
        if f.kind == "text" and isinstance(value, str):
            value = value.strip()
            if value == "" and (f.optional or key == "template"):
                continue
        if key == "template" and value == "":
            continue
        if key == "slurm_sbatch_lines" and isinstance(value, str):
            value = sbatch_lines(value)
        if key == "packing":
            if PACKING_VALUES.get(value) is None:
                continue
            value = PACKING_VALUES[value]
        if not shown_for(f, values, vision):
            continue
        data[key] = value
    method = values.get("method", "lora")
    data["finetuning_type"] = "lora" if method == "qlora" else method
    if method == "qlora":
        data["quantization_bit"] = 4
    precision = values.get("precision", "fp32")
    data["bf16"], data["fp16"] = precision == "bf16", precision == "fp16"
    if precision == "pure_bf16":  # only when chosen: LLaMA-Factory's YAMLs leave the key out
        data["pure_bf16"] = True
    return data
