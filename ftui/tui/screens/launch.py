"""The launch screen: a form grouped as Model, Data, Method, Engine, Precision, Training,
Output, validated as it is edited with the RunConfig's own rules.

Every change rebuilds the config mapping from the widgets and a worker runs the preflight
``ftui train`` runs (launch_checks.py); the newest result is shown, each problem under its
field, and Start stays disabled while there is any (pressed, it waits for the newest values'
result). File reads (model family, dataset preview, YAML load/save: launch_hints.py,
launch_files.py) and process control (Start, through ftui.ops) run in thread workers too. The
fields and their conversions are launch_fields.py; what is rendered from a dataset,
launch_preview.py. Keys from a loaded YAML that ftui does not support are kept and saved back.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable

from rich.text import Text
from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.screen import Screen
from textual.widgets import Button, Input, Label, RadioButton, RadioSet, Select, Static, Switch
from textual.worker import get_current_worker

from ftui.i18n import N_, _
from ftui.tui.footer import FittingFooter
from ftui.tui.ui_thread import to_ui

from ftui.tui.screens.launch_checks import LaunchChecks
from ftui.tui.screens.launch_media import MediaPreview
from ftui.tui.screens.launch_fields import F, FIELDS, FIRST_FRAME_GROUPS, FORM_DEFAULTS, GROUPS, NOTES, config_to_form, form_to_config, option_labels, stage_default_updates
from ftui.tui.screens.launch_files import LaunchFiles
from ftui.tui.screens.launch_hints import LaunchHints

if TYPE_CHECKING:
    from ftui.config.problems import FieldProblem
    from ftui.config.schema import RunConfig


class LaunchScreen(LaunchChecks, LaunchHints, LaunchFiles, Screen):
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
        self._vision_model = False  # the model is a vision-language model (the family worker says): its image fields show
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
                    if group == "Data":
                        yield MediaPreview(id="media-preview")
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
        return {**self.extra, **form_to_config(self.values(), self._vision_model)}

    # --- validation
    @property
    def validated(self) -> bool:
        """Whether what the form shows (its problems, ``config``) is the newest validation's."""
        return self._ready and not self._validation_pending and self._shown_seq == self._validation_seq > 0

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

    # Message handlers stay on the Screen itself: Textual registers @on handlers of a Screen's own
    # class body (a plain mixin's would be ignored).
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
            if wid == "f-stage":  # a shared option still at another stage's default takes this one's
                self.fill(stage_default_updates(self.values(), str(event.control.value)), validate=False)
            self._stale_dataset_verdict()
            self.preview_dataset(self.query_one("#f-dataset", Input).value, self.query_one("#f-dataset_dir", Input).value,
                                 self.query_one("#f-stage", Select).value)

    @on(Button.Pressed)
    def _button(self, event: Button.Pressed) -> None:
        actions = {"start": self.action_start, "demo": self.action_demo, "load": self.action_load,
                   "save": self.action_save, "command": self.action_command}
        if event.button.id in actions:
            actions[event.button.id]()




__all__ = ["LaunchScreen"]
