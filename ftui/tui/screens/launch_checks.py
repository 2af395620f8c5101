"""The launch form's validation (a mixin of LaunchScreen): every change rebuilds the config
mapping and a worker runs the preflight ``ftui train`` runs (ftui.config.preflight); the newest
verdict is shown, each problem under its field, Start enabled only when there is none."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable

from rich.text import Text
from textual import work
from textual.widgets import Button, Label, Static

from ftui.i18n import _, current_language
from ftui.presets.choices import engine_description
from ftui.tui.ui_thread import to_ui

from ftui.tui.screens.launch_fields import FIELDS, PROBLEM_FIELD, shown_for
from ftui.tui.screens.launch_preview import _apart_if_not_found
if TYPE_CHECKING:
    from ftui.config.problems import FieldProblem
    from ftui.config.schema import RunConfig



class LaunchChecks:
    """Validation of the launch form: revalidate, the worker, showing the verdict."""

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
            if f.only_for or f.stages or f.vision or f.launchers:
                # the rendezvous: only for several nodes started by hand (Slurm's nodes meet by themselves)
                visible = shown_for(f, values, self._vision_model) and (multi or key != "rdzv_endpoint")
                row = self.query_one(f"#row-{key}")
                if row.display != visible:
                    row.display = visible
        self._describe_launcher_fields()
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

        ignored = kept_without_effect({k: v for k, v in self.extra.items() if k not in RunConfig.model_fields},
                                      values.get("stage"))
        if ignored:  # the full list is under Output and in the notification shown at load
            status += " · " + _("{n} unsupported key(s) kept, no effect").format(n=len(ignored))
        self.query_one("#status-line", Static).update(Text(status, style="red" if problems else "green"))
        then, self._after_validation = self._after_validation, None
        if then is not None:
            then()

    def _describe_launcher_fields(self) -> None:
        """The launcher's and Slurm's fields get RunConfig's descriptions as tooltips (once:
        the schema is loaded by now, which the first frame must not wait for; again after a
        language switch)."""
        row = self.query_one("#row-launcher")
        if row.tooltip is not None and getattr(self, "_launcher_described", None) == current_language():
            return
        from ftui.config.schema import RunConfig

        for key, f in FIELDS.items():
            description = RunConfig.model_fields[key].description if key in RunConfig.model_fields else None
            if (f.launchers or key == "launcher") and description:
                self.query_one(f"#row-{key}").tooltip = _(description)
        self._launcher_described = current_language()

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
