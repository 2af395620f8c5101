"""What the launch form shows beside its fields (a mixin of LaunchScreen), each read in a
worker: the model's family, the dataset's first records, the first example as the stage
encodes it, the memory plan."""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Any

from rich.text import Text
from textual import work
from textual.widgets import Input, Select, Static
from textual.worker import get_current_worker

from ftui.i18n import _
from ftui.presets.families import detect_family
from ftui.presets.templates import TEMPLATES
from ftui.tui.ui_thread import to_ui

from ftui.tui.screens.launch_media import MediaPreview, media_preview
from ftui.tui.screens.launch_preview import PREVIEW_ERROR_CHARS, PREVIEW_RECORDS, _shorten, records_preview
if TYPE_CHECKING:
    from ftui.config.schema import RunConfig



class LaunchHints:
    """The family, dataset preview, rendered example and memory plan of the launch form."""

    @work(thread=True, exclusive=True, group="family")
    def detect_model(self, name: str) -> None:
        fam = detect_family(name.strip()) if name.strip() else None
        to_ui(self, self._show_family, name, fam)

    def _show_family(self, name: str, fam) -> None:
        if self._recomposing:  # the widgets are being rebuilt; recompose detects again
            return
        vision = bool(fam is not None and fam.vision)
        if vision != self._vision_model:  # its image fields show or hide with the next validation
            self._vision_model = vision
            self.request_validation()
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
               cfg.dataset_dir, cfg.cutoff_len, cfg.packing, cfg.image_max_pixels, cfg.image_min_pixels)
        if key != self._render_key:
            self._render_key = key
            self.preview_media(cfg)
            if getattr(self.app, "render_examples", True):
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

    @work(thread=True, exclusive=True, group="media")
    def preview_media(self, cfg: "RunConfig") -> None:
        """The first records' images, videos and audios listed (sizes, durations, tokens) and the
        first image shown: file headers (PyAV's for videos and audios) and one decode, no child
        process, off the UI thread (ftui.tui.screens.launch_media)."""
        lines, picture = media_preview(cfg)
        if not get_current_worker().is_cancelled:
            to_ui(self, self._show_media, lines, picture)

    def _show_media(self, lines: Text, picture: Any) -> None:
        for widget in self.query("#media-preview").results(MediaPreview):
            widget.show(lines, picture)

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
