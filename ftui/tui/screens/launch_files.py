"""The launch form's files (a mixin of LaunchScreen): the demo (F2), a YAML loaded (F3) or
saved (F4) with the keys ftui keeps but does not support, the command that trains it (F6)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml
from rich.text import Text
from textual import work
from textual.widgets import Input, Static

from ftui.safety.bounded_input import load_yaml, yaml_reason
from ftui.safety.files import write_text
from ftui.i18n import _
from ftui.tui.screens.modals import AskPath, ShowText
from ftui.tui.ui_thread import to_ui

from ftui.tui.screens.launch_fields import FIELDS, FORM_DERIVED, config_to_form, neat_packing_of_sft
from ftui.tui.screens.launch_preview import command_text
if TYPE_CHECKING:
    from ftui.config.schema import RunConfig



class LaunchFiles:
    """Demo, load, save and command of the launch form; file reads and writes in workers."""

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

        warning = unsupported_warning({k: v for k, v in self.extra.items() if k not in RunConfig.model_fields},
                                      self.values().get("stage"))
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
