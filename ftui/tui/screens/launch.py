"""The launch screen: a form grouped as Model, Data, Method, Engine, Precision, Training,
Output, validated as it is edited with the RunConfig's own rules.

Every change rebuilds the config mapping from the widgets and a worker runs
``validate_config`` on it (its checks read the model's files); the newest result is shown,
each problem under its field, and Start stays disabled while there is any (pressed, it waits
for the newest values' result). File reads (model family, dataset preview, YAML load/save)
and process control (Start) run in thread workers too. Keys from a loaded YAML that ftui
does not support are kept and saved back.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

import yaml
from rich.text import Text
from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.screen import Screen
from textual.widgets import Button, Input, Label, RadioButton, RadioSet, Select, Static, Switch
from textual.worker import get_current_worker

from ftui.safety.bounded_input import load_yaml, yaml_reason
from ftui.safety.files import write_text
from ftui.i18n import N_, _
from ftui.safety.text import visible
from ftui.presets.choices import ENGINES, SCHEDULERS, engine_description
from ftui.presets.families import detect_family
from ftui.presets.templates import TEMPLATES
from ftui.stages import PAIRS, StageOption, descriptions as stage_descriptions, find as find_stage
from ftui.tui.footer import FittingFooter
from ftui.tui.screens.modals import AskPath, ShowText
from ftui.tui.ui_thread import to_ui

if TYPE_CHECKING:
    from ftui.config.problems import FieldProblem
    from ftui.config.schema import RunConfig

METHODS = ("full", "lora", "qlora", "freeze")
# Defaults of the form before the RunConfig model is loaded (it is imported after the first
# frame): they must equal RunConfig's own, which tests/test_tui_pilot.py checks.
FORM_DEFAULTS: dict[str, Any] = {
    "model_name_or_path": "", "model_init": "pretrained", "template": None, "trust_remote_code": False,
    "dataset": "", "dataset_dir": "data", "cutoff_len": 2048, "packing": None, "max_samples": None, "val_size": 0.0,
    "stage": "sft", **{o.key: o.default for d in stage_descriptions().values() for o in d.options},  # each stage's own options
    "finetuning_type": "lora", "quantization_bit": None, "lora_rank": 8, "lora_alpha": None, "lora_dropout": 0.0,
    "lora_target": "all", "freeze_trainable_layers": 2, "gradient_checkpointing": False,
    "torch_compile": False, "enable_liger_kernel": False, "flash_attn": "auto",
    "engine": "single", "deepspeed": None, "gpus": None, "nproc_per_node": 1, "nnodes": 1, "node_rank": 0, "rdzv_endpoint": None,
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
        F("gradient_checkpointing", N_("gradient checkpointing"), "bool"),
        F("torch_compile", N_("torch.compile layers"), "bool"),
        F("enable_liger_kernel", N_("Liger kernels (CUDA)"), "bool"),
        F("flash_attn", N_("attention kernel"), "select", tuple((k, k) for k in ATTENTION_KERNELS)),
    ]),
    (N_("Engine"), [
        F("engine", N_("engine"), "select", tuple((e, e) for e in ENGINES)),
        F("deepspeed", N_("own DeepSpeed JSON"), optional=True, placeholder=N_("optional: replaces the zero* preset file")),
        F("gpus", N_("GPUs (nvidia-smi numbers)"), optional=True, placeholder=N_("all")),
        F("nproc_per_node", N_("processes per node")),
        F("nnodes", N_("nodes")),
        F("rdzv_endpoint", N_("rendezvous host:port"), optional=True, placeholder=N_("only for several nodes")),
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
    return values


def neat_packing_of_sft(cfg: dict[str, Any]) -> bool:
    """A loaded sft config with LLaMA-Factory's neat_packing: the form shows it as packing on
    (another stage keeps the key, to be refused by name)."""
    stage = find_stage(cfg.get("stage", "sft"))
    return cfg.get("neat_packing") is True and stage is not None and stage.neat_packing


def shown_for(f: F, values: dict[str, Any]) -> bool:
    """Whether a field belongs to the method and the stage chosen (else it is hidden and
    left out of the config)."""
    return (not f.only_for or values.get("method") in f.only_for) and (not f.stages or values.get("stage") in f.stages)


def form_to_config(values: dict[str, Any]) -> dict[str, Any]:
    """Form values -> the mapping RunConfig validates (strings are coerced by pydantic)."""
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
        if key == "packing":
            if PACKING_VALUES.get(value) is None:
                continue
            value = PACKING_VALUES[value]
        if not shown_for(f, values):
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


class LaunchScreen(Screen):
    AUTO_FOCUS = None  # focusing restyles the screen: done after the first frame instead
    BINDINGS = [
        Binding("f5", "start", N_("Start")),
        Binding("f2", "demo", N_("Demo")),
        Binding("f3", "load", N_("Load YAML")),
        Binding("f4", "save", N_("Save YAML")),
        Binding("f6", "command", N_("Command")),
        Binding("ctrl+r", "runs", N_("Runs")),
    ]
    # Keys that leave a narrow footer first (the launch bar's buttons do the same): Start, Runs and Quit stay.
    FOOTER_DROP_FIRST = ("command", "load", "save", "demo")

    def __init__(self, initial: dict[str, Any] | None = None, runs_root: str | None = None):
        super().__init__()
        self.runs_root = runs_root
        self.extra: dict[str, Any] = {}
        self.problems: list["FieldProblem"] = []
        self.config: "RunConfig | None" = None
        self._initial = initial
        self._loading = False
        self._family_filled: dict[str, str] = {}
        self._loaded_keys: set[str] = set()  # keys a YAML set: the model family never overwrites them
        self._shown_errors: dict[str, str] = {}
        self._validation_pending = False
        # Validation reads files (the model's config.json, a DeepSpeed file, the hub cache), so a
        # worker makes it: each request is numbered and only the newest one's result is shown;
        # what waits for a fresh result (Start, Save, Command) runs once it is shown.
        self._validation_seq = 0
        self._shown_seq = 0  # the validation shown last
        self._after_validation: Callable[[], None] | None = None
        self._ready = False
        self._recomposing = False  # the language switch is rebuilding the widgets
        self._demo_model: str | None = None  # the demo's model while the form holds the demo (F2)
        self._dataset_problem: str | None = None  # found by the preview worker (it reads dataset_info.json)
        # Why the dataset does not fit the stage (records.check_format: a ranking set for sft, a
        # plain one for dpo), from the preview worker, for the (dataset, dataset_dir, stage) it read
        self._fit_problem: tuple[tuple[str, str, str], str | None] | None = None
        self.yaml_path: str | None = None  # the YAML last saved or loaded: F6 offers `ftui train` on it
        # processes per node as the form itself last set it (the GPU count): it follows the GPUs
        # picked until the user types another number; a loaded YAML's value is the user's
        self._nproc_filled: str | None = None if initial else str(FORM_DEFAULTS["nproc_per_node"])
        self._machine_gpus = Text()  # the machine's GPUs, listed under the Engine group
        # The Data group's note: the records as read, then the first example as the run encodes it
        self._records_preview, self._rendered = Text(), Text()
        self._render_key: tuple[Any, ...] | None = None
        self._render_job: Any = None  # the EncodedExamples of the render under way

    def compose(self) -> ComposeResult:
        with VerticalScroll(id="form"):
            for index, (group, fields) in enumerate(GROUPS):
                with Vertical(classes="group", id=f"group-{group.lower()}") as box:
                    box.border_title = _(group)
                    if index < FIRST_FRAME_GROUPS:
                        yield from (self._build_field(f) for f in fields)
                    yield Static("", id=NOTES[group], classes="note") if group in NOTES else Static("", classes="note")
            yield Static("", id="form-errors", classes="error")
        yield Static("", id="plan-verdict")
        with Horizontal(id="launch-bar"):
            yield Button(_("Start"), id="start", variant="success", disabled=True, compact=True)
            yield Button(_("Demo"), id="demo", compact=True)
            yield Button(_("Load"), id="load", compact=True)
            yield Button(_("Save"), id="save", compact=True)
            yield Button(_("Command"), id="command", compact=True)
            yield Static("", id="status-line")
        yield FittingFooter(self.FOOTER_DROP_FIRST)

    @staticmethod
    def _build_field(f: F) -> Horizontal:
        """One row: label and control. Its error label is mounted only when it has an error."""
        control: Any
        if f.kind == "bool":
            control = Switch(id=f"f-{f.key}")
        elif f.kind == "select":
            control = Select(option_labels(f), id=f"f-{f.key}", allow_blank=False, compact=True)
        elif f.kind == "radio":
            control = RadioSet(*(RadioButton(o, id=f"p-{o}", value=i == len(f.options) - 1) for i, o in enumerate(f.options)),
                               id=f"f-{f.key}", compact=True)
        else:
            control = Input(id=f"f-{f.key}", placeholder=_(f.placeholder) if f.placeholder else "", compact=True)
        return Horizontal(Label(_(f.label), classes="field-label"), control, classes="field", id=f"row-{f.key}")

    def on_mount(self) -> None:
        self.fill(config_to_form(self._defaults()), validate=False)
        # Paint the first groups now; mount the rest, fill and validate right after.
        self.call_after_refresh(self._mount_rest)

    def _mount_rest(self) -> None:
        # Not awaited: this runs on the screen's own message pump, which must stay free to
        # process the mounts; the form is completed on the next refresh.
        self._mount_missing_fields()
        self.call_after_refresh(self._complete_form)

    def _mount_missing_fields(self) -> list[Any]:
        """Mounts the later groups' fields that are not there yet (a language switch may
        rebuild the screen before or after they were); returns the mounts to await."""
        mounts = []
        for group, fields in GROUPS[FIRST_FRAME_GROUPS:]:
            box = self.query_one(f"#group-{group.lower()}")
            if not box.query(".field"):
                mounts.append(box.mount_all([self._build_field(f) for f in fields], before=box.query_one(".note")))
        return mounts

    async def recompose(self) -> None:
        """The language switch (the app calls it on every screen after set_language): the form
        is built again in the new language and keeps what was typed and chosen, the YAML's kept
        keys, the focus and the scroll position; its notes (family, preview, hardware, memory)
        are made again in the new language."""
        if not self.is_attached:
            return
        ready, focused = self._ready, (self.focused.id if self.focused is not None else None)
        values = self.values() if ready else None
        scroll_y = self.query_one("#form", VerticalScroll).scroll_y
        self._ready = False  # no validation while the widgets are half built
        self._recomposing = True  # workers' results wait: recompose asks for them again
        self._shown_errors = {}  # the error labels go with the old widgets
        try:
            await super().recompose()
            for mount in self._mount_missing_fields():
                await mount
        finally:
            self._recomposing = False
        if not ready or values is None:  # still in the first moment: fill the new widgets as the first frame would
            self.call_after_refresh(self._complete_form)
            return
        self.fill(config_to_form(self._defaults()) | values, validate=False)
        self._ready = True
        self._show_kept_keys()
        self._records_preview, self._rendered, self._render_key = Text(), Text(), None  # made again in the new language
        self._gpus_changed(self.query_one("#f-gpus", Input).value, always=True)
        self.detect_model(str(values.get("model_name_or_path", "")))
        self.preview_dataset(str(values.get("dataset", "")), str(values.get("dataset_dir", "")), str(values.get("stage") or "sft"))
        found = self.query(f"#{focused}") if focused else None
        if found:
            self.set_focus(found.first())
        self.call_after_refresh(self.query_one("#form", VerticalScroll).scroll_to, y=scroll_y, animate=False)
        self.revalidate()

    def _complete_form(self) -> None:
        if not self.is_attached or self._ready or self._recomposing:  # the app quit, or a recompose completes it
            return
        later = {f.key for _group, fields in GROUPS[FIRST_FRAME_GROUPS:] for f in fields}
        self.fill({k: v for k, v in config_to_form(self._defaults()).items() if k in later}, validate=False)
        if self._initial:
            self._keep_loaded(self._initial)
            self.fill(config_to_form(self._initial), validate=False)
        self._ready = True
        self.query_one("#f-model_name_or_path", Input).focus()
        self._gpus_changed(self.query_one("#f-gpus", Input).value, always=True)  # NVML: the GPUs the run would use
        self.revalidate()

    def _defaults(self) -> dict[str, Any]:
        from ftui.rundir.paths import default_runs_root  # not ftui.config.schema: its pydantic model is built after the first frame

        return FORM_DEFAULTS | {"output_dir": str(self.runs_root) if self.runs_root else default_runs_root()}

    # --- form <-> values
    def values(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for key, f in FIELDS.items():
            w = self.query_one(f"#f-{key}")
            if f.kind == "radio":
                pressed = w.pressed_button
                out[key] = pressed.label.plain if pressed is not None else "fp32"
            else:
                out[key] = w.value
        return out

    def fill(self, values: dict[str, Any], validate: bool = True) -> None:
        self._loading = True
        try:
            for key, value in values.items():
                f = FIELDS.get(key)
                found = self.query(f"#f-{key}") if f is not None else None
                if not found:
                    continue  # not mounted yet (the first frame has only the first groups)
                w = found.first()
                if f.kind == "radio":
                    self.query_one(f"#p-{value}", RadioButton).value = True
                elif f.kind == "bool":
                    w.value = bool(value)
                elif f.kind == "select":
                    options = {v for _label, v in f.options}
                    w.value = value if value in options else ("" if key == "template" else w.value)
                else:
                    w.value = "" if value is None else str(value)
        finally:
            self._loading = False
        if validate:
            self.revalidate()

    def current_config_dict(self) -> dict[str, Any]:
        return {**self.extra, **form_to_config(self.values())}

    # --- validation
    @property
    def validated(self) -> bool:
        """Whether what the form shows (its problems, ``config``) is the newest validation's."""
        return self._ready and not self._validation_pending and self._shown_seq == self._validation_seq > 0

    def revalidate(self, then: Callable[[], None] | None = None) -> None:
        """Validates the form as it stands in a worker and shows the result; ``then`` runs once
        this (or a newer) validation is shown, with ``config`` and ``problems`` fresh (Start
        reads the datasets' registry again first)."""
        if then is not None:
            self._after_validation = then
        if not self._ready:
            return
        from ftui.machine.gpu import inventory_read

        if not inventory_read():
            # The checks ask NVML about the GPUs; only once detect_hardware has read them (its
            # _apply_hardware validates again): NVML can take seconds.
            self.query_one("#start", Button).disabled = True
            self.query_one("#status-line", Static).update(Text(_("checking the GPUs..."), style="dim"))
            return
        self._validation_seq += 1
        values = self.values()
        self.check_form(self._validation_seq, values, self.current_config_dict(), self._dataset_problem, self._stage_fit_problem(values),
                        recheck_datasets=self._after_validation is not None)

    @work(thread=True, exclusive=True, group="validate")
    def check_form(self, seq: int, values: dict[str, Any], data: dict[str, Any], dataset_problem: str | None,
                   fit_problem: str | None, recheck_datasets: bool) -> None:
        """The config's checks (they read the model's files, a DeepSpeed file, the hub cache)
        and the model's download warning, off the UI thread, with the preview's findings
        (``dataset_problem``: the datasets' registry; ``fit_problem``: the records' format).
        ``recheck_datasets``: the registry is read again (the preview may not have read the
        latest dataset_info.json)."""
        from ftui.config.preflight import preflight
        from ftui.config.problems import FieldProblem
        from ftui.plan.model_files import download_warning

        verdict = preflight(data)  # what ftui train checks, over one snapshot of the machine
        cfg, problems = verdict.config, [_apart_if_not_found(p, data) for p in verdict.problems]
        dataset_found = next((p.message for p in problems if p.field == "dataset"), None)
        rechecked = (dataset_found,) if recheck_datasets else None
        if cfg is None and dataset_found is None and (dataset_problem or fit_problem):  # the preview's findings, while other fields fail
            problems = [*problems, FieldProblem("dataset", values.get("dataset"), dataset_problem or fit_problem)]
        warning = download_warning(str(values.get("model_name_or_path", "")), values.get("model_init") == "random")
        to_ui(self, self._show_validation, seq, values, cfg, problems, warning, rechecked, verdict.warnings)

    def _show_validation(self, seq: int, values: dict[str, Any], cfg: "RunConfig | None", problems: list["FieldProblem"],
                         warning: str | None, rechecked: tuple[str | None] | None, notes: list[str] | None = None) -> None:
        if self._recomposing or seq != self._validation_seq:
            return  # a newer validation is on its way (or the widgets are being rebuilt)
        if rechecked is not None:
            self._dataset_problem = rechecked[0]
        self._shown_seq = seq
        self.config, self.problems = cfg, problems
        by_field: dict[str, list[str]] = {}
        general = []
        for p in problems:
            target = PROBLEM_FIELD.get(p.field, p.field)
            if target in FIELDS:
                by_field.setdefault(target, []).append(f"{p.value!r}: {p.message}" if target != p.field else p.message)
            else:
                general.append(str(p))
        # Touch a widget only when what it shows changes: every class or display change
        # restyles its subtree, and doing that for ~45 rows per keystroke is what made the
        # form slow to open.
        for key in FIELDS:
            msgs = "\n".join(by_field.get(key, []))
            if self._shown_errors.get(key, "") != msgs:
                self._shown_errors[key] = msgs
                row = self.query_one(f"#row-{key}")
                found = self.query(f"#e-{key}")
                if found:
                    label = found.first(Label)
                    label.update(Text(msgs))
                elif msgs:
                    label = Label(Text(msgs), id=f"e-{key}", classes="field-error")
                    row.parent.mount(label, after=row)
                else:
                    continue
                label.display = bool(msgs)
                row.set_class(bool(msgs), "-invalid")
        self._show_model_warning(None if by_field.get("model_name_or_path") else warning)
        self._show_field_warning("cutoff_len", None if by_field.get("cutoff_len") else "\n".join(notes or []) or None)
        multi = str(values.get("nnodes", "1")).strip() not in ("", "1")
        for key, f in FIELDS.items():
            if f.only_for or f.stages or key == "rdzv_endpoint":
                visible = shown_for(f, values) if f.only_for or f.stages else multi
                row = self.query_one(f"#row-{key}")
                if row.display != visible:
                    row.display = visible
        engine_help = engine_description(str(values.get("engine")))
        self.query_one("#engine-help", Static).update(Text(engine_help, style="dim") + self._machine_gpus)
        errors = self.query_one("#form-errors", Static)
        errors.update(Text("\n".join(general)))
        errors.display = bool(general)
        start = self.query_one("#start", Button)
        start.disabled = cfg is None
        if cfg is not None:
            self.plan_memory(cfg)
            self._render_if_changed(cfg)
        else:
            self.query_one("#plan-verdict", Static).update("")
        status = _("{n} problem(s) to fix").format(n=len(problems)) if problems else _("ready")
        if values.get("trust_remote_code"):
            status += " · " + _("trust_remote_code is ON: Python code from the model's repository will run")
        from ftui.config.schema import RunConfig
        from ftui.config.problems import kept_without_effect

        ignored = kept_without_effect({k: v for k, v in self.extra.items() if k not in RunConfig.model_fields})
        if ignored:  # the full list is under Output and in the notification shown at load
            status += " · " + _("{n} unsupported key(s) kept, no effect").format(n=len(ignored))
        self.query_one("#status-line", Static).update(Text(status, style="red" if problems else "green"))
        then, self._after_validation = self._after_validation, None
        if then is not None:
            then()

    def _show_model_warning(self, warning: str | None) -> None:
        """A hub model this machine does not have: Start stays possible (the run downloads
        it), but with no network the run fails (within seconds), so say it here."""
        self._show_field_warning("model_name_or_path", warning)

    def _show_field_warning(self, key: str, warning: str | None) -> None:
        """A warning under a field's row (Start stays possible), e.g. a RoPE model's cutoff_len
        past its positions."""
        if self._shown_errors.get(f"warning-{key}") == (warning or ""):
            return
        self._shown_errors[f"warning-{key}"] = warning or ""
        found = self.query(f"#w-{key}")
        if found:
            label = found.first(Label)
            label.update(Text(warning or ""))
        elif warning:
            row = self.query_one(f"#row-{key}")
            label = Label(Text(warning), id=f"w-{key}", classes="field-warning")
            row.parent.mount(label, after=row)
        else:
            return
        label.display = bool(warning)

    def request_validation(self) -> None:
        """Validates once after the current burst of changes (a YAML load changes 40 fields)."""
        if not self._validation_pending:
            self._validation_pending = True
            self.call_after_refresh(self._validate_now)

    def _validate_now(self) -> None:
        self._validation_pending = False
        self.revalidate()

    @on(Input.Changed)
    @on(Select.Changed)
    @on(Switch.Changed)
    @on(RadioSet.Changed)
    def _changed(self, event) -> None:
        if self._loading or not self._ready:
            return
        self.request_validation()
        wid = getattr(event, "control", None) and event.control.id or ""
        if wid == "f-model_name_or_path":
            self.detect_model(event.control.value)
            self._model_changed_after_demo(event.control.value)
        elif wid == "f-gpus":
            self._gpus_changed(event.control.value)
        elif wid in ("f-dataset", "f-dataset_dir", "f-stage"):
            self._stale_dataset_verdict()
            self.preview_dataset(self.query_one("#f-dataset", Input).value, self.query_one("#f-dataset_dir", Input).value,
                                 self.query_one("#f-stage", Select).value)

    def _stale_dataset_verdict(self) -> None:
        """The datasets changed: the error under the field judged the files named before (the
        preflight reads them, which takes a moment), so it goes until the new verdict, and a
        verdict still on its way about the old names is not shown."""
        self._validation_seq += 1  # (request_validation above asks for the new one)
        if not self._shown_errors.get("dataset"):
            return
        self._shown_errors["dataset"] = ""
        for label in self.query("#e-dataset").results(Label):
            label.display = False
        self.query_one("#row-dataset").set_class(False, "-invalid")

    # --- workers: file reads and NVML off the UI thread
    @work(thread=True, exclusive=True, group="family")
    def detect_model(self, name: str) -> None:
        fam = detect_family(name.strip()) if name.strip() else None
        to_ui(self, self._show_family, name, fam)

    def _show_family(self, name: str, fam) -> None:
        if self._recomposing:  # the widgets are being rebuilt; recompose detects again
            return
        note = self.query_one("#family", Static)
        if fam is None:
            note.update(Text(_("family: unknown (the tokenizer's template and all linear layers are used)") if name.strip() else "",
                             style="dim"))
            return
        note.update(Text(_("family: {family} · template {template} · LoRA targets {targets}").format(
            family=fam.name, template=fam.template, targets=",".join(fam.lora_targets)), style="dim"))
        template, targets = self.query_one("#f-template", Select), self.query_one("#f-lora_target", Input)
        # Fill from the family table unless the user chose something else by hand, or a loaded
        # YAML set it (its lora_target: all must be saved back as it was).
        if ("template" not in self._loaded_keys and template.value in ("", self._family_filled.get("template"))
                and fam.template in TEMPLATES):
            template.value = fam.template
            self._family_filled["template"] = fam.template
        joined = ",".join(fam.lora_targets)
        if "lora_target" not in self._loaded_keys and targets.value in ("all", "", self._family_filled.get("lora_target")):
            targets.value = joined
            self._family_filled["lora_target"] = joined

    @work(thread=True, exclusive=True, group="preview")
    def preview_dataset(self, dataset: str, dataset_dir: str, stage: str = "sft") -> None:
        from ftui.data.registry import dataset_path_problem

        problem = dataset_path_problem(dataset, dataset_dir) if dataset.strip() else None
        if problem != self._dataset_problem:
            to_ui(self, self._set_dataset_problem, problem)
        text, fit_problem = records_preview(dataset, dataset_dir, stage)
        if not get_current_worker().is_cancelled:  # a newer preview was asked for: a thread cannot be stopped, so skip showing this one
            to_ui(self, self._set_fit_problem, (dataset, dataset_dir, stage), fit_problem)
            to_ui(self, self._show_preview, records=text)

    def _render_if_changed(self, cfg: "RunConfig") -> None:
        """Renders the first example again when what it depends on changed (not per keystroke
        elsewhere in the form: it takes a process that loads the tokenizer)."""
        key = (cfg.model_name_or_path, cfg.model_init, cfg.trust_remote_code, cfg.template, cfg.stage, cfg.dataset,
               cfg.dataset_dir, cfg.cutoff_len, cfg.packing)
        if key != self._render_key and getattr(self.app, "render_examples", True):
            self._render_key = key
            self._show_preview(rendered=Text(_("rendering the first example as the run encodes it..."), style="dim"))
            self.render_first_example(cfg)

    @work(thread=True, exclusive=True, group="render")
    def render_first_example(self, cfg: "RunConfig") -> None:
        """The first training example as the run encodes it (``ftui data --show 1``), from the
        first records only and the hub's caches only: a preview never downloads."""
        from ftui.data.examples import example_text
        from ftui.jobs.examples import EncodedExamples, ExamplesFailed

        few = min(cfg.max_samples or PREVIEW_RECORDS, PREVIEW_RECORDS)
        job = EncodedExamples(cfg.model_copy(update={"max_samples": few, "val_size": 0.0}), limit=1, text=True, offline=True)
        previous, self._render_job = self._render_job, job
        if previous is not None:
            previous.stop()
        try:
            rows = list(job)
            text = example_text(1, rows[0]) if rows else Text(_("no example to render"), style="dim")
            text = Text(_("as the run encodes it, "), style="dim") + text
        except ExamplesFailed as err:
            text = Text(_shorten(_("not rendered: {error}").format(error=err), PREVIEW_ERROR_CHARS), style="dim")
        except (OSError, ValueError) as err:  # the child could not start, or was stopped for a newer one
            text = Text(_("not rendered: {error}").format(error=err), style="dim")
        if not get_current_worker().is_cancelled:
            to_ui(self, self._show_preview, rendered=text)

    def _show_preview(self, records: Text | None = None, rendered: Text | None = None) -> None:
        self._records_preview = self._records_preview if records is None else records
        self._rendered = self._rendered if rendered is None else rendered
        self._show_static("#preview", self._records_preview + (Text("\n") + self._rendered if self._rendered.plain else Text()))

    def on_unmount(self) -> None:
        if self._render_job is not None:  # kill and reap the child off the UI thread: quitting never waits on it
            threading.Thread(target=self._render_job.stop, daemon=True, name="ftui-stop-render").start()

    def _show_static(self, selector: str, content: Text) -> None:
        """A worker's result, shown on the UI thread: the widget is looked up here, not in the
        worker (the DOM belongs to the UI thread), and a screen already closed shows nothing."""
        for widget in self.query(selector).results(Static):
            widget.update(content)

    def _set_dataset_problem(self, problem: str | None) -> None:
        self._dataset_problem = problem
        self.revalidate()

    def _set_fit_problem(self, read: tuple[str, str, str], problem: str | None) -> None:
        if self._fit_problem != (read, problem):
            self._fit_problem = (read, problem)
            self.revalidate()

    def _stage_fit_problem(self, values: dict[str, Any]) -> str | None:
        """The preview's stage-fit problem, while the form still names what the preview read."""
        if self._fit_problem is None:
            return None
        read, problem = self._fit_problem
        return problem if read == (values.get("dataset"), values.get("dataset_dir"), values.get("stage")) else None

    @work(thread=True, exclusive=True, group="plan")
    def plan_memory(self, cfg: "RunConfig") -> None:
        """The planner's verdict for the config as it stands (reads config.json, samples NVML)."""
        from ftui.plan.model_shape import UnknownModel
        from ftui.plan.verdict import plan

        gpu_bytes = None
        sampler = getattr(self.app, "sampler", None)
        if sampler and cfg.device != "cpu" and cfg.gpus is None:  # the app's own sampler; else plan() reads NVML (the picked GPUs)
            try:
                gpu_bytes = min((g.mem_total for g in sampler()[0]), default=None)
            except Exception:
                gpu_bytes = None
        try:
            verdict = plan(cfg, gpu_bytes)
            split, result = verdict.short(_("process") if cfg.device == "cpu" else "GPU")
            text = Text()
            text.append(_("memory") + " ", style="bold")
            text.append(split)
            if result:
                text.append("\n" + result, style="green" if verdict.fits else "bold red")
        except (UnknownModel, ValueError) as err:
            text = Text(_("memory: no estimate ({error})").format(error=err), style="dim")
        to_ui(self, self._show_static, "#plan-verdict", text)

    def _gpus_changed(self, value: str, always: bool = False) -> None:
        """GPUs picked (or unpicked): count and check those once the value reads as a list
        (not while "1," is being typed); ``always``: else those the environment leaves."""
        from ftui.machine.gpu_picks import GPU_LIST, gpus_as_text  # not ftui.config.schema: its model is built in a worker

        picked = gpus_as_text(value)
        valid = picked is None or GPU_LIST.fullmatch(picked) is not None
        if valid or always:
            self.detect_hardware(picked if valid else None)

    @work(thread=True, exclusive=True, group="hardware")
    def detect_hardware(self, picked: str | None = None) -> None:
        """NVML: the GPUs a run would use (``picked``: the form's gpus, else those
        CUDA_VISIBLE_DEVICES leaves), whether they do bf16, and the machine's list to pick from."""
        from ftui.machine.gpu import bf16_unsupported_reason, gpu_count, machine_gpus, visibility_note

        n, reason, listed = gpu_count(picked), bf16_unsupported_reason(None, picked), machine_gpus()
        note = visibility_note() if picked is None else _("gpus {picked}: the run's CUDA_VISIBLE_DEVICES ({n} GPU(s))").format(
            picked=picked, n=n)
        if not get_current_worker().is_cancelled:  # a newer pick was made meanwhile
            to_ui(self, self._apply_hardware, n, reason, note, listed)

    def _apply_hardware(self, n: int, bf16_reason: str | None, visibility: str | None = None,
                        listed: list[tuple[str, str]] | None = None) -> None:
        if self._recomposing:  # the widgets are being rebuilt; recompose detects again
            return
        help_ = self.query_one("#precision-help", Static)
        notes = [visibility] if visibility else []
        nproc = self.query_one("#f-nproc_per_node", Input)
        if n and nproc.value == self._nproc_filled:  # processes per node follow the GPUs until the user sets them
            self._nproc_filled = nproc.value = str(n)
            if n > 1 and self.query_one("#f-engine", Select).value == "single":
                self.query_one("#f-engine", Select).value = "ddp"
        bf16, pure = self.query_one("#p-bf16", RadioButton), self.query_one("#p-pure_bf16", RadioButton)
        bf16.disabled = pure.disabled = bool(bf16_reason)
        if bf16_reason:
            if bf16.value or pure.value:
                self.query_one("#p-fp16", RadioButton).value = True
            notes.append(_("bf16 unavailable: {reason}").format(reason=bf16_reason))
        if n == 0:
            notes.append(_("no GPU seen by NVML: training runs on the CPU"))
        help_.update(Text("\n".join(notes), style="dim"))
        if listed:
            numbers = ",".join(key for key, _what in listed if not key.startswith("MIG-"))
            self.query_one("#f-gpus", Input).placeholder = _("all: {gpus}").format(gpus=numbers)
            self._machine_gpus = Text("\n" + _("GPUs: {gpus}").format(gpus=" · ".join(f"{key} {what}" for key, what in listed)),
                                      style="dim")
        self.revalidate()

    # --- actions
    def on_screen_resume(self) -> None:
        if self._ready:
            self.request_validation()

    def action_demo(self) -> None:
        self.read_demo()

    @work(thread=True, exclusive=True, group="demo")
    def read_demo(self) -> None:
        """The demo preset, validated off the UI thread (its checks stat the shipped files)."""
        from ftui.config.load import demo_config

        to_ui(self, self._fill_demo, demo_config().to_dict(False))

    def _fill_demo(self, demo: dict[str, Any]) -> None:
        self.extra = {}
        self._loaded_keys = set()
        self.query_one("#kept-keys", Static).update("")
        demo = demo | {"output_dir": self._defaults()["output_dir"]}
        if not self._ready:  # pressed during the first moment: apply once the form is complete
            self._initial = demo
            return
        self.fill(config_to_form(demo))
        self._demo_model = str(demo.get("model_name_or_path"))  # its random weights and run name go with it
        self.notify(_("demo preset loaded: F5 starts it"))

    def _model_changed_after_demo(self, model: str) -> None:
        """After F2 (the demo), a model typed in its place must not keep the demo's random
        weights (model_init: random) and its run name silently: they are reset, and said."""
        if self._demo_model is None or model.strip() == self._demo_model:
            return
        self._demo_model = None
        reset = {}
        if self.values().get("model_init") == "random":
            reset["model_init"] = "pretrained"
        if self.values().get("run_name") == "demo":
            reset["run_name"] = None
        if reset:
            self.fill(reset)
            self.notify(_("the model changed: the demo's {keys} were reset (model_init pretrained: the model's own weights; "
                          "run name derived from the model)").format(keys=", ".join(reset)))

    def action_load(self) -> None:
        def chosen(path: str | None) -> None:
            if path:
                self.load_yaml(path)

        self.app.push_screen(AskPath(_("Load a RunConfig YAML (LLaMA-Factory's keys work):"), "config.yaml"), chosen)

    @work(thread=True, group="io")
    def load_yaml(self, path: str) -> None:
        try:
            data = load_yaml(Path(path).expanduser().read_text(encoding="utf-8"))  # bounded: an alias bomb is refused
            if not isinstance(data, dict):
                raise ValueError(_("the file does not hold a mapping of key: value"))
        except (OSError, ValueError, yaml.YAMLError) as err:
            error = yaml_reason(err) if isinstance(err, yaml.YAMLError) else err
            self.app.call_from_thread(self.notify, _("cannot load {path}: {error}").format(path=path, error=error), severity="error",
                                      markup=False)
            return
        to_ui(self, self._apply_loaded, path, data)

    def _apply_loaded(self, path: str, data: dict[str, Any]) -> None:
        self.yaml_path = path  # F6 offers `ftui train` on it while the form still matches it
        self._demo_model = None
        if not self._ready:
            self._initial = data  # filled over the defaults once the form is complete
            return
        self._keep_loaded(data, _("loaded {path}").format(path=path))
        self.fill(config_to_form(self._defaults() | data))
        self._gpus_changed(self.query_one("#f-gpus", Input).value, always=True)
        self.detect_model(str(data.get("model_name_or_path", "")))
        self.preview_dataset(str(data.get("dataset", "")), str(data.get("dataset_dir", "data")), str(data.get("stage") or "sft"))

    def _keep_loaded(self, data: dict[str, Any], what: str | None = None) -> None:
        """A loaded YAML's keys: those ftui does not support are kept (saved back) and listed
        in full in a notification; those it sets are not overwritten by the model family."""
        # Every key the form has no field for is kept as loaded (RunConfig fields such as use_dora
        # too, so they reach the run and its validation); only those ftui has no field for are listed.
        # A stage's own keys (pref_beta, ...) are kept too: a field shows and overrides them while
        # its stage is chosen, and another stage chosen in the form does not lose them.
        self.extra = {k: v for k, v in data.items() if (k not in FIELDS or FIELDS[k].stages) and k not in FORM_DERIVED}
        if neat_packing_of_sft(data):
            del self.extra["neat_packing"]  # shown (and saved) as packing: on
        self._loaded_keys = set(data)
        if "nproc_per_node" in data:  # the YAML's number is the user's: it no longer follows the GPUs
            self._nproc_filled = None
        warning = self._show_kept_keys()
        if what or warning:
            self.notify("\n".join(filter(None, [what, warning])), severity="warning" if warning else "information",
                        timeout=30 if warning else 5, markup=False)

    def _show_kept_keys(self) -> str | None:
        """Lists the loaded keys ftui does not support under Output (wrapped, it stays after the
        notification); returns that warning."""
        from ftui.config.schema import RunConfig
        from ftui.config.problems import unsupported_warning

        warning = unsupported_warning({k: v for k, v in self.extra.items() if k not in RunConfig.model_fields})
        self.query_one("#kept-keys", Static).update(Text(warning or "", style="yellow"))
        return warning

    def action_save(self) -> None:
        def chosen(path: str | None) -> None:
            if path:
                self.revalidate(then=lambda: self.save_yaml(path, self.current_config_dict()))

        self.app.push_screen(AskPath(_("Save the form as YAML to:"), "ftui_config.yaml"), chosen)

    @work(thread=True, group="io")
    def save_yaml(self, path: str, data: dict[str, Any]) -> None:
        from ftui.config.schema import RunConfig

        try:
            cfg = RunConfig.model_validate(data) if not self.problems else None
            text = cfg.to_yaml() if cfg is not None else yaml.safe_dump(data, sort_keys=False)
            write_text(Path(path).expanduser(), text)  # a typed path: no link there is followed
        except (OSError, ValueError) as err:
            self.app.call_from_thread(self.notify, _("cannot save {path}: {error}").format(path=path, error=err), severity="error",
                                      markup=False)
            return
        saved = _("saved {path}").format(path=path) if not self.problems else _("saved {path} (it still has problems to fix)").format(path=path)
        to_ui(self, setattr, self, "yaml_path", path)
        self.app.call_from_thread(self.notify, saved, markup=False)

    def action_command(self) -> None:
        self.revalidate(then=self._command_validated)

    def _command_validated(self) -> None:
        if self.config is None:
            self.notify(_("fix the form first: the command depends on it"), severity="warning")
            return
        self.show_command(self.config, self.yaml_path)

    @work(thread=True, group="io")
    def show_command(self, cfg: "RunConfig", yaml_path: str | None) -> None:
        """`ftui train FILE` when FILE (last saved or loaded) holds what the form shows, else
        how to get there; the launch command beneath, for reference (it reads the file)."""
        from ftui.config.problems import ConfigError
        from ftui.config.load import load_config

        saved = False
        if yaml_path is not None:
            try:
                saved = load_config(Path(yaml_path).expanduser())[0].to_dict() == cfg.to_dict()
            except (ConfigError, ValueError):
                saved = False
        self.app.call_from_thread(self.app.push_screen, ShowText(_("Run this form from a shell"), command_text(cfg, yaml_path, saved)))

    def action_start(self) -> None:
        self.revalidate(then=self._start_validated)  # the latest keystrokes and dataset_info.json, checked

    def _start_validated(self) -> None:
        if self.config is None:
            self.notify(_("the form has problems: fix the fields marked in red"), severity="error")
            return
        if self.config.resume_from_checkpoint:  # the run it names goes on, as ftui train CONFIG.yaml does (ftui.ops)
            self.notify(_("resume_from_checkpoint continues the run it names (clear the key here to start a new run instead)"),
                        markup=False)
            self.app.resume_from_config(self.config)
            return
        self.query_one("#start", Button).disabled = True
        self.start_run(self.config)

    def action_runs(self) -> None:
        self.app.action_show_runs()

    @work(thread=True, exclusive=True, group="start")
    def start_run(self, cfg: "RunConfig") -> None:
        """The run's directory and job, made by the operation ``ftui train`` uses (ftui.ops.start)."""
        from ftui.ops.errors import OpError
        from ftui.ops.start import start

        try:
            run_dir = start(cfg).run_dir
        except OpError as err:
            reason = err.__cause__ if isinstance(err.__cause__, OSError) else err.message
            self.app.call_from_thread(self.notify, _("cannot start: {error}").format(error=reason), severity="error", markup=False)
            to_ui(self, self.revalidate)
            return
        self.app.call_from_thread(self.app.open_dashboard, run_dir)
        to_ui(self, self.revalidate)

    @on(Button.Pressed)
    def _button(self, event: Button.Pressed) -> None:
        actions = {"start": self.action_start, "demo": self.action_demo, "load": self.action_load,
                   "save": self.action_save, "command": self.action_command}
        if event.button.id in actions:
            actions[event.button.id]()


PREVIEW_ERROR_CHARS = 600
PREVIEW_RECORDS = 32  # records the first-example render encodes (pt packs several documents into a block)


def _apart_if_not_found(problem: "FieldProblem", data: dict[str, Any]) -> "FieldProblem":
    """A dataset name found neither in the registry nor as a file is said by the preview in its
    own place, as the form always did (a 100 KB paste is shortened there): Start stays off, and
    the problem is listed under the form, not under the field, which keeps the registry's
    and the records' problems."""
    from ftui.config.problems import FieldProblem
    from ftui.data.registry import dataset_path_problem

    if problem.field not in ("dataset", "eval_dataset") or not isinstance(problem.value, str):
        return problem
    where = (str(data.get("dataset_dir") or "data"), data.get("stage") if isinstance(data.get("stage"), str) else None)
    if dataset_path_problem(problem.value, *where) is None and dataset_path_problem(problem.value, *where, unresolved=True) == problem.message:
        return FieldProblem(_("{key} (not found)").format(key=problem.field), problem.value, problem.message)
    return problem


def _shorten(text: str, n: int) -> str:
    """Like _clip, but keeps the line breaks (a record error spans lines)."""
    return text if len(text) <= n else text[:n] + "… " + _("({n} characters)").format(n=f"{len(text):,}")


def answer_parts(answer: str, stage: str) -> list[str]:
    """A record's answers as the preview lists them: a preference pair's chosen and rejected
    answer on lines of their own (preference_records.comparison_preview), else the answer."""
    described = find_stage(stage)
    if described is not None and described.data == PAIRS and "\nrejected: " in answer:
        chosen, rejected = answer.split("\nrejected: ", 1)
        return [chosen, "rejected: " + rejected]  # the column names: not translated
    return [answer] if answer else []


def _clip(text: str, n: int) -> str:
    """A record's text on one line of at most ``n`` characters: its control characters shown
    as escapes (a ``\\r`` or ``\\x1b`` in a dataset is not obeyed), its whitespace as spaces."""
    text = " ".join(visible(text).split())
    return text if len(text) <= n else text[: n - 1] + "…"


def command_text(cfg: "RunConfig", yaml_path: str | None, saved: bool) -> str:
    """What F6 shows: a command the user can copy and run as it is, then the launch command
    `ftui train` runs (with the run directory it will create)."""
    import shlex

    from ftui.jobs.launch import launch_command

    where = shlex.quote(str(Path(yaml_path).expanduser().absolute())) if yaml_path is not None else ""
    if saved and yaml_path is not None:
        head = f"ftui train {where}"
    elif yaml_path is not None:
        head = _("The form differs from {path}: save the form first (F4), then run").format(path=yaml_path) + f"\n  ftui train {where}"
    else:
        head = _("save the form first (F4), e.g. to ftui_config.yaml, then run") + "\n  ftui train ftui_config.yaml"
    name = cfg.run_name or f"{Path(cfg.model_name_or_path).name}-{cfg.method}"
    run_dir = Path(cfg.output_dir) / f"{name}-<timestamp>"
    reference = _("For reference, what it launches (the run directory is created at start):")
    return f"{head}\n\n{reference}\n{shlex.join(launch_command(cfg, run_dir))}"


def records_preview(dataset: str, dataset_dir: str, stage: str = "sft") -> tuple[Text, str | None]:
    """The Data group's preview: the first records of the first two datasets as read (or why
    they cannot be), and why the data does not fit the stage (None when it does). Reads files:
    call it from a worker. The Evaluate & Predict screen shows the same."""
    from ftui.data.dataset_files import HubDataset, read_records
    from ftui.data.records import DataFormatError
    from ftui.data.registry import resolve_datasets
    from ftui.data.stage_formats import check_format, record_preview

    text = Text()
    fit_problem = None
    try:
        specs = resolve_datasets(dataset, dataset_dir) if dataset.strip() else []
        for spec in specs[:2]:
            try:
                records = read_records(spec, limit=3)
            except HubDataset:
                text.append(_("{name}: hub dataset, loaded when the run starts").format(name=visible(spec.name, one_line=True)) + "\n",
                            style="dim")
                continue
            if not records:
                raise DataFormatError(_("dataset {name} has no records").format(name=repr(spec.name)))
            try:
                kind = check_format(spec, records[0], stage)
            except DataFormatError as err:  # the dataset does not fit the stage: the field's problem too
                fit_problem = str(err)
                raise
            text.append(visible(f"{spec.name}: {kind}", one_line=True) + "\n", style="bold")
            for i, r in enumerate(records):
                prompt, answer = record_preview(r, spec, i, stage)
                text.append(f"  {i + 1}. ", style="dim")
                text.append(_clip(prompt, 60 if answer else 120))
                for k, part in enumerate(answer_parts(answer, stage)):
                    text.append(" → " if k == 0 else "\n     ", style="dim")
                    text.append(_clip(part, 60))
                text.append("\n")
    except (DataFormatError, OSError, ValueError) as err:
        text = Text(_shorten(visible(err), PREVIEW_ERROR_CHARS), style="red")  # a pasted 100 KB name is in the message
    return text, fit_problem


__all__ = ["LaunchScreen", "form_to_config", "config_to_form"]

