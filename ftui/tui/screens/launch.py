"""The launch screen: a form grouped as Model, Data, Method, Engine, Precision, Training,
Output, validated as it is edited with the RunConfig's own rules.

Every change rebuilds the config mapping from the widgets and runs ``validate_config``;
each problem is shown under its field and Start stays disabled while there is any. File
reads (model family, dataset preview, YAML load/save) and process control (Start) run in
thread workers. Keys from a loaded YAML that ftui does not support are kept and saved back.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from rich.text import Text
from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.screen import Screen
from textual.widgets import Button, Footer, Input, Label, RadioButton, RadioSet, Select, Static, Switch

from ftui.presets.config import (
    ENGINE_DESCRIPTIONS, ENGINES, SCHEDULERS, ConfigError, FieldProblem, RunConfig, config_defaults,
    demo_config, load_config, unsupported_warning, validate_config,
)
from ftui.presets.families import detect_family
from ftui.presets.templates import TEMPLATES
from ftui.tui.screens.modals import AskPath, ShowText

METHODS = ("full", "lora", "qlora", "freeze")
PRECISIONS = ("bf16", "fp16", "fp32")


@dataclass(frozen=True)
class F:
    key: str
    label: str
    kind: str = "text"  # text | bool | select
    options: tuple = ()
    optional: bool = False  # empty text means "not set"
    only_for: tuple[str, ...] = ()  # methods this field belongs to
    placeholder: str = ""


GROUPS: list[tuple[str, list[F]]] = [
    ("Model", [
        F("model_name_or_path", "model (path or hub name)", placeholder="Qwen/Qwen2.5-0.5B-Instruct or /models/llama"),
        F("model_init", "weights", "select", (("pretrained", "pretrained"), ("random (from config)", "random"))),
        F("template", "chat template", "select", (("the tokenizer's own", ""),) + tuple((t, t) for t in TEMPLATES)),
        F("trust_remote_code", "trust remote code", "bool"),
    ]),
    ("Data", [
        F("dataset", "dataset (names or files)", placeholder="alpaca_en_demo or data/my.jsonl"),
        F("dataset_dir", "dataset_info.json folder"),
        F("cutoff_len", "cutoff length"),
        F("packing", "packing", "bool"),
        F("max_samples", "max samples", optional=True, placeholder="all"),
        F("val_size", "validation share"),
    ]),
    ("Method", [
        F("method", "method", "select", tuple((m, m) for m in METHODS)),
        F("lora_rank", "LoRA rank", only_for=("lora", "qlora")),
        F("lora_alpha", "LoRA alpha", optional=True, only_for=("lora", "qlora"), placeholder="2 x rank"),
        F("lora_dropout", "LoRA dropout", only_for=("lora", "qlora")),
        F("lora_target", "LoRA targets", only_for=("lora", "qlora")),
        F("freeze_trainable_layers", "trainable last layers", only_for=("freeze",)),
        F("gradient_checkpointing", "gradient checkpointing", "bool"),
    ]),
    ("Engine", [
        F("engine", "engine", "select", tuple((e, e) for e in ENGINES)),
        F("nproc_per_node", "processes per node"),
        F("nnodes", "nodes"),
        F("node_rank", "this node's rank"),
        F("rdzv_endpoint", "rendezvous host:port", optional=True, placeholder="only for several nodes"),
    ]),
    ("Precision", [F("precision", "precision", "radio", PRECISIONS)]),
    ("Training", [
        F("per_device_train_batch_size", "micro batch per device"),
        F("gradient_accumulation_steps", "gradient accumulation"),
        F("learning_rate", "learning rate"),
        F("num_train_epochs", "epochs"),
        F("max_steps", "max steps (-1: epochs)"),
        F("lr_scheduler_type", "scheduler", "select", tuple((s, s) for s in SCHEDULERS)),
        F("warmup_ratio", "warmup ratio"),
        F("weight_decay", "weight decay"),
        F("max_grad_norm", "clip grad norm (0: off)"),
        F("logging_steps", "log every N steps"),
        F("save_steps", "checkpoint every N steps"),
        F("seed", "seed"),
    ]),
    ("Output", [
        F("run_name", "run name", optional=True, placeholder="derived from the model"),
        F("output_dir", "runs root"),
    ]),
]
FIELDS = {f.key: f for _, fields in GROUPS for f in fields}
# Which form field shows a RunConfig field's problem.
PROBLEM_FIELD = {"bf16": "precision", "fp16": "precision", "finetuning_type": "method", "quantization_bit": "method"}


def config_to_form(cfg: dict[str, Any]) -> dict[str, Any]:
    """RunConfig keys -> form values (method and precision are one choice each in the form)."""
    values = {k: cfg[k] for k in FIELDS if k in cfg}
    ft = cfg.get("finetuning_type", "lora")
    values["method"] = "qlora" if ft == "lora" and cfg.get("quantization_bit") else ft
    values["precision"] = "bf16" if cfg.get("bf16") else "fp16" if cfg.get("fp16") else "fp32"
    return values


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
        if f.only_for and values.get("method") not in f.only_for:
            continue
        data[key] = value
    method = values.get("method", "lora")
    data["finetuning_type"] = "lora" if method == "qlora" else method
    if method == "qlora":
        data["quantization_bit"] = 4
    precision = values.get("precision", "fp32")
    data["bf16"], data["fp16"] = precision == "bf16", precision == "fp16"
    return data


class LaunchScreen(Screen):
    BINDINGS = [
        Binding("f5", "start", "Start"),
        Binding("f2", "demo", "Demo"),
        Binding("f3", "load", "Load YAML"),
        Binding("f4", "save", "Save YAML"),
        Binding("f6", "command", "Command"),
        Binding("ctrl+r", "runs", "Runs"),
    ]

    def __init__(self, initial: dict[str, Any] | None = None, runs_root: str | None = None):
        super().__init__()
        self.runs_root = runs_root
        self.extra: dict[str, Any] = {}
        self.problems: list[FieldProblem] = []
        self.config: RunConfig | None = None
        self._initial = initial
        self._loading = False
        self._family_filled: dict[str, str] = {}

    def compose(self) -> ComposeResult:
        with VerticalScroll(id="form"):
            for group, fields in GROUPS:
                with Vertical(classes="group", id=f"group-{group.lower()}") as box:
                    box.border_title = group
                    for f in fields:
                        yield from self._field(f)
                    if group == "Model":
                        yield Static("", id="family", classes="note")
                    if group == "Data":
                        yield Static("", id="preview", classes="note")
                    if group == "Engine":
                        yield Static("", id="engine-help", classes="note")
                    if group == "Precision":
                        yield Static("", id="precision-help", classes="note")
            yield Static("", id="form-errors", classes="error")
        with Horizontal(id="launch-bar"):
            yield Button("Start", id="start", variant="success", disabled=True, compact=True)
            yield Button("Demo", id="demo", compact=True)
            yield Button("Load", id="load", compact=True)
            yield Button("Save", id="save", compact=True)
            yield Button("Command", id="command", compact=True)
            yield Static("", id="status-line")
        yield Footer()

    def _field(self, f: F):
        with Vertical(classes="field", id=f"row-{f.key}"):
            with Horizontal(classes="field-line"):
                yield Label(f.label, classes="field-label")
                if f.kind == "bool":
                    yield Switch(id=f"f-{f.key}")
                elif f.kind == "select":
                    yield Select(list(f.options), id=f"f-{f.key}", allow_blank=False, compact=True)
                elif f.kind == "radio":
                    with RadioSet(id=f"f-{f.key}", compact=True):
                        for i, opt in enumerate(f.options):
                            yield RadioButton(opt, id=f"p-{opt}", value=i == len(f.options) - 1)
                else:
                    yield Input(id=f"f-{f.key}", placeholder=f.placeholder, compact=True)
            yield Label("", id=f"e-{f.key}", classes="field-error")

    def on_mount(self) -> None:
        self.fill(config_to_form(self._defaults() | {"model_name_or_path": "", "dataset": ""}))
        if self._initial:
            self.fill(config_to_form(self._initial))
        self.detect_hardware()
        self.revalidate()

    def _defaults(self) -> dict[str, Any]:
        return config_defaults() | ({"output_dir": str(self.runs_root)} if self.runs_root else {})

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

    def fill(self, values: dict[str, Any]) -> None:
        self._loading = True
        try:
            for key, value in values.items():
                f = FIELDS.get(key)
                if f is None:
                    continue
                w = self.query_one(f"#f-{key}")
                if f.kind == "radio":
                    self.query_one(f"#p-{value}", RadioButton).value = True
                elif f.kind == "bool":
                    w.value = bool(value)
                elif f.kind == "select":
                    options = {v for _, v in f.options}
                    w.value = value if value in options else ("" if key == "template" else w.value)
                else:
                    w.value = "" if value is None else str(value)
        finally:
            self._loading = False
        self.revalidate()

    def current_config_dict(self) -> dict[str, Any]:
        return {**self.extra, **form_to_config(self.values())}

    # --- validation
    def revalidate(self) -> None:
        values = self.values()
        cfg, problems = validate_config(self.current_config_dict())
        self.config, self.problems = cfg, problems
        by_field: dict[str, list[str]] = {}
        general = []
        for p in problems:
            target = PROBLEM_FIELD.get(p.field, p.field)
            if target in FIELDS:
                by_field.setdefault(target, []).append(f"{p.value!r}: {p.message}" if target != p.field else p.message)
            else:
                general.append(str(p))
        for key in FIELDS:
            label = self.query_one(f"#e-{key}", Label)
            msgs = by_field.get(key, [])
            label.update(Text("\n".join(msgs)))
            label.display = bool(msgs)
            self.query_one(f"#row-{key}").set_class(bool(msgs), "-invalid")
        method = values.get("method")
        for key, f in FIELDS.items():
            if f.only_for:
                self.query_one(f"#row-{key}").display = method in f.only_for
        multi = str(values.get("nnodes", "1")).strip() not in ("", "1")
        for key in ("node_rank", "rdzv_endpoint"):
            self.query_one(f"#row-{key}").display = multi
        self.query_one("#engine-help", Static).update(Text(ENGINE_DESCRIPTIONS.get(values.get("engine"), ""), style="dim"))
        errors = self.query_one("#form-errors", Static)
        errors.update(Text("\n".join(general)))
        errors.display = bool(general)
        start = self.query_one("#start", Button)
        start.disabled = cfg is None
        warning = unsupported_warning(sorted(self.extra))
        status = f"{len(problems)} problem(s) to fix" if problems else "ready"
        self.query_one("#status-line", Static).update(Text(status + (f" · {warning}" if warning else ""), style="red" if problems else "green"))

    @on(Input.Changed)
    @on(Select.Changed)
    @on(Switch.Changed)
    @on(RadioSet.Changed)
    def _changed(self, event) -> None:
        if self._loading:
            return
        self.revalidate()
        wid = getattr(event, "control", None) and event.control.id or ""
        if wid == "f-model_name_or_path":
            self.detect_model(event.control.value)
        elif wid in ("f-dataset", "f-dataset_dir"):
            self.preview_dataset(self.query_one("#f-dataset", Input).value, self.query_one("#f-dataset_dir", Input).value)

    # --- workers: file reads and NVML off the UI thread
    @work(thread=True, exclusive=True, group="family")
    def detect_model(self, name: str) -> None:
        fam = detect_family(name.strip()) if name.strip() else None
        self.app.call_from_thread(self._show_family, name, fam)

    def _show_family(self, name: str, fam) -> None:
        note = self.query_one("#family", Static)
        if fam is None:
            note.update(Text("family: unknown (the tokenizer's template and all linear layers are used)" if name.strip() else "", style="dim"))
            return
        note.update(Text(f"family: {fam.name} · template {fam.template} · LoRA targets {','.join(fam.lora_targets)}", style="dim"))
        template, targets = self.query_one("#f-template", Select), self.query_one("#f-lora_target", Input)
        # Fill from the family table unless the user chose something else by hand.
        if template.value in ("", self._family_filled.get("template")) and fam.template in TEMPLATES:
            template.value = fam.template
            self._family_filled["template"] = fam.template
        joined = ",".join(fam.lora_targets)
        if targets.value in ("all", "", self._family_filled.get("lora_target")):
            targets.value = joined
            self._family_filled["lora_target"] = joined

    @work(thread=True, exclusive=True, group="preview")
    def preview_dataset(self, dataset: str, dataset_dir: str) -> None:
        from ftui.runner.records import DataFormatError, HubDataset, apply_detected_format, read_records, resolve_datasets, to_messages

        text = Text()
        try:
            specs = resolve_datasets(dataset, dataset_dir) if dataset.strip() else []
            for spec in specs[:2]:
                try:
                    records = read_records(spec, limit=3)
                except HubDataset:
                    text.append(f"{spec.name}: hub dataset, loaded when the run starts\n", style="dim")
                    continue
                if not records:
                    raise DataFormatError(f"dataset {spec.name!r} has no records")
                apply_detected_format(spec, records[0])
                text.append(f"{spec.name}: {spec.formatting} format\n", style="bold")
                for i, r in enumerate(records):
                    messages, _tools = to_messages(r, spec, i)
                    user = next((m["content"] for m in messages if m["role"] == "user"), "")
                    answer = next((m["content"] for m in messages if m["role"] == "assistant"), "")
                    text.append(f"  {i + 1}. ", style="dim")
                    text.append(_clip(user, 60))
                    text.append(" → ", style="dim")
                    text.append(_clip(answer, 60) + "\n")
        except (DataFormatError, OSError, ValueError) as err:
            text = Text(str(err), style="red")
        self.app.call_from_thread(self.query_one("#preview", Static).update, text)

    @work(thread=True, group="hardware")
    def detect_hardware(self) -> None:
        from ftui.gpu import bf16_unsupported_reason, gpu_count

        n, reason = gpu_count(), bf16_unsupported_reason()
        self.app.call_from_thread(self._apply_hardware, n, reason)

    def _apply_hardware(self, n: int, bf16_reason: str | None) -> None:
        help_ = self.query_one("#precision-help", Static)
        notes = []
        if n and self.query_one("#f-nproc_per_node", Input).value in ("", "1") and not self._initial:
            self.query_one("#f-nproc_per_node", Input).value = str(n)
            if n > 1:
                self.query_one("#f-engine", Select).value = "ddp"
        if bf16_reason:
            bf16 = self.query_one("#p-bf16", RadioButton)
            bf16.disabled = True
            if bf16.value:
                self.query_one("#p-fp16", RadioButton).value = True
            notes.append(f"bf16 unavailable: {bf16_reason}")
        if n == 0:
            notes.append("no GPU seen by NVML: training runs on the CPU")
        help_.update(Text("\n".join(notes), style="dim"))
        self.revalidate()

    # --- actions
    def action_demo(self) -> None:
        self.extra = {}
        self.fill(config_to_form(demo_config().to_dict(False) | {"output_dir": self._defaults()["output_dir"]}))
        self.notify("demo preset loaded: F5 starts it")

    def action_load(self) -> None:
        def chosen(path: str | None) -> None:
            if path:
                self.load_yaml(path)

        self.app.push_screen(AskPath("Load a RunConfig YAML (LLaMA-Factory's keys work):", "config.yaml"), chosen)

    @work(thread=True, group="io")
    def load_yaml(self, path: str) -> None:
        try:
            data = yaml.safe_load(Path(path).expanduser().read_text(encoding="utf-8"))
            if not isinstance(data, dict):
                raise ValueError("the file does not hold a mapping of key: value")
        except (OSError, ValueError, yaml.YAMLError) as err:
            self.app.call_from_thread(self.notify, f"cannot load {path}: {err}", severity="error", markup=False)
            return
        self.app.call_from_thread(self._apply_loaded, path, data)

    def _apply_loaded(self, path: str, data: dict[str, Any]) -> None:
        known = set(RunConfig.model_fields)
        self.extra = {k: v for k, v in data.items() if k not in known}
        self.fill(config_to_form(self._defaults() | data))
        self.detect_model(str(data.get("model_name_or_path", "")))
        self.preview_dataset(str(data.get("dataset", "")), str(data.get("dataset_dir", "data")))
        warning = unsupported_warning(sorted(self.extra))
        self.notify(f"loaded {path}" + (f"\n{warning}" if warning else ""), severity="warning" if warning else "information", markup=False)

    def action_save(self) -> None:
        def chosen(path: str | None) -> None:
            if path:
                self.save_yaml(path, self.current_config_dict())

        self.app.push_screen(AskPath("Save the form as YAML to:", "ftui_config.yaml"), chosen)

    @work(thread=True, group="io")
    def save_yaml(self, path: str, data: dict[str, Any]) -> None:
        try:
            cfg = RunConfig.model_validate(data) if not self.problems else None
            text = cfg.to_yaml() if cfg is not None else yaml.safe_dump(data, sort_keys=False)
            Path(path).expanduser().write_text(text, encoding="utf-8")
        except (OSError, ValueError) as err:
            self.app.call_from_thread(self.notify, f"cannot save {path}: {err}", severity="error", markup=False)
            return
        note = "" if not self.problems else " (it still has problems to fix)"
        self.app.call_from_thread(self.notify, f"saved {path}{note}", markup=False)

    def action_command(self) -> None:
        from ftui.runner.launch import torchrun_command
        import shlex

        if self.config is None:
            self.notify("fix the form first: the command depends on it", severity="warning")
            return
        name = self.config.run_name or f"{Path(self.config.model_name_or_path).name}-{self.config.method}"
        run_dir = Path(self.config.output_dir) / f"{name}-<timestamp>"
        self.app.push_screen(ShowText("The exact launch command (the run directory is created at Start):",
                                      shlex.join(torchrun_command(self.config, run_dir))))

    def action_start(self) -> None:
        if self.config is None:
            self.notify("the form has problems: fix the fields marked in red", severity="error")
            return
        self.query_one("#start", Button).disabled = True
        self.start_run(self.config)

    def action_runs(self) -> None:
        self.app.action_show_runs()

    @work(thread=True, exclusive=True, group="start")
    def start_run(self, cfg: RunConfig) -> None:
        from ftui.runner.launch import prepare_run, start_run

        try:
            run_dir = prepare_run(cfg)
            start_run(run_dir, cfg)
        except OSError as err:
            self.app.call_from_thread(self.notify, f"cannot start: {err}", severity="error", markup=False)
            self.app.call_from_thread(self.revalidate)
            return
        self.app.call_from_thread(self.app.open_dashboard, run_dir)
        self.app.call_from_thread(self.revalidate)

    @on(Button.Pressed)
    def _button(self, event: Button.Pressed) -> None:
        actions = {"start": self.action_start, "demo": self.action_demo, "load": self.action_load,
                   "save": self.action_save, "command": self.action_command}
        if event.button.id in actions:
            actions[event.button.id]()


def _clip(text: str, n: int) -> str:
    text = " ".join(text.split())
    return text if len(text) <= n else text[: n - 1] + "…"


__all__ = ["LaunchScreen", "ConfigError", "load_config", "form_to_config", "config_to_form"]
